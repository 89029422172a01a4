"""A stdio server's pid stays ours until the close has signalled its process group.

The close signals the server's group by the server's pid, the last time (SIGKILL to the
group's leftovers) after the server has exited. Were the server reaped before that, its pid
could be free, and the signal could reach an unrelated group given the same number. So with
a pidfd, ``returncode()`` and ``wait_exit()`` read the exit status without reaping
(``waitid(..., WNOWAIT)``), and only the close reaps, after its last ``killpg``. These tests
look at the real process: an unreaped exited child is a zombie that ``waitid(P_PID, pid,
WEXITED | WNOHANG | WNOWAIT)`` still reports; a reaped one is gone (``ECHILD``).
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import child_state as state, interrupt_at_return, open_fds, wait_until

from mcpsync.errors import ServerExited
from mcpsync.session import Session
from mcpsync.transport.stdio import StdioTransport, _lifecycle as stdio

pytestmark = [pytest.mark.timeout(30),
              pytest.mark.needs_pidfds(reads_status=True)]

PY = sys.executable

# Exits with the status given in argv[1] as soon as it starts, or (with "wait") at stdin EOF.
EXITS = r'''
import sys
if sys.argv[2:] == ["wait"]:
    sys.stdin.buffer.read()
sys.exit(int(sys.argv[1]))
'''

# Blocks until killed.
SLEEPS = "import time\nwhile True:\n    time.sleep(1)\n"

# Starts a grandchild that stays in the server's process group, says its pid, then exits 5.
GRANDCHILD = r'''
import subprocess, sys
g = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
sys.stdout.write('{"jsonrpc":"2.0","method":"grandchild","params":{"pid":%d}}\n' % g.pid)
sys.stdout.flush()
sys.exit(5)
'''

# A session peer that dies (exit 3, a line on stderr) on its first request.
DIES = r'''
import os, sys
sys.stdin.buffer.readline()
sys.stderr.write("fatal: going away\n")
sys.stderr.flush()
os._exit(3)
'''


def alive(pid: int) -> bool:
    """True while ``pid`` (not our child) exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def started(argv: list[str], name: str) -> StdioTransport:
    """A started transport whose server got its pidfd; closed again when it did not, so that
    a test failing here leaves no server, nor the threads that would fail the tests after
    it (they wait for the threads of earlier tests to end)."""
    t = StdioTransport(argv, name=name)
    t.start()
    try:
        assert t.pid is not None and t._pidfd >= 0
    except BaseException:
        t.close()
        raise
    return t


def spy_signals(t: StdioTransport, pid: int) -> list[tuple[bool, str]]:
    """Record, at each signal to the server's group, whether it was the leftovers' SIGKILL
    and the server's state at that moment."""
    seen: list[tuple[bool, str]] = []
    real = t._signal_group

    def spy(*, kill: bool, leftovers_only: bool = False) -> None:
        seen.append((leftovers_only, state(pid)))
        real(kill=kill, leftovers_only=leftovers_only)

    t._signal_group = spy  # type: ignore[method-assign]
    return seen


@pytest.mark.parametrize(("how", "expected"), [
    ("exit 0", 0), ("exit 3", 3),
    ("SIGKILL", -signal.SIGKILL), ("SIGTERM", -signal.SIGTERM)])
def test_status_is_read_without_reaping_until_close(
        no_leaks: None, tmp_path: Path, how: str, expected: int) -> None:
    before = open_fds()
    path = tmp_path / "server.py"
    path.write_text(SLEEPS if how.startswith("SIG") else EXITS)
    argv = [PY, str(path)] if how.startswith("SIG") else [PY, str(path), how.split()[1]]
    t = started(argv, "status")
    pid = t.pid
    assert pid is not None
    try:
        if how.startswith("SIG"):
            assert t.returncode() is None and t.wait_exit(0.01) is None
            assert state(pid) == "running"
            os.kill(pid, getattr(signal, how))
        assert t.wait_exit(10) == expected
        assert state(pid) == "zombie"          # the status is known, the pid still ours
        for _ in range(3):                      # asked again (the gateway asks often)
            assert t.returncode() == expected
            assert t.wait_exit(0) == expected
        assert t._aside.status == expected     # kept: a flag read from now on
        assert t._proc is not None and t._proc.returncode is None   # Popen did not reap
        assert state(pid) == "zombie"
        seen = spy_signals(t, pid)
    finally:
        t.close()
    assert (True, "zombie") in seen             # the leftovers' SIGKILL: the pid was ours
    assert state(pid) == "reaped"               # the close reaped it
    assert t._proc is not None and t._proc.returncode == expected   # Popen agrees
    assert t.returncode() == expected and t.wait_exit(0) == expected
    assert open_fds() <= before


