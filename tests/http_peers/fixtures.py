"""Pytest fixtures that start the HTTP test peers on loopback, on ephemeral ports.

The root ``tests/conftest.py`` registers this module through ``pytest_plugins``, so every
test takes a fixture by naming it, with no import::

    def test_x(fault_server: FaultServer) -> None: ...

(The functions carry a ``_fixture`` suffix and a ``name=`` so that a test module importing a
helper from here never shadows a fixture parameter.)

- ``fault_server``: a running ``FaultServer`` (``.url``, ``.requests``, ``.faults``), closed
  and its threads joined at teardown.
- ``fault_server_factory``: a callable making more fault servers (a second origin for a
  cross-origin redirect), all closed at teardown.
- ``official_http_server``: an ``OfficialServer`` handle on a subprocess running
  ``official_server.py``; choose the mode by indirect parametrisation
  (``@pytest.mark.parametrize("official_http_server", ["sse-stateful"], indirect=True)``;
  default ``"json-stateless"``). ``.url``, ``.restart()`` (same port), ``.stop()``.
- ``official_http_server_factory``: a callable ``start(mode)`` for several servers in one test.

A mode is ``"<json|sse>-<stateless|stateful>"`` with optional ``-resumable`` and
``-retry<ms>`` suffixes, e.g. ``"sse-stateful-resumable-retry200"``.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from http_peers.fault_server import FaultServer
from mcpsync.client._handshake import forget_era

OFFICIAL_SERVER = Path(__file__).with_name("official_server.py")
_IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
_START_TIMEOUT = 20.0


def _fault_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate()
            if t.name.startswith("test-fault-server-") and t.is_alive()]


@pytest.fixture(name="fault_server_factory")
def fault_server_factory_fixture() -> Iterator[Callable[[], FaultServer]]:
    """Make fault servers on demand; close them all and check no thread of theirs is left."""
    servers: list[FaultServer] = []

    def make() -> FaultServer:
        server = FaultServer()
        # A new server may get the port of one an earlier test used: the client's memory of
        # that server's era must not skip this one's detection.
        forget_era()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.close()
    errors = [e for server in servers for e in server.errors]
    assert not errors, f"the fault server itself failed: {errors}"
    deadline = time.monotonic() + 5
    while _fault_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    left = [t.name for t in _fault_threads()]
    assert not left, f"fault server threads left running: {left}"


@pytest.fixture(name="fault_server")
def fault_server_fixture(fault_server_factory: Callable[[], FaultServer]) -> FaultServer:
    """One running fault server, closed at teardown."""
    return fault_server_factory()


def _mode_args(mode: str) -> list[str]:
    """Turn ``"sse-stateful-resumable-retry200"`` into command-line options."""
    args: list[str] = []
    for part in mode.split("-"):
        if part in ("json", "sse", "stateless", "stateful", "resumable"):
            args.append(f"--{part}")
        elif part.startswith("retry") and part[5:].isdigit():
            args += ["--retry-ms", part[5:]]
        else:
            raise ValueError(f"unknown official server mode part {part!r} in {mode!r}")
    return args


class OfficialServer:
    """A subprocess running ``official_server.py``; restartable on the same port."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self._args = _mode_args(mode)
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""
        self.port = 0
        self._start(0)

    def _start(self, port: int) -> None:
        cmd = [sys.executable, str(OFFICIAL_SERVER), "--port", str(port), *self._args]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True)
        self.proc = proc
        line = [""]
        reader = threading.Thread(target=lambda: line.__setitem__(0, proc.stdout.readline()
                                                                  if proc.stdout else ""),
                                  name="test-official-server-url", daemon=True)
        reader.start()
        reader.join(_START_TIMEOUT)
        url = line[0].strip()
        if not url.startswith("http://"):
            self.stop()
            raise RuntimeError(f"official server ({self.mode}) printed no URL: {url!r}")
        self.url = url
        self.port = int(url.split(":")[2].split("/")[0])

    def restart(self) -> None:
        """Kill the server and start a fresh one on the same port (sessions are lost)."""
        port = self.port
        self.stop()
        self._start(port)

    def stop(self) -> None:
        """Kill the process and reap it."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        proc.kill()
        proc.wait(10)
        if proc.stdout:
            proc.stdout.close()


def _require_mcp() -> None:
    """The official SDK is a test peer: missing, it skips locally and fails under CI."""
    if importlib.util.find_spec("mcp") is None:  # pragma: no cover - environment
        if _IN_CI:
            pytest.fail("test peer 'mcp' is missing in CI")
        pytest.skip("test peer 'mcp' is not installed")


@pytest.fixture(name="official_http_server_factory")
def official_http_server_factory_fixture() -> Iterator[Callable[[str], OfficialServer]]:
    """Start official servers by mode; every one is killed at teardown."""
    _require_mcp()
    servers: list[OfficialServer] = []

    def start(mode: str = "json-stateless") -> OfficialServer:
        server = OfficialServer(mode)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(name="official_http_server")
def official_http_server_fixture(request: pytest.FixtureRequest,
                         official_http_server_factory: Callable[[str], OfficialServer]
                         ) -> OfficialServer:
    """One official server; the mode comes from indirect parametrisation."""
    mode = getattr(request, "param", "json-stateless")
    return official_http_server_factory(mode)


__all__ = ["OfficialServer", "fault_server_factory_fixture", "fault_server_fixture",
           "official_http_server_factory_fixture", "official_http_server_fixture"]
