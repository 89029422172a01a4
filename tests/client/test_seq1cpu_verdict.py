"""``benchmarks/seq1cpu_verdict.py``: which ``seq-1cpu`` invocations count and meet the
pinned sequential targets. ``data/seq1cpu/`` holds five of the cross-SDK harness's own JSON
results, cut down to the ``seq-1cpu`` figures of the floor and the two mcpsync columns (the
official SDK's left out): each was picked for what it tests, named in the tests below."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "seq1cpu_verdict.py"
DATA = Path(__file__).parent / "data" / "seq1cpu"

# Loaded from its file, so that benchmarks/ is not put on sys.path for the other tests.
_spec = importlib.util.spec_from_file_location("seq1cpu_verdict", SCRIPT)
assert _spec is not None and _spec.loader is not None
verdict = importlib.util.module_from_spec(_spec)
sys.modules["seq1cpu_verdict"] = verdict   # dataclasses look their module up by name
_spec.loader.exec_module(verdict)


def _invocations() -> list[Any]:
    found = [verdict.load(path) for path in sorted(DATA.glob("*.json"))]
    return [inv for inv in found if inv is not None]


def _judged(client: str = "mcpsync", steady: float = 10.0, strict: bool = False
            ) -> dict[str, Any]:
    return {v.label[11:19]: v for v in verdict.judge(_invocations(), client, steady, strict)}


def test_the_figures_are_the_harness_s_own_unrounded() -> None:
    runs = {inv.label: inv for inv in _invocations()}["2026-12-06 21:11:52 UTC"].runs
    assert len(runs) == 3
    # Found by label and by module name alike; us per call as the harness computes it.
    assert runs[0]["mcpsync"] == runs[0]["mcpsync_client"]
    assert runs[0]["floor"][0] == pytest.approx(0.06699445900449064 / 3000 * 1e6)
    assert runs[0]["floor"][1] == pytest.approx(0.026413163000000003 / 3000 * 1e6)


def test_the_cpu_target_is_judged_unrounded() -> None:
    # The harness prints 14.7 and 9.2 us (1.598x, within 1.6x); unrounded 14.685 / 9.164.
    v = _judged()["21:11:52"]
    assert v.counted and v.cpu_x_floor == pytest.approx(1.6025, abs=5e-4)
    assert v.x_floor == pytest.approx(1.223, abs=1e-3) and not v.met


def test_a_slow_floor_median_is_not_counted() -> None:
    # Two of the floor's three runs slow: its median 39.9 % over its fastest. The figures
    # (0.86x, CPU 1.00x) would meet both targets; the invocation is not counted.
    v = _judged()["00:01:16"]
    assert v.floor_slowdown == pytest.approx(39.9, abs=0.1)
    assert not v.counted and not v.met
    assert v.x_floor <= verdict.WALL_TARGET and v.cpu_x_floor <= verdict.CPU_TARGET
    # With the rule loosened past it, it counts, and meets both.
    loose = _judged(steady=50)["00:01:16"]
    assert loose.counted and loose.met


def test_counted_met_and_not_met() -> None:
    judged = _judged()
    # One slow run of the floor's (its slowest 32 % over its fastest), but its median a
    # fast one: counted; 1.261x and 1.592x meet both targets.
    assert judged["22:25:12"].counted and judged["22:25:12"].met
    assert judged["22:25:12"].floor_spread > 30 > judged["22:25:12"].floor_slowdown
    # A steady floor; 1.44x and 1.91x: counted, not met.
    assert judged["00:04:12"].counted and not judged["00:04:12"].met


def test_the_wall_target_alone_can_fail_an_invocation() -> None:
    # 19:38:02: the floor's median 18.9 % over its fastest, so counted only at --steady 20;
    # its CPU ratio (1.592x) is within 1.6x, its wall ratio (1.427x) is not.
    assert not _judged()["19:38:02"].counted
    v = _judged(steady=20)["19:38:02"]
    assert v.counted and v.cpu_x_floor <= verdict.CPU_TARGET
    assert v.x_floor > verdict.WALL_TARGET and not v.met


def test_the_strict_rule_counts_no_more() -> None:
    default, strict = _judged(), _judged(strict=True)
    assert not strict["22:25:12"].counted          # its slowest floor run 32 % over
    assert strict["00:04:12"].counted
    assert all(default[label].counted for label, v in strict.items() if v.counted)


def test_the_command_prints_each_invocation_and_the_count() -> None:
    files = [str(path) for path in sorted(DATA.glob("*.json"), reverse=True)]
    done = subprocess.run([sys.executable, str(SCRIPT), *files], capture_output=True,
                          text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line[:23] for line in lines[1:6]] == [  # in time order, given in reverse
        "2026-12-06 19:38:02 UTC", "2026-12-06 21:11:52 UTC", "2026-12-06 22:25:12 UTC",
        "2026-12-07 00:01:16 UTC", "2026-12-07 00:04:12 UTC"]
    assert lines[-2] == "5 invocations of seq-1cpu read, 5 with the floor and 'mcpsync'"
    assert lines[-1].startswith(
        "mcpsync: 1 of 3 counted invocations met both targets (the floor's median run at "
        "most 10% over its fastest)")
    base = subprocess.run([sys.executable, str(SCRIPT), str(DATA), "--client", "mcpsync@base",
                           "--strict"], capture_output=True, text=True, timeout=30, check=False)
    assert base.stdout.splitlines()[-1].startswith("mcpsync@base: 0 of 2 counted")


def _write(path: Path, results_per_run: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"meta": {"date_utc": "2026-12-07 01:00:00 UTC"}, "runs": [
        {"run": n + 1, "results": {"seq-1cpu": results}}
        for n, results in enumerate(results_per_run)]}), encoding="utf-8")
    return path


def test_failed_and_missing_figures_are_left_out(tmp_path: Path) -> None:
    ok = {"calls": 100, "elapsed_s": 0.002, "cpu_s": 0.001}
    mine = {"calls": 100, "elapsed_s": 0.0025, "cpu_s": 0.0015, "label": "mcpsync"}
    failed = {"error": "spawn failed", "label": "official-mcp"}
    _write(tmp_path / "a.json", [{"floor": ok, "official_sdk": failed, "mcpsync_client": mine}] * 3)
    v = verdict.judge([verdict.load(tmp_path / "a.json")], "mcpsync", 10.0)
    assert len(v) == 1 and v[0].x_floor == pytest.approx(1.25) and v[0].cpu_x_floor == 1.5
    # No CPU figure for the floor: nothing to judge the CPU target against.
    no_cpu = {"calls": 100, "elapsed_s": 0.002, "cpu_s": 0}
    _write(tmp_path / "b.json", [{"floor": no_cpu, "mcpsync_client": mine}] * 3)
    assert verdict.judge([verdict.load(tmp_path / "b.json")], "mcpsync", 10.0) == []
    # Another scenario only: not an invocation of seq-1cpu.
    (tmp_path / "c.json").write_text(json.dumps({"runs": [{"results": {"seq": {}}}]}))
    assert verdict.load(tmp_path / "c.json") is None


def test_bad_input_is_an_error_naming_the_file(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True,
                              text=True, timeout=30, check=False)

    missing = run(str(tmp_path / "absent.json"))
    assert missing.returncode == 2 and "absent.json" in missing.stderr
    (tmp_path / "text.json").write_text("| seq-1cpu | floor |")
    garbage = run(str(tmp_path / "text.json"))
    assert garbage.returncode == 2 and "text.json is not a harness result" in garbage.stderr
    nobody = run(str(DATA), "--client", "nobody")
    assert nobody.returncode == 1 and "'nobody'" in nobody.stderr
    (tmp_path / "odd.json").write_text(json.dumps({"runs": [{"results": []}, 3]}))
    assert run(str(tmp_path / "odd.json")).returncode == 1     # no seq-1cpu in it: no verdict
    assert run(str(DATA), "--steady", "nan").returncode == 2
    assert run(str(DATA), "--steady", "-1").returncode == 2


def test_the_targets_and_their_boundaries() -> None:
    assert (verdict.WALL_TARGET, verdict.CPU_TARGET) == (1.3, 1.6)
    at = verdict.Invocation("t", [{"floor": (10.0, 10.0), "mcpsync": (13.0, 16.0)}] * 3)
    assert verdict.judge([at], "mcpsync", 10.0)[0].met          # 1.3x and 1.6x: within
    wall = verdict.Invocation("t", [{"floor": (10.0, 10.0), "mcpsync": (13.25, 16.0)}] * 3)
    assert not verdict.judge([wall], "mcpsync", 10.0)[0].met
    cpu = verdict.Invocation("t", [{"floor": (10.0, 10.0), "mcpsync": (13.0, 16.25)}] * 3)
    assert not verdict.judge([cpu], "mcpsync", 10.0)[0].met


def test_a_floor_median_exactly_at_the_limit_counts() -> None:
    runs = [{"floor": (f, 4.0), "mcpsync": (f, 4.0)} for f in (8.0, 8.8, 9.6)]
    assert verdict.judge([verdict.Invocation("t", runs)], "mcpsync", 10.0)[0].counted
    runs[1] = {"floor": (8.875, 4.0), "mcpsync": (8.875, 4.0)}
    assert not verdict.judge([verdict.Invocation("t", runs)], "mcpsync", 10.0)[0].counted


def test_a_run_without_the_floor_gives_no_ratio_but_keeps_the_client_s_cpu() -> None:
    # As the harness's summary: a run's ratio needs both figures; each median takes the
    # runs that have that figure.
    runs = [{"floor": (10.0, 4.0), "mcpsync": (12.0, 6.0)},
            {"floor": (None, None), "mcpsync": (40.0, 20.0)},
            {"floor": (10.0, 4.0), "mcpsync": (14.0, 7.0)}]
    v = verdict.judge([verdict.Invocation("t", runs)], "mcpsync", 10.0)[0]
    assert v.x_floor == pytest.approx(1.3)      # the median of 1.2 and 1.4
    assert v.cpu_x_floor == 7.0 / 4.0           # the client's CPU median over all three


def test_strict_counts_no_more_when_two_floor_runs_are_equally_slow() -> None:
    inv = verdict.Invocation("t", [{"floor": (f, 4.0), "mcpsync": (f, 4.0)}
                                   for f in (10.0, 11.0625, 11.0625)])
    # The median 10.6 % over the fastest (a spread taken over the median would be 9.6 %).
    assert not verdict.judge([inv], "mcpsync", 10.0)[0].counted
    assert not verdict.judge([inv], "mcpsync", 10.0, strict=True)[0].counted


def test_the_client_s_slow_runs_are_counted_and_shown(tmp_path: Path) -> None:
    # The client's runs at 25, 42.5 (1.7 times its fastest: the slow code layout) and 35
    # (exactly SLOW_RUN times) us per call; the floor steady.
    floor = {"calls": 100, "elapsed_s": 0.002, "cpu_s": 0.001}
    runs = [{"floor": floor, "mcpsync_client": {"calls": 100, "elapsed_s": elapsed,
                                                "cpu_s": 0.0015, "label": "mcpsync"}}
            for elapsed in (0.0025, 0.00425, 0.0035)]
    path = _write(tmp_path / "slow.json", runs)
    [v] = verdict.judge([verdict.load(path)], "mcpsync", 10.0)
    assert (v.slow_runs, v.runs) == (2, 3)
    done = subprocess.run([sys.executable, str(SCRIPT), str(path)], capture_output=True,
                          text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    header, row = done.stdout.splitlines()[:2]
    assert "slow runs" in header and " 2 of 3  not met" in row
