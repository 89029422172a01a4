"""``Manager.close()`` of many servers at once: every stdin is closed first, then each server
is waited for (and signalled when it lingers) in parallel. What must still hold: the shutdown
order of each server (stdin EOF, SIGTERM only after the stdin grace, SIGKILL only after the
TERM grace), nothing left behind (processes, threads, descriptors), no crash reported for a
server that exits because we closed its stdin, and close() being idempotent from any thread.
"""

from __future__ import annotations

import _thread
import json
import logging
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import kill_child, open_fds, release_given_up

from mcpsync.manager import Manager, _lifecycle as _closing
from mcpsync.transport.stdio import StdioTransport, _lifecycle

from .test_manager import config, pid_gone, wait_for

pytestmark = pytest.mark.timeout(60)

# A stdlib-only legacy server (quick to start, so twenty of them are). Its mode says what it
# does at stdin EOF: "exit"; "noisy", the same after a line on stderr; "linger" until SIGTERM;
# "deaf" to SIGTERM too (SIGKILL ends it).
# It logs, to the file named by its second argument, when (time.monotonic(), the same clock
# for every process on Linux) it saw EOF and SIGTERM.
# Past EOF it waits for SIGTERM with the signal blocked, in sigwait(), not in a handler
# around time.sleep(1): a Python handler runs between two bytecodes, so a SIGTERM landing
# after the last look for one and before the sleep's system call began waited for the whole
# second. The close sends SIGTERM a stdin grace (1 s here) after closing stdin, so about one
# such second after the server began sleeping at its EOF: right at that boundary, now and
# then. Its handler then ran a second late, when the SIGKILL (TERM_GRACE, 1 s, after the
# SIGTERM) was due; a server killed first left a log with the EOF and no SIGTERM (a test
# run a second slower, failing on the missing "term"). A blocked SIGTERM stays pending
# until sigwait() takes it, whenever it comes.
SERVER = r'''
import json, os, signal, sys, time

mode, log = sys.argv[1], sys.argv[2]
def note(event):
    with open(log, "a") as f:
        f.write(json.dumps({"event": event, "at": time.monotonic()}) + "\n")

def on_term(signum, frame):
    note("term")
    if mode != "deaf":
        os._exit(0)

signal.signal(signal.SIGTERM, on_term)
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    if msg["method"] == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities":
                  {"tools": {}}, "serverInfo": {"name": "many", "version": "1"}}
    else:
        result = {"tools": []}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}) + "\n")
    sys.stdout.flush()
note("eof")
if mode == "noisy":
    sys.stderr.write("bye\n")
    sys.stderr.flush()
if mode not in ("exit", "noisy"):
    # A SIGTERM that came before the block goes to the handler: CPython runs pending
    # handlers as pthread_sigmask() returns. One that comes after waits in sigwait().
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    while True:
        signal.sigwait({signal.SIGTERM})
        on_term(signal.SIGTERM, None)
'''

GRACE = 1.0   # long enough for a server that does exit at EOF to do so on a busy machine


@pytest.fixture
def server(tmp_path: Path) -> Path:
    path = tmp_path / "many_server.py"
    path.write_text(SERVER, encoding="utf-8")
    return path


@pytest.fixture
def short_graces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_lifecycle, "STDIN_GRACE", GRACE)
    monkeypatch.setattr(_lifecycle, "TERM_GRACE", GRACE)


def _events(log: Path) -> dict[str, float]:
    lines = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    return {e["event"]: e["at"] for e in map(json.loads, lines)}


