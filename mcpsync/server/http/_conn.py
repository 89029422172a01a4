"""One client connection: its keep-alive loop and the WSGI calling convention (PEP 3333).

A connection thread runs :meth:`Connection.run`: read a head, frame the body, build the
environ, call the application, send what it returns, and go round again while both sides
keep the connection alive. Everything the server answers by itself (400, 408, 413, ...)
ends with ``Connection: close``: after a malformed request the server cannot know where the
next one would start.

Sending follows three rules:

- The status line and headers wait for the first non-empty piece of body (PEP 3333 allows
  exactly that), and go out in the same ``sendall`` as it, so a small response costs one
  system call.
- A response without ``Content-Length`` goes out chunked on HTTP/1.1 (close-delimited on
  HTTP/1.0), and every piece the application yields is sent at once: an event stream
  reaches the client event by event.
- A send that fails (the client went away, or stopped reading for ``send_timeout``) stops
  the iteration, and the application's ``close()`` is called all the same. That is how an
  application learns that the reader of its stream is gone; it learns it at its next piece,
  since nothing can interrupt code that is waiting to produce one.

Exceptions of the application never reach the client: it gets a short 500 and the
traceback goes to the ``mcpsync.server.http`` logger, with the method and the path but
never the query, the headers or the body, which may carry credentials.
"""

from __future__ import annotations

import contextlib
import io
import logging
import socket
import sys
import time
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any, Final

from mcpsync.server.http._head import Request, parse_head
from mcpsync.server.http._io import ClientGone, HttpError, Input, Reader, read_chunked

__all__ = ["Connection", "Site", "WsgiApp"]

_log = logging.getLogger("mcpsync.server.http")

ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None]
StartResponse = Callable[..., Callable[[bytes], None]]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

#: Response headers that describe one hop, which only the server may set (PEP 3333).
_HOP_BY_HOP: Final = frozenset({"keep-alive", "proxy-authenticate", "proxy-authorization",
                                "te", "trailer", "trailers", "transfer-encoding", "upgrade"})
_DRAIN_MAX: Final = 64 * 1024   # unread body left after a response: read it, or close
_CONTINUE: Final = b"HTTP/1.1 100 Continue\r\n\r\n"
_date_cache: tuple[int, str] = (0, "")


def _http_date() -> str:
    """The ``Date`` header's value, formatted once a second rather than per response."""
    global _date_cache
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache = (now, time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(now)))
    return _date_cache[1]


class Site:
    """What every connection of one server shares: the application, the limits, the
    environ entries that never change, and the flag that says the server is closing."""

    __slots__ = ("app", "base_environ", "body_timeout", "closing", "header_timeout",
                 "max_body_bytes", "send_timeout")

    def __init__(self, app: WsgiApp, *, server_name: str, server_port: int,
                 header_timeout: float, body_timeout: float, max_body_bytes: int) -> None:
        self.app = app
        self.header_timeout = header_timeout
        self.body_timeout = body_timeout
        self.send_timeout = body_timeout
        self.max_body_bytes = max_body_bytes
        self.closing = False
        self.base_environ: dict[str, Any] = {
            "SCRIPT_NAME": "",
            "SERVER_NAME": server_name,
            "SERVER_PORT": str(server_port),
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": "http",
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": False,
            "wsgi.run_once": False,
            "wsgi.input_terminated": True,
        }


