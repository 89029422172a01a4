"""The embedded HTTP/1.1 server: any WSGI application, threads, limits, and a clean close.

Production deployments put a WSGI application behind gunicorn or another server; this one
is for ``serve_http()`` and ``--http``, where a dependency beyond the standard library would
be one too many. ``wsgiref`` is the standard library's server, but it closes the connection
after every response, has no limits and buffers what it sends, so it cannot carry a stream.

Threads. One acceptor, ``mcpsync-<name>-accept``, and up to ``max_connections`` connection
threads ``mcpsync-<name>-<n>`` (``mcpsync-http-1`` ... with the default name) that are kept
and reused from one connection to the next, so a busy server creates no thread per
request, nor per connection once warm. A connection holds its thread for as long as it is
open, idle keep-alive periods and open streaming responses (server-sent events) included:
``max_connections`` limits connections, not requests.

A connection over the limit is answered at once with ``503 Service Unavailable`` and
``Retry-After: 1``, by the acceptor itself, rather than left waiting in the listen
backlog. A client in the backlog cannot tell a full server from a hung one, and with
streams and keep-alive holding every slot it might wait without bound; a 503 is a clear,
retryable answer that clients and load balancers act on. The acceptor never blocks on such
a client: it sends the short answer without waiting, then keeps the socket for up to a
second, reading and dropping whatever the client still sends (closing with unread data
would reset the connection and could destroy the answer), with a selector, on its own
thread.

Closing stops accepting, shuts down the idle keep-alive connections at once, lets running
requests finish for up to ``drain`` seconds, then shuts down the rest (their next send
fails, which ends the application's iteration and calls its ``close()``), and joins every
thread. Sockets are shut down, never closed, from another thread: only its own thread
closes a socket, so a descriptor number is never reused under a thread still holding it.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import selectors
import socket
import threading
import time
from types import TracebackType
from typing import Final

from mcpsync._names import safe
from mcpsync._threads import PREFIX, LazyPool, join_all, new_thread
from mcpsync.server.http._conn import Connection, Site, WsgiApp

__all__ = ["WsgiServer"]

_log = logging.getLogger("mcpsync.server.http")

_BUSY_BODY: Final = b"the server is at its connection limit; retry in a moment\n"
_BUSY: Final = (b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\n"
                b"Content-Type: text/plain; charset=utf-8\r\n"
                b"Content-Length: %d\r\nConnection: close\r\n\r\n%b"
                % (len(_BUSY_BODY), _BUSY_BODY))
_LINGER: Final = 1.0          # seconds a refused socket is kept, to read what still comes
_LINGER_MAX: Final = 256      # refused sockets kept at once; beyond, they are just closed
_ACCEPT_BURST: Final = 64     # connections accepted per wake-up before looking at the rest
_BACKLOG: Final = 128
_HINTS: Final = {
    errno.EADDRINUSE: "another program listens there: stop it, or pick another port "
                      "(port 0 picks a free one)",
    errno.EACCES: "ports below 1024 need privileges: pick a port above 1024",
    errno.EADDRNOTAVAIL: "this machine has no such address: use 127.0.0.1, or 0.0.0.0 for "
                         "every interface",
}


class WsgiServer:
    """Serves one WSGI application over HTTP/1.1 on threads, with the standard library only.

    Named for its role in PEP 3333, the server side of WSGI: it hosts any WSGI application
    (Flask, Django, an MCP endpoint) and knows nothing about what the application does.
    ``HttpServer`` would read like the standard library's ``http.server.HTTPServer``, which
    this server replaces for that purpose.

    ``header_timeout`` bounds the time from a connection's opening (or its previous
    response) to the end of the next request head: it stops slowloris clients and closes
    idle keep-alive connections. ``body_timeout`` bounds the time from the first read of a
    body to its last byte, and how long one send to a client that stopped reading may block.
    A body over ``max_body_bytes`` is refused with 413 without being read; chunked request
    bodies are accepted, read whole (within that limit) before the application runs.
    ``name`` names the threads (``mcpsync-<name>-...``) and appears in errors and logs.

    Use ``start()`` / ``close()``, ``with WsgiServer(app) as server:``, or
    ``serve_forever()``, which blocks until ``close()`` or Ctrl-C.
    """

    def __init__(self, app: WsgiApp, host: str = "127.0.0.1", port: int = 0, *,
                 max_connections: int = 64, header_timeout: float = 10.0,
                 body_timeout: float = 30.0, max_body_bytes: int = 32 * 1024 * 1024,
                 name: str = "http") -> None:
        if not callable(app):
            raise TypeError(f"the HTTP server {name!r} needs a WSGI application (a callable "
                            f"taking environ and start_response), not {type(app).__name__}")
        for what, value in (("max_connections", max_connections),
                            ("header_timeout", header_timeout), ("body_timeout", body_timeout),
                            ("max_body_bytes", max_body_bytes)):
            if not value > 0:
                raise ValueError(f"the HTTP server {name!r} needs {what} > 0, not {value!r}")
        if not 0 <= port <= 65535:
            raise ValueError(f"the HTTP server {name!r} cannot listen on port {port}: a port "
                             f"is 0 to 65535 (0 picks a free one)")
        self._app = app
        self._host = host
        self._port = port
        self._max = max_connections
        self._limits = (header_timeout, body_timeout, max_body_bytes)
        self._name = safe(name)
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)   # notified when a connection ends
        self._conns: set[Connection] = set()
        self._site: Site | None = None
        self._listener: socket.socket | None = None
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self._pool = LazyPool(f"{PREFIX}{self._name}", max_connections)
        self._started = False
        self._closing = False
        self._closed = threading.Event()

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Bind, listen and start accepting on a background thread; returns once clients
        can connect. Raises ``OSError`` naming the address and what to try when it cannot
        listen, ``RuntimeError`` when already started or closed."""
        with self._lock:
            if self._started or self._closing:
                raise RuntimeError(f"the HTTP server {self._name!r} was already started; "
                                   f"build a new one to serve again")
            self._started = True
        listener = self._listen()
        self._listener = listener
        bound = listener.getsockname()
        self._port = bound[1]
        header_timeout, body_timeout, max_body_bytes = self._limits
        self._site = Site(self._app, server_name=self._host, server_port=self._port,
                          header_timeout=header_timeout, body_timeout=body_timeout,
                          max_body_bytes=max_body_bytes)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._acceptor = new_thread(f"{PREFIX}{self._name}-accept", self._accept_loop)
        self._acceptor.start()
        _log.info("HTTP server %r listening on %s", self._name, self.url)

    def _listen(self) -> socket.socket:
        where = f"{self._host}:{self._port}"
        try:
            infos = socket.getaddrinfo(self._host or None, self._port, type=socket.SOCK_STREAM,
                                       flags=socket.AI_PASSIVE)
            family = infos[0][0]
            listener = socket.create_server((self._host, self._port), family=family,
                                            backlog=_BACKLOG)
        except socket.gaierror as exc:
            raise OSError(exc.errno, f"the HTTP server {self._name!r} cannot listen on "
                          f"{where}: the host name does not resolve ({exc.strerror}); use an "
                          f"IP address such as 127.0.0.1") from None
        except OSError as exc:
            hint = _HINTS.get(exc.errno or 0, "check the host and port")
            raise OSError(exc.errno, f"the HTTP server {self._name!r} cannot listen on "
                          f"{where}: {exc.strerror}; {hint}") from None
        listener.setblocking(False)
        return listener

    def serve_forever(self) -> None:
        """Serve until :meth:`close` is called from another thread, or Ctrl-C (which closes
        the server and returns normally). Starts the server first if needed."""
        try:   # start() inside: a Ctrl-C once clients can connect always lands here
            if not self._started:
                self.start()
            self._closed.wait()
        except KeyboardInterrupt:
            _log.info("HTTP server %r interrupted; closing", self._name)
            self.close()

    def close(self, drain: float = 2.0) -> None:
        """Stop accepting, close idle connections, give running requests up to ``drain``
        seconds, then end the rest and join every thread. Safe to call twice."""
        with self._lock:
            if self._closing:
                first = False
            else:
                self._closing = first = True
                if self._site is not None:
                    self._site.closing = True
        if not first:
            self._closed.wait()
            return
        try:
            self._stop_accepting()
            deadline = time.monotonic() + drain
            with self._lock:
                for conn in self._conns:
                    if not conn.busy:
                        conn.shutdown()
                while self._conns and (left := deadline - time.monotonic()) > 0:
                    self._idle.wait(left)
                for conn in self._conns:
                    conn.shutdown()   # still running after the drain: its next send fails
            stuck = self._pool.stop(timeout=1.0)
            if stuck:
                _log.warning("HTTP server %r: %s still running an application call after "
                             "close", self._name, ", ".join(t.name for t in stuck))
        finally:
            self._closed.set()

    def _stop_accepting(self) -> None:
        if self._acceptor is None:
            return
        assert self._wake_w is not None and self._wake_r is not None
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        join_all([self._acceptor], time.monotonic() + 5.0)
        for sock in (self._listener, self._wake_r, self._wake_w):
            if sock is not None:
                sock.close()

    def __enter__(self) -> WsgiServer:
        if not self._started:
            self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # --- where ------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port listened on (the one picked when built with port 0, once started)."""
        return self._port

    @property
    def url(self) -> str:
        """``http://host:port``, brackets around an IPv6 address."""
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self._port}"

    def __repr__(self) -> str:
        state = "closed" if self._closing else "serving" if self._started else "not started"
        return f"<WsgiServer {self._name!r} {self.url} {state}>"

    # --- the acceptor -----------------------------------------------------------------------

    def _accept_loop(self) -> None:
        assert self._listener is not None and self._wake_r is not None
        listener = self._listener
        lingering: dict[socket.socket, float] = {}
        with selectors.DefaultSelector() as selector:
            selector.register(listener, selectors.EVENT_READ, "listen")
            selector.register(self._wake_r, selectors.EVENT_READ, "wake")
            try:
                while not self._closing:
                    timeout = (max(0.0, min(lingering.values()) - time.monotonic())
                               if lingering else None)
                    for key, _ in selector.select(timeout):
                        if key.data == "listen":
                            self._accept_burst(listener, selector, lingering)
                        elif key.data == "linger":
                            sock = key.fileobj
                            assert isinstance(sock, socket.socket)
                            self._linger_read(sock, selector, lingering)
                    now = time.monotonic()
                    for sock in [s for s, until in lingering.items() if until <= now]:
                        self._drop(sock, selector, lingering)
            except Exception:
                _log.exception("HTTP server %r: the acceptor failed; no new connections are "
                               "accepted", self._name)
            finally:
                for sock in list(lingering):
                    self._drop(sock, selector, lingering)

    def _accept_burst(self, listener: socket.socket, selector: selectors.BaseSelector,
                      lingering: dict[socket.socket, float]) -> None:
        assert self._site is not None
        for _ in range(_ACCEPT_BURST):
            try:
                sock, peer = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    _log.warning("HTTP server %r cannot accept: %s", self._name, exc.strerror)
                    time.sleep(0.1)   # out of descriptors: let connections end, do not spin
                return   # ECONNABORTED and the like: that client already gave up
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                full = len(self._conns) >= self._max
                if not full:
                    conn = Connection(sock, peer, self._site)
                    self._conns.add(conn)
            if full:
                self._refuse(sock, selector, lingering)
            elif not self._pool.submit(functools.partial(self._run, conn)):
                with self._lock:
                    self._conns.discard(conn)
                sock.close()

    def _run(self, conn: Connection) -> None:
        try:
            conn.run()
        finally:
            with self._lock:
                self._conns.discard(conn)
                self._idle.notify_all()

    def _refuse(self, sock: socket.socket, selector: selectors.BaseSelector,
                lingering: dict[socket.socket, float]) -> None:
        """Answer 503 without blocking, then keep reading the socket for a moment."""
        try:
            sock.setblocking(False)
            try:
                while sock.recv(65536):
                    pass
            except BlockingIOError:
                pass
            sock.send(_BUSY)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            sock.close()
            return
        if len(lingering) >= _LINGER_MAX:
            sock.close()
            return
        lingering[sock] = time.monotonic() + _LINGER
        selector.register(sock, selectors.EVENT_READ, "linger")

    def _linger_read(self, sock: socket.socket, selector: selectors.BaseSelector,
                     lingering: dict[socket.socket, float]) -> None:
        try:
            if sock.recv(65536):
                return
        except BlockingIOError:
            return
        except OSError:
            pass
        self._drop(sock, selector, lingering)

    @staticmethod
    def _drop(sock: socket.socket, selector: selectors.BaseSelector,
              lingering: dict[socket.socket, float]) -> None:
        lingering.pop(sock, None)
        selector.unregister(sock)
        sock.close()
