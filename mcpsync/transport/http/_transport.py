"""The Streamable HTTP transport (both eras) behind the session engine's *pull* interface.

The session engine (``mcpsync/session.py``) reads a transport with ``receive(timeout)`` and
writes with ``send``/``send_bytes``; :class:`HttpTransport` gives it exactly that shape, so
timeouts, cancellation, progress and Ctrl-C work as on stdio:

- every request the session writes becomes one POST, run on a small pool of daemon threads
  ``mcpsync-http-<name>-<k>`` (so ``send`` never blocks on the network); what comes back
  (a JSON body, or each SSE ``message`` event) is decoded with :func:`mcpsync.jsonrpc.parse`
  and queued for ``receive()``;
- an exchange that ends in an error no JSON-RPC message expresses (a 5xx, an expired
  session, an auth failure) queues a :class:`~mcpsync.transport._failed.CallFailed`;
- the transport watches the traffic it carries, so the session needs no HTTP knowledge: the
  ``initialize`` answer gives the session id and version, ``logging/setLevel`` and
  ``resources/subscribe`` are remembered for a session re-created after a 404, ``tools/list``
  answers give the tool definitions for the modern ``Mcp-Param-*`` headers, and a modern
  ``_meta`` in a request's params selects the modern headers and cancellation.

Legacy (2025-03-26 … 2025-11-25): ``Mcp-Session-Id`` and ``MCP-Protocol-Version`` on every
request after ``initialize``, the GET stream on ``mcpsync-http-get-<name>`` (answered before
``connect()`` returns and before a request retried after a 404, at most 2 s), a 404 re-creates
the session once (shared by concurrent 404s) and retries transparently, dropped streams resume
with ``Last-Event-ID``, ``DELETE`` on close. Modern (2026-07-28): stateless POSTs with the
``Mcp-*`` headers, cancellation by closing the stream, a broken stream re-issued once with a
new id when that is safe. Behaviour: ``docs/http.md`` and ``docs/architecture.md``.

Thread contract: ``send``/``send_bytes``/``wake``/``close`` are safe from any thread;
``receive`` is called by one thread at a time; ``close`` is idempotent and bounded.
"""

from __future__ import annotations

import contextlib
import http.client
import itertools
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

import requests
import urllib3.exceptions

from mcpsync import jsonrpc
from mcpsync.auth_hooks import AuthHooks
from mcpsync.errors import (
    ConnectFailed,
    ConnectionLost,
    MCPError,
    ProtocolError,
    SessionExpired,
    TransportError,
)
from mcpsync.jsonrpc import MAX_FRAME_BYTES, Batch, Message, ParseError, RequestId, StreamError
from mcpsync.protocol import META_PROTOCOL_VERSION, describe_call
from mcpsync.transport.base import CallFailed, TransportClosed, safe_name
from mcpsync.transport.http._auth import AuthFlow, redact_url, status_error
from mcpsync.transport.http._conn import (
    Abortable,
    close_session,
    connect_failure,
    iter_chunks,
    media_type,
    new_session,
    read_body,
    tracking,
)
from mcpsync.transport.http._headers import invalid_header_reason, modern_headers
from mcpsync.transport.http._redirects import follow
from mcpsync.transport.http._reply import sort_json_reply
from mcpsync.transport.http._session_lost import says_session_lost
from mcpsync.transport.http._sse2024 import SseChannel
from mcpsync.transport.http._watchdog import Watchdog
from mcpsync.transport.sse import SSEDecoder

__all__ = ["HttpTransport"]

logger = logging.getLogger("mcpsync.transport.http")

CONNECT_TIMEOUT: Final = 10.0
ONEWAY_TIMEOUT: Final = (10.0, 10.0)     # a POSTed notification or response
DELETE_TIMEOUT: Final = (2.0, 2.0)
RETRY_DELAY: Final = 0.5                 # the one retry of a connection error
RESUME_DEFAULT: Final = 1.0              # first resumption wait without a server `retry`
RESUME_FACTOR: Final = 1.5
RESUME_CAP: Final = 30.0
RESUME_ATTEMPTS: Final = 5
MAX_WORKERS: Final = 64
JOIN_TIMEOUT: Final = 1.0
INTERNAL_TIMEOUT: Final = 30.0           # the transport's own requests (a re-initialize)
GET_OPEN_WAIT: Final = 2.0               # how long requests wait for the GET stream's answer
ACCEPTED_WAIT: Final = 30.0              # a legacy 202 to a request: its answer on the GET

ACCEPT_POST: Final = "application/json, text/event-stream"
_JSON: Final = "application/json"
_SSE: Final = "text/event-stream"
_RETRYABLE: Final = frozenset({"server/discover", "tools/list", "prompts/list",
                               "resources/list", "resources/templates/list",
                               "resources/read"})
_NETWORK_ERRORS: Final = (requests.RequestException, urllib3.exceptions.HTTPError, OSError,
                          http.client.HTTPException)
_LISTEN: Final = "subscriptions/listen"
LISTEN_FIRST: Final = 1.0                # listen reconnects: 1 s, x1.5, capped at 30 s
_WAKE: Final = object()
_EOF: Final = object()
_NONE_YET: Final = object()


class _Exchange(Abortable):
    """One JSON-RPC request on its way: the POST, its stream, resumption or re-issue."""

    __slots__ = ("answered", "cancelled", "decoder", "frame", "id", "internal", "key",
                 "message", "method", "modern", "reissued", "result", "retried_session",
                 "session_id", "settled", "strays", "wire_id")

    def __init__(self, message: Message, frame: bytes, *, internal: bool = False) -> None:
        super().__init__()
        assert message.id is not None
        self.message = message
        self.frame = frame
        self.id: RequestId = message.id
        self.wire_id: RequestId = message.id
        self.key = message.id.key
        self.method = message.method or ""
        params = message.params
        meta = params.get("_meta") if isinstance(params, dict) else None
        self.modern = isinstance(meta, dict) and META_PROTOCOL_VERSION in meta
        self.internal = internal
        self.cancelled = False
        self.settled = False          # its response (or failure) was delivered
        self.reissued = False
        self.retried_session = False
        self.strays = 0               # responses to other requests on this POST's stream
        self.session_id: str | None = None
        self.decoder: SSEDecoder | None = None
        self.result: Message | None = None   # internal exchanges keep their answer here
        self.answered = threading.Event()     # internal, HTTP+SSE: the answer arrived


class _ListenDropped(Exception):
    """Internal: a ``subscriptions/listen`` stream broke; it is reopened on its schedule."""


