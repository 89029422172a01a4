"""Closing many stdio servers with one thread: ``claim_close()``, ``ExitWatch`` and
``finish_claimed_close()`` (all three in ``_exit_watch``, which only the Manager loads).

The Manager closes its servers this way: stdin closed first (``close_input()``), then the
close claimed, every claimed server's exit watched by one ``poll()`` on all the pidfds, with
SIGTERM and SIGKILL sent on each one's own schedule, and each finished (reaped, threads
joined, descriptors closed) as it exits. What must hold, with real processes: the sequence
of a single ``close()`` (SIGTERM only after the stdin grace, counted from the stdin close;
SIGKILL only after the TERM grace), a server given up after SIGKILL settled at once rather
than waited for, a ``close()`` from another thread during a claim waiting for the whole
shutdown, a claim refused whenever it cannot keep those promises, and nothing left behind.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import kill_child, open_fds, release_given_up

from mcpsync.transport.stdio import StdioTransport, _lifecycle as stdio
from mcpsync.transport.stdio._exit_watch import claim_close, finish_claimed_close

pytestmark = pytest.mark.timeout(60)

# At stdin EOF: "exit" exits; "linger" waits for SIGTERM; "deaf" ignores SIGTERM too.
SERVER = r'''
import signal, sys, time
mode = sys.argv[1]
if mode == "deaf":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
sys.stdin.buffer.read()
if mode == "exit":
    sys.exit(0)
while True:
    time.sleep(1)
'''

GRACE = 0.6


@pytest.fixture
def server(tmp_path: Path) -> Path:
    path = tmp_path / "server.py"
    path.write_text(SERVER, encoding="utf-8")
    return path


@pytest.fixture
def short_graces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stdio, "STDIN_GRACE", GRACE)
    monkeypatch.setattr(stdio, "TERM_GRACE", GRACE)
    monkeypatch.setattr(stdio, "KILL_WAIT", 0.2)


def _started(server: Path, mode: str, name: str) -> StdioTransport:
    t = StdioTransport([sys.executable, str(server), mode], name=name)
    t.start()
    return t


def _death_time(pid: int, out: dict[int, float]) -> threading.Thread:
    """A thread noting when ``pid`` dies (its own pidfd turns readable)."""
    fd = os.pidfd_open(pid)

    def watch() -> None:
        try:
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            poller.poll(30_000)
            out[pid] = time.monotonic()
        finally:
            os.close(fd)

    thread = threading.Thread(target=watch, name="test-death-watch")
    thread.start()
    return thread


def _end_left_behind(transports: list[StdioTransport]) -> None:
    """What a test that failed leaves, ended: each server not reaped yet is killed with its
    group (a "deaf" one would outlive the test run), then each transport not closed is
    closed (one claimed for a watch is finished as its watch would have) and one given up
    after SIGKILL is reaped, with the spawner reference it keeps released. Nothing here on
    a test that passed: its servers are reaped and its transports closed by then."""
    for t in transports:
        if t.pid is not None:
            kill_child(t.pid)
    for t in transports:
        if t.closed:
            pass
        elif t._closing and t._aside.close_lock.locked():   # claimed, never finished
            finish_claimed_close(t, None)
        else:
            t.close()
        release_given_up(t)


def _watch_all(transports: list[StdioTransport]) -> dict[int, bool]:
    """Claim every transport, watch them to the end, finish each as it settles."""
    watch = stdio.ExitWatch()
    for index, t in enumerate(transports):
        t.close_input()
        assert claim_close(t)
        watch.add(t, index)
    settled: dict[int, bool] = {}
    while len(watch):
        for key, exited in watch.step(None):
            assert isinstance(key, int)
            settled[key] = exited
            finish_claimed_close(transports[key], exited)
    return settled


@pytest.mark.needs_pidfds(reads_status=False)
def test_the_watch_keeps_each_servers_sequence(no_leaks: None, server: Path,
                                               short_graces: None) -> None:
    fds = open_fds()
    modes = ["exit", "exit", "linger", "deaf"]
    transports: list[StdioTransport] = []
    watchers: list[threading.Thread] = []
    try:
        for i, mode in enumerate(modes):
            transports.append(_started(server, mode, f"w{i}"))
        pids = [t.pid for t in transports]
        assert all(isinstance(pid, int) for pid in pids)
        deaths: dict[int, float] = {}
        watchers += [_death_time(pid, deaths) for pid in pids if pid is not None]
        began = time.monotonic()
        settled = _watch_all(transports)
        for w in watchers:
            w.join(10)
        assert settled == {0: True, 1: True, 2: True, 3: True}
        assert ([t.returncode() for t in transports]
                == [0, 0, -signal.SIGTERM, -signal.SIGKILL])
        linger, deaf = (deaths[pid] - began for pid in pids[2:] if pid is not None)
        assert linger >= GRACE - 0.05           # SIGTERM only once the stdin grace had run
        assert deaf >= 2 * GRACE - 0.05         # SIGKILL only once the TERM grace had run too
        assert all(t.closed for t in transports)
        assert open_fds() <= fds
    finally:
        _end_left_behind(transports)
        for w in watchers:
            w.join(10)


@pytest.mark.needs_pidfds(reads_status=False)
def test_a_server_that_never_dies_is_given_up_not_waited_for(
        no_leaks: None, server: Path, short_graces: None, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGKILL that does not take (here: never delivered) settles the server KILL_WAIT
    later as given up: its threads are joined and descriptors closed all the same, with a
    warning, and the watch does not wait for it any longer."""
    fds = open_fds()
    started: list[StdioTransport] = []
    try:
        started.append(stuck := _started(server, "deaf", "stuck"))
        started.append(quick := _started(server, "exit", "quick"))
        sent: list[bool] = []
        monkeypatch.setattr(stuck, "_signal_group",
                            lambda *, kill, leftovers_only=False: sent.append(kill))
        began = time.monotonic()
        settled = _watch_all([stuck, quick])
        took = time.monotonic() - began
        assert settled == {0: False, 1: True}
        assert sent[:2] == [False, True]                # TERM, then KILL, then given up
        assert took < 2 * GRACE + 0.2 + 2.0             # not the close bound, nor more
        assert stuck.closed and stuck.returncode() is None
        assert any("could not be reaped" in r.getMessage() for r in caplog.records)
        assert stuck._aside.holds_spawner           # the reference an unreaped server keeps
    finally:
        # What close() leaves to the process's owner (the process itself and the spawner
        # reference an unreaped server keeps), and all the rest should a check fail.
        _end_left_behind(started)
    assert not stuck._aside.holds_spawner and stuck._proc is not None
    assert stuck._proc.returncode == -signal.SIGKILL
    assert open_fds() <= fds


