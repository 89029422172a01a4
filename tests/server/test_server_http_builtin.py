"""The built-in WSGI server over real loopback sockets: framing, limits, streaming, shutdown.

Clients are the standard library's ``http.client``, ``requests`` and raw sockets (for the
malformed and the slow). Every server is built through the ``serve`` fixture, which closes
it and then checks that no descriptor the test opened is left (the leak check of
``conftest.py`` already fails a test that leaves an ``mcpsync-`` thread).
"""

from __future__ import annotations

import http.client
import logging
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests
from helpers import ROOT, open_fds

from mcpsync.server.http._builtin import WsgiServer

Environ = dict[str, Any]
Serve = Callable[..., WsgiServer]


@pytest.fixture
def serve() -> Iterator[Serve]:
    """Build and start servers; close them all and check no descriptor leaked."""
    before = open_fds()
    servers: list[WsgiServer] = []

    def start(app: Any, **options: Any) -> WsgiServer:
        server = WsgiServer(app, **options)
        server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close(drain=0.5)
    deadline = time.monotonic() + 3.0
    while (extra := open_fds() - before) and time.monotonic() < deadline:
        time.sleep(0.02)   # a client socket closed by the test may take a moment to go
    assert not extra, f"descriptors left open: {sorted(extra)}"
    assert not [t.name for t in threading.enumerate() if t.name.startswith("mcpsync-http")]


def hello(environ: Environ, start_response: Any) -> list[bytes]:
    body = environ["wsgi.input"].read()
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"hello ", body]


