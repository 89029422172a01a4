"""``benchmarks/seq1cpu_verdict.py``: which ``seq-1cpu`` invocations count and meet the
pinned sequential targets. ``data/seq1cpu_harness.txt`` is the cross-SDK harness's own
output, cut down to what the script reads: four invocations of 2026-12-06 and 2026-12-07,
each labelled by the line the project's measuring scripts write before it, two with a
per-run row (not a summary row), and the summary's rows."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "seq1cpu_verdict.py"

# Loaded from its file, so that benchmarks/ is not put on sys.path for the other tests.
_spec = importlib.util.spec_from_file_location("seq1cpu_verdict", SCRIPT)
assert _spec is not None and _spec.loader is not None
verdict = importlib.util.module_from_spec(_spec)
sys.modules["seq1cpu_verdict"] = verdict   # dataclasses look their module up by name
_spec.loader.exec_module(verdict)

#: The harness's output, cut down (see the module's docstring).
OUTPUT = (Path(__file__).parent / "data" / "seq1cpu_harness.txt").read_text(encoding="utf-8")


def test_each_invocation_is_read_with_its_label_and_summary_rows_only() -> None:
    invocations = verdict.parse(OUTPUT)
    assert [inv.label for inv in invocations] == ["21:11:51", "22:25:11", "00:01:15", "00:04:11"]
    first = invocations[0].rows
    assert set(first) == {"floor", "official-mcp", "mcpsync", "mcpsync@base"}
    assert first["floor"].us == 23.1 and first["floor"].spread == 8.0   # not the run's row
    assert first["mcpsync"].x_floor == 1.22 and first["mcpsync"].cpu_us == 14.7
    assert set(invocations[2].rows) == {"floor", "mcpsync"}
    assert invocations[2].rows["floor"].fastest == 20.0


def test_a_slow_floor_median_is_not_counted_and_the_targets_are_judged() -> None:
    verdicts = verdict.judge(verdict.parse(OUTPUT), "mcpsync", steady=10.0)
    by_label = {v.label: v for v in verdicts}
    # 14.7 / 9.2 = 1.598: within 1.6x, and 1.22x within 1.3x.
    assert by_label["21:11:51"].counted and by_label["21:11:51"].met
    assert by_label["21:11:51"].cpu_x_floor == pytest.approx(14.7 / 9.2)
    # Both ratios under the targets, but the floor's median run (28.0 us) 40 % over its
    # fastest (20.0): a slow run as the median, not counted.
    assert not by_label["00:01:15"].counted and not by_label["00:01:15"].met
    assert by_label["00:01:15"].floor_slowdown == pytest.approx(40.0)
    # The floor's runs 32 % apart, but its median (25.2) 1 % over its fastest (25.0): counted,
    # and 1.26x with 16.2 / 10.2 = 1.588x meets both; the strict rule does not count it.
    assert by_label["22:25:11"].counted and by_label["22:25:11"].met
    strict = {v.label: v for v in verdict.judge(verdict.parse(OUTPUT), "mcpsync", steady=10.0,
                                                strict=True)}
    assert not strict["22:25:11"].counted and strict["21:11:51"].counted
    # A steady floor, 1.44x and 16.1 / 8.4 = 1.92x: counted, not met.
    assert by_label["00:04:11"].counted and not by_label["00:04:11"].met
    # With a looser rule the unsteady one counts, and its figures meet the targets.
    loose = {v.label: v for v in verdict.judge(verdict.parse(OUTPUT), "mcpsync", steady=50)}
    assert loose["00:01:15"].counted and loose["00:01:15"].met


def test_the_command_prints_the_table_and_the_count(tmp_path: Path) -> None:
    out = tmp_path / "harness.txt"
    out.write_text(OUTPUT, encoding="utf-8")
    done = subprocess.run([sys.executable, str(SCRIPT), str(out)], capture_output=True,
                          text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    assert "not counted (slow floor)" in done.stdout
    assert done.stdout.splitlines()[-1].startswith(
        "mcpsync: 2 of 3 counted invocations met both targets (the floor's median at most "
        "10% over its fastest run)")
    strict = subprocess.run([sys.executable, str(SCRIPT), str(out), "--strict"],
                            capture_output=True, text=True, timeout=30, check=False)
    assert strict.stdout.splitlines()[-1].startswith(
        "mcpsync: 1 of 2 counted invocations met both targets (the floor's spread at most 10%)")
    base = subprocess.run([sys.executable, str(SCRIPT), str(out), "--client", "mcpsync@base"],
                          capture_output=True, text=True, timeout=30, check=False)
    # 21:11:51: 1.23x but 15.0 / 9.2 = 1.63x; 00:04:11: 1.40x; the others have no base column.
    assert base.stdout.splitlines()[-1].startswith(
        "mcpsync@base: 0 of 2 counted invocations met both targets")


def test_a_file_without_the_client_or_unreadable_is_an_error(tmp_path: Path) -> None:
    out = tmp_path / "harness.txt"
    out.write_text(OUTPUT, encoding="utf-8")
    done = subprocess.run([sys.executable, str(SCRIPT), str(out), "--client", "nobody"],
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 1 and "'nobody'" in done.stderr
    missing = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "absent.txt")],
                             capture_output=True, text=True, timeout=30, check=False)
    assert missing.returncode == 2 and "absent.txt" in missing.stderr
