"""Which ``seq-1cpu`` invocations of the cross-SDK harness meet the pinned sequential
targets, counting only those whose floor's median run was not a slow one.

The target: in each counted invocation (``RUNS=3``) a client's median call is within 1.3x
the raw-pipe floor's and its CPU per call within 1.6x the floor's. On the benchmark VM the
floor itself lands, run to run, in a state about 1.5 times slower; an invocation whose
floor ran two of its three runs that way has a slow run as its median, and every ratio
taken against it is understated (the same code measured 0.86x and 1.66x a few seconds
apart). So an invocation is counted only when the floor's median run lies within
``--steady`` per cent (10 by default) of its fastest run. A slow run of the client's is
not excused: its median stands as measured. With ``--strict`` all three of the floor's
runs must lie that close (the harness's ``spread`` column), which counts fewer.
See docs/performance.md, "`seq-1cpu` on a second day".

It reads the harness's printed output, as many invocations as the files hold (each ends
with the harness's summary table, whose ``seq-1cpu`` rows are used). A line starting with
``== `` before an invocation (as the project's measuring scripts write: ``== <date> ...``)
labels it; the label's fourth word, the time of day, is printed::

    <harness>/run_all.sh --scenarios seq-1cpu >> out.txt      # as many times as wanted
    python benchmarks/seq1cpu_verdict.py out.txt [--steady 10] [--client mcpsync]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

#: The targets: wall time and client CPU per call, each over the floor's.
WALL_TARGET = 1.3
CPU_TARGET = 1.6


@dataclass
class Row:
    """One client's ``seq-1cpu`` summary row of one invocation."""

    client: str
    us: float          # median microseconds per call
    fastest: float     # the fastest run's microseconds per call
    spread: float      # per cent between the fastest and slowest run
    x_floor: float     # median ratio to the floor, as the harness prints it
    cpu_us: float      # median client CPU per call


@dataclass
class Invocation:
    label: str
    rows: dict[str, Row]


def _row(line: str) -> Row | None:
    """A summary row (its ``spread`` column ends in ``%``); ``None`` for anything else."""
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) < 9 or cells[0] != "seq-1cpu" or not cells[6].endswith("%"):
        return None
    try:
        return Row(client=cells[1], us=float(cells[4]), fastest=float(cells[5].split("-")[0]),
                   spread=float(cells[6][:-1]),
                   x_floor=float(cells[7].split()[0]), cpu_us=float(cells[8].split()[0]))
    except ValueError:
        return None


def parse(text: str) -> list[Invocation]:
    """Every invocation's summary rows, in order, labelled by the ``==`` line before it."""
    found: list[Invocation] = []
    label = ""
    current: dict[str, Row] = {}
    for line in text.splitlines():
        if line.startswith("== "):
            if current:     # a summary table that ran up to this line
                found.append(Invocation(label or f"#{len(found) + 1}", current))
                current = {}
            words = line.split()
            label = words[4] if len(words) > 4 else line[3:].strip()
            continue
        row = _row(line) if line.startswith("| seq-1cpu") else None
        if row is not None:
            current[row.client] = row
        elif current:       # the summary table ended
            found.append(Invocation(label or f"#{len(found) + 1}", current))
            current = {}
            label = ""
    if current:
        found.append(Invocation(label or f"#{len(found) + 1}", current))
    return found


@dataclass
class Verdict:
    label: str
    floor_slowdown: float   # the floor's median over its fastest run, minus one, per cent
    floor_spread: float
    x_floor: float
    cpu_x_floor: float
    counted: bool
    met: bool


def judge(invocations: list[Invocation], client: str, steady: float,
          strict: bool = False) -> list[Verdict]:
    """Each invocation that measured both the floor and ``client``, judged."""
    verdicts: list[Verdict] = []
    for inv in invocations:
        floor, mine = inv.rows.get("floor"), inv.rows.get(client)
        if floor is None or mine is None or floor.cpu_us <= 0:
            continue
        cpu = mine.cpu_us / floor.cpu_us
        slowdown = (floor.us / floor.fastest - 1) * 100 if floor.fastest > 0 else math.inf
        counted = (floor.spread if strict else slowdown) <= steady
        verdicts.append(Verdict(inv.label, slowdown, floor.spread, mine.x_floor, cpu, counted,
                                counted and mine.x_floor <= WALL_TARGET and cpu <= CPU_TARGET))
    return verdicts


def report(verdicts: list[Verdict], client: str, steady: float, strict: bool = False) -> str:
    rule = (f"the floor's spread at most {steady:g}%" if strict
            else f"the floor's median at most {steady:g}% over its fastest run")
    lines = [f"{'invocation':<12} {'floor median/fastest':>20} {'spread':>7} {'x floor':>8} "
             f"{'CPU x floor':>12}  verdict"]
    for v in verdicts:
        verdict = ("met" if v.met else "not met") if v.counted else "not counted (slow floor)"
        lines.append(f"{v.label:<12} {1 + v.floor_slowdown / 100:>20.2f} {v.floor_spread:>6.0f}% "
                     f"{v.x_floor:>8.2f} {v.cpu_x_floor:>12.2f}  {verdict}")
    counted = [v for v in verdicts if v.counted]
    if counted:
        lines.append(f"{client}: {sum(v.met for v in counted)} of {len(counted)} counted "
                     f"invocations met both targets ({rule}); "
                     f"medians {statistics.median(v.x_floor for v in counted):.3f}x wall, "
                     f"{statistics.median(v.cpu_x_floor for v in counted):.3f}x CPU")
    else:
        lines.append(f"{client}: no invocation counted ({rule})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path, help="the harness's printed output")
    parser.add_argument("--steady", type=float, default=10.0,
                        help="how far, in per cent, the floor's median run may lie above "
                             "its fastest for an invocation to count (default 10)")
    parser.add_argument("--strict", action="store_true",
                        help="count an invocation only when all three of the floor's runs "
                             "lie within --steady per cent (its spread)")
    parser.add_argument("--client", default="mcpsync",
                        help="the client column to judge (default mcpsync)")
    args = parser.parse_args(argv)
    invocations: list[Invocation] = []
    for path in args.files:
        try:
            invocations += parse(path.read_text(encoding="utf-8", errors="replace"))
        except OSError as exc:
            parser.error(f"cannot read {path}: {exc.strerror}")
    verdicts = judge(invocations, args.client, args.steady, args.strict)
    if not verdicts:
        print(f"no seq-1cpu summary with both the floor and {args.client!r} in "
              f"{', '.join(map(str, args.files))}", file=sys.stderr)
        return 1
    print(report(verdicts, args.client, args.steady, args.strict))
    return 0


if __name__ == "__main__":
    sys.exit(main())
