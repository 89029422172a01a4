"""``Manager.close()`` of many servers at once: every stdin is closed first, then each server
is waited for (and signalled when it lingers) in parallel. What must still hold: the shutdown
order of each server (stdin EOF, SIGTERM only after the stdin grace, SIGKILL only after the
TERM grace), nothing left behind (processes, threads, descriptors), no crash reported for a
server that exits because we closed its stdin, and close() being idempotent from any thread.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import open_fds

from mcpsync.manager import Manager, _closing, _manager
from mcpsync.transport.stdio import _lifecycle, _reaper

from .test_manager import config, pid_gone, wait_for

pytestmark = pytest.mark.timeout(60)

# A stdlib-only legacy server (quick to start, so twenty of them are). Its mode says what it
# does at stdin EOF: "exit"; "slow": write "slow" to stderr, then exit; "linger" until
# SIGTERM; "deaf" to SIGTERM too (SIGKILL ends it).
# It logs, to the file named by its second argument, when (time.monotonic(), the same clock
# for every process on Linux) it saw EOF and SIGTERM.
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
if mode == "slow":   # a last stderr line, which the test's on_stderr takes long over
    sys.stderr.write("slow\n")
    sys.stderr.flush()
if mode not in ("exit", "slow"):
    while True:
        time.sleep(1)
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
    assert manager.start_all() == {f"s{i}": None for i in range(len(modes))}
    pids = [manager.client(f"s{i}").pid for i in range(len(modes))]
    assert all(isinstance(pid, int) for pid in pids)
    close_began = time.monotonic()
    manager.close()
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


def _reaped(pid: int | None) -> bool:
    """Gone and reaped: a zombie still answers kill(0)."""
    assert pid is not None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _term_count(log: Path) -> int:
    lines = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    return sum(1 for line in lines if json.loads(line)["event"] == "term")


def test_servers_that_exit_at_once_are_reaped_before_a_lingering_ones_grace(
        no_leaks: None, server: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """One wait covers every server, but each keeps its own schedule: the 19 that exit at
    EOF are reaped (and torn down) at once, while the 20th, which ignores EOF, gets its
    SIGTERM only after its whole stdin grace."""
    grace = 3.0
    monkeypatch.setattr(_lifecycle, "STDIN_GRACE", grace)
    monkeypatch.setattr(_lifecycle, "TERM_GRACE", grace)
    modes = ["exit"] * 19 + ["linger"]
    logs = [tmp_path / f"s{i}.log" for i in range(len(modes))]
    manager = Manager(configs=[
        config(f"s{i}", [sys.executable, str(server), mode, str(log)])
        for i, (mode, log) in enumerate(zip(modes, logs, strict=True))],
        max_parallel_starts=len(modes))
    assert manager.start_all() == {f"s{i}": None for i in range(len(modes))}
    pids = [manager.client(f"s{i}").pid for i in range(len(modes))]
    closer = threading.Thread(target=manager.close, name="closer")
    close_began = time.monotonic()
    closer.start()
    try:
        assert wait_for(lambda: all(_reaped(pid) for pid in pids[:19]), timeout=grace / 2), \
            [pid for pid in pids[:19] if not _reaped(pid)]
        assert time.monotonic() - close_began < grace   # not one of them waited the grace
        assert closer.is_alive() and not _reaped(pids[19])   # the 20th still in its grace
    finally:
        closer.join(30)
    assert not closer.is_alive()
    events = _events(logs[19])
    assert events["term"] - close_began >= grace - 0.01, events
    assert _reaped(pids[19])


def test_no_thread_per_server_waits_for_the_exits(
        no_leaks: None, server: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Stdio servers whose stdin the first pass closed are waited for and torn down by the
    calling thread, with one thread for their signals: no thread is started per server."""
    names: list[str] = []
    real_spawn = _closing.spawn

    def counting_spawn(name: str, target: Any, *args: Any) -> threading.Thread:
        names.append(name)
        return real_spawn(name, target, *args)

    monkeypatch.setattr(_closing, "spawn", counting_spawn)
    monkeypatch.setattr(_reaper, "spawn", counting_spawn)
    manager = Manager(configs=[config(f"s{i}", [sys.executable, str(server), "exit",
                                                str(tmp_path / f"s{i}.log")])
                               for i in range(8)], max_parallel_starts=8)
    assert all(error is None for error in manager.start_all().values())
    pids = [manager.client(f"s{i}").pid for i in range(8)]
    manager.close()
    assert names == ["mcpsync-close-wait"]
    assert all(_reaped(pid) for pid in pids)