def test_returncode_alone_does_not_reap(no_leaks: None, tmp_path: Path) -> None:
    """The gateway asks ``returncode()`` (no wait): that does not reap either."""
    path = tmp_path / "server.py"
    path.write_text(EXITS)
    t = started([PY, str(path), "3"], "rc-only")
    pid = t.pid
    assert pid is not None
    try:
        assert wait_until(lambda: t.returncode() is not None)
        assert t.returncode() == 3
        assert state(pid) == "zombie"
    finally:
        t.close()
    assert state(pid) == "reaped"
    assert t.returncode() == 3


def test_close_still_kills_a_grandchild_of_an_exited_unreaped_server(
        no_leaks: None, tmp_path: Path) -> None:
    """The server exits (status 5) and leaves a grandchild in its group; wait_exit() reads
    the status and leaves the server unreaped; close() signals the group while the server
    is still a zombie, kills the grandchild, and only then reaps."""
    before = open_fds()
    path = tmp_path / "server.py"
    path.write_text(GRANDCHILD)
    t = started([PY, str(path)], "gc-exits")
    pid = t.pid
    assert pid is not None
    grandchild = None
    try:
        got = t.receive(10.0)
        assert got
        grandchild = got[0].params["pid"]  # type: ignore[union-attr]
        assert t.wait_exit(10) == 5
        assert state(pid) == "zombie"
        assert alive(grandchild)
        assert os.getpgid(grandchild) == pid
        seen = spy_signals(t, pid)
    finally:
        t.close()
        if grandchild is not None and not wait_until(lambda: not alive(grandchild), 5):
            os.kill(grandchild, signal.SIGKILL)
    assert (True, "zombie") in seen
    assert not alive(grandchild)
    assert state(pid) == "reaped"
    assert t.returncode() == 5
    assert open_fds() <= before


def test_a_session_that_loses_its_server_keeps_it_unreaped_until_the_close(
        no_leaks: None, tmp_path: Path) -> None:
    """A server dies mid-session: the session's loss handling reads its status with
    ``wait_exit`` (the error says exit 3, with its stderr), and the server stays a zombie
    through that and into the close that the loss starts, up to the close's last signal;
    then it is reaped, and nothing is left behind."""
    before = open_fds()
    path = tmp_path / "server.py"
    path.write_text(DIES)
    t = started([PY, str(path)], "dies")
    pid = t.pid
    assert pid is not None
    after_wait: list[str] = []
    at_close: list[str] = []
    real_wait, real_close = t.wait_exit, t.close

    def wait_exit(timeout: float) -> int | None:
        code = real_wait(timeout)
        after_wait.append(state(pid))
        return code

    def close() -> None:
        at_close.append(state(pid))
        real_close()

    t.wait_exit = wait_exit  # type: ignore[method-assign]
    t.close = close  # type: ignore[method-assign]
    seen = spy_signals(t, pid)
    lost: list[BaseException] = []
    session = Session(t, name="dies", on_lost=lost.append)
    session.start()
    try:
        with pytest.raises(ServerExited) as info:
            session.request("anything", {}, timeout=10)
        assert info.value.exit_code == 3
        assert "fatal: going away" in info.value.stderr_tail
        assert wait_until(lambda: bool(lost))
        assert wait_until(lambda: t.closed)
    finally:
        session.close()
    assert after_wait == ["zombie"]
    assert at_close and at_close[0] == "zombie"
    assert (True, "zombie") in seen
    assert state(pid) == "reaped"
    assert t.returncode() == 3
    assert open_fds() <= before


