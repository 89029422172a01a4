"""A fault-injecting MCP server over Streamable HTTP, on the stdlib, for the transport's tests.

Why our own server: the official SDK behaves correctly, so it cannot show what the client does
when a session expires, a stream drops after its priming event, a token is refused, a reply
is redirected, oversized or mistyped, or headers never come. This server is a real peer
(``ThreadingHTTPServer``, HTTP/1.1 keep-alive, chunked SSE) for both eras and for the
2024-11-05 HTTP+SSE transport, records every request so tests can assert what the client
sent, and takes its faults from ``server.faults`` (a plain mutable dataclass, switchable at
any time) and from ``server.faults.script``, a queue of canned replies served first.

Usage::

    server = FaultServer()            # listens on 127.0.0.1:<ephemeral>, serves on any path
    server.faults.reply = "sse"
    server.faults.script.append(unauthorized())
    ... client talks to server.url ...
    assert server.requests[0].header("Authorization") is None
    server.close()                    # joins every thread it started

See ``tests/http_peers/README.md`` for every mode.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

from requests.structures import CaseInsensitiveDict

MODERN_VERSION = "2026-07-28"
LEGACY_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
PROTOCOL_VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"
SERVER_INFO = {"name": "fault-server", "version": "1.0.0"}

# JSON-RPC codes the modern era maps to HTTP statuses (MCP 2026-07-28, Streamable HTTP).
HEADER_MISMATCH = -32020
MISSING_CAPABILITY = -32021
UNSUPPORTED_VERSION = -32022
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INVALID_REQUEST = -32600

TOOLS: list[dict[str, Any]] = [
    {"name": "echo", "description": "Echo the text.",
     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}},
                     "required": ["text"]},
     "annotations": {"readOnlyHint": True}},
    {"name": "add", "description": "Add two numbers (structured output).",
     "inputSchema": {"type": "object",
                     "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                     "required": ["a", "b"]},
     "outputSchema": {"type": "object", "properties": {"sum": {"type": "number"}},
                      "required": ["sum"]},
     "annotations": {"idempotentHint": True}},
    {"name": "slow", "description": "Sleep, sending progress after each step.",
     "inputSchema": {"type": "object",
                     "properties": {"seconds": {"type": "number"}, "steps": {"type": "integer"}},
                     "required": ["seconds"]}},
    {"name": "lookup", "description": "Modern: carries its region in Mcp-Param-Region.",
     "inputSchema": {"type": "object",
                     "properties": {"region": {"type": "string", "x-mcp-header": "Region"},
                                    "query": {"type": "string"}},
                     "required": ["region"]},
     "annotations": {"readOnlyHint": True}},
]

Body = bytes | Callable[["RecordedRequest"], bytes] | None
ANSWER_FIRST_HOLD = 0.3  # answer_on_get_first: the 202 follows the GET event this much later


@dataclass(frozen=True)
class RecordedRequest:
    """One HTTP request as the server received it (headers keep every repeated value)."""

    method: str
    path: str
    header_list: tuple[tuple[str, str], ...]
    body: bytes
    time: float

    @property
    def headers(self) -> CaseInsensitiveDict[str]:
        """Headers by case-insensitive name (the last value wins for repeated ones)."""
        return CaseInsensitiveDict(dict(self.header_list))

    def header(self, name: str) -> str | None:
        """The value of one header, or None when absent."""
        values = self.header_values(name)
        return values[-1] if values else None

    def header_values(self, name: str) -> list[str]:
        """Every value of a header, in the order sent."""
        return [v for k, v in self.header_list if k.lower() == name.lower()]

    @property
    def json(self) -> Any:
        """The body parsed as JSON, or None when it is empty or not JSON."""
        try:
            return json.loads(self.body) if self.body else None
        except ValueError:
            return None

    @property
    def rpc_method(self) -> str | None:
        """The JSON-RPC method of the body, when it is a single request or notification."""
        body = self.json
        return body.get("method") if isinstance(body, dict) else None

    @property
    def rpc_id(self) -> Any:
        """The JSON-RPC id of the body, when it has one."""
        body = self.json
        return body.get("id") if isinstance(body, dict) else None


@dataclass
class Scripted:
    """A canned reply served to the next request that ``match`` selects.

    ``match`` is a JSON-RPC method (``"tools/call"``), an HTTP verb (``"GET"``) or None for
    any request. ``headers`` is a list so a header may repeat (several ``WWW-Authenticate``).
    ``body`` is bytes or a function of the request (to echo its id). ``delay`` holds the
    status line back; ``oversize`` pads a JSON result (or one SSE event) to that many bytes
    and streams it. ``sse_events`` sends those raw SSE event texts instead of a body (or a
    function of the request returning them, to answer or not answer its id).
    """

    status: int = 200
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: Body = None
    content_type: str | None = None
    match: str | None = None
    delay: float = 0.0
    oversize: int = 0
    sse_events: list[str] | Callable[[RecordedRequest], list[str]] | None = None
    hangup: bool = False  # close the connection without any reply (a connection error)


@dataclass
class Faults:
    """Every switch of the fault server; change any field at any time, even mid-test."""

    # Which protocol the server speaks: both Streamable HTTP eras, one of them, or the
    # 2024-11-05 HTTP+SSE transport (GET -> `endpoint` event, POSTs answered 202).
    era: Literal["both", "legacy", "modern", "sse2024"] = "both"
    reply: Literal["json", "sse"] = "json"
    stateful: bool = True  # legacy: mint and require Mcp-Session-Id
    get_stream: bool = True  # legacy: False answers GET with 405
    delete_status: int = 200
    sse_priming: bool = True  # legacy SSE replies start with an id-only priming event
    retry_ms: int | None = None  # `retry:` sent with the priming event
    keepalive_interval: float | None = None  # `:` comments on GET streams
    # Messages (notifications, or legacy server requests such as `elicitation/create`) sent
    # on every SSE reply to `tools/call` before its response; answers arrive as POSTs.
    stream_messages: list[dict[str, Any]] = field(default_factory=list)
    # Session expiry: after N session-bearing requests, or on a given method, `expire_times`
    # sessions in a row end (404 to their id, a fresh initialize gets a new one).
    expire_session_after: int | None = None
    expire_method: str | None = None
    expire_times: int = 1
    # How an unknown session id is answered: the spec's 404, or e.g. (400, -32000, "Bad
    # Request: No valid session ID provided") as servers built like the TypeScript SDK's
    # examples do after a restart.
    lost_session_reply: tuple[int, int, str] = (404, -32001, "Session not found")
    # Stream drops on POST replies (forces SSE): "after_id" sends the priming id (+ retry)
    # then drops, the response staying available on GET with Last-Event-ID; "before_id"
    # sends SSE headers and one id-less notification then drops.
    drop: Literal["after_id", "before_id"] | None = None
    drop_method: str | None = "tools/call"
    drop_times: int = 1
    drop_style: Literal["abort", "eof"] = "abort"  # socket closed mid-body, or a clean end
    resume_fail_times: int = 0  # GETs with Last-Event-ID answered 503 before one succeeds
    drop_get_after: int | None = None  # a GET stream drops after N pushed messages (once)
    # Legacy: a request of this method is answered on the GET stream first and, once that
    # event is written (and ANSWER_FIRST_HOLD later), its POST gets a bare 202.
    answer_on_get_first: str | None = None
    # Auth: when set, every request must carry exactly this Authorization value.
    require_authorization: str | None = None
    www_authenticate: list[str] = field(default_factory=lambda: [
        'Bearer resource_metadata="http://127.0.0.1/.well-known/oauth-protected-resource"'])
    # A real resource server's check: called with the Authorization header (None when
    # absent); False answers 401 with `www_authenticate` (e.g. an authorization server's
    # `resource_validator`, tests/auth_peers).
    token_validator: Callable[[str | None], bool] | None = None
    # RFC 9728 protected-resource metadata, served without auth to a GET on any path under
    # /.well-known/oauth-protected-resource (None: such paths are ordinary MCP requests).
    resource_metadata: dict[str, Any] | None = None
    dpop_nonce: str | None = None  # required in the DPoP proof's `nonce` claim
    response_headers: dict[str, str] = field(default_factory=dict)  # added to every reply
    header_delay: float = 0.0  # hold every reply's status line back this long
    delay_method: str | None = None  # ... only for this JSON-RPC method
    check_modern_headers: bool = True  # 400/-32020 on a bad MCP-Protocol-Version, Mcp-*
    modern_versions: list[str] = field(default_factory=lambda: [MODERN_VERSION])
    required_capability: str | None = None  # modern tools/call needs this client capability
    endpoint: str | None = None  # sse2024: override the `endpoint` event's data
    script: deque[Scripted] = field(default_factory=deque)


class _Stream:
    """The events of one SSE stream, kept so a resuming GET can replay them."""

    def __init__(self, stream_id: str) -> None:
        self.id = stream_id
        self.standalone = False  # a GET stream: resuming it keeps it open for pushes
        self.events: list[tuple[str, bytes]] = []
        self.done = False
        self.cond = threading.Condition()


class _Closed(Exception):
    """The client went away (or we dropped it); stop writing."""


def unauthorized(*challenges: str) -> Scripted:
    """A 401 with these ``WWW-Authenticate`` values (a Bearer one by default)."""
    values = challenges or ('Bearer resource_metadata="http://127.0.0.1/.well-known/prm"',)
    return Scripted(401, [("WWW-Authenticate", v) for v in values], b"")


def dpop_nonce_challenge(nonce: str) -> Scripted:
    """A 401 asking for a DPoP nonce, carrying it in ``DPoP-Nonce``."""
    return Scripted(401, [("WWW-Authenticate",
                           'DPoP error="use_dpop_nonce", error_description="nonce required"'),
                          ("DPoP-Nonce", nonce)], b"")


def insufficient_scope(scope: str) -> Scripted:
    """A 403 step-up challenge naming the scopes the request needs."""
    return Scripted(403, [("WWW-Authenticate",
                           f'Bearer error="insufficient_scope", scope="{scope}", '
                           'resource_metadata="http://127.0.0.1/.well-known/prm"')], b"")


def redirect(status: int, location: str, match: str | None = None) -> Scripted:
    """A redirect (301/302/303/307/308) to ``location``."""
    return Scripted(status, [("Location", location)], b"", match=match)


def rpc_error(status: int, code: int, message: str, data: Any = None,
              match: str | None = None, with_id: bool = True) -> Scripted:
    """A JSON-RPC error body at an HTTP status, echoing the request's id unless told not to."""
    def body(req: RecordedRequest) -> bytes:
        error: dict[str, Any] = {"code": code, "message": message}
        if data is not None:
            error["data"] = data
        return _dumps({"jsonrpc": "2.0", "id": req.rpc_id if with_id else None, "error": error})
    return Scripted(status, [], body, "application/json", match)


