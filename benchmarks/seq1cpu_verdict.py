"""Which ``seq-1cpu`` invocations of the cross-SDK harness meet the pinned sequential
targets, counting only those whose floor's median run was not a slow one.

The targets: in an invocation (``RUNS=3``) a client's median ratio to the raw-pipe floor
(the harness's "x floor" column: the median over the runs of each run's client time over
the floor's time in that run) is at most 1.3, and its median CPU per call at most 1.6 times
the floor's median CPU per call.

On the benchmark VM about one run in eight, the floor's as mcpsync's, runs 1.5 to 1.8
times slower: the one whose client and server map the interpreter's code at addresses
equal modulo 16 MiB but not equal (see ``benchmarks/pair_placement.py``). When two of the
floor's three runs do, its median is a slow run: the CPU ratio, taken against that
median, is understated, and so is the wall ratio of every run in which the floor was slow
and the client was not. So an invocation is counted only when the floor's median run
lies within ``--steady`` per cent (10 by default) of its fastest run. A slow run of the
client's is not excused: its figures stand as measured. ``--strict`` asks for all three
of the floor's runs within that of its fastest, which counts no more invocations than the
default. The "slow runs" column counts the judged client's runs at ``SLOW_RUN`` (1.4) times
its fastest of the invocation or slower: two of three mean its median is a slow layout's.
See docs/performance.md, "`seq-1cpu` on a second day" and "Two Python processes on one
CPU".

It reads the JSON file the harness writes for each invocation (``$BENCH_OUT/<stamp>.json``,
``bench-results/`` by default), unrounded; a directory stands for every ``*.json`` in it::

    python benchmarks/seq1cpu_verdict.py bench-results [--steady 10] [--strict]
        [--client mcpsync]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The targets: the wall-time ratio and the CPU ratio to the floor.
WALL_TARGET = 1.3
CPU_TARGET = 1.6
#: A client's run this many times its fastest run of the invocation, or slower, is shown
#: as a slow one: the slow code layout makes a run 1.5 to 1.8 times slower, and runs of one
#: layout lie within about 1.3 times of each other.
SLOW_RUN = 1.4
SCENARIO = "seq-1cpu"
FLOOR = "floor"


#: One run's figures per client (by label and by module name): microseconds per call of
#: wall time and of CPU time, each ``None`` where the harness has none.
Run = dict[str, tuple[float | None, float | None]]


@dataclass
class Invocation:
    label: str        # the harness's start time, "YYYY-MM-DD HH:MM:SS UTC"
    runs: list[Run]


def _per_call(result: Any, key: str) -> float | None:
    """Microseconds per call of ``elapsed_s`` or ``cpu_s``, as the harness computes them;
    ``None`` for a failed or empty result."""
    if not isinstance(result, dict) or "error" in result or not result.get("calls"):
        return None
    value = result.get(key)
    if not isinstance(value, (int, float)):
        return None
    return float(value) / float(result["calls"]) * 1e6


def load(path: Path) -> Invocation | None:
    """One invocation's ``seq-1cpu`` figures, or ``None`` when it did not run that scenario."""
    data = json.loads(path.read_text(encoding="utf-8"))
    runs = data.get("runs") if isinstance(data, dict) else None
    if not isinstance(runs, list):
        raise ValueError("no 'runs' list")
    meta = data.get("meta")
    label = str(meta.get("date_utc") or path.stem) if isinstance(meta, dict) else path.stem
    found: list[Run] = []
    for run in runs:
        scenarios = run.get("results") if isinstance(run, dict) else None
        results = scenarios.get(SCENARIO) if isinstance(scenarios, dict) else None
        if not isinstance(results, dict):
            continue
        figures: Run = {}
        for key, result in results.items():
            pair = (_per_call(result, "elapsed_s"), _per_call(result, "cpu_s"))
            figures[key] = pair
            if isinstance(result, dict) and isinstance(result.get("label"), str):
                figures[result["label"]] = pair
        found.append(figures)
    return Invocation(label, found) if found else None


@dataclass
class Verdict:
    label: str
    floor_slowdown: float   # the floor's median run over its fastest, minus one, per cent
    floor_spread: float     # its slowest run over its fastest, minus one, per cent
    x_floor: float          # the median of each run's client time over the floor's
    cpu_x_floor: float      # the client's median CPU per call over the floor's
    counted: bool
    met: bool
    slow_runs: int = 0      # the client's runs at SLOW_RUN times its fastest or slower
    runs: int = 0           # the client's runs with a time