def test_twenty_servers_close_at_once_some_needing_term_or_kill(
        no_leaks: None, server: Path, tmp_path: Path, short_graces: None) -> None:
    modes = ["exit"] * 12 + ["linger"] * 6 + ["deaf"] * 2
    logs = [tmp_path / f"s{i}.log" for i in range(len(modes))]
    fds_before = open_fds()
    manager = Manager(configs=[
        config(f"s{i}", [sys.executable, str(server), mode, str(log)])
        for i, (mode, log) in enumerate(zip(modes, logs, strict=True))],
        max_parallel_starts=len(modes))
    pids: list[int | None] = []
    try:
        assert manager.start_all() == {f"s{i}": None for i in range(len(modes))}
        pids = [manager.client(f"s{i}").pid for i in range(len(modes))]
        assert all(isinstance(pid, int) for pid in pids)
        close_began = time.monotonic()
        manager.close()
    finally:
        # Two servers are deaf to SIGTERM and to their stdin's end: should a check fail
        # before the close ended them, they would outlive the test run.
        for pid in pids:
            if pid is not None:
                kill_child(pid)
        manager.close()                               # idempotent
    assert all(pid_gone(pid) for pid in pids if pid is not None)
    for mode, log in zip(modes, logs, strict=True):
        events = _events(log)
        assert "eof" in events, (mode, events)        # stdin was closed first, for each
        if mode == "exit":
            assert "term" not in events, events       # it left on EOF: never signalled
        else:
            # SIGTERM came after the EOF, and only once the whole stdin grace had passed
            # since close() began (stdin was closed after that instant).
            assert events["eof"] <= events["term"], (mode, events)
            assert events["term"] - close_began >= GRACE - 0.01, (mode, events)
    assert wait_for(lambda: open_fds() <= fds_before), open_fds() - fds_before
    manager.close()                                   # idempotent


def test_closing_stdin_early_is_not_reported_as_a_crash(
        no_leaks: None, server: Path, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    manager = Manager(configs=[config(f"s{i}", [sys.executable, str(server), "exit",
                                                str(tmp_path / f"s{i}.log")])
                               for i in range(5)])
    assert all(error is None for error in manager.start_all().values())
    with caplog.at_level(logging.DEBUG, logger="mcpsync"):
        manager.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == []
    assert all("eof" in _events(tmp_path / f"s{i}.log") for i in range(5))


def test_close_from_several_threads_at_once(no_leaks: None, server: Path,
                                            tmp_path: Path) -> None:
    manager = Manager(configs=[config(f"s{i}", [sys.executable, str(server), "exit",
                                                str(tmp_path / f"s{i}.log")])
                               for i in range(6)])
    manager.start_all()
    pids = [manager.client(f"s{i}").pid for i in range(6)]
    errors: list[BaseException] = []

    def close() -> None:
        try:
            manager.close()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=close, name=f"closer-{n}") for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    assert not any(t.is_alive() for t in threads)
    manager.close()
    assert wait_for(lambda: all(pid_gone(pid) for pid in pids if pid is not None))


def test_a_failing_first_pass_still_stops_the_server(
        no_leaks: None, server: Path, tmp_path: Path, short_graces: None,
        caplog: pytest.LogCaptureFixture) -> None:
    """Should beginning a client's close fail (here its subscriptions' close raises), the
    Manager's second pass still stops that server, TERM included for one that ignores EOF,
    and joins its threads; the failure is logged as a warning, not hidden."""
    manager = Manager(configs=[config("s0", [sys.executable, str(server), "linger",
                                             str(tmp_path / "s0.log")])])
    assert manager.start_all() == {"s0": None}
    client = manager.client("s0")
    pid = client.pid

    def broken() -> None:
        raise RuntimeError("subscriptions would not close")

    client._subs.close = broken  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="mcpsync"):
        manager.close()
    assert pid is not None and pid_gone(pid)
    assert "term" in _events(tmp_path / "s0.log")
    assert any("beginning the close failed" in r.getMessage() for r in caplog.records)


def _manager(server: Path, tmp_path: Path, modes: list[str], **kwargs: object) -> Manager:
    manager = Manager(configs=[
        config(f"s{i}", [sys.executable, str(server), mode, str(tmp_path / f"s{i}.log")])
        for i, mode in enumerate(modes)], max_parallel_starts=len(modes), **kwargs)  # type: ignore[arg-type]
    assert manager.start_all() == {f"s{i}": None for i in range(len(modes))}
    return manager


def _transports(manager: Manager, count: int) -> list[StdioTransport]:
    found = [manager.client(f"s{i}")._transport for i in range(count)]
    assert all(isinstance(t, StdioTransport) for t in found)
    return found  # type: ignore[return-value]