def result(value: dict[str, Any], match: str | None = None) -> Scripted:
    """A 200 JSON result for the request (e.g. ``{}`` for a mock discover)."""
    return Scripted(200, [], lambda req: _dumps({"jsonrpc": "2.0", "id": req.rpc_id,
                                                 "result": value}), "application/json", match)


def _dumps(message: Any) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode()


def _sse_event(data: bytes | None, event_id: str | None = None, event: str | None = None,
               retry: int | None = None) -> bytes:
    lines = []
    if event_id is not None:
        lines.append(f"id: {event_id}")
    if event is not None:
        lines.append(f"event: {event}")
    if retry is not None:
        lines.append(f"retry: {retry}")
    lines.append("data: " + (data or b"").decode())
    return ("\n".join(lines) + "\n\n").encode()


def _jwt_claims(token: str) -> dict[str, Any]:
    """The payload of a JWS compact token, unverified (enough to read a DPoP nonce)."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return claims if isinstance(claims, dict) else {}
    except (IndexError, ValueError, binascii.Error):
        return {}


class FaultServer:
    """The server object: ``url``, ``requests``, ``faults``, ``push()``, ``close()``."""

    def __init__(self, path: str = "/mcp") -> None:
        self.faults = Faults()
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._sessions: dict[str, int] = {}  # session id -> requests served on it
        self._streams: dict[str, _Stream] = {}
        self._stream_count = 0
        self._push: deque[bytes] = deque()
        self._push_cond = threading.Condition(self._lock)
        self._pushes_written = 0  # pushed messages written on a GET stream so far
        self._sse2024: dict[str, deque[bytes]] = {}
        self.cancelled: list[Any] = []  # modern request ids whose stream the client closed
        self.disconnected: list[RecordedRequest] = []  # closed by the client during a delay
        self.drops: list[float] = []  # time.monotonic() of each deliberate stream drop
        self.errors: list[str] = []  # exceptions in our handler; the fixture fails on any
        self._closing = threading.Event()
        self._threads: list[threading.Thread] = []
        self._sockets: set[socket.socket] = set()
        self._httpd = _HTTPServer(self)
        host, port = self._httpd.server_address[:2]
        self.origin = f"http://{host!s}:{port}"
        self.url = self.origin + path
        self._serve_thread = threading.Thread(target=self._httpd.serve_forever,
                                              kwargs={"poll_interval": 0.05},
                                              name=f"test-fault-server-{port}", daemon=True)
        self._serve_thread.start()

    # ---- what tests read and drive -------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """A copy of every request received so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    def rpc_requests(self, method: str) -> list[RecordedRequest]:
        """The requests whose JSON-RPC method is ``method``."""
        return [r for r in self.requests if r.rpc_method == method]

    def wait_for_requests(self, predicate: Callable[[RecordedRequest], bool], count: int = 1,
                          timeout: float = 5.0) -> list[RecordedRequest]:
        """Wait until ``count`` requests match; return them (raises TimeoutError otherwise)."""
        deadline = time.monotonic() + timeout
        while True:
            found = [r for r in self.requests if predicate(r)]
            if len(found) >= count:
                return found
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {len(found)} of {count} matching requests arrived")
            time.sleep(0.01)

    @property
    def connections(self) -> int:
        """How many TCP connections the server has accepted (keep-alive reuses one)."""
        return self._httpd.accepted

    @property
    def sessions(self) -> list[str]:
        """The live legacy session ids."""
        with self._lock:
            return list(self._sessions)

    def expire_sessions(self) -> None:
        """End every legacy session now: later requests with their ids get 404."""
        with self._lock:
            self._sessions.clear()

    def push(self, message: dict[str, Any]) -> None:
        """Send a server message on the legacy GET stream (or the 2024-11-05 SSE stream)."""
        with self._lock:
            if self.faults.era == "sse2024":
                for queue in self._sse2024.values():
                    queue.append(_dumps(message))
            else:
                self._push.append(_dumps(message))
            self._push_cond.notify_all()

    def push_written(self, message: dict[str, Any], timeout: float = 5.0) -> bool:
        """:meth:`push` on the legacy GET stream and wait until a GET stream has written it
        (False when none did within ``timeout``)."""
        deadline = time.monotonic() + timeout
        with self._push_cond:
            self._push.append(_dumps(message))
            target = self._pushes_written + len(self._push)
            self._push_cond.notify_all()
            while self._pushes_written < target:
                left = deadline - time.monotonic()
                if left <= 0 or self._closing.is_set():
                    return False
                self._push_cond.wait(left)
        return True

    def close(self) -> None:
        """Stop serving, drop every open connection and join every thread."""
        self._closing.set()
        with self._lock:
            self._push_cond.notify_all()
            streams = list(self._streams.values())
        for stream in streams:
            with stream.cond:
                stream.cond.notify_all()
        self._httpd.shutdown()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._httpd.server_close()
        self._serve_thread.join(5)
        for thread in list(self._threads):
            thread.join(5)

    def __enter__(self) -> FaultServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- internals used by the handler ---------------------------------------------

    def _record(self, req: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(req)

    def _take_script(self, req: RecordedRequest) -> Scripted | None:
        with self._lock:
            for item in self.faults.script:
                if item.match is None or item.match in (req.method, req.rpc_method):
                    self.faults.script.remove(item)
                    return item
        return None

    def _new_stream(self) -> _Stream:
        with self._lock:
            self._stream_count += 1
            stream = _Stream(f"s{self._stream_count}")
            self._streams[stream.id] = stream
            return stream

    def _find_stream(self, event_id: str) -> _Stream | None:
        with self._lock:
            return self._streams.get(event_id.split("-")[0])

    def _wait(self, seconds: float) -> None:
        if self._closing.wait(seconds):
            raise _Closed("server closing")


class _HTTPServer(ThreadingHTTPServer):
    """Names, tracks and joins its connection threads; keeps sockets to drop them on close."""

    daemon_threads = True
    request_queue_size = 256  # 50 threads connecting at once must not wait on SYN retries

    def __init__(self, owner: FaultServer) -> None:
        self.owner = owner
        self.accepted = 0
        super().__init__(("127.0.0.1", 0), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        self.accepted += 1
        port = self.server_address[1]
        thread = threading.Thread(target=self.process_request_thread,
                                  args=(request, client_address),
                                  name=f"test-fault-server-{port}-conn-{self.accepted}",
                                  daemon=True)
        owner = self.owner
        with owner._lock:
            owner._sockets.add(request)
            owner._threads[:] = [t for t in owner._threads if t.is_alive()]
            owner._threads.append(thread)
        thread.start()

    def shutdown_request(self, request: Any) -> None:
        with self.owner._lock:
            self.owner._sockets.discard(request)
        super().shutdown_request(request)


class _Handler(BaseHTTPRequestHandler):
    """One connection; every verb goes through ``_serve``."""

    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        """Stay quiet: pytest shows the recorded requests when a test fails."""

    def do_POST(self) -> None:
        self._serve()

    def do_GET(self) -> None:
        self._serve()

    def do_DELETE(self) -> None:
        self._serve()

    # ---- plumbing --------------------------------------------------------------------

    @property
    def owner(self) -> FaultServer:
        return self.server.owner

    @property
    def faults(self) -> Faults:
        return self.owner.faults

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        req = RecordedRequest(self.command, self.path, tuple(self.headers.items()), body,
                              time.monotonic())
        self.owner._record(req)
        try:
            scripted = self.owner._take_script(req)
            if scripted is not None:
                self._send_scripted(req, scripted)
            elif self._serve_resource_metadata(req) or not self._authorized(req):
                return
            else:
                if self.faults.header_delay and self.faults.delay_method in (
                        None, req.rpc_method):
                    self._wait_watching(self.faults.header_delay, req)
                self._dispatch(req)
        except (_Closed, OSError):
            self.close_connection = True
        except Exception as exc:  # a bug of ours (or an input we cannot parse): surface it
            with self.owner._lock:
                self.owner.errors.append(f"{req.method} {req.path}: {exc!r}")
            self.close_connection = True
            raise

    def _wait_watching(self, seconds: float, req: RecordedRequest) -> None:
        """Hold the reply back, noticing when the client closes the connection meanwhile."""
        deadline = time.monotonic() + seconds
        sock = self.connection
        while (left := deadline - time.monotonic()) > 0:
            self.owner._wait(min(left, 0.02))
            try:
                sock.setblocking(False)
                try:
                    gone = sock.recv(1, socket.MSG_PEEK) == b""
                finally:
                    sock.setblocking(True)
            except BlockingIOError:
                gone = False
            except OSError:
                gone = True
            if gone:
                with self.owner._lock:
                    self.owner.disconnected.append(req)
                raise _Closed("client closed the connection before the headers")

    def _start(self, status: int, headers: list[tuple[str, str]] | None = None,
               content_type: str | None = None, length: int | None = None) -> None:
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)
        for name, value in headers or []:
            self.send_header(name, value)
        own = {name.lower() for name, _ in headers or []}
        for name, value in self.faults.response_headers.items():
            if name.lower() not in own:  # the reply's own value wins
                self.send_header(name, value)
        if length is None:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(length))
        self.end_headers()
        self.wfile.flush()

    def _send(self, status: int, body: bytes = b"", content_type: str | None = None,
              headers: list[tuple[str, str]] | None = None) -> None:
        self._start(status, headers, content_type, len(body))
        self.wfile.write(body)
        self.wfile.flush()

    def _send_json(self, status: int, message: Any,
                   headers: list[tuple[str, str]] | None = None) -> None:
        self._send(status, _dumps(message), "application/json", headers)

    def _chunk(self, data: bytes) -> None:
        if data:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

    def _end_chunks(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _drop(self) -> None:
        """Drop the connection: abruptly (mid-chunk) or with a clean end of body."""
        with self.owner._lock:
            self.owner.drops.append(time.monotonic())
        if self.faults.drop_style == "eof":
            self._end_chunks()
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)
        raise _Closed("dropped on purpose")

    def _sse_headers(self, headers: list[tuple[str, str]] | None = None) -> None:
        self._start(200, [("Cache-Control", "no-cache"), ("X-Accel-Buffering", "no")]
                    + (headers or []), "text/event-stream")

    # ---- scripted replies and auth -------------------------------------------------

    def _send_scripted(self, req: RecordedRequest, item: Scripted) -> None:
        if item.delay:
            self._wait_watching(item.delay, req)
        if item.hangup:
            raise _Closed("scripted hang-up")
        body = item.body(req) if callable(item.body) else (item.body or b"")
        if item.sse_events is not None:
            self._start(item.status, item.headers, item.content_type or "text/event-stream")
            events = item.sse_events(req) if callable(item.sse_events) else item.sse_events
            for event in events:
                self._chunk(event.encode())
            self._end_chunks()
            return
        if item.oversize:
            self._send_oversized(req, item)
            return
        self._send(item.status, body, item.content_type, item.headers)

    def _send_oversized(self, req: RecordedRequest, item: Scripted) -> None:
        """Stream a result padded to ``item.oversize`` bytes, as JSON or as one SSE event."""
        sse = (item.content_type or "").startswith("text/event-stream")
        head = b'{"jsonrpc":"2.0","id":' + _dumps(req.rpc_id) + b',"result":{"pad":"'
        tail = b'"}}'
        prefix, suffix = (b"data: ", b"\n\n") if sse else (b"", b"")
        self._start(200, item.headers, item.content_type or "application/json")
        self._chunk(prefix + head)
        block = b"x" * 65536
        remaining = item.oversize
        while remaining > 0:
            self._chunk(block[:remaining])
            remaining -= len(block)
        self._chunk(tail + suffix)
        self._end_chunks()

    def _serve_resource_metadata(self, req: RecordedRequest) -> bool:
        """Answer a GET for RFC 9728 metadata when ``faults.resource_metadata`` is set."""
        metadata = self.faults.resource_metadata
        if metadata is None or req.method != "GET" or not urlsplit(req.path).path.startswith(
                "/.well-known/oauth-protected-resource"):
            return False
        self._send_json(200, metadata)
        return True

    def _authorized(self, req: RecordedRequest) -> bool:
        faults = self.faults
        if (faults.require_authorization is not None and
                req.header("Authorization") != faults.require_authorization) or (
                faults.token_validator is not None and
                not faults.token_validator(req.header("Authorization"))):
            self._send(401, b"", None, [("WWW-Authenticate", v) for v in faults.www_authenticate])
            return False
        if faults.dpop_nonce is not None:
            proof = req.header("DPoP") or ""
            if _jwt_claims(proof).get("nonce") != faults.dpop_nonce and proof != faults.dpop_nonce:
                self._send(401, b"", None, [
                    ("WWW-Authenticate", 'DPoP error="use_dpop_nonce", '
                                         'error_description="Resource server requires nonce"'),
                    ("DPoP-Nonce", faults.dpop_nonce)])
                return False
        return True

    # ---- routing ---------------------------------------------------------------------

    def _dispatch(self, req: RecordedRequest) -> None:
        era = self.faults.era
        if era == "sse2024":
            self._serve_sse2024(req)
            return
        if req.method == "POST":
            message = req.json
            if message is None:
                self._send_json(400, _error(None, -32700, "Parse error"))
            elif (era != "legacy" and self._is_modern(message, req)) or era == "modern":
                self._serve_modern(req, message)
            else:
                self._serve_legacy_post(req, message)
        elif era == "modern":
            self._send(405, b"", None, [("Allow", "POST")])
        elif req.method == "GET":
            self._serve_legacy_get(req)
        else:
            self._serve_delete(req)

    @staticmethod
    def _is_modern(message: Any, req: RecordedRequest) -> bool:
        if req.header("MCP-Protocol-Version") == MODERN_VERSION:
            return True
        if not isinstance(message, dict):
            return False
        meta = (message.get("params") or {}).get("_meta") or {}
        return isinstance(meta, dict) and PROTOCOL_VERSION_KEY in meta

    # ---- legacy Streamable HTTP ------------------------------------------------------

    def _session_error(self, req: RecordedRequest, method: str | None) -> bool:
        """Apply the session rules; answer and return True when the request is refused."""
        if not self.faults.stateful:
            return False
        owner, faults = self.owner, self.faults
        sid = req.header("Mcp-Session-Id")
        if method == "initialize" and sid is None:
            return False
        if sid is None:
            self._send_json(400, _error(None, INVALID_REQUEST, "Bad Request: Missing session ID"))
            return True
        with owner._lock:
            known = sid in owner._sessions
            if known:
                owner._sessions[sid] += 1
                served = owner._sessions[sid]
                due = faults.expire_times > 0 and (
                    (faults.expire_session_after is not None
                     and served > faults.expire_session_after)
                    or (faults.expire_method is not None and method == faults.expire_method))
                if due:
                    faults.expire_times -= 1
                    del owner._sessions[sid]
                    known = False
        if not known:
            status, code, text = faults.lost_session_reply
            self._send_json(status, _error(None, code, text))
            return True
        return False

    def _serve_legacy_post(self, req: RecordedRequest, message: Any) -> None:
        if isinstance(message, list):  # a 2025-03-26 batch: answer as one JSON array
            if self._session_error(req, None):
                return
            replies = [self._legacy_reply(req, m, None) for m in message if "method" in m
                       and "id" in m]
            if replies:
                self._send_json(200, [r for r, _ in replies])
            else:
                self._send(202)
            return
        method = message.get("method")
        if self._session_error(req, method):
            return
        if method is None or "id" not in message:  # a notification or a response
            self._send(202)
            return
        extra: list[tuple[str, str]] = []
        if method == "initialize" and self.faults.stateful:
            sid = uuid.uuid4().hex
            with self.owner._lock:
                self.owner._sessions[sid] = 0
            extra.append(("Mcp-Session-Id", sid))
        if method == self.faults.answer_on_get_first:
            reply, _ = self._legacy_reply(req, message, None)
            self.owner.push_written(reply)
            self.owner._wait(ANSWER_FIRST_HOLD)
            self._send(202, b"", None, extra)
            return
        if self._drop_due(method):
            self._legacy_drop(req, message)
            return
        if self.faults.reply == "sse":
            stream = self.owner._new_stream()
            self._sse_headers(extra)
            self._run_on_stream(stream, req, message, attached=True)
            return
        reply, _ = self._legacy_reply(req, message, None)
        self._send_json(200, reply, extra)

    def _legacy_reply(self, req: RecordedRequest, message: dict[str, Any],
                      emit: Callable[[dict[str, Any]], None] | None) -> tuple[Any, None]:
        method, params, rid = message["method"], message.get("params") or {}, message["id"]
        if method == "initialize":
            asked = params.get("protocolVersion")
            version = asked if asked in LEGACY_VERSIONS else LEGACY_VERSIONS[0]
            return {"jsonrpc": "2.0", "id": rid, "result": {
                "protocolVersion": version, "serverInfo": SERVER_INFO,
                "capabilities": {"tools": {"listChanged": False}, "logging": {},
                                 "resources": {"subscribe": True}}}}, None
        if method in ("ping", "logging/setLevel", "resources/subscribe",
                      "resources/unsubscribe"):
            return {"jsonrpc": "2.0", "id": rid, "result": {}}, None
        if method == "resources/list":
            return {"jsonrpc": "2.0", "id": rid, "result": {"resources": [
                {"uri": "memo://hello", "name": "hello", "mimeType": "text/plain"}]}}, None
        if method == "resources/read":
            return {"jsonrpc": "2.0", "id": rid, "result": {"contents": [
                {"uri": params.get("uri"), "mimeType": "text/plain", "text": "hello"}]}}, None
        return self._common_reply(message, emit, modern=False), None

    def _common_reply(self, message: dict[str, Any],
                      emit: Callable[[dict[str, Any]], None] | None, modern: bool) -> Any:
        method, params, rid = message["method"], message.get("params") or {}, message["id"]
        meta = {SERVER_INFO_KEY: SERVER_INFO} if modern else None
        if method == "tools/list":
            res: dict[str, Any] = {"tools": TOOLS}
            if modern:
                res.update(resultType="complete", ttlMs=0, cacheScope="private", _meta=meta)
            return {"jsonrpc": "2.0", "id": rid, "result": res}
        if method == "tools/call":
            res = self._call_tool(params, emit)
            if "error" in res:
                return {"jsonrpc": "2.0", "id": rid, "error": res["error"]}
            if modern:
                res.update(resultType="complete", _meta=meta)
            return {"jsonrpc": "2.0", "id": rid, "result": res}
        return _error(rid, METHOD_NOT_FOUND, f"Method not found: {method}")

    def _call_tool(self, params: dict[str, Any],
                   emit: Callable[[dict[str, Any]], None] | None) -> dict[str, Any]:
        name, args = params.get("name"), params.get("arguments") or {}
        if name == "echo":
            return _text(str(args.get("text", "")))
        if name == "add":
            total = args.get("a", 0) + args.get("b", 0)
            return {**_text(json.dumps({"sum": total})), "structuredContent": {"sum": total}}
        if name == "lookup":
            return _text(f"{args.get('region')}:{args.get('query', '')}")
        if name == "slow":
            seconds, steps = float(args.get("seconds", 0)), max(1, int(args.get("steps", 1)))
            token = (params.get("_meta") or {}).get("progressToken")
            for i in range(1, steps + 1):
                self.owner._wait(seconds / steps)
                if token is not None and emit is not None:
                    emit({"jsonrpc": "2.0", "method": "notifications/progress",
                          "params": {"progressToken": token, "progress": i, "total": steps,
                                     "message": f"step {i}/{steps}"}})
            return _text(f"slept {seconds}")
        return {"error": {"code": INVALID_PARAMS, "message": f"Unknown tool: {name}"}}

    def _drop_due(self, method: str) -> bool:
        faults = self.faults
        with self.owner._lock:
            if faults.drop and faults.drop_times > 0 and faults.drop_method in (None, method):
                faults.drop_times -= 1
                return True
        return False

    def _legacy_drop(self, req: RecordedRequest, message: dict[str, Any]) -> None:
        """Drop the POST's stream; with "after_id" the call still completes for a resume."""
        if self.faults.drop == "before_id":
            self._sse_headers()
            self._chunk(_sse_event(_dumps({"jsonrpc": "2.0", "method": "notifications/message",
                                           "params": {"level": "info", "data": "dropping"}})))
            self._drop()
        stream = self.owner._new_stream()
        self._sse_headers()
        event_id = f"{stream.id}-0"
        with stream.cond:
            stream.events.append((event_id, b""))
        self._chunk(_sse_event(b"", event_id, retry=self.faults.retry_ms))
        try:
            self._drop()
        finally:
            self._run_on_stream(stream, req, message, attached=False)

    def _run_on_stream(self, stream: _Stream, req: RecordedRequest, message: dict[str, Any],
                       attached: bool) -> None:
        """Run a request, storing each event on ``stream`` and writing it while attached."""
        live = [attached]

        def emit(msg: dict[str, Any]) -> None:
            data = _dumps(msg)
            with stream.cond:
                event_id = f"{stream.id}-{len(stream.events)}"
                stream.events.append((event_id, data))
                stream.cond.notify_all()
            if live[0]:
                try:
                    self._chunk(_sse_event(data, event_id if self.faults.sse_priming else None))
                except OSError:
                    live[0] = False  # a legacy disconnect is not a cancellation

        if attached and self.faults.sse_priming:
            event_id = f"{stream.id}-0"
            with stream.cond:
                stream.events.append((event_id, b""))
            self._chunk(_sse_event(b"", event_id, retry=self.faults.retry_ms))
        if message["method"] == "tools/call":
            for extra in list(self.faults.stream_messages):
                emit(extra)
        reply, _ = self._legacy_reply(req, message, emit)
        emit(reply)
        with stream.cond:
            stream.done = True
            stream.cond.notify_all()
        if live[0]:
            self._end_chunks()
        else:
            self.close_connection = True

    def _serve_legacy_get(self, req: RecordedRequest) -> None:
        if self._session_error(req, None):
            return
        last = req.header("Last-Event-ID")
        if last is not None:
            self._resume(last)
        elif not self.faults.get_stream:
            self._send(405, b"", None, [("Allow", "POST, DELETE")])
        else:
            self._standalone_stream()

    def _resume(self, last: str) -> None:
        """Replay a stream's events after ``last`` and wait for the rest, then end it."""
        faults, owner = self.faults, self.owner
        with owner._lock:
            fail = faults.resume_fail_times > 0
            if fail:
                faults.resume_fail_times -= 1
        if fail:
            self._send(503, b"", None, [("Retry-After", "0")])
            return
        stream = owner._find_stream(last)
        if stream is None:
            self._send_json(404, _error(None, INVALID_REQUEST, "Unknown event id"))
            return
        self._sse_headers()
        sent = next((i + 1 for i, (eid, _) in enumerate(stream.events) if eid == last), 0)
        if stream.standalone:
            with stream.cond:
                missed = stream.events[sent:]
            for event_id, data in missed:
                self._chunk(_sse_event(data, event_id))
            self._standalone_loop(stream)
            return
        while True:
            with stream.cond:
                while len(stream.events) <= sent and not stream.done \
                        and not owner._closing.is_set():
                    stream.cond.wait(0.1)
                pending = stream.events[sent:]
                finished = stream.done or owner._closing.is_set()
            for event_id, data in pending:
                self._chunk(_sse_event(data, event_id))
            sent += len(pending)
            if finished and sent >= len(stream.events):
                break
        self._end_chunks()

    def _standalone_stream(self) -> None:
        stream = self.owner._new_stream()
        stream.standalone = True
        with stream.cond:
            stream.events.append((f"{stream.id}-0", b""))
        self._sse_headers()
        if self.faults.sse_priming:
            self._chunk(_sse_event(b"", f"{stream.id}-0", retry=self.faults.retry_ms))
        self._standalone_loop(stream)

    def _standalone_loop(self, stream: _Stream) -> None:
        """Deliver pushed messages (and keep-alives) until the server closes or drops it."""
        owner, delivered = self.owner, 0
        last_beat = time.monotonic()
        while not owner._closing.is_set():
            with owner._push_cond:
                if not owner._push:
                    owner._push_cond.wait(0.05)
                data = owner._push.popleft() if owner._push else None
            if data is not None:
                with stream.cond:
                    event_id = f"{stream.id}-{len(stream.events)}"
                    stream.events.append((event_id, data))
                self._chunk(_sse_event(data, event_id))
                delivered += 1
                with owner._push_cond:
                    owner._pushes_written += 1
                    owner._push_cond.notify_all()
                with owner._lock:
                    drop = self.faults.drop_get_after == delivered
                    if drop:
                        self.faults.drop_get_after = None
                if drop:
                    self._drop()
            interval = self.faults.keepalive_interval
            if interval and time.monotonic() - last_beat >= interval:
                self._chunk(b": keep-alive\n\n")
                last_beat = time.monotonic()
        self.close_connection = True

    def _serve_delete(self, req: RecordedRequest) -> None:
        status = self.faults.delete_status
        if status < 300:
            sid = req.header("Mcp-Session-Id")
            with self.owner._lock:
                self.owner._sessions.pop(sid or "", None)
        self._send(status)

    # ---- modern Streamable HTTP ------------------------------------------------------

    def _serve_modern(self, req: RecordedRequest, message: Any) -> None:
        if not isinstance(message, dict) or "method" not in message:
            self._send_json(400, _error(None, INVALID_REQUEST, "Expected one request"))
            return
        if "id" not in message:
            self._send(202)
            return
        rid, method = message["id"], message["method"]
        if method == "initialize":  # a legacy client: name the versions we speak
            asked = (message.get("params") or {}).get("protocolVersion")
            self._send_json(400, {"jsonrpc": "2.0", "id": rid, "error": {
                "code": UNSUPPORTED_VERSION, "message": "Unsupported protocol version",
                "data": {"supported": self.faults.modern_versions, "requested": asked}}})
            return
        problem = self._modern_problem(req, message)
        if problem is not None:
            status, error = problem
            self._send_json(status, {"jsonrpc": "2.0", "id": rid, "error": error})
            return
        if method == "server/discover":
            self._send_json(200, {"jsonrpc": "2.0", "id": rid, "result": {
                "resultType": "complete", "supportedVersions": self.faults.modern_versions,
                "capabilities": {"tools": {"listChanged": False}},
                "instructions": "fault server", "ttlMs": 0, "cacheScope": "private",
                "_meta": {SERVER_INFO_KEY: SERVER_INFO}}})
            return
        if method not in ("tools/list", "tools/call"):
            self._send_json(404, _error(rid, METHOD_NOT_FOUND, f"Method not found: {method}"))
            return
        drop = self._drop_due(method)
        if self.faults.reply == "json" and not drop:
            self._send_json(200, self._common_reply(message, None, modern=True))
            return
        self._sse_headers()

        def emit(msg: dict[str, Any]) -> None:
            try:
                self._chunk(_sse_event(_dumps(msg)))
            except OSError as exc:  # closing the stream cancels the request (modern rule)
                with self.owner._lock:
                    self.owner.cancelled.append(rid)
                raise _Closed("client closed the stream") from exc

        if drop:
            emit({"jsonrpc": "2.0", "method": "notifications/message",
                  "params": {"level": "info", "data": "dropping"}})
            self._drop()
        if method == "tools/call":
            for extra in list(self.faults.stream_messages):
                emit(extra)
        emit(self._common_reply(message, emit, modern=True))
        self._end_chunks()

    def _modern_problem(self, req: RecordedRequest,
                        message: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
        faults = self.faults
        params = message.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        if not isinstance(meta, dict) or PROTOCOL_VERSION_KEY not in meta \
                or CLIENT_CAPABILITIES_KEY not in meta:
            return 400, {"code": INVALID_PARAMS, "message": "Missing required _meta fields"}
        version = meta[PROTOCOL_VERSION_KEY]
        if version not in faults.modern_versions:
            return 400, {"code": UNSUPPORTED_VERSION, "message": "Unsupported protocol version",
                         "data": {"supported": faults.modern_versions, "requested": version}}
        if faults.check_modern_headers:
            mismatch = self._header_mismatch(req, message, version)
            if mismatch:
                return 400, {"code": HEADER_MISMATCH, "message": mismatch}
        capability = faults.required_capability
        if capability and message["method"] == "tools/call" and \
                capability not in (meta.get(CLIENT_CAPABILITIES_KEY) or {}):
            return 400, {"code": MISSING_CAPABILITY, "message": "Missing client capability",
                         "data": {"requiredCapabilities": {capability: {}}}}
        return None

    @staticmethod
    def _header_mismatch(req: RecordedRequest, message: dict[str, Any],
                         version: str) -> str | None:
        method, params = message["method"], message.get("params") or {}
        if req.header("MCP-Protocol-Version") != version:
            return "MCP-Protocol-Version header does not match _meta"
        if req.header("Mcp-Method") != method:
            return "Mcp-Method header does not match the body"
        name = params.get("uri") if method == "resources/read" else params.get("name")
        if method in ("tools/call", "prompts/get", "resources/read") and \
                _decode_header(req.header("Mcp-Name")) != name:
            return "Mcp-Name header does not match the body"
        if method == "tools/call":
            tool = next((t for t in TOOLS if t["name"] == name), None)
            props = tool["inputSchema"]["properties"] if tool else {}
            args = params.get("arguments") or {}
            for prop, schema in props.items():
                header = schema.get("x-mcp-header")
                if header and args.get(prop) is not None and \
                        _decode_header(req.header(f"Mcp-Param-{header}")) != _header_text(
                            args[prop]):
                    return f"Mcp-Param-{header} header does not match the body"
        return None

    # ---- 2024-11-05 HTTP+SSE ---------------------------------------------------------

    def _serve_sse2024(self, req: RecordedRequest) -> None:
        owner = self.owner
        query = parse_qs(urlsplit(req.path).query)
        if req.method == "GET":
            session = uuid.uuid4().hex
            queue: deque[bytes] = deque()
            with owner._lock:
                owner._sse2024[session] = queue
            endpoint = self.faults.endpoint or f"/messages?session_id={session}"
            self._sse_headers()
            self._chunk(_sse_event(endpoint.encode(), event="endpoint"))
            while not owner._closing.is_set():
                with owner._push_cond:
                    if not queue:
                        owner._push_cond.wait(0.05)
                    data = queue.popleft() if queue else None
                if data is not None:
                    self._chunk(_sse_event(data, event="message"))
            self.close_connection = True
            return
        session = (query.get("session_id") or [""])[0]
        with owner._lock:
            queue_or_none = owner._sse2024.get(session)
        if req.method != "POST" or queue_or_none is None:
            self._send(405 if queue_or_none is None and req.method == "POST" else 404)
            return
        message = req.json
        self._send(202)
        if isinstance(message, dict) and "method" in message and "id" in message:
            reply, _ = self._legacy_reply(req, message, owner.push)
            owner.push(reply)


def _error(rid: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}


def _text(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": False}


def _header_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _decode_header(value: str | None) -> str | None:
    """Undo the ``=?base64?…?=`` encoding of an Mcp-Name / Mcp-Param value."""
    if value is not None and value.startswith("=?base64?") and value.endswith("?="):
        try:
            return base64.b64decode(value[9:-2], validate=True).decode()
        except (ValueError, binascii.Error):
            return None
    return value


def iter_sse(raw: bytes) -> Iterator[dict[str, str]]:
    """Split an SSE body into events (fields by name) — for this module's own tests."""
    for block in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        if not block.strip():
            continue
        event: dict[str, str] = {}
        for line in block.decode().split("\n"):
            if line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            event[name] = event[name] + "\n" + value if name == "data" and name in event \
                else value
        yield event


__all__ = [
    "MODERN_VERSION",
    "FaultServer",
    "Faults",
    "RecordedRequest",
    "Scripted",
    "dpop_nonce_challenge",
    "insufficient_scope",
    "iter_sse",
    "redirect",
    "result",
    "rpc_error",
    "unauthorized",
]
