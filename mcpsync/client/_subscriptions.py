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
A change on the wire can itself cause the restart (opening a listen on a dead modern server
restarts it): then the thread making the change re-opens once its own change is done, as
:meth:`Subscriptions.reopen` explains.

``subscribe()`` returns once the server acknowledged; a URI (or list kind) missing from the
acknowledgement raises ``CapabilityNotSupported``. Callbacks run on the dispatcher thread, in
notification order.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from mcpsync._threads import held_here
from mcpsync.client._callbacks import load_module
from mcpsync.errors import ClosedError, MCPError
from mcpsync.protocol import META_SUBSCRIPTION_ID

if TYPE_CHECKING:
    from mcpsync.client._subscribing import _Listen

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
        """Unsubscribe. The handle leaves its table however this ends: a Ctrl-C while
        waiting for another thread's change would otherwise leave it there, marked closed,
        its callback still firing and no second ``close()`` to take it out. Nothing is sent
        for it then; the next change or restart re-opens without it."""
        if not self.closed:
            try:
                self.closed = True
                self._owner.remove(self)
            except BaseException:
                self._owner._drop(self)   # the table lock only: never waits on a change
                raise

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        what = (f"uri={self.uri!r}" if self.uri is not None
                else f"task_id={self.task_id!r}" if self.task_id is not None
                else f"kind={self.kind!r}")
        return f"<Subscription {what}{' closed' if self.closed else ''}>"


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
        # Serialises subscribe/unsubscribe/listen changes. Re-entrant only so that reopen()
        # can ask held_here() whether its thread holds it: see there. An RLock's ``with``
        # runs in C, so a Ctrl-C cannot land between taking it and the block that lets it go
        # (a Python-level lock class could be left held forever by one).
        self._wire = threading.RLock()
        self._reopen_due = False             # a restart happened; re-open before releasing _wire
        self._by_uri: dict[str, list[Subscription]] = {}
        self._by_kind: dict[str, list[Subscription]] = {}
        self._by_task: dict[str, list[Subscription]] = {}
        self._listen: _Listen | None = None  # the current (acknowledged) listen
        self._listens: list[_Listen] = []    # every listen not yet finished
        # Acknowledgements that came before their listen learnt its request id, by that id.
        self._early_acks: dict[tuple[str, Any], dict[str, Any]] = {}
        self._closed = False

    def rename(self, name: str) -> None:
        """The server's display name changed (it named itself in the handshake)."""
        self._name = name

    # -- public operations (called by Client) --------------------------------------------
    # What opening, changing and watching a listen takes is in _subscribing, which the first
    # subscription loads: most clients never subscribe, and their import skips it.

    def subscribe(self, uri: str, callback: Callable[[str], Any]) -> Subscription:
        load_module("mcpsync.client._subscribing")
        from mcpsync.client._subscribing import subscribe

        return subscribe(self, uri, callback)

    def on_list_changed(self, kind: str, callback: Callable[[str], Any]) -> Subscription:
        load_module("mcpsync.client._subscribing")
        from mcpsync.client._subscribing import on_list_changed

        return on_list_changed(self, kind, callback)

    def watch_task(self, task_id: str, callback: Callable[[dict[str, Any]], Any]
                   ) -> Subscription:
        load_module("mcpsync.client._subscribing")
        from mcpsync.client._subscribing import watch_task

        return watch_task(self, task_id, callback)

    def remove(self, handle: Subscription) -> None:
        """Called by ``Subscription.close()``: unsubscribe when it was the last one."""
        with self._wire:
            try:
                self._unsubscribe(handle)
            except Exception:
                self._reopen_now()
                raise
            self._reopen_now()

    def _unsubscribe(self, handle: Subscription) -> None:
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
        handles stay valid either way; a failure is logged, not raised (nobody is waiting).

        A change made under ``_wire`` can restart the server: opening a listen goes through
        the client's ``_live()``, which restarts a dead modern server and calls this (an HTTP
        era re-detection under a legacy ``resources/subscribe`` does the same), on the thread
        that holds ``_wire``. Then this only marks the work due: that thread finishes its
        change on the new session and re-opens at the end of its locked block (every such
        block ends with :meth:`_reopen_now`), so no other change comes between. Re-opening
        here, re-entering the lock, would open a listen that the outer change, which
        captured the listen it replaces before the restart, never retires. After a Ctrl-C
        the holder leaves at once; the re-opening stays due and the next change does it.

        With nothing subscribed there is nothing to re-open, and the wire side is not loaded
        for it. The old listen is left alone: this look is made without ``_wire``, and a
        remove() that just dropped the last handle is about to retire that listen, which it
        could not if it were forgotten here; a dead one is forgotten by its watcher, and a
        change re-opens whenever the listen it finds is done. A change that adds a handle
        after this look sends on the new session anyway."""
        with self._lock:
            if not (self._by_uri or self._by_kind or self._by_task):
                return
        if held_here(self._wire):
            self._mark_reopen()
            return
        with self._wire:
            self._mark_reopen()
            self._reopen_now()

    def _mark_reopen(self) -> None:
        """Forget the current listen, and end it: it is the dead session's, or (when another
        thread's change went to the new session before this restart got ``_wire``) a live
        one that re-opening replaces, which would otherwise stay open, unwatched."""
        with self._lock:
            current, self._listen = self._listen, None
            self._reopen_due = True
        self._retire(current)

    def _reopen_now(self) -> None:
        """Do the re-opening that :meth:`reopen` marked due (caller holds ``_wire``); again
        if that itself restarted the server (the restart budget ends such a loop).

        The flag is cleared before the work, so that a restart during it marks it anew, and
        set again if the work ends by anything but a logged failure (a Ctrl-C, say): the
        re-opening stays due, and the next change does it."""
        while True:
            due = False
            try:
                with self._lock:
                    due, self._reopen_due = self._reopen_due, False
                if not due or self._closed:
                    return
                if self._era() == "legacy":
                    self._resubscribe_legacy()
                    continue
                try:
                    self._sync_modern()
                except MCPError as exc:
                    _log.warning("server %r: re-opening subscriptions failed: %s",
                                 self._name, exc)
            except BaseException:
                if due:
                    self._reopen_due = True
                raise

    def _resubscribe_legacy(self) -> None:
        """``resources/subscribe`` for every subscribed URI (caller holds ``_wire``)."""
        load_module("mcpsync.client._subscribing")
        from mcpsync.client._subscribing import resubscribe_legacy

        resubscribe_legacy(self)

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
        load_module("mcpsync.client._subscribing")
        from mcpsync.client._subscribing import acknowledged

        acknowledged(self, params)

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

    def _sync_modern(self) -> dict[str, Any] | None:
        """Make the open listen match the union of handles; return its acknowledgement.

        Caller holds ``_wire``. The new listen is acknowledged before the old is cancelled.
        """
        load_module("mcpsync.client._subscribing")
        from mcpsync.client._subscribing import sync_modern

        return sync_modern(self)

    def _retire(self, listen: _Listen | None) -> None:
        if listen is not None:
            listen.superseded = True
            listen.future.cancel()

    def _forget(self, listen: _Listen) -> None:
        with self._lock:
            if listen in self._listens:
                self._listens.remove(listen)


def _id_key(value: Any) -> tuple[str, Any]:
    """Correlate ids as JSON-RPC does: 1 and "1" are different ids."""
    return ("str", value) if isinstance(value, str) else ("int", value)
