"""A second Ctrl-C while ``spawn()`` waits for a fork still under way: the server that fork
makes is not left running to nobody.

After a first Ctrl-C the caller waits for the fork under way, to discard (kill and reap) its
child; a second Ctrl-C cut that wait short, released the spawner, and left the server, forked
a moment later, running with nobody to end it. The job is now claimed as abandoned (one
atomic ``list.append`` to the job's claim, which the spawner thread makes too as it is done
with the job; the first name there decides): the spawner thread discards the child itself
when the fork ends, or does not fork at all when the job had not begun. Its discard is
bounded in time, so a server that SIGKILL cannot end does not hold the spawner thread (and
every later start() queued behind it).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import child_state as state, wait_until

from mcpsync.transport.stdio import StdioTransport, _lifecycle, _spawner

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(os.name == "nt", reason="POSIX signals"),
    pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                       reason="needs to interrupt the main thread")]


def spawner_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "mcpsync-spawner"]


class Interrupter:
    """Sends SIGINT to the main thread, each time waiting until its handler has run (so
    that two are never taken for one by a loaded machine), then a little longer, for the
    KeyboardInterrupt to reach the wait that follows."""

    def __init__(self) -> None:
        self.main = threading.main_thread().ident
        self.handled = 0

    def handler(self, signum: int, frame: object) -> None:
        self.handled += 1
        raise KeyboardInterrupt

    def interrupt(self) -> None:
        assert self.main is not None
        before = self.handled
        signal.pthread_kill(self.main, signal.SIGINT)
        assert wait_until(lambda: self.handled > before, 10), "SIGINT never handled"
        time.sleep(0.1)


@pytest.fixture
def interrupter() -> Iterator[Interrupter]:
    it = Interrupter()
    previous = signal.signal(signal.SIGINT, it.handler)
    try:
        yield it
    finally:
        signal.signal(signal.SIGINT, previous)


def marked(mark: str) -> list[int]:
    """The pids of live (not zombie) processes whose command line has ``mark``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{entry}/stat") as f:
                zombie = f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            continue
        if mark.encode() in cmdline and not zombie:
            found.append(int(entry))
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="scans /proc")
def test_a_second_ctrl_c_in_the_wait_for_a_fork_leaves_no_server_running(
        no_leaks: None, monkeypatch: pytest.MonkeyPatch, interrupter: Interrupter) -> None:
    """Two SIGINTs while the spawner forks a real server: the first as the caller waits
    for the spawn, the second in its wait for the fork under way (both while the fork is
    held back). start() raises, and once that fork is done the server is killed and
    reaped all the same; the next spawn works, and the spawner thread is joined when its
    server closes."""
    mark = f"mcpsync-test-abandoned-{uuid.uuid4().hex}"
    forked: list[int] = []
    real_popen = subprocess.Popen

    class SlowPopen(real_popen):  # type: ignore[misc, valid-type]
        def __init__(self, args: Any, *rest: Any, **kwargs: Any) -> None:
            if any(mark in str(arg) for arg in args):
                time.sleep(0.2)   # the caller blocked in its wait first: see below
                interrupter.interrupt()   # the caller waits for the spawn
                interrupter.interrupt()   # it waits for the fork under way
            super().__init__(args, *rest, **kwargs)
            if any(mark in str(arg) for arg in args):
                forked.append(self.pid)

    monkeypatch.setattr(subprocess, "Popen", SlowPopen)
    t = StdioTransport([sys.executable, "-c", "import time; time.sleep(60)", mark],
                       name="abandoned")
    try:
        with pytest.raises(KeyboardInterrupt):
            t.start()
        assert wait_until(lambda: bool(forked), 10), "the fork never happened"
        pid = forked[0]
        assert wait_until(lambda: state(pid) == "reaped", 10), state(pid)
        assert marked(mark) == []
        monkeypatch.undo()
        # The spawner still works, and its thread ends once its last server is closed.
        t2 = StdioTransport([sys.executable, "-c", "import sys; sys.stdin.read()"],
                            name="next")
        t2.start()
        assert t2.pid is not None and state(t2.pid) == "running"
        t2.close()
        assert state(t2.pid) == "reaped"
        assert wait_until(lambda: not spawner_threads(), 5), spawner_threads()
        t.close()
    finally:
        for pid in forked:
            if state(pid) != "reaped":
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)


