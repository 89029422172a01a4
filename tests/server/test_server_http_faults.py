"""Faults against ``Server.serve_http`` (the built-in server running ``McpApp``).

Clients that misbehave on real loopback sockets: one that leaves mid-stream, one that reads
its stream slowly, oversized and malformed bodies, a batch in 2026-07-28, missing and wrong
headers, foreign Host/Origin, header floods and slowloris heads, and a flood of 2,000 calls
from 16 threads against a server subprocess whose memory is measured. After every fault a
normal call must still be answered. Tests wait for state (threads gone, events set), never for
a fixed time, and each has a pytest-timeout.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import ROOT

import mcpsync
from mcpsync.server import Context, Server

from . import test_server_http_app
from .helpers import MODERN, modern_meta

pytestmark = pytest.mark.timeout(60)

BIG = "x" * 4096


def build(cancelled: threading.Event | None = None) -> Server:
    server = Server("faults", "1")

    @server.tool()
    def add(a: int, b: int) -> str:
        """Add two integers."""
        return str(a + b)

    @server.tool()
    def hold(ctx: Context) -> str:
        """Report progress every 20 ms until cancelled (or 30 s)."""
        for i in range(1500):
            ctx.progress(i)
            if ctx.cancelled.wait(0.02):
                if cancelled is not None:
                    cancelled.set()
                return "cancelled"
        return "done"

    @server.tool()
    def flood(count: int, ctx: Context) -> str:
        """Send ``count`` progress notifications of 4 KiB each, then answer."""
        for i in range(count):
            ctx.progress(i, count, BIG)
        return f"sent {count}"

    return server


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


class Served(test_server_http_app.Served):
    """``serve_http`` on port 0 in a thread (the app tests' harness), plus raw sockets."""

    def connection(self, timeout: float = 10) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=timeout)


@pytest.fixture
def served() -> Iterator[Served]:
    s = Served(build(), header_timeout=1.0, max_body_bytes=1024 * 1024)
    yield s
    s.close()


