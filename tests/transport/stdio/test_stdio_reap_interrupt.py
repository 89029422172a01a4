"""A Ctrl-C while a stdio server is reaped (by the close, or by an interrupted start's
discard) leaves no zombie, no wrong status and no spawner held.

CPython's ``Popen._wait`` takes its waitpid lock with ``acquire(False)`` and enters its
``try`` only after that returns: a KeyboardInterrupt raised as ``acquire`` returns leaves the
lock held for good, and every later ``wait()`` or ``poll()`` of that ``Popen`` gives up or
spins (the close then logged "could not be reaped", left the server a zombie and the spawner
thread held). A KeyboardInterrupt as ``os.waitpid`` returns in ``_try_wait`` loses the
status, and ``Popen`` records 0 from its next try's ``ECHILD``. With a pidfd the close and
the discard no longer call ``Popen.wait``: they wait on the pidfd, read the status without
reaping, store it, and reap through the pidfd. These tests put a real KeyboardInterrupt at
every C call's return on those paths (``Popen``'s own included) against real processes.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import child_state as state, end_child, interrupt_at_return, open_fds, wait_until

from mcpsync.transport.stdio import StdioTransport, _lifecycle as stdio, _spawner

pytestmark = [pytest.mark.timeout(60),
              pytest.mark.needs_pidfds(reads_status=True)]

PY = sys.executable

# Exits 3 at the end of its input (the close's first step), or at once with "now".
EXITS = r'''
import sys
if sys.argv[1:] != ["now"]:
    sys.stdin.buffer.read()
sys.exit(3)
'''

# Every C call made directly by the close's release and reap, and by Popen's wait and poll
# (which the close used to reap with, and which must not be left broken).
REAP = {getattr(stdio.ProcessLifecycle, name).__code__
        for name in ("_release", "_reap", "_exit_status")
        if hasattr(stdio.ProcessLifecycle, name)} | {
    subprocess.Popen.wait.__code__, subprocess.Popen._wait.__code__,
    subprocess.Popen._try_wait.__code__, subprocess.Popen.poll.__code__,
    subprocess.Popen._internal_poll.__code__}


def spawner_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "mcpsync-spawner"]


@pytest.mark.parametrize("when", ["exits-in-close", "status-read-before"])
def test_ctrl_c_at_any_return_in_the_reap(
        no_leaks: None, tmp_path: Path, caplog: pytest.LogCaptureFixture, when: str) -> None:
    """Swept over every C call's return in the close's release and reap: the close run
    again (the owner's next close()) reaps the server, its status is the real one (3), and
    its hold on the spawner thread is let go; Popen's waitpid lock is free. The server
    either exits during the close (at stdin EOF: the reap reads its status) or had its
    status read before (``wait_exit``)."""
    path = tmp_path / "server.py"
    path.write_text(EXITS)
    argv = [PY, str(path)] + (["now"] if when == "status-read-before" else [])
    caplog.set_level(logging.WARNING)
    interrupted: list[str] = []
    for nth in range(60):
        before = open_fds()
        t = StdioTransport(argv, name="reap")
        t.start()
        pid, proc = t.pid, t._proc
        assert pid is not None and proc is not None
        if when == "status-read-before":
            assert t.wait_exit(10) == 3
        seen_before = len(interrupted)
        try:
            try:
                with interrupt_at_return(REAP, nth, interrupted, qualified=True):
                    t.close()
            except KeyboardInterrupt:
                pass
            t.close()   # finished, or the ending run again
            where = (nth, interrupted[seen_before:])
            assert t.closed, where
            assert state(pid) == "reaped", where
            assert not proc._waitpid_lock.locked(), where
            assert proc.returncode == 3 and t.returncode() == 3, where
            assert not t._aside.holds_spawner, where
            assert not any("could not be reaped" in r.getMessage() for r in caplog.records), \
                where
            assert open_fds() <= before, where
        finally:   # a failure must not leave a zombie or a held spawner to later tests
            if state(pid) == "zombie":
                os.waitpid(pid, 0)
            if t._aside.holds_spawner:
                t._aside.holds_spawner = False
                _spawner.release()
        if len(interrupted) == seen_before:
            break   # nth is past the last C call: the sweep is done
    else:
        pytest.fail("the sweep never ran out of C calls to interrupt")
    names = {name.split(": ")[1] for name in interrupted}
    assert "release" in names, interrupted
    # The reap's own waitid is called by the for loop over map() that stores what it
    # returns: no Ctrl-C lands between the two, and none is raised there. Only the read of
    # the status before it (when the server exits during the close) is a C call's return.
    if when == "exits-in-close":
        assert interrupted.count("_reap: waitid") == 1, interrupted
    else:
        assert "_reap: waitid" not in interrupted, interrupted


def test_a_kernel_refusing_waitid_on_a_pidfd_reaps_by_pid(
        no_leaks: None, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """Linux 5.3 has pidfds but fails ``waitid(P_PIDFD, ...)`` with EINVAL (simulated): the
    close reaps by pid, as without a pidfd, never through ``Popen``, so another thread
    holding ``Popen``'s waitpid lock (a reader asking for the exit code, here for 0.3 s)
    cannot make it give up (``Popen.poll()`` would at once, and leave the server a zombie,
    "could not be reaped", with the spawner held)."""
    import errno

    real_waitid = os.waitid

    def waitid(idtype: int, ident: int, options: int) -> os.waitid_result | None:
        if idtype == os.P_PIDFD:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_waitid(idtype, ident, options)

    monkeypatch.setattr(os, "waitid", waitid)
    # As a process on such a kernel starts: the question not asked yet (start() asks it of
    # the patched waitid, and loads the by-pid module), whatever the tests before asked.
    monkeypatch.setattr(stdio, "_pidfd_peeks", None)
    monkeypatch.setattr(stdio, "_by_pid", None)
    real_reap = stdio.ProcessLifecycle._reap
    holding = threading.Event()

    def hold(proc: subprocess.Popen[bytes]) -> None:
        with proc._waitpid_lock:
            holding.set()
            time.sleep(0.3)

    holders: list[threading.Thread] = []

    def reap(self: StdioTransport, proc: subprocess.Popen[bytes], timeout: float) -> None:
        holder = threading.Thread(target=hold, args=(proc,), name="test-holder", daemon=True)
        holders.append(holder)
        holder.start()
        holding.wait(5)
        real_reap(self, proc, timeout)

    monkeypatch.setattr(stdio.ProcessLifecycle, "_reap", reap)
    caplog.set_level(logging.WARNING)
    t = StdioTransport(["sh", "-c", "cat >/dev/null; exit 3"], name="k53")
    t.start()
    pid, proc = t.pid, t._proc
    assert pid is not None and proc is not None
    assert stdio._pidfd_peeks is False and stdio._by_pid is not None
    try:
        t.close()
        for holder in holders:
            holder.join(5)
        assert holders, "the close never reaped"
        assert t._aside.pid_reaped is not None   # reaped by pid, not through Popen
        assert state(pid) == "reaped"
        assert proc.returncode == 3
        assert not t._aside.holds_spawner
        assert not any("could not be reaped" in r.getMessage() for r in caplog.records)
    finally:
        if state(pid) == "zombie":
            os.waitpid(pid, 0)
        if t._aside.holds_spawner:
            t._aside.holds_spawner = False
            _spawner.release()


def _popen() -> subprocess.Popen[bytes]:
    return subprocess.Popen([PY, "-c", "import time; time.sleep(60)"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)


def test_ctrl_c_at_any_return_in_the_discard_of_an_interrupted_start(no_leaks: None) -> None:
    """The discard of a child whose start() a Ctrl-C interrupted runs where a second Ctrl-C
    is likely: swept over every C call's return in it (Popen's wait included), the child is
    killed and reaped with its real status (SIGKILL), Popen's lock is free and the pipes
    are closed."""
    codes = {getattr(stdio, name).__code__ for name in ("_discard", "_end_child")
             if hasattr(stdio, name)} | {subprocess.Popen.wait.__code__,
             subprocess.Popen._wait.__code__, subprocess.Popen._try_wait.__code__}
    interrupted: list[str] = []
    for nth in range(40):
        before = open_fds()
        proc = _popen()
        seen_before = len(interrupted)
        try:
            try:
                with interrupt_at_return(codes, nth, interrupted, qualified=True):
                    stdio._discard(proc)
            except KeyboardInterrupt:
                pass
            where = (nth, interrupted[seen_before:])
            assert state(proc.pid) == "reaped", where
            assert not proc._waitpid_lock.locked(), where
            assert proc.returncode == -signal.SIGKILL, where
            assert open_fds() <= before, where
        finally:
            end_child(proc.pid)
        if len(interrupted) == seen_before:
            break
    else:
        pytest.fail("the sweep never ran out of C calls to interrupt")
    names = {name.split(": ")[1] for name in interrupted}
    assert {"killpg", "poll", "waitid", "close"} <= names, interrupted


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                    reason="needs to interrupt the main thread")
def test_a_ctrl_c_in_the_discard_still_releases_the_spawner() -> None:
    """Ctrl-C while the spawner forks, and another in the discard that follows: the
    spawner's reference is dropped all the same (its thread ends)."""
    main = threading.main_thread().ident
    assert main is not None

    def fork_slowly() -> str:
        signal.pthread_kill(main, signal.SIGINT)  # the caller is waiting for us
        time.sleep(0.2)
        return "child"

    def discard(child: str) -> None:
        raise KeyboardInterrupt   # the second Ctrl-C

    with pytest.raises(KeyboardInterrupt):
        _spawner.spawn(fork_slowly, discard=discard)
    assert wait_until(lambda: not spawner_threads(), 5), spawner_threads()


