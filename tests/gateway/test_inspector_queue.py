"""The inspector's queued path (what the gateway uses): frames queued by traffic threads,
built and written by the ``mcpsync-gateway-log`` thread, one record per leg, nothing lost on
close, and frames past the queue's bound counted in a ``dropped`` record that
``mcpsync inspect`` reports."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from mcpsync._envelope import parse_envelope
from mcpsync.cli._inspect import summarize
from mcpsync.gateway._inspector import Inspector
from mcpsync.gateway._logqueue import LogQueue

TO_UPSTREAM = ("host->gateway", "gateway->upstream")
TO_HOST = ("upstream->gateway", "gateway->host")


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in path.read_bytes().splitlines()]


def _call(rid: int, text: str = "hi") -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                       "params": {"name": "echo", "arguments": {"text": text}}}).encode()


def _answer(rid: int) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": rid,
                       "result": {"content": [{"type": "text", "text": "hi"}]}}).encode()


def test_each_frame_gets_a_record_per_leg_written_by_the_log_thread(tmp_path: Path) -> None:
    log = tmp_path / "g.log"
    now = [10.0]
    seen_on: set[str] = set()

    def callback(record: dict[str, Any]) -> None:
        seen_on.add(threading.current_thread().name)

    inspector = Inspector(log, callback=callback, clock=lambda: now[0])
    inspector.record_frame(TO_UPSTREAM, parse_envelope(_call(7)), "demo")
    now[0] += 0.25
    inspector.record_frame(TO_HOST, parse_envelope(_answer(7)), "demo")
    inspector.close()
    records = _lines(log)
    assert [r["dir"] for r in records] == [*TO_UPSTREAM, *TO_HOST]
    assert seen_on == {"mcpsync-gateway-log"}
    request, answer = records[0], records[3]
    assert (request["kind"], request["tool"], request["id"], request["size"]) == \
        ("request", "echo", 7, len(_call(7)))
    assert request["shape"] == {"name": "str", "arguments": {"text": "str"}}
    assert (answer["kind"], answer["outcome"], answer["tool"]) == ("response", "ok", "echo")
    assert answer["latency_ms"] == 250.0 and records[2]["latency_ms"] == 250.0
    # The second leg's line is the first's with the direction changed, nothing else.
    assert {k: v for k, v in records[1].items() if k != "dir"} == \
        {k: v for k, v in records[0].items() if k != "dir"}


def test_frames_queued_without_a_kick_are_written_soon_and_close_writes_the_rest(
        tmp_path: Path) -> None:
    log = tmp_path / "g.log"
    inspector = Inspector(log)
    inspector.record_frame(TO_UPSTREAM, parse_envelope(_call(1)), "demo")
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and not log.read_bytes():
        time.sleep(0.02)
    assert len(_lines(log)) == 2, "the log thread wakes for a frame"
    for rid in range(2, 500):
        inspector.record_frame(TO_UPSTREAM, parse_envelope(_call(rid)), "demo")
    inspector.close()
    assert [r["id"] for r in _lines(log)] == [rid for rid in range(1, 500) for _ in (0, 1)]
    assert not any(t.name == "mcpsync-gateway-log" for t in threading.enumerate())
    inspector.record_frame(TO_UPSTREAM, parse_envelope(_call(999)), "demo")   # closed: ignored
    assert len(_lines(log)) == 998


def test_a_full_queue_drops_and_counts_and_inspect_reports_it(tmp_path: Path) -> None:
    log = tmp_path / "g.log"
    inspector = Inspector(log)
    release = threading.Event()
    real_drain = inspector._drain

    def slow_drain(batch: list[Any], dropped: int) -> None:
        release.wait(10)
        real_drain(batch, dropped)

    inspector._queue = LogQueue(slow_drain, limit=8)
    for rid in range(1, 31):
        inspector.record_frame(TO_UPSTREAM, parse_envelope(_call(rid)), "demo")
        time.sleep(0.001)
    release.set()
    inspector.close()
    records = _lines(log)
    dropped = [r for r in records if r["kind"] == "dropped"]
    logged = [r for r in records if r["kind"] == "request"]
    lost = sum(r["count"] for r in dropped)
    assert dropped and lost > 0 and all(r["dir"] is None for r in dropped)
    assert len(logged) // 2 + lost == 30, "every frame is logged or counted"
    assert summarize([str(log)])["dropped_frames"] == lost


def test_a_bad_frame_is_skipped_and_the_next_ones_still_logged(tmp_path: Path) -> None:
    log = tmp_path / "g.log"
    inspector = Inspector(log)
    inspector.record_frame(("sideways",), parse_envelope(_call(1)), "demo")
    inspector.record_frame(TO_UPSTREAM, parse_envelope(_call(2)), "demo")
    inspector.close()
    assert [(r["dir"], r["id"]) for r in _lines(log)] == [(TO_UPSTREAM[0], 2),
                                                          (TO_UPSTREAM[1], 2)]