def call_body(name: str, arguments: dict[str, Any], rid: int = 1,
              **meta: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": name, "arguments": arguments, "_meta": modern_meta(**meta)}}


def call_headers(name: str) -> dict[str, str]:
    return {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": name}


def raw_call(name: str, arguments: dict[str, Any], port: int, **meta: Any) -> bytes:
    body = json.dumps(call_body(name, arguments, **meta)).encode()
    head = "".join(f"{k}: {v}\r\n" for k, v in call_headers(name).items())
    return (f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{head}"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def post(port: int, body: bytes | str, headers: dict[str, str]) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", "/mcp", body, headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def add_works(port: int, a: int = 2, b: int = 3) -> None:
    """A normal call after a fault: answered, and right."""
    status, body = post(port, json.dumps(call_body("add", {"a": a, "b": b})),
                        call_headers("add"))
    assert status == 200, body
    assert json.loads(body)["result"]["content"][0]["text"] == str(a + b)


def read_until_closed(sock: socket.socket) -> bytes:
    parts = []
    while chunk := sock.recv(65536):
        parts.append(chunk)
    return b"".join(parts)


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


# --- clients that leave or dawdle -------------------------------------------------------------

def _both_served(port: int) -> bool:
    """Two connections open at once both get answers (no 503 from a full server)."""
    conns = [http.client.HTTPConnection("127.0.0.1", port, timeout=10) for _ in range(2)]
    try:
        for conn in conns:
            conn.connect()
        statuses = []
        for conn in conns:
            conn.request("POST", "/mcp", json.dumps(call_body("add", {"a": 1, "b": 1})),
                         call_headers("add"))
            response = conn.getresponse()
            response.read()
            statuses.append(response.status)
        return statuses == [200, 200]
    except OSError:
        return False
    finally:
        for conn in conns:
            conn.close()


def test_a_client_leaving_mid_stream_releases_its_thread_and_others_are_served() -> None:
    """With two connection threads, a held stream leaves one: the other serves calls. Once
    the client leaves, the tool sees the cancellation and both threads serve again."""
    cancelled = threading.Event()
    s = Served(build(cancelled), max_connections=2)
    try:
        sock = s.connection()
        sock.sendall(raw_call("hold", {}, s.port, progressToken="p"))
        first = sock.recv(65536)
        assert b"200 OK" in first and b"text/event-stream" in first
        add_works(s.port)                      # served beside the stream
        assert not _both_served(s.port), "two more connections fit beside the stream"
        sock.close()
        assert cancelled.wait(10), "the tool was not cancelled when its client left"
        wait_for(lambda: _both_served(s.port), 10,
                 "the stream's connection thread to be released")
        # The two connections _both_served just closed free their threads when the server
        # reads their EOF, which may come after the next connection arrives (a 503 then):
        # a normal call is answered, and right, once one of them is gone.
        answers: list[tuple[int, bytes]] = []

        def answered() -> bool:
            answers.append(post(s.port, json.dumps(call_body("add", {"a": 40, "b": 2})),
                                call_headers("add")))
            return answers[-1][0] != 503

        wait_for(answered, 10, "a call once _both_served's connections are gone")
        status, body = answers[-1]
        assert status == 200, body
        assert json.loads(body)["result"]["content"][0]["text"] == "42"
    finally:
        s.close()


def test_a_slow_reader_does_not_hold_up_other_clients(served: Served) -> None:
    """A call whose stream (1,500 progress events, 6 MB) its client does not read: the
    socket buffers fill and the server's write to it blocks, while 20 other calls are
    answered. Then the client reads it all, to the result."""
    sock = served.connection(timeout=30)
    sock.sendall(raw_call("flood", {"count": 1500}, served.port, progressToken="f"))
    assert b"text/event-stream" in sock.recv(1024)
    started = time.monotonic()
    for i in range(20):
        add_works(served.port, i, 1)
    fast = time.monotonic() - started
    assert fast < 5.0, f"20 calls took {fast:.2f} s beside a slow reader"
    received = b""
    while chunk := sock.recv(65536):
        received = received[-64:] + chunk
        if b"sent 1500" in received:
            break
    sock.close()
    assert b"sent 1500" in received
    add_works(served.port)


# --- bodies ------------------------------------------------------------------------------------

def test_an_oversized_body_is_413_and_the_connection_closed(served: Served) -> None:
    with served.connection() as sock:
        sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
                     b"\r\nContent-Length: 2000000\r\n\r\n" + b"x" * 1000)
        out = read_until_closed(sock)          # closed without the body being read
    assert status_of(out) == 413, out[:200]
    with served.connection() as sock:
        sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
                     b"\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = b"x" * 65536
        try:
            for _ in range(20):               # 1.25 MiB, over the 1 MiB limit
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        except OSError:
            pass                               # the server may close while we still send
        out = read_until_closed(sock)
    assert status_of(out) == 413, out[:200]
    add_works(served.port)


@pytest.mark.parametrize("body", [b"{not json", b"", b"[]", b'"a string"', b"\xff\xfe",
                                  b'{"jsonrpc": "2.0", "id": 1}'])
def test_malformed_json_is_a_400_json_rpc_error(served: Served, body: bytes) -> None:
    status, reply = post(served.port, body, call_headers("add"))
    assert status == 400, reply
    error = json.loads(reply)["error"]
    assert error["code"] in (-32700, -32600), error
    add_works(served.port)


def test_a_batch_in_2026_07_28_is_refused(served: Served) -> None:
    batch = [call_body("add", {"a": 1, "b": 2}, 1), call_body("add", {"a": 3, "b": 4}, 2)]
    status, reply = post(served.port, json.dumps(batch), call_headers("add"))
    assert status == 400, reply
    assert json.loads(reply)["error"]["code"] == -32600
    add_works(served.port)


# --- headers -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("drop", "override", "status", "code"), [
    ("MCP-Protocol-Version", {}, 400, -32020),
    ("Mcp-Method", {}, 400, -32020),
    ("Mcp-Name", {}, 400, -32020),
    (None, {"Mcp-Name": "hold"}, 400, -32020),
    (None, {"MCP-Protocol-Version": "1999-01-01"}, 400, -32020),
])
def test_bad_or_missing_headers_are_refused(served: Served, drop: str | None,
                                            override: dict[str, str], status: int,
                                            code: int | None) -> None:
    headers = {**call_headers("add"), **override}
    if drop is not None:
        del headers[drop]
    got, reply = post(served.port, json.dumps(call_body("add", {"a": 1, "b": 1})), headers)
    assert got == status, (got, reply)
    if code is not None:
        assert json.loads(reply)["error"]["code"] == code
    add_works(served.port)


@pytest.mark.parametrize(("name", "value"), [("Host", "evil.example"),
                                             ("Host", "localhost.evil.example:80"),
                                             ("Origin", "https://evil.example"),
                                             ("Origin", "null")])
