"""Helpers for the server tests: drive ``Server.serve()`` in-process over two ``os.pipe()`` pairs.

A real pipe (not a mock stream) so that the reader thread blocks in a real read, end of input
is a real EOF, and a frame reaches the test only when the server flushed it. Holds no tests.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
from typing import Any

from mcpsync.protocol import META_CLIENT_CAPABILITIES, META_LOG_LEVEL, META_PROTOCOL_VERSION
from mcpsync.server import Server

MODERN = "2026-07-28"


def modern_meta(version: str = MODERN, *, log_level: str | None = None,
                **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {META_PROTOCOL_VERSION: version, META_CLIENT_CAPABILITIES: {}}
    if log_level is not None:
        meta[META_LOG_LEVEL] = log_level
    meta.update(extra)
    return meta


def initialize_params(version: str = "2025-11-25") -> dict[str, Any]:
    return {"protocolVersion": version, "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"}}


class _LineReader:
    """Lines from a descriptor with a timeout: a silent server fails a test, never hangs it."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buf = b""

    def readline(self, timeout: float) -> bytes | None:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no line from the server within {timeout} s")
            ready, _, _ = select.select([self.fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(self.fd, 65536)
            if not chunk:
                if self.buf:
                    line, self.buf = self.buf, b""
                    return line
                return None
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line


class PipeServer:
    """``server.serve()`` on a thread, fed and read through OS pipes."""

    def __init__(self, server: Server, *, stop: threading.Event | None = None) -> None:
        self.server = server
        self.stop = stop
        c2s_r, self._c2s_w = os.pipe()
        self._s2c_r, s2c_w = os.pipe()
        self.stdin = open(c2s_r, "rb", buffering=0)  # noqa: SIM115
        self.stdout = open(s2c_w, "wb", buffering=0)  # noqa: SIM115
        self.reader = _LineReader(self._s2c_r)
        self.error: BaseException | None = None
        self.returned = threading.Event()
        self._readers_before = {t for t in threading.enumerate()
                                if t.name == "mcpsync-server-reader"}
        self.thread = threading.Thread(target=self._run, name="test-serve", daemon=True)
        self.thread.start()
        self._eof_sent = False

    def _run(self) -> None:
        try:
            self.server.serve(self.stdin, self.stdout, self.stop)
        except BaseException as exc:
            self.error = exc
        finally:
            # serve() writes nothing after it returns: closing our copy of its output lets the
            # test read to end of file, which proves that nothing more was written.
            self.stdout.close()
            self.returned.set()

    # -- client side -------------------------------------------------------------------

    def send_raw(self, data: bytes) -> None:
        os.write(self._c2s_w, data)

    def send(self, message: Any) -> None:
        self.send_raw(json.dumps(message).encode() + b"\n")

    def recv(self, timeout: float = 5.0) -> Any:
        line = self.reader.readline(timeout)
        if line is None:
            return None
        return json.loads(line)

    def request(self, id: Any, method: str, params: Any = None, *,
                timeout: float = 5.0) -> dict[str, Any]:
        """Send a request and return its response; notifications before it go to ``seen``."""
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        return self.response_to(id, timeout=timeout)

    def response_to(self, id: Any, *, timeout: float = 5.0) -> dict[str, Any]:
        self.seen: list[Any] = []
        while True:
            reply = self.recv(timeout)
            assert reply is not None, "the server closed its output"
            if isinstance(reply, dict) and "method" not in reply and reply.get("id") == id:
                return reply
            self.seen.append(reply)

    def notification(self, method: str, timeout: float = 5.0) -> dict[str, Any]:
        """The next notification ``method``, looked for in ``seen`` first and then read
        (announcements of changes come from their own thread, maybe after a response)."""
        for index, message in enumerate(getattr(self, "seen", [])):
            if isinstance(message, dict) and message.get("method") == method:
                return dict(self.seen.pop(index))
        deadline = time.monotonic() + timeout
        while True:
            message = self.recv(max(0.01, deadline - time.monotonic()))
            assert message is not None, "the server closed its output"
            if isinstance(message, dict) and message.get("method") == method:
                return dict(message)
            self.seen = [*getattr(self, "seen", []), message]

    def quiet(self, seconds: float = 0.3) -> list[Any]:
        """Whatever arrives within ``seconds`` (the proof that nothing more is sent)."""
        got: list[Any] = []
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                message = self.recv(remaining)
            except TimeoutError:
                break
            if message is None:
                break
            got.append(message)
        return got

    def notify(self, method: str, params: Any = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)

    def initialize(self, version: str = "2025-11-25") -> dict[str, Any]:
        reply = self.request("init", "initialize", initialize_params(version))
        self.notify("notifications/initialized")
        return reply

    def call(self, id: Any, name: str, arguments: Any = None, *, meta: Any = None,
             timeout: float = 5.0) -> dict[str, Any]:
        params: dict[str, Any] = {"name": name}
        if arguments is not None:
            params["arguments"] = arguments
        if meta is not None:
            params["_meta"] = meta
        return self.request(id, "tools/call", params, timeout=timeout)

    # -- ending ------------------------------------------------------------------------

    def eof(self) -> None:
        if not self._eof_sent:
            self._eof_sent = True
            os.close(self._c2s_w)

    def wait(self, timeout: float = 5.0) -> bool:
        """Wait for ``serve()`` to return; True when it did."""
        return self.returned.wait(timeout)

    def close(self) -> None:
        """End input, wait for serve() and our reader thread, then close every descriptor."""
        self.eof()
        self.wait(5.0)
        deadline = time.monotonic() + 5.0
        for t in threading.enumerate():
            if t.name == "mcpsync-server-reader" and t not in self._readers_before:
                t.join(max(0.0, deadline - time.monotonic()))
        for stream in (self.stdin, self.stdout):
            stream.close()
        os.close(self._s2c_r)

    def __enter__(self) -> PipeServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_script(source: str, lines: list[Any], *, timeout: float = 20.0,
               args: list[str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run a Python server script in a subprocess, feed it JSON lines, then end its input."""
    data = b"".join(json.dumps(m).encode() + b"\n" if not isinstance(m, bytes) else m
                    for m in lines)
    return subprocess.run([sys.executable, "-c", source, *(args or [])], input=data,
                          capture_output=True, timeout=timeout, check=False)


def json_lines(out: bytes) -> list[Any]:
    """Every stdout line must be JSON: that is the point of the stdout protection."""
    return [json.loads(line) for line in out.splitlines() if line.strip()]