def _close_interrupted(manager: Manager, delay: float,
                       monkeypatch: pytest.MonkeyPatch) -> bool:
    """``manager.close()`` with a real SIGINT (Ctrl-C) sent to this, the main, thread
    ``delay`` seconds after the close's waiting thread started; True when it interrupted
    the close. (Before that thread exists nothing has been taken out of the Manager: see
    test_ctrl_c_before_the_close_began_leaves_the_manager_open.)"""
    main = threading.get_ident()
    sent = threading.Event()
    waiting = threading.Event()
    start = _closing._Closing.start

    def started(self: object) -> None:
        start(self)
        waiting.set()

    monkeypatch.setattr(_closing._Closing, "start", started)

    def fire() -> None:
        waiting.wait(10)
        time.sleep(delay)
        signal.pthread_kill(main, signal.SIGINT)
        sent.set()

    firing = threading.Thread(target=fire, name="test-ctrl-c")
    interrupted = False
    try:
        firing.start()
        try:
            manager.close()
        except KeyboardInterrupt:
            interrupted = True
        sent.wait(10)
        for _ in range(10):      # the handler runs at the next bytecode: let it, here
            time.sleep(0.001)
    except KeyboardInterrupt:    # it came after close() returned
        pass
    firing.join(10)
    return interrupted


def _all_settled(transports: list[StdioTransport]) -> bool:
    return all(t.closed and not t._aside.close_lock.locked() for t in transports)


