"""Without a pidfd that reads an exit status (Linux before 5.3, a ``pidfd_open`` that fails,
and Linux 5.3, whose kernel refuses ``waitid(P_PIDFD, ...)`` with EINVAL), the close and the
discard reap as they do with one, by pid: the status is read without reaping
(``waitid(P_PID, pid, WEXITED | WNOHANG | WNOWAIT)``), stored in ``Popen.returncode``, and
only then is the server reaped (``waitpid``), after the close's last ``killpg``; nothing
waits through ``Popen``, whose waitpid lock a Ctrl-C can leave held for good and whose
``waitpid`` a Ctrl-C can make lose the status.

Both kernels are simulated on this one: no pidfd at all (the module's pidfd support switched
off), or pidfds whose ``waitid`` fails with EINVAL. On both, ``start()`` loads the by-pid
module (``_by_pid``) because the question whether pidfds read a status says no (asked
afresh against the simulated kernel); the discard's tests load it as start() does. A real
KeyboardInterrupt is put at every C call's return on those paths, against real processes;
every signal to the server's group records the server's state at that moment.
"""

from __future__ import annotations

import dis
import errno
import functools
import inspect
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import CodeType, FrameType
from typing import Any

import pytest
from helpers import child_state as state, end_child, interrupt_at_return, open_fds, wait_until

from mcpsync.transport.stdio import StdioTransport, _by_pid, _lifecycle as stdio, _spawner

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(not getattr(stdio, "_CAN_PEEK_PID", sys.platform == "linux"),
                                 reason="needs waitid(P_PID) (Linux)")]

# Exits 3 at the end of its input (the close's first step), or at once.
EXITS_AT_EOF = ["sh", "-c", "cat >/dev/null; exit 3"]
EXITS_NOW = ["sh", "-c", "exit 3"]

# Every C call made directly by the close's exit watching, release and reap, and by Popen's
# wait and poll (which the close used to wait and reap with, and which must not be left
# broken).
CLOSE_CODES = {getattr(stdio.ProcessLifecycle, name).__code__
               for name in ("_release", "_reap", "_reap_without_pidfd", "_exit_status",
                            "_wait_exited")} | {
    _by_pid.pid_status.__code__, _by_pid.wait_exited.__code__, _by_pid.reap.__code__,
    subprocess.Popen.wait.__code__, subprocess.Popen._wait.__code__,
    subprocess.Popen._try_wait.__code__, subprocess.Popen.poll.__code__,
    subprocess.Popen._internal_poll.__code__}


@pytest.fixture(params=["no-pidfd", "linux-5.3"])
def kernel(request: pytest.FixtureRequest,
           monkeypatch: pytest.MonkeyPatch) -> Iterator[set[CodeType]]:
    """The kernel simulated; yields the code of the stand-in ``os.waitid`` (5.3), whose
    real call's return the sweeps interrupt too. The by-pid module is loaded as start()
    loads it: the question whether pidfds read a status is asked again, of the simulated
    kernel, and must say no."""
    monkeypatch.setattr(stdio, "_by_pid", None)
    monkeypatch.setattr(stdio, "_pidfd_peeks", None)
    codes: set[CodeType] = set()
    if request.param == "no-pidfd":
        monkeypatch.setattr(stdio, "_HAS_PIDFD", False)
        monkeypatch.setattr(stdio, "_CAN_PEEK", False)
    else:
        real = os.waitid

        def waitid(idtype: int, ident: int, options: int) -> os.waitid_result | None:
            if idtype == os.P_PIDFD:
                raise OSError(errno.EINVAL, "Invalid argument")
            return real(idtype, ident, options)

        monkeypatch.setattr(os, "waitid", waitid)
        codes.add(waitid.__code__)
    assert stdio.pidfds_read_status() is False
    stdio._load_by_pid()
    assert stdio._by_pid is _by_pid
    yield codes


