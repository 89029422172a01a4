"""Waiting for many stdio servers at once (what ``Manager.close()`` does): a transport's
shutdown steps can be claimed by one waiter (``claim_exit_wait``), taken when due
(``exit_step``), and released; ``_reaper.wait_for_exits`` polls every claimed pidfd on the
calling thread and reports each exit as it happens, while its signalling thread keeps each
server's own schedule. Afterwards ``close()`` finds the steps taken and sends nothing twice.
"""

from __future__ import annotations

import math
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import open_fds

from mcpsync.transport.stdio import StdioTransport, _lifecycle as stdio, _reaper

pytestmark = pytest.mark.timeout(30)

# Exits at stdin EOF, or (with "linger") keeps running until signalled.
SERVER = r'''
import sys, time
sys.stdin.buffer.read()
if sys.argv[1:] == ["linger"]:
    while True:
        time.sleep(1)
'''


def _start(tmp_path: Path, name: str, *args: str) -> StdioTransport:
    path = tmp_path / "server.py"
    path.write_text(SERVER, encoding="utf-8")
    transport = StdioTransport([sys.executable, str(path), *args], name=name)
    transport.start()
    return transport


@pytest.mark.skipif(not hasattr(__import__("os"), "pidfd_open"), reason="needs pidfds")
def test_a_claim_needs_stdin_closed_and_excludes_a_second_one(
        no_leaks: None, tmp_path: Path) -> None:
    t = _start(tmp_path, "claim")
    assert t.claim_exit_wait() == -1          # stdin still open: close() does it all
    t.close_input()
    fd = t.claim_exit_wait()
    assert fd >= 0
    assert t.claim_exit_wait() == -1          # claimed already (the close lock is held)
    t.release_exit_wait()
    t.close()
    assert t.closed
    assert t.claim_exit_wait() == -1          # closed


@pytest.mark.skipif(not hasattr(__import__("os"), "pidfd_open"), reason="needs pidfds")
def test_exit_step_follows_the_schedule_and_close_sends_nothing_twice(
        no_leaks: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stdio, "STDIN_GRACE", 0.3)
    monkeypatch.setattr(stdio, "TERM_GRACE", 5.0)
    t = _start(tmp_path, "steps", "linger")
    t.close_input()
    assert t.claim_exit_wait() >= 0
    now = time.monotonic()
    due = t.exit_step(now)
    assert due == pytest.approx(t._stdin_closed_at + 0.3)   # nothing sent yet
    assert t.returncode() is None
    term_due = t.exit_step(due)                              # the grace is over: SIGTERM
    assert term_due == pytest.approx(due + 5.0)
    t.release_exit_wait()
    assert t.wait_exit(10) == -signal.SIGTERM
    term_at = t._term_at
    t.close()                                               # finds the exit; no new signal
    assert t._term_at == term_at and not t._kill_at
    assert t.exit_step(time.monotonic()) == math.inf         # reaped: nothing to signal


def test_close_lets_the_read_buffer_go(no_leaks: None, tmp_path: Path) -> None:
    t = _start(tmp_path, "buffer")
    assert len(t._rx_buf) > 0
    t.close()
    assert len(t._rx_buf) == 0 and t.receive(0.1) is None


@pytest.mark.skipif(not hasattr(__import__("os"), "pidfd_open"), reason="needs pidfds")
def test_wait_for_exits_reports_each_exit_as_it_happens(
        no_leaks: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two servers that exit at EOF are reported at once, on the calling thread; the one
    that lingers only after its SIGTERM, sent when its own grace ended. Every claim is
    released, so close() afterwards waits for nothing."""
    grace = 1.0
    monkeypatch.setattr(stdio, "STDIN_GRACE", grace)
    fds = open_fds()
    transports = [_start(tmp_path, "a"), _start(tmp_path, "b"),
                  _start(tmp_path, "c", "linger")]
    for t in transports:
        t.close_input()
    claimed = [(t.claim_exit_wait(), t) for t in transports]
    assert all(fd >= 0 for fd, _ in claimed)
    began = time.monotonic()
    reported: list[tuple[str, float, threading.Thread]] = []
    _reaper.wait_for_exits(
        claimed, lambda t: reported.append((t.name, time.monotonic() - began,
                                            threading.current_thread())),
        lambda t: pytest.fail(f"{t.name} left over"), began + 20)
    assert [name for name, _, _ in reported][2] == "c"
    assert all(at < grace for name, at, _ in reported if name != "c"), reported
    assert reported[2][1] >= grace - 0.05, reported
    assert all(thread is threading.current_thread() for _, _, thread in reported)
    for t in transports:
        t.close()
    assert transports[2].returncode() == -signal.SIGTERM
    assert open_fds() <= fds