def test_a_foreign_host_or_origin_is_403(served: Served, name: str, value: str) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=10)
    try:
        body = json.dumps(call_body("add", {"a": 1, "b": 1})).encode()
        conn.putrequest("POST", "/mcp", skip_host=True)
        headers = {**call_headers("add"), "Host": f"127.0.0.1:{served.port}",
                   "Content-Length": str(len(body)), name: value}
        for key, item in headers.items():
            conn.putheader(key, item)
        conn.endheaders(body)
        response = conn.getresponse()
        assert response.status == 403
        assert b"allowed_hosts=" in response.read()
    finally:
        conn.close()
    add_works(served.port)


def test_a_header_flood_is_431_and_the_connection_closed(served: Served) -> None:
    flood = b"".join(b"X-Flood-%d: %s\r\n" % (i, b"y" * 60) for i in range(2000))   # ~150 KB
    with served.connection() as sock:
        with contextlib.suppress(OSError):
            sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n" + flood + b"\r\n")
        out = read_until_closed(sock)
    assert status_of(out) == 431, out[:200]
    add_works(served.port)


def test_a_slowloris_head_is_cut_off_and_others_are_served(served: Served) -> None:
    """Eight clients each dribbling a head never finish it; the header timeout (1 s here)
    ends each with 408 while ordinary calls go on being answered."""
    socks = [served.connection() for _ in range(8)]
    started = time.monotonic()
    try:
        for sock in socks:
            sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        answers: list[bytes] = [b""] * len(socks)
        while not all(answers):
            assert time.monotonic() - started < 5, "the slow heads were never cut off"
            add_works(served.port)              # answered while the heads dribble
            for i, sock in enumerate(socks):
                if answers[i]:
                    continue
                with contextlib.suppress(OSError):
                    sock.sendall(b"z")
                sock.setblocking(False)
                try:
                    answers[i] = sock.recv(65536)
                except BlockingIOError:
                    pass
                finally:
                    sock.setblocking(True)
            time.sleep(0.05)                    # the dribble's pace, not a wait for state
        elapsed = time.monotonic() - started
    finally:
        for sock in socks:
            sock.close()
    assert all(status_of(a) == 408 for a in answers), answers
    assert 0.8 < elapsed < 4.0, elapsed
    add_works(served.port)


# --- a flood -----------------------------------------------------------------------------------

def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc for RSS")
@pytest.mark.timeout(180)
def test_a_flood_of_2000_calls_from_16_threads_is_answered_in_bounded_memory() -> None:
    """The feature server as a subprocess (so its RSS is its own): 16 keep-alive clients
    send 125 calls each; every answer is right, and the RSS after 2,000 calls exceeds the
    RSS after a 200-call warm-up by less than 16 MiB."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "peers" / "feature_server.py"),
                             "--http", f"127.0.0.1:{port}"], cwd=ROOT,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        wait_for(lambda: _answers(port) or proc.poll() is not None, 20, "the server")
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        failures: list[str] = []

        def worker(n: int, calls: int) -> None:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            try:
                for i in range(calls):
                    body = {"jsonrpc": "2.0", "id": i, "method": "tools/call",
                            "params": {"name": "add", "arguments": {"a": n, "b": i},
                                       "_meta": modern_meta()}}
                    conn.request("POST", "/mcp", json.dumps(body), {
                        **call_headers("add"), "Mcp-Name": "add"})
                    response = conn.getresponse()
                    reply = json.loads(response.read())
                    if (response.status != 200 or reply.get("id") != i
                            or reply["result"]["structuredContent"]["sum"] != n + i):
                        failures.append(f"{n}/{i}: {response.status} {reply}")
            except Exception as exc:
                failures.append(f"{n}: {type(exc).__name__}: {exc}")
            finally:
                conn.close()

        def wave(calls: int) -> float:
            threads = [threading.Thread(target=worker, args=(n, calls), daemon=True,
                                        name=f"mcpsync-test-flood-{n}") for n in range(16)]
            started = time.monotonic()
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
            assert not any(t.is_alive() for t in threads), "a flood client hung"
            return time.monotonic() - started

        wave(13)                                  # warm-up: 208 calls
        assert not failures, failures[:5]
        before = _rss_kib(proc.pid)
        seconds = wave(125)                       # 2,000 calls
        after = _rss_kib(proc.pid)
        assert not failures, failures[:5]
        assert after - before < 16 * 1024, f"RSS grew {before} -> {after} KiB"
        with mcpsync.connect(url, era="modern", timeout=10) as client:
            assert client.call_tool("add", {"a": 1, "b": 2}).structured == {"sum": 3}
        print(f"2000 calls in {seconds:.1f} s; RSS {before} -> {after} KiB")
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stderr:
            proc.stderr.close()


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False

