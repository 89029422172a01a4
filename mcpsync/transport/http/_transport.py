"""The Streamable HTTP transport (both eras) behind the session engine's *pull* interface.

The session engine (``mcpsync/session/``) reads a transport with ``receive(timeout)`` and
writes with ``send``/``send_bytes``; :class:`HttpTransport` gives it exactly that shape, so
timeouts, cancellation, progress and Ctrl-C work as on stdio:

- every request the session writes becomes one POST, run on a small pool of daemon threads
  ``mcpsync-http-<name>-<k>`` (so ``send`` never blocks on the network); what comes back
  (a JSON body, or each SSE ``message`` event) is decoded with :func:`mcpsync.jsonrpc.parse`
  and queued for ``receive()``;
- an exchange that ends in an error no JSON-RPC message expresses (a 5xx, an expired
  session, an auth failure) queues a :class:`~mcpsync.transport.base.CallFailed`;
- the client tells the transport what the handshake settled (:meth:`session_updated`): the
  era, the protocol version and the ``initialize`` parameters a legacy session re-created
  after a 404 is opened with; the log level and the resource subscriptions it must restore
  are remembered from the requests that set them.

This module is the facade: the pull interface, dispatching what the session writes, and
closing. The parts, each in its own module: ``_exchange`` (one request: POST, JSON or SSE
reply, resumption, re-issue), ``_legacy`` (the ``Mcp-Session-Id`` session, its GET stream,
expiry and DELETE), ``_modern`` (``Mcp-Param-*`` headers, -32020, ``subscriptions/listen``)
and ``_sse2024`` (the 2024-11-05 HTTP+SSE fallback). Behaviour: ``docs/http.md`` and
``docs/architecture.md``.

Thread contract: ``send``/``send_bytes``/``wake``/``close`` are safe from any thread;
``receive`` is called by one thread at a time; ``close`` is idempotent and bounded.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

import requests

from mcpsync._threads import new_thread
from mcpsync.auth_hooks import AuthHooks
from mcpsync.jsonrpc import MAX_FRAME_BYTES, Message, RequestId, StreamError, parse, serialize
from mcpsync.transport.base import TransportClosed, safe_name
from mcpsync.transport.http._auth import AuthFlow
from mcpsync.transport.http._conn import MAX_WORKERS, close_session, new_session
from mcpsync.transport.http._exchange import LISTEN, Exchange, Exchanger, Link
from mcpsync.transport.http._legacy import ACCEPTED_WAIT, GET_OPEN_WAIT, LegacySession
from mcpsync.transport.http._modern import ModernExchange
from mcpsync.transport.http._sse2024 import SseRoute

__all__ = ["ACCEPTED_WAIT", "GET_OPEN_WAIT", "MAX_WORKERS", "HttpTransport", "SessionState"]

logger = logging.getLogger("mcpsync.transport.http")

JOIN_TIMEOUT: Final = 1.0
_WAKE: Final = object()
_EOF: Final = object()


@dataclasses.dataclass(frozen=True)
class SessionState:
    """What the client settled with the server, told to the transport as it learns it.

    ``era`` is ``"legacy"`` or ``"modern"``; ``initialize_params`` are the parameters of
    the legacy ``initialize`` (a session the server forgot is opened again with them).
    """

    era: str
    protocol_version: str
    initialize_params: Mapping[str, Any] | None = None


class _Workers:
    """Daemon threads ``mcpsync-http-<name>-<k>``, started on demand up to MAX_WORKERS.

    Once all MAX_WORKERS run, no more are started, so the count of busy ones (which decides
    when to start one) is no longer kept: with 64 threads calling at once, that lock, taken
    twice per request, was one more place where they queued up behind each other.
    """

    def __init__(self, safe: str) -> None:
        self._safe = safe
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._busy = 0
        self._full = False     # all MAX_WORKERS started: _busy is no longer needed
        self._stopped = False

    def submit(self, job: Callable[[], None]) -> bool:
        if self._full:
            if self._stopped:
                return False
            self._jobs.put(job)
            return True
        with self._lock:
            if self._stopped:
                return False
            self._busy += 1
            if self._busy > len(self._threads) and len(self._threads) < MAX_WORKERS:
                thread = new_thread(f"mcpsync-http-{self._safe}-{len(self._threads)}",
                                    self._run)
                self._threads.append(thread)
                self._full = len(self._threads) >= MAX_WORKERS
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
                if not self._full:
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


class HttpTransport:
    """An MCP server at ``url`` over Streamable HTTP, as a pull transport for ``Session``.

    ``session``: a caller's ``requests.Session`` used as given (never remounted or closed);
    otherwise we create one with a pool of 66 connections (one per worker thread, two for
    long-lived streams) and close it in :meth:`close`.
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
        link = Link(url, name, self._safe, self._http,
                    AuthFlow(auth, headers or {}, server=name), max_frame_bytes)
        self._link = link
        self._rx = link.rx
        self._workers = _Workers(self._safe)
        self._closed = False
        self._close_lock = threading.Lock()
        self._ex = exchanger = Exchanger(link)
        self._legacy = exchanger.legacy = LegacySession(link, exchanger)
        self._modern = exchanger.modern = ModernExchange(link, exchanger)
        self._sse: SseRoute | None = None
        # ServerConfig.transport: "sse" forces HTTP+SSE (opened here, so connect() fails
        # early), "streamable-http" never falls back to it.
        if transport != "streamable-http":
            exchanger.fall_back = self._fall_back_to_sse
        if transport == "sse":
            try:
                self._open_sse()
            except BaseException:
                self.close()
                raise

    @property
    def allow_batch(self) -> bool:
        return self._link.allow_batch

    @allow_batch.setter
    def allow_batch(self, value: bool) -> None:
        self._link.allow_batch = value

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

    def send_bytes(self, frame: bytes, message: Message | None = None) -> None:
        """Send one encoded frame. The transport routes by method and id, so it decodes the
        frame unless the caller hands over the ``message`` it encoded."""
        if message is None:
            parsed = parse(frame)
            assert isinstance(parsed, Message)
            message = parsed
        self._dispatch(message, frame)

    def session_updated(self, state: SessionState) -> None:
        """The client tells what was negotiated, as soon as the handshake settles it (for
        the legacy era before ``notifications/initialized``, whose POST carries the
        version header)."""
        if state.era == "legacy":
            self._legacy.negotiated(state.protocol_version,
                                    dict(state.initialize_params or {}))
        else:
            self._modern.version = state.protocol_version

    def resume_session(self, session_id: str | None, state: SessionState) -> None:
        """Carry on a legacy session another process opened with this server (a gateway
        replica): its ``Mcp-Session-Id`` and what was negotiated, with no ``initialize``.
        If the server no longer knows it, the usual recovery opens a new one."""
        self.session_updated(state)
        self._legacy.session_id = session_id
        self._legacy.active = True
        self._legacy.start_get_stream()

    @property
    def legacy_session(self) -> tuple[str, str] | None:
        """``(Mcp-Session-Id, protocol version)`` of the legacy session, if there is one."""
        legacy = self._legacy
        sid, version = legacy.session_id, legacy.protocol_version
        return (sid, version) if legacy.active and sid and version else None

    # ------------------------------------------------------------------ outgoing traffic

    def _dispatch(self, message: Message, frame: bytes | None) -> None:
        if self._closed or self._link.closing.is_set():
            raise TransportClosed(f"the HTTP connection to server {self.name!r} is closed",
                                  server=self.name)
        if frame is None:
            frame = serialize(message)
        method = message.method
        if method is not None and message.id is not None:
            legacy = self._legacy
            if legacy.active:
                legacy.remember(message)
            ex = self._link.exchange(message, frame)
            self._link.inflight[ex.key] = ex
            if method == LISTEN and ex.modern:
                with self._close_lock:
                    if self._closed:
                        self._link.inflight.pop(ex.key, None)
                        raise TransportClosed(f"the HTTP connection to server {self.name!r} "
                                              "is closed", server=self.name)
                    self._modern.start_listen(ex)
                return
            if not self._workers.submit(lambda: self._ex.run(ex)):
                self._link.inflight.pop(ex.key, None)
                raise TransportClosed(f"the HTTP connection to server {self.name!r} is "
                                      "closed", server=self.name)
            return
        if method == "notifications/cancelled":
            self._cancel(message, frame)
            return
        if method == "notifications/initialized":
            self._ex.post_oneway(frame, method)
            if self._legacy.active and self._sse is None:
                self._legacy.start_get_stream()
                self._legacy.await_get_stream()
            return
        self._workers.submit(lambda: self._ex.post_oneway(frame, method or "response"))

    def _cancel(self, message: Message, frame: bytes) -> None:
        """The cancellation table: legacy POSTs the notification then closes the stream;
        modern closes the stream and sends nothing."""
        params = message.params if isinstance(message.params, dict) else {}
        rid = params.get("requestId")
        ex: Exchange | None = None
        if isinstance(rid, (int, str)) and not isinstance(rid, bool):
            ex = self._link.inflight.get(RequestId.of(rid).key)
        if ex is not None:
            ex.cancelled = True
            ex.answered.set()   # ends a wait after a 202 (see LegacySession.await_accepted)
        if ex is not None and ex.modern:
            ex.abort()
            return

        def post_then_close() -> None:
            self._ex.post_oneway(frame, "notifications/cancelled")
            if ex is not None:
                ex.abort()
        self._workers.submit(post_then_close)

    # ------------------------------------------------------------------ HTTP+SSE (2024-11-05)

    def _fall_back_to_sse(self, ex: Exchange, status: int) -> None:
        """``initialize`` got 400/404/405 without a modern error: try the 2024-11-05
        HTTP+SSE transport (GET for an ``endpoint`` event), then send it there."""
        logger.info("server %r answered initialize with HTTP %d; trying the 2024-11-05 "
                    "HTTP+SSE transport", self.name, status)
        self._open_sse()
        self._ex.exchange(ex)

    def _open_sse(self) -> None:
        route = SseRoute(self._link, self._ex, self._legacy)
        self._sse = route
        self._ex.route = route
        self._ex.fall_back = None   # once on HTTP+SSE, there is nothing further to try

    # ------------------------------------------------------------------ closing

    def close(self) -> None:
        """Abort every stream, DELETE the legacy session (2 s), stop and join our threads,
        close our own ``requests.Session``. Idempotent; in a forked child only drops state."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        link = self._link
        link.closing.set()
        self._rx.put(_EOF)
        if self.forked():
            return
        for ex in list(link.inflight.values()):
            ex.abort()
            ex.answered.set()
        self._legacy.stop()
        sse = self._sse
        if sse is not None:
            sse.close(join=0)
        self._legacy.delete()
        self._workers.stop(JOIN_TIMEOUT)
        link.watchdog.stop(JOIN_TIMEOUT)
        self._legacy.join(JOIN_TIMEOUT)
        if sse is not None:
            sse.close(join=JOIN_TIMEOUT)
        self._modern.join(JOIN_TIMEOUT)
        for ex in list(link.inflight.values()):
            ex.response = None   # a response pins its pool: hold none after close
        if self._own_http:
            close_session(self._http)

    def __repr__(self) -> str:
        return f"<HttpTransport {self.name!r} {self.url}>"
