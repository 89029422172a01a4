"""Ctrl-C during a write never leaves the transport's write lock taken.

CPython raises a ``KeyboardInterrupt`` where a call returns. Had ``send_bytes_until`` taken
its write lock with ``ok = lock.acquire()``, a Ctrl-C arriving as that call returned would
leave the lock held with nobody to release it: every later write on the connection would
wait for ever (``send_bytes`` has no deadline) or time out. The tests raise the interrupt
at each C call's return inside the write in turn (with a profile hook, the one way to hit
that exact point every time), against a real server process, and check that the lock is
free afterwards, that the stream is still whole and that the next write goes out.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest
from helpers import interrupt_at_return

from mcpsync.gateway._rawstdio import RawStdioTransport
from mcpsync.jsonrpc import ParseError
from mcpsync.transport.stdio import StdioTransport, _transport as stdio

ECHO = """
import sys
for line in sys.stdin.buffer:
    sys.stdout.buffer.write(line)
    sys.stdout.buffer.flush()
"""


@pytest.fixture
def echo(tmp_path: Path) -> Iterator[StdioTransport]:
    path = tmp_path / "echo.py"
    path.write_text(ECHO)
    t = StdioTransport([sys.executable, str(path)], name="echo")
    t.start()
    yield t
    t.close()


def wait_for_echo(t: StdioTransport, method: str) -> None:
    """Read until the echo of ``method`` arrives; every frame read must be whole."""
    deadline = time.monotonic() + 10
    while True:
        assert time.monotonic() < deadline, f"{method} did not come back"
        items = t.receive(1.0)
        assert items is not None
        for item in items:
            assert not isinstance(item, ParseError), f"a frame was torn: {item!r}"
            if getattr(item, "method", None) == method:
                return


SEND = {stdio.StdioTransport.send_bytes_until.__code__, stdio.StdioTransport.send_bytes.__code__}


@pytest.mark.parametrize("contended", [False, True], ids=["free", "contended"])
@pytest.mark.parametrize("deadline", [math.inf, 30.0], ids=["no-deadline", "deadline"])
def test_ctrl_c_at_any_return_in_a_write_leaves_the_lock_free(
        echo: StdioTransport, contended: bool, deadline: float, no_leaks: None) -> None:
    interrupted: list[str] = []
    nth = 0
    while True:
        holder: threading.Thread | None = None
        if contended:   # another writer holds the lock for a moment: the waiting path
            taken = threading.Event()

            def hold(taken: threading.Event = taken) -> None:
                with echo._write_lock:
                    taken.set()
                    time.sleep(0.05)

            holder = threading.Thread(target=hold, name="mcpsync-test-holder", daemon=True)
            holder.start()
            assert taken.wait(5)
        seen: list[str] = []
        frame = b'{"jsonrpc":"2.0","method":"m%d"}' % nth
        until = deadline if deadline == math.inf else time.monotonic() + deadline
        try:
            with interrupt_at_return(SEND, nth, seen):
                echo.send_bytes_until(frame, until)
        except KeyboardInterrupt:
            assert seen
        if holder is not None:
            holder.join(5)
        if not seen:   # no call left to interrupt: every return was tried
            break
        interrupted += seen
        assert not echo._write_lock.locked(), f"Ctrl-C after {seen[0]}() kept the lock"
        # The next write goes out, and nothing before it was torn.
        echo.send_bytes_until(b'{"jsonrpc":"2.0","method":"mark%d"}' % nth,
                              time.monotonic() + 5)
        wait_for_echo(echo, f"mark{nth}")
        nth += 1
    assert "write" in interrupted   # the interrupts reached the write itself


def test_ctrl_c_in_write_now_leaves_the_lock_free(tmp_path: Path, no_leaks: None) -> None:
    path = tmp_path / "echo.py"
    path.write_text(ECHO)
    t = RawStdioTransport([sys.executable, str(path)], name="raw")
    t.start()
    try:
        codes = {RawStdioTransport.write_now.__code__}
        interrupted: list[str] = []
        nth = 0
        while True:
            seen: list[str] = []
            try:
                with interrupt_at_return(codes, nth, seen):
                    t.write_now(b'{"jsonrpc":"2.0","method":"m"}\n')
            except KeyboardInterrupt:
                pass
            if not seen:
                break
            interrupted += seen
            assert not t._write_lock.locked(), f"Ctrl-C after {seen[0]}() kept the lock"
            nth += 1
        assert "write" in interrupted
        assert t.write_now(b'{"jsonrpc":"2.0","method":"last"}\n')
    finally:
        t.close()




def test_ctrl_c_as_a_partial_write_is_handed_over_hands_the_frame_to_the_finisher(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_leaks: None) -> None:
    # A frame larger than the pipe, to a process that never reads: part of it goes out and
    # send_bytes_until hands the rest to _write_rest. A Ctrl-C as that call begins (the
    # profile hook raises at its "call" event, where CPython would check for signals) must
    # not release the lock over half a frame: the finisher takes the frame over, and tears
    # the connection down when it cannot finish (FINISH_GRACE, made short here).
    monkeypatch.setattr(stdio, "FINISH_GRACE", 0.3)
    path = tmp_path / "deaf.py"
    path.write_text("import time\ntime.sleep(60)\n")
    t = StdioTransport([sys.executable, str(path)], name="deaf")
    t.start()
    try:
        code = stdio.StdioTransport._write_rest.__code__

        def hook(frame: FrameType, event: str, arg: object) -> None:
            if event == "call" and frame.f_code is code:
                raise KeyboardInterrupt

        sys.setprofile(hook)
        try:
            with pytest.raises(KeyboardInterrupt):
                t.send_bytes_until(b'{"x":"' + b"y" * (1 << 20) + b'"}', time.monotonic() + 0.2)
        finally:
            sys.setprofile(None)
        assert t._aside.finisher is not None   # handed over, not released under half a frame
        deadline = time.monotonic() + 10
        while t._write_lock.locked() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not t._write_lock.locked()
        assert t._stdin_fd < 0   # the frame could not be finished: the stream was closed
    finally:
        t.close()


def test_ctrl_c_while_close_takes_the_write_lock_leaves_it_free(
        tmp_path: Path, no_leaks: None) -> None:
    """``close()`` closes stdin under the write lock: an interrupt at any C call's return in
    that step leaves the lock free, so a writer on another thread is never left waiting for
    it (writers take the lock before they look whether the transport is closing)."""
    path = tmp_path / "echo.py"
    path.write_text(ECHO)
    codes = {StdioTransport._close_stdin.__code__}
    nth = 0
    while True:
        t = StdioTransport([sys.executable, str(path)], name="echo")
        t.start()
        seen: list[str] = []
        try:
            try:
                with interrupt_at_return(codes, nth, seen):
                    t._close_stdin(5.0)
            except KeyboardInterrupt:
                pass
            assert not t._write_lock.locked(), f"Ctrl-C after {seen} kept the lock"
        finally:
            t.close()
        if not seen:  # no C call left to interrupt
            break
        nth += 1
    assert nth >= 1