class _Response:
    """The sending side of one exchange: ``start_response``, ``write`` and the framing."""

    __slots__ = ("broken", "chunked", "conn", "content_length", "head_only", "headers",
                 "keep_alive", "left", "no_body", "sent", "status")

    def __init__(self, conn: Connection, request: Request) -> None:
        self.conn = conn
        self.head_only = request.method == "HEAD"
        self.keep_alive = request.keep_alive
        self.status: str | None = None
        self.headers: list[tuple[str, str]] = []
        self.content_length: int | None = None
        self.sent = False
        self.chunked = False
        self.no_body = False
        self.left = -1        # body bytes still owed under Content-Length; -1: not framed so
        self.broken = False   # a send failed: the client is gone

    def start_response(self, status: str, headers: list[tuple[str, str]],
                       exc_info: ExcInfo | None = None) -> Callable[[bytes], None]:
        """PEP 3333's ``start_response``: may be called again only with ``exc_info``, which
        re-raises the application's error once the headers are on the wire."""
        if exc_info is not None:
            try:
                if self.sent:
                    raise exc_info[1].with_traceback(exc_info[2])
            finally:
                exc_info = None   # no reference cycle through the traceback
        elif self.status is not None:
            raise RuntimeError("start_response was called twice without exc_info")
        if not (isinstance(status, str) and len(status) >= 3 and status[:3].isdigit()
                and status[3:4] in ("", " ") and "\r" not in status and "\n" not in status):
            raise ValueError(f"a WSGI status is 'NNN Reason', not {status!r}")
        length: int | None = None
        for pair in headers:
            name, value = pair
            if not (type(name) is str and type(value) is str):
                raise TypeError(f"a WSGI header is a (str, str) pair, not {pair!r}")
            if "\n" in value or "\r" in value or "\n" in name or "\r" in name or ":" in name:
                raise ValueError(f"the response header {name!r} holds a line break or colon")
            lower = name.lower()
            if lower == "content-length":
                length = int(value)
            elif lower == "connection":
                if "close" in value.lower():
                    self.keep_alive = False
            elif lower in _HOP_BY_HOP:
                raise ValueError(f"the response header {name!r} is the server's to set")
        self.status = status
        self.headers = [(n, v) for n, v in headers if n.lower() != "connection"]
        self.content_length = length
        return self.write

    def _head(self, body_length: int | None) -> bytes:
        """The status line and headers; ``body_length`` is the whole body's length when it
        is known before sending (a list response, or one that ended before any body)."""
        status = self.status
        if status is None:
            raise RuntimeError("the application sent a body before calling start_response")
        code = int(status[:3])
        headers = self.headers
        lines = [f"HTTP/1.1 {status}\r\n"]
        lines.extend(f"{name}: {value}\r\n" for name, value in headers)
        self.no_body = self.head_only or code < 200 or code in (204, 304)
        if self.no_body:
            pass   # the headers describe the body a GET would get; none follows
        elif self.content_length is not None:
            self.left = self.content_length
        elif body_length is not None:
            lines.append(f"Content-Length: {body_length}\r\n")
            self.left = body_length
        elif self.conn.request_http11:
            lines.append("Transfer-Encoding: chunked\r\n")
            self.chunked = True
        else:
            self.keep_alive = False   # HTTP/1.0 without a length: the close ends the body
        if self.conn.site.closing:
            self.keep_alive = False
        lines.append(f"Date: {_http_date()}\r\n")
        if not self.keep_alive:
            lines.append("Connection: close\r\n")
        elif not self.conn.request_http11:
            lines.append("Connection: keep-alive\r\n")
        lines.append("\r\n")
        self.sent = True
        return "".join(lines).encode("latin-1")

    def _frame(self, data: bytes) -> bytes:
        if self.no_body:
            return b""
        if self.chunked:
            return b"%x\r\n%b\r\n" % (len(data), data)
        if self.left >= 0:
            if len(data) > self.left:
                _log.warning("the application sent more than its Content-Length; the rest "
                             "is dropped and the connection closed")
                self.keep_alive = False
                data = data[: self.left]
            self.left -= len(data)
        return data

    def write(self, data: bytes) -> None:
        """PEP 3333's ``write()``: sends ``data`` at once (the headers first, if not yet)."""
        if type(data) is not bytes:
            if not isinstance(data, (bytes, bytearray, memoryview)):
                raise TypeError(f"a WSGI body is bytes, not {type(data).__name__}")
            data = bytes(data)
        if not data:
            return
        payload = self._frame(data) if self.sent else self._head(None) + self._frame(data)
        if payload:
            self.send(payload)

    def send(self, payload: bytes) -> None:
        if self.broken:
            raise ClientGone("the client went away")
        sock = self.conn.sock
        try:
            sock.settimeout(self.conn.site.send_timeout)
            sock.sendall(payload)
        except OSError:
            self.broken = True
            raise ClientGone("the client went away") from None

    def finish(self, body_length: int | None) -> None:
        """End the body: the headers if nothing was sent yet, the last chunk if chunked."""
        if not self.sent:
            self.send(self._head(body_length if self.content_length is None else None))
        elif self.chunked:
            self.send(b"0\r\n\r\n")
        if self.left > 0:
            _log.warning("the application sent less than its Content-Length; the connection "
                         "is closed so the client sees the body cut short")
            self.keep_alive = False
            self.broken = True


