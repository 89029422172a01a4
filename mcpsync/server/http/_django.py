"""The MCP endpoint as a Django view, for sites that cannot mount a WSGI application.

Django routes URLs to views, not to WSGI applications, and its request handler gives a view
no WSGI ``write()``, through which :class:`~mcpsync.server.http.McpApp` streams its
server-sent events. So :class:`DjangoBridge` runs the app on a thread of its own,
``mcpsync-django-<n>``, with a WSGI ``start_response``/``write()`` that feed a queue, and the
view answers from that queue: a reply that is not an event stream (JSON, an empty 202, an
error) is collected and returned as an ``HttpResponse``; an event stream becomes a
``StreamingHttpResponse`` whose iterator hands each event on as it arrives. When Django closes
the response (at its end, or when the client went away and the WSGI server gave up on it),
the bridge marks the exchange gone, so the app's next ``write()`` raises, as a dropped
connection does, which cancels a 2026-07-28 request and ends a listen; then it joins the
thread. Django is imported only here, when a view is asked for.
"""

from __future__ import annotations

import io
import itertools
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from mcpsync._threads import new_thread
from mcpsync.server.http._app import McpApp

__all__ = ["DjangoBridge", "DjangoView"]

_numbers = itertools.count(1)
#: How long closing a response waits for the app's thread. An exchange that is written to
#: ends at once; a legacy GET stream that is idle notices at its next keep-alive comment.
JOIN_SECONDS = 2.0
_END = object()


class _Gone(Exception):
    """The response was closed: the client is not reading any more."""


class DjangoBridge:
    """One request: the app on a thread of its own, its output through a queue."""

    def __init__(self, app: McpApp, environ: dict[str, Any]) -> None:
        self._app = app
        self._environ = environ
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._gone = threading.Event()
        self._thread = new_thread(f"mcpsync-django-{next(_numbers)}", self._run)

    def start(self) -> tuple[int, list[tuple[str, str]]]:
        """Run the app; its status and headers, once it has started its response."""
        self._thread.start()
        item = self._queue.get()
        if isinstance(item, BaseException):   # failed before answering: Django reports it
            self._thread.join()
            raise item
        status, headers = item
        return int(str(status).split(" ", 1)[0]), list(headers)

    def body(self) -> bytes:
        """The whole body of a reply that is not a stream."""
        try:
            return b"".join(self.chunks())
        finally:
            self.close()

    def chunks(self) -> Iterator[bytes]:
        """The body's pieces as the app writes them."""
        while True:
            item = self._queue.get()
            if item is _END or isinstance(item, BaseException):
                return
            yield item

    def close(self) -> None:
        """The response is done with (sent, or its client went away): end the app's call."""
        self._gone.set()
        if not self._thread.is_alive() or self._thread is threading.current_thread():
            return
        # An open listen waits for something to send and would notice only at its next
        # keep-alive; the exchange the app runs on our thread is told to stop now.
        app = self._app
        with app._lock:
            running = [e for e in app._live if e._owner == self._thread.ident]
        for exchange in running:
            exchange.stop()
        self._thread.join(JOIN_SECONDS)

    # -- the app's thread -------------------------------------------------------------------

    def _start_response(self, status: str, headers: list[tuple[str, str]],
                        exc_info: Any = None) -> Callable[[bytes], None]:
        self._queue.put((status, headers))
        return self._write

    def _write(self, data: bytes) -> None:
        if self._gone.is_set():
            raise _Gone("the Django response was closed")
        if data:
            self._queue.put(bytes(data))

    def _run(self) -> None:
        try:
            result = self._app(self._environ, self._start_response)
            try:
                for chunk in result:
                    self._write(chunk)
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()
        except _Gone:
            pass
        except BaseException as exc:  # handed to the view's thread
            self._queue.put(exc)
            return
        self._queue.put(_END)


def _environ(request: Any, app: McpApp) -> dict[str, Any]:
    """The WSGI environ of a Django request, addressed to the app's own path (Django has
    routed it already) and with the body Django may have read already."""
    body: bytes = request.body
    environ = dict(request.META)
    environ.update({"SCRIPT_NAME": "", "PATH_INFO": app.path, "wsgi.input": io.BytesIO(body),
                    "CONTENT_LENGTH": str(len(body))})
    return environ


class DjangoView:
    """A csrf-exempt Django view answering every request routed to it with ``app`` (which
    Django's URL patterns have chosen already, so the app's own path plays no part).
    ``close()`` ends the app's legacy sessions and open streams."""

    csrf_exempt = True   # what Django's csrf_exempt sets: MCP clients send no CSRF token

    def __init__(self, app: McpApp) -> None:
        self.app = app

    def __repr__(self) -> str:
        return f"<DjangoView {self.app.name!r}>"

    def __call__(self, request: Any) -> Any:
        from django.http import (  # type: ignore[import-untyped]
            HttpResponse,
            StreamingHttpResponse,
        )

        bridge = DjangoBridge(self.app, _environ(request, self.app))
        status, headers = bridge.start()
        kept = {k: v for k, v in headers if k.lower() != "content-length"}
        if not kept.get("Content-Type", "").startswith("text/event-stream"):
            return HttpResponse(bridge.body(), status=status, headers=kept)
        return StreamingHttpResponse(_closing(bridge), status=status, headers=kept)

    def close(self) -> None:
        self.app.close()


def _closing(bridge: DjangoBridge) -> Iterable[bytes]:
    """The stream's events; closing the iterator (Django does, with the response) ends the
    app's call."""
    try:
        yield from bridge.chunks()
    finally:
        bridge.close()
