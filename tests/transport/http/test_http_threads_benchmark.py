"""``benchmarks/http_threads.py`` as a smoke test: both clients (mcpsync and the plain
``requests`` floor) run their threads against a real loopback server, every call gets its
own echo back, and the figures come out sane. The figures are not judged (a shared machine's
timing is noise); that no connection was opened after the warm-up is, since the pool is as
large as the thread count."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from http_peers.fault_server import FaultServer

pytestmark = pytest.mark.timeout(120)

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "http_threads.py"


def test_the_http_threads_benchmark_runs_both_clients(fault_server: FaultServer) -> None:
    threads, calls = 8, 6
    done = subprocess.run([sys.executable, str(BENCH), "--url", fault_server.url,
                           "--server-pid", str(os.getpid()), "--threads", str(threads),
                           "--calls", str(calls), "--runs", "2", "--json"],
                          capture_output=True, text=True, timeout=110, check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert list(result["medians"]) == ["floor", "mcpsync"]
    assert result["errors"] == {"floor": 0, "mcpsync": 0}
    for client, rows in result["rows"].items():
        assert len(rows) == 2, client
        for row in rows:
            assert row["calls"] == threads * calls, (client, row)
            assert row["calls_s"] > 0 and row["client_cpu_us"] > 0, (client, row)
            assert row["server_cpu_us"] >= 0, (client, row)
            assert row["new_connections"] == row["new_stream_connections"] == 0, (client, row)
            assert 1 <= row["warmup_connections"] <= threads + 1, (client, row)
    assert result["rows"]["mcpsync"][0]["protocol_version"].startswith("2025-")
    assert result["mcpsync_x_floor_cpu"] > 0
    # Context switches, split by the kind of thread: the callers block on every call (a
    # read, or the wait for an answer); mcpsync's POSTs run on its HTTP workers.
    for client, rows in result["rows"].items():
        for row in rows:
            assert row["voluntary_switches"] > 0, (client, row)
            assert row["voluntary_by_kind"]["callers"] > 0, (client, row)
    assert all(row["voluntary_by_kind"]["workers"] > 0 for row in result["rows"]["mcpsync"])
    assert all("workers" not in row["voluntary_by_kind"] for row in result["rows"]["floor"])
    # One ratio per round, each from runs of the same round.
    ratios = result["mcpsync_round_ratios"]
    assert len(ratios) == 2 and all(r > 0 for r in ratios)
    rows = result["rows"]
    assert ratios == [m["client_cpu_us"] / f["client_cpu_us"]
                      for m, f in zip(rows["mcpsync"], rows["floor"], strict=True)]
    # Every timed call reached the server: the benchmark measured real traffic.
    echoed = [r for r in fault_server.requests if r.rpc_method == "tools/call"]
    assert len(echoed) >= 2 * 2 * threads * calls


def test_an_unknown_client_is_refused_with_the_choices() -> None:
    done = subprocess.run([sys.executable, str(BENCH), "--url", "http://127.0.0.1:9/mcp",
                           "--clients", "floor,nope"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 2
    assert "unknown client 'nope'" in done.stderr and "floor, mcpsync" in done.stderr
