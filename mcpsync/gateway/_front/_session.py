"""One legacy host session on the HTTP front: a gateway core of its own.

A host that opens a session with ``initialize`` gets its own upstream sessions: its own
gateway core, so its own stdio upstream processes and its own HTTP upstream sessions,
started by its ``initialize`` (when the front's ``max_upstream_processes`` leaves room for
its processes; otherwise ``initialize`` is refused with a readable error) and stopped when
the session is deleted or expires.

What the core sends the host goes where the host expects it: an answer on the POST that
asked; a progress notification on the stream of the request whose ``progressToken`` it
carries; a log or a server-to-client request on the stream of the one request in flight,
when there is exactly one (the upstream cannot say which request caused it otherwise);
everything else on the session's GET stream.

A session with a sealed id (replicas sharing a key file) also keeps the log level and the
subscriptions the host set in the replicas' session store (see ``_store``); a replica that
carries the session on sends its fresh upstreams the host's own requests again, through the
core's usual path (so several upstreams get them routed as the host's would be), and answers
the host nothing for them.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import queue
import threading
import time
from typing import TYPE_CHECKING, Any

from mcpsync._codes import INTERNAL_ERROR, INVALID_REQUEST
from mcpsync.gateway._aggregate.ids import value_key
from mcpsync.gateway._front._relay import Waiting, relay
from mcpsync.jsonrpc import (
    Batch,
    Message,
    ParseError,
    RequestId,
    error,
    notification,
    parse,
    request,
    serialize,
)
from mcpsync.server._context import _Call
from mcpsync.server._router import Send, request_key

if TYPE_CHECKING:
    from collections.abc import Callable

    from mcpsync.gateway._front._front import HttpFront
    from mcpsync.gateway._gateway import Gateway

__all__ = ["SessionRelay", "progress_token"]

_log = logging.getLogger("mcpsync.gateway")
#: How long a resumed session waits for each request it replays for itself.
_LEARN_TIMEOUT = 10.0


def progress_token(params: Any) -> Any:
    """The ``_meta.progressToken`` of request or progress params (``None``: none)."""
    if not isinstance(params, dict):
        return None
    if "progressToken" in params:
        return params["progressToken"]
    meta = params.get("_meta")
    return meta.get("progressToken") if isinstance(meta, dict) else None


class SessionRelay:
    """The router McpApp sees for one legacy session: it forwards to the session's core."""

    def __init__(self, front: HttpFront, send: Send,
                 send_batch: Callable[[list[Message]], None], *,
                 resumed: dict[str, Any] | None = None, sid: str | None = None) -> None:
        self._front = front
        #: The session's sealed id (``None``: a plain id, or not drawn yet).
        self.sid = sid
        self._level: str | None = None
        self._subscribed: dict[str, None] = {}   # the host's URIs, in order
        # What another gateway process needs to carry this session on (see _replicas):
        # the host's initialize params and the revision, or what such a process sealed.
        self._resumed = resumed
        self._init_params: dict[str, Any] = dict(resumed.get("init") or {}) if resumed else {}
        self._version = str(resumed.get("version", "")) if resumed else ""
        self._send = send
        self._send_batch = send_batch
        self._lock = threading.Lock()
        self._opening = threading.Lock()
        self._core: Gateway | None = None
        self._reserved = 0
        self._ended = False
        self._waiting: dict[tuple[str, int | str], Waiting] = {}
        self._tokens: dict[str, tuple[str, int | str]] = {}   # progress token -> request

    @property
    def core(self) -> Gateway | None:
        """The session's gateway core (``None`` before ``initialize`` and after the end)."""
        return self._core

    def sealable_state(self) -> dict[str, Any]:
        """The state a sealed session id carries: never an upstream's credentials."""
        core = self._core
        sessions = {} if core is None else {
            u.id: found for u in core.upstreams if (found := u.session()) is not None}
        state: dict[str, Any] = {"init": self._init_params, "version": self._version,
                                 "up": sessions}
        importlib.import_module("mcpsync.server.http")
        from mcpsync.server.http import current_access_token

        token = current_access_token()
        if token is not None:   # behind OAuth, the session stays its opener's on any replica
            state["who"] = [token.client_id, token.subject]
        return state

    # -- what McpApp calls --------------------------------------------------------------

    def track(self, message: Message, *, sink: Send | None = None,
              private: bool = False) -> _Call | None:
        if not message.is_request or message.id is None or message.method is None:
            return None
        call = _Call(message.id, message.method)
        call.sink = sink
        return call

    def handle(self, item: Message | Batch | ParseError, calls: list[_Call | None]) -> None:
        if isinstance(item, ParseError):
            return
        if isinstance(item, Batch):   # 2025-03-26: answered one element after the other
            replies: list[Message] = []

            def collect(message: Message, cancelled: threading.Event | None = None, /
                        ) -> None:
                if message.method is None:
                    replies.append(message)
                else:
                    self._send(message)

            for element, call in zip(item, calls, strict=False):
                # McpApp already delivered its responses and cancellations.
                if (isinstance(element, Message) and element.method != "notifications/cancelled"
                        and (call is not None or element.is_notification)):
                    self._one(element, call, collect)
            if replies:
                self._send_batch(replies)   # the batch's one reply
            return
        self._one(item, calls[0] if calls else None)

    def deliver_response(self, message: Message) -> None:
        core = self._core
        if core is not None:
            core.feed(serialize(message), self._front.caller(legacy=True))

    def cancel_notice(self, params: Any) -> bool:
        key = request_key(params.get("requestId")) if isinstance(params, dict) else None
        with self._lock:
            waiting = self._waiting.get(key) if key is not None else None
        if waiting is not None:
            waiting.cancel_sent = True
            waiting.call.cancel()
        core = self._core
        if core is not None:
            core.feed(serialize(notification("notifications/cancelled", params)),
                      self._front.caller(legacy=True))
        return waiting is not None

    def end_call(self, call: _Call) -> None:
        call.cancel()

    def cancel_all(self) -> None:
        """The session ended (DELETE, expiry, the app closing): stop its upstreams; unless
        the app is closing, the session's stored state goes too."""
        with self._lock:
            self._ended = True
            core, self._core = self._core, None
            waiting = list(self._waiting.values())
            reserved, self._reserved = self._reserved, 0
        for each in waiting:
            each.call.cancel()
            each.put(None)
        if core is not None:
            core.close()
        self._front.release(reserved)
        self._front.forget(self)
        store = self._front.store
        if store is not None and self.sid is not None and not self._front.closing:
            store.remove(self.sid)   # deleted or expired; a closing process keeps it

    # -- the host's side ----------------------------------------------------------------

    def _one(self, message: Message, call: _Call | None, send: Send | None = None) -> None:
        send = send or self._send
        caller = self._front.caller(legacy=True)
        if call is None:    # a notification: on to the upstreams
            core = self._core
            if core is not None:
                core.feed(serialize(message), caller)
            return
        if message.method == "initialize" and isinstance(message.params, dict):
            self._init_params = dict(message.params)
        if self._core is None and (message.method == "initialize"
                                   or self._resumed is not None):
            with self._opening:   # two first requests of a resumed session: one core
                refusal = self._open() if self._core is None else None
            if refusal is not None:
                call.finish(error(call.id, INVALID_REQUEST, refusal), send)
                return
        core = self._core
        if core is None:
            call.finish(error(call.id, INVALID_REQUEST, "this gateway session has ended; "
                              "start a new one with initialize"), send)
            return
        if message.method in _KEPT:   # after a resumed core got back what was kept
            self._keep(message.method, message.params)
        if caller.kind == "session":
            core.caller = caller   # for what the relay feeds itself (cancellations)
        waiting = Waiting(call)
        token = progress_token(message.params)
        with self._lock:
            self._waiting[call.id.key] = waiting
            if token is not None:
                self._tokens[value_key(token)] = call.id.key
        try:
            core.feed(serialize(message), caller)
            relay(waiting, send, self._cancelled, self._closed_answer(call))
        finally:
            with self._lock:
                self._waiting.pop(call.id.key, None)
                if token is not None:
                    self._tokens.pop(value_key(token), None)

    def _open(self) -> str | None:
        """Start the session's core; a readable refusal when the bound leaves no room."""
        need = self._front.processes_per_core
        refusal = self._front.reserve(need)
        if refusal is not None:
            return refusal
        try:
            core = self._front.make_core()
        except BaseException:
            self._front.release(need)
            raise
        with self._lock:
            ended = self._ended
            if not ended:
                self._core, self._reserved = core, need
        if ended:
            core.close()
            self._front.release(need)
            return "this gateway session has ended"
        resumed, self._resumed = self._resumed, None
        if resumed is not None:
            importlib.import_module("mcpsync.gateway._front._replicas")
            from mcpsync.gateway._front._replicas import resume_core

            up = resumed.get("up")
            resume_core(core, self._init_params, up if isinstance(up, dict) else {})
        core.serve_host(self._from_core)
        if resumed is not None:
            self._restore(core)
        return None

    def _keep(self, method: str, params: Any) -> None:
        """The host set its log level or (un)subscribed: the replicas' store says so."""
        value = params.get("level" if method == "logging/setLevel" else "uri") \
            if isinstance(params, dict) else None
        if not isinstance(value, str):
            return
        with self._lock:
            if method == "logging/setLevel":
                self._level = value
            elif method == "resources/subscribe":
                self._subscribed[value] = None
            else:
                self._subscribed.pop(value, None)
            state: dict[str, Any] = {"level": self._level, "subscribed": list(self._subscribed)}
        store = self._front.store
        if store is not None and self.sid is not None:
            store.save(self.sid, state)

    def _restore(self, core: Gateway) -> None:
        """A resumed session: the log level and subscriptions the host set on another
        replica, sent again to this core's upstreams (their answers go nowhere)."""
        store = self._front.store
        if store is None or self.sid is None:
            return
        state = store.load(self.sid)
        level = state.get("level")
        found = state.get("subscribed")
        uris = [u for u in found if isinstance(u, str)] if isinstance(found, list) else []
        with self._lock:
            self._level = level if isinstance(level, str) else None
            self._subscribed = dict.fromkeys(uris)
        if self._level is not None:
            self._ask_self(core, "mcpsync-gateway-restore-level", "logging/setLevel",
                           {"level": self._level})
        for n, uri in enumerate(uris):
            self._ask_self(core, f"mcpsync-gateway-restore-{n}", "resources/subscribe",
                           {"uri": uri})
        if self._level is not None or uris:
            _log.info("a resumed host session got its log level and %d subscription(s) back",
                      len(uris))

    def _ask_self(self, core: Gateway, rid: str, method: str, params: dict[str, Any]) -> None:
        """Send ``method`` through the core for the session itself and await its answer (at
        most ``_LEARN_TIMEOUT`` seconds); what comes back is not the host's."""
        call = _Call(RequestId(json.dumps(rid), rid), method)
        waiting = Waiting(call)
        with self._lock:
            self._waiting[call.id.key] = waiting
        try:
            core.feed(serialize(request(call.id, method, params)))
            deadline = time.monotonic() + _LEARN_TIMEOUT
            while (left := deadline - time.monotonic()) > 0:
                got = waiting.frames.get(timeout=left)
                if got is None or got.method is None:
                    break
        except queue.Empty:
            _log.warning("a resumed host session's %s was not answered in %g s",
                         method, _LEARN_TIMEOUT)
        finally:
            with self._lock:
                self._waiting.pop(call.id.key, None)

    def _cancelled(self, waiting: Waiting) -> None:
        if waiting.cancel_sent:
            return
        waiting.cancel_sent = True
        core = self._core
        if core is not None:
            params = {"requestId": waiting.call.id.value, "reason": "the host went away"}
            with contextlib.suppress(Exception):
                core.feed(serialize(notification("notifications/cancelled", params)))

    @staticmethod
    def _closed_answer(call: _Call) -> Callable[[], Message]:
        return lambda: error(call.id, INTERNAL_ERROR, "the gateway session ended while this "
                             "request was in flight")

    # -- the upstreams' side (their reader threads) -------------------------------------

    def _from_core(self, frame: bytes) -> None:
        try:
            item = parse(frame, allow_batch=True)
        except ParseError as exc:
            _log.warning("the gateway could not pass a frame to the HTTP host (dropped): %s",
                         exc)
            return
        if isinstance(item, Batch):
            self._send_batch([m for m in item if isinstance(m, Message)])
            return
        target = self._target(item)
        if target is not None:
            if item.method is None and target.call.method == "tools/list":
                self._front.note_tools(item.result)
            elif (item.method is None and target.call.method == "initialize"
                  and isinstance(item.result, dict)):
                self._version = str(item.result.get("protocolVersion", ""))
            target.put(item)
        elif item.method is not None:   # an answer nobody waits for any more is dropped
            self._send(item)

    def _target(self, message: Message) -> Waiting | None:
        with self._lock:
            if message.method is None:
                return self._waiting.get(message.id.key) if message.id is not None else None
            if message.method == "notifications/progress":
                token = progress_token(message.params)
                key = self._tokens.get(value_key(token)) if token is not None else None
                if key is not None:
                    return self._waiting.get(key)
            elif message.method in _CAUSED and len(self._waiting) == 1:
                return next(iter(self._waiting.values()))
            return None


#: What the host sets on its session after initialize, kept for the replicas.
_KEPT = frozenset({"logging/setLevel", "resources/subscribe", "resources/unsubscribe"})

#: What an upstream sends while handling a request: it goes on that request's stream when
#: there is no doubt which request that is.
_CAUSED = frozenset({"notifications/message", "sampling/createMessage", "elicitation/create",
                     "roots/list", "ping"})


