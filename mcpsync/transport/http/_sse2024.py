"""The 2024-11-05 HTTP+SSE transport's event stream (see docs/http.md).

The server has two endpoints: the client GETs the SSE URL and the first event, ``endpoint``,
names where to POST every message; every server message then arrives as a ``message`` event
on that one GET stream (POSTs are answered 202 with a body we ignore). :class:`SseChannel`
owns the GET stream on the thread ``mcpsync-http-sse-<name>``; the HTTP transport POSTs to
:attr:`SseChannel.endpoint` and routes what :meth:`SseChannel` hands to ``on_message``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Final
from urllib.parse import urljoin

import requests

from mcpsync._origin import UnsafeURL, check_same_origin, refuse_hostile
from mcpsync._threads import new_thread
from mcpsync.errors import ConnectFailed, ConnectionLost, MCPError, TransportError
from mcpsync.jsonrpc import Batch, Message, ParseError, parse
from mcpsync.transport.http._auth import redact_url, status_error
from mcpsync.transport.http._conn import (
    NETWORK_ERRORS,
    Abortable,
    connect_failure,
    iter_chunks,
    media_type,
)
from mcpsync.transport.http._exchange import (
    ACCEPT_POST,
    CONNECT_TIMEOUT,
    INTERNAL_TIMEOUT,
    JSON,
    Exchange,
    Link,
)
from mcpsync.transport.http._watchdog import Watchdog
from mcpsync.transport.sse import SSEDecoder, SSEEvent

if TYPE_CHECKING:
    from mcpsync.transport.http._exchange import Exchanger
    from mcpsync.transport.http._legacy import LegacySession

__all__ = ["ENDPOINT_TIMEOUT", "SseChannel", "SseRoute"]

_EVENTS: Final = "text/event-stream"

ENDPOINT_TIMEOUT: Final = 10.0

logger = logging.getLogger("mcpsync.transport.http")

_ERRORS: Final = (MCPError, *NETWORK_ERRORS)

Opener = Callable[[Abortable], requests.Response]


class SseChannel:
    """One HTTP+SSE connection: the GET stream and the endpoint it announced.

    ``open_get(target)`` sends the GET (through the transport's auth and redirect rules);
    ``on_message(data)`` receives each ``message`` event's data on the stream thread;
    ``on_drop()`` is called once when the stream ends while the channel is open. ``watchdog``
    (``_http_watchdog``) ends the GET stream when it goes silent, which counts as a drop.
    """

    def __init__(self, url: str, *, safe: str, max_event_bytes: int, open_get: Opener,
                 on_message: Callable[[str], None], on_drop: Callable[[], None],
                 watchdog: Watchdog | None = None) -> None:
        self.url = url
        self._shown = redact_url(url)   # what messages and logs show: no user info, no query
        self._watchdog = watchdog
        self.endpoint: str | None = None
        self._safe = safe
        self._max = max_event_bytes
        self._open_get = open_get
        self._on_message = on_message
        self._on_drop = on_drop
        self._target = Abortable()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._closed = False
        self._thread: threading.Thread | None = None

    def open(self, timeout: float = ENDPOINT_TIMEOUT) -> str:
        """Start the stream; return the endpoint once announced (TransportError after
        ``timeout`` seconds without one, or when it points to another origin)."""
        thread = new_thread(f"mcpsync-http-sse-{self._safe}", self._run)
        self._thread = thread
        thread.start()
        if not self._ready.wait(timeout):
            self.close()
            raise TransportError(f"GET {self._shown}: no 'endpoint' event within {timeout:g} s "
                                 "(the server does not speak the 2024-11-05 HTTP+SSE "
                                 "transport either)")
        if self._error is not None:
            self.close()
            raise self._error
        assert self.endpoint is not None
        return self.endpoint

    @property
    def alive(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive() and not self._closed

    def _run(self) -> None:
        try:
            response = self._open_get(self._target)
        except _ERRORS as exc:
            self._fail_open(exc)
            return
        try:
            if response.status_code != 200 or media_type(response) != "text/event-stream":
                self._fail_open(TransportError(
                    f"GET {self._shown}: HTTP {response.status_code} "
                    f"({media_type(response) or 'no Content-Type'}), not an event stream; "
                    "the server speaks neither Streamable HTTP nor HTTP+SSE"))
                return
            decoder = SSEDecoder(max_event_bytes=self._max)
            watchdog = self._watchdog
            watch = watchdog.watch(self._target) if watchdog is not None else None
            try:
                for chunk in iter_chunks(response):
                    if watch is not None:
                        watch.seen(decoder.comments)
                    for event in decoder.feed(chunk):
                        self._event(event)
            finally:
                if watchdog is not None and watch is not None:
                    watchdog.unwatch(watch)
            if watch is not None and watch.ended:
                logger.info("HTTP+SSE stream %s was silent too long; it counts as dropped",
                            self._shown)
        except _ERRORS as exc:
            if not self._ready.is_set():
                self._fail_open(exc)
                return
            logger.debug("HTTP+SSE stream %s ended: %s", self._shown, exc)
        finally:
            response.close()
        if not self._ready.is_set():
            self._fail_open(TransportError(f"GET {self._shown}: the stream ended before the "
                                           "'endpoint' event"))
            return
        if not self._closed:
            self._on_drop()

    def _event(self, event: SSEEvent) -> None:
        if event.type == "endpoint" and self.endpoint is None:
            data = event.data.strip(" \t")
            endpoint = urljoin(self.url, data)
            try:
                refuse_hostile(data)
                check_same_origin(endpoint, self.url)
            except UnsafeURL as exc:
                self._error = TransportError(
                    f"GET {self._shown}: the 'endpoint' event ({data!r}) is refused because "
                    f"{exc}; messages are sent only to the origin of the server URL")
                self._ready.set()
                self._target.abort()
                return
            self.endpoint = endpoint
            self._ready.set()
        elif event.type == "message" and event.data and self.endpoint is not None:
            self._on_message(event.data)

    def _fail_open(self, exc: BaseException) -> None:
        reason = connect_failure(exc)
        if isinstance(exc, MCPError):
            self._error = exc
        elif reason is not None:
            # Nothing was sent: say so plainly, as the Streamable HTTP path does.
            url = redact_url(self.url)
            self._error = ConnectFailed(f"GET {url}: could not connect to {url} ({reason}); "
                                        "is the server running there?", url=url)
        else:
            error = TransportError(f"GET {self._shown}: {exc}")
            error.__cause__ = exc
            self._error = error
        self._ready.set()

    def close(self, join: float = 1.0) -> None:
        self._closed = True
        self._target.abort()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(join)

    def __repr__(self) -> str:
        shown = redact_url(self.endpoint) if self.endpoint is not None else None
        return f"<SseChannel {self._shown} endpoint={shown!r}>"


class SseRoute:
    """The transport's requests over an HTTP+SSE connection (a :class:`Route` of
    ``_exchange``): POSTs to the announced endpoint, answers matched on the GET stream.

    Taken when ``initialize`` is refused with 400/404/405 (or forced by
    ``transport="sse"``); a dropped stream fails the calls waiting on it, and the next
    call opens a new stream and a new session, its state restored as after a 404.
    """

    def __init__(self, link: Link, exchanger: Exchanger, legacy: LegacySession) -> None:
        self._link = link
        self._ex = exchanger
        self._legacy = legacy
        self._waiting: dict[tuple[str, int | str], Exchange] = {}
        self._broken = False
        self.channel = self._open()

    def _open(self) -> SseChannel:
        link = self._link
        channel = SseChannel(link.url, safe=link.safe, max_event_bytes=link.max,
                             open_get=self._get, on_message=self._message,
                             on_drop=self._dropped, watchdog=link.watchdog)
        channel.open()
        self._broken = False
        return channel

    def _get(self, target: Abortable) -> requests.Response:
        return self._link.request("GET", self._link.url,
                                  {"Accept": _EVENTS, "Accept-Encoding": "identity"},
                                  body=None, timeout=(CONNECT_TIMEOUT, None), target=target,
                                  rpc_method=None)

    def oneway_url(self, headers: dict[str, str]) -> str:
        return self.channel.endpoint or self._link.url

    def await_internal(self, ex: Exchange) -> None:
        ex.answered.wait(INTERNAL_TIMEOUT)

    def post(self, ex: Exchange) -> requests.Response:
        """POST to the announced endpoint; the answer will come on the GET stream."""
        if self._broken and not ex.internal:
            self._reopen()
        channel = self.channel
        assert channel.endpoint is not None
        self._waiting[ex.wire_id.key] = ex   # before the POST: the answer may be quick
        headers = {"Accept": ACCEPT_POST, "Content-Type": JSON}
        try:
            return self._link.request("POST", channel.endpoint, headers, body=ex.frame,
                                      timeout=(CONNECT_TIMEOUT, CONNECT_TIMEOUT), target=ex,
                                      rpc_method=ex.method, stream=False)
        except BaseException:
            self._waiting.pop(ex.wire_id.key, None)
            raise

    def reply(self, ex: Exchange, response: requests.Response) -> None:
        status = response.status_code
        response.close()
        if 200 <= status < 300:
            return
        self._waiting.pop(ex.wire_id.key, None)
        raise status_error(f"{ex.describe()}: the HTTP+SSE endpoint answered HTTP "
                           f"{status}", status=status, url=self._link.url,
                           server=self._link.name, method=ex.method)

    def _message(self, data: str) -> None:
        """Stream thread: one ``message`` event."""
        rx = self._link.rx
        try:
            parsed = parse(data, allow_batch=self._link.allow_batch)
        except ParseError as exc:
            rx.put(exc)
            return
        for item in parsed if isinstance(parsed, Batch) else [parsed]:
            if isinstance(item, Message) and item.method is None and item.id is not None:
                ex = self._waiting.pop(item.id.key, None)
                if ex is not None:
                    self._ex.deliver(ex, item)
                    ex.answered.set()
                    continue
            rx.put(item)

    def _dropped(self) -> None:
        """The GET stream ended: pending calls fail; the next call reconnects."""
        self._broken = True
        waiting = list(self._waiting.values())
        self._waiting.clear()
        for ex in waiting:
            ex.answered.set()
            if not ex.internal:
                self._ex.fail(ex, ConnectionLost(
                    f"{ex.describe()}: the server's HTTP+SSE stream ended",
                    maybe_executed=True, server=self._link.name, method=ex.method))

    def _reopen(self) -> None:
        """A new GET stream and a new ``initialize``, state restored as after a 404."""
        with self._legacy.reinit_lock:
            if not self._broken:
                return
            logger.warning("server %r: the HTTP+SSE stream ended; reconnecting",
                           self._link.name)
            self.channel.close(join=0)
            self.channel = self._open()
            self._legacy.new_session()

    def close(self, join: float) -> None:
        self.channel.close(join=join)
