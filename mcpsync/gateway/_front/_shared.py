"""The 2026-07-28 hosts of the HTTP front: stateless requests over shared upstreams.

A 2026-07-28 POST stands alone (no ``initialize``, no session), so every such host is served
by one shared gateway core, its upstreams started by the first request. Two hosts may send
the same request id, or the same progress token, at the same moment; so each request goes
upstream under an id of the front's own (a fresh integer, also its progress token there)
and its answer and progress come back under the host's. What an upstream says on a
``subscriptions/listen`` is tagged with that listen's id, and so goes on its stream. A log
message goes to the one request in flight when that request asked for logs (the upstream
writes it before that request's answer, and no other request could have caused it). Any
other notification has no stream to go to in this era and is dropped; a server-to-client
request is answered with an error, since 2026-07-28 servers ask for input with
``input_required`` results instead.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mcpsync._codes import INTERNAL_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND
from mcpsync.gateway._aggregate.ids import with_progress_token
from mcpsync.gateway._front._relay import Waiting, relay
from mcpsync.gateway._front._session import progress_token
from mcpsync.jsonrpc import (
    Batch,
    Message,
    ParseError,
    RequestId,
    error,
    notification,
    parse,
    serialize,
)
from mcpsync.protocol import (
    META_LOG_LEVEL,
    META_SUBSCRIPTION_ID,
)
from mcpsync.server._context import _Call
from mcpsync.server._router import Send

if TYPE_CHECKING:
    from mcpsync.gateway._front._front import HttpFront
    from mcpsync.gateway._gateway import Gateway

__all__ = ["SharedRelay"]

_log = logging.getLogger("mcpsync.gateway")


class _Entry:
    """A request in flight upstream under the front's id: the host's id and token."""

    def __init__(self, waiting: Waiting, token: Any, has_token: bool, logs: bool) -> None:
        self.waiting = waiting
        self.token = token
        self.has_token = has_token
        self.logs = logs      # the request asked for log messages (_meta's log level)


class SharedRelay:
    """The router McpApp shares between every 2026-07-28 host: one core, remapped ids."""

    def __init__(self, front: HttpFront, send: Send,
                 send_batch: Callable[[list[Message]], None]) -> None:
        self._front = front
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._core: Gateway | None = None
        self._reserved = 0
        self._ended = False
        self._entries: dict[int, _Entry] = {}

    @property
    def core(self) -> Gateway | None:
        return self._core

    def track(self, message: Message, *, sink: Send | None = None,
              private: bool = False) -> _Call | None:
        if not message.is_request or message.id is None or message.method is None:
            return None
        call = _Call(message.id, message.method)
        call.sink = sink
        return call

    def handle(self, item: Message | Batch | ParseError, calls: list[_Call | None]) -> None:
        call = calls[0] if calls else None
        if not isinstance(item, Message) or call is None:
            return
        core, refusal = self._ensure(item)
        if core is None:
            call.finish(error(call.id, INVALID_REQUEST, refusal), _nowhere)
            return
        gid = next(self._ids)
        token = progress_token(item.params)
        has_token = token is not None
        params = with_progress_token(item.params, gid) if has_token else item.params
        out = dataclasses.replace(item, id=RequestId(str(gid), gid), params=params)
        waiting = Waiting(call)
        with self._lock:
            self._entries[gid] = _Entry(waiting, token, has_token, _asks_logs(item.params))
        try:
            core.feed(serialize(out), self._front.caller(legacy=False))
            relay(waiting, _nowhere, lambda w: self._cancelled(core, gid),
                  lambda: error(call.id, INTERNAL_ERROR, "the gateway closed while this "
                                "request was in flight"))
        finally:
            with self._lock:
                self._entries.pop(gid, None)

    def deliver_response(self, message: Message) -> None:
        """2026-07-28 hosts send no responses (McpApp refuses them before this)."""

    def cancel_notice(self, params: Any) -> bool:
        return False   # stateless hosts cancel by closing the request's stream

    def end_call(self, call: _Call) -> None:
        call.cancel()

    def cancel_all(self) -> None:
        with self._lock:
            self._ended = True
            core, self._core = self._core, None
            entries = list(self._entries.values())
            reserved, self._reserved = self._reserved, 0
        for entry in entries:
            entry.waiting.call.cancel()
            entry.waiting.put(None)
        if core is not None:
            core.close()
        self._front.release(reserved)

    # ------------------------------------------------------------------------------

    def _ensure(self, first: Message) -> tuple[Gateway | None, str]:
        with self._lock:
            if self._core is not None:
                return self._core, ""
            if self._ended:
                return None, "the gateway is shutting down"
            need = self._front.processes_per_core
            refusal = self._front.reserve(need)
            if refusal is not None:
                return None, refusal
            try:
                core = self._front.make_core()
            except BaseException:
                self._front.release(need)
                raise
            self._core, self._reserved = core, need
        core.serve_host(lambda frame: self._from_core(core, frame))
        return core, ""

    def _cancelled(self, core: Gateway, gid: int) -> None:
        params = {"requestId": gid, "reason": "the host went away"}
        core.feed(serialize(notification("notifications/cancelled", params)))

    def _from_core(self, core: Gateway, frame: bytes) -> None:
        try:
            item = parse(frame)
        except ParseError as exc:
            _log.warning("the gateway could not pass a frame to an HTTP host (dropped): %s",
                         exc)
            return
        assert isinstance(item, Message)
        if item.method is None:
            gid = item.id.value if item.id is not None else None
            with self._lock:
                entry = self._entries.get(gid) if isinstance(gid, int) else None
            if entry is not None:
                if entry.waiting.call.method == "tools/list":
                    self._front.note_tools(item.result)
                entry.waiting.put(dataclasses.replace(item, id=entry.waiting.call.id))
            return
        if item.id is not None:   # a server-to-client request: not in this era
            answer = error(item.id, METHOD_NOT_FOUND, "the gateway's 2026-07-28 hosts take "
                           "no server-to-client requests (ask with input_required instead)")
            core.feed(serialize(answer))
            return
        if item.method == "notifications/progress" and isinstance(item.params, dict):
            gid = item.params.get("progressToken")
            with self._lock:
                entry = self._entries.get(gid) if isinstance(gid, int) else None
            if entry is not None and entry.has_token:
                params = {**item.params, "progressToken": entry.token}
                entry.waiting.put(dataclasses.replace(item, params=params))
                return
        listen = _subscription(item.params)
        if listen is not None:   # said on a subscriptions/listen: tagged with its id
            with self._lock:
                entry = self._entries.get(listen)
            if entry is not None:
                assert isinstance(item.params, dict)
                meta = {**item.params["_meta"], META_SUBSCRIPTION_ID: entry.waiting.call.id.value}
                entry.waiting.put(dataclasses.replace(item, params={**item.params,
                                                                    "_meta": meta}))
                return
        if item.method == "notifications/message":
            with self._lock:
                only = list(self._entries.values()) if len(self._entries) == 1 else []
            if only and only[0].logs:
                only[0].waiting.put(item)
                return
        _log.debug("a %s notification for no 2026-07-28 request was dropped", item.method)


def _subscription(params: Any) -> int | None:
    """The front's id of the listen a notification is tagged with (``None``: untagged)."""
    meta = params.get("_meta") if isinstance(params, dict) else None
    value = meta.get(META_SUBSCRIPTION_ID) if isinstance(meta, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _asks_logs(params: Any) -> bool:
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and META_LOG_LEVEL in meta


def _nowhere(message: Message, cancelled: threading.Event | None = None, /) -> None:
    """Every frame of a shared request goes to its exchange's sink, never here."""
