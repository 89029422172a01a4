"""The 2024-11-05 HTTP+SSE transport when its stream drops.

A tiny stdlib server of its own: an HTTP/1.0-style event stream (no chunked encoding, so the
client's unbuffered reader is exercised too) that a test can cut at any moment.
"""

from __future__ import annotations

import contextlib
import json
import queue
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

import mcpsync
from mcpsync.errors import ConnectionLost

pytestmark = pytest.mark.timeout(30)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.streams: dict[str, queue.SimpleQueue[bytes | None]] = {}
        self.sockets: list[socket.socket] = []
        self.log: list[tuple[str, str, Any]] = []   # (verb, path, JSON-RPC method)
        self.lock = threading.Lock()
        self.hung = threading.Event()               # the never-answered call arrived
        self.url = f"http://127.0.0.1:{self.server_address[1]}/sse"

    def drop_streams(self) -> None:
        """Cut every open event stream (as a crashed proxy would)."""
        with self.lock:
            socks, self.sockets = self.sockets, []
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.server.log.append(("GET", self.path, None))
        sid = str(len(self.server.streams))
        events: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        with self.server.lock:
            self.server.streams[sid] = events
            self.server.sockets.append(self.connection)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        try:
            self.wfile.write(f"event: endpoint\ndata: /messages?s={sid}\n\n".encode())
            self.wfile.flush()
            while (data := events.get()) is not None:
                self.wfile.write(b"event: message\ndata: " + data + b"\n\n")
                self.wfile.flush()
        except OSError:
            pass
        self.close_connection = True

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        message = json.loads(body)
        self.server.log.append(("POST", self.path, message.get("method")))
        if not self.path.startswith("/messages?s="):
            self.send_response(405)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        events = self.server.streams[self.path.split("=", 1)[1]]
        self.send_response(202)
        self.send_header("Content-Length", "0")
        self.end_headers()
        if (message.get("params") or {}).get("name") == "hang":
            self.server.hung.set()
        if "id" in message and "method" in message:
            result = self._result(message["method"], message.get("params") or {})
            if result is not None:
                events.put(json.dumps({"jsonrpc": "2.0", "id": message["id"],
                                       "result": result}).encode())

    @staticmethod
    def _result(method: str, params: dict[str, Any]) -> dict[str, Any] | None:
        if method == "initialize":
            return {"protocolVersion": "2024-11-05", "serverInfo": {"name": "old"},
                    "capabilities": {"tools": {}, "logging": {}}}
        if method == "tools/call" and params.get("name") == "hang":
            return None      # never answered: the stream will drop first
        if method == "tools/call":
            text = params["arguments"]["text"]
            return {"content": [{"type": "text", "text": text}]}
        return {}


@pytest.fixture
def old_server() -> Iterator[_Server]:
    server = _Server()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              name="test-sse2024-server", daemon=True)
    thread.start()
    yield server
    server.drop_streams()
    for events in list(server.streams.values()):
        events.put(None)
    server.shutdown()
    server.server_close()
    thread.join(5)


def test_http_sse_stream_drop_fails_pending_and_reconnects(old_server: _Server) -> None:
    with mcpsync.connect(old_server.url, timeout=5) as client:
        assert client.protocol_version == "2024-11-05"
        client.set_log_level("debug")
        assert client.call_tool("echo", {"text": "one"}).text == "one"
        pending = client.submit_tool("hang", {})
        assert old_server.hung.wait(5)        # the call reached the server: now cut
        old_server.drop_streams()
        with pytest.raises(ConnectionLost) as info:
            pending.result(10)
        assert info.value.maybe_executed
        assert client.call_tool("echo", {"text": "two"}).text == "two"
    gets = [entry for entry in old_server.log if entry[0] == "GET"]
    assert len(gets) == 2
    methods = [m for verb, path, m in old_server.log if path.startswith("/messages?s=1")]
    assert methods[:3] == ["initialize", "notifications/initialized", "logging/setLevel"]
    assert methods[-1] == "tools/call"
