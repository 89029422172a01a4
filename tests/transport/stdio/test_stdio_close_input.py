"""``StdioTransport.close_input()``: the first step of the shutdown, without the wait.

The Manager closes every server's stdin this way before it waits for any of them. What it
must do: the server sees EOF (and may exit) while ``close()`` has not run yet; ``close()``
then finishes the job (reaps, joins, closes every descriptor) and still escalates to SIGTERM
for a server that ignores the EOF, after the stdin grace counted from the early close; and it
never acts on a transport that is closed or was never started.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from helpers import open_fds

from mcpsync.transport.stdio import StdioTransport, _lifecycle as stdio

pytestmark = pytest.mark.timeout(30)

# Exits at stdin EOF with status 3, or (with "linger") keeps running until signalled.
SERVER = r'''
import sys, time
sys.stdin.buffer.read()
if sys.argv[1:] == ["linger"]:
    while True:
        time.sleep(1)
sys.exit(3)
'''


def _argv(tmp_path: Path, *args: str) -> list[str]:
    path = tmp_path / "server.py"
    path.write_text(SERVER, encoding="utf-8")
    return [sys.executable, str(path), *args]


def test_close_input_lets_the_server_exit_before_close(no_leaks: None,
                                                       tmp_path: Path) -> None:
    fds = open_fds()
    t = StdioTransport(_argv(tmp_path), name="early")
    t.start()
    t.close_input()
    assert t.wait_exit(10) == 3          # EOF reached it without close()
    assert not t.closed
    t.close()
    assert t.closed and t.returncode() == 3
    assert open_fds() <= fds
    t.close_input()                      # after close: nothing to do, no error


def test_close_after_close_input_still_terminates_a_lingering_server(
        no_leaks: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stdio, "STDIN_GRACE", 1.5)
    t = StdioTransport(_argv(tmp_path, "linger"), name="linger")
    t.start()
    t.close_input()
    time.sleep(1.6)                      # the whole grace passes before close() is called
    assert t.returncode() is None        # EOF alone did not end it
    started = time.monotonic()
    t.close()
    # The grace ran from close_input(): close() sent SIGTERM at once, not a grace later.
    assert time.monotonic() - started < 1.2
    assert t.returncode() == -15


def test_close_input_before_start_does_nothing() -> None:
    t = StdioTransport([sys.executable, "-c", "pass"], name="unstarted")
    t.close_input()
    assert not t.closed
    t.close()