class _Workers:
    """Daemon threads ``mcpsync-http-<name>-<k>``, started on demand up to MAX_WORKERS."""

    def __init__(self, safe: str) -> None:
        self._safe = safe
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._busy = 0
        self._stopped = False

    def submit(self, job: Callable[[], None]) -> bool:
        with self._lock:
            if self._stopped:
                return False
            self._busy += 1
            if self._busy > len(self._threads) and len(self._threads) < MAX_WORKERS:
                thread = threading.Thread(
                    target=self._run, name=f"mcpsync-http-{self._safe}-{len(self._threads)}",
                    daemon=True)
                self._threads.append(thread)
                thread.start()
        self._jobs.put(job)
        return True

    def _run(self) -> None:
        jobs = self._jobs
        while True:
            job = jobs.get()
            if job is None:
                return
            try:
                job()
            except Exception:  # a bug: never let a worker die silently
                logger.error("an HTTP worker job failed", exc_info=True)
            finally:
                with self._lock:
                    self._busy -= 1

    def stop(self, timeout: float) -> None:
        with self._lock:
            self._stopped = True
            threads = list(self._threads)
        for _ in threads:
            self._jobs.put(None)
        deadline = time.monotonic() + timeout
        me = threading.current_thread()
        for thread in threads:
            if thread is not me:
                thread.join(max(0.0, deadline - time.monotonic()))


def _visible_ascii(value: str) -> bool:
    return bool(value) and all(0x21 <= ord(c) <= 0x7E for c in value)