def fork(forked: list[int], n: int) -> int:
    """Stands for the fork: records that it ran."""
    forked.append(n)
    return n


def test_ctrl_c_at_any_return_in_spawn_discards_or_hands_over_every_child() -> None:
    """Swept over every C call's return in spawn(): a child that was forked is either
    returned to the caller or discarded, never left to nobody, and the spawner thread ends
    once every child is released."""
    interrupted: list[str] = []
    for nth in range(20):
        forked: list[int] = []
        discarded: list[int] = []
        returned: list[int] = []
        seen_before = len(interrupted)
        try:
            with interrupt_at_return({_spawner.spawn.__code__}, nth, interrupted):
                returned.append(_spawner.spawn(functools.partial(fork, forked, nth),
                                               discard=discarded.append))
        except KeyboardInterrupt:
            pass
        time.sleep(0.1)   # a job queued anyway would have run by now
        assert sorted(returned + discarded) == forked, (nth, interrupted[seen_before:])
        for _ in returned:
            _spawner.release()
        assert wait_until(lambda: not spawner_threads(), 5), (nth, interrupted[seen_before:])
        if len(interrupted) == seen_before:
            break
    else:
        pytest.fail("the sweep never ran out of C calls to interrupt")
    assert "append" in interrupted, interrupted
