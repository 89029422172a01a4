"""Resource subscriptions and list-changed callbacks: one API over both eras.

``client.subscribe(uri, callback)``, ``client.on_list_changed(kind, callback)`` and
``client.watch_task(task_id, callback)`` return a :class:`Subscription` handle whose
``close()`` undoes it. Underneath:

- legacy: ``resources/subscribe`` / ``resources/unsubscribe``, reference-counted per URI (the
  first handle subscribes, the last one unsubscribes); list-changed needs no wire call.
- modern (2026-07-28): one long-lived ``subscriptions/listen`` request whose filter is the
  union of all handles. When the union changes a new listen is opened *first* and the old one
  cancelled only after the new one is acknowledged, so no notification falls in a gap. Each
  listen is watched by its own daemon thread ``mcpsync-listen-<name>``, which notices when the
  server ends it or the connection drops; after a restart the client re-opens it.
- task watches (2026-07-28 with the Tasks extension only): the task ids join the same union
  (``taskIds``), and that listen then declares the extension, as the server requires. Each
  ``notifications/tasks`` for a watched task goes to its callbacks as the status dict.

After an HTTP era re-detection the new session gets the same subscriptions: a listen if it is
modern, ``resources/subscribe`` per URI if it is legacy (:meth:`Subscriptions.reopen`).

``subscribe()`` returns once the server acknowledged; a URI (or list kind) missing from the
acknowledgement raises ``CapabilityNotSupported``. Callbacks run on the dispatcher thread, in
notification order.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mcpsync._threads import new_thread
from mcpsync.client._handshake import TASKS_EXTENSION
from mcpsync.errors import (
    CapabilityNotSupported,
    ClosedError,
    MCPError,
    ProtocolError,
    UnsupportedInThisEra,
)
from mcpsync.protocol import META_SUBSCRIPTION_ID

__all__ = ["KINDS", "Subscription", "Subscriptions"]

_log = logging.getLogger("mcpsync.client")

KINDS = ("tools", "prompts", "resources")
_FILTER_KEY = {"tools": "toolsListChanged", "prompts": "promptsListChanged",
               "resources": "resourcesListChanged"}


class Subscription:
    """A live subscription; ``close()`` (idempotent) ends it. Usable as a context manager."""

    def __init__(self, owner: Subscriptions, *, uri: str | None, kind: str | None,
                 callback: Callable[[Any], Any], task_id: str | None = None) -> None:
        self._owner = owner
        self.uri = uri
        self.kind = kind
        self.task_id = task_id
        self.callback = callback
        self.closed = False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._owner.remove(self)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        what = (f"uri={self.uri!r}" if self.uri is not None
                else f"task_id={self.task_id!r}" if self.task_id is not None
                else f"kind={self.kind!r}")
        return f"<Subscription {what}{' closed' if self.closed else ''}>"


@dataclass
class _Listen:
    """One ``subscriptions/listen`` request in flight."""

    filter: dict[str, Any]
    future: Any = None            # the listen's RequestFuture (set right after submitting)
    request_key: tuple[str, Any] | None = None   # the listen's JSON-RPC id, as a correlation key
    acked: threading.Event = field(default_factory=threading.Event)
    ack: dict[str, Any] | None = None
    superseded: bool = False
    thread: threading.Thread | None = None


class Subscriptions:
    """The subscription table of one client.

    ``request(method, params)`` sends a request (modern ``_meta`` added by the client);
    ``submit_listen(params)`` starts a ``subscriptions/listen`` and returns its future.
    """

    def __init__(self, *, name: str, thread_name: str,
                 request: Callable[[str, dict[str, Any]], Any],
                 submit_listen: Callable[[dict[str, Any]], Any],
                 era: Callable[[], str], capabilities: Callable[[], Mapping[str, Any]],
                 ack_timeout: Callable[[], float]) -> None:
        self._name = name
        self._thread_name = thread_name
        self._request = request
        self._submit_listen = submit_listen
        self._era = era
        self._capabilities = capabilities
        self._ack_timeout = ack_timeout
        self._lock = threading.Lock()        # the handle tables; never held on the wire
        self._wire = threading.Lock()        # serialises subscribe/unsubscribe/listen changes
        self._by_uri: dict[str, list[Subscription]] = {}
        self._by_kind: dict[str, list[Subscription]] = {}
        self._by_task: dict[str, list[Subscription]] = {}
        self._listen: _Listen | None = None  # the current (acknowledged) listen
        self._listens: list[_Listen] = []    # every listen not yet finished
        self._closed = False

    def rename(self, name: str) -> None:
        """The server's display name changed (it named itself in the handshake)."""
        self._name = name

    # -- public operations (called by Client) --------------------------------------------

    def subscribe(self, uri: str, callback: Callable[[str], Any]) -> Subscription:
        if not isinstance(uri, str) or not uri:
            raise TypeError("subscribe() needs a resource URI string")
        if not callable(callback):
            raise TypeError("subscribe() needs a callable")
        resources = self._capabilities().get("resources")
        if not (isinstance(resources, Mapping) and resources.get("subscribe")):
            raise CapabilityNotSupported(
                f"subscribing to {uri!r} on server {self._name!r}: the server does not offer "
                "resource subscriptions (capabilities.resources.subscribe)",
                server=self._name, method="resources/subscribe")
        handle = Subscription(self, uri=uri, kind=None, callback=callback)
        with self._wire:
            with self._lock:
                first = not self._by_uri.get(uri)
                self._by_uri.setdefault(uri, []).append(handle)
            try:
                if self._era() == "legacy":
                    if first:
                        self._request("resources/subscribe", {"uri": uri})
                else:
                    ack = self._sync_modern()
                    granted = ack.get("resourceSubscriptions") if ack is not None else None
                    if not isinstance(granted, list) or uri not in granted:
                        raise CapabilityNotSupported(
                            f"subscribing to {uri!r} on server {self._name!r}: the server "
                            "did not acknowledge this URI", server=self._name,
                            method="subscriptions/listen")
            except BaseException:
                self._drop(handle)
                raise
        return handle

    def on_list_changed(self, kind: str, callback: Callable[[str], Any]) -> Subscription:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
        if not callable(callback):
            raise TypeError("on_list_changed() needs a callable")
        cap = self._capabilities().get(kind)
        if not (isinstance(cap, Mapping) and cap.get("listChanged")):
            raise CapabilityNotSupported(
                f"watching the {kind} list of server {self._name!r}: the server does not "
                f"announce changes (capabilities.{kind}.listChanged)", server=self._name,
                method=f"notifications/{kind}/list_changed")
        handle = Subscription(self, uri=None, kind=kind, callback=callback)
        with self._wire:
            with self._lock:
                self._by_kind.setdefault(kind, []).append(handle)
            if self._era() != "legacy":
                try:
                    ack = self._sync_modern()
                    if not (ack is not None and ack.get(_FILTER_KEY[kind])):
                        raise CapabilityNotSupported(
                            f"watching the {kind} list of server {self._name!r}: the server "
                            "did not acknowledge it", server=self._name,
                            method="subscriptions/listen")
                except BaseException:
                    self._drop(handle)
                    raise
        return handle

    def watch_task(self, task_id: str, callback: Callable[[dict[str, Any]], Any]
                   ) -> Subscription:
        if not isinstance(task_id, str) or not task_id:
            raise TypeError("watch_task() needs a task id string")
        if not callable(callback):
            raise TypeError("watch_task() needs a callable")
        doing = f"watching task {task_id!r} on server {self._name!r}"
        if self._era() == "legacy":
            raise UnsupportedInThisEra(
                f"{doing}: task status notifications exist only in protocol 2026-07-28; "
                "this server speaks an older one, where the client polls the task instead "
                "(call_tool and resume_task do that)", server=self._name,
                method="subscriptions/listen")
        extensions = self._capabilities().get("extensions")
        if not (isinstance(extensions, Mapping) and TASKS_EXTENSION in extensions):
            raise CapabilityNotSupported(
                f"{doing}: the server did not declare the {TASKS_EXTENSION!r} extension",
                server=self._name, method="subscriptions/listen")
        handle = Subscription(self, uri=None, kind=None, callback=callback, task_id=task_id)
        with self._wire:
            with self._lock:
                self._by_task.setdefault(task_id, []).append(handle)
            try:
                ack = self._sync_modern()
                granted = ack.get("taskIds") if ack is not None else None
                if not isinstance(granted, list) or task_id not in granted:
                    raise CapabilityNotSupported(
                        f"{doing}: the server did not acknowledge this task (it does not "
                        "know it, or it has expired); resume_task() says which",
                        server=self._name, method="subscriptions/listen")
            except BaseException:
                self._drop(handle)
                raise
        return handle

    def remove(self, handle: Subscription) -> None:
        """Called by ``Subscription.close()``: unsubscribe when it was the last one."""
        with self._wire:
            last = self._drop(handle)
            if self._closed:
                return
            try:
                if self._era() == "legacy":
                    if handle.uri is not None and last:
                        self._request("resources/unsubscribe", {"uri": handle.uri})
                else:
                    self._sync_modern()
            except (ClosedError, MCPError) as exc:
                _log.debug("server %r: unsubscribing failed: %s", self._name, exc)

    def reopen(self) -> None:
        """After a restart or an era re-detection: the old session's subscriptions died with
        it, so subscribe anew on the new one - the union in one listen (modern), or one
        ``resources/subscribe`` per URI (legacy; list-changed needs nothing there). The
        handles stay valid either way; a failure is logged, not raised (nobody is waiting)."""
        with self._wire:
            with self._lock:
                self._listen = None
            if self._era() == "legacy":
                self._resubscribe_legacy()
                return
            try:
                self._sync_modern()
            except MCPError as exc:
                _log.warning("server %r: re-opening subscriptions failed: %s", self._name, exc)

    def _resubscribe_legacy(self) -> None:
        """``resources/subscribe`` for every subscribed URI (caller holds ``_wire``)."""
        with self._lock:
            uris = sorted(self._by_uri)
        if not uris or self._closed:
            return
        resources = self._capabilities().get("resources")
        if not (isinstance(resources, Mapping) and resources.get("subscribe")):
            _log.warning("server %r: cannot subscribe to %s again: the server no longer offers "
                         "resource subscriptions", self._name, ", ".join(uris))
            return
        for uri in uris:
            try:
                self._request("resources/subscribe", {"uri": uri})
            except MCPError as exc:
                _log.warning("server %r: subscribing to %r again failed: %s", self._name, uri,
                             exc)

    @property
    def listening(self) -> bool:
        """True while a ``subscriptions/listen`` is open (closing it takes a round trip)."""
        with self._lock:
            return bool(self._listens)

    def close(self) -> None:
        """Stop every listen and join its thread (the session fails the requests on close)."""
        with self._lock:
            self._closed = True
            listens = list(self._listens)
            self._listen = None
        for listen in listens:
            listen.superseded = True
            if listen.future is not None:
                listen.future.cancel()
        for listen in listens:
            if listen.thread is not None and listen.thread is not threading.current_thread():
                listen.thread.join(1.0)

    # -- notifications (dispatcher thread) -----------------------------------------------

    def _current_source(self, params: Any) -> bool:
        """Drop notifications of a listen we are replacing, so nothing arrives twice."""
        meta = params.get("_meta") if isinstance(params, Mapping) else None
        sid = meta.get(META_SUBSCRIPTION_ID) if isinstance(meta, Mapping) else None
        current = self._listen
        if sid is None or current is None or current.request_key is None:
            return True
        return bool(_id_key(sid) == current.request_key)

    def deliver_updated(self, params: Any) -> None:
        uri = params.get("uri") if isinstance(params, Mapping) else None
        if not isinstance(uri, str) or not self._current_source(params):
            return
        with self._lock:
            handles = list(self._by_uri.get(uri, ()))
        for handle in handles:
            handle.callback(uri)

    def deliver_list_changed(self, kind: str, params: Any) -> None:
        if not self._current_source(params):
            return
        with self._lock:
            handles = list(self._by_kind.get(kind, ()))
        for handle in handles:
            handle.callback(kind)

    def deliver_task(self, params: Any) -> None:
        """``notifications/tasks``: the task as ``tasks/get`` shows it, to its watchers
        (each gets its own copy, without the notification's ``_meta``)."""
        task_id = params.get("taskId") if isinstance(params, Mapping) else None
        if not isinstance(task_id, str) or not self._current_source(params):
            return
        with self._lock:
            handles = list(self._by_task.get(task_id, ()))
        for handle in handles:
            handle.callback({k: v for k, v in params.items() if k != "_meta"})

    def acknowledged(self, params: Any) -> None:
        """``notifications/subscriptions/acknowledged``: complete the matching listen."""
        if not isinstance(params, Mapping):
            return
        meta = params.get("_meta")
        sid = meta.get(META_SUBSCRIPTION_ID) if isinstance(meta, Mapping) else None
        granted = params.get("notifications")
        with self._lock:
            waiting = [ls for ls in self._listens if not ls.acked.is_set()]
        target = None
        for listen in waiting:
            if sid is not None and listen.request_key is not None:
                if listen.request_key == _id_key(sid):
                    target = listen
            elif target is None:
                target = listen
        if target is None:
            _log.debug("server %r: acknowledgement for an unknown listen %r", self._name, sid)
            return
        target.ack = dict(granted) if isinstance(granted, Mapping) else {}
        target.acked.set()

    # -- internals -----------------------------------------------------------------------

    def _drop(self, handle: Subscription) -> bool:
        """Remove a handle; True when it was the last one for its URI (kind, task)."""
        handle.closed = True
        with self._lock:
            key = handle.uri or handle.task_id or handle.kind
            assert key is not None
            table = (self._by_uri if handle.uri is not None
                     else self._by_task if handle.task_id is not None else self._by_kind)
            items = table.get(key, [])
            if handle in items:
                items.remove(handle)
            if not items:
                table.pop(key, None)
                return True
            return False

    def _desired(self) -> dict[str, Any]:
        with self._lock:
            wanted: dict[str, Any] = {_FILTER_KEY[k]: True for k in sorted(self._by_kind)}
            if self._by_uri:
                wanted["resourceSubscriptions"] = sorted(self._by_uri)
            if self._by_task:
                wanted["taskIds"] = sorted(self._by_task)
        return wanted

    def _sync_modern(self) -> dict[str, Any] | None:
        """Make the open listen match the union of handles; return its acknowledgement.

        Caller holds ``_wire``. The new listen is acknowledged before the old is cancelled.
        """
        desired = self._desired()
        old = self._listen
        if old is not None and old.filter == desired and not old.future.done():
            return old.ack
        if not desired:
            self._retire(old)
            with self._lock:
                self._listen = None
            return None
        listen = _Listen(filter=desired)
        with self._lock:
            self._listens.append(listen)
        try:
            listen.future = self._submit_listen({"notifications": desired})
        except BaseException:
            self._forget(listen)
            raise
        listen.request_key = _id_key(listen.future.request_id)
        listen.thread = new_thread(self._thread_name, self._watch, listen)
        listen.thread.start()
        timeout = self._ack_timeout()
        acked = listen.acked.wait(None if math.isinf(timeout) else timeout)
        if not acked or listen.ack is None:
            listen.superseded = True
            listen.future.cancel()
            self._forget(listen)
            if listen.future.done() and not listen.future.cancelled():
                error = listen.future.exception()
                if error is not None:
                    raise error  # the listen failed outright (an error answer, a dead server)
            raise ProtocolError(
                f"server {self._name!r} did not acknowledge subscriptions/listen within "
                f"{timeout}s", server=self._name, method="subscriptions/listen")
        with self._lock:
            self._listen = listen
        self._retire(old)
        return listen.ack

    def _retire(self, listen: _Listen | None) -> None:
        if listen is not None:
            listen.superseded = True
            listen.future.cancel()

    def _forget(self, listen: _Listen) -> None:
        with self._lock:
            if listen in self._listens:
                self._listens.remove(listen)

    def _watch(self, listen: _Listen) -> None:
        """Wait for one listen to end; unless we replaced it, say so and drop it."""
        try:
            listen.future.result()
            outcome = "the server ended it"
        except BaseException as exc:  # any end, error or not, is an outcome to record
            outcome = f"{type(exc).__name__}: {exc}"
        listen.acked.set()  # never leave a subscriber waiting on a dead listen
        self._forget(listen)
        if not listen.superseded:
            with self._lock:
                if self._listen is listen:
                    self._listen = None
            _log.info("server %r: subscriptions/listen ended (%s)", self._name, outcome)


def _id_key(value: Any) -> tuple[str, Any]:
    """Correlate ids as JSON-RPC does: 1 and "1" are different ids."""
    return ("str", value) if isinstance(value, str) else ("int", value)
