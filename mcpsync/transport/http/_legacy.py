"""The legacy Streamable HTTP session (2025-03-26 … 2025-11-25): ``Mcp-Session-Id``.

What it owns: the session id the ``initialize`` answer carried (visible ASCII only), the
``Mcp-Session-Id`` / ``MCP-Protocol-Version`` headers of every later request, the server's
GET stream on ``mcpsync-http-get-<name>`` (answered before ``connect()`` returns and before a
request retried after a 404, at most GET_OPEN_WAIT), a session the server forgot (404, or a
400 saying so) re-created once, shared by concurrent requests, with its state restored, and
the ``DELETE`` on close. The era and the protocol version come from the client
(:meth:`LegacySession.negotiated`), not from reading the handshake's frames.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Final

import requests

from mcpsync._threads import new_thread
from mcpsync.errors import MCPError, ProtocolError, SessionExpired, TransportError
from mcpsync.jsonrpc import (
    Message,
    ParseError,
    notification as notification_message,
    parse,
    serialize,
)
from mcpsync.transport.http._conn import Abortable, map_network_errors, media_type, read_body
from mcpsync.transport.http._exchange import (
    CONNECT_TIMEOUT,
    INTERNAL_TIMEOUT,
    RESUME_CAP,
    RESUME_DEFAULT,
    RESUME_FACTOR,
    SSE,
    Exchange,
    Link,
)
from mcpsync.transport.http._session_lost import says_session_lost
from mcpsync.transport.sse import SSEDecoder

if TYPE_CHECKING:
    from mcpsync.transport.http._exchange import Exchanger

__all__ = ["ACCEPTED_WAIT", "GET_OPEN_WAIT", "LegacySession"]

logger = logging.getLogger("mcpsync.transport.http")

DELETE_TIMEOUT: Final = (2.0, 2.0)
GET_OPEN_WAIT: Final = 2.0               # how long requests wait for the GET stream's answer
ACCEPTED_WAIT: Final = 30.0              # a legacy 202 to a request: its answer on the GET
_NONE_YET: Final = object()
# GET answers that mean "this server has no GET stream, ever": 405 is the answer the spec
# gives a server that offers none; 501 Not Implemented is HTTP's own answer for a method the
# server does not implement at all (a stdlib BaseHTTPRequestHandler without do_GET sends it,
# closing the connection). Asking again would only open a new connection per attempt. Any
# other refusal (a 503, a 4xx) may be temporary and is asked again on the back-off schedule.
_NO_STREAM: Final = frozenset({405, 501})
_RESTORED: Final = frozenset({"logging/setLevel", "resources/subscribe",
                              "resources/unsubscribe"})


def _visible_ascii(value: str) -> bool:
    return bool(value) and all(0x21 <= ord(c) <= 0x7E for c in value)


class _Get:
    """The GET stream as :func:`map_network_errors` names it."""

    __slots__ = ("method", "server", "url")

    def __init__(self, server: str, url: str, method: str | None = None) -> None:
        self.method = method
        self.server = server
        self.url = url

    def describe(self) -> str:
        return f"GET {self.url} of server {self.server!r}"


class LegacySession:
    """One ``Mcp-Session-Id`` session and everything that keeps it alive."""

    def __init__(self, link: Link, exchanger: Exchanger) -> None:
        self._link = link
        self._ex = exchanger
        self.active = False
        self.session_id: str | None = None
        self.protocol_version: str | None = None
        self._init_params: dict[str, Any] | None = None
        self._log_level: str | None = None
        self._subscriptions: dict[str, None] = {}
        self.reinit_lock = threading.Lock()
        # Cleared while a new session is being created: requests wait for its id.
        self._ready = threading.Event()
        self._ready.set()
        self.get_thread: threading.Thread | None = None
        # Held from the check for a GET thread to its start(): close() may run on another
        # thread (a gateway's DELETE, say) and must never see one created but not started.
        self._get_start_lock = threading.Lock()
        self._get_start_cut = False            # a Ctrl-C ended start() early
        self._get_running = threading.Event()  # set by the GET thread's first statement
        self._get_abort: Abortable | None = None
        self._get_wanted = False
        # The session id the last *answered* GET carried (any status, or an error): requests
        # wait for it to match the current session (see await_get_stream).
        self._get_answered: object = _NONE_YET
        self._get_cond = threading.Condition()
        self._get_kick = threading.Event()   # wakes the GET loop's back-off (restart, close)

    # ------------------------------------------------------------------ what we were told

    def negotiated(self, protocol_version: str, initialize_params: dict[str, Any]) -> None:
        """The client settled the legacy era: the version for the headers, and the
        ``initialize`` parameters a re-created session is opened with."""
        self.active = True
        self.protocol_version = protocol_version
        self._init_params = dict(initialize_params)

    def remember(self, message: Message) -> None:
        """What a re-created session must set up again: the log level and the resource
        subscriptions, as the session last sent them (a method-name check per request)."""
        method = message.method
        if method not in _RESTORED:
            return
        params = message.params if isinstance(message.params, dict) else {}
        if method == "logging/setLevel":
            level = params.get("level")
            self._log_level = level if isinstance(level, str) else None
            return
        uri = params.get("uri")
        if isinstance(uri, str):
            if method == "resources/subscribe":
                self._subscriptions[uri] = None
            else:
                self._subscriptions.pop(uri, None)

    def capture(self, ex: Exchange) -> bool:
        """The ``initialize`` answer's ``Mcp-Session-Id`` (visible ASCII, or the call
        fails). False when it was refused."""
        response = ex.response
        sid = response.headers.get("Mcp-Session-Id") if response is not None else None
        if sid is not None and not _visible_ascii(sid):
            self._ex.fail(ex, ProtocolError(
                f"{ex.describe()}: the server sent an Mcp-Session-Id that is not visible "
                f"ASCII: {sid!r:.80}", server=self._link.name, method=ex.method))
            return False
        self.session_id = sid
        self.active = True
        return True

    # ------------------------------------------------------------------ headers

    def headers(self, headers: dict[str, str]) -> str | None:
        sid = self.session_id
        if sid is not None:
            headers["Mcp-Session-Id"] = sid
        if self.protocol_version is not None:
            headers["MCP-Protocol-Version"] = self.protocol_version
        return sid

    def request_headers(self, ex: Exchange, headers: dict[str, str]) -> str | None:
        """A request's headers, once a session being re-created has its id."""
        if not ex.internal and not self._ready.is_set():
            self._ready.wait(2 * INTERNAL_TIMEOUT)
        return self.headers(headers)

    def await_accepted(self, ex: Exchange) -> None:
        """A legacy 202 to a request: its answer can only come on the GET stream. Wait for
        it there at most ACCEPTED_WAIT seconds (whatever the call's timeout, ``math.inf``
        included), and fail the call at once when there is no GET stream to carry it."""
        link = self._link
        thread = self.get_thread
        if thread is None or not thread.is_alive():
            self._ex.fail(ex, TransportError(
                f"{ex.describe()}: the server answered HTTP 202 without a response, and "
                "it has no GET stream the response could come on", status=202, url=link.url,
                server=link.name, method=ex.method))
            return
        # An answer the GET stream carried before the 202 was read has set ``answered``
        # already (see _note_get_answer): the wait then ends at once.
        if ex.answered.wait(ACCEPTED_WAIT) or ex.cancelled or link.closing.is_set():
            return
        self._ex.fail(ex, TransportError(
            f"{ex.describe()}: the server answered HTTP 202 without a response, and the "
            f"response did not come on its GET stream within {ACCEPTED_WAIT:g} s", status=202,
            url=link.url, server=link.name, method=ex.method))

    # ------------------------------------------------------------------ expiry

    def expired(self, ex: Exchange, status: int, said: str) -> None:
        """The server no longer knows the session ``ex`` carried: a 404 (the spec's answer),
        or a 400 saying so (``said``, see ``_session_lost``). Re-create the session (once,
        shared by concurrent requests), restore its state, retry transparently once."""
        name = self._link.name
        why = f"HTTP {status}" + (f": {said}" if said else "")
        if ex.retried_session:
            raise SessionExpired(f"{ex.describe()}: the server ended the session ({why}) "
                                 "again right after it was re-created",
                                 maybe_executed=False, server=name, method=ex.method)
        try:
            self.recreate(ex.session_id, why)
        except MCPError as exc:
            raise SessionExpired(f"{ex.describe()}: the server ended the session ({why}) "
                                 f"and a new one could not be created: {exc}",
                                 server=name, method=ex.method) from exc
        ex.retried_session = True
        self.await_get_stream()   # the restored GET stream first, as after connecting
        self._ex.exchange(ex)

    def recreate(self, used: str | None, why: str) -> None:
        with self.reinit_lock:
            if self.session_id != used:
                return  # another thread already re-created it
            logger.warning("server %r ended the session (%s); creating a new one",
                           self._link.name, why)
            self._ready.clear()
            try:
                self.new_session()
            finally:
                self._ready.set()

    def new_session(self) -> None:
        """Under the re-init lock: ``initialize`` anew and restore the session's state."""
        self.session_id = None
        params = dict(self._init_params or {})
        if self.protocol_version is not None:
            params["protocolVersion"] = self.protocol_version
        call = self._ex.call_internal
        answer = call("initialize", params)
        if answer.error is not None:
            raise ProtocolError(f"re-initializing server {self._link.name!r} failed: "
                                f"{answer.error.get('message')}", server=self._link.name,
                                method="initialize")
        self._ex.post_oneway(serialize(
            notification_message("notifications/initialized")),
            "notifications/initialized")
        if self._log_level is not None:
            call("logging/setLevel", {"level": self._log_level})
        for uri in list(self._subscriptions):
            call("resources/subscribe", {"uri": uri})
        if self._get_wanted:
            self._restart_get_stream()

    # ------------------------------------------------------------------ the GET stream

    def start_get_stream(self) -> None:
        self._get_wanted = True
        with self._get_start_lock:
            if self.get_thread is not None or self._link.closing.is_set():
                return
            self._get_start_cut = False
            self._get_running.clear()   # the thread before (if any) has ended: see restart
            thread = new_thread(f"mcpsync-http-get-{self._link.safe}", self._get_loop)
            self.get_thread = thread
            try:
                thread.start()
            except BaseException:
                self._get_start_cut = True   # the thread may be running, or never will
                raise

    def await_get_stream(self) -> None:
        """Wait (at most GET_OPEN_WAIT) until the GET for the current session was answered:
        a 2xx with the stream open, a refusal such as 405, or an error.

        Why: a server without an event store sends its requests (``elicitation/create``) on
        the GET stream and drops them when that stream is not open yet; a request POSTed
        before the GET is answered can trigger exactly that (conformance scenario
        ``elicitation-sep1034-client-defaults`` failed that way about one run in ten). The
        bound keeps a slow server from hanging ``connect()``. Not on the GET thread itself.
        """
        thread = self.get_thread
        if thread is None or thread is threading.current_thread():
            return
        closing = self._link.closing
        with self._get_cond:
            answered = self._get_cond.wait_for(
                lambda: self._get_answered == self.session_id or not thread.is_alive()
                or closing.is_set(), GET_OPEN_WAIT)
        if not answered:
            logger.debug("server %r: the GET stream was not answered within %.0f s; going on",
                         self._link.name, GET_OPEN_WAIT)

    def _note_get_answered(self, sid: str | None) -> None:
        with self._get_cond:
            self._get_answered = sid
            self._get_cond.notify_all()

    def _note_get_answer(self, item: Message | ParseError) -> None:
        """A message on the GET stream: when it answers a request still in flight, that
        request is settled (the session has the answer) and a wait after a 202 ends.

        Why every request in flight, not only those already answered 202: a server that
        replies 202 may write the answer on the GET stream before the 202 itself reaches
        us; were the request registered only once the 202 is read, that answer would find
        no one, and the wait would run its whole bound and then fail an answered call."""
        if isinstance(item, Message) and item.method is None and item.id is not None:
            ex = self._link.inflight.get(item.id.key)
            if ex is not None and not ex.modern and ex.wire_id.key == item.id.key:
                ex.settled = True
                ex.answered.set()

    def _restart_get_stream(self) -> None:
        """After a new session: end the old GET (the loop reconnects with the new id at
        once, skipping its back-off)."""
        current = self._get_abort
        if current is not None:
            current.abort()
        self._get_kick.set()     # after the abort: the reopened GET is not the one aborted
        with self._get_start_lock:
            thread = self.get_thread
            if thread is not None and thread.is_alive():
                return
            self.get_thread = None
        self.start_get_stream()

    def _get_loop(self) -> None:
        """Thread ``mcpsync-http-get-<name>``: the server's standalone stream (legacy)."""
        self._get_running.set()
        link = self._link
        decoder = SSEDecoder(max_event_bytes=link.max)
        decoder_sid = self.session_id
        delay = RESUME_DEFAULT
        while not link.closing.is_set():
            self._get_kick.clear()
            target = Abortable()
            self._get_abort = target
            if link.closing.is_set():   # stop() ran before the line above: it aborted nothing
                return
            headers = {"Accept": SSE, "Accept-Encoding": "identity"}
            sid = self.headers(headers)
            if sid != decoder_sid:   # a new session: a fresh stream, no old Last-Event-ID
                decoder, decoder_sid = SSEDecoder(max_event_bytes=link.max), sid
            if decoder.last_event_id is not None:
                headers["Last-Event-ID"] = decoder.last_event_id
            response: requests.Response | None = None
            try:
                with map_network_errors(_Get(link.name, link.url)):
                    response = link.request("GET", link.url, headers, body=None,
                                            timeout=(CONNECT_TIMEOUT, None), target=target,
                                            rpc_method=None)
            except MCPError as exc:
                self._note_get_answered(sid)
                if link.closing.is_set():
                    return
                logger.info("server %r: the GET stream failed: %s", link.name, exc)
            if response is not None and link.closing.is_set():
                # stop() may have aborted the request before its socket was connected
                # (nothing to shut then): do not read a stream nobody will abort.
                response.close()
                self._note_get_answered(sid)
                return
            if response is not None:
                self._note_get_answered(sid)
                status = response.status_code
                if status in _NO_STREAM:
                    response.close()
                    logger.debug("server %r offers no GET stream (HTTP %d)", link.name, status)
                    return
                lost = self._get_session_lost(response, sid)
                if lost is not None:
                    try:
                        self.recreate(sid, lost)
                    except MCPError as exc:
                        logger.warning("server %r: re-creating the session failed: %s",
                                       link.name, exc)
                        return
                    decoder = SSEDecoder(max_event_bytes=link.max)
                    continue
                if 200 <= status < 300 and media_type(response) == SSE:
                    before = decoder.last_event_id
                    try:
                        self._ex.read_events(None, response, decoder, target,
                                             self._note_get_answer)
                    except TransportError as exc:
                        logger.warning("server %r: the GET stream failed: %s", link.name, exc)
                    if decoder.last_event_id != before:
                        delay = RESUME_DEFAULT
                    if decoder.retry_ms is not None:
                        delay = decoder.retry_ms / 1000
                    if self._get_pause(delay):
                        return
                    continue
                logger.info("server %r: the GET stream got HTTP %d", link.name, status)
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
        link = self._link
        body = b""
        with contextlib.suppress(MCPError), map_network_errors(_Get(link.name, link.url)):
            body = read_body(response, link.max, f"GET {link.url}")
        response.close()
        if status == 404:
            return "HTTP 404"
        try:
            parsed = parse(body)
        except ParseError:
            return None
        error = parsed.error if isinstance(parsed, Message) else None
        if says_session_lost(status, error):
            return f"HTTP 400: {str((error or {}).get('message'))[:120]}"
        return None

    def _get_pause(self, delay: float) -> bool:
        """The GET loop's back-off; cut short by a restart. True once closing."""
        closing = self._link.closing
        if closing.is_set():
            return True
        if self._get_kick.wait(delay):
            self._get_kick.clear()
        return closing.is_set()

    # ------------------------------------------------------------------ closing

    def stop(self) -> None:
        """First step of closing: wake and abort the GET stream (joined in :meth:`join`)."""
        self._get_kick.set()
        with self._get_cond:
            self._get_cond.notify_all()
        get_abort = self._get_abort
        if get_abort is not None:
            get_abort.abort()

    def delete(self) -> None:
        """``DELETE`` the session (bounded by DELETE_TIMEOUT; a failure is only logged)."""
        link = self._link
        sid = self.session_id
        if sid is None:
            return
        headers = {"Mcp-Session-Id": sid}
        if self.protocol_version is not None:
            headers["MCP-Protocol-Version"] = self.protocol_version
        try:
            with map_network_errors(_Get(link.name, link.url, "DELETE")):
                response = link.request("DELETE", link.url, headers, body=None,
                                        timeout=DELETE_TIMEOUT, target=None,
                                        rpc_method=None, stream=False)
            logger.debug("server %r: DELETE of the session: HTTP %d", link.name,
                         response.status_code)
            response.close()
        except MCPError as exc:
            logger.debug("server %r: DELETE of the session failed: %s", link.name, exc)

    def join(self, timeout: float) -> None:
        with self._get_start_lock:   # a start() in progress ends first
            thread = self.get_thread
        if thread is not None and thread is not threading.current_thread():
            if self._get_start_cut:
                # start() cut short by Ctrl-C: the thread may still be starting (ident set or
                # not, not yet "started"), or never run; wait for its first statement.
                deadline = time.monotonic() + timeout
                if self._get_running.wait(timeout):
                    thread.join(max(0.0, deadline - time.monotonic()))
            elif thread.ident is not None:   # start() failed (no thread to join)
                thread.join(timeout)
        self._get_abort = None   # a response pins its pool: hold none after close