def test_a_job_abandoned_before_its_fork_began_is_never_run(interrupter: Interrupter) -> None:
    """A spawn queued behind another (the spawner busy), cut short by two Ctrl-Cs: the
    spawner thread skips it (no fork for nobody), and ends when the first is released."""
    busy = threading.Event()
    go = threading.Event()
    ran: list[str] = []
    discarded: list[str] = []

    def first() -> str:
        busy.set()
        go.wait(10)
        return "first"

    def second() -> str:
        ran.append("second")
        return "second"

    holder_got: list[str] = []
    holder = threading.Thread(target=lambda: holder_got.append(_spawner.spawn(first)),
                              name="test-holder", daemon=True)
    holder.start()
    assert busy.wait(10)

    def interrupt_twice() -> None:
        time.sleep(0.2)
        interrupter.interrupt()   # the caller waits for the spawn
        interrupter.interrupt()   # it waits for the job under way
        go.set()

    pest = threading.Thread(target=interrupt_twice, name="test-interrupter", daemon=True)
    pest.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            _spawner.spawn(second, discard=discarded.append)
    finally:
        go.set()
        pest.join(10)
        holder.join(10)
    assert holder_got == ["first"]
    time.sleep(0.2)   # a job run anyway would have run by now
    assert ran == [] and discarded == []
    _spawner.release()   # the first spawn's reference
    assert wait_until(lambda: not spawner_threads(), 5), spawner_threads()


def test_a_fork_abandoned_under_way_is_discarded_by_the_spawner_thread(
        interrupter: Interrupter) -> None:
    """The same with a fork already under way when the caller stops waiting: the spawner
    thread hands what it made to ``discard`` itself, on its own thread."""
    discarded: list[tuple[str, str]] = []
    done = threading.Event()

    def fork_slowly() -> str:
        time.sleep(0.2)   # the caller blocked in its wait first: see the test below
        interrupter.interrupt()
        interrupter.interrupt()
        return "child"

    def discard(child: str) -> None:
        discarded.append((child, threading.current_thread().name))
        done.set()

    with pytest.raises(KeyboardInterrupt):
        _spawner.spawn(fork_slowly, discard=discard)
    assert done.wait(10)
    assert discarded == [("child", "mcpsync-spawner")]
    assert wait_until(lambda: not spawner_threads(), 5), spawner_threads()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="scans /proc")
def test_a_server_sigkill_cannot_end_does_not_hold_the_spawner_thread(
        no_leaks: None, monkeypatch: pytest.MonkeyPatch, interrupter: Interrupter) -> None:
    """An abandoned server (two Ctrl-Cs during its fork) that SIGKILL cannot end:
    ``os.killpg`` refused with EPERM for its group (as for a server run through sudo by
    another user; a process in uninterruptible sleep is the same to the discard). The
    spawner thread's discard gives up after its bound with a warning naming the pid, and
    the next start(), queued on the same spawner thread (another transport holds it), is
    not held behind it."""
    monkeypatch.setattr(_lifecycle, "DISCARD_WAIT", 0.5)
    mark = f"mcpsync-test-unkillable-{uuid.uuid4().hex}"
    forked: list[int] = []
    real_popen = subprocess.Popen
    real_killpg = os.killpg

    def killpg(pid: int, sig: int) -> None:
        if pid in forked:
            raise PermissionError(1, "Operation not permitted")
        real_killpg(pid, sig)

    class SlowPopen(real_popen):  # type: ignore[misc, valid-type]
        def __init__(self, args: Any, *rest: Any, **kwargs: Any) -> None:
            if any(mark in str(arg) for arg in args):
                # Let the caller block in its wait first: a SIGINT sent as it enters the
                # untimed lock acquire can go unhandled until the lock is released.
                time.sleep(0.2)
                interrupter.interrupt()   # the caller waits for the spawn
                interrupter.interrupt()   # it waits for the fork under way
            super().__init__(args, *rest, **kwargs)
            if any(mark in str(arg) for arg in args):
                forked.append(self.pid)

    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append  # type: ignore[assignment]
    logger = logging.getLogger(_lifecycle.__name__)
    logger.addHandler(handler)
    holder = StdioTransport([sys.executable, "-c", "import sys; sys.stdin.read()"],
                            name="holder")
    holder.start()   # keeps the spawner thread (and its queue) alive throughout
    monkeypatch.setattr(os, "killpg", killpg)
    monkeypatch.setattr(subprocess, "Popen", SlowPopen)
    started: list[StdioTransport] = []
    starter: threading.Thread | None = None
    try:
        t = StdioTransport([sys.executable, "-c", "import time; time.sleep(60)", mark],
                           name="unkillable")
        with pytest.raises(KeyboardInterrupt):
            t.start()
        assert wait_until(lambda: bool(forked), 10), "the fork never happened"
        pid = forked[0]

        def start_next() -> None:
            t2 = StdioTransport([sys.executable, "-c", "import sys; sys.stdin.read()"],
                                name="next")
            t2.start()
            started.append(t2)

        starter = threading.Thread(target=start_next, name="test-next-start", daemon=True)
        starter.start()
        starter.join(10)
        assert started, "the next start() is held behind the discard"
        assert state(pid) == "running"   # given up, not ended: left to Popen's reaping
        assert wait_until(lambda: any(str(pid) in r.getMessage() for r in records), 5), \
            [r.getMessage() for r in records]
    finally:
        logger.removeHandler(handler)
        monkeypatch.undo()
        for pid in forked:
            if state(pid) != "reaped":
                os.killpg(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        if starter is not None:
            starter.join(10)
        for t2 in started:
            t2.close()
        holder.close()
    assert wait_until(lambda: not spawner_threads(), 5), spawner_threads()
