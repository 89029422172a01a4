"""The loopback redirect listener of a browser login (RFC 8252 §7.3).

A tiny HTTP server on ``127.0.0.1`` (never ``0.0.0.0``: nobody else on the network may
deliver a code) that waits for the one ``GET /callback`` the authorization server redirects
the browser to, answers it with a "you can close this window" page and hands the full URL
to :meth:`LoopbackListener.wait`. Every other path is a 404.

The accept loop runs on the daemon thread ``mcpauth-callback``; each connection gets a short
daemon thread (``mcpauth-callback-conn``) so that a browser's idle pre-connection cannot
hold up the real redirect. :meth:`LoopbackListener.close` stops the loop, cuts open
connections and joins every thread. The server never logs a request line: it holds the code.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from .errors import LoginTimeout

__all__ = ["CALLBACK_PATH", "LoopbackListener"]

CALLBACK_PATH = "/callback"
DEFAULT_WAIT = 300.0
"""Seconds a login may take before ``LoginTimeout`` (docs/auth.md, "Logging in from a script")."""
_CONNECTION_TIMEOUT = 10.0
_JOIN_TIMEOUT = 5.0

_PAGE = b"""<!doctype html>
<html><head><meta charset="utf-8"><title>Signed in</title></head>
<body style="font-family: sans-serif; margin: 3em">
<h1>Login complete</h1>
<p>You can close this window and return to the application.</p>
</body></html>
"""
_NOT_FOUND = b"Not found\n"
_USED = b"This login callback has already been received. You can close this window.\n"


class _Handler(BaseHTTPRequestHandler):
    """Serves the callback page; everything else is a 404."""

    server: _Server
    timeout = _CONNECTION_TIMEOUT
    protocol_version = "HTTP/1.0"
    server_version = "mcpauth-callback"
    sys_version = ""

    def do_GET(self) -> None:
        target = urlsplit(self.path)
        if target.path != CALLBACK_PATH:
            self._reply(404, _NOT_FOUND, "text/plain; charset=utf-8")
            return
        url = self.server.base_url + CALLBACK_PATH + (f"?{target.query}" if target.query else "")
        if self.server.deliver(url):
            self._reply(200, _PAGE, "text/html; charset=utf-8")
        else:
            self._reply(400, _USED, "text/plain; charset=utf-8")

    def _reply(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: the request line carries the authorization code."""


class _Server(HTTPServer):
    """An HTTPServer with named per-connection threads it can cut and join on close."""

    # POSIX SO_REUSEADDR only lets us re-bind over TIME_WAIT; on Windows it would let two
    # listeners share the port, so it stays off there.
    allow_reuse_address = sys.platform != "win32"

    def __init__(self, port: int) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.base_url = f"http://127.0.0.1:{self.server_address[1]}"
        self.received: str | None = None
        self.arrived = threading.Event()
        self._lock = threading.Lock()
        self._connections: dict[socket.socket, threading.Thread] = {}

    def deliver(self, url: str) -> bool:
        """Record the first callback URL; later ones are refused."""
        with self._lock:
            if self.received is not None:
                return False
            self.received = url
        self.arrived.set()
        return True

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(target=self._serve_one, args=(request, client_address),
                                  name="mcpauth-callback-conn", daemon=True)
        with self._lock:
            self._connections[request] = thread
        thread.start()

    def _serve_one(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:  # a broken browser connection must not kill anything
            pass
        finally:
            with self._lock:
                self._connections.pop(request, None)
            self.shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Silent: the default prints a traceback to stderr."""

    def cut_connections(self) -> list[threading.Thread]:
        """Shut down every open connection; returns their threads for joining."""
        with self._lock:
            items = list(self._connections.items())
        for sock, _ in items:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        return [thread for _, thread in items]


class LoopbackListener:
    """Waits on ``http://127.0.0.1:<port>/callback`` for one browser redirect.

    ``port=0`` picks a free port; a taken port raises ``OSError`` (the provider then
    registers a new redirect URI). Use as a context manager or call :meth:`close`, which
    is idempotent and joins the ``mcpauth-callback`` thread.
    """

    def __init__(self, port: int = 0) -> None:
        self._server = _Server(port)
        self.port: int = self._server.server_address[1]
        self.redirect_uri = f"{self._server.base_url}{CALLBACK_PATH}"
        self._closed = False
        self._close_lock = threading.Lock()
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.1},
                                        name="mcpauth-callback", daemon=True)
        self._thread.start()

    def __repr__(self) -> str:
        return f"LoopbackListener({self.redirect_uri!r}, closed={self._closed})"

    def wait(self, timeout: float = DEFAULT_WAIT) -> str:
        """The full callback URL (with its query) once the browser arrives.

        Raises :class:`LoginTimeout` when nothing arrives within ``timeout`` seconds.
        """
        if not self._server.arrived.wait(timeout):
            raise LoginTimeout(f"authorization: no browser redirect reached {self.redirect_uri} "
                               f"within {timeout:g} s", step="authorization",
                               url=self.redirect_uri)
        url = self._server.received
        assert url is not None
        return url

    def close(self) -> None:
        """Stop listening, cut open connections and join every thread (idempotent)."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
        for thread in self._server.cut_connections():
            thread.join(_JOIN_TIMEOUT)

    def __enter__(self) -> LoopbackListener:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
