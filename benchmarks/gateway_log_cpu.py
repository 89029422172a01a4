"""Where the traffic log's CPU goes: the gateway's own process and its log helper, apart.

``benchmarks/gateway_latency.py`` counts the log helper's CPU in the gateway's ("proxy CPU
per seq call"), which is the honest total. This splits it: for ``gateway`` (no log) and
``gateway+log`` (``--log FILE`` at ``summary``), and with ``--baseline DIR`` for
``gateway+log@base`` too, it makes N sequential calls (after a warm-up) and prints the CPU
time per call of the gateway's own threads and of its child processes other than the
upstream (the log helper), from ``/proc/PID/task/*/schedstat``. The gateway's own figure
with the log minus the one without it is what the log costs the process that forwards.
Run from the project root::

    .venv/bin/python benchmarks/gateway_log_cpu.py [--calls N] [--rounds R] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from gateway_latency import DEMO, _argvs, _children, _sequential  # this folder: on the path

import mcpsync


def _own_ns(pid: int) -> int:
    return sum(int((task / "schedstat").read_text().split()[0])
               for task in Path(f"/proc/{pid}/task").iterdir())


def _one(argv: list[str], calls: int, warmup: int) -> tuple[float, float]:
    """CPU per sequential call (us): the spawned process's threads, its non-upstream
    children's."""
    with mcpsync.connect(argv) as client:
        _sequential(client, warmup)
        pid = client.pid
        assert pid is not None
        kids = [k for k in _children(pid)
                if b"mcpsync.demo" not in Path(f"/proc/{k}/cmdline").read_bytes()]
        own, helper = _own_ns(pid), sum(_own_ns(k) for k in kids)
        _sequential(client, calls)
        own, helper = _own_ns(pid) - own, sum(_own_ns(k) for k in kids) - helper
    return own / 1e3 / calls, helper / 1e3 / calls


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--baseline", metavar="DIR")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "gateway.json"
        config.write_text(json.dumps({"mcpServers": {"demo": {"command": DEMO[0],
                                                              "args": DEMO[1:]}}}))
        argvs = _argvs(str(config), str(Path(tmp) / "gateway.log"), args.baseline)
        names = ["gateway", "gateway+log"] + (["gateway+log@base"] if args.baseline else [])
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
        for _ in range(args.rounds):
            for name in names:
                runs[name].append(_one(argvs[name], args.calls, args.warmup))
    print(f"{args.calls} sequential calls, {args.rounds} rounds; CPU us per call "
          "(median over rounds, then each round)")
    for name, got in runs.items():
        own = statistics.median(o for o, _ in got)
        helper = statistics.median(h for _, h in got)
        each = ", ".join(f"{o:.0f}+{h:.0f}" for o, h in got)
        print(f"{name:18s} own {own:6.1f}  helper {helper:6.1f}   ({each})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
