"""Where the kernel can read no exit status without reaping (macOS, the BSDs; on Linux the
status is read by pid without a pidfd, see test_stdio_reap_by_pid), the discard of a server
whose start() was interrupted is one ``killpg`` and one ``Popen.wait()``, as before: a Ctrl-C
in that wait goes to the caller and nothing is run again.

Run again, it did harm: a Ctrl-C as ``os.waitpid`` returns inside ``Popen.wait()`` reaps the
child and loses its status (``returncode`` stays ``None``), and one as the ``acquire(False)``
of ``Popen.wait``'s own Ctrl-C re-wait returns leaves ``Popen``'s waitpid lock held. A second
try then sent SIGKILL to the reaped (free) pid and blocked in ``Popen.wait()`` until yet
another Ctrl-C. The pidfd support, and the reading by pid, are switched off here as the code
sees them on such a system.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from types import FrameType
from typing import Any

import pytest
from helpers import child_state as state, interrupt_at_return, open_fds

from mcpsync.transport.stdio import _lifecycle as stdio

pytestmark = [pytest.mark.timeout(60),
              pytest.mark.skipif(os.name == "nt", reason="POSIX process groups")]


def _popen() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)


@pytest.fixture
def no_pidfd(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """No pidfd for the discard, no reading by pid; every killpg logs what its target was
    at that moment."""
    monkeypatch.setattr(stdio, "_CAN_PEEK", False)
    monkeypatch.setattr(stdio, "_HAS_PIDFD", False)
    monkeypatch.setattr(stdio, "_CAN_PEEK_PID", False)
    monkeypatch.setattr(stdio, "_by_pid", None)
    signalled: list[str] = []
    real = os.killpg

    def killpg(pid: int, sig: int) -> None:
        signalled.append(state(pid))
        real(pid, sig)

    monkeypatch.setattr(os, "killpg", killpg)
    return signalled


def _forget(proc: subprocess.Popen[bytes]) -> None:
    """After a test that left Popen broken: its lock free, its child reaped, so that
    neither its finalizer nor a later test trips over it."""
    if proc._waitpid_lock.locked():
        proc._waitpid_lock.release()
    if state(proc.pid) != "reaped":
        os.killpg(proc.pid, signal.SIGKILL)
        os.waitpid(proc.pid, 0)
    if proc.returncode is None:
        proc.returncode = -signal.SIGKILL
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                    reason="needs to interrupt the main thread")
def test_two_ctrl_cs_in_popen_wait_neither_hang_the_discard_nor_signal_a_freed_pid(
        no_leaks: None, no_pidfd: list[str]) -> None:
    """Ctrl-C as ``waitpid`` returns in ``Popen.wait()`` (the child reaped, its status lost),
    then as the ``acquire`` of ``Popen.wait``'s own re-wait returns (its lock left held):
    the discard raises at once, and its one SIGKILL went to the child while it ran. A
    watchdog sends SIGINT every second from the 2 s mark, to end a discard that blocks."""
    proc = _popen()
    plan = [("_try_wait", "waitpid"), ("_wait", "acquire")]
    placed: list[tuple[str, str]] = []

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        if (event == "c_return" and plan and frame.f_code.co_filename == subprocess.__file__
                and (frame.f_code.co_name, getattr(arg, "__name__", "")) == plan[0]):
            placed.append(plan.pop(0))
            raise KeyboardInterrupt

    def rearm(frame: FrameType, event: str, arg: Any) -> Any:
        # A profile hook that raises is removed: put it back for the next interrupt.
        if sys.getprofile() is None and plan:
            sys.setprofile(hook)
        return rearm

    main = threading.main_thread().ident
    assert main is not None
    done = threading.Event()
    sent: list[float] = []

    def watchdog() -> None:
        for _ in range(6):
            if done.wait(2.0 if not sent else 1.0):
                return
            sent.append(time.monotonic())
            signal.pthread_kill(main, signal.SIGINT)

    dog = threading.Thread(target=watchdog, name="test-watchdog", daemon=True)
    started = time.monotonic()
    try:
        dog.start()
        sys.settrace(rearm)
        sys.setprofile(hook)
        try:
            stdio._discard(proc)
        except KeyboardInterrupt:
            pass
        finally:
            sys.settrace(None)
            sys.setprofile(None)
        took = time.monotonic() - started
        done.set()
        dog.join(5)
        assert placed == [("_try_wait", "waitpid"), ("_wait", "acquire")], placed
        assert not sent and took < 1.5, (took, sent)
        assert no_pidfd == ["running"], no_pidfd
        assert proc.stdin is not None and proc.stdin.closed
    finally:
        done.set()
        dog.join(5)
        _forget(proc)


def test_ctrl_c_at_any_return_in_the_discard_signals_only_its_own_child(
        no_pidfd: list[str]) -> None:
    """Swept over every C call's return in the discard and ``Popen.wait()``: at most one
    SIGKILL, sent while the child was ours (running), and the pipes closed whenever the
    discard got past its wait."""
    codes = {stdio._discard.__code__, stdio._end_child.__code__,
             subprocess.Popen.wait.__code__, subprocess.Popen._wait.__code__,
             subprocess.Popen._try_wait.__code__}
    interrupted: list[str] = []
    for nth in range(30):
        before = open_fds()
        proc = _popen()
        seen_before = len(interrupted)
        no_pidfd.clear()
        try:
            try:
                with interrupt_at_return(codes, nth, interrupted, qualified=True):
                    stdio._discard(proc)
            except KeyboardInterrupt:
                pass
            where = (nth, interrupted[seen_before:])
            assert no_pidfd == ["running"], (where, no_pidfd)
            assert open_fds() <= before, where
        finally:
            _forget(proc)
        if len(interrupted) == seen_before:
            break
    else:
        pytest.fail("the sweep never ran out of C calls to interrupt")
    names = {name.split(": ")[1] for name in interrupted}
    assert {"waitpid", "close"} <= names, interrupted
