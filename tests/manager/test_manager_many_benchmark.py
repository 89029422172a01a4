"""``benchmarks/manager_many.py`` as a smoke test: a few servers, one round, so that the
benchmark keeps working as the Manager changes. The figures are not judged (a shared
machine's timing is noise); that both clients started and closed every server and printed
positive times is."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "manager_many.py"

# What the benchmark expects in --server-dir: a stdlib-only stdio server that answers
# initialize and tools/list and exits at stdin EOF.
ECHO = r'''
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    if msg["method"] == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"],
                  "capabilities": {"tools": {}}, "serverInfo": {"name": "echo", "version": "1"}}
    else:
        result = {"tools": []}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}) + "\n")
    sys.stdout.flush()
'''


def test_the_many_servers_benchmark_runs(tmp_path: Path) -> None:
    (tmp_path / "echo_server.py").write_text(ECHO, encoding="utf-8")
    done = subprocess.run([sys.executable, str(BENCH), "--servers", "3", "--rounds", "1",
                           "--server-dir", str(tmp_path), "--json"],
                          capture_output=True, text=True, timeout=110, check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["servers"] == 3
    assert set(result["medians"]) == {"floor", "mcpsync"}
    for label, row in result["medians"].items():
        assert set(row) == {"start_ms", "start_cpu_ms", "close_ms", "close_cpu_ms"}
        assert row["start_ms"] > 0 and row["close_ms"] > 0, (label, row)


def test_a_missing_server_dir_is_named(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(BENCH), "--servers", "1", "--rounds", "1",
                           "--server-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert str(tmp_path) in done.stderr and "--server-dir" in done.stderr


def test_the_benchmark_times_a_baseline_in_the_same_rounds(tmp_path: Path) -> None:
    """``--baseline DIR``: another copy of the package, timed as ``mcpsync@base`` in worker
    processes beside this tree's (here a copy of this very tree, so only the plumbing is
    checked: both workers ran, each importing its own copy)."""
    (tmp_path / "echo_server.py").write_text(ECHO, encoding="utf-8")
    base = tmp_path / "base"
    shutil.copytree(BENCH.parents[1] / "mcpsync", base / "mcpsync",
                    ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run([sys.executable, str(BENCH), "--servers", "2", "--rounds", "2",
                           "--server-dir", str(tmp_path), "--baseline", str(base), "--json"],
                          capture_output=True, text=True, timeout=110, check=False)
    assert done.returncode == 0, done.stderr
    assert f"mcpsync@base: {base / 'mcpsync'}" in done.stderr
    result = json.loads(done.stdout)
    assert set(result["medians"]) == {"floor", "mcpsync", "mcpsync@base"}
    for label, row in result["medians"].items():
        assert row["start_ms"] > 0 and row["close_ms"] > 0, (label, row)


def test_a_baseline_without_a_package_is_refused(tmp_path: Path) -> None:
    (tmp_path / "echo_server.py").write_text(ECHO, encoding="utf-8")
    done = subprocess.run([sys.executable, str(BENCH), "--servers", "1", "--rounds", "1",
                           "--server-dir", str(tmp_path), "--baseline", str(tmp_path)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert "no mcpsync package" in done.stderr