def test_ctrl_c_during_close_leaves_nothing_behind(
        no_leaks: None, server: Path, tmp_path: Path, short_graces: None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Interrupted while servers linger, close() raises KeyboardInterrupt at once; the
    close goes on in the background to its end: every server signalled on schedule and
    gone, every transport closed with its close lock free, no thread or descriptor left.
    Each server ends by itself: at EOF, or (lingering) at its SIGTERM, which it logs first;
    never by the SIGKILL due ``TERM_GRACE`` later. (This test failed now and then on a log
    without the SIGTERM, when the server's handler ran a second late: see ``SERVER`` for
    why, and why it waits for SIGTERM in sigwait().)"""
    modes = ["exit"] * 3 + ["linger"] * 3
    fds_before = open_fds()
    manager = _manager(server, tmp_path, modes)
    transports = _transports(manager, len(modes))
    pids = [t.pid for t in transports]
    began = time.monotonic()
    assert _close_interrupted(manager, 0.3, monkeypatch)
    left_after = time.monotonic() - began
    assert left_after < GRACE, left_after         # it left without waiting for them
    assert wait_for(lambda: all(pid_gone(pid) for pid in pids if pid is not None))
    assert wait_for(lambda: _all_settled(transports))
    # Everything, should one check fail: each server's log (seconds since close() began)
    # and how it ended.
    logs = [_events(tmp_path / f"s{i}.log") for i in range(len(modes))]
    seen = "; ".join(
        f"s{i} {mode} {({event: round(at - began, 3) for event, at in events.items()})} "
        f"exit {t.returncode()}"
        for i, (mode, events, t) in enumerate(zip(modes, logs, transports, strict=True)))
    for mode, events in zip(modes, logs, strict=True):
        assert "eof" in events, seen
        if mode == "linger":
            assert "term" in events, seen
            assert events["term"] - began >= GRACE - 0.01, seen
    assert [t.returncode() for t in transports] == [0] * len(modes), seen
    manager.close()                                # closed already: returns at once
    assert wait_for(lambda: open_fds() <= fds_before), open_fds() - fds_before


def test_a_simulated_ctrl_c_is_seen_while_servers_linger(
        no_leaks: None, server: Path, tmp_path: Path, short_graces: None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``_thread.interrupt_main()`` does not wake a lock's wait the way a real SIGINT
    does: on the main thread close() waits in short slices, so it still leaves at once
    (not when the lingering servers are done, GRACE and more later)."""
    modes = ["linger"] * 3
    manager = _manager(server, tmp_path, modes)
    transports = _transports(manager, len(modes))
    pids = [t.pid for t in transports]
    waiting = threading.Event()
    start = _closing._Closing.start

    def started(self: object) -> None:
        start(self)
        waiting.set()

    monkeypatch.setattr(_closing._Closing, "start", started)

    def fire() -> None:
        waiting.wait(10)
        time.sleep(0.1)
        _thread.interrupt_main()

    firing = threading.Thread(target=fire, name="test-interrupt-main")
    firing.start()
    began = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        manager.close()
    left_after = time.monotonic() - began
    firing.join(10)
    assert left_after < GRACE / 2, left_after     # before the lingering servers' SIGTERM
    assert wait_for(lambda: all(pid_gone(pid) for pid in pids if pid is not None))
    assert wait_for(lambda: _all_settled(transports))


@pytest.mark.parametrize("delay", [0.0, 0.001, 0.003, 0.01, 0.03])
def test_ctrl_c_at_any_moment_of_close(no_leaks: None, server: Path, tmp_path: Path,
                                       delay: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whenever Ctrl-C lands once the close's waiting thread is started (while the servers
    are told to stop, while they are torn down, after close() returned), every server ends
    and nothing is left behind."""
    fds_before = open_fds()
    manager = _manager(server, tmp_path, ["exit"] * 4)
    transports = _transports(manager, 4)
    pids = [t.pid for t in transports]
    _close_interrupted(manager, delay, monkeypatch)
    assert wait_for(lambda: all(pid_gone(pid) for pid in pids if pid is not None))
    assert wait_for(lambda: _all_settled(transports))
    assert wait_for(lambda: open_fds() <= fds_before), open_fds() - fds_before


def test_a_server_that_never_dies_does_not_hold_close_to_its_deadline(
        no_leaks: None, server: Path, tmp_path: Path, short_graces: None,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A server that even SIGKILL does not end (here the signals never reach it) is given
    up KILL_WAIT after the SIGKILL: close() returns then, not at its 10 s deadline, with
    that server's threads joined and descriptors closed and a warning naming it."""
    monkeypatch.setattr(_lifecycle, "KILL_WAIT", 0.2)
    manager = Manager(configs=[
        config(f"s{i}", [sys.executable, str(server), mode, str(tmp_path / f"s{i}.log")])
        for i, mode in enumerate(["deaf", "exit", "linger"])], max_parallel_starts=3)
    transports: list[object] = []
    try:
        # Started inside the try: a failed start_all() check still ends the deaf server.
        assert manager.start_all() == {f"s{i}": None for i in range(3)}
        transports = [manager.client(f"s{i}")._transport for i in range(3)]
        stuck = _transports(manager, 3)[0]
        monkeypatch.setattr(stuck, "_signal_group",
                            lambda *, kill, leftovers_only=False: None)
        with caplog.at_level(logging.WARNING):
            began = time.monotonic()
            manager.close()
            took = time.monotonic() - began
        assert took < 2 * GRACE + 0.2 + 3.0, took           # far from CLOSE_TIMEOUT (10 s)
        assert stuck.closed and stuck.returncode() is None
        assert any("could not be reaped" in r.getMessage() for r in caplog.records)
        assert not any("still stopping" in r.getMessage() for r in caplog.records)
        assert stuck._aside.holds_spawner       # the reference an unreaped server keeps
    finally:
        # What close() leaves to the process's owner (the process, and the spawner
        # reference that an unreaped server keeps), and all the rest should a check fail:
        # the deaf server would outlive the test run, its SIGTERM being ignored.
        for t in transports:
            if isinstance(t, StdioTransport) and t.pid is not None:
                kill_child(t.pid)
        manager.close()                  # idempotent; the rest, had a check come first
        for t in transports:
            release_given_up(t)
    assert not stuck._aside.holds_spawner and stuck._proc is not None
    assert stuck._proc.returncode == -signal.SIGKILL


def test_close_from_two_threads_while_servers_linger(
        no_leaks: None, server: Path, tmp_path: Path, short_graces: None) -> None:
    manager = _manager(server, tmp_path, ["linger", "exit", "linger", "exit"])
    transports = _transports(manager, 4)
    pids = [t.pid for t in transports]
    errors: list[BaseException] = []

    def close() -> None:
        try:
            manager.close()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=close, name=f"closer-{n}") for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == [] and not any(t.is_alive() for t in threads)
    assert wait_for(lambda: all(pid_gone(pid) for pid in pids if pid is not None))
    assert wait_for(lambda: _all_settled(transports))


