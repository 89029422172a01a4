"""One JSON-RPC request over Streamable HTTP: the POST, its JSON or SSE reply, resumption and
re-issue, and the plumbing every HTTP request of the transport goes through.

Why a module of its own: this is what both eras share. The legacy session (``_legacy``) adds
its headers and its expiry recovery, the modern exchange (``_modern``) its headers and its
-32020 retry; the 2024-11-05 fallback (``_sse2024``) replaces :meth:`Exchanger.post` and
:meth:`Exchanger.reply` as a :class:`Route`. Network failures become mcpsync errors in one
place, :func:`~mcpsync.transport.http._conn.map_network_errors`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import queue
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Protocol

import requests

from mcpsync.errors import ConnectionLost, MCPError, ProtocolError
from mcpsync.jsonrpc import (
    HEADER_MISMATCH,
    METHOD_NOT_FOUND,
    MISSING,
    Batch,
    Message,
    ParseError,
    RequestId,
    error as error_response,
    parse,
    serialize,
)
from mcpsync.protocol import META_PROTOCOL_VERSION, describe_call
from mcpsync.transport.base import CallFailed
from mcpsync.transport.http._auth import AuthFlow, redact_url, status_error
from mcpsync.transport.http._conn import (
    Abortable,
    from_network,
    iter_chunks,
    map_network_errors,
    media_type,
    read_body,
    tracking,
)
from mcpsync.transport.http._redirects import follow
from mcpsync.transport.http._reply import sort_json_reply
from mcpsync.transport.http._session_lost import says_session_lost
from mcpsync.transport.http._watchdog import Watchdog
from mcpsync.transport.sse import SSEDecoder

if TYPE_CHECKING:
    from mcpsync.transport.http._legacy import LegacySession
    from mcpsync.transport.http._modern import ModernExchange

__all__ = ["ACCEPT_POST", "CONNECT_TIMEOUT", "INTERNAL_TIMEOUT", "JSON", "LISTEN",
           "RESUME_CAP", "RESUME_DEFAULT", "RESUME_FACTOR", "SSE", "Exchange", "Exchanger",
           "Link", "ListenDropped", "Route"]

logger = logging.getLogger("mcpsync.transport.http")

CONNECT_TIMEOUT: Final = 10.0
ONEWAY_TIMEOUT: Final = (10.0, 10.0)     # a POSTed notification or response
RETRY_DELAY: Final = 0.5                 # the one retry of a connection error
RESUME_DEFAULT: Final = 1.0              # first resumption wait without a server `retry`
RESUME_FACTOR: Final = 1.5
RESUME_CAP: Final = 30.0
RESUME_ATTEMPTS: Final = 5
INTERNAL_TIMEOUT: Final = 30.0           # the transport's own requests (a re-initialize)

ACCEPT_POST: Final = "application/json, text/event-stream"
JSON: Final = "application/json"
SSE: Final = "text/event-stream"
LISTEN: Final = "subscriptions/listen"
_RETRYABLE: Final = frozenset({"server/discover", "tools/list", "prompts/list",
                               "resources/list", "resources/templates/list",
                               "resources/read"})


class Exchange(Abortable):
    """One JSON-RPC request on its way: the POST, its stream, resumption or re-issue."""

    __slots__ = ("answered", "cancelled", "decoder", "frame", "id", "internal", "key",
                 "message", "method", "modern", "reissued", "result", "retried_session",
                 "server", "session_id", "settled", "strays", "url", "wire_id")

    def __init__(self, message: Message, frame: bytes, *, server: str, url: str,
                 internal: bool = False) -> None:
        super().__init__()
        assert message.id is not None
        self.message = message
        self.frame = frame
        self.server = server
        self.url = url
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

    @property
    def params(self) -> dict[str, Any]:
        params = self.message.params
        return params if isinstance(params, dict) else {}

    def describe(self) -> str:
        return describe_call(self.method, self.message.params, self.server)

    def rewire(self, wire_id: RequestId) -> None:
        """Send the same request again under a new id (mapped back to ``id`` on delivery)."""
        self.wire_id = wire_id
        self.frame = serialize(Message(wire_id, self.message.method, self.message.params,
                                       MISSING, None, {}))
        self.decoder = None


class ListenDropped(Exception):
    """Internal: a ``subscriptions/listen`` stream broke; it is reopened on its schedule."""


class Link:
    """What every part of one HTTP transport shares: who, where, the queue ``receive()``
    reads, the closing flag, the requests in flight and the one way to send HTTP."""

    def __init__(self, url: str, name: str, safe: str, http: requests.Session, auth: AuthFlow,
                 max_frame_bytes: int) -> None:
        self.url = url
        self.name = name
        self.safe = safe
        self.http = http
        self.auth = auth
        self.max = max_frame_bytes
        self.allow_batch = False
        self.rx: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.closing = threading.Event()
        self.inflight: dict[tuple[str, int | str], Exchange] = {}
        self.ids = itertools.count(1)
        self.watchdog = Watchdog(safe)

    def exchange(self, message: Message, frame: bytes, *, internal: bool = False) -> Exchange:
        return Exchange(message, frame, server=self.name, url=self.url, internal=internal)

    def request(self, verb: str, url: str, headers: dict[str, str], *, body: bytes | None,
                timeout: Any, target: Abortable | None, rpc_method: str | None,
                stream: bool = True) -> requests.Response:
        """One logical HTTP request through the auth flow and our redirect policy."""
        http = self.http

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
            return self.auth.send(verb, url, do_send, rpc_method=rpc_method)
        with tracking(target):
            return self.auth.send(verb, url, do_send, rpc_method=rpc_method)


class _Oneway:
    """A notification or response being POSTed, as :func:`map_network_errors` names it."""

    __slots__ = ("method", "server", "url")

    def __init__(self, method: str, server: str, url: str) -> None:
        self.method = method
        self.server = server
        self.url = url

    def describe(self) -> str:
        return f"posting {self.method} to server {self.server!r}"


class Route(Protocol):
    """Where requests go and how their replies are read: Streamable HTTP
    (:class:`Exchanger` itself) or the 2024-11-05 HTTP+SSE fallback."""

    def post(self, ex: Exchange) -> requests.Response: ...
    def reply(self, ex: Exchange, response: requests.Response) -> None: ...
    def oneway_url(self, headers: dict[str, str]) -> str: ...
    def await_internal(self, ex: Exchange) -> None: ...


class Exchanger:
    """Runs requests to their end over the current :class:`Route`; failures become
    ``CallFailed`` items for the session (or raise, for the transport's own requests)."""

    def __init__(self, link: Link) -> None:
        self.link = link
        self.route: Route = self
        # Set by the transport once all parts exist (they call each other).
        self.legacy: LegacySession
        self.modern: ModernExchange
        self.fall_back: Callable[[Exchange, int], None] | None = None

    # ------------------------------------------------------------------ running

    def run(self, ex: Exchange) -> None:
        """Worker thread: run one request to its end; failures become ``CallFailed``."""
        try:
            with map_network_errors(ex):
                self.exchange(ex)
        except MCPError as exc:
            self.fail(ex, self.in_context(ex, exc))
        except ValueError as exc:   # a header value that cannot be encoded: nothing sent
            self.fail(ex, exc)
        finally:
            inflight = self.link.inflight
            if not ex.internal and inflight.get(ex.key) is ex:
                del inflight[ex.key]

    def in_context(self, ex: Exchange, exc: MCPError) -> MCPError:
        """Make the error say what we were doing ("calling tool 'x' on server 'y': ..."),
        as every mcpsync error does (the auth flow and the redirect policy do not know)."""
        prefix = ex.describe()
        if not exc.message.startswith(prefix):
            exc.args = (f"{prefix}: {exc.message}", *exc.args[1:])
        if exc.server is None:
            exc.server = self.link.name
        if exc.method is None:
            exc.method = ex.method
        return exc

    def fail(self, ex: Exchange, error: BaseException) -> None:
        if ex.cancelled or ex.settled:
            return
        ex.settled = True
        if ex.internal:
            raise error
        self.link.rx.put(CallFailed(ex.id, error))

    def exchange(self, ex: Exchange) -> None:
        """POST (retrying a connection error once where allowed), then read the reply."""
        closing = self.link.closing
        attempt = 0
        while True:
            if ex.cancelled or closing.is_set():
                return
            route = self.route
            try:
                with map_network_errors(ex):
                    response = route.post(ex)
            except ConnectionLost as exc:
                if ex.cancelled or closing.is_set():
                    return
                if attempt == 0 and ex.method in _RETRYABLE and from_network(exc):
                    attempt += 1
                    logger.debug("server %r: %s failed (%s); retrying once", self.link.name,
                                 ex.method, exc)
                    if closing.wait(RETRY_DELAY):
                        return
                    continue
                raise
            route.reply(ex, response)
            return

    def call_internal(self, method: str, params: dict[str, Any]) -> Message:
        """A request of the transport's own (not the session's), answered here."""
        link = self.link
        rid = RequestId.of(f"mcpsync-{next(link.ids)}")
        message = Message(rid, method, params, MISSING, None, {})
        ex = link.exchange(message, serialize(message), internal=True)
        with map_network_errors(ex):
            self.exchange(ex)
        if ex.result is None:
            self.route.await_internal(ex)
        if ex.result is None:
            raise ConnectionLost(f"{describe_call(method, params, link.name)}: no answer",
                                 server=link.name, method=method)
        return ex.result

    def post_oneway(self, frame: bytes, what: str) -> None:
        """POST a notification or a response: any 2xx is fine, a failure is a WARNING."""
        link = self.link
        headers = {"Accept": ACCEPT_POST, "Content-Type": JSON}
        url = self.route.oneway_url(headers)
        try:
            with map_network_errors(_Oneway(what, link.name, url)):
                response = link.request("POST", url, headers, body=frame,
                                        timeout=ONEWAY_TIMEOUT, target=None, rpc_method=what,
                                        stream=False)
        except MCPError as exc:
            if not link.closing.is_set():
                logger.warning("server %r: posting %s failed: %s", link.name, what, exc)
            return
        if not 200 <= response.status_code < 300:
            logger.warning("server %r: posting %s failed with HTTP %d", link.name, what,
                           response.status_code)
        response.close()

    # ------------------------------------------------------------------ the Streamable route

    def oneway_url(self, headers: dict[str, str]) -> str:
        if self.legacy.active:
            self.legacy.headers(headers)
        elif self.modern.version is not None:
            headers["MCP-Protocol-Version"] = self.modern.version
        return self.link.url

    def await_internal(self, ex: Exchange) -> None:
        return None   # a Streamable HTTP reply is read to its end by exchange()

    def post(self, ex: Exchange) -> requests.Response:
        headers = {"Accept": ACCEPT_POST, "Content-Type": JSON}
        if ex.modern:
            headers.update(self.modern.request_headers(ex))
            if ex.method == LISTEN:
                headers["Accept-Encoding"] = "identity"   # nothing may hold events back
        elif self.legacy.active and ex.method != "initialize":
            ex.session_id = self.legacy.request_headers(ex, headers)
        # No read timeout: the session's deadline ends a request (cancelling closes the
        # stream). The transport's own requests (a re-initialize) are bounded here.
        read = INTERNAL_TIMEOUT if ex.internal else None
        return self.link.request("POST", self.link.url, headers, body=ex.frame,
                                 timeout=(CONNECT_TIMEOUT, read), target=ex,
                                 rpc_method=ex.method)

    def reply(self, ex: Exchange, response: requests.Response) -> None:
        status = response.status_code
        if 200 <= status < 300:
            kind = media_type(response)
            if status == 202 or (kind == "" and response.headers.get("Content-Length") == "0"):
                response.close()
                if ex.modern or ex.internal:
                    raise status_error(f"{ex.describe()}: the server answered HTTP "
                                       f"{status} without a response", status=status,
                                       url=self.link.url, server=self.link.name,
                                       method=ex.method)
                self.legacy.await_accepted(ex)   # a non-compliant legacy server
                return
            if kind == JSON:
                try:
                    with map_network_errors(ex):
                        self._json_reply(ex, response)
                except ConnectionLost:
                    if not ex.modern or ex.cancelled or self.link.closing.is_set():
                        raise
                    self.reissue(ex)   # a broken modern response: the request is lost
                return
            if kind == SSE:
                self._sse_reply(ex, response)
                return
            response.close()
            raise status_error(f"{ex.describe()}: the server answered HTTP {status} with "
                               f"Content-Type {kind or '(none)'!r}, expected {JSON} or {SSE}",
                               status=status, url=self.link.url, server=self.link.name,
                               method=ex.method)
        if status == 404 and ex.session_id is not None:
            response.close()
            self.legacy.expired(ex, 404, "")
            return
        self._error_status(ex, response)

    def _json_reply(self, ex: Exchange, response: requests.Response) -> None:
        data = read_body(response, self.link.max, ex.describe())
        response.close()
        parsed: Message | Batch | ParseError
        try:
            parsed = parse(data, allow_batch=self.link.allow_batch)
        except ParseError as exc:
            parsed = exc
        items, sent = sort_json_reply(parsed, ex.wire_id, data)
        answered = False
        for item in items:
            answered = self.deliver(ex, item) or answered
        if answered:
            return
        if ex.method == "server/discover":
            # Not a modern server (it would answer the probe): read as legacy.
            self.deliver(ex, error_response(ex.wire_id, METHOD_NOT_FOUND,
                                            f"HTTP {response.status_code} to server/discover "
                                            f"with {sent}"))
            return
        # The reply is complete and cannot answer this call any more: fail it now.
        self.fail(ex, ProtocolError(
            f"{ex.describe()}: the server's HTTP {response.status_code} JSON reply does "
            f"not answer this request: it sent {sent}", server=self.link.name,
            method=ex.method))

    def _error_status(self, ex: Exchange, response: requests.Response) -> None:
        """A non-2xx reply: a JSON-RPC error in the body answers the call; otherwise the
        status decides (the era probe reads "legacy", the rest is a TransportError)."""
        status = response.status_code
        body = b""
        with contextlib.suppress(MCPError), map_network_errors(ex):
            body = read_body(response, self.link.max, ex.describe())
        response.close()
        answer: Message | None = None
        if body.strip().startswith((b"{", b"[")):
            try:
                parsed = parse(body, allow_batch=True)
            except ParseError:
                parsed = None
            for item in (parsed if isinstance(parsed, list) else [parsed]):
                if isinstance(item, Message) and item.error is not None and (
                        item.id is None or item.id.key == ex.wire_id.key):
                    answer = item
                    break
        if answer is not None and ex.session_id is not None and not ex.internal \
                and says_session_lost(status, answer.error):
            self.legacy.expired(ex, status, str((answer.error or {}).get("message"))[:120])
            return
        if answer is not None:
            self.deliver(ex, dataclasses.replace(answer, id=ex.wire_id))
            return
        fall_back = self.fall_back
        if ex.method == "initialize" and status in (400, 404, 405) and fall_back is not None:
            fall_back(ex, status)
            return
        if ex.method == "server/discover":
            # Not a modern server (it would answer with a JSON-RPC error): read as legacy.
            self.deliver(ex, error_response(ex.wire_id, METHOD_NOT_FOUND,
                                            f"HTTP {status} to server/discover"))
            return
        reason = response.reason or ""
        raise status_error(f"{ex.describe()}: the server answered HTTP {status} "
                           f"{reason}".rstrip(), status=status, url=self.link.url,
                           server=self.link.name, method=ex.method)

    # ------------------------------------------------------------------ delivery

    def deliver(self, ex: Exchange, item: Message | ParseError) -> bool:
        """Queue one item that came back on ``ex``'s own POST (its body or its event stream);
        True when it was ``ex``'s response.

        What answers the POST of request N answers N only: a response carrying any other id
        is delivered to no one (see :meth:`_stray_response`). Requests the server makes of
        us and notifications are queued; the legacy GET stream, where any id may arrive,
        does not come through here. A decoded message is never changed: a response gets
        the session's id back on a copy.
        """
        if isinstance(item, Message) and item.method is None and item.id is not None \
                and item.id.key == ex.wire_id.key:
            if ex.cancelled:
                return True
            if item.id != ex.id:
                item = dataclasses.replace(item, id=ex.id)
            if ex.modern and ex.method == "tools/call" and item.error is not None \
                    and item.error.get("code") == HEADER_MISMATCH \
                    and not ex.reissued and not ex.internal:
                return self.modern.header_retry(ex)
            if item.error is None:
                if ex.method == "initialize":
                    if not self.legacy.capture(ex):
                        return True
                elif ex.modern and ex.method == "tools/list":
                    item = self.modern.filter_tools(ex, item)
            ex.settled = True
            if ex.internal:
                ex.result = item
            else:
                self.link.rx.put(item)
            return True
        if isinstance(item, Message) and item.method is None and item.id is not None:
            self._stray_response(ex, item)
            return False
        self.link.rx.put(item)
        return False

    def _stray_response(self, ex: Exchange, item: Message) -> None:
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
                   ex.describe(), item.id.raw, ex.wire_id.raw, kind)

    # ------------------------------------------------------------------ event streams

    def _sse_reply(self, ex: Exchange, response: requests.Response) -> None:
        """Read a POST's event stream; a drop before the response resumes (legacy) or
        re-issues (modern)."""
        if ex.decoder is None:
            ex.decoder = SSEDecoder(max_event_bytes=self.link.max)
        done = self.read_events(ex, response, ex.decoder, ex)
        if done or ex.cancelled or self.link.closing.is_set():
            return
        self._dropped(ex)

    def read_events(self, ex: Exchange | None, response: requests.Response,
                    decoder: SSEDecoder, target: Abortable,
                    on_item: Callable[[Message | ParseError], None] | None = None) -> bool:
        """Deliver each ``message`` event; True once ``ex``'s response arrived (the stream
        is then closed). Without ``ex`` (the GET stream) every item is queued and handed to
        ``on_item``. Network errors, EOF and the watchdog return False; TransportError
        propagates."""
        link = self.link
        rx = link.rx
        watch = link.watchdog.watch(target)
        try:
            with map_network_errors(ex or _Oneway("GET", link.name, link.url)):
                for chunk in iter_chunks(response):
                    watch.seen(decoder.comments)
                    for event in decoder.feed(chunk):
                        if not event.data or event.type != "message":
                            continue
                        try:
                            parsed = parse(event.data, allow_batch=link.allow_batch)
                        except ParseError as exc:
                            rx.put(exc)
                            continue
                        items = parsed if isinstance(parsed, Batch) else [parsed]
                        final = False
                        for item in items:
                            if ex is not None:
                                final = self.deliver(ex, item) or final
                            else:
                                rx.put(item)
                                if on_item is not None:
                                    on_item(item)
                        if final:
                            response.close()
                            return True
        except ConnectionLost as exc:
            logger.debug("server %r: an event stream dropped: %s", link.name, exc)
        finally:
            link.watchdog.unwatch(watch)
            decoder.close()
            response.close()
        if watch.ended:
            logger.info("server %r: an event stream was silent for %.0f s; treating it as "
                        "dropped", link.name, watch.limit())
        return False

    def _dropped(self, ex: Exchange) -> None:
        """The stream ended before the response."""
        if ex.modern and ex.method == LISTEN:
            raise ListenDropped()
        if ex.modern:
            self.reissue(ex)
            return
        if ex.decoder is None or ex.decoder.last_event_id is None:
            raise ConnectionLost(f"{ex.describe()}: the server's event stream ended "
                                 "before the response (and gave no event id to resume from)",
                                 maybe_executed=True, server=self.link.name, method=ex.method)
        self._resume(ex)

    def reissue(self, ex: Exchange) -> None:
        """Modern: a broken stream loses the request; send it again once with a new id,
        unless it is a tool call that may not be safe to run twice."""
        if ex.reissued:
            raise ConnectionLost(f"{ex.describe()}: the response stream broke twice",
                                 maybe_executed=True, server=self.link.name, method=ex.method)
        if ex.method == "tools/call" and not self.modern.safe_to_repeat(ex):
            raise ConnectionLost(
                f"{ex.describe()}: the response stream broke before the result; the "
                "tool may have run, and it is neither read-only nor idempotent, so it is not "
                "sent again (pass retry_on_drop=True to allow that)", maybe_executed=True,
                server=self.link.name, method=ex.method)
        ex.reissued = True
        ex.rewire(RequestId.of(f"{ex.id.raw}-reissued-{next(self.link.ids)}"))
        logger.info("server %r: re-issuing %s after a broken stream", self.link.name,
                    ex.describe())
        self.exchange(ex)

    def _resume(self, ex: Exchange) -> None:
        """Legacy: GET with ``Last-Event-ID`` on the resumption schedule (first wait = the
        server's ``retry``, then x1.5 capped at 30 s, at most 5 attempts)."""
        link = self.link
        decoder = ex.decoder
        assert decoder is not None
        delay = decoder.retry_ms / 1000 if decoder.retry_ms is not None else RESUME_DEFAULT
        attempts = 0
        while attempts < RESUME_ATTEMPTS:
            if link.closing.wait(delay) or ex.cancelled:
                return
            attempts += 1
            before = decoder.last_event_id
            headers = {"Accept": SSE, "Accept-Encoding": "identity",
                       "Last-Event-ID": before or ""}
            self.legacy.headers(headers)
            response: requests.Response | None = None
            try:
                with map_network_errors(ex):
                    response = link.request("GET", link.url, headers, body=None,
                                            timeout=(CONNECT_TIMEOUT, None), target=ex,
                                            rpc_method=ex.method)
            except ConnectionLost as exc:
                logger.debug("server %r: resuming %s failed: %s", link.name, ex.method, exc)
            if response is not None:
                if response.status_code == 200 and media_type(response) == SSE:
                    if self.read_events(ex, response, decoder, ex):
                        return
                    if ex.cancelled or link.closing.is_set():
                        return
                    if decoder.last_event_id != before:
                        attempts = 0   # progress: a polling server; start the schedule anew
                        delay = decoder.retry_ms / 1000 if decoder.retry_ms is not None \
                            else RESUME_DEFAULT
                        continue
                else:
                    logger.debug("server %r: resuming %s got HTTP %d", link.name, ex.method,
                                 response.status_code)
                    response.close()
            delay = min(delay * RESUME_FACTOR, RESUME_CAP)
        raise ConnectionLost(f"{ex.describe()}: the event stream dropped and could not "
                             f"be resumed in {RESUME_ATTEMPTS} attempts", maybe_executed=True,
                             server=self.link.name, method=ex.method)