def raw(server: WsgiServer, data: bytes, *, timeout: float = 5.0) -> bytes:
    """Send ``data`` on a fresh socket and read until the server closes it."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=timeout) as sock:
        sock.sendall(data)
        return read_all(sock)


def read_all(sock: socket.socket) -> bytes:
    parts = []
    while chunk := sock.recv(65536):
        parts.append(chunk)
    return b"".join(parts)


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


# --- HTTP/1.1 basics ----------------------------------------------------------------------

def test_keep_alive_carries_many_requests_on_one_connection_and_thread(serve: Serve) -> None:
    ports = []

    def app(environ: Environ, start_response: Any) -> list[bytes]:
        ports.append((environ["REMOTE_PORT"], threading.current_thread().name))
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok"]

    server = serve(app)
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        for _ in range(20):
            conn.request("GET", "/")
            response = conn.getresponse()
            assert response.read() == b"ok"
            assert response.getheader("Content-Length") == "2"
            assert response.getheader("Connection") is None   # kept alive
    finally:
        conn.close()
    assert len(ports) == 20
    assert len(set(ports)) == 1, "every request came on one connection, served by one thread"
    assert ports[0][1].startswith("mcpsync-http-")


def test_the_environ_is_what_pep_3333_describes(serve: Serve) -> None:
    seen: list[Environ] = []

    def app(environ: Environ, start_response: Any) -> list[bytes]:
        seen.append(dict(environ, body=environ["wsgi.input"].read()))
        start_response("204 No Content", [])
        return []

    server = serve(app)
    request = (b"POST /caf%C3%A9/%E9?q=a%20b&x=1 HTTP/1.1\r\nHost: example.test\r\n"
               b"Content-Type: application/json\r\nContent-Length: 4\r\n"
               b"X-Tag: one\r\nx-tag: two\r\nX_Forged: yes\r\nAuthorization: Bearer t\r\n"
               b"Connection: close\r\n\r\n{\"a\"")
    assert status_of(raw(server, request)) == 204
    env = seen[0]
    assert env["REQUEST_METHOD"] == "POST"
    assert env["SCRIPT_NAME"] == ""
    assert env["PATH_INFO"] == "/caf\xc3\xa9/\xe9"   # decoded bytes, as latin-1
    assert env["QUERY_STRING"] == "q=a%20b&x=1"      # left as sent
    assert env["CONTENT_TYPE"] == "application/json"
    assert env["CONTENT_LENGTH"] == "4"
    assert env["body"] == b'{"a"'
    assert env["SERVER_NAME"] == "127.0.0.1"
    assert env["SERVER_PORT"] == str(server.port)
    assert env["SERVER_PROTOCOL"] == "HTTP/1.1"
    assert env["REMOTE_ADDR"] == "127.0.0.1"
    assert env["HTTP_HOST"] == "example.test"
    assert env["HTTP_X_TAG"] == "one, two"
    assert env["HTTP_AUTHORIZATION"] == "Bearer t"
    assert "HTTP_X_FORGED" not in env   # an underscore would let it pose as X-Forged
    assert "HTTP_CONTENT_TYPE" not in env and "HTTP_CONTENT_LENGTH" not in env
    assert env["wsgi.version"] == (1, 0)
    assert env["wsgi.url_scheme"] == "http"
    assert env["wsgi.multithread"] is True
    assert env["wsgi.multiprocess"] is False
    assert env["wsgi.run_once"] is False
    assert env["wsgi.input_terminated"] is True
    assert hasattr(env["wsgi.errors"], "write")


def test_pipelined_requests_are_answered_in_order(serve: Serve) -> None:
    def app(environ: Environ, start_response: Any) -> list[bytes]:
        start_response("200 OK", [])
        return [environ["PATH_INFO"].encode()]

    server = serve(app)
    out = raw(server, b"GET /one HTTP/1.1\r\nHost: x\r\n\r\n"
                      b"POST /two HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
                      b"GET /three HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert out.count(b"HTTP/1.1 200 OK") == 3
    assert out.index(b"/one") < out.index(b"/two") < out.index(b"/three")


def test_http_1_0_clients_get_a_closed_or_kept_connection_as_they_ask(serve: Serve) -> None:
    def stream(environ: Environ, start_response: Any) -> Iterator[bytes]:
        start_response("200 OK", [])
        yield b"no length, "
        yield environ["SERVER_PROTOCOL"].encode()

    server = serve(stream)
    out = raw(server, b"GET / HTTP/1.0\r\n\r\n")   # no Host needed in 1.0
    assert out.startswith(b"HTTP/1.1 200 OK") and b"Connection: close" in out
    assert b"Transfer-Encoding" not in out and out.endswith(b"no length, HTTP/1.0")

    listed = serve(hello)
    with socket.create_connection(("127.0.0.1", listed.port), timeout=5) as sock:
        for _ in range(2):   # a 1.0 keep-alive: the connection stays open for the second
            sock.sendall(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            answer = sock.recv(65536)
            assert b"Connection: keep-alive" in answer and answer.endswith(b"hello ")


def test_a_chunked_request_body_reaches_the_app_with_its_length(serve: Serve) -> None:
    server = serve(hello, max_body_bytes=100)
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        conn.request("POST", "/", body=iter([b"chunked ", b"body"]), encode_chunked=True)
        response = conn.getresponse()
        assert response.read() == b"hello chunked body"
    finally:
        conn.close()
    too_big = raw(server, b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                          b"65\r\n" + b"x" * 101 + b"\r\n0\r\n\r\n")
    assert status_of(too_big) == 413


def test_expect_100_continue_is_answered_before_the_body_is_sent(serve: Serve) -> None:
    server = serve(hello)
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"PUT / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
                     b"Expect: 100-continue\r\nConnection: close\r\n\r\n")
        assert sock.recv(65536) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(b"there")
        assert read_all(sock).endswith(b"hello there")


# --- streaming ----------------------------------------------------------------------------

def test_a_stream_reaches_the_client_event_by_event(serve: Serve) -> None:
    go = threading.Event()

    def events(environ: Environ, start_response: Any) -> Iterator[bytes]:
        start_response("200 OK", [("Content-Type", "text/event-stream")])
        yield b"data: first\n\n"
        go.wait(5)   # the second event waits until the client has read the first
        yield b"data: second\n\n"

    server = serve(events)
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=3)
    try:
        conn.request("GET", "/events")
        response = conn.getresponse()
        assert response.getheader("Transfer-Encoding") == "chunked"
        assert response.read1(65536) == b"data: first\n\n"   # would time out if buffered
        go.set()
        assert response.read() == b"data: second\n\n"
    finally:
        conn.close()


def test_a_client_leaving_mid_stream_closes_the_apps_iterator(serve: Serve) -> None:
    closed = threading.Event()
    sent = []

    def endless(environ: Environ, start_response: Any) -> Iterator[bytes]:
        start_response("200 OK", [("Content-Type", "text/event-stream")])
        try:
            while True:
                sent.append(1)
                yield b"data: tick\n\n"
                time.sleep(0.02)
        finally:
            closed.set()

    server = serve(endless)
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert b"data: tick" in sock.recv(65536)
    started = time.monotonic()
    assert closed.wait(5), "the app's generator was never closed"
    assert time.monotonic() - started < 2.0
    count = len(sent)
    time.sleep(0.1)
    assert len(sent) == count, "the app was iterated after its close()"


def test_the_write_callable_and_a_content_length_are_honoured(serve: Serve) -> None:
    def app(environ: Environ, start_response: Any) -> list[bytes]:
        write = start_response("200 OK", [("Content-Length", "11")])
        write(b"hello ")
        return [b"", b"world"]

    server = serve(app)
    response = requests.get(server.url, timeout=5)
    assert response.text == "hello world" and response.headers["Content-Length"] == "11"
    assert "Transfer-Encoding" not in response.headers


# --- errors -------------------------------------------------------------------------------

@pytest.mark.parametrize(("head", "status"), [
    (b"GARBAGE\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\n\r\n", 400),                                   # no Host
    (b"GET / HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n  folded\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nHost: x\r\nBad Name: 1\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nHost : x\r\n\r\n", 400),
    (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
     b"Transfer-Encoding: chunked\r\n\r\n", 400),                         # smuggling shape
    (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", 400),
    (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400),
    (b"GET nowhere HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    (b"GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505),
    (b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
    (b"GET / HTTP/1.1\r\nHost: x\r\nX: " + b"y" * 70_000 + b"\r\n\r\n", 431),
])
def test_a_bad_request_is_refused_and_the_connection_closed(serve: Serve, head: bytes,
                                                            status: int) -> None:
    called = []

    def app(environ: Environ, start_response: Any) -> list[bytes]:
        called.append(environ)
        start_response("200 OK", [])
        return [b""]

    server = serve(app)
    out = raw(server, head)
    assert status_of(out) == status
    assert b"\r\nConnection: close\r\n" in out
    assert not called
    assert status_of(raw(server, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")) \
        == 200


def test_a_body_over_the_limit_is_refused_with_413_without_being_read(serve: Serve) -> None:
    server = serve(hello, max_body_bytes=1000)
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        # 10 MB announced, 10 bytes sent: a server that read the body would wait for it.
        sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n0123456789")
        out = read_all(sock)
    assert status_of(out) == 413 and b"Connection: close" in out
    assert b"larger than 1000 bytes" in out
    assert time.monotonic() - started < 2.0


def test_an_app_error_is_a_short_500_and_a_logged_traceback(
        serve: Serve, caplog: pytest.LogCaptureFixture) -> None:
    def broken(environ: Environ, start_response: Any) -> list[bytes]:
        environ["wsgi.input"].read()
        raise RuntimeError("kaboom inside the app")

    server = serve(broken)
    caplog.set_level(logging.DEBUG, logger="mcpsync.server.http")
    response = requests.post(f"{server.url}/tools?token=s3cr3t-query", data=b"s3cr3t-body",
                             headers={"Authorization": "Bearer s3cr3t-token"}, timeout=5)
    assert response.status_code == 500
    assert response.headers["Connection"] == "close"
    assert "kaboom" not in response.text and "Traceback" not in response.text
    records = [r for r in caplog.records if r.name == "mcpsync.server.http"]
    assert any(r.exc_info and "kaboom" in str(r.exc_info[1]) for r in records)
    logged = caplog.text
    assert "POST '/tools'" in logged   # the path quoted: no line breaks forged into the log
    assert "s3cr3t" not in logged, "a query, body or Authorization header reached the log"


def test_start_response_with_exc_info_replaces_a_response_not_yet_sent(serve: Serve) -> None:
    def app(environ: Environ, start_response: Any) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])
        try:
            raise ValueError("late failure")
        except ValueError:
            start_response("503 Service Unavailable", [("X-Why", "late")], sys.exc_info())
        return [b"replaced"]

    def too_late(environ: Environ, start_response: Any) -> Iterator[bytes]:
        start_response("200 OK", [])
        yield b"partial"
        try:
            raise ValueError("after the headers")
        except ValueError:
            start_response("500 Internal Server Error", [], sys.exc_info())  # re-raises
        yield b"never"

    server = serve(app)
    response = requests.get(server.url, timeout=5)
    assert (response.status_code, response.headers["X-Why"], response.text) == \
        (503, "late", "replaced")
    cut = serve(too_late)
    out = raw(cut, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 200 OK") and b"partial" in out
    assert b"never" not in out and not out.endswith(b"0\r\n\r\n"), "the cut must show"


# --- timeouts and limits ------------------------------------------------------------------

def test_a_slowloris_head_is_cut_off_at_the_header_timeout(serve: Serve) -> None:
    server = serve(hello, header_timeout=0.5)
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
        out = b""
        for _ in range(40):   # one header byte every 0.1 s: each recv is quick, the head never
            try:
                sock.sendall(b"X")
            except OSError:
                break
            time.sleep(0.1)
            sock.setblocking(False)
            try:
                out += sock.recv(65536)
            except BlockingIOError:
                pass
            finally:
                sock.setblocking(True)
            if out:
                break
        elapsed = time.monotonic() - started
    assert status_of(out) == 408
    assert 0.4 < elapsed < 1.5, elapsed


def test_an_idle_keep_alive_connection_is_closed_silently(serve: Serve) -> None:
    server = serve(hello, header_timeout=0.3)
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert sock.recv(65536).endswith(b"hello ")
        started = time.monotonic()
        assert read_all(sock) == b"", "no 408 that the client would read as its next answer"
        assert 0.2 < time.monotonic() - started < 1.5


def test_a_body_that_stops_arriving_gets_408_at_the_body_timeout(serve: Serve) -> None:
    server = serve(hello, body_timeout=0.5)
    started = time.monotonic()
    out = raw(server, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nonly ten.")
    assert status_of(out) == 408
    assert 0.4 < time.monotonic() - started < 1.5


def test_a_client_over_the_connection_limit_gets_a_fast_503(serve: Serve) -> None:
    server = serve(hello, max_connections=2)
    holders = [http.client.HTTPConnection("127.0.0.1", server.port, timeout=5) for _ in "ab"]
    try:
        for conn in holders:   # two keep-alive connections hold both threads
            conn.request("GET", "/")
            assert conn.getresponse().read() == b"hello "
        started = time.monotonic()
        third = raw(server, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert time.monotonic() - started < 1.0
        assert status_of(third) == 503 and b"Retry-After: 1\r\n" in third
        refused = requests.get(server.url, timeout=5)
        assert refused.status_code == 503 and refused.headers["Retry-After"] == "1"
        holders.pop().close()   # a slot frees up once the server sees the close
        deadline = time.monotonic() + 3
        while (code := requests.get(server.url, timeout=5, headers={"Connection": "close"})
               .status_code) == 503 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert code == 200
    finally:
        for conn in holders:
            conn.close()
    threads = [t.name for t in threading.enumerate() if t.name.startswith("mcpsync-http-")]
    assert len([n for n in threads if n != "mcpsync-http-accept"]) <= 2, threads


# --- shutdown -----------------------------------------------------------------------------

def test_close_ends_idle_and_streaming_connections_and_joins_every_thread() -> None:
    fds = open_fds()
    closed = threading.Event()

    def app(environ: Environ, start_response: Any) -> Iterator[bytes]:
        start_response("200 OK", [])
        try:
            while True:
                yield b"data: tick\n\n"
                time.sleep(0.02)
        finally:
            closed.set()

    server = WsgiServer(app)
    server.start()
    idle = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    streaming = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    try:
        idle.sendall(b"HEAD / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert idle.recv(65536).startswith(b"HTTP/1.1 200")
        streaming.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert b"tick" in streaming.recv(65536)
        names = {t.name for t in threading.enumerate()}
        assert {"mcpsync-http-accept", "mcpsync-http-1", "mcpsync-http-2"} <= names
        started = time.monotonic()
        server.close(drain=0.3)
        took = time.monotonic() - started
        assert read_all(idle) == b""   # the idle one is closed at once, without a word
        assert closed.is_set(), "the stream's iterator was closed"
    finally:
        idle.close()
        streaming.close()
    assert took < 1.5, took
    assert not [t.name for t in threading.enumerate() if t.name.startswith("mcpsync-http")]
    assert open_fds() == fds
    server.close()   # twice is fine
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", server.port), timeout=1).close()


def test_ctrl_c_stops_serve_forever_cleanly(tmp_path: Any) -> None:
    script = tmp_path / "forever.py"
    script.write_text(textwrap.dedent("""
        import sys, threading, time
        from mcpsync.server.http._builtin import WsgiServer

        def app(environ, start_response):
            start_response("200 OK", [])
            return [b"up"]

        server = WsgiServer(app, port=0)

        def announce():   # once listening, and so inside serve_forever's Ctrl-C handling
            while not server._started or not server._port:
                time.sleep(0.01)
            print(server.url, flush=True)

        threading.Thread(target=announce, daemon=True).start()
        server.serve_forever()
        left = [t.name for t in threading.enumerate() if t.name.startswith("mcpsync-")]
        print("returned", left, flush=True)
    """), encoding="utf-8")
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        with requests.Session() as session:   # a keep-alive connection is open at Ctrl-C
            assert session.get(url, timeout=5).text == "up"
            started = time.monotonic()
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert out.strip() == "returned []"
    assert "Traceback" not in err
    assert time.monotonic() - started < 5


def test_a_port_in_use_is_a_clear_error(serve: Serve) -> None:
    taken = serve(hello)
    with pytest.raises(OSError, match=rf"cannot listen on 127\.0\.0\.1:{taken.port}.*port 0"):
        WsgiServer(hello, port=taken.port).start()
    with pytest.raises(ValueError, match="max_connections > 0"):
        WsgiServer(hello, max_connections=0)


# --- a real framework ---------------------------------------------------------------------

def test_a_flask_app_is_served(serve: Serve) -> None:
    flask = pytest.importorskip("flask")
    app = flask.Flask("builtin-test")

    @app.get("/items/<name>")
    def item(name: str) -> Any:
        return {"name": name, "q": flask.request.args.get("q")}

    @app.post("/echo")
    def echo() -> Any:
        return flask.jsonify(flask.request.get_json())

    @app.get("/stream")
    def stream() -> Any:
        return flask.Response((f"data: {i}\n\n" for i in range(3)),
                              mimetype="text/event-stream")

    server = serve(app)
    with requests.Session() as session:
        assert session.get(f"{server.url}/items/caf%C3%A9?q=1", timeout=5).json() == \
            {"name": "café", "q": "1"}
        assert session.post(f"{server.url}/echo", json={"a": [1, 2]}, timeout=5).json() == \
            {"a": [1, 2]}
        assert session.get(f"{server.url}/missing", timeout=5).status_code == 404
        streamed = session.get(f"{server.url}/stream", timeout=5, stream=True)
        assert list(streamed.iter_lines()) == [b"data: 0", b"", b"data: 1", b"", b"data: 2", b""]
        assert session.head(f"{server.url}/items/x", timeout=5).status_code == 200