@pytest.mark.parametrize("first", ["client", "manager"])
def test_a_client_closed_by_its_own_close_meanwhile(
        no_leaks: None, server: Path, tmp_path: Path, short_graces: None,
        first: str) -> None:
    """The client of one server is closed from another thread while the Manager closes
    them all, before it or after: both calls return, that server still gets its SIGTERM
    only after the stdin grace, and a client close() that comes second returns only once
    the server is down (it waits for the shutdown under way)."""
    manager = _manager(server, tmp_path, ["linger", "linger", "exit"])
    client = manager.client("s0")
    transports = _transports(manager, 3)
    pids = [t.pid for t in transports]
    client_done: list[bool] = []

    def close_client() -> None:
        client.close()
        client_done.append(pids[0] is not None and pid_gone(pids[0]))

    other = threading.Thread(target=close_client, name="test-client-closer")
    began = time.monotonic()
    if first == "client":
        other.start()
        time.sleep(0.1)
        manager.close()
    else:
        starter = threading.Timer(0.1, other.start)
        starter.start()
        manager.close()
        starter.join(10)
    other.join(30)
    assert client_done, "the client's close() did not return"
    if first == "manager":
        assert client_done == [True]
    assert wait_for(lambda: all(pid_gone(pid) for pid in pids if pid is not None))
    assert wait_for(lambda: _all_settled(transports))
    for i in (0, 1):
        events = _events(tmp_path / f"s{i}.log")
        assert events["term"] - began >= GRACE - 0.01, events


def test_a_stalled_teardown_does_not_hold_up_the_others(
        no_leaks: None, server: Path, tmp_path: Path) -> None:
    """Each server's last stderr line goes to an ``on_stderr`` that does not return until
    the close did, so each teardown is held up for the whole 1 s it gives the stderr thread
    to end: more teardown threads start, and six such servers close in about one such
    wait, not six."""
    closed = threading.Event()

    def stuck(line: str) -> None:
        closed.wait(30)

    manager = _manager(server, tmp_path, ["noisy"] * 6, connect_options={"on_stderr": stuck})
    pids = [manager.client(f"s{i}").pid for i in range(6)]
    began = time.monotonic()
    try:
        manager.close()
        took = time.monotonic() - began
    finally:
        closed.set()                              # the stderr threads end (and close)
    assert took < 4.0, took                       # one after the other: 6 s or more
    assert all(pid_gone(pid) for pid in pids if pid is not None)