class HttpTransport:
    """An MCP server at ``url`` over Streamable HTTP, as a pull transport for ``Session``.

    ``session``: a caller's ``requests.Session`` used as given (never remounted or closed);
    otherwise we create one with a 64-connection pool and close it in :meth:`close`.
    ``headers``: static headers on every request; ``auth``: an :class:`AuthHooks` (see
    ``mcpsync.auth_hooks.make_auth``). ``max_frame_bytes`` bounds one JSON body or SSE event.
    """

    kind = "http"    # the session names its reader thread after it: mcpsync-http-reader-<name>

    def __init__(self, url: str, *, name: str, session: requests.Session | None = None,
                 headers: Mapping[str, str] | None = None, auth: AuthHooks | None = None,
                 max_frame_bytes: int = MAX_FRAME_BYTES, transport: str = "") -> None:
        self.url = url
        self.name = name
        self.pid: int | None = None
        self._safe = safe_name(name)
        self._owner_pid = os.getpid()
        self._own_http = session is None
        self._http = session if session is not None else new_session()
        self._auth = AuthFlow(auth, headers or {}, server=name)
        self._max = max_frame_bytes
        self.allow_batch = False
        self._rx: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._workers = _Workers(self._safe)
        self._watchdog = Watchdog(self._safe)
        self._inflight: dict[tuple[str, int | str], _Exchange] = {}
        self._closing = threading.Event()
        self._closed = False
        self._close_lock = threading.Lock()
        self._ids = itertools.count(1)
        # Legacy session state (learnt from the traffic).
        self._legacy = False
        self._session_id: str | None = None
        self._protocol_version: str | None = None
        self._init_params: dict[str, Any] | None = None
        self._log_level: str | None = None
        self._subscriptions: dict[str, None] = {}
        self._reinit_lock = threading.Lock()
        # Cleared while a new session is being created: requests wait for its id.
        self._session_ready = threading.Event()
        self._session_ready.set()
        self._get_thread: threading.Thread | None = None
        self._get_abort: Abortable | None = None
        self._get_wanted = False
        # The session id the last *answered* GET carried (any status, or an error): requests
        # wait for it to match the current session (see _await_get_stream).
        self._get_answered: object = _NONE_YET
        self._get_cond = threading.Condition()
        self._get_kick = threading.Event()   # wakes the GET loop's back-off (restart, close)
        self._listen_threads: list[threading.Thread] = []
        # Modern state.
        self._modern_version: str | None = None
        # The 2024-11-05 HTTP+SSE fallback (docs/http.md, "The 2024-11-05 HTTP+SSE transport").
        self._sse: SseChannel | None = None
        self._sse_broken = False
        self._sse_waiting: dict[tuple[str, int | str], _Exchange] = {}
        self._tools: dict[str, dict[str, Any]] = {}
        self._tools_known = False
        self._tools_lock = threading.RLock()
        # ServerConfig.transport: "sse" forces HTTP+SSE (opened here, so connect() fails
        # early), "streamable-http" never falls back to it.
        self._transport_kind = transport
        if transport == "sse":
            try:
                self._open_sse()
            except BaseException:
                self.close()
                raise

    # ------------------------------------------------------------------ pull interface

    @property
    def closed(self) -> bool:
        return self._closed

    def forked(self) -> bool:
        return os.getpid() != self._owner_pid

    def returncode(self) -> int | None:
        return None

    def wait_exit(self, timeout: float) -> int | None:
        return None

    def stderr_tail(self) -> str:
        return ""

    def stderr_excerpt(self) -> str:
        return ""

    def wake(self) -> None:
        self._rx.put(_WAKE)

    def receive(self, timeout: float | None) -> list[Any] | None:
        """Everything queued so far: ``[]`` on timeout or :meth:`wake`, ``None`` once closed.

        Raises :class:`StreamError` when the connection is gone for good.
        """
        rx = self._rx
        try:
            if timeout is None:
                item = rx.get()
            elif timeout > 0:
                item = rx.get(timeout=timeout)
            else:
                item = rx.get_nowait()
        except queue.Empty:
            return []
        out: list[Any] = []
        while True:
            if item is _EOF:
                rx.put(_EOF)  # sticky
                return out or None
            if isinstance(item, StreamError):
                rx.put(item)
                if out:
                    return out
                raise item
            if item is not _WAKE:
                out.append(item)
            try:
                item = rx.get_nowait()
            except queue.Empty:
                return out

    def send(self, message: Message) -> None:
        """Send one message (never blocks on the network, except ``notifications/initialized``,
        which must reach the server before the requests that follow it; in the legacy era it
        also waits, at most GET_OPEN_WAIT, for the GET stream's answer)."""
        self._dispatch(message, None)

    def send_bytes(self, frame: bytes) -> None:
        message = jsonrpc.parse(frame)
        assert isinstance(message, Message)
        self._dispatch(message, frame)

    # ------------------------------------------------------------------ outgoing traffic

    def _dispatch(self, message: Message, frame: bytes | None) -> None:
        if self._closed or self._closing.is_set():
            raise TransportClosed(f"the HTTP connection to server {self.name!r} is closed",
                                  server=self.name)
        if frame is None:
            frame = jsonrpc.serialize(message)
        method = message.method
        if method is not None and message.id is not None:
            self._note_request(message)
            ex = _Exchange(message, frame)
            self._inflight[ex.key] = ex
            if method == _LISTEN and ex.modern:
                self._start_listen(ex)
                return
            if not self._workers.submit(lambda: self._run_exchange(ex)):
                self._inflight.pop(ex.key, None)
                raise TransportClosed(f"the HTTP connection to server {self.name!r} is "
                                      "closed", server=self.name)
            return
        if method == "notifications/cancelled":
            self._cancel(message, frame)
            return
        if method == "notifications/initialized":
            self._post_oneway(frame, method)
            if self._legacy and self._sse is None:
                self._start_get_stream()
                self._await_get_stream()
            return
        self._workers.submit(lambda: self._post_oneway(frame, method or "response"))

    def _note_request(self, message: Message) -> None:
        """Remember what a re-created legacy session must restore."""
        method = message.method
        params = message.params if isinstance(message.params, dict) else {}
        if method == "initialize":
            self._legacy = True
            self._init_params = dict(params)
        elif method == "logging/setLevel":
            level = params.get("level")
            self._log_level = level if isinstance(level, str) else None
        elif method == "resources/subscribe":
            uri = params.get("uri")
            if isinstance(uri, str):
                self._subscriptions[uri] = None
        elif method == "resources/unsubscribe":
            uri = params.get("uri")
            if isinstance(uri, str):
                self._subscriptions.pop(uri, None)

    def _cancel(self, message: Message, frame: bytes) -> None:
        """The cancellation table: legacy POSTs the notification then closes the stream;
        modern closes the stream and sends nothing."""
        params = message.params if isinstance(message.params, dict) else {}
        rid = params.get("requestId")
        ex: _Exchange | None = None
        if isinstance(rid, (int, str)) and not isinstance(rid, bool):
            ex = self._inflight.get(RequestId.of(rid).key)
        if ex is not None:
            ex.cancelled = True
            ex.answered.set()   # ends a wait after a 202 (see _await_accepted)
        if ex is not None and ex.modern:
            ex.abort()
            return

        def post_then_close() -> None:
            self._post_oneway(frame, "notifications/cancelled")
            if ex is not None:
                ex.abort()
        self._workers.submit(post_then_close)

    # ------------------------------------------------------------------ HTTP plumbing

    def _request(self, verb: str, url: str, headers: dict[str, str], *, body: bytes | None,
                 timeout: Any, target: Abortable | None, rpc_method: str | None,
                 stream: bool = True) -> requests.Response:
        """One logical HTTP request through the auth flow and our redirect policy."""
        http = self._http

        def do_send(auth_headers: dict[str, str]) -> requests.Response:
            merged = {**auth_headers, **headers}

            def once(to: str) -> requests.Response:
                if target is not None:
                    if target.aborted:
                        raise requests.ConnectionError("the request was cancelled")
                    target.response = None   # a new hop or retry: its connection is live
                try:
                    response = http.request(verb, to, data=body, headers=merged,
                                            stream=stream, timeout=timeout,
                                            allow_redirects=False)
                except (ValueError, UnicodeError) as exc:
                    # requests reads a redirect's Location even with allow_redirects=False
                    # (for Response.next) and raises ValueError on one it cannot parse.
                    raise status_error(
                        f"{verb} {redact_url(to)}: the reply could not be parsed "
                        f"({type(exc).__name__}: {exc}); nothing more was sent",
                        status=None, url=to, server=self.name, method=rpc_method) from None
                if target is not None:
                    target.response = response
                return response
            return follow(once, url)

        if target is None:
            return self._auth.send(verb, url, do_send, rpc_method=rpc_method)
        with tracking(target):
            return self._auth.send(verb, url, do_send, rpc_method=rpc_method)

    def _legacy_headers(self, headers: dict[str, str]) -> str | None:
        sid = self._session_id
        if sid is not None:
            headers["Mcp-Session-Id"] = sid
        if self._protocol_version is not None:
            headers["MCP-Protocol-Version"] = self._protocol_version
        return sid

    def _post_oneway(self, frame: bytes, what: str) -> None:
        """POST a notification or a response: any 2xx is fine, a failure is a WARNING."""
        headers = {"Accept": ACCEPT_POST, "Content-Type": _JSON}
        url = self.url
        if self._sse is not None:
            url = self._sse.endpoint or url
        elif self._legacy:
            self._legacy_headers(headers)
        elif self._modern_version is not None:
            headers["MCP-Protocol-Version"] = self._modern_version
        try:
            response = self._request("POST", url, headers, body=frame,
                                     timeout=ONEWAY_TIMEOUT, target=None, rpc_method=what,
                                     stream=False)
        except (MCPError, *_NETWORK_ERRORS) as exc:
            if not self._closing.is_set():
                logger.warning("server %r: posting %s failed: %s", self.name, what, exc)
            return
        if not 200 <= response.status_code < 300:
            logger.warning("server %r: posting %s failed with HTTP %d", self.name, what,
                           response.status_code)
        response.close()

    # ------------------------------------------------------------------ one request

    def _run_exchange(self, ex: _Exchange) -> None:
        """Worker thread: run one request to its end; failures become ``CallFailed``."""
        try:
            self._exchange(ex)
        except MCPError as exc:
            self._fail(ex, self._in_context(ex, exc))
        except ValueError as exc:   # a header value that cannot be encoded: nothing sent
            self._fail(ex, exc)
        except _NETWORK_ERRORS as exc:
            self._fail(ex, self._network_error(ex, exc))
        finally:
            if not ex.internal and self._inflight.get(ex.key) is ex:
                del self._inflight[ex.key]

    def _describe(self, ex: _Exchange) -> str:
        return describe_call(ex.method, ex.message.params, self.name)

    def _in_context(self, ex: _Exchange, exc: MCPError) -> MCPError:
        """Make the error say what we were doing ("calling tool 'x' on server 'y': ..."),
        as every mcpsync error does (the auth flow and the redirect policy do not know)."""
        prefix = self._describe(ex)
        if not exc.message.startswith(prefix):
            exc.args = (f"{prefix}: {exc.message}", *exc.args[1:])
        if exc.server is None:
            exc.server = self.name
        if exc.method is None:
            exc.method = ex.method
        return exc

    def _fail(self, ex: _Exchange, error: BaseException) -> None:
        if ex.cancelled or ex.settled:
            return
        ex.settled = True
        if ex.internal:
            raise error
        self._rx.put(CallFailed(ex.id, error))

    def _exchange(self, ex: _Exchange) -> None:
        """POST (retrying a connection error once where allowed), then read the reply."""
        attempt = 0
        while True:
            if ex.cancelled or self._closing.is_set():
                return
            try:
                response = self._post(ex)
            except _NETWORK_ERRORS as exc:
                if ex.cancelled or self._closing.is_set():
                    return
                if attempt == 0 and ex.method in _RETRYABLE:
                    attempt += 1
                    logger.debug("server %r: %s failed (%s); retrying once", self.name,
                                 ex.method, exc)
                    if self._closing.wait(RETRY_DELAY):
                        return
                    continue
                error = self._network_error(ex, exc)
                if isinstance(error, ConnectFailed):
                    raise error from None   # the urllib3 chain says nothing more, in private names
                raise error from exc
            self._reply(ex, response)
            return

    def _network_error(self, ex: _Exchange, exc: BaseException) -> ConnectionLost:
        """The error a failed HTTP exchange raises: ``ConnectFailed`` when no connection was
        made (nothing was sent), else ``ConnectionLost`` (the server may have acted)."""
        reason = connect_failure(exc)
        if reason is not None:
            url = redact_url(self.url)
            return ConnectFailed(f"{self._describe(ex)}: could not connect to {url} "
                                 f"({reason}); is the server running there?", url=url,
                                 server=self.name, method=ex.method)
        return ConnectionLost(f"{self._describe(ex)}: the HTTP request failed: {exc}",
                              maybe_executed=True, server=self.name, method=ex.method)

    def _post(self, ex: _Exchange) -> requests.Response:
        if self._sse is not None:
            return self._post_sse(ex)
        headers = {"Accept": ACCEPT_POST, "Content-Type": _JSON}
        if ex.modern:
            headers.update(self._modern_request_headers(ex))
            if ex.method == _LISTEN:
                headers["Accept-Encoding"] = "identity"   # nothing may hold events back
        elif self._legacy and ex.method != "initialize":
            if not ex.internal and not self._session_ready.is_set():
                self._session_ready.wait(2 * INTERNAL_TIMEOUT)
            ex.session_id = self._legacy_headers(headers)
        # No read timeout: the session's deadline ends a request (cancelling closes the
        # stream). The transport's own requests (a re-initialize) are bounded here.
        read = INTERNAL_TIMEOUT if ex.internal else None
        return self._request("POST", self.url, headers, body=ex.frame,
                             timeout=(CONNECT_TIMEOUT, read), target=ex, rpc_method=ex.method)

    # ------------------------------------------------------------------ modern headers

    def _modern_request_headers(self, ex: _Exchange) -> dict[str, str]:
        params = ex.message.params if isinstance(ex.message.params, dict) else {}
        meta = params.get("_meta")
        version = str(meta[META_PROTOCOL_VERSION]) if isinstance(meta, dict) else ""
        self._modern_version = version
        tool: Any = None
        if ex.method == "tools/call":
            tool = self._tool_definition(params.get("name"), meta)
        headers = {"MCP-Protocol-Version": version}
        headers.update(modern_headers(ex.method, params, tool))
        return headers

    def _tool_definition(self, name: Any, meta: Any) -> Any:
        """The cached tool definition, fetching ``tools/list`` once if none is cached."""
        if not isinstance(name, str):
            return None
        if not self._tools_known and isinstance(meta, dict):
            with self._tools_lock:
                if not self._tools_known:
                    self._fetch_tools(meta)
        return self._tools.get(name)

    def _fetch_tools(self, meta: dict[str, Any]) -> None:
        """An internal ``tools/list`` (all pages) to learn the tools' header annotations.

        Tried once: a server that cannot list its tools is not asked again before every
        call (a -32020 answer asks again)."""
        try:
            tools = self._list_tools_internal(meta)
            if tools is not None:
                self._tools = tools
        finally:
            self._tools_known = True

    def _list_tools_internal(self, meta: dict[str, Any]) -> dict[str, dict[str, Any]] | None:
        cursor: Any = None
        tools: dict[str, dict[str, Any]] = {}
        for _page in range(100):
            params: dict[str, Any] = {"_meta": dict(meta)}
            params["_meta"].pop("progressToken", None)
            if cursor is not None:
                params["cursor"] = cursor
            try:
                answer = self._call_internal("tools/list", params)
            except (MCPError, *_NETWORK_ERRORS) as exc:
                logger.debug("server %r: fetching tools/list for the headers failed: %s",
                             self.name, exc)
                return None
            result = answer.result if answer.error is None else None
            if not isinstance(result, dict):
                return None
            for tool in result.get("tools") or ():
                if isinstance(tool, dict) and isinstance(tool.get("name"), str) \
                        and invalid_header_reason(tool) is None:
                    tools[tool["name"]] = tool
            cursor = result.get("nextCursor")
            if cursor is None:
                break
        return tools

    def _filter_tools(self, ex: _Exchange, message: Message) -> None:
        """A modern ``tools/list`` page: drop tools with invalid ``x-mcp-header``
        annotations (WARNING naming each), and cache the rest for the headers."""

        result = message.result
        if not isinstance(result, dict) or not isinstance(result.get("tools"), list):
            return
        kept = []
        for tool in result["tools"]:
            if not isinstance(tool, dict):
                kept.append(tool)
                continue
            reason = invalid_header_reason(tool)
            if reason is not None:
                logger.warning("server %r: dropping tool %r from tools/list: %s", self.name,
                               tool.get("name"), reason)
                continue
            kept.append(tool)
        if len(kept) != len(result["tools"]):
            message.result = {**result, "tools": kept}
        params = ex.message.params if isinstance(ex.message.params, dict) else {}
        with self._tools_lock:
            if params.get("cursor") is None:
                self._tools = {}
            for tool in kept:
                if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                    self._tools[tool["name"]] = tool
            self._tools_known = True

    # ------------------------------------------------------------------ replies

    def _reply(self, ex: _Exchange, response: requests.Response) -> None:
        status = response.status_code
        if self._sse is not None:
            self._sse_reply_status(ex, response)
            return
        if 200 <= status < 300:
            kind = media_type(response)
            if status == 202 or (kind == "" and response.headers.get("Content-Length") == "0"):
                response.close()
                if ex.modern or ex.internal:
                    raise status_error(f"{self._describe(ex)}: the server answered HTTP "
                                       f"{status} without a response", status=status,
                                       url=self.url, server=self.name, method=ex.method)
                self._await_accepted(ex)   # a non-compliant legacy server
                return
            if kind == _JSON:
                try:
                    self._json_reply(ex, response)
                except _NETWORK_ERRORS:
                    if not ex.modern or ex.cancelled or self._closing.is_set():
                        raise
                    self._reissue(ex)   # a broken modern response: the request is lost
                return
            if kind == _SSE:
                self._sse_reply(ex, response)
                return
            response.close()
            raise status_error(f"{self._describe(ex)}: the server answered HTTP {status} with "
                               f"Content-Type {kind or '(none)'!r}, expected {_JSON} or {_SSE}",
                               status=status, url=self.url, server=self.name, method=ex.method)
        if status == 404 and ex.session_id is not None:
            response.close()
            self._expired(ex, 404, "")
            return
        self._error_status(ex, response)

    def _await_accepted(self, ex: _Exchange) -> None:
        """A legacy 202 to a request: its answer can only come on the GET stream. Wait for
        it there at most ACCEPTED_WAIT seconds (whatever the call's timeout, ``math.inf``
        included), and fail the call at once when there is no GET stream to carry it."""
        thread = self._get_thread
        if thread is None or not thread.is_alive():
            self._fail(ex, TransportError(
                f"{self._describe(ex)}: the server answered HTTP 202 without a response, and "
                "it has no GET stream the response could come on", status=202, url=self.url,
                server=self.name, method=ex.method))
            return
        # An answer the GET stream carried before the 202 was read has set ``answered``
        # already (see _note_get_answer): the wait then ends at once.
        if ex.answered.wait(ACCEPTED_WAIT) or ex.cancelled or self._closing.is_set():
            return
        self._fail(ex, TransportError(
            f"{self._describe(ex)}: the server answered HTTP 202 without a response, and the "
            f"response did not come on its GET stream within {ACCEPTED_WAIT:g} s", status=202,
            url=self.url, server=self.name, method=ex.method))

    def _json_reply(self, ex: _Exchange, response: requests.Response) -> None:
        data = read_body(response, self._max, self._describe(ex))
        response.close()
        parsed: Message | Batch | ParseError
        try:
            parsed = jsonrpc.parse(data, allow_batch=self.allow_batch)
        except ParseError as exc:
            parsed = exc
        items, sent = sort_json_reply(parsed, ex.wire_id, data)
        answered = False
        for item in items:
            answered = self._deliver(ex, item) or answered
        if answered:
            return
        if ex.method == "server/discover":
            # Not a modern server (it would answer the probe): read as legacy.
            self._deliver(ex, jsonrpc.error(ex.wire_id, jsonrpc.METHOD_NOT_FOUND,
                                            f"HTTP {response.status_code} to server/discover "
                                            f"with {sent}"))
            return
        # The reply is complete and cannot answer this call any more: fail it now.
        self._fail(ex, ProtocolError(
            f"{self._describe(ex)}: the server's HTTP {response.status_code} JSON reply does "
            f"not answer this request: it sent {sent}", server=self.name, method=ex.method))

    def _error_status(self, ex: _Exchange, response: requests.Response) -> None:
        """A non-2xx reply: a JSON-RPC error in the body answers the call; otherwise the
        status decides (the era probe reads "legacy", the rest is a TransportError)."""
        status = response.status_code
        body = b""
        with contextlib.suppress(MCPError, *_NETWORK_ERRORS):
            body = read_body(response, self._max, self._describe(ex))
        response.close()
        answer: Message | None = None
        if body.strip().startswith((b"{", b"[")):
            try:
                parsed = jsonrpc.parse(body, allow_batch=True)
            except ParseError:
                parsed = None
            for item in (parsed if isinstance(parsed, list) else [parsed]):
                if isinstance(item, Message) and item.error is not None and (
                        item.id is None or item.id.key == ex.wire_id.key):
                    answer = item
                    break
        if answer is not None and ex.session_id is not None and not ex.internal \
                and says_session_lost(status, answer.error):
            self._expired(ex, status, str((answer.error or {}).get("message"))[:120])
            return
        if answer is not None:
            answer.id = ex.wire_id
            self._deliver(ex, answer)
            return
        if (ex.method == "initialize" and status in (400, 404, 405) and self._sse is None
                and self._transport_kind != "streamable-http"):
            self._fall_back_to_sse(ex, status)
            return
        if ex.method == "server/discover":
            # Not a modern server (it would answer with a JSON-RPC error): read as legacy.
            self._deliver(ex, jsonrpc.error(ex.wire_id, jsonrpc.METHOD_NOT_FOUND,
                                            f"HTTP {status} to server/discover"))
            return
        reason = response.reason or ""
        raise status_error(f"{self._describe(ex)}: the server answered HTTP {status} "
                           f"{reason}".rstrip(), status=status, url=self.url,
                           server=self.name, method=ex.method)

    def _deliver(self, ex: _Exchange, item: Message | ParseError) -> bool:
        """Queue one item that came back on ``ex``'s own POST (its body or its event stream);
        True when it was ``ex``'s response.

        What answers the POST of request N answers N only: a response carrying any other id
        is delivered to no one (see :meth:`_stray_response`). Requests the server makes of
        us and notifications are queued; the legacy GET stream, where any id may arrive,
        does not come through here.
        """
        if isinstance(item, Message) and item.method is None and item.id is not None \
                and item.id.key == ex.wire_id.key:
            if ex.cancelled:
                return True
            item.id = ex.id
            if ex.modern and ex.method == "tools/call" and item.error is not None \
                    and item.error.get("code") == jsonrpc.HEADER_MISMATCH \
                    and not ex.reissued and not ex.internal:
                return self._header_retry(ex)
            if item.error is None:
                if ex.method == "initialize":
                    if not self._adopt_initialize(ex, item):
                        return True
                elif ex.modern and ex.method == "tools/list":
                    self._filter_tools(ex, item)
            ex.settled = True
            if ex.internal:
                ex.result = item
            else:
                self._rx.put(item)
            return True
        if isinstance(item, Message) and item.method is None and item.id is not None:
            self._stray_response(ex, item)
            return False
        self._rx.put(item)
        return False

    def _stray_response(self, ex: _Exchange, item: Message) -> None:
        """A response to another request on ``ex``'s stream: handing it to that request's
        waiter would give it an answer the server sent elsewhere (a crossed answer), so it
        is dropped. ``ex`` keeps waiting for its own response on the stream (and fails as
        usual if the stream ends without it). Reported at WARNING once per request."""
        assert item.id is not None
        ex.strays += 1
        level = logging.WARNING if ex.strays == 1 else logging.DEBUG
        kind = "an error" if item.error is not None else "a result"
        logger.log(level, "%s: the server's event stream sent the response to another "
                   "request (id %s, not %s: %s); it is delivered to no one",
                   self._describe(ex), item.id.raw, ex.wire_id.raw, kind)

    def _header_retry(self, ex: _Exchange) -> bool:
        """-32020 on a modern ``tools/call``: re-fetch ``tools/list`` and send it again once."""
        logger.info("server %r rejected the headers of %s; re-fetching tools/list and "
                    "retrying once", self.name, self._describe(ex))
        params = ex.message.params if isinstance(ex.message.params, dict) else {}
        meta = params.get("_meta")
        with self._tools_lock:
            self._tools_known = False
            if isinstance(meta, dict):
                self._fetch_tools(meta)
        ex.reissued = True  # at most once
        self._exchange(ex)
        return True

    def _adopt_initialize(self, ex: _Exchange, item: Message) -> bool:
        """The ``initialize`` answer: the session id (visible ASCII) and the version."""
        response = ex.response
        sid = response.headers.get("Mcp-Session-Id") if response is not None else None
        if sid is not None and not _visible_ascii(sid):
            self._fail(ex, ProtocolError(
                f"{self._describe(ex)}: the server sent an Mcp-Session-Id that is not visible "
                f"ASCII: {sid!r:.80}", server=self.name, method=ex.method))
            return False
        self._session_id = sid
        result = item.result
        version = result.get("protocolVersion") if isinstance(result, dict) else None
        if isinstance(version, str):
            self._protocol_version = version
        self._legacy = True
        return True

    # ------------------------------------------------------------------ SSE

    def _sse_reply(self, ex: _Exchange, response: requests.Response) -> None:
        """Read a POST's event stream; a drop before the response resumes (legacy) or
        re-issues (modern)."""
        if ex.decoder is None:
            ex.decoder = SSEDecoder(max_event_bytes=self._max)
        done = self._read_events(ex, response, ex.decoder, ex)
        if done or ex.cancelled or self._closing.is_set():
            return
        self._dropped(ex, None)

    def _read_events(self, ex: _Exchange | None, response: requests.Response,
                     decoder: SSEDecoder, target: Abortable) -> bool:
        """Deliver each ``message`` event; True once ``ex``'s response arrived (the stream
        is then closed). Network errors, EOF and the watchdog return False; TransportError
        propagates."""
        watch = self._watchdog.watch(target)
        try:
            for chunk in iter_chunks(response):
                watch.seen(decoder.comments)
                for event in decoder.feed(chunk):
                    if not event.data or event.type != "message":
                        continue
                    try:
                        parsed = jsonrpc.parse(event.data, allow_batch=self.allow_batch)
                    except ParseError as exc:
                        self._rx.put(exc)
                        continue
                    items = parsed if isinstance(parsed, Batch) else [parsed]
                    final = False
                    for item in items:
                        if ex is not None:
                            final = self._deliver(ex, item) or final
                        else:
                            self._rx.put(item)
                            self._note_get_answer(item)
                    if final:
                        response.close()
                        return True
        except _NETWORK_ERRORS as exc:
            logger.debug("server %r: an event stream dropped: %s", self.name, exc)
        finally:
            self._watchdog.unwatch(watch)
            decoder.close()
            response.close()
        if watch.ended:
            logger.info("server %r: an event stream was silent for %.0f s; treating it as "
                        "dropped", self.name, watch.limit())
        return False

    def _note_get_answer(self, item: Message | ParseError) -> None:
        """A message on the GET stream: when it answers a request still in flight, that
        request is settled (the session has the answer) and a wait after a 202 ends.

        Why every request in flight, not only those already answered 202: a server that
        replies 202 may write the answer on the GET stream before the 202 itself reaches
        us; were the request registered only once the 202 is read, that answer would find
        no one, and the wait would run its whole bound and then fail an answered call."""
        if isinstance(item, Message) and item.method is None and item.id is not None:
            ex = self._inflight.get(item.id.key)
            if ex is not None and not ex.modern and ex.wire_id.key == item.id.key:
                ex.settled = True
                ex.answered.set()

    def _dropped(self, ex: _Exchange, cause: BaseException | None) -> None:
        """The stream ended before the response."""
        if ex.modern and ex.method == _LISTEN:
            raise _ListenDropped()
        if ex.modern:
            self._reissue(ex)
            return
        if ex.decoder is None or ex.decoder.last_event_id is None:
            raise ConnectionLost(f"{self._describe(ex)}: the server's event stream ended "
                                 "before the response (and gave no event id to resume from)",
                                 maybe_executed=True, server=self.name, method=ex.method)
        self._resume(ex)

    def _reissue(self, ex: _Exchange) -> None:
        """Modern: a broken stream loses the request; send it again once with a new id,
        unless it is a tool call that may not be safe to run twice."""
        if ex.reissued:
            raise ConnectionLost(f"{self._describe(ex)}: the response stream broke twice",
                                 maybe_executed=True, server=self.name, method=ex.method)
        if ex.method == "tools/call" and not self._safe_to_repeat(ex):
            raise ConnectionLost(
                f"{self._describe(ex)}: the response stream broke before the result; the "
                "tool may have run, and it is neither read-only nor idempotent, so it is not "
                "sent again (pass retry_on_drop=True to allow that)", maybe_executed=True,
                server=self.name, method=ex.method)
        ex.reissued = True
        new_id = RequestId.of(f"{ex.id.raw}-reissued-{next(self._ids)}")
        message = Message(new_id, ex.message.method, ex.message.params, jsonrpc.MISSING,
                          None, {})
        ex.wire_id = new_id
        ex.frame = jsonrpc.serialize(message)
        ex.decoder = None
        logger.info("server %r: re-issuing %s after a broken stream", self.name,
                    self._describe(ex))
        self._exchange(ex)

    def _safe_to_repeat(self, ex: _Exchange) -> bool:
        params = ex.message.params if isinstance(ex.message.params, dict) else {}
        name = params.get("name")
        tool = self._tools.get(name) if isinstance(name, str) else None
        annotations = tool.get("annotations") if isinstance(tool, dict) else None
        if not isinstance(annotations, dict):
            return False
        return annotations.get("readOnlyHint") is True \
            or annotations.get("idempotentHint") is True

    def _resume(self, ex: _Exchange) -> None:
        """Legacy: GET with ``Last-Event-ID`` on the resumption schedule (first wait = the
        server's ``retry``, then x1.5 capped at 30 s, at most 5 attempts)."""
        decoder = ex.decoder
        assert decoder is not None
        delay = decoder.retry_ms / 1000 if decoder.retry_ms is not None else RESUME_DEFAULT
        attempts = 0
        while attempts < RESUME_ATTEMPTS:
            if self._closing.wait(delay) or ex.cancelled:
                return
            attempts += 1
            before = decoder.last_event_id
            headers = {"Accept": _SSE, "Accept-Encoding": "identity",
                       "Last-Event-ID": before or ""}
            self._legacy_headers(headers)
            try:
                response = self._request("GET", self.url, headers, body=None,
                                         timeout=(CONNECT_TIMEOUT, None), target=ex,
                                         rpc_method=ex.method)
            except _NETWORK_ERRORS as exc:
                logger.debug("server %r: resuming %s failed: %s", self.name, ex.method, exc)
                response = None
            if response is not None:
                if response.status_code == 200 and media_type(response) == _SSE:
                    if self._read_events(ex, response, decoder, ex):
                        return
                    if ex.cancelled or self._closing.is_set():
                        return
                    if decoder.last_event_id != before:
                        attempts = 0   # progress: a polling server; start the schedule anew
                        delay = decoder.retry_ms / 1000 if decoder.retry_ms is not None \
                            else RESUME_DEFAULT
                        continue
                else:
                    logger.debug("server %r: resuming %s got HTTP %d", self.name, ex.method,
                                 response.status_code)
                    response.close()
            delay = min(delay * RESUME_FACTOR, RESUME_CAP)
        raise ConnectionLost(f"{self._describe(ex)}: the event stream dropped and could not "
                             f"be resumed in {RESUME_ATTEMPTS} attempts", maybe_executed=True,
                             server=self.name, method=ex.method)

    # ------------------------------------------------------------------ legacy session expiry

    def _expired(self, ex: _Exchange, status: int, said: str) -> None:
        """The server no longer knows the session ``ex`` carried: a 404 (the spec's answer),
        or a 400 saying so (``said``, see ``_http_session_lost``). Re-create the session
        (once, shared by concurrent requests), restore its state, retry transparently once."""
        why = f"HTTP {status}" + (f": {said}" if said else "")
        if ex.retried_session:
            raise SessionExpired(f"{self._describe(ex)}: the server ended the session ({why}) "
                                 "again right after it was re-created",
                                 maybe_executed=False, server=self.name, method=ex.method)
        used = ex.session_id
        try:
            self._recreate_session(used, why)
        except (MCPError, *_NETWORK_ERRORS) as exc:
            raise SessionExpired(f"{self._describe(ex)}: the server ended the session ({why}) "
                                 f"and a new one could not be created: {exc}",
                                 server=self.name, method=ex.method) from exc
        ex.retried_session = True
        self._await_get_stream()   # the restored GET stream first, as after connecting
        self._exchange(ex)

    def _recreate_session(self, used: str | None, why: str) -> None:
        with self._reinit_lock:
            if self._session_id != used:
                return  # another thread already re-created it
            logger.warning("server %r ended the session (%s); creating a new one",
                           self.name, why)
            self._session_ready.clear()
            try:
                self._new_session()
            finally:
                self._session_ready.set()

    def _new_session(self) -> None:
        """Under the re-init lock: ``initialize`` anew and restore the session's state."""
        self._session_id = None
        params = dict(self._init_params or {})
        if self._protocol_version is not None:
            params["protocolVersion"] = self._protocol_version
        answer = self._call_internal("initialize", params)
        if answer.error is not None:
            raise ProtocolError(f"re-initializing server {self.name!r} failed: "
                                f"{answer.error.get('message')}", server=self.name,
                                method="initialize")
        self._post_oneway(jsonrpc.serialize(
            jsonrpc.notification("notifications/initialized")),
            "notifications/initialized")
        if self._log_level is not None:
            self._call_internal("logging/setLevel", {"level": self._log_level})
        for uri in list(self._subscriptions):
            self._call_internal("resources/subscribe", {"uri": uri})
        if self._get_wanted:
            self._restart_get_stream()

    def _call_internal(self, method: str, params: dict[str, Any]) -> Message:
        """A request of the transport's own (not the session's), answered here."""
        rid = RequestId.of(f"mcpsync-{next(self._ids)}")
        message = Message(rid, method, params, jsonrpc.MISSING, None, {})
        ex = _Exchange(message, jsonrpc.serialize(message), internal=True)
        self._exchange(ex)
        if self._sse is not None and ex.result is None:
            ex.answered.wait(INTERNAL_TIMEOUT)
        if ex.result is None:
            raise ConnectionLost(f"{describe_call(method, params, self.name)}: no answer",
                                 server=self.name, method=method)
        return ex.result

    # ------------------------------------------------------------------ subscriptions/listen

    def _start_listen(self, ex: _Exchange) -> None:
        thread = threading.Thread(target=self._listen_loop, args=(ex,),
                                  name=f"mcpsync-http-listen-{self._safe}", daemon=True)
        with self._close_lock:
            if self._closed:
                self._inflight.pop(ex.key, None)
                raise TransportClosed(f"the HTTP connection to server {self.name!r} is "
                                      "closed", server=self.name)
            self._listen_threads = [t for t in self._listen_threads if t.is_alive()]
            self._listen_threads.append(thread)
        thread.start()

    def _listen_loop(self, ex: _Exchange) -> None:
        """Thread ``mcpsync-http-listen-<name>``: one modern ``subscriptions/listen``.

        A result ends it; closing the stream (the session cancels it) ends it; an abrupt
        drop reopens it (a new id, mapped back) after 1 s, x1.5, capped at 30 s, for as long
        as the session keeps it.
        """
        delay = LISTEN_FIRST
        try:
            while not ex.cancelled and not self._closing.is_set():
                try:
                    self._exchange(ex)
                    return
                except (_ListenDropped, ConnectionLost) as exc:
                    if ex.cancelled or self._closing.is_set():
                        return
                    logger.info("server %r: the subscriptions/listen stream dropped (%s); "
                                "reopening in %.1f s", self.name, exc or "no result", delay)
                if self._closing.wait(delay) or ex.cancelled:
                    return
                delay = min(delay * RESUME_FACTOR, RESUME_CAP)
                ex.wire_id = RequestId.of(f"{ex.id.raw}-listen-{next(self._ids)}")
                ex.frame = jsonrpc.serialize(Message(ex.wire_id, ex.message.method,
                                                     ex.message.params, jsonrpc.MISSING,
                                                     None, {}))
                ex.response = None
                ex.conn = None
        except MCPError as exc:
            self._fail(ex, exc)
        except _NETWORK_ERRORS as exc:
            self._fail(ex, ConnectionLost(f"{self._describe(ex)}: {exc}", maybe_executed=True,
                                          server=self.name, method=ex.method))
        finally:
            if self._inflight.get(ex.key) is ex:
                del self._inflight[ex.key]

    # ------------------------------------------------------------------ HTTP+SSE (2024-11-05)

    def _fall_back_to_sse(self, ex: _Exchange, status: int) -> None:
        """``initialize`` got 400/404/405 without a modern error: try the 2024-11-05
        HTTP+SSE transport (GET for an ``endpoint`` event), then send it there."""
        logger.info("server %r answered initialize with HTTP %d; trying the 2024-11-05 "
                    "HTTP+SSE transport", self.name, status)
        self._open_sse()
        self._exchange(ex)

    def _open_sse(self) -> None:
        channel = SseChannel(self.url, safe=self._safe, max_event_bytes=self._max,
                             open_get=self._sse_get, on_message=self._sse_message,
                             on_drop=self._sse_dropped, watchdog=self._watchdog)
        channel.open()
        self._sse = channel
        self._sse_broken = False

    def _sse_get(self, target: Abortable) -> requests.Response:
        return self._request("GET", self.url, {"Accept": _SSE, "Accept-Encoding": "identity"},
                             body=None, timeout=(CONNECT_TIMEOUT, None), target=target,
                             rpc_method=None)

    def _post_sse(self, ex: _Exchange) -> requests.Response:
        """POST to the announced endpoint; the answer will come on the GET stream."""
        if self._sse_broken and not ex.internal:
            self._reopen_sse()
        channel = self._sse
        assert channel is not None and channel.endpoint is not None
        self._sse_waiting[ex.wire_id.key] = ex   # before the POST: the answer may be quick
        headers = {"Accept": ACCEPT_POST, "Content-Type": _JSON}
        try:
            return self._request("POST", channel.endpoint, headers, body=ex.frame,
                                 timeout=(CONNECT_TIMEOUT, CONNECT_TIMEOUT), target=ex,
                                 rpc_method=ex.method, stream=False)
        except BaseException:
            self._sse_waiting.pop(ex.wire_id.key, None)
            raise

    def _sse_reply_status(self, ex: _Exchange, response: requests.Response) -> None:
        status = response.status_code
        response.close()
        if 200 <= status < 300:
            return
        self._sse_waiting.pop(ex.wire_id.key, None)
        raise status_error(f"{self._describe(ex)}: the HTTP+SSE endpoint answered HTTP "
                           f"{status}", status=status, url=self.url, server=self.name,
                           method=ex.method)

    def _sse_message(self, data: str) -> None:
        """Stream thread: one ``message`` event."""
        try:
            parsed = jsonrpc.parse(data, allow_batch=self.allow_batch)
        except ParseError as exc:
            self._rx.put(exc)
            return
        for item in parsed if isinstance(parsed, Batch) else [parsed]:
            if isinstance(item, Message) and item.method is None and item.id is not None:
                ex = self._sse_waiting.pop(item.id.key, None)
                if ex is not None:
                    self._deliver(ex, item)
                    ex.answered.set()
                    continue
            self._rx.put(item)

    def _sse_dropped(self) -> None:
        """The GET stream ended: pending calls fail; the next call reconnects."""
        self._sse_broken = True
        waiting = list(self._sse_waiting.values())
        self._sse_waiting.clear()
        for ex in waiting:
            ex.answered.set()
            if not ex.internal:
                self._fail(ex, ConnectionLost(
                    f"{self._describe(ex)}: the server's HTTP+SSE stream ended",
                    maybe_executed=True, server=self.name, method=ex.method))

    def _reopen_sse(self) -> None:
        """A new GET stream and a new ``initialize``, state restored as after a 404."""
        with self._reinit_lock:
            if not self._sse_broken:
                return
            logger.warning("server %r: the HTTP+SSE stream ended; reconnecting", self.name)
            old = self._sse
            if old is not None:
                old.close(join=0)
            self._open_sse()
            self._new_session()

    # ------------------------------------------------------------------ the GET stream

    def _start_get_stream(self) -> None:
        self._get_wanted = True
        if self._get_thread is not None or self._closing.is_set():
            return
        thread = threading.Thread(target=self._get_loop, name=f"mcpsync-http-get-{self._safe}",
                                  daemon=True)
        self._get_thread = thread
        thread.start()

    def _await_get_stream(self) -> None:
        """Wait (at most GET_OPEN_WAIT) until the GET for the current session was answered:
        a 2xx with the stream open, a refusal such as 405, or an error.

        Why: a server without an event store sends its requests (``elicitation/create``) on
        the GET stream and drops them when that stream is not open yet; a request POSTed
        before the GET is answered can trigger exactly that (conformance scenario
        ``elicitation-sep1034-client-defaults`` failed that way about one run in ten). The
        bound keeps a slow server from hanging ``connect()``. Not on the GET thread itself.
        """
        thread = self._get_thread
        if thread is None or thread is threading.current_thread():
            return
        with self._get_cond:
            answered = self._get_cond.wait_for(
                lambda: self._get_answered == self._session_id or not thread.is_alive()
                or self._closing.is_set(), GET_OPEN_WAIT)
        if not answered:
            logger.debug("server %r: the GET stream was not answered within %.0f s; going on",
                         self.name, GET_OPEN_WAIT)

    def _note_get_answered(self, sid: str | None) -> None:
        with self._get_cond:
            self._get_answered = sid
            self._get_cond.notify_all()

    def _restart_get_stream(self) -> None:
        """After a new session: end the old GET (the loop reconnects with the new id at
        once, skipping its back-off)."""
        current = self._get_abort
        if current is not None:
            current.abort()
        self._get_kick.set()     # after the abort: the reopened GET is not the one aborted
        if self._get_thread is None or not self._get_thread.is_alive():
            self._get_thread = None
            self._start_get_stream()

    def _get_loop(self) -> None:
        """Thread ``mcpsync-http-get-<name>``: the server's standalone stream (legacy)."""
        decoder = SSEDecoder(max_event_bytes=self._max)
        decoder_sid = self._session_id
        delay = RESUME_DEFAULT
        while not self._closing.is_set():
            self._get_kick.clear()
            target = Abortable()
            self._get_abort = target
            headers = {"Accept": _SSE, "Accept-Encoding": "identity"}
            sid = self._legacy_headers(headers)
            if sid != decoder_sid:   # a new session: a fresh stream, no old Last-Event-ID
                decoder, decoder_sid = SSEDecoder(max_event_bytes=self._max), sid
            if decoder.last_event_id is not None:
                headers["Last-Event-ID"] = decoder.last_event_id
            try:
                response = self._request("GET", self.url, headers, body=None,
                                         timeout=(CONNECT_TIMEOUT, None), target=target,
                                         rpc_method=None)
            except (MCPError, *_NETWORK_ERRORS) as exc:
                self._note_get_answered(sid)
                if self._closing.is_set():
                    return
                logger.info("server %r: the GET stream failed: %s", self.name, exc)
                response = None
            if response is not None:
                self._note_get_answered(sid)
                status = response.status_code
                if status == 405:
                    response.close()
                    logger.debug("server %r offers no GET stream (405)", self.name)
                    return
                lost = self._get_session_lost(response, sid)
                if lost is not None:
                    try:
                        self._recreate_session(sid, lost)
                    except (MCPError, *_NETWORK_ERRORS) as exc:
                        logger.warning("server %r: re-creating the session failed: %s",
                                       self.name, exc)
                        return
                    decoder = SSEDecoder(max_event_bytes=self._max)
                    continue
                if 200 <= status < 300 and media_type(response) == _SSE:
                    before = decoder.last_event_id
                    try:
                        self._read_events(None, response, decoder, target)
                    except TransportError as exc:
                        logger.warning("server %r: the GET stream failed: %s", self.name, exc)
                    if decoder.last_event_id != before:
                        delay = RESUME_DEFAULT
                    if decoder.retry_ms is not None:
                        delay = decoder.retry_ms / 1000
                    if self._get_pause(delay):
                        return
                    continue
                logger.info("server %r: the GET stream got HTTP %d", self.name, status)
                response.close()
            if self._get_pause(delay):
                return
            delay = min(delay * RESUME_FACTOR, RESUME_CAP)

    def _get_session_lost(self, response: requests.Response, sid: str | None) -> str | None:
        """Why the GET's reply means the session is gone (a 404, or a 400 saying so), or
        None. Reads and closes the body in those two cases only."""
        status = response.status_code
        if sid is None or status not in (400, 404):
            return None
        body = b""
        with contextlib.suppress(MCPError, *_NETWORK_ERRORS):
            body = read_body(response, self._max, f"GET {self.url}")
        response.close()
        if status == 404:
            return "HTTP 404"
        try:
            parsed = jsonrpc.parse(body)
        except ParseError:
            return None
        error = parsed.error if isinstance(parsed, Message) else None
        if says_session_lost(status, error):
            return f"HTTP 400: {str((error or {}).get('message'))[:120]}"
        return None

    def _get_pause(self, delay: float) -> bool:
        """The GET loop's back-off; cut short by a restart. True once closing."""
        if self._closing.is_set():
            return True
        if self._get_kick.wait(delay):
            self._get_kick.clear()
        return self._closing.is_set()

    # ------------------------------------------------------------------ closing

    def close(self) -> None:
        """Abort every stream, DELETE the legacy session (2 s), stop and join our threads,
        close our own ``requests.Session``. Idempotent; in a forked child only drops state."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._closing.set()
        self._rx.put(_EOF)
        if self.forked():
            return
        for ex in list(self._inflight.values()):
            ex.abort()
            ex.answered.set()
        self._get_kick.set()
        with self._get_cond:
            self._get_cond.notify_all()
        get_abort = self._get_abort
        if get_abort is not None:
            get_abort.abort()
        channel = self._sse
        if channel is not None:
            channel.close(join=0)
        sid = self._session_id
        if sid is not None:
            headers = {"Mcp-Session-Id": sid}
            if self._protocol_version is not None:
                headers["MCP-Protocol-Version"] = self._protocol_version
            try:
                response = self._request("DELETE", self.url, headers, body=None,
                                         timeout=DELETE_TIMEOUT, target=None,
                                         rpc_method=None, stream=False)
                logger.debug("server %r: DELETE of the session: HTTP %d", self.name,
                             response.status_code)
                response.close()
            except (MCPError, *_NETWORK_ERRORS) as exc:
                logger.debug("server %r: DELETE of the session failed: %s", self.name, exc)
        self._workers.stop(JOIN_TIMEOUT)
        self._watchdog.stop(JOIN_TIMEOUT)
        thread = self._get_thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(JOIN_TIMEOUT)
        if channel is not None:
            channel.close(join=JOIN_TIMEOUT)
        for listener in self._listen_threads:
            if listener is not threading.current_thread():
                listener.join(JOIN_TIMEOUT)
        self._get_abort = None   # a response pins its pool: hold none after close
        for ex in list(self._inflight.values()):
            ex.response = None
        if self._own_http:
            close_session(self._http)

    def __repr__(self) -> str:
        return f"<HttpTransport {self.name!r} {self.url}>"
