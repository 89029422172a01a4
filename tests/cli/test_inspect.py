"""``mcpsync inspect``: exact counts and percentiles from a generated, rotated log with a
truncated last line, in-process and as a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mcpsync.cli._inspect import summarize
from mcpsync.gateway._inspector import Inspector

PY = sys.executable


def _generate(log: Path) -> list[Path]:
    """A session through a gateway: both legs logged, latencies from a fake clock."""
    now = [0.0]
    inspector = Inspector(log, max_bytes=4096, backups=20, clock=lambda: now[0])
    rid = 0

    def call(upstream: str, tool: str, ms: float, answer: dict[str, Any],
             forwarded: bool = True) -> None:
        nonlocal rid
        rid += 1
        request = {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                   "params": {"name": f"{upstream}__{tool}", "arguments": {}}}
        inspector.record("host->gateway", request, upstream=upstream, size=80)
        if forwarded:
            inner = {**request, "id": 900 + rid, "params": {"name": tool, "arguments": {}}}
            inspector.record("gateway->upstream", inner, upstream=upstream, size=70)
        now[0] += ms / 1000.0
        if forwarded:
            inspector.record("upstream->gateway", {"jsonrpc": "2.0", "id": 900 + rid,
                                                   **answer}, upstream=upstream, size=50)
        inspector.record("gateway->host", {"jsonrpc": "2.0", "id": rid, **answer},
                         upstream=upstream, size=60)

    ok = {"result": {"content": []}}
    for ms in range(1, 11):                       # calc__add: 10 calls, 1..10 ms
        call("calc", "add", float(ms), ok)
    call("files", "read", 5.0, {"error": {"code": -32602, "message": "no path"}})
    call("files", "read", 7.0, {"result": {"isError": True, "content": []}})
    call("files", "read", 3.0, ok)
    for code in (-32010, -32010, -32011, -32012):  # refused by the gateway, never forwarded
        call("files", "delete", 0.0, {"error": {"code": code, "message": "no"}},
             forwarded=False)
    inspector.record("host->gateway", {"jsonrpc": "2.0", "id": 99, "method": "tools/list"})
    inspector.record("gateway->host", {"jsonrpc": "2.0", "id": 99,
                                       "error": {"code": -32603, "message": "boom"}})
    inspector.close()
    with open(log, "ab") as f:                    # a crash cut the last line short
        f.write(b'{"time":"2026-01-01T00:00:00Z","dir":"host->gat')
    return sorted(log.parent.glob(log.name + "*"))


EXPECTED_TOOLS = [
    {"upstream": "calc", "tool": "calc__add", "calls": 10, "ok": 10, "tool_errors": 0,
     "errors": 0, "refused": 0, "latency_ms": {"p50": 5.0, "p90": 9.0, "p99": 10.0}},
    {"upstream": "files", "tool": "files__delete", "calls": 4, "ok": 0, "tool_errors": 0,
     "errors": 0, "refused": 4, "latency_ms": {"p50": 0.0, "p90": 0.0, "p99": 0.0}},
    {"upstream": "files", "tool": "files__read", "calls": 3, "ok": 1, "tool_errors": 1,
     "errors": 1, "refused": 0, "latency_ms": {"p50": 5.0, "p90": 7.0, "p99": 7.0}},
]


def test_the_summary_counts_exactly(tmp_path: Path) -> None:
    files = _generate(tmp_path / "gateway.log")
    assert len(files) > 2, "the log should have rotated"
    summary = summarize([str(f) for f in files])
    assert summary["records"] == 10 * 4 + 3 * 4 + 4 * 2 + 2
    assert len(summary["skipped_lines"]) == 1
    assert summary["skipped_lines"][0].startswith(str(tmp_path / "gateway.log") + ":")
    assert summary["vantage"] == "host"
    assert summary["tools"] == EXPECTED_TOOLS
    assert summary["errors"] == {"-32602": 1, "-32603": 1}
    assert summary["refusals"] == {"approval": 1, "budget": 1, "policy": 2}
    assert summary["requests"] == {"tools/call": 17, "tools/list": 1}


def test_the_upstream_view_when_the_host_leg_is_not_logged(tmp_path: Path) -> None:
    files = _generate(tmp_path / "g.log")
    kept = tmp_path / "upstream-only.log"
    with open(kept, "w") as out:
        for path in files:
            for line in path.read_text().splitlines():
                if '"dir":"gateway->upstream"' in line or '"dir":"upstream->gateway"' in line:
                    out.write(line + "\n")
    summary = summarize([str(kept)])
    assert summary["vantage"] == "upstream"
    assert [(t["upstream"], t["tool"], t["calls"], t["ok"]) for t in summary["tools"]] == \
        [("calc", "add", 10, 10), ("files", "read", 3, 1)]
    assert summary["refusals"] == {}


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-m", "mcpsync", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=60, check=False)


def test_the_command_end_to_end(tmp_path: Path) -> None:
    files = [f.name for f in _generate(tmp_path / "gateway.log")]
    res = _run("inspect", *files, "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["tools"] == EXPECTED_TOOLS and doc["files"] == files
    res = _run("inspect", *files, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith("62 records in ")
    assert "skipped 1 unreadable line (first at gateway.log:" in lines[1]
    rows = [line.split() for line in lines]
    assert ["calc", "calc__add", "10", "10", "0", "0", "0", "5.00", "9.00", "10.00"] in rows
    assert ["files", "files__read", "3", "1", "1", "1", "0", "5.00", "7.00", "7.00"] in rows
    assert ["policy", "-32010", "2"] in rows and ["-32602", "1"] in rows
    assert res.stderr == ""


@pytest.mark.parametrize("args", [["inspect", "missing.log"], ["inspect"]])
def test_a_missing_file_is_a_usage_error(tmp_path: Path, args: list[str]) -> None:
    res = _run(*args, cwd=tmp_path)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.startswith("mcpsync: error: ") and len(res.stderr.splitlines()) == 1
    if len(args) > 1:
        assert "'missing.log' does not exist" in res.stderr