def test_a_client_closed_from_another_thread_during_the_wait(
        no_leaks: None, server: Path, tmp_path: Path, short_graces: None) -> None:
    """While the Manager waits for a server that ignores SIGTERM too, the user closes that
    server's Client from another thread: that close waits for the Manager's wait, then
    finds the steps taken. The server gets one SIGTERM (not one per close), then SIGKILL."""
    log = tmp_path / "s0.log"
    manager = Manager(configs=[config("s0", [sys.executable, str(server), "deaf", str(log)]),
                               config("s1", [sys.executable, str(server), "exit",
                                             str(tmp_path / "s1.log")])])
    assert manager.start_all() == {"s0": None, "s1": None}
    client = manager.client("s0")
    pid = client.pid
    closer = threading.Thread(target=manager.close, name="closer")
    closer.start()
    assert wait_for(lambda: "eof" in _events(log))
    client.close()                      # from this thread, during the Manager's wait
    closer.join(30)
    assert not closer.is_alive()
    assert _reaped(pid)
    assert _term_count(log) == 1


def test_a_slow_teardown_does_not_delay_another_servers_signal(
        no_leaks: None, server: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A teardown runs on the calling thread, and one can block: here the server's last
    stderr line keeps its on_stderr callback busy for longer than the stderr thread's join
    (1 s). The SIGTERM of another server, which ignores EOF, still comes when its grace
    (0.3 s) ends, since the waiting thread sends it."""
    grace = 0.3
    monkeypatch.setattr(_lifecycle, "STDIN_GRACE", grace)
    monkeypatch.setattr(_lifecycle, "TERM_GRACE", GRACE)
    release = threading.Event()

    def on_stderr(line: str) -> None:
        if line == "slow":
            release.wait(GRACE + 1.0)

    logs = {name: tmp_path / f"{name}.log" for name in ("slow", "linger")}
    manager = Manager(configs=[config(name, [sys.executable, str(server), name, str(log)])
                               for name, log in logs.items()],
                      connect_options={"on_stderr": on_stderr})
    assert manager.start_all() == {"slow": None, "linger": None}
    pids = [manager.client(name).pid for name in logs]
    close_began = time.monotonic()
    try:
        manager.close()
        took = time.monotonic() - close_began
    finally:
        release.set()
    assert took >= 0.9   # the slow teardown did block (the stderr thread's join)
    events = _events(logs["linger"])
    assert grace - 0.01 <= events["term"] - close_began < grace + 0.5, events
    assert all(_reaped(pid) for pid in pids)


def test_no_thread_for_the_signals_closes_each_server_on_its_own(
        no_leaks: None, server: Path, tmp_path: Path, short_graces: None,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Should the system refuse the signalling thread, the claims are released and each
    server closed by its own close(), TERM included for one that ignores EOF; a WARNING
    says why."""
    def refusing_spawn(name: str, target: Any, *args: Any) -> threading.Thread:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(_reaper, "spawn", refusing_spawn)
    logs = [tmp_path / "s0.log", tmp_path / "s1.log"]
    manager = Manager(configs=[config("s0", [sys.executable, str(server), "exit", str(logs[0])]),
                               config("s1", [sys.executable, str(server), "linger",
                                             str(logs[1])])])
    assert manager.start_all() == {"s0": None, "s1": None}
    pids = [manager.client(name).pid for name in ("s0", "s1")]
    with caplog.at_level(logging.WARNING, logger="mcpsync"):
        manager.close()
    assert all(_reaped(pid) for pid in pids)
    assert "term" not in _events(logs[0]) and "term" in _events(logs[1])
    assert any("cannot wait for the servers together" in r.getMessage()
               for r in caplog.records)


def test_past_the_close_timeout_a_server_is_still_stopped_in_the_background(
        no_leaks: None, server: Path, tmp_path: Path, short_graces: None,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """close() returns at its timeout naming the server still stopping (one deaf to
    SIGTERM, whose shutdown takes both graces); its teardown goes on on a thread, so the
    process is still killed and reaped."""
    monkeypatch.setattr(_manager, "CLOSE_TIMEOUT", 0.3)
    log = tmp_path / "s0.log"
    manager = Manager(configs=[config("s0", [sys.executable, str(server), "deaf", str(log)])])
    assert manager.start_all() == {"s0": None}
    pid = manager.client("s0").pid
    began = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="mcpsync"):
        manager.close()
    assert time.monotonic() - began < GRACE   # it did not wait for the TERM grace
    assert any("still stopping" in r.getMessage() and "'s0'" in r.getMessage()
               for r in caplog.records)
    assert wait_for(lambda: _reaped(pid), timeout=3 * GRACE + 5)
    assert "term" in _events(log)
