"""How long the gateway works on a frame before writing it on: the part of its added latency
the caller waits for, timed inside the gateway.

End-to-end latency on a shared two-core machine moves by tens of microseconds from run to
run, more than the gateway's own share of it. This times only that share: a copy of the
``mcpsync`` package (this tree's, and optionally a baseline's) is made in a temporary
directory with timers added to the pass-through's two loops (``Gateway._host_loop`` and
``Gateway._upstream_loop``): a clock read right after each ``poll`` returns, and another
right before each write of a frame on. The gateway command runs from that copy in front of
the demo server, driven by our client with sequential ``tools/call echo`` calls; at exit it
writes its samples to a file. Printed per loop: the median and the 10th and 90th percentiles
of the time from wake-up to write, in microseconds, per version, in rounds that alternate
the versions. The timers cost about 0.1 us each.

A forward-only loop would show what the structure alone costs (``poll``, ``readv``, the
write's checks); what the loops do beyond that is what this measures. Run from the project
root::

    .venv/bin/python benchmarks/gateway_critical.py [--calls N] [--rounds R] [--baseline DIR]

``--baseline DIR``: a directory holding another version's ``mcpsync`` package (for example
``git archive COMMIT mcpsync | tar -x -C DIR``). The copies are patched by pattern (the
``ready = poll()`` lines and the ``write(out, data)`` calls of the two loops); a version
whose loops do not have them is refused with a message.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import mcpsync

HERE = Path(__file__).resolve().parent
LOOPS = ("_host_loop", "_upstream_loop")
_POLL = re.compile(r"^(\s+)ready = poll\(\)\s*$")
_WRITE = re.compile(r"^(\s+)(?:sent = |written = )?write\(out, data\)")
_DEF = re.compile(r"^    def (\w+)\(")
_PRELUDE = '''
import atexit as _atexit
import os as _os
import time as _time

_NS = _time.perf_counter_ns
_SAMPLES: dict[str, list[int]] = {}


def _dump() -> None:
    path = _os.environ.get("MCPSYNC_CRITICAL_OUT")
    if path:
        with open(f"{path}.{_os.getpid()}", "w") as out:
            out.write(repr(_SAMPLES))


_atexit.register(_dump)
'''


def _patched(source: Path, into: Path) -> None:
    """Copy the package under ``source`` to ``into`` with the timers in the two loops."""
    shutil.copytree(source / "mcpsync", into / "mcpsync",
                    ignore=shutil.ignore_patterns("__pycache__"))
    target = into / "mcpsync" / "gateway" / "_gateway.py"
    lines = target.read_text().splitlines()
    out: list[str] = []
    where = ""
    polls = writes = 0
    for line in lines:
        defined = _DEF.match(line)
        if defined:
            where = defined.group(1)
        if where in LOOPS:
            wrote = _WRITE.match(line)
            if wrote:
                out.append(f"{wrote.group(1)}_SAMPLES.setdefault({where!r}, [])"
                           f".append(_NS() - _t0)")
                writes += 1
        out.append(line)
        polled = _POLL.match(line) if where in LOOPS else None
        if polled:
            out.append(f"{polled.group(1)}_t0 = _NS()")
            polls += 1
    if polls < 2 or writes < 2:
        raise SystemExit(f"{source}: the pass-through's loops have no 'ready = poll()' and "
                         "'write(out, data)' lines to time (found "
                         f"{polls} and {writes}); this version cannot be measured this way")
    text = "\n".join(out) + "\n"
    first_import = text.index("\nimport ")
    target.write_text(text[:first_import] + "\n" + _PRELUDE + text[first_import:])


def _run(root: Path, calls: int, warmup: int, tmp: Path) -> dict[str, list[int]]:
    config = tmp / "gateway.json"
    config.write_text(json.dumps({"mcpServers": {"demo": {
        "command": sys.executable, "args": ["-m", "mcpsync.demo"]}}}))
    out = tmp / f"samples-{root.name}"
    run = (f"import runpy, sys; sys.path.insert(0, {str(root)!r}); "
           "sys.argv[0] = 'mcpsync'; runpy.run_module('mcpsync', run_name='__main__')")
    env = {"MCPSYNC_CRITICAL_OUT": str(out)}
    client = mcpsync.connect([sys.executable, "-c", run, "gateway", "--config", str(config)],
                             env=env)
    try:
        for _ in range(warmup + calls):
            client.call_tool("echo", {"text": "hi"})
    finally:
        client.close()
    samples: dict[str, list[int]] = {}
    for path in tmp.glob(f"{out.name}.*"):
        found: dict[str, list[int]] = ast.literal_eval(path.read_text())
        path.unlink()
        for loop, values in found.items():
            samples.setdefault(loop, []).extend(values[warmup:])
    return samples


def measure(calls: int, rounds: int, warmup: int, baseline: str | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="mcpsync-critical-") as name:
        tmp = Path(name)
        roots = {"gateway": tmp / "this"}
        _patched(HERE.parent, roots["gateway"])
        if baseline is not None:
            roots["gateway@base"] = tmp / "base"
            _patched(Path(baseline), roots["gateway@base"])
        per: dict[str, dict[str, list[int]]] = {path: {} for path in roots}
        for i in range(rounds):
            order = list(roots)
            order = order[i % len(order):] + order[:i % len(order)]
            for path in order:
                for loop, values in _run(roots[path], calls, warmup, tmp).items():
                    per[path].setdefault(loop, []).extend(values)
    result: dict[str, Any] = {}
    for path, loops in per.items():
        result[path] = {}
        for loop in LOOPS:
            values = sorted(loops.get(loop, []))
            if not values:
                continue
            deciles = statistics.quantiles(values, n=10)
            result[path][loop] = {"median": statistics.median(values) / 1000,
                                  "p10": deciles[0] / 1000, "p90": deciles[-1] / 1000,
                                  "samples": len(values)}
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--baseline", metavar="DIR")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = measure(args.calls, args.rounds, args.warmup, args.baseline)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"wake-up to write, microseconds ({args.calls} sequential calls x {args.rounds} "
          "rounds per version)")
    for path, loops in result.items():
        for loop, row in loops.items():
            print(f"{path:14} {loop:15} median {row['median']:6.2f}  p10 {row['p10']:6.2f}  "
                  f"p90 {row['p90']:6.2f}  ({row['samples']} frames)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