def spy_signals(t: StdioTransport, pid: int) -> tuple[list[tuple[bool, str]], CodeType]:
    """Record, at each signal to the server's group, whether it was the leftovers' SIGKILL
    and the server's state at that moment; also returns the spy's code, so that a sweep
    interrupts as its real ``killpg`` returns."""
    seen: list[tuple[bool, str]] = []
    real = t._signal_group

    def spy(*, kill: bool, leftovers_only: bool = False) -> None:
        seen.append((leftovers_only, state(pid)))
        real(kill=kill, leftovers_only=leftovers_only)

    t._signal_group = spy  # type: ignore[method-assign]
    return seen, spy.__code__


def _settle(t: StdioTransport, pid: int) -> None:
    """After a failed check: no zombie and no held spawner left to later tests."""
    if state(pid) != "reaped":
        os.killpg(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    if t._aside.holds_spawner:
        t._aside.holds_spawner = False
        _spawner.release()


@pytest.mark.parametrize("when", ["exits-in-close", "status-read-before"])
def test_ctrl_c_at_any_return_in_the_close(
        no_leaks: None, caplog: pytest.LogCaptureFixture, kernel: set[CodeType],
        when: str) -> None:
    """Swept over every C call's return in the close's waits, release and reap: the close
    run again (the owner's next close()) reaps the server, its status is the real one (3;
    or SIGTERM's, when the Ctrl-C cut the wait for its exit short), no signal went to the
    group once the server was reaped (the pid is free then), the spawner is let go,
    Popen's waitpid lock is free and every descriptor is closed. The server either exits
    during the close (at stdin EOF) or had its status read before (``wait_exit``, which
    leaves it a zombie: its pid is still ours)."""
    caplog.set_level(logging.WARNING)
    argv = EXITS_NOW if when == "status-read-before" else EXITS_AT_EOF
    interrupted: list[str] = []
    # The wait's polling makes a varying number of calls, so the release comes at a
    # different count in each run: passes are swept until one interrupted it too (on a
    # loaded machine the count varies more: five passes once all missed it in CI).
    for _sweep in range(20):
        idle = 0
        for nth in range(300):
            before = open_fds()
            t = StdioTransport(argv, name="by-pid")
            t.start()
            pid, proc = t.pid, t._proc
            assert pid is not None and proc is not None
            seen_before = len(interrupted)
            try:
                if when == "status-read-before":
                    assert t.wait_exit(10) == 3
                    assert state(pid) == "zombie" and proc.returncode is None   # not reaped
                signals, spy = spy_signals(t, pid)
                try:
                    with interrupt_at_return(CLOSE_CODES | kernel | {spy}, nth, interrupted,
                                             qualified=True):
                        t.close()
                except KeyboardInterrupt:
                    pass
                t.close()   # finished, or the ending run again
                where = (nth, interrupted[seen_before:])
                assert t.closed, where
                assert state(pid) == "reaped", where
                assert not proc._waitpid_lock.locked(), where
                # A Ctrl-C before the exit (at stdin EOF) was seen ends the server at once, as
                # an interrupted close does: a SIGTERM that found it running may have ended it.
                termed = (False, "running") in signals
                assert proc.returncode in ({3, -signal.SIGTERM} if termed else {3}), where
                assert t.returncode() == proc.returncode, where
                assert not t._aside.holds_spawner, where
                assert (True, "zombie") in signals, (where, signals)   # the leftovers' SIGKILL
                assert all(s != "reaped" for _, s in signals), (where, signals)
                assert not any("could not be reaped" in r.getMessage() for r in caplog.records), \
                    where
                assert open_fds() <= before, where
            finally:
                _settle(t, pid)
            # nth is past the last C call: the pass is done. Ten times running, as the
            # wait for a server exiting at EOF makes a varying number of calls.
            idle = idle + 1 if len(interrupted) == seen_before else 0
            if idle == 10:
                break
        else:
            pytest.fail("the sweep never ran out of C calls to interrupt")
        if {"append", "release"} <= {name.split(": ")[1] for name in interrupted}:
            break
    names = {name.split(": ")[1] for name in interrupted}
    # (The reap's waitpid is made by a for loop's C iterator: no Python code sees it return.)
    assert {"append", "release"} <= names, interrupted
    if when == "exits-in-close":   # the status is read (by pid) during the close
        assert "waitid" in names, interrupted
    assert not any(name.startswith(("wait:", "_wait:", "_try_wait:", "poll:"))
                   for name in interrupted), interrupted   # Popen never waited


def _popen() -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sh", "-c", "exec sleep 60"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)


def test_ctrl_c_at_any_return_in_the_discard(
        no_leaks: None, kernel: set[CodeType], monkeypatch: pytest.MonkeyPatch) -> None:
    """The discard of a child whose start() a Ctrl-C interrupted, swept over every C call's
    return in it (Popen's wait included): the child is killed and reaped with its real
    status (SIGKILL), only signalled while it was ours, Popen's lock is free and the pipes
    are closed."""
    signalled: list[str] = []
    real_killpg = os.killpg

    def killpg(pid: int, sig: int) -> None:
        signalled.append(state(pid))
        real_killpg(pid, sig)

    monkeypatch.setattr(os, "killpg", killpg)
    codes = {stdio._discard.__code__, stdio._end_child.__code__,
             _by_pid.end_child.__code__, killpg.__code__,
             subprocess.Popen.wait.__code__, subprocess.Popen._wait.__code__,
             subprocess.Popen._try_wait.__code__} | kernel
    interrupted: list[str] = []
    for nth in range(60):
        before = open_fds()
        proc = _popen()
        seen_before = len(interrupted)
        signalled.clear()
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
            assert signalled and all(s != "reaped" for s in signalled), (where, signalled)
            assert open_fds() <= before, where
        finally:
            end_child(proc.pid)
        if len(interrupted) == seen_before:
            break
    else:
        pytest.fail("the sweep never ran out of C calls to interrupt")
    names = {name.split(": ")[1] for name in interrupted}
    assert {"killpg", "waitid", "close"} <= names, interrupted
    assert not any(name.startswith(("wait:", "_wait:", "_try_wait:"))
                   for name in interrupted), interrupted   # Popen never waited


def _ask(t: StdioTransport, stop: threading.Event, answers: set[int | None],
         errors: list[BaseException]) -> None:
    try:
        while not stop.is_set():
            answers.add(t.returncode())
            answers.add(t.wait_exit(0))
    except BaseException as exc:
        errors.append(exc)


def test_returncode_from_another_thread_during_close(
        no_leaks: None, kernel: set[CodeType]) -> None:
    """A thread asking for the status over and over (the gateway) while the owner closes
    the server: every answer is the status or None, never an error or another status, and
    the server is reaped once, by the close, after its last signal."""
    before = open_fds()
    for _ in range(5):
        t = StdioTransport(EXITS_AT_EOF, name="asked")
        t.start()
        pid = t.pid
        assert pid is not None
        signals, _spy = spy_signals(t, pid)
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
            _settle(t, pid)
        assert not errors
        assert answers <= {None, 3}
        assert t.returncode() == 3
        assert all(s != "reaped" for _, s in signals), signals
        assert not t._aside.holds_spawner
    assert open_fds() <= before


def test_a_dead_server_stays_a_zombie_until_its_close(
        no_leaks: None, kernel: set[CodeType]) -> None:
    """The session asks for a dead server's status at once (its error quotes it): that
    read leaves the server unreaped, so its pid, the group's id, is still ours when the
    close signals the group's leftovers."""
    t = StdioTransport(EXITS_NOW, name="dead")
    t.start()
    pid = t.pid
    assert pid is not None
    try:
        assert wait_until(lambda: t.returncode() is not None)
        assert t.returncode() == 3 and t.wait_exit(0) == 3
        assert state(pid) == "zombie"
        signals, _spy = spy_signals(t, pid)
        t.close()
        assert (True, "zombie") in signals, signals
        assert state(pid) == "reaped"
        assert t.returncode() == 3
    finally:
        _settle(t, pid)


def test_a_server_that_ignores_sigterm_is_killed_and_reaped_in_bound(
        no_leaks: None, kernel: set[CodeType], monkeypatch: pytest.MonkeyPatch) -> None:
    """The waits by pid keep the close's bounds: a server that ignores stdin EOF and
    SIGTERM is SIGKILLed after both graces (shortened here) and reaped with that status."""
    monkeypatch.setattr(stdio, "STDIN_GRACE", 0.3)
    monkeypatch.setattr(stdio, "TERM_GRACE", 0.3)
    t = StdioTransport(["sh", "-c", "trap '' TERM; while :; do sleep 0.05; done"],
                       name="stubborn")
    t.start()
    pid = t.pid
    assert pid is not None
    started = time.monotonic()
    try:
        t.close()
        took = time.monotonic() - started
        assert 0.6 <= took < 0.6 + stdio.KILL_WAIT + 1.0, took
        assert state(pid) == "reaped"
        assert t.returncode() == -signal.SIGKILL
        assert not t._aside.holds_spawner
    finally:
        _settle(t, pid)


def test_elsewhere_popen_reaps_as_before(
        no_leaks: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where ``waitid`` cannot read a status by pid (macOS, the BSDs: switched off here),
    ``returncode()`` reaps with ``Popen.poll()`` and the close with ``Popen.wait()``, as
    before, with the same statuses; start() does not load the by-pid module there."""
    monkeypatch.setattr(stdio, "_HAS_PIDFD", False)
    monkeypatch.setattr(stdio, "_CAN_PEEK", False)
    monkeypatch.setattr(stdio, "_CAN_PEEK_PID", False)
    monkeypatch.setattr(stdio, "_by_pid", None)
    monkeypatch.setattr(stdio, "_pidfd_peeks", None)
    t = StdioTransport(EXITS_NOW, name="elsewhere")
    t.start()
    pid = t.pid
    assert pid is not None
    try:
        assert stdio._by_pid is None
        assert t.wait_exit(10) == 3
        assert state(pid) == "reaped" and t._aside.status is None
        t.close()
        assert t.returncode() == 3
        assert not t._aside.holds_spawner
    finally:
        _settle(t, pid)



def _interrupt_at_instruction(target: Callable[[], object], codes: set[CodeType],
                              nth: int) -> list[str]:
    """Run ``target`` with a KeyboardInterrupt raised before the ``nth`` bytecode
    instruction (counting from 0) of ``codes``, once; returns where (empty: never)."""
    count = 0
    hit: list[str] = []

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        nonlocal count
        if frame.f_code not in codes:
            return None
        frame.f_trace_opcodes = True
        if event == "opcode":
            count += 1
            if count == nth + 1:
                hit.append(f"{frame.f_code.co_name}@{frame.f_lasti}")
                sys.settrace(None)
                raise KeyboardInterrupt
        return tracer

    sys.settrace(tracer)
    try:
        target()
    except KeyboardInterrupt:
        pass
    finally:
        sys.settrace(None)
    return hit


@pytest.mark.parametrize("when", ["exits-in-close", "status-read-before"])
def test_ctrl_c_before_any_instruction_of_the_reap_by_pid(
        no_leaks: None, kernel: set[CodeType], when: str) -> None:
    """Stronger than a Ctrl-C where a call returns: one before every bytecode instruction
    of the new code by pid (the status read, the wait, the reap), including points where no
    Ctrl-C can land (between the store of the status and the reap, say). The close run
    again still reaps the server once, with its real status, after its last signal."""
    codes = {stdio.ProcessLifecycle._reap_without_pidfd.__code__,
             _by_pid.reap.__code__, _by_pid.pid_status.__code__, _by_pid.wait_exited.__code__}
    argv = EXITS_NOW if when == "status-read-before" else EXITS_AT_EOF
    for nth in range(1000):
        t = StdioTransport(argv, name="by-pid-op")
        t.start()
        pid, proc = t.pid, t._proc
        assert pid is not None and proc is not None
        try:
            if when == "status-read-before":
                assert t.wait_exit(10) == 3
            signals, _spy = spy_signals(t, pid)
            hit = _interrupt_at_instruction(t.close, codes, nth)
            t.close()
            where = (nth, hit)
            assert state(pid) == "reaped", where
            termed = (False, "running") in signals
            assert proc.returncode in ({3, -signal.SIGTERM} if termed else {3}), where
            assert t.returncode() == proc.returncode, where
            assert all(s != "reaped" for _, s in signals), (where, signals)
            assert not t._aside.holds_spawner, where
        finally:
            _settle(t, pid)
        if not hit:
            break
    else:
        pytest.fail("the sweep never ran out of instructions")
    assert nth > 20, nth


def test_ctrl_c_before_any_instruction_of_the_discard_by_pid(
        no_leaks: None, kernel: set[CodeType]) -> None:
    """The same for the discard: the child is killed and reaped, with SIGKILL's status."""
    codes = {stdio._end_child.__code__, _by_pid.end_child.__code__}
    for nth in range(1000):
        proc = _popen()
        try:
            hit = _interrupt_at_instruction(functools.partial(stdio._discard, proc), codes, nth)
            assert state(proc.pid) == "reaped", (nth, hit)
            assert proc.returncode == -signal.SIGKILL, (nth, hit)
        finally:
            end_child(proc.pid)
        if not hit:
            break
    else:
        pytest.fail("the sweep never ran out of instructions")
    assert nth > 20, nth


def _before_the_try(fn: Callable[..., object]) -> list[dis.Instruction]:
    """The instructions of ``fn`` before its first ``try`` statement."""
    lines, first = inspect.getsourcelines(fn)
    at = first + next(n for n, line in enumerate(lines) if line.strip() == "try:")
    starts = dict(dis.findlinestarts(fn.__code__))   # offset: line (3.10 has no positions)
    line: int | None = None
    before = []
    for ins in dis.get_instructions(fn):
        line = starts.get(ins.offset, line)
        if line is not None and line >= at:
            break
        before.append(ins)
    return before


def test_nothing_is_called_in_the_discard_before_its_try() -> None:
    """A Ctrl-C pending as a Python function begins is raised there (3.11 checks at its
    RESUME), and as any call returns: anything called before the discard's ``try`` would
    be a place where one escapes before the SIGKILL, leaving the child running and its
    pipes open. Only stores there (a plain list, as the state of the tries)."""
    before = _before_the_try(stdio._discard)
    assert before, "no try found"
    calls = [ins.opname for ins in before if "CALL" in ins.opname]
    assert calls == [], (calls, [f"{ins.opname} {ins.argrepr}" for ins in before])


def _interrupt_at_call(target: Callable[[], object], outer: CodeType, nth: int) -> list[str]:
    """Run ``target`` with a KeyboardInterrupt raised as the ``nth`` Python function it
    calls (counting from 0; ``outer``, its own code, not counted) begins, once; returns
    that function's name (empty: never)."""
    count = 0
    hit: list[str] = []

    def profile(frame: FrameType, event: str, arg: object) -> None:
        nonlocal count
        if event != "call" or frame.f_code is outer:
            return
        count += 1
        if count == nth + 1:
            hit.append(frame.f_code.co_name)
            sys.setprofile(None)
            raise KeyboardInterrupt

    sys.setprofile(profile)
    try:
        target()
    except KeyboardInterrupt:
        pass
    finally:
        sys.setprofile(None)
    return hit


def test_ctrl_c_as_any_function_the_discard_calls_begins(
        no_leaks: None, kernel: set[CodeType]) -> None:
    """The other place where a pending Ctrl-C is raised, besides a call's return (swept
    above): as a Python function called by the discard begins (its RESUME). One raised at
    each such function's start in turn (``_end_child``, ``_by_pid.end_child``, the kernel's
    stand-ins): the child is killed and reaped, with SIGKILL's status, and nothing is left
    open. The discard's own start is the one place left (see docs/processes.md)."""
    hits: list[str] = []
    for nth in range(100):
        before = open_fds()
        proc = _popen()
        try:
            hit = _interrupt_at_call(functools.partial(stdio._discard, proc),
                                     stdio._discard.__code__, nth)
            assert state(proc.pid) == "reaped", (nth, hit)
            assert proc.returncode == -signal.SIGKILL, (nth, hit)
            assert open_fds() <= before, (nth, hit)
        finally:
            end_child(proc.pid)
        if not hit:
            break
        hits += hit
    else:
        pytest.fail("the sweep never ran out of calls")
    assert {"_end_child", "end_child"} <= set(hits), hits


@pytest.mark.needs_pidfds(reads_status=True)
@pytest.mark.parametrize("by_pid", [True, False], ids=["by-pid-loaded", "not-loaded"])
@pytest.mark.parametrize("twice", [True, False], ids=["interrupted-twice", "once"])
def test_a_ctrl_c_as_the_discard_opens_the_pidfd_is_swallowed(
        monkeypatch: pytest.MonkeyPatch, by_pid: bool, twice: bool) -> None:
    """With a pidfd (Linux 5.4+), the discard opens one first, through a ``map()`` call: a
    Ctrl-C raised as that call ends (before anything was opened) must not get out before
    the SIGKILL. The pidfd is opened once more, and the child ended through it (neither by
    pid nor with ``Popen.wait()``). Interrupted that second time too, the child is ended by
    pid where the by-pid module is loaded, else (a machine whose pidfds work) with
    ``Popen.wait()``. Either way it is reaped with SIGKILL's status, and nothing is left
    open."""
    import builtins

    monkeypatch.setattr(stdio, "_by_pid", _by_pid if by_pid else None)
    ways: list[str] = []
    real_end, real_wait = _by_pid.end_child, subprocess.Popen.wait

    def end_by_pid(proc: subprocess.Popen[bytes], ending: list[Any]) -> bool:
        ways.append("by pid")
        return real_end(proc, ending)

    def popen_wait(self: subprocess.Popen[bytes], timeout: float | None = None) -> int:
        ways.append("Popen.wait")
        return real_wait(self, timeout)

    monkeypatch.setattr(_by_pid, "end_child", end_by_pid)
    monkeypatch.setattr(subprocess.Popen, "wait", popen_wait)
    opened: list[int] = []

    def interrupted_map(fn: Callable[..., Any], *items: Any) -> Iterator[Any]:
        if fn is os.pidfd_open:
            opened.append(1)
            if twice or len(opened) == 1:
                raise KeyboardInterrupt  # as the call ends, before the iterator opened anything
        return builtins.map(fn, *items)

    before = open_fds()
    proc = _popen()
    monkeypatch.setattr(stdio, "map", interrupted_map, raising=False)
    try:
        try:
            stdio._discard(proc)
        except KeyboardInterrupt:
            pytest.fail("the Ctrl-C as the pidfd was opened got out of the discard")
        assert opened == [1, 1]
        if twice:
            assert ways == (["by pid"] if by_pid else ["Popen.wait"])
        else:
            assert ways == []
        assert state(proc.pid) == "reaped"
        assert proc.returncode == -signal.SIGKILL
        assert open_fds() <= before
    finally:
        end_child(proc.pid)
