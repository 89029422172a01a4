"""``benchmarks/gateway_latency.py`` as a smoke test: a few calls down every path (direct,
the floor proxy, the gateway, the gateway with its log; the checking floor beside them), so
the benchmark keeps working as the gateway changes. The figures are not judged here (a
shared machine's timing is noise); that every path answered, in both modes, and that the
log held one record per leg is."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "gateway_latency.py"


def test_the_gateway_benchmark_runs_every_path() -> None:
    done = subprocess.run([sys.executable, str(BENCH), "--calls", "16", "--rounds", "1",
                           "--warmup", "4", "--json"],
                          capture_output=True, text=True, timeout=110, check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert list(result["medians"]) == ["direct", "floor", "gateway", "gateway+log"]
    for path, row in result["medians"].items():
        assert all(row[f] > 0 for f in ("seq_median", "seq_mean", "conc_median",
                                        "conc_wall", "seq_cpu", "conc_cpu")), (path, row)
    assert set(result["added_us"]) == {"floor", "gateway", "gateway+log"}
    # 4 + 16 + 16 echo calls, four legs each; the handshake adds a few records more.
    calls = 4 + 16 + 16
    assert calls * 4 <= result["log_lines"] <= calls * 4 + 12, result["log_lines"]


def test_pinned_every_spawned_process_runs_on_the_one_cpu() -> None:
    cpu = max(os.sched_getaffinity(0))
    done = subprocess.run([sys.executable, str(BENCH), "--calls", "8", "--rounds", "1",
                           "--warmup", "2", "--json", "--pin", str(cpu)],
                          capture_output=True, text=True, timeout=110, check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["pinned_cpu"] == cpu
    assert {path: rows[0]["cpus"] for path, rows in result["rounds_raw"].items()} == {
        path: [cpu] for path in ("direct", "floor", "gateway", "gateway+log")}


def test_a_baseline_version_is_measured_in_the_same_rounds(tmp_path: Path) -> None:
    # A copy of this package that leaves a mark when imported: the baseline paths must run
    # the copy, not the package the benchmark itself imports.
    base = tmp_path / "base"
    shutil.copytree(BENCH.parents[1] / "mcpsync", base / "mcpsync",
                    ignore=shutil.ignore_patterns("__pycache__"))
    init = base / "mcpsync" / "__init__.py"
    init.write_text(init.read_text() + "\n__import__('pathlib').Path(__file__)"
                    ".with_name('imported').touch()\n")
    done = subprocess.run([sys.executable, str(BENCH), "--calls", "8", "--rounds", "1",
                           "--warmup", "2", "--json", "--baseline", str(base)],
                          capture_output=True, text=True, timeout=110, check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert list(result["medians"]) == ["direct", "floor", "gateway", "gateway+log",
                                       "gateway@base", "gateway+log@base"]
    assert result["medians"]["gateway@base"]["seq_median"] > 0
    assert set(result["x_floor"]) == {"gateway", "gateway+log", "gateway@base",
                                      "gateway+log@base"}
    assert (base / "mcpsync" / "imported").exists()


CHECK_FLOOR = BENCH.with_name("gateway_check_floor.py")


def test_the_checking_floor_is_measured_beside_the_floor_and_the_gateway() -> None:
    done = subprocess.run([sys.executable, str(BENCH), "--calls", "16", "--rounds", "1",
                           "--warmup", "4", "--json", "--check-floor"],
                          capture_output=True, text=True, timeout=110, check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert list(result["medians"]) == ["direct", "floor", "floor+check", "gateway",
                                       "gateway+log"]
    assert result["medians"]["floor+check"]["seq_median"] > 0
    assert set(result["x_floor"]) == {"floor+check", "gateway", "gateway+log"}
    assert set(result["x_check_floor"]) == {"gateway", "gateway+log"}


def test_the_checking_floor_answers_a_broken_line_and_joins_a_split_one() -> None:
    """What makes it a checking proxy and not a copy: a host line that is not JSON is
    answered by the proxy itself (its own message: the demo server answers such a line too,
    with another), and a line that arrives in two reads is checked whole, not refused as two
    broken halves; a line with a carriage return and blanks around it passes, as through the
    gateway."""
    server = [sys.executable, "-m", "mcpsync.demo"]
    proxy = subprocess.Popen([sys.executable, str(CHECK_FLOOR), "--", *server],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proxy.stdin is not None and proxy.stdout is not None
    try:
        proxy.stdin.write(b"this is not json\n")
        proxy.stdin.flush()
        error = json.loads(proxy.stdout.readline())
        assert error == {"jsonrpc": "2.0", "id": None, "error": {
            "code": -32700, "message": "not a JSON object"}}
        init = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"}}}).encode()
        proxy.stdin.write(init[:25])
        proxy.stdin.flush()
        time.sleep(0.05)   # a read of its own for each half
        proxy.stdin.write(init[25:] + b"\n")
        proxy.stdin.flush()
        answer = json.loads(proxy.stdout.readline())
        assert answer["id"] == 7 and "protocolVersion" in answer["result"]
        proxy.stdin.write(b' {"jsonrpc": "2.0", "id": 8, "method": "ping"}\r\n')
        proxy.stdin.flush()
        assert json.loads(proxy.stdout.readline()) == {"jsonrpc": "2.0", "id": 8, "result": {}}
        proxy.stdin.close()
        assert proxy.wait(timeout=20) == 0
    finally:
        if proxy.poll() is None:
            proxy.kill()   # the demo behind it ends at its stdin's EOF
            proxy.wait()
        proxy.stdin.close()
        proxy.stdout.close()


CRITICAL = BENCH.with_name("gateway_critical.py")


def test_the_critical_path_benchmark_times_both_loops_of_this_tree_and_a_baseline(
        tmp_path: Path) -> None:
    """``benchmarks/gateway_critical.py``: every sequential call gives one sample per loop
    (its timers were placed in both loops of both copies), and the times are plausible."""
    base = tmp_path / "base"
    shutil.copytree(BENCH.parents[1] / "mcpsync", base / "mcpsync",
                    ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run([sys.executable, str(CRITICAL), "--calls", "20", "--rounds", "1",
                           "--warmup", "5", "--json", "--baseline", str(base)],
                          capture_output=True, text=True, timeout=110, check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert list(result) == ["gateway", "gateway@base"]
    for path, loops in result.items():
        assert set(loops) == {"_host_loop", "_upstream_loop"}, path
        for loop, row in loops.items():
            # 20 calls after the warm-up; the handshake's frames add one or two
            assert 20 <= row["samples"] <= 24, (path, loop, row)
            assert 0 < row["p10"] <= row["median"] <= row["p90"] < 100_000, (path, loop, row)


def test_the_critical_path_benchmark_refuses_a_version_it_cannot_time(tmp_path: Path) -> None:
    base = tmp_path / "base"
    shutil.copytree(BENCH.parents[1] / "mcpsync", base / "mcpsync",
                    ignore=shutil.ignore_patterns("__pycache__"))
    loops = base / "mcpsync" / "gateway" / "_gateway.py"
    loops.write_text(loops.read_text().replace("ready = poll()", "ready = poll( )"))
    done = subprocess.run([sys.executable, str(CRITICAL), "--calls", "5", "--rounds", "1",
                           "--baseline", str(base)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert "cannot be measured this way" in done.stderr


RECORDS = BENCH.with_name("gateway_log_records.py")


def test_the_log_records_benchmark_times_this_tree_and_a_baseline(tmp_path: Path) -> None:
    """``benchmarks/gateway_log_records.py``: a figure per run for each version, the
    baseline's from the copy (it leaves a mark when imported)."""
    base = tmp_path / "base"
    shutil.copytree(BENCH.parents[1] / "mcpsync", base / "mcpsync",
                    ignore=shutil.ignore_patterns("__pycache__"))
    init = base / "mcpsync" / "__init__.py"
    init.write_text(init.read_text() + "\n__import__('pathlib').Path(__file__)"
                    ".with_name('imported').touch()\n")
    done = subprocess.run([sys.executable, str(RECORDS), "--runs", "2", "--batches", "1",
                           "--json", "--baseline", str(base)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert list(result) == ["this tree", "baseline"]
    assert all(len(runs) == 2 and all(0 < us < 10_000 for us in runs)
               for runs in result.values()), result
    assert (base / "mcpsync" / "imported").exists()
