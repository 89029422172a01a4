"""``Manager.close()`` of many servers at once: every stdin is closed first, then each server
is waited for (and signalled when it lingers) in parallel. What must still hold: the shutdown
order of each server (stdin EOF, SIGTERM only after the stdin grace, SIGKILL only after the
TERM grace), nothing left behind (processes, threads, descriptors), no crash reported for a
server that exits because we closed its stdin, and close() being idempotent from any thread.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import open_fds

from mcpsync.manager import Manager
from mcpsync.transport.stdio import _lifecycle

from .test_manager import config, pid_gone, wait_for

pytestmark = pytest.mark.timeout(60)

# A stdlib-only legacy server (quick to start, so twenty of them are). Its mode says what it
# does at stdin EOF: "exit"; "linger" until SIGTERM; "deaf" to SIGTERM too (SIGKILL ends it).
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
if mode != "exit":
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
