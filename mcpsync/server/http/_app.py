"""The MCP endpoint as a WSGI application: Streamable HTTP in both protocol eras.

``McpApp`` answers at one path (``/mcp`` by default). Which era a POST belongs to is read
from its body, as on every other transport: a request whose ``params._meta`` carries
``io.modelcontextprotocol/protocolVersion`` is 2026-07-28, stateless, and goes to one router
shared by every such client (tracked privately: two clients may use the same id). Anything
else belongs to a legacy session: ``initialize`` opens one (its own router, an
``Mcp-Session-Id`` drawn from ``secrets``), later requests name it, ``GET`` opens the
session's stream of server-initiated messages, ``DELETE`` ends it.

Each request is answered on the WSGI thread that received it, with no thread of ours: the
handler runs there, its frames go to the exchange's sink, and the reply is one JSON object
when the handler sent nothing but its response. At its first notification or request to the
client the reply turns into a server-sent-event stream (``start_response`` then, each event
through WSGI's ``write()``), whose last event is the response. ``subscriptions/listen`` keeps
its stream open (a ``: keep-alive`` comment every 15 s, so a client that left is noticed)
until the client goes; then the listen ends.

A handler that made its reply a stream and then goes quiet owns its thread, so the app's one
ticker thread (``_ticker``, started by the first stream or legacy session) writes those
comments for it, under the exchange's write lock, and ends legacy sessions idle for
``session_idle_timeout``.
"""

from __future__ import annotations

import contextvars
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from mcpsync._threads import join_all, new_thread
from mcpsync.jsonrpc import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    MISSING_CLIENT_CAPABILITY,
    UNSUPPORTED_PROTOCOL_VERSION,
    Batch,
    Message,
    ParseError,
    error,
    parse,
    serialize,
)
from mcpsync.protocol import LEGACY_VERSIONS, META_PROTOCOL_VERSION, MODERN_VERSIONS
from mcpsync.server._context import _Call
from mcpsync.server._router import Send
from mcpsync.server.http._channel import KEEP_ALIVE, Channel, event, priming, retry
from mcpsync.server.http._events import Event, EventStore, Lookup
from mcpsync.server.http._headers import (
    HostCheck,
    decode_header_value,
    expected_name,
    param_mismatch,
)
from mcpsync.server.http._ticker import Ticker, Watched

__all__ = ["McpApp"]



class AppDispatcher(Protocol):
    """What the app needs of the router behind it: the server's ``Dispatcher``, or
    anything answering the same calls (the gateway's HTTP front forwards to upstreams)."""

    def track(self, message: Message, *, sink: Send | None = None,
              private: bool = False) -> _Call | None: ...

    def handle(self, item: Message | Batch | ParseError, calls: list[_Call | None]) -> None: ...

    def deliver_response(self, message: Message) -> None: ...

    def cancel_notice(self, params: Any) -> bool: ...

    def end_call(self, call: _Call) -> None: ...

    def cancel_all(self) -> None: ...


DispatcherFactory = Callable[[Send, Callable[[list[Message]], None]], AppDispatcher]


class SessionIds(Protocol):
    """Who draws legacy session ids, and resumes sessions from ids drawn elsewhere."""

    def new_id(self, dispatcher: AppDispatcher) -> str:
        """The id of a session whose ``initialize`` its ``dispatcher`` just answered."""
        ...

    def resume(self, sid: str) -> DispatcherFactory | None:
        """The router factory of a session this process does not hold (``None``: 404)."""
        ...
#: The ``inputSchema`` of a tool by name (``None``: no such tool), for ``Mcp-Param-*`` checks.
ToolSchemas = Callable[[str], Any]
StartResponse = Callable[..., Callable[[bytes], None]]

_JSON = ("Content-Type", "application/json")
_SSE_HEADERS = [("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache"),
                ("X-Accel-Buffering", "no")]
#: 2026-07-28: the JSON-RPC errors a client must also see as an HTTP status.
_BAD_REQUEST_CODES = frozenset({INVALID_PARAMS, HEADER_MISMATCH, MISSING_CLIENT_CAPABILITY,
                                UNSUPPORTED_PROTOCOL_VERSION})
#: How many ended session ids an app remembers so that their sealed state is not resumed.
_ENDED_KEPT = 4096
_STATUS = {200: "200 OK", 202: "202 Accepted", 204: "204 No Content", 400: "400 Bad Request",
           403: "403 Forbidden", 404: "404 Not Found", 405: "405 Method Not Allowed",
           406: "406 Not Acceptable", 410: "410 Gone", 413: "413 Content Too Large",
           415: "415 Unsupported Media Type", 503: "503 Service Unavailable"}
_ALLOW = ("Allow", "GET, POST, DELETE")
#: The first revision with SSE polling (priming events, the server closing a connection).
_POLLING = "2025-11-25"


def _is_modern(message: Message) -> bool:
    params = message.params
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and META_PROTOCOL_VERSION in meta


def _drop(message: Message, cancelled: threading.Event | None = None, /) -> None:
    """The shared router's connection-wide stream: stateless HTTP has none."""


