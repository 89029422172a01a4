"""``benchmarks/long_lines.py`` as a smoke test: a quick round against this tree as its own
baseline, so that the script keeps working as the decoder changes. The figures are not
judged (a shared machine's timing is noise); that every answer was decoded and timed in
both processes is."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks" / "long_lines.py"


def test_the_long_lines_benchmark_runs() -> None:
    done = subprocess.run([sys.executable, str(BENCH), "--quick", "--rounds", "1",
                           "--baseline", str(ROOT)],
                          capture_output=True, text=True, timeout=100, check=False)
    assert done.returncode == 0, done.stderr
    rows = done.stdout.splitlines()[1:]
    assert len(rows) == 6, done.stdout
    for row in rows:
        figures = [float(x) for x in row.split()[-2:]]
        assert all(f > 0 for f in figures), row
