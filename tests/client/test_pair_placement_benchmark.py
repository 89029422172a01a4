"""``benchmarks/pair_placement.py`` as a smoke test: a run or two of each client, so that the
benchmark keeps working. The timings are not judged (a shared machine's timing is noise);
that each run names both processes' code addresses, that the script's reading of how they
lie agrees with the addresses, and that ``--fixed-layout`` moves the server's code are."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(not sys.platform.startswith("linux"),
                       reason="the benchmark reads /proc/PID/maps and pins with "
                              "sched_setaffinity (Linux)"),
]

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "pair_placement.py"


def _run(*args: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, str(BENCH), "--json", *args],
                          capture_output=True, text=True, timeout=110, check=False)
    if "--fixed-layout" in args and "refused" in done.stderr and not os.environ.get("CI"):
        pytest.skip(f"this sandbox refuses personality(): {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _check_runs(result: dict[str, Any], runs: int) -> list[tuple[int, int]]:
    assert len(result["runs"]) == runs
    assert sum(group["runs"] for group in result["groups"].values()) == runs
    addresses = []
    for run in result["runs"]:
        client, server = int(run["client_code"], 16), int(run["server_code"], 16)
        assert client > 0 and server > 0
        assert run["us_per_call"] > 0 and run["cpu_us_per_call"] > 0
        bit = run["lowest_different_bit"]
        differ = client ^ server
        if bit is None:
            assert differ == 0
        else:
            assert (differ >> bit) & 1 and differ & ((1 << bit) - 1) == 0, run
        assert run["slow_mark"] == (bit is not None and 24 <= bit <= 30)
        addresses.append((client, server))
    return addresses


def test_mcpsync_runs_name_both_code_addresses() -> None:
    result = _run("--runs", "2", "--calls", "50")
    assert result["client"] == "mcpsync" and result["fixed_layout_mib"] is None
    _check_runs(result, 2)


def test_the_floor_loop_runs() -> None:
    _check_runs(_run("--runs", "1", "--calls", "50", "--client", "floor"), 1)


def test_a_fixed_layout_moves_the_server_code_down() -> None:
    """Without randomisation both processes map the interpreter's code at one address,
    unless the server's stack limit widens the gap the kernel leaves below its stack (the
    client's own limit is set to 8 MiB, whatever this process's is)."""
    result = _run("--runs", "1", "--calls", "20", "--fixed-layout", "8")
    [(client, server)] = _check_runs(result, 1)
    assert client == server
    assert set(result["groups"]) == {"equal"}
    [(client, server)] = _check_runs(
        _run("--runs", "1", "--calls", "20", "--fixed-layout", "200"), 1)
    assert client - server >= 64 << 20     # 72 MiB more gap than the client's 128


def test_the_readable_output_names_each_run_and_group() -> None:
    done = subprocess.run([sys.executable, str(BENCH), "--runs", "2", "--calls", "20"],
                          capture_output=True, text=True, timeout=110, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[:2]] == ["run   1", "run   2"]
    assert "code addresses 0x" in lines[0]
    assert lines[3].startswith("mcpsync, 2 runs on CPU ")
    # each group line: "  <group>  <n> runs: median ..."
    assert sum(int(line.split("runs:")[0].split()[-1]) for line in lines[4:]) == 2


def test_a_cpu_this_process_may_not_use_is_named() -> None:
    cpu = max(os.sched_getaffinity(0)) + 1
    done = subprocess.run([sys.executable, str(BENCH), "--runs", "1", "--cpu", str(cpu)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert f"--cpu {cpu}" in done.stderr


def test_a_missing_echo_server_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.py"
    done = subprocess.run([sys.executable, str(BENCH), "--runs", "1", "--echo", str(missing)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert str(missing) in done.stderr and "--echo" in done.stderr
