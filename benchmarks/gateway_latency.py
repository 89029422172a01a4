"""Per-call latency added by the gateway, beside the floor proxy and a direct connection.

Four ways (five with ``--check-floor``, below) to reach the demo server (``python -m
mcpsync.demo``) over stdio, all driven by our client (``mcpsync.connect``), so the client's
own cost is the same in each and cancels out of the differences:

- direct: the client spawns the demo;
- floor: the client spawns ``benchmarks/gateway_floor.py``, which spawns the demo and
  forwards lines without parsing;
- gateway: the client spawns ``python -m mcpsync gateway --config FILE`` with the demo as its
  one upstream, no traffic log;
- gateway+log: the same with ``--log FILE`` (a file in a temporary directory) at the
  inspector's default detail (``summary``).

``--check-floor`` adds a fifth path, ``floor+check``: the client spawns
``benchmarks/gateway_check_floor.py``, the plain floor plus what a proxy that keeps the
gateway's promises must do per frame (each line decoded by the standard library's C JSON scanner,
each call's id entered in an in-flight table and taken out by its answer); the gateway's
added latency is then also given against that one's: a reference for how much of the
gateway's cost over the floor goes with reading every frame at all, and how much is the
rest of its work.

``--baseline DIR`` (a copy of another version's ``mcpsync`` package directory's parent,
e.g. ``git archive COMMIT mcpsync | tar -x -C DIR``) adds ``gateway@base`` and
``gateway+log@base``: the same two gateway paths running that version, measured in the same
rounds, so a change is compared under the same load.

Each does ``tools/call echo`` sequentially (N calls) and from 8 threads at once (N calls in
all), after a warm-up. Besides the latencies it reads the CPU time (all threads) of the
process the client spawned, over the sequential calls and over the 8 threads' calls (per
call: ``seq_cpu`` and ``conc_cpu``): for the floor and the gateway that is
the proxy's own work per call (the demo's is not counted), which load on a shared machine
does not inflate the way it does the latencies.

The machine may be shared, so the paths are measured in rounds, one after the other in each
round (the order rotated from round to round), and the figures are the medians over the
rounds of each round's figure. Prints a table (microseconds per call)
and the ratios against the floor proxy; ``--json`` prints the same as one JSON document.
Run from the project root::

    .venv/bin/python benchmarks/gateway_latency.py [--calls N] [--rounds R] [--json]

``--pin CPU`` runs everything (this process, and so the client, the proxy and the demo it
spawns, which inherit the affinity) on that one CPU. On two or more cores a proxy's added
latency is a difference of wake-up delays that moves by more than itself between rounds
(the floor's is a few microseconds either side of zero); on one core the three processes
take turns, each call's latency is the sum of their work and the switches between them, and
what a proxy adds is its own CPU per call and the two extra pipe hops: a figure that holds
from one invocation to the next, so the ratio to the floor's means something.

``--instructions`` measures instead what load cannot move: the user-space instructions the
proxy process (floor, gateway, gateway+log, the baseline's two gateways and, with
``--check-floor``, the checking floor) executes per
call, with its log helper process where it has one, under
``valgrind --tool=callgrind`` (which must be installed), sequential and from 8 threads: two
runs of each path, of ``--calls`` and of 5x as many calls, and the difference divided by
the extra calls, so start-up and the handshake drop out. Slow (valgrind runs the proxy
about 50x slower: a minute or two per path); only the proxy process is counted, not the
demo it starts.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import mcpsync

HERE = Path(__file__).resolve().parent
DEMO = [sys.executable, "-m", "mcpsync.demo"]
THREADS = 8
PATHS = ("direct", "floor", "gateway", "gateway+log")
BASE_PATHS = ("gateway@base", "gateway+log@base")
CHECK_FLOOR = "floor+check"
#: The figures of one path in one round, in microseconds per call (``seq_cpu``: CPU time of
#: the process the client spawned, all its threads, per sequential call; ``conc_cpu`` the same
#: per call from 8 threads; 0 where unknown).
FIGURES = ("seq_median", "seq_mean", "conc_median", "conc_wall", "seq_cpu", "conc_cpu")


def _cpu_ns(pid: int | None) -> int:
    """CPU time of every thread of ``pid`` so far (Linux ``schedstat``, in ns), or 0, with
    that of its child processes other than the demo server (the upstream, whose work is
    the same on every path): the gateway's log helper does the gateway's work."""
    total = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            total += int((task / "schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0
    for child in _children(pid):
        try:
            argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"mcpsync.demo" not in argv:
            total += _cpu_ns(child)
    return total


def _children(pid: int | None) -> list[int]:
    """The processes whose parent is ``pid`` (from ``/proc/*/stat``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 1 and fields[1] == str(pid):
            found.append(int(entry.name))
    return found


# Under valgrind the log's helper process takes seconds to write what it was sent and to
# exit: the gateway must wait for it rather than kill it (then it writes no counts).
_PATIENT = ("import mcpsync.gateway._loghelper as h, mcpsync.gateway._logqueue as q; "
            "h.CLOSE_WAIT = q.CLOSE_BUDGET = 600.0; ")


def _argvs(config: str, log: str, baseline: str | None,
           patient: bool = False) -> dict[str, list[str]]:
    gateway = [sys.executable, "-m", "mcpsync", "gateway", "--config", config]
    if patient:
        gateway = [sys.executable, "-c", _PATIENT + "import runpy; runpy.run_module("
                   "'mcpsync', run_name='__main__', alter_sys=True)", "gateway", "--config",
                   config]
    argvs = {"direct": DEMO,
             "floor": [sys.executable, str(HERE / "gateway_floor.py"), "--", *DEMO],
             CHECK_FLOOR: [sys.executable, str(HERE / "gateway_check_floor.py"), "--", *DEMO],
             "gateway": gateway,
             "gateway+log": [*gateway, "--log", log, "--log-detail", "summary"]}
    if baseline is not None:
        # The other version's package first on the path (the client does not pass
        # PYTHONPATH on to what it spawns, so the path is set in the process itself).
        run = (f"import runpy, sys; sys.path.insert(0, {baseline!r}); "
               + (_PATIENT if patient else "")
               + "runpy.run_module('mcpsync', run_name='__main__', alter_sys=True)")
        base = [sys.executable, "-c", run, "gateway", "--config", config]
        argvs["gateway@base"] = base
        argvs["gateway+log@base"] = [*base, "--log", log, "--log-detail", "summary"]
    return argvs


def _sequential(client: mcpsync.Client, n: int) -> list[float]:
    times = []
    for i in range(n):
        start = time.perf_counter()
        client.call_tool("echo", {"text": f"x{i}"})
        times.append(time.perf_counter() - start)
    return times


def _concurrent(client: mcpsync.Client, n: int) -> tuple[list[float], float]:
    times: list[float] = []
    lock = threading.Lock()
    per = max(1, n // THREADS)

    def work() -> None:
        mine = _sequential(client, per)
        with lock:
            times.extend(mine)

    threads = [threading.Thread(target=work, name=f"bench-{k}") for k in range(THREADS)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return times, (time.perf_counter() - start) / (per * THREADS)


def _one(argv: list[str], calls: int, warmup: int) -> dict[str, Any]:
    with mcpsync.connect(argv) as client:
        # The CPUs the spawned process may run on (with --pin, the one CPU it inherited).
        cpus = sorted(os.sched_getaffinity(client.pid)) if client.pid else []
        _sequential(client, warmup)
        cpu = _cpu_ns(client.pid)
        seq = _sequential(client, calls)
        cpu = _cpu_ns(client.pid) - cpu
        conc_cpu = _cpu_ns(client.pid)
        conc, wall = _concurrent(client, calls)
        conc_cpu = _cpu_ns(client.pid) - conc_cpu
    return {"seq_median": statistics.median(seq) * 1e6, "seq_mean": statistics.fmean(seq) * 1e6,
            "conc_median": statistics.median(conc) * 1e6, "conc_wall": wall * 1e6,
            "seq_cpu": max(cpu, 0) / 1e3 / calls,
            "conc_cpu": max(conc_cpu, 0) / 1e3 / len(conc), "cpus": cpus}


def measure(calls: int, rounds: int, warmup: int,
            baseline: str | None = None, check_floor: bool = False) -> dict[str, Any]:
    """Run every path ``rounds`` times; the medians over rounds, the added latency over
    direct, the ratios to the floor (and with ``check_floor`` to the checking floor), and
    how many records the log got per call."""
    paths = ((*PATHS[:2], CHECK_FLOOR, *PATHS[2:]) if check_floor else PATHS) + (
        BASE_PATHS if baseline is not None else ())
    per_round: dict[str, list[dict[str, Any]]] = {p: [] for p in paths}
    log_lines = 0
    with tempfile.TemporaryDirectory(prefix="mcpsync-gwbench-") as tmp:
        config = Path(tmp) / "gateway.json"
        config.write_text(json.dumps({"mcpServers": {"demo": {"command": DEMO[0],
                                                               "args": DEMO[1:]}}}))
        log = Path(tmp) / "gateway.log"
        argvs = _argvs(str(config), str(log), baseline)
        for r in range(rounds):
            order = paths[r % len(paths):] + paths[:r % len(paths)]
            for path in order:
                if path.startswith("gateway+log"):
                    log.unlink(missing_ok=True)
                per_round[path].append(_one(argvs[path], calls, warmup))
                if path == "gateway+log":
                    log_lines = len(log.read_bytes().splitlines())
    medians = {p: {f: statistics.median(row[f] for row in per_round[p]) for f in FIGURES}
               for p in paths}
    direct = medians["direct"]
    added = {p: {"seq": medians[p]["seq_median"] - direct["seq_median"],
                 "conc": medians[p]["conc_wall"] - direct["conc_wall"]} for p in paths[1:]}
    floor = added["floor"]
    ratio = _ratios(added, paths[2:], floor)
    exchanges = warmup + calls + max(1, calls // THREADS) * THREADS
    extra: dict[str, Any] = {}
    if check_floor:
        extra["x_check_floor"] = _ratios(added, [p for p in paths if p.startswith("gateway")],
                                         added[CHECK_FLOOR])
    return {**extra, "calls": calls, "rounds": rounds, "warmup": warmup, "medians": medians,
            "rounds_raw": per_round, "added_us": added, "x_floor": ratio,
            "log_lines": log_lines, "log_lines_per_call": log_lines / exchanges}


def _ratios(added: dict[str, dict[str, float]], paths: Sequence[str],
            reference: dict[str, float]) -> dict[str, dict[str, float | None]]:
    """Each path's added latency over ``reference``'s, sequential and concurrent (None where
    the reference added nothing)."""
    return {p: {k: (added[p][k] / reference[k] if reference[k] > 0 else None)
                for k in ("seq", "conc")} for p in paths}


def _instructions_of(argv: list[str], calls: int, concurrent: bool,
                     out: Path) -> tuple[int, int]:
    """User-space instructions of every thread of the proxy over a session of ``calls``,
    and of those, the ones of its child processes other than the demo server (the log's
    helper process; valgrind follows children, all but the demo)."""
    vg = ["valgrind", "--tool=callgrind", "--separate-threads=yes",
          "--trace-children=yes", "--trace-children-skip-by-arg=*mcpsync.demo*",
          f"--callgrind-out-file={out}.%p"]
    with mcpsync.connect(vg + argv, timeout=300) as client:
        pid = client.pid
        if concurrent:
            _concurrent(client, calls)
        else:
            _sequential(client, calls)
    total = children = 0
    names = glob.glob(f"{out}.*-*")   # {out}.PID-NN: one per thread of each process
    for name in glob.glob(f"{out}.*"):
        if name not in names:
            os.unlink(name)   # the head of a process's per-thread files: no counts
    for name in names:
        found = re.search(r"^(?:totals|summary):\s*(\d+)", Path(name).read_text(errors="replace"),
                          re.M)
        if found is None:
            raise RuntimeError(f"callgrind wrote no totals in {name}")
        total += int(found.group(1))
        if not name.startswith(f"{out}.{pid}-"):
            children += int(found.group(1))
        os.unlink(name)
    if not names:
        raise RuntimeError("callgrind wrote nothing (is valgrind installed?)")
    return total, children


def instructions(calls: int, baseline: str | None = None,
                 check_floor: bool = False) -> dict[str, dict[str, float]]:
    """Instructions per call of each proxy path, sequential and with 8 threads (for the
    log's paths also ``seq_helper`` and ``8x_helper``: the log helper's share)."""
    paths = ("floor",) + ((CHECK_FLOOR,) if check_floor else ()) + ("gateway", "gateway+log") + (
        ("gateway@base", "gateway+log@base") if baseline is not None else ())
    result: dict[str, dict[str, float]] = {}
    # Under valgrind the proxy takes seconds to exit and write its counts; the client's
    # close must wait for that rather than stop it (SIGTERM: nothing written).
    from mcpsync.transport.stdio import _lifecycle
    _lifecycle.STDIN_GRACE = 300.0
    with tempfile.TemporaryDirectory(prefix="mcpsync-gwbench-") as tmp:
        config = Path(tmp) / "gateway.json"
        config.write_text(json.dumps({"mcpServers": {"demo": {"command": DEMO[0],
                                                               "args": DEMO[1:]}}}))
        argvs = _argvs(str(config), str(Path(tmp) / "gateway.log"), baseline, patient=True)
        for path in paths:
            row = {}
            for mode, concurrent in (("seq", False), ("8x", True)):
                short = _instructions_of(argvs[path], calls, concurrent, Path(tmp) / "cg")
                long = _instructions_of(argvs[path], calls * 5, concurrent, Path(tmp) / "cg")
                row[mode] = (long[0] - short[0]) / (calls * 4)
                if "+log" in path:
                    row[f"{mode}_helper"] = (long[1] - short[1]) / (calls * 4)
            result[path] = row
    return result


def _print(result: dict[str, Any]) -> None:
    pinned = result.get("pinned_cpu")
    print(f"{result['calls']} calls each, {result['rounds']} rounds (medians over rounds); "
          "microseconds per call"
          + ("" if pinned is None else f"; everything pinned to CPU {pinned}"))
    print(f"{'':12} {'seq median':>11} {'seq mean':>9} {'8x median':>10} {'8x wall/call':>13} "
          f"{'seq CPU':>8} {'8x CPU':>7}")
    for path, row in result["medians"].items():
        print(f"{path:12} {row['seq_median']:11.0f} {row['seq_mean']:9.0f} "
              f"{row['conc_median']:10.0f} {row['conc_wall']:13.0f} {row['seq_cpu']:8.1f}"
              f" {row['conc_cpu']:7.1f}")
    for path, row in result["added_us"].items():
        print(f"added by {path}: seq median {row['seq']:+.0f} us, "
              f"8x wall/call {row['conc']:+.0f} us")
    for key, reference in (("x_floor", "floor"), ("x_check_floor", CHECK_FLOOR)):
        for path, row in result.get(key, {}).items():
            shown = ", ".join(f"{k} {v:.2f}x" if v is not None else f"{k} n/a"
                              for k, v in row.items())
            print(f"{path} / {reference} added latency: {shown}")
    print(f"log records per exchange (gateway+log): {result['log_lines_per_call']:.2f}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--baseline", metavar="DIR",
                        help="also measure the gateway of the mcpsync package under DIR")
    parser.add_argument("--check-floor", action="store_true",
                        help="also measure the checking floor (gateway_check_floor.py)")
    parser.add_argument("--pin", type=int, metavar="CPU",
                        help="run everything (client, proxy, demo) on this one CPU")
    parser.add_argument("--instructions", action="store_true",
                        help="count the proxy's instructions per call under callgrind "
                             "(--calls per run, default 200 here)")
    args = parser.parse_args(argv)
    if args.instructions:
        calls = args.calls if "--calls" in argv else 200
        counted = instructions(calls, args.baseline, args.check_floor)
        if args.json:
            print(json.dumps(counted))
        else:
            print(f"user-space instructions of the proxy process per call ({calls} and "
                  f"{calls * 5} calls per run, the difference)")
            for path, row in counted.items():
                helper = (f"   (of which the log helper: seq {row['seq_helper']:.0f}, "
                          f"8 threads {row['8x_helper']:.0f})" if "seq_helper" in row else "")
                print(f"{path:16} seq {row['seq']:9.0f}   8 threads {row['8x']:9.0f}{helper}")
        return 0
    if args.pin is not None:
        os.sched_setaffinity(0, {args.pin})   # inherited by every process spawned below
    result = measure(args.calls, args.rounds, args.warmup, args.baseline, args.check_floor)
    result["pinned_cpu"] = args.pin
    if args.json:
        print(json.dumps(result))
    else:
        _print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