def _drop_batch(messages: list[Message]) -> None:
    """Batches are legacy (2025-03-26) only: the shared router never sends one."""


class McpApp:
    """A WSGI application serving one :class:`~mcpsync.server.Server` over Streamable HTTP.

    ``allowed_hosts`` are the host names (``"name"`` for any port, ``"name:port"`` for one)
    that ``Host`` and, when sent, ``Origin`` may name; by default loopback only, which is the
    defence against DNS rebinding for a server on this machine. A server behind a proxy on
    a public name lists that name. :meth:`close` ends every session and open stream.
    ``make_shared`` builds the router shared by 2026-07-28 requests when it is not the
    kind of router each legacy session gets (a gateway serves the two differently).
    ``session_ids`` draws session ids itself and may resume a session it finds sealed in
    an id this app never drew (several processes behind one address); by default ids are
    random and an unknown one is 404.
    """

    def __init__(self, make_dispatcher: DispatcherFactory, *, name: str = "mcp",
                 path: str = "/mcp", allowed_hosts: Iterable[str] | None = None,
                 keep_alive: float = 15.0, tool_schema: ToolSchemas | None = None,
                 tool_polls: Callable[[str], bool] | None = None, max_sessions: int = 256,
                 max_events: int = 1000, max_event_bytes: int = 8 * 1024 * 1024,
                 retry_ms: int = 1000, max_body_bytes: int = 32 * 1024 * 1024,
                 session_idle_timeout: float | None = 1800.0,
                 make_shared: DispatcherFactory | None = None,
                 session_ids: SessionIds | None = None) -> None:
        if not path.startswith("/"):
            raise ValueError(f"the MCP endpoint path must start with '/', got {path!r}")
        if keep_alive <= 0:
            raise ValueError(f"keep_alive is a number of seconds above 0, got {keep_alive!r}")
        if session_idle_timeout is not None and session_idle_timeout <= 0:
            raise ValueError("session_idle_timeout is a number of seconds above 0 (or None: "
                             f"sessions never expire), got {session_idle_timeout!r}")
        self.name = name
        self.path = path
        self._make = make_dispatcher
        self._make_shared = make_shared or make_dispatcher   # the 2026-07-28 router
        self._ids = session_ids
        self._hosts = HostCheck(allowed_hosts)
        self._keep_alive = keep_alive
        self._tool_schema = tool_schema
        self._tool_polls = tool_polls
        self._max_sessions = max_sessions
        self._max_events = max_events
        self._max_bytes = max_event_bytes
        self._retry_ms = retry_ms
        self._max_body = max_body_bytes
        EventStore(max_events, max_event_bytes)   # refuses bad bounds now, not at a session
        self._workers: set[threading.Thread] = set()   # tools/call apart from their requests
        self._lock = threading.Lock()
        self._shared: AppDispatcher | None = None
        self._sessions: dict[str, _Session] = {}
        # Ids of sessions ended here (DELETE, expiry) that ``session_ids`` could otherwise
        # resume from their sealed state: an ended session stays ended (404) in this process.
        self._ended: OrderedDict[str, None] = OrderedDict()
        self._live: set[_Exchange] = set()   # requests being answered, for close()
        self._closed = False
        self._idle = session_idle_timeout
        self._ticker: Ticker | None = None   # started by the first stream or session
        self._expiry = _Expiry(self)

    def __repr__(self) -> str:
        return f"<McpApp {self.name!r} {self.path!r}>"

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """End every legacy session and every open stream; later requests are answered 503.
        Safe to call twice."""
        with self._lock:
            self._closed = True
            sessions = list(self._sessions.values())
            self._sessions.clear()
            live = list(self._live)
            shared, self._shared = self._shared, None
        for session in sessions:
            session.close()
        for exchange in live:   # private calls are in no router's table: cancelled here
            exchange.stop()
        if shared is not None:
            shared.cancel_all()
        with self._lock:
            workers, self._workers = list(self._workers), set()
            ticker = self._ticker
        if ticker is not None:
            ticker.close()
        # Cancelled above; one deadline for all, and a handler that ignores it is left.
        join_all(workers, time.monotonic() + 5.0)

    def _shared_router(self) -> AppDispatcher:
        with self._lock:
            if self._shared is None:
                self._shared = self._make_shared(_drop, _drop_batch)
            return self._shared

    def _enter(self, exchange: _Exchange) -> bool:
        with self._lock:
            if exchange._session is not None:
                exchange._session.busy += 1
            if self._closed:
                return False
            self._live.add(exchange)
            return True

    def _leave(self, exchange: _Exchange) -> None:
        with self._lock:
            self._live.discard(exchange)
            self._workers = {w for w in self._workers if w.is_alive()
                             and w is not threading.current_thread()}
        if exchange._session is not None:
            self._release(exchange._session)

    # -- the ticker: keep-alives for quiet handlers, idle sessions' expiry --------------------

    def _watch(self, item: Watched) -> None:
        with self._lock:
            if self._closed:
                return
            if self._ticker is None:
                self._ticker = Ticker(self.name)
            ticker = self._ticker
        ticker.watch(item)

    def _unwatch(self, item: Watched) -> None:
        ticker = self._ticker
        if ticker is not None:
            ticker.unwatch(item)

    def _session(self, sid: Any) -> _Session | None:
        """The session a request names (``None``: unknown or ended); it was active now."""
        with self._lock:
            session = self._sessions.get(str(sid))
            if session is not None:
                session.last_active = time.monotonic()
            return session if session is not None or self._ids is None else self._resume(
                str(sid))

    def _resume(self, sid: str) -> _Session | None:
        """A session drawn elsewhere, when ``session_ids`` can resume it (the lock held)."""
        assert self._ids is not None
        if self._closed or len(self._sessions) >= self._max_sessions or sid in self._ended:
            return None
        make = self._ids.resume(sid)
        if make is None:
            return None
        session = _Session(make, EventStore(self._max_events, self._max_bytes))
        self._sessions[sid] = session
        if self._idle is not None and self._ticker is None:
            self._ticker = Ticker(self.name)
        if self._idle is not None and self._ticker is not None:
            self._ticker.watch(self._expiry)
        return session

    def _note_ended(self, sid: str) -> None:
        """Remember an ended session's id (the lock held), when ids can be resumed."""
        if self._ids is None:
            return
        self._ended[sid] = None
        while len(self._ended) > _ENDED_KEPT:
            self._ended.popitem(last=False)

    def _hold_session(self, session: _Session) -> None:
        with self._lock:
            session.busy += 1

    def _release(self, session: _Session) -> None:
        """A request or stream of ``session`` ended: its idle time starts now."""
        with self._lock:
            session.busy -= 1
            session.last_active = time.monotonic()
            idle = session.busy == 0 and self._idle is not None
            ticker = self._ticker
        if idle and ticker is not None:
            ticker.poke()    # it may be sleeping with no deadline at all

    def _expire(self, now: float) -> None:
        """End the sessions idle (no request, no open stream) for ``session_idle_timeout``:
        their calls are cancelled, their stores freed, their ids answer 404 from now on."""
        idle = self._idle
        if idle is None:
            return
        with self._lock:
            old = [sid for sid, session in self._sessions.items()
                   if session.busy == 0 and now - session.last_active >= idle]
            ended = [self._sessions.pop(sid) for sid in old]
            for sid in old:
                self._note_ended(sid)
        for session in ended:
            session.close()

    def _next_expiry(self) -> float | None:
        idle = self._idle
        if idle is None:
            return None
        with self._lock:
            times = [s.last_active for s in self._sessions.values() if s.busy == 0]
        return min(times) + idle if times else None

    def _adopt(self, worker: threading.Thread) -> None:
        with self._lock:
            self._workers.add(worker)

    # -- WSGI --------------------------------------------------------------------------------

    def serves(self, environ: dict[str, Any]) -> bool:
        """Whether this request is for the endpoint (its path, mounted or not): what a layer
        in front of it (OAuth) must guard is exactly what this answers."""
        return _mounted_at(environ, self.path)

    def screen(self, environ: dict[str, Any],
               start_response: StartResponse) -> Iterable[bytes] | None:
        """The answer for a request whose ``Host`` or ``Origin`` is not allowed (403), or
        ``None`` when it may go on. Run first, before anything else looks at the request."""
        host = str(environ.get("HTTP_HOST", ""))
        if not self._hosts.allows(host):
            return _refuse(start_response, 403, None, INVALID_REQUEST,
                           f"MCP server {self.name!r}: Host {host!r} is not allowed (a defence "
                           "against DNS rebinding); connect by an allowed name, or start the "
                           "server with allowed_hosts= naming this host")
        origin = environ.get("HTTP_ORIGIN")
        if origin is not None and not self._hosts.origin_allowed(str(origin)):
            return _refuse(start_response, 403, None, INVALID_REQUEST,
                           f"MCP server {self.name!r}: Origin {origin!r} is not allowed; start "
                           "the server with allowed_hosts= naming that origin's host")
        return None

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if not _mounted_at(environ, self.path):
            return _text(start_response, "404 Not Found",
                         f"no MCP endpoint here: this server answers at {self.path}\n")
        refused = self.screen(environ, start_response)
        if refused is not None:
            return refused
        if self._closed:
            return _refuse(start_response, 503, None, INVALID_REQUEST,
                           f"MCP server {self.name!r} is shutting down")
        method = environ.get("REQUEST_METHOD", "")
        if method == "POST":
            return self._post(environ, start_response)
        if method == "GET":
            return self._get(environ, start_response)
        if method == "DELETE":
            return self._delete(environ, start_response)
        return _refuse(start_response, 405, None, INVALID_REQUEST,
                       f"MCP server {self.name!r}: {method} is not served; MCP clients POST",
                       [_ALLOW])

    def _post(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        body = _read_body(environ, self._max_body)
        if body is None:
            return _refuse(start_response, 413, None, INVALID_REQUEST,
                           f"MCP server {self.name!r}: the request body is larger than "
                           f"{self._max_body} bytes (max_body_bytes)")
        kind = str(environ.get("CONTENT_TYPE") or "").partition(";")[0].strip().lower()
        if kind and kind != "application/json":
            return _refuse(start_response, 415, None, INVALID_REQUEST,
                           f"MCP server {self.name!r}: Content-Type {kind!r} is not served; "
                           "POST a JSON-RPC message as application/json")
        accept = environ.get("HTTP_ACCEPT")
        if not (_admits(accept, "application/json") or _admits(accept, "text/event-stream")):
            return _refuse(start_response, 406, None, INVALID_REQUEST,
                           f"MCP server {self.name!r}: Accept {accept!r} admits neither "
                           "application/json nor text/event-stream; send Accept: "
                           "application/json, text/event-stream")
        try:
            item = parse(body, allow_batch=True)
        except ParseError as exc:
            rid = exc.id if exc.code == INVALID_REQUEST else None
            return _refuse(start_response, 400, rid, exc.code, str(exc))
        if isinstance(item, Message) and _is_modern(item):
            return self._modern(item, environ, start_response)
        if isinstance(item, Message) and item.is_request and item.method == "initialize":
            return self._initialize(item, start_response)
        sid = environ.get("HTTP_MCP_SESSION_ID")
        if sid is None:
            if isinstance(item, Message) and item.is_request:
                # Neither era's marks: the shared router says what is missing (-32602, 400).
                return _Exchange(self, start_response, modern=True).run(
                    self._shared_router(), item)
            return _refuse(start_response, 400, None, INVALID_REQUEST,
                           f"MCP server {self.name!r}: no Mcp-Session-Id header; a legacy "
                           "client sends initialize first and then the session id it got")
        session = self._session(sid)
        if session is None:
            return _refuse(start_response, 404, None, INVALID_REQUEST,
                           f"MCP server {self.name!r}: unknown or ended session; start a new "
                           "one with initialize")
        version = environ.get("HTTP_MCP_PROTOCOL_VERSION")
        if version is not None and version not in LEGACY_VERSIONS:
            return _refuse(start_response, 400, None, INVALID_REQUEST,
                           f"MCP server {self.name!r}: MCP-Protocol-Version {version!r} is not "
                           f"a session revision; use one of {', '.join(LEGACY_VERSIONS)}")
        if isinstance(item, Batch):
            frames = session.batch(item)
            if not frames:
                return _empty(start_response, 202)
            return _json(start_response, 200, frames[-1])
        if item.method is None:          # the client's answer to one of our requests
            session.dispatcher.deliver_response(item)
            return _empty(start_response, 202)
        if not item.is_request:
            if item.method == "notifications/cancelled":
                session.dispatcher.cancel_notice(item.params)
            else:   # the server's router ignores these; a gateway passes them on
                session.dispatcher.handle(item, [])
            return _empty(start_response, 202)
        return _Exchange(self, start_response, modern=False, session=session).run(
            session.dispatcher, item)

    def _modern(self, message: Message, environ: dict[str, Any],
                start_response: StartResponse) -> Iterable[bytes]:
        if not message.is_request:
            if message.method is None:
                return _refuse(start_response, 400, None, INVALID_REQUEST,
                               "a 2026-07-28 client sends no responses: the server asks for "
                               "input with input_required results instead")
            return _empty(start_response, 202)
        mismatch = _header_mismatch(message, environ, self._tool_schema)
        if mismatch is not None:
            return _refuse(start_response, 400, message.id, HEADER_MISMATCH,
                           f"MCP server {self.name!r}: {mismatch}")
        return _Exchange(self, start_response, modern=True).run(self._shared_router(), message)

    def _initialize(self, message: Message, start_response: StartResponse) -> Iterable[bytes]:
        self._expire(time.monotonic())   # idle sessions make room before the count
        with self._lock:
            full = len(self._sessions) >= self._max_sessions
        if full:
            return _refuse(start_response, 503, message.id, INVALID_REQUEST,
                           f"MCP server {self.name!r} holds {self._max_sessions} open sessions; "
                           "retry later (clients end theirs with DELETE)",
                           [("Retry-After", "1")])
        session = _Session(self._make, EventStore(self._max_events, self._max_bytes))
        replies: list[Message] = []

        def keep(reply: Message, cancelled: threading.Event | None = None, /) -> None:
            replies.append(reply)

        call = session.dispatcher.track(message, sink=keep)
        session.dispatcher.handle(message, [call])
        reply = replies[-1] if replies else None
        if reply is None or reply.is_error:
            session.close()
            frame = serialize(reply) if reply is not None else serialize(error(
                message.id, INVALID_REQUEST, "initialize was not answered"))
            return _json(start_response, 400, frame)
        result = reply.result if isinstance(reply.result, dict) else {}
        session.polling = result.get("protocolVersion", "") >= _POLLING
        sid = (secrets.token_urlsafe(24) if self._ids is None
               else self._ids.new_id(session.dispatcher))
        with self._lock:
            closed = self._closed
            if not closed:
                self._sessions[sid] = session
        if closed:
            session.close()
            return _refuse(start_response, 503, message.id, INVALID_REQUEST,
                           f"MCP server {self.name!r} is shutting down")
        if self._idle is not None:
            self._watch(self._expiry)   # the ticker runs while sessions may expire
        return _json(start_response, 200, serialize(reply), [("Mcp-Session-Id", sid)])

    def _get(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        accept = environ.get("HTTP_ACCEPT")
        if not _admits(accept, "text/event-stream"):
            return _refuse(start_response, 406, None, INVALID_REQUEST,
                           f"MCP server {self.name!r}: Accept {accept!r} does not admit "
                           "text/event-stream, the only thing a GET answers; send Accept: "
                           "text/event-stream")
        sid = _session_header(environ)
        if sid is None:
            return _refuse(start_response, 405, None, INVALID_REQUEST,
                           f"MCP server {self.name!r}: GET opens a legacy session's stream "
                           "(send Mcp-Session-Id); 2026-07-28 clients only POST", [_ALLOW])
        session = self._session(sid)
        if session is None:
            return _refuse(start_response, 404, None, INVALID_REQUEST,
                           f"MCP server {self.name!r}: unknown or ended session")
        last = environ.get("HTTP_LAST_EVENT_ID")
        stream, after = 0, None
        if last is not None:
            found = session.store.find(str(last))
            if isinstance(found, str):
                return self._unresumable(start_response, str(last), found)
            stream, after = found
        write = start_response("200 OK", list(_SSE_HEADERS))
        store = session.store
        self._hold_session(session)   # an open stream: the session is not idle
        try:
            if session.polling and after is None:
                write(priming(store.record(0, b"").id, self._retry_ms))
            else:
                write(KEEP_ALIVE)   # the headers go out now: the client knows it is open
            while True:
                events, going_on = store.take(stream, after, self._keep_alive)
                if events and stream != 0:
                    after = events[-1].seq
                chunks = [event(e.data, e.id) for e in events if e.data]
                for chunk in chunks or ([KEEP_ALIVE] if going_on else []):
                    write(chunk)
                if not going_on:   # the stream's last event is out, or the session ended
                    break
        except Exception:   # the client went away: the stream ends, the session stays
            pass
        finally:
            self._release(session)
        return []

    def _unresumable(self, start_response: StartResponse, last: str,
                     why: str) -> Iterable[bytes]:
        if why == Lookup.DROPPED:
            return _refuse(start_response, 410, None, INVALID_REQUEST,
                           f"MCP server {self.name!r}: the events after Last-Event-ID {last!r} "
                           f"are no longer kept (at most {self._max_events} events or "
                           f"{self._max_bytes} bytes per session); send the request again")
        text = ("is not an event id of this server" if why == Lookup.MALFORMED
                else "names no event of this session (another session's, or never sent)")
        return _refuse(start_response, 400, None, INVALID_REQUEST,
                       f"MCP server {self.name!r}: Last-Event-ID {last!r} {text}; GET without "
                       "Last-Event-ID opens the session's stream, or send the request again")

    def _delete(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        sid = _session_header(environ)
        if sid is None:
            return _refuse(start_response, 405, None, INVALID_REQUEST,
                           f"MCP server {self.name!r}: DELETE ends a legacy session (send "
                           "Mcp-Session-Id); 2026-07-28 has no sessions", [_ALLOW])
        with self._lock:
            session = self._sessions.pop(str(sid), None)
        if session is None and self._ids is not None and self._session(sid) is not None:
            with self._lock:   # opened elsewhere: resumed here to be ended properly
                session = self._sessions.pop(str(sid), None)
        if session is None:
            return _refuse(start_response, 404, None, INVALID_REQUEST,
                           f"MCP server {self.name!r}: unknown or ended session")
        with self._lock:
            self._note_ended(str(sid))
        session.close()
        return _empty(start_response, 204)


class _Expiry:
    """What the ticker sees of an app's idle sessions: the earliest expiry, and the sweep."""

    def __init__(self, app: McpApp) -> None:
        self._app = app

    def due(self) -> float | None:
        return self._app._next_expiry()

    def tick(self, now: float) -> None:
        self._app._expire(now)


class _Session:
    """One legacy session: its router, and its event store (stream 0 is what a GET reads)."""

    def __init__(self, make: DispatcherFactory, store: EventStore) -> None:
        self.store = store
        self.polling = False    # negotiated at 2025-11-25: priming events, close_stream
        self.busy = 0           # requests being answered and streams open (the app's lock)
        self.last_active = time.monotonic()
        self._local = threading.local()
        self.dispatcher = make(self._send, self._send_batch)

    def _send(self, message: Message, cancelled: threading.Event | None = None, /) -> None:
        self._out(serialize(message))

    def _send_batch(self, messages: list[Message]) -> None:
        self._out(b"[" + b",".join(serialize(m) for m in messages) + b"]")

    def _out(self, frame: bytes) -> None:
        collected: list[bytes] | None = getattr(self._local, "collected", None)
        if collected is not None:    # a batch being answered on this thread: its reply
            collected.append(frame)
        else:
            self.store.record(0, frame)

    def batch(self, batch: Batch) -> list[bytes]:
        """Answer a 2025-03-26 batch: the reply frames (none when it held no request)."""
        calls: list[_Call | None] = []
        for element in batch:
            if isinstance(element, Message) and element.method is None:
                self.dispatcher.deliver_response(element)
            elif isinstance(element, Message) and element.method == "notifications/cancelled":
                self.dispatcher.cancel_notice(element.params)
            calls.append(self.dispatcher.track(element) if isinstance(element, Message)
                         else None)
        self._local.collected = []
        try:
            self.dispatcher.handle(batch, calls)
            return list(self._local.collected)
        finally:
            self._local.collected = None

    def close(self) -> None:
        self.dispatcher.cancel_all()
        self.store.close()


class _Exchange:
    """One request answered on one HTTP response, on the WSGI thread that received it.

    In a legacy session every event of the reply stream is recorded in the session's event
    store (under its id) before it is written, so a client that lost the connection can
    resume it; a failed write then *detaches* the exchange: the call goes on and the rest
    of its events only go to the store. 2026-07-28 has no resumption: a failed write cancels.
    A ``tools/call`` of a 2025-11-25 session runs on a worker thread of its own, while this
    thread writes its events, so that the handler can end the connection and go on
    (:meth:`~mcpsync.server.Context.close_stream`).
    """

    def __init__(self, app: McpApp, start_response: StartResponse, *, modern: bool,
                 session: _Session | None = None) -> None:
        self._app = app
        self._start = start_response
        self._modern = modern
        self._session = session
        self._owner = threading.get_ident()
        self._channel = Channel()       # frames sent from other threads, for the owner
        self._final: Message | None = None
        self._write: Callable[[bytes], None] | None = None
        self._gone = False
        self._call: _Call | None = None
        self._lock = threading.Lock()   # detaching against frames arriving from elsewhere
        self._stream: int | None = None
        self._detached = False
        self._answered = False     # a detached call recorded its response
        self._primer: Event | None = None   # recorded by close_stream, written by the owner
        self._retry: int | None = None
        self._done = False
        # Every write to the response holds this: the owner's, and the app's ticker's
        # keep-alives while a handler on the owner's thread is quiet.
        self._wlock = threading.Lock()
        self._ticks = False          # the ticker may write (the handler runs, on this thread)
        self._last = 0.0             # monotonic time of the last write

    def sink(self, message: Message, cancelled: threading.Event | None = None, /) -> None:
        """Every frame of the request (the router's write gate has checked it)."""
        frame = serialize(message)   # a result that is not JSON raises here, before a byte
        with self._lock:
            if self._detached:           # nobody is reading: resumable from the store
                self._record(frame, last=message.method is None)
                self._answered = self._answered or message.method is None
                return
            if message.method is None:
                self._final = message    # the response: last, after whatever came before it
                return
            if threading.get_ident() != self._owner:
                self._channel.put(frame)
                return
        self._send([*(self._channel.take(0) or []), frame])

    def stop(self) -> None:
        """The app is closing: the handler sees its cancellation, an open stream ends."""
        self._channel.close()
        if self._call is not None:
            self._call.cancel()

    def _record(self, frame: bytes, *, last: bool = False) -> Event:
        assert self._session is not None
        store = self._session.store
        if self._stream is None:
            self._stream = store.open_stream()
        return store.record(self._stream, frame, last=last)

    def _opening(self) -> list[bytes]:
        """The priming event, when a 2025-11-25 stream starts (nothing for older ones)."""
        if self._session is None or not self._session.polling or self._stream is not None:
            return []
        primer = self._record(b"")
        return [priming(primer.id, self._app._retry_ms)]

    def run(self, router: AppDispatcher, message: Message) -> Iterable[bytes]:
        call = router.track(message, sink=self.sink, private=self._modern)
        assert call is not None   # a request: always tracked
        self._call = call
        if not self._app._enter(self):
            call.cancel()
        apart = (self._session is not None and self._session.polling
                 and message.method == "tools/call" and self._polls(message))
        try:
            if apart:
                call.closer = self.close_stream
                if not self._run_apart(router, message, call):
                    return []          # the connection ends; the call goes on
            else:
                self._ticks = True
                try:
                    router.handle(message, [call])
                finally:
                    self._quiet_end()
                if not call.done:     # subscriptions/listen: open until the client goes
                    self._hold(router, call)
                    return []
        finally:
            if not apart:
                self._app._leave(self)
        pending = self._channel.take(0) or []
        final = self._final
        if self._write is None and not pending and not self._detached:
            if final is None:   # cancelled before it answered: an empty stream, no response
                self._start("200 OK", list(_SSE_HEADERS))
                return []
            return _json(self._start, self._status(final), serialize(final))
        self._send([*pending, *([serialize(final)] if final is not None else [])],
                   last=final is not None)
        if final is None and self._stream is not None and self._session is not None:
            self._session.store.end(self._stream)
        return []

    def _polls(self, message: Message) -> bool:
        """Whether the tool called asked to run apart (``@server.tool(polling=True)``)."""
        polls = self._app._tool_polls
        name = message.params.get("name") if isinstance(message.params, dict) else None
        return polls is not None and isinstance(name, str) and polls(name)

    def _run_apart(self, router: AppDispatcher, message: Message, call: _Call) -> bool:
        """Run the handler on a worker, writing its events here; False once it detached."""
        def work() -> None:
            try:
                router.handle(message, [call])
            finally:
                with self._lock:
                    self._done = True
                    unanswered = self._detached and not self._answered
                # A detached call that ends without an answer (cancelled) ends its stream
                # too, so a client resuming it is not kept waiting for nothing.
                if unanswered and self._stream is not None and self._session is not None:
                    self._session.store.end(self._stream)
                self._channel.wake()
                self._app._leave(self)

        # The handler sees the context of the request's thread (e.g. the verified caller).
        worker = new_thread(f"mcpsync-http-call-{self._app.name}",
                            contextvars.copy_context().run, work)
        self._app._adopt(worker)
        worker.start()
        while True:
            frames = self._channel.take(self._app._keep_alive)
            if frames is None:
                break
            if frames:
                self._send(frames)
            elif self._done:
                break
            elif self._write is not None:
                self._emit([KEEP_ALIVE])
        if not self._detached:
            # Done, or the app closed (the call is cancelled then): a handler that ignores
            # cancellation does not pin this thread for good.
            worker.join(None if self._done else 5.0)
            return True
        chunks: list[bytes] = []
        if self._write is None and self._primer is not None:
            chunks.append(priming(self._primer.id, self._retry or self._app._retry_ms))
        elif self._retry is not None:
            chunks.append(retry(self._retry))
        self._emit(chunks)
        return False

    def close_stream(self, retry_ms: int | None) -> bool:
        """Detach from the connection (the handler's ``ctx.close_stream``)."""
        if threading.get_ident() == self._owner or self._session is None:
            return False
        with self._lock:
            if self._detached or self._done:
                return self._detached
            if self._stream is None:
                self._primer = self._record(b"")
            for frame in self._channel.take(0) or []:
                self._record(frame)
            self._retry = retry_ms
            self._detached = True
            self._channel.close()
        return True

    def _status(self, reply: Message) -> int:
        if not (self._modern and reply.is_error and isinstance(reply.error, dict)):
            return 200
        code = reply.error.get("code")
        if code == METHOD_NOT_FOUND:
            return 404
        return 400 if code in _BAD_REQUEST_CODES else 200

    def _send(self, frames: list[bytes], *, last: bool = False) -> None:
        if self._session is None:
            self._emit([event(frame) for frame in frames])
            return
        with self._lock:
            chunks = self._opening() if not self._detached else []
            for i, frame in enumerate(frames):
                recorded = self._record(frame, last=last and i == len(frames) - 1)
                chunks.append(event(frame, recorded.id))
            if self._detached:
                return
        self._emit(chunks)

    def _emit(self, chunks: list[bytes]) -> None:
        with self._wlock:
            if self._gone:
                return
            write = self._write
            started = write is None
            if write is None:
                write = self._write = self._start("200 OK", list(_SSE_HEADERS))
            try:
                for chunk in chunks:
                    write(chunk)
            except Exception:
                self._lost()
                return
            self._last = time.monotonic()
        if started and self._ticks:   # a stream now: a quiet handler gets keep-alives
            self._app._watch(self)

    def _lost(self) -> None:
        """The client went away (a write failed; the write lock is held). 2026-07-28:
        closing the stream cancels the request. Legacy: a disconnection is not a
        cancellation; the call goes on and what it sends waits in the session's event
        store for a GET with Last-Event-ID."""
        self._gone = True
        if self._session is not None:
            with self._lock:
                self._detached = True
        elif self._call is not None:
            self._call.cancel()     # lock-free: safe under the write lock

    def _quiet_end(self) -> None:
        """The handler returned: from here only this thread writes (the reply's end)."""
        with self._wlock:
            self._ticks = False
        self._app._unwatch(self)

    # -- what the app's ticker calls (see _ticker) -------------------------------------------

    def due(self) -> float | None:
        if not self._ticks or self._gone or self._detached or self._write is None:
            return None
        return self._last + self._app._keep_alive

    def tick(self, now: float) -> None:
        """A keep-alive comment, unless the owner is writing (then it is not quiet) or the
        stream ended; never waits for the write lock."""
        if not self._wlock.acquire(blocking=False):
            self._last = now         # busy: skip this round
            return
        try:
            write = self._write
            if not self._ticks or self._gone or self._detached or write is None:
                return
            try:
                write(KEEP_ALIVE)
            except Exception:
                self._lost()
            self._last = time.monotonic()
        finally:
            self._wlock.release()

    def _hold(self, router: AppDispatcher, call: _Call) -> None:
        """Stream an open listen's notifications until the client goes or the app closes."""
        channel = self._channel
        try:
            if self._write is None:
                self._emit([KEEP_ALIVE])
            while not self._gone and not call.cancelled.is_set():
                frames = channel.take(self._app._keep_alive)
                if frames is None:
                    break
                if frames:
                    self._send(frames)
                else:
                    self._emit([KEEP_ALIVE])
        finally:
            router.end_call(call)


def _session_header(environ: dict[str, Any]) -> str | None:
    """The legacy session a GET or DELETE names; ``None`` also when the request says it is
    2026-07-28, whose clients have no sessions (the header is ignored there: 405)."""
    if environ.get("HTTP_MCP_PROTOCOL_VERSION") in MODERN_VERSIONS:
        return None
    sid = environ.get("HTTP_MCP_SESSION_ID")
    return None if sid is None else str(sid)


def _mounted_at(environ: dict[str, Any], path: str) -> bool:
    """Is this request for the endpoint at ``path``? The request's path is ``SCRIPT_NAME``
    followed by ``PATH_INFO``: served directly, ``SCRIPT_NAME`` is empty; mounted under a
    prefix (werkzeug's ``DispatcherMiddleware`` in Flask), the prefix has moved into
    ``SCRIPT_NAME`` and ``PATH_INFO`` holds what is left, often nothing. One trailing slash
    is the same endpoint (``/mcp/`` is ``/mcp``)."""
    full = str(environ.get("SCRIPT_NAME", "")) + str(environ.get("PATH_INFO", ""))
    return full == path or (full.endswith("/") and full[:-1] == path.rstrip("/"))


def _header_mismatch(message: Message, environ: dict[str, Any],
                     tool_schema: ToolSchemas | None) -> str | None:
    """What disagrees between a 2026-07-28 request's headers and its body; ``None``: nothing."""
    params = message.params if isinstance(message.params, dict) else {}
    meta = params.get("_meta")
    version = meta.get(META_PROTOCOL_VERSION) if isinstance(meta, dict) else None
    header = environ.get("HTTP_MCP_PROTOCOL_VERSION")
    if header is None:
        return (f"missing MCP-Protocol-Version header; a 2026-07-28 request repeats "
                f"_meta[{META_PROTOCOL_VERSION!r}] ({version!r}) in it")
    if header != version:
        return (f"MCP-Protocol-Version header {header!r} differs from the body's "
                f"_meta[{META_PROTOCOL_VERSION!r}] {version!r}")
    method = environ.get("HTTP_MCP_METHOD")
    if method is None:
        return f"missing Mcp-Method header; it repeats the method ({message.method!r})"
    if method != message.method:
        return f"Mcp-Method header {method!r} differs from the body's method {message.method!r}"
    assert message.method is not None
    expected = expected_name(message.method, params)
    if expected is None:
        return None
    field, value = expected
    if not isinstance(value, str):
        return None   # the router refuses the params themselves (-32602)
    name = environ.get("HTTP_MCP_NAME")
    if name is None:
        return f"missing Mcp-Name header; it repeats params.{field} ({value!r})"
    decoded = decode_header_value(str(name))
    if decoded is None:
        return f"Mcp-Name header {name!r} is not valid =?base64?...?= (UTF-8)"
    if decoded != value:
        return f"Mcp-Name header {decoded!r} differs from params.{field} {value!r}"
    if message.method == "tools/call" and tool_schema is not None:
        arguments = params.get("arguments")
        if isinstance(arguments, dict):
            return param_mismatch(tool_schema(value), arguments, environ)
    return None


def _admits(accept: Any, media: str) -> bool:
    """Whether an ``Accept`` header admits ``media``: named, by ``type/*`` or ``*/*``, and
    not with ``q=0``. No header admits everything (what HTTP says, and what some clients
    send)."""
    if accept is None:
        return True
    kind = media.split("/")[0]
    for item in str(accept).split(","):
        name, *params = (part.strip().lower() for part in item.split(";"))
        if name not in (media, f"{kind}/*", "*/*"):
            continue
        if not any(p.replace(" ", "") in ("q=0", "q=0.0", "q=0.00", "q=0.000")
                   for p in params):
            return True
    return False


def _read_body(environ: dict[str, Any], limit: int) -> bytes | None:
    """The request body, or ``None`` when it is longer than ``limit``: read against the limit
    whatever the WSGI server allows (gunicorn and werkzeug set none), so a client cannot make
    the server hold an arbitrary body in memory."""
    stream = environ["wsgi.input"]
    length = str(environ.get("CONTENT_LENGTH") or "")
    if length.isdigit():
        if int(length) > limit:
            return None
        data: bytes = stream.read(int(length))
        return data
    data = stream.read(limit + 1)
    return None if len(data) > limit else data


def _json(start_response: StartResponse, status: int, frame: bytes,
          headers: Iterable[tuple[str, str]] = ()) -> list[bytes]:
    start_response(_STATUS[status], [_JSON, ("Content-Length", str(len(frame))), *headers])
    return [frame]


def _refuse(start_response: StartResponse, status: int, rid: Any, code: int, text: str,
            headers: Iterable[tuple[str, str]] = ()) -> list[bytes]:
    return _json(start_response, status, serialize(error(rid, code, text)), headers)


def _empty(start_response: StartResponse, status: int) -> list[bytes]:
    start_response(_STATUS[status], [("Content-Length", "0")] if status != 204 else [])
    return []


def _text(start_response: StartResponse, status: str, text: str) -> list[bytes]:
    body = text.encode("utf-8")
    start_response(status, [("Content-Type", "text/plain; charset=utf-8"),
                            ("Content-Length", str(len(body)))])
    return [body]