class Connection:
    """One accepted client socket, served request after request on one thread.

    ``busy`` is true while a request is being handled; a closing server shuts down the
    sockets of connections that are not busy (idle keep-alive connections) at once and waits
    a while for the others.
    """

    __slots__ = ("busy", "reader", "remote_addr", "remote_port", "request_http11", "site",
                 "sock")

    def __init__(self, sock: socket.socket, peer: Any, site: Site) -> None:
        self.sock = sock
        is_ip = isinstance(peer, tuple) and len(peer) >= 2
        self.remote_addr = str(peer[0]) if is_ip else ""
        self.remote_port = str(peer[1]) if is_ip else ""
        self.site = site
        self.reader = Reader(sock)
        self.busy = False
        self.request_http11 = True

    def shutdown(self) -> None:
        """Wake the connection's thread from any read or send (it closes the socket)."""
        with contextlib.suppress(OSError):   # already gone
            self.sock.shutdown(socket.SHUT_RDWR)

    def run(self) -> None:
        """Serve requests until either side ends the connection; always closes the socket."""
        site = self.site
        try:
            deadline = time.monotonic() + site.header_timeout
            while not site.closing:
                try:
                    head = self.reader.read_head(deadline)
                    if head is None:
                        return
                    request = parse_head(head)
                except HttpError as exc:
                    self._refuse(exc)
                    return
                self.busy = True
                try:
                    if not self._exchange(request):
                        return
                finally:
                    self.busy = False
                deadline = time.monotonic() + site.header_timeout
        except (ClientGone, OSError):
            return
        finally:
            self.sock.close()

    def _refuse(self, error: HttpError) -> None:
        """Answer ``error`` with a one-line body and ``Connection: close``, then linger a
        moment reading what the client still sends: closing with unread data would reset
        the connection, and the reset can destroy the answer before the client reads it."""
        body = f"{error.detail}\n".encode("latin-1", "replace")
        head = (f"HTTP/1.1 {error.status}\r\nContent-Type: text/plain; charset=utf-8\r\n"
                f"Content-Length: {len(body)}\r\nDate: {_http_date()}\r\n"
                f"Connection: close\r\n\r\n").encode("latin-1")
        try:
            self.sock.settimeout(1.0)
            self.sock.sendall(head + body)
            self.sock.shutdown(socket.SHUT_WR)
            deadline = time.monotonic() + 1.0
            drained = 0
            while drained < 1024 * 1024 and (left := deadline - time.monotonic()) > 0:
                self.sock.settimeout(left)
                data = self.sock.recv(65536)
                if not data:
                    break
                drained += len(data)
        except OSError:
            pass

    def _body(self, request: Request) -> tuple[io.BytesIO | Input, int | None]:
        """``wsgi.input`` and the body's length; 413 for a declared length over the limit,
        before a byte of it is read."""
        site = self.site
        length = request.content_length
        if length is not None and length > site.max_body_bytes:
            raise HttpError("413 Content Too Large",
                            f"the request body is larger than {site.max_body_bytes} bytes")
        if request.continue_expected and (request.chunked or length):
            self.sock.settimeout(site.send_timeout)
            self.sock.sendall(_CONTINUE)
        if request.chunked:
            body = read_chunked(self.reader, site.max_body_bytes, site.body_timeout)
            return io.BytesIO(body), len(body)
        if not length:
            return io.BytesIO(b""), length
        return Input(self.reader, length, site.body_timeout), length

    def _exchange(self, request: Request) -> bool:
        """Handle one request; ``True`` when the connection may carry another."""
        site = self.site
        self.request_http11 = request.http11
        try:
            stream, length = self._body(request)
        except HttpError as exc:
            self._refuse(exc)
            return False
        environ = site.base_environ.copy()
        environ.update(request.environ)
        environ["REQUEST_METHOD"] = request.method
        environ["PATH_INFO"] = request.path
        environ["QUERY_STRING"] = request.query
        environ["SERVER_PROTOCOL"] = request.version
        environ["CONTENT_TYPE"] = request.content_type
        environ["CONTENT_LENGTH"] = "" if length is None else str(length)
        environ["REMOTE_ADDR"] = self.remote_addr
        environ["REMOTE_PORT"] = self.remote_port
        environ["wsgi.input"] = stream
        response = _Response(self, request)
        try:
            result = site.app(environ, response.start_response)
            try:
                self._send_result(response, result)
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    try:
                        close()
                    except Exception:
                        _log.exception("the application's close() raised after %s %r",
                                       request.method, request.path)
        except Exception as exc:
            return self._failed(request, response, stream, exc)
        if response.broken or not response.keep_alive:
            return False
        return self._drain(stream)

    @staticmethod
    def _send_result(response: _Response, result: Iterable[bytes]) -> None:
        if type(result) in (list, tuple) and not response.sent and response.status \
                and response.content_length is None:
            # The whole body is known: send it with a Content-Length, in one system call.
            body = b"".join(result)   # a piece that is not bytes raises TypeError: a 500
            if response.broken:
                raise ClientGone("the client went away")
            response.send(response._head(len(body)) + response._frame(body))
            response.finish(len(body))
            return
        write = response.write
        for data in result:
            if data:
                write(data)
                if response.no_body:
                    break   # HEAD, 204, 304: nothing more would be sent, stop the app
        response.finish(0)

    def _failed(self, request: Request, response: _Response, stream: io.BytesIO | Input,
                exc: Exception) -> bool:
        """After an exception in the exchange: the client gone, its body late, or the
        application's own error (500 if nothing was sent yet). Always ends the connection."""
        if response.broken or isinstance(exc, ClientGone):
            return False
        failure = stream.failure if isinstance(stream, Input) else ""
        if failure == "gone":
            return False
        if failure == "timeout":
            if not response.sent:
                self._refuse(HttpError("408 Request Timeout",
                                       "the request body did not arrive in time"))
            return False
        _log.error("the application failed on %s %r", request.method, request.path,
                   exc_info=exc)
        if not response.sent:
            self._refuse(HttpError("500 Internal Server Error", "the server failed"))
        return False

    def _drain(self, stream: io.BytesIO | Input) -> bool:
        """Read the body the application left unread, so the next request starts where it
        should; a large remainder is not worth the wait, the connection is closed instead."""
        if not isinstance(stream, Input) or not stream.left:
            return True
        if stream.left > _DRAIN_MAX or stream.failure:
            return False
        try:
            while stream.left:
                stream.read(stream.left)
        except OSError:
            return False
        return True