@pytest.mark.needs_pidfds(reads_status=False)
def test_close_from_another_thread_during_a_claim_waits_for_the_end(
        no_leaks: None, server: Path, short_graces: None) -> None:
    t = _started(server, "linger", "claimed")
    returned: list[float] = []
    closer = threading.Thread(target=lambda: (t.close(), returned.append(time.monotonic())),
                              name="test-closer")
    try:
        t.close_input()
        assert claim_close(t)
        closer.start()
        time.sleep(0.1)
        assert not returned                    # it waits for the claimed close
        watch = stdio.ExitWatch()
        watch.add(t, "only")
        settled: list[tuple[object, bool]] = []
        while len(watch):
            settled += watch.step(None)
        finished = time.monotonic()
        finish_claimed_close(t, settled[0][1])
        closer.join(10)
        assert settled == [("only", True)]
        assert returned and returned[0] >= finished
        assert t.closed and t.returncode() == -signal.SIGTERM
    finally:
        # Should a check fail, the server and the transport are ended here: left open, its
        # threads (the spawner's, the stderr hub's) would fail every later test that waits
        # for the threads of earlier tests to end.
        _end_left_behind([t])
        if closer.is_alive():
            closer.join(10)


def test_a_claim_is_refused_when_it_could_not_keep_the_sequence(
        no_leaks: None, server: Path) -> None:
    t = _started(server, "exit", "refused")
    assert not claim_close(t)              # stdin still open: close() must handle it
    t.close_input()
    other = threading.Thread(target=t.close, name="test-closer")
    with t._aside.close_lock:            # another thread is inside close()
        assert not claim_close(t)
        other.start()
    other.join(10)
    assert t.closed
    assert not claim_close(t)              # closed
    assert not claim_close(StdioTransport([sys.executable, "-c", "pass"], name="new"))


# At stdin EOF, leaves a child in its process group (sleeping) and exits; says its pid first.
LEAVES_A_CHILD = r'''
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
sys.stdout.write('{"jsonrpc":"2.0","method":"child","params":{"pid":%d}}\n' % child.pid)
sys.stdout.flush()
sys.stdin.buffer.read()
'''


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:   # a zombie is not alive
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:   # reaped in between
        return False


@pytest.mark.needs_pidfds(reads_status=False)
def test_the_finish_sends_the_group_one_sigkill_and_its_orphans_die(
        no_leaks: None, server: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """After an exit the finish signals the leftovers of the server's group with one
    ``killpg(SIGKILL)``, asking nothing first: the unreaped leader keeps the group in being,
    so it always has members then, and an empty one fails the signal quietly anyway. An
    orphan the server left in its group dies; a server that left none is signalled all the
    same (its group holds only itself, unreaped), harmlessly."""
    fds = open_fds()
    parent = tmp_path / "parent.py"
    parent.write_text(LEAVES_A_CHILD, encoding="utf-8")
    leaves = StdioTransport([sys.executable, str(parent)], name="leaves")
    started = [leaves]
    try:
        leaves.start()
        deadline = time.monotonic() + 10
        got: list[object] = []
        while not got:
            assert time.monotonic() < deadline, "the server never said its child's pid"
            items = leaves.receive(1.0)
            assert items is not None
            got.extend(items)
        child = got[0].params["pid"]   # type: ignore[attr-defined]
        started.append(plain := _started(server, "exit", "plain"))
        sent: list[tuple[int, int]] = []
        real_killpg = os.killpg

        def killpg(pgid: int, sig: int) -> None:
            sent.append((pgid, sig))
            real_killpg(pgid, sig)

        monkeypatch.setattr(os, "killpg", killpg)
        assert _watch_all([leaves, plain]) == {0: True, 1: True}
        monkeypatch.undo()
        assert sorted(sent) == sorted([(leaves.pid, signal.SIGKILL), (plain.pid, signal.SIGKILL)])
        assert [leaves.returncode(), plain.returncode()] == [0, 0]
        deadline = time.monotonic() + 5
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not _alive(child)   # the orphan in the server's group was killed
        assert open_fds() <= fds
    finally:
        # Should a check fail, the servers and transports are ended here: left open, their
        # threads (the spawner's, the stderr hub's) would fail every later test that waits
        # for the threads of earlier tests to end.
        _end_left_behind(started)
