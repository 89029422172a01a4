"""The inspector's log file and records: many threads, rotation, 0600, no symlinks, detail
levels, request/response pairing, and what a crash leaves behind."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from mcpsync.gateway._inspector import Inspector

THREADS = 20
PER_THREAD = 200


def _lines(*paths: Path) -> list[dict[str, Any]]:
    out = []
    for path in paths:
        for raw in path.read_bytes().splitlines():
            out.append(json.loads(raw))
    return out


def _call(rid: int, tool: str = "echo", **arguments: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}}


def test_twenty_threads_never_interleave_and_rotation_keeps_every_line(tmp_path: Path) -> None:
    log = tmp_path / "gateway.log"
    cap = 64 * 1024
    inspector = Inspector(log, detail="full", max_bytes=cap, backups=100)
    start = threading.Barrier(THREADS)

    def writer(n: int) -> None:
        start.wait()
        filler = f"thread-{n}-" * 20    # long enough that a torn write would show
        for seq in range(PER_THREAD):
            inspector.record("host->gateway", json.dumps(_call(n * 1000 + seq, text=filler)))

    threads = [threading.Thread(target=writer, args=(n,), name=f"test-writer-{n}")
               for n in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    inspector.close()
    files = sorted(tmp_path.iterdir())
    assert len(files) > 5, "the cap should have rotated the log several times"
    records = _lines(*files)     # json.loads fails on any interleaved line
    assert len(records) == THREADS * PER_THREAD
    seen = {r["id"] for r in records}
    assert seen == {n * 1000 + s for n in range(THREADS) for s in range(PER_THREAD)}
    for r in records:
        n = r["id"] // 1000
        assert r["payload"]["params"]["arguments"]["text"] == f"thread-{n}-" * 20
    for path in files:
        assert stat.S_IMODE(path.lstat().st_mode) == 0o600, path
        assert path.stat().st_size <= cap, path
        assert path.name == "gateway.log" or path.name.startswith("gateway.log.")


def test_rotation_drops_the_oldest_past_the_backups(tmp_path: Path) -> None:
    log = tmp_path / "g.log"
    with Inspector(log, max_bytes=2000, backups=2) as inspector:
        for rid in range(200):
            inspector.record("host->gateway", _call(rid), size=10)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.log", "g.log.1", "g.log.2"]
    ids = [r["id"] for r in _lines(tmp_path / "g.log.2", tmp_path / "g.log.1", log)]
    assert ids == sorted(ids) and ids[-1] == 199 and ids[0] > 0   # the oldest are gone


def test_a_symlink_at_the_log_path_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("keep me\n")
    link = tmp_path / "g.log"
    link.symlink_to(target)
    with pytest.raises(OSError, match="symbolic link"):
        Inspector(link)
    assert target.read_text() == "keep me\n"


def test_a_symlink_planted_at_the_path_during_rotation_is_not_followed(tmp_path: Path) -> None:
    log = tmp_path / "g.log"
    target = tmp_path / "victim"
    target.write_text("keep me\n")
    with Inspector(log, max_bytes=600, backups=3) as inspector:
        inspector.record("host->gateway", _call(1), size=10)
        # Someone replaces the log by a link; the next rotation must not write through it.
        os.replace(log, tmp_path / "moved")
        log.symlink_to(target)
        for rid in range(2, 40):
            inspector.record("host->gateway", _call(rid), size=10)
    assert target.read_text() == "keep me\n"


def test_an_existing_log_is_appended_to_and_made_0600(tmp_path: Path) -> None:
    log = tmp_path / "g.log"
    log.write_text('{"dir":"host->gateway"}\n')
    log.chmod(0o644)
    with Inspector(log) as inspector:
        inspector.record("host->gateway", _call(7), size=10)
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert [r.get("id") for r in _lines(log)] == [None, 7]


def test_a_missing_directory_is_named(tmp_path: Path) -> None:
    with pytest.raises(OSError, match=r"no-such-dir.*directory exists"):
        Inspector(tmp_path / "no-such-dir" / "g.log")


def test_off_writes_nothing_and_creates_no_file(tmp_path: Path) -> None:
    got: list[dict[str, Any]] = []
    inspector = Inspector(tmp_path / "g.log", detail="off", callback=got.append)
    assert not inspector.enabled
    inspector.record("host->gateway", _call(1))
    inspector.close()
    assert got == [] and list(tmp_path.iterdir()) == []


def test_summary_detail_writes_the_shape_not_the_values(tmp_path: Path) -> None:
    log = tmp_path / "g.log"
    with Inspector(log) as inspector:
        inspector.record("host->gateway", json.dumps(_call(1, text="a private note",
                                                           count=3, tags=["x", "y", "z"])))
        inspector.record("gateway->host", json.dumps(
            {"jsonrpc": "2.0", "id": 1,
             "result": {"content": [{"type": "text", "text": "the private answer"}]}}))
    text = log.read_text()
    assert "private" not in text
    request, response = _lines(log)
    assert request["shape"] == {"name": "str", "arguments": {"text": "str", "count": "int",
                                                             "tags": ["str", "2 more"]}}
    assert response["shape"] == {"content": [{"type": "str", "text": "str"}]}
    assert "payload" not in request and response["outcome"] == "ok"


def test_responses_get_latency_tool_and_outcome_from_their_request() -> None:
    now = [100.0]
    got: list[dict[str, Any]] = []
    inspector = Inspector(callback=got.append, clock=lambda: now[0])
    inspector.record("host->gateway", _call(1, "calc__add"), upstream="calc")
    inspector.record("gateway->upstream", _call(1, "add"), upstream="calc")
    # A server-to-client request with the same id, in the other id space of that leg.
    inspector.record("upstream->gateway", {"jsonrpc": "2.0", "id": 1,
                                           "method": "sampling/createMessage"}, upstream="calc")
    now[0] = 100.25
    inspector.record("upstream->gateway", {"jsonrpc": "2.0", "id": 1,
                                           "result": {"isError": True}}, upstream="calc")
    now[0] = 100.5
    inspector.record("gateway->upstream", {"jsonrpc": "2.0", "id": 1, "result": {}},
                     upstream="calc")
    inspector.record("gateway->host", {"jsonrpc": "2.0", "id": 1,
                                       "error": {"code": -32012, "message": "budget spent"}})
    inspector.close()
    tool_answer, sampling_answer, host_answer = got[3], got[4], got[5]
    assert (tool_answer["method"], tool_answer["tool"], tool_answer["latency_ms"],
            tool_answer["outcome"]) == ("tools/call", "add", 250.0, "tool_error")
    assert (sampling_answer["method"], sampling_answer["latency_ms"]) == \
        ("sampling/createMessage", 500.0)
    assert (host_answer["tool"], host_answer["upstream"], host_answer["latency_ms"],
            host_answer["outcome"], host_answer["refusal"], host_answer["code"]) == \
        ("calc__add", "calc", 500.0, "refused", "budget", -32012)


def test_invalid_lines_and_batches_are_recorded_without_failing() -> None:
    got: list[dict[str, Any]] = []
    inspector = Inspector(callback=got.append, detail="full")
    inspector.record("host->gateway", b'{"jsonrpc": "2.0", "id": 1, "params": {"password": ')
    inspector.record("host->gateway", b"[1, 2]")
    inspector.close()
    assert (got[0]["kind"], got[0]["size"]) == ("invalid", 51)
    assert "password" in got[0]["text"]
    assert (got[1]["kind"], got[1]["count"]) == ("batch", 2)


def test_a_failing_callback_does_not_stop_the_file(tmp_path: Path) -> None:
    def boom(record: dict[str, Any]) -> None:
        raise RuntimeError("callback broke")

    with Inspector(tmp_path / "g.log", callback=boom) as inspector:
        inspector.record("host->gateway", _call(1))
        inspector.record("host->gateway", _call(2))
    assert [r["id"] for r in _lines(tmp_path / "g.log")] == [1, 2]


def test_unanswered_requests_do_not_grow_memory() -> None:
    inspector = Inspector(callback=lambda r: None)
    for rid in range(10_000):
        inspector.record("host->gateway", _call(rid))
    assert len(inspector._pending) == 4096
    inspector.close()


def test_bad_arguments_are_clear(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="detail 'loud'"):
        Inspector(detail="loud")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_bytes"):
        Inspector(tmp_path / "g.log", max_bytes=0)


_CRASHER = """
import os, signal, sys
from mcpsync.gateway._inspector import Inspector
inspector = Inspector(sys.argv[1], detail="full")
for rid in range(300):
    inspector.record("host->gateway", {"jsonrpc": "2.0", "id": rid, "method": "ping"}, size=1)
print("written", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_process_leaves_every_recorded_line(tmp_path: Path) -> None:
    log = tmp_path / "g.log"
    proc = subprocess.run([sys.executable, "-c", _CRASHER, str(log)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == -signal.SIGKILL and proc.stdout == "written\n", proc.stderr
    assert [r["id"] for r in _lines(log)] == list(range(300))
