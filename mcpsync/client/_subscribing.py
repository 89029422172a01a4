"""The wire side of :mod:`mcpsync.client._subscriptions`, loaded by the first subscription.

Every client holds a subscription table, but most never subscribe: ``import mcpsync.client``
neither compiles nor builds what opening, changing and watching a subscription takes. The
table's methods (``subscribe``, ``on_list_changed``, ``watch_task``, re-opening after a
restart, the listen's acknowledgement) import these functions when they run; each takes the
table as ``subs`` and does what the method did, under the same locks.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mcpsync._threads import new_thread
from mcpsync.client._handshake import TASKS_EXTENSION
from mcpsync.client._subscriptions import (
    _FILTER_KEY,
    KINDS,
    Subscription,
    Subscriptions,
    _id_key,
)
from mcpsync.errors import (
    CapabilityNotSupported,
    MCPError,
    ProtocolError,
    UnsupportedInThisEra,
)
from mcpsync.protocol import META_SUBSCRIPTION_ID
from mcpsync.session._base import MAIN_THREAD_SLICE

_log = logging.getLogger("mcpsync.client")

#: Acknowledgements kept for a listen whose request id is not known yet (see acknowledged):
#: its own, and a few late ones of listens given up; a server sending more is not believed.
_EARLY_ACKS = 16


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


def subscribe(subs: Subscriptions, uri: str, callback: Callable[[str], Any]) -> Subscription:
    if not isinstance(uri, str) or not uri:
        raise TypeError("subscribe() needs a resource URI string")
    if not callable(callback):
        raise TypeError("subscribe() needs a callable")
    resources = subs._capabilities().get("resources")
    if not (isinstance(resources, Mapping) and resources.get("subscribe")):
        raise CapabilityNotSupported(
            f"subscribing to {uri!r} on server {subs._name!r}: the server does not offer "
            "resource subscriptions (capabilities.resources.subscribe)",
            server=subs._name, method="resources/subscribe")
    handle = Subscription(subs, uri=uri, kind=None, callback=callback)

    def change(first: bool) -> None:
        if subs._era() == "legacy":
            if first:
                subs._request("resources/subscribe", {"uri": uri})
            return
        ack = sync_modern(subs)
        granted = ack.get("resourceSubscriptions") if ack is not None else None
        if not isinstance(granted, list) or uri not in granted:
            raise CapabilityNotSupported(
                f"subscribing to {uri!r} on server {subs._name!r}: the server did not "
                "acknowledge this URI", server=subs._name, method="subscriptions/listen")

    return _register(subs, handle, subs._by_uri, uri, change)


def on_list_changed(subs: Subscriptions, kind: str, callback: Callable[[str], Any]
                    ) -> Subscription:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if not callable(callback):
        raise TypeError("on_list_changed() needs a callable")
    cap = subs._capabilities().get(kind)
    if not (isinstance(cap, Mapping) and cap.get("listChanged")):
        raise CapabilityNotSupported(
            f"watching the {kind} list of server {subs._name!r}: the server does not "
            f"announce changes (capabilities.{kind}.listChanged)", server=subs._name,
            method=f"notifications/{kind}/list_changed")
    handle = Subscription(subs, uri=None, kind=kind, callback=callback)

    def change(first: bool) -> None:
        if subs._era() == "legacy":
            return   # legacy list changes need no wire call
        ack = sync_modern(subs)
        if not (ack is not None and ack.get(_FILTER_KEY[kind])):
            raise CapabilityNotSupported(
                f"watching the {kind} list of server {subs._name!r}: the server did not "
                "acknowledge it", server=subs._name, method="subscriptions/listen")

    return _register(subs, handle, subs._by_kind, kind, change)


def watch_task(subs: Subscriptions, task_id: str, callback: Callable[[dict[str, Any]], Any]
               ) -> Subscription:
    if not isinstance(task_id, str) or not task_id:
        raise TypeError("watch_task() needs a task id string")
    if not callable(callback):
        raise TypeError("watch_task() needs a callable")
    doing = f"watching task {task_id!r} on server {subs._name!r}"
    if subs._era() == "legacy":
        raise UnsupportedInThisEra(
            f"{doing}: task status notifications exist only in protocol 2026-07-28; "
            "this server speaks an older one, where the client polls the task instead "
            "(call_tool and resume_task do that)", server=subs._name,
            method="subscriptions/listen")
    extensions = subs._capabilities().get("extensions")
    if not (isinstance(extensions, Mapping) and TASKS_EXTENSION in extensions):
        raise CapabilityNotSupported(
            f"{doing}: the server did not declare the {TASKS_EXTENSION!r} extension",
            server=subs._name, method="subscriptions/listen")
    handle = Subscription(subs, uri=None, kind=None, callback=callback, task_id=task_id)

    def change(first: bool) -> None:
        ack = sync_modern(subs)
        granted = ack.get("taskIds") if ack is not None else None
        if not isinstance(granted, list) or task_id not in granted:
            raise CapabilityNotSupported(
                f"{doing}: the server did not acknowledge this task (it does not know it, "
                "or it has expired); resume_task() says which",
                server=subs._name, method="subscriptions/listen")

    return _register(subs, handle, subs._by_task, task_id, change)


def _register(subs: Subscriptions, handle: Subscription, table: dict[str, list[Subscription]],
              key: str, change: Callable[[bool], None]) -> Subscription:
    """Add ``handle`` to its table under ``_wire``, make the ``change`` on the wire (told
    whether it is the first handle for ``key``), then do the re-opening that may be due (see
    :meth:`Subscriptions.reopen`), and hand the handle over.

    Whatever raises on the way, a Ctrl-C included, the handle leaves the table again, as
    its ``close()`` would: the caller never receives it, so could never close it, while its
    callback would keep firing. A failed change re-opens before the error goes on (a
    restart under it may have left that due); after a Ctrl-C nothing more is sent, a
    re-opening that was due stays due, and the next change or restart re-opens with the
    handles left.
    Dropping takes only the table lock, never ``_wire`` (held here), so it cannot wait on
    anything; it is idempotent, and done again outside the ``with``, for a Ctrl-C that
    comes out of releasing ``_wire``."""
    try:
        with subs._wire:
            changed = False
            try:
                with subs._lock:
                    first = not table.get(key)
                    table.setdefault(key, []).append(handle)
                change(first)
                changed = True
                subs._reopen_now()
            except BaseException as exc:
                subs._drop(handle)   # before the re-opening, which must not include it
                if not changed and isinstance(exc, Exception):
                    subs._reopen_now()   # see Subscriptions.reopen
                raise
    except BaseException:
        # A Ctrl-C can also surface as the lock's release returns, after the inner handler.
        subs._drop(handle)
        raise
    return handle


def resubscribe_legacy(subs: Subscriptions) -> None:
    """``resources/subscribe`` for every subscribed URI (caller holds ``_wire``)."""
    with subs._lock:
        uris = sorted(subs._by_uri)
    if not uris or subs._closed:
        return
    resources = subs._capabilities().get("resources")
    if not (isinstance(resources, Mapping) and resources.get("subscribe")):
        _log.warning("server %r: cannot subscribe to %s again: the server no longer offers "
                     "resource subscriptions", subs._name, ", ".join(uris))
        return
    for uri in uris:
        try:
            subs._request("resources/subscribe", {"uri": uri})
        except MCPError as exc:
            _log.warning("server %r: subscribing to %r again failed: %s", subs._name, uri,
                         exc)


def acknowledged(subs: Subscriptions, params: Any) -> None:
    """``notifications/subscriptions/acknowledged``: complete the listen it names.

    The acknowledgement names its listen by the listen's request id (``_meta``
    ``subscriptionId``), and only that listen takes it: one that comes late, for a listen
    given up already (not acknowledged in time, or a Ctrl-C), must not complete the next
    listen, which asked for other things. A listen learns its id only once its request went
    out, and the server may answer before that; so an acknowledgement that names no known
    listen while one is still going out is kept for it (at most ``_EARLY_ACKS``), and that
    listen takes it, or nothing, as it learns its id (:func:`_take_early_ack`). An
    acknowledgement without an id (a server that omits it) can only go to the oldest
    listen waiting."""
    if not isinstance(params, Mapping):
        return
    meta = params.get("_meta")
    sid = meta.get(META_SUBSCRIPTION_ID) if isinstance(meta, Mapping) else None
    granted = params.get("notifications")
    ack = dict(granted) if isinstance(granted, Mapping) else {}
    with subs._lock:
        waiting = [ls for ls in subs._listens if not ls.acked.is_set()]
        if sid is None:
            target = waiting[0] if waiting else None
        else:
            key = _id_key(sid)
            target = next((ls for ls in waiting if ls.request_key == key), None)
            if (target is None and isinstance(sid, (str, int, float))   # hashable
                    and any(ls.request_key is None for ls in waiting)
                    and len(subs._early_acks) < _EARLY_ACKS):
                subs._early_acks[key] = ack
                return
        if target is not None:
            target.ack = ack
            target.acked.set()
            return
    _log.debug("server %r: acknowledgement for an unknown listen %r", subs._name, sid)


def _take_early_ack(subs: Subscriptions, listen: _Listen, request_id: Any) -> None:
    """The listen's request went out: note its id, and take an acknowledgement that came
    before. Every other one kept names a listen no longer waiting (only one listen goes out
    at a time, under ``_wire``), so they are dropped."""
    with subs._lock:
        listen.request_key = key = _id_key(request_id)
        early = subs._early_acks.pop(key, None)
        subs._early_acks.clear()
        if early is not None:
            listen.ack = early
            listen.acked.set()


def _desired(subs: Subscriptions) -> dict[str, Any]:
    with subs._lock:
        wanted: dict[str, Any] = {_FILTER_KEY[k]: True for k in sorted(subs._by_kind)}
        if subs._by_uri:
            wanted["resourceSubscriptions"] = sorted(subs._by_uri)
        if subs._by_task:
            wanted["taskIds"] = sorted(subs._by_task)
    return wanted


def _wait_for_ack(acked: threading.Event, timeout: float) -> bool:
    """Wait for a listen's acknowledgement; on the main thread in short slices, so that a
    Ctrl-C is noticed within one: a SIGINT that lands just before a blocking wait begins
    (the C-level handler has already run and only set a flag, so the wait is not cut
    short; the Python handler raises only when the wait returns) would otherwise be raised
    only when the whole wait ends."""
    if threading.current_thread() is not threading.main_thread():
        return acked.wait(None if math.isinf(timeout) else timeout)
    deadline = time.monotonic() + timeout
    while True:
        left = min(MAIN_THREAD_SLICE, deadline - time.monotonic())
        if left <= 0:
            return acked.is_set()
        if acked.wait(left):
            return True


def sync_modern(subs: Subscriptions) -> dict[str, Any] | None:
    """Make the open listen match the union of handles; return its acknowledgement.

    Caller holds ``_wire``. The new listen is acknowledged before the old is cancelled.

    A new listen that does not become the current one, for whatever reason (no
    acknowledgement in time, an error answer, a Ctrl-C while waiting for either), is given
    up at once: cancelled on the wire and forgotten. Left alone it would stay open on the
    server beside the current one, unknown to the changes that follow, with a watcher thread
    that nobody joins. The current listen is then untouched: it still matches the handles it
    was opened for, and the next change (or restart) compares the handles with it again.
    """
    _end_strays(subs)
    desired = _desired(subs)
    old = subs._listen
    if old is not None and old.filter == desired and not old.future.done():
        return old.ack
    if not desired:
        subs._retire(old)
        with subs._lock:
            subs._listen = None
        return None
    listen = _Listen(filter=desired)
    timeout = subs._ack_timeout()
    installed = False
    try:
        with subs._lock:
            subs._listens.append(listen)
        listen.future = subs._submit_listen({"notifications": desired})
        _take_early_ack(subs, listen, listen.future.request_id)
        listen.thread = new_thread(subs._thread_name, _watch, subs, listen)
        listen.thread.start()
        if _wait_for_ack(listen.acked, timeout) and listen.ack is not None:
            with subs._lock:
                subs._listen, installed = listen, True
    finally:
        # Also on a Ctrl-C: wherever it lands from here on, one of the two is ended.
        if installed:
            subs._retire(old)
        else:
            _give_up(subs, listen)
    if not installed:
        if listen.future.done() and not listen.future.cancelled():
            error = listen.future.exception()
            if error is not None:
                raise error  # the listen failed outright (an error answer, a dead server)
        raise ProtocolError(
            f"server {subs._name!r} did not acknowledge subscriptions/listen within "
            f"{timeout}s", server=subs._name, method="subscriptions/listen")
    return listen.ack


def _end_strays(subs: Subscriptions) -> None:
    """End every listen that is not the current one and is not ended yet (caller holds
    ``_wire``, so no other change has one under way).

    Ending the listen a change replaces, or giving up the new one, happens after the new
    one's wait, and a Ctrl-C can land between (on entering :meth:`Subscriptions._retire`,
    say): that listen then stays open on the server, unknown to every later change. Each
    change first ends such leftovers. One without a future only leaves the table (see
    :func:`_give_up` for what that leaves on the server). Cancelling one that was ended
    already sends nothing; one whose watcher never started also leaves the table here, as
    nothing else would take it out."""
    with subs._lock:
        strays = [ls for ls in subs._listens if ls is not subs._listen]
    for listen in strays:
        listen.superseded = True
        if listen.future is not None:
            listen.future.cancel()
        if listen.thread is None or not listen.thread.is_alive():
            subs._forget(listen)


def _give_up(subs: Subscriptions, listen: _Listen) -> None:
    """End a listen that never became the current one: its watcher, if it was started, sees
    the cancelled request and ends without a word (superseded). A listen without a future
    only leaves the table: its request never went out, or the submit was interrupted while
    writing it and the session cancelled it on the wire, or (an instant) the Ctrl-C came
    after the session handed the future over and before it reached here, and then nothing
    here knows the request: it stays open on the server until the client closes."""
    listen.superseded = True
    if listen.future is not None:
        listen.future.cancel()
    with subs._lock:
        subs._early_acks.clear()   # kept for this listen, if its request never went out
    subs._forget(listen)


def _watch(subs: Subscriptions, listen: _Listen) -> None:
    """Wait for one listen to end; unless we replaced it, say so and drop it."""
    try:
        listen.future.result()
        outcome = "the server ended it"
    except BaseException as exc:  # any end, error or not, is an outcome to record
        outcome = f"{type(exc).__name__}: {exc}"
    listen.acked.set()  # never leave a subscriber waiting on a dead listen
    subs._forget(listen)
    if not listen.superseded:
        with subs._lock:
            if subs._listen is listen:
                subs._listen = None
        _log.info("server %r: subscriptions/listen ended (%s)", subs._name, outcome)