def judge(invocations: list[Invocation], client: str, steady: float,
          strict: bool = False) -> list[Verdict]:
    """Each invocation in which the floor and ``client`` both ran, judged as the harness
    summarises it: runs without a figure are left out of that figure's median."""
    verdicts: list[Verdict] = []
    for inv in invocations:
        floor_us = [us for run in inv.runs if (us := run.get(FLOOR, (None, None))[0])]
        floor_cpu = [cpu for run in inv.runs if (cpu := run.get(FLOOR, (None, None))[1])]
        mine_cpu = [cpu for run in inv.runs
                    if (cpu := run.get(client, (None, None))[1]) is not None]
        ratios = [mine / floor for run in inv.runs
                  if (mine := run.get(client, (None, None))[0]) is not None
                  and (floor := run.get(FLOOR, (None, None))[0])]
        if not (floor_us and floor_cpu and mine_cpu and ratios):
            continue
        fastest, median, slowest = min(floor_us), statistics.median(floor_us), max(floor_us)
        slowdown = (median / fastest - 1) * 100
        spread = (slowest / fastest - 1) * 100
        x_floor = statistics.median(ratios)
        cpu = statistics.median(mine_cpu) / statistics.median(floor_cpu)
        # Compared as times, not as the per cents above: 11 over 10 is then exactly 10 %.
        counted = (slowest if strict else median) <= fastest * (1 + steady / 100)
        mine_us = [us for run in inv.runs if (us := run.get(client, (None, None))[0])]
        slow = sum(us >= min(mine_us) * SLOW_RUN for us in mine_us)
        verdicts.append(Verdict(inv.label, slowdown, spread, x_floor, cpu, counted,
                                counted and x_floor <= WALL_TARGET and cpu <= CPU_TARGET,
                                slow, len(mine_us)))
    return verdicts


def report(verdicts: list[Verdict], client: str, steady: float, strict: bool, read: int) -> str:
    rule = (f"all of the floor's runs at most {steady:g}% over its fastest" if strict
            else f"the floor's median run at most {steady:g}% over its fastest")
    lines = [f"{'invocation':<24} {'floor median':>12} {'floor slowest':>13} {'x floor':>8} "
             f"{'CPU x floor':>11} {'slow runs':>9}  verdict"]
    for v in verdicts:
        verdict = ("met" if v.met else "not met") if v.counted else "not counted (slow floor)"
        slow = f"{v.slow_runs} of {v.runs}"
        lines.append(f"{v.label:<24} {v.floor_slowdown:>+11.1f}% {v.floor_spread:>+12.1f}% "
                     f"{v.x_floor:>8.3f} {v.cpu_x_floor:>11.3f} {slow:>9}  {verdict}")
    lines.append(f"{read} invocations of {SCENARIO} read, {len(verdicts)} with the floor and "
                 f"{client!r}")
    counted = [v for v in verdicts if v.counted]
    if counted:
        lines.append(f"{client}: {sum(v.met for v in counted)} of {len(counted)} counted "
                     f"invocations met both targets ({rule}); medians "
                     f"{statistics.median(v.x_floor for v in counted):.3f}x wall, "
                     f"{statistics.median(v.cpu_x_floor for v in counted):.3f}x CPU")
    else:
        lines.append(f"{client}: no invocation counted ({rule})")
    return "\n".join(lines)


def _steady(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"a per cent of 0 or more, not {text!r}")
    return value


def _files(paths: list[Path]) -> list[Path]:
    found: list[Path] = []
    for path in paths:
        found += sorted(path.glob("*.json")) if path.is_dir() else [path]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", type=Path,
                        help="the harness's JSON files, or directories holding them")
    parser.add_argument("--steady", type=_steady, default=10.0,
                        help="how far, in per cent, the floor's median run may lie over its "
                             "fastest for an invocation to count (default 10)")
    parser.add_argument("--strict", action="store_true",
                        help="count an invocation only when all of the floor's runs lie "
                             "within --steady per cent of its fastest")
    parser.add_argument("--client", default="mcpsync",
                        help="the client judged, by its label or module (default mcpsync)")
    args = parser.parse_args(argv)
    invocations: list[Invocation] = []
    for path in _files(args.paths):
        try:
            inv = load(path)
        except OSError as exc:
            parser.error(f"cannot read {path}: {exc.strerror}")
        except ValueError as exc:   # json.JSONDecodeError included
            parser.error(f"{path} is not a harness result: {exc}")
        if inv is not None:
            invocations.append(inv)
    invocations.sort(key=lambda inv: inv.label)
    verdicts = judge(invocations, args.client, args.steady, args.strict)
    if not verdicts:
        print(f"no {SCENARIO} invocation with both the floor and {args.client!r} in "
              f"{', '.join(map(str, args.paths))} ({len(invocations)} of {SCENARIO} read)",
              file=sys.stderr)
        return 1
    print(report(verdicts, args.client, args.steady, args.strict, len(invocations)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