def test_a_failing_finish_still_closes_the_rest_of_the_entry(
        no_leaks: None, server: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Should a server's finish raise once the server is down, its client is closed all
    the same (threads joined) and the other servers are not held up."""
    manager = _manager(server, tmp_path, ["exit", "exit", "exit"])
    transports = _transports(manager, 3)
    pids = [t.pid for t in transports]
    sessions = [manager.client(f"s{i}")._session for i in range(3)]
    real = transports[1]._release

    def broken(deadline: float, *, exited: bool, stdin_closed: bool) -> None:
        real(deadline, exited=exited, stdin_closed=stdin_closed)
        raise RuntimeError("the finish failed")

    monkeypatch.setattr(transports[1], "_release", broken)
    manager.close()
    assert all(pid_gone(pid) for pid in pids if pid is not None)
    assert _all_settled(transports)
    assert all(session._aside.close_done for session in sessions)   # the client's close ran


def test_one_stderr_thread_drains_every_server(no_leaks: None, server: Path, tmp_path: Path,
                                               caplog: pytest.LogCaptureFixture) -> None:
    """Servers without an on_stderr callback share one stderr drain thread, which ends with
    the close (each server's stderr reached EOF, or was let go, before its teardown ended)."""
    caplog.set_level(logging.INFO, logger="mcpsync.server")  # DEBUG would keep an own thread
    manager = _manager(server, tmp_path, ["noisy"] * 6)
    transports = _transports(manager, 6)
    assert [t.name for t in threading.enumerate() if "stderr" in t.name] == ["mcpsync-stderr"]
    manager.close()
    assert not [t.name for t in threading.enumerate() if "stderr" in t.name]
    assert all(t.stderr_tail() == "bye\n" for t in transports)


def test_ctrl_c_before_the_close_began_leaves_the_manager_open(
        no_leaks: None, server: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A real SIGINT on the calling thread before the close's waiting thread exists: nothing
    was taken out of the Manager (that thread takes the entries itself), so the servers are
    neither closed nor lost, and a second close() closes them all."""
    manager = _manager(server, tmp_path, ["exit"] * 3)
    transports = _transports(manager, 3)
    pids = [t.pid for t in transports]
    start = _closing._Closing.start

    def interrupted_first(self: _closing._Closing) -> None:
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)
        for _ in range(100):     # the handler runs at the next check: here, at the latest
            time.sleep(0.001)
        start(self)

    monkeypatch.setattr(_closing._Closing, "start", interrupted_first)
    with pytest.raises(KeyboardInterrupt):
        manager.close()
    monkeypatch.setattr(_closing._Closing, "start", start)
    assert not any(t.closed for t in transports)
    assert manager.client("s0")._transport is transports[0]   # still open, still usable
    manager.close()
    assert all(pid_gone(pid) for pid in pids if pid is not None)
    assert _all_settled(transports)
    manager.close()                                   # idempotent


def test_ctrl_c_right_after_the_close_began_lets_it_finish(
        no_leaks: None, server: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A real SIGINT on the calling thread the moment the waiting thread is started: that
    thread takes the entries and closes every server to its end in the background."""
    fds_before = open_fds()
    manager = _manager(server, tmp_path, ["exit"] * 3)
    transports = _transports(manager, 3)
    pids = [t.pid for t in transports]
    start = _closing._Closing.start

    def interrupted_after(self: _closing._Closing) -> None:
        start(self)
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)
        for _ in range(100):
            time.sleep(0.001)

    monkeypatch.setattr(_closing._Closing, "start", interrupted_after)
    with pytest.raises(KeyboardInterrupt):
        manager.close()
    assert wait_for(lambda: all(pid_gone(pid) for pid in pids if pid is not None))
    assert wait_for(lambda: _all_settled(transports))
    assert wait_for(lambda: manager._closed)
    manager.close()                                   # closed already: returns at once
    assert wait_for(lambda: open_fds() <= fds_before), open_fds() - fds_before


def test_close_from_a_signal_handler_while_the_lock_is_held(
        no_leaks: None, server: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A real signal whose handler calls close() while the main thread is inside a Manager
    method that holds the Manager's lock (an RLock: the handler's close() re-enters it):
    the entries are taken on the calling thread, since the waiting thread could not take
    the lock before close() returned; the close ends at once, with every server gone."""
    from mcpsync.manager import _manager as manager_module

    monkeypatch.setattr(manager_module, "CLOSE_TIMEOUT", 4.0)   # the wait, if it hangs
    manager = _manager(server, tmp_path, ["exit"] * 3)
    transports = _transports(manager, 3)
    pids = [t.pid for t in transports]
    took: list[float] = []

    def handler(signum: int, frame: object) -> None:
        began = time.monotonic()
        manager.close()
        took.append(time.monotonic() - began)

    previous = signal.signal(signal.SIGUSR1, handler)
    try:
        with manager._lock:      # as inside tools(), server_ready() or a call's _entry()
            signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)
            for _ in range(100):     # the handler runs at the next check: here, at the latest
                if took:
                    break
                time.sleep(0.001)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert len(took) == 1 and took[0] < 3.0, took
    assert manager._closed
    assert all(pid_gone(pid) for pid in pids if pid is not None)
    assert _all_settled(transports)
    manager.close()                                   # idempotent