def test_an_answer_from_a_pidfd_closed_meanwhile_is_not_trusted(
        no_leaks: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another thread's close can close the pidfd between returncode() reading its number and
    the waitid(); by then the number may be another file's (or another server's pidfd). The
    answer is then dropped and Popen's (the close read the status and reaped the server) is
    given."""
    path = tmp_path / "server.py"
    path.write_text(EXITS)
    t = started([PY, str(path), "3"], "raced")
    real_waitid: Callable[..., Any] = os.waitid

    def waitid(idtype: int, ident: int, options: int) -> Any:
        monkeypatch.setattr(os, "waitid", real_waitid)
        t.close()   # as if on another thread, right before this call
        return os.waitid_result((12345, 0, signal.SIGCHLD, 99, os.CLD_EXITED))

    monkeypatch.setattr(os, "waitid", waitid)
    assert t.returncode() == 3
    assert t._aside.status == 3   # the close's own reading, not the dropped answer (99)
    assert t._pidfd == -1


@pytest.mark.parametrize("failure", [errno.EINVAL, errno.ECHILD])
def test_a_failing_waitid_falls_back_to_popen(
        no_leaks: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        failure: int) -> None:
    """``waitid`` failing by pidfd and by pid alike, EINVAL or ECHILD (reaped by someone
    else): the status comes from ``Popen.poll()``, as before. (A 5.3 kernel, which fails
    only ``waitid`` on a pidfd, has the status read by pid: see test_stdio_reap_by_pid.)"""
    path = tmp_path / "server.py"
    path.write_text(EXITS)
    t = started([PY, str(path), "3"], "fallback")
    pid = t.pid
    assert pid is not None

    def waitid(idtype: int, ident: int, options: int) -> Any:
        raise OSError(failure, os.strerror(failure))

    try:
        assert wait_until(lambda: state(pid) == "zombie")
        monkeypatch.setattr(os, "waitid", waitid)
        assert t.wait_exit(10) == 3
        assert t._proc is not None and t._proc.returncode == 3   # reaped, as before
    finally:
        monkeypatch.undo()
        t.close()
    assert t.returncode() == 3


def _ask(t: StdioTransport, stop: threading.Event, answers: set[int | None],
         errors: list[BaseException]) -> None:
    try:
        while not stop.is_set():
            answers.add(t.returncode())
            answers.add(t.wait_exit(0))
    except BaseException as exc:
        errors.append(exc)


def test_returncode_from_another_thread_during_close(no_leaks: None, tmp_path: Path) -> None:
    """A thread asking for the status over and over (the gateway) while the owner closes an
    exited server: every answer is the status (or None while the close is reaping, as
    ``Popen.poll()`` answers under the reaper's lock), never an error or another status."""
    before = open_fds()
    path = tmp_path / "server.py"
    path.write_text(EXITS)
    for _ in range(5):
        t = started([PY, str(path), "3", "wait"], "asked")
        answers: set[int | None] = set()
        errors: list[BaseException] = []
        stop = threading.Event()
        asker = threading.Thread(target=_ask, args=(t, stop, answers, errors), name="asker")
        asker.start()
        try:
            time.sleep(0.05)
            t.close()
        finally:
            stop.set()
            asker.join(10)
        assert not errors
        assert answers <= {None, 3}
        assert t.returncode() == 3
    assert open_fds() <= before


def test_without_a_pidfd_the_status_is_the_same(
        no_leaks: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No pidfd (Linux before 5.3): returncode() and wait_exit() give the same statuses,
    read by pid, and leave the server unreaped too. (Elsewhere, Popen reaps, as before:
    see test_stdio_reap_by_pid.)"""
    monkeypatch.setattr(stdio, "_HAS_PIDFD", False)
    before = open_fds()
    path = tmp_path / "server.py"
    path.write_text(EXITS)
    t = StdioTransport([PY, str(path), "3"], name="nopidfd")
    t.start()
    try:
        assert t._pidfd == -1
        assert t.wait_exit(10) == 3
        assert t.returncode() == 3
        assert t._aside.status == 3
        assert t.pid is not None and state(t.pid) == "zombie"
    finally:
        t.close()
    assert t.returncode() == 3
    assert open_fds() <= before


def test_a_close_cut_short_after_its_reap_does_not_signal_the_freed_pid(tmp_path: Path) -> None:
    """A Ctrl-C that lands after the close reaped the server (in Popen's wait, or in the
    closing of the descriptors after it) makes the close run its ending again (_cut_short).
    That ending must not send the leftovers' SIGKILL a second time: the pid is free by then,
    and the kernel may have given it to an unrelated process group. Swept over every C call's
    return in the close's release, in Popen's wait for the reap and in the closing of the
    descriptors."""
    path = tmp_path / "server.py"
    path.write_text(EXITS)
    # Not Popen._wait's own calls: a Ctrl-C right after it takes its waitpid lock leaves
    # that lock held for good (CPython's code), which no close can undo.
    codes = {stdio.ProcessLifecycle._release.__code__, subprocess.Popen.wait.__code__,
             subprocess.Popen._try_wait.__code__, stdio.ProcessLifecycle._close_fd.__code__,
             stdio.ProcessLifecycle._close_raw.__code__}
    interrupted: list[str] = []
    for nth in range(40):
        t = started([PY, str(path), "0"], "cut-after-reap")
        pid = t.pid
        assert pid is not None
        assert t.wait_exit(10) == 0
        seen = spy_signals(t, pid)
        seen_before = len(interrupted)
        try:
            with interrupt_at_return(codes, nth, interrupted, qualified=True):
                t.close()
        except KeyboardInterrupt:
            pass
        try:
            t.close()   # finished, or the ending run again by the next close
        finally:
            if state(pid) == "zombie":   # Popen's waitpid lock left held by the Ctrl-C
                os.waitpid(pid, 0)
        assert [s for s in seen if s[0]] == [(True, "zombie")], (nth, interrupted[-1:], seen)
        if len(interrupted) == seen_before:
            break   # nth is past the last C call: the sweep is done
    else:
        pytest.fail("the sweep never ran out of C calls to interrupt")
    assert len(interrupted) >= 6, interrupted


@pytest.mark.parametrize("by_pid", [True, False], ids=["by-pid-loaded", "popen"])
def test_a_close_cut_short_after_its_pidfd_reap_never_waits_for_the_freed_pid(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, by_pid: bool) -> None:
    """A close cut short by a Ctrl-C after its reap through the pidfd (as the pidfd's
    ``os.close()`` returns, say) runs again without the pidfd. That run must not reap by
    pid: the pid is free by then, and ``waitpid`` would take the status of whichever child
    of ours was given the number. With the by-pid module loaded (a process in which some
    server got no pidfd) it did; without it ``Popen.wait()`` finds ``returncode`` set and
    calls nothing. Swept over every C call's return in the close's release, reap and
    closing of descriptors; ``os.waitpid`` (which the reap by pid and ``Popen.wait()``
    call) is wrapped to record any call made for a pid that is already reaped."""
    from mcpsync.transport.stdio import _by_pid

    monkeypatch.setattr(stdio, "_by_pid", _by_pid if by_pid else None)
    real_waitpid = os.waitpid
    freed: list[tuple[int, str]] = []

    def waitpid(pid: int, options: int) -> tuple[int, int]:
        if state(pid) == "reaped":
            freed.append((pid, interrupted[-1] if interrupted else ""))
        return real_waitpid(pid, options)

    monkeypatch.setattr(os, "waitpid", waitpid)
    path = tmp_path / "server.py"
    path.write_text(EXITS)
    codes = {stdio.ProcessLifecycle._release.__code__, stdio.ProcessLifecycle._reap.__code__,
             stdio.ProcessLifecycle._reap_without_pidfd.__code__,
             stdio.ProcessLifecycle._close_fd.__code__,
             stdio.ProcessLifecycle._close_raw.__code__, _by_pid.reap.__code__,
             subprocess.Popen.wait.__code__}
    interrupted: list[str] = []
    for nth in range(60):
        t = started([PY, str(path), "0"], "cut-after-pidfd-reap")
        pid = t.pid
        assert pid is not None
        assert t.wait_exit(10) == 0
        seen_before = len(interrupted)
        try:
            with interrupt_at_return(codes, nth, interrupted, qualified=True):
                t.close()
        except KeyboardInterrupt:
            pass
        t.close()   # finished, or the ending run again by the next close
        assert t.closed and t.returncode() == 0
        assert state(pid) == "reaped"
        if len(interrupted) == seen_before:
            break   # nth is past the last C call: the sweep is done
    else:
        pytest.fail("the sweep never ran out of C calls to interrupt")
    assert "_close_raw: close" in interrupted, interrupted   # the pidfd's, after the reap
    assert not freed, freed
