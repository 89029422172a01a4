"""Many servers at once: ``Manager.start_all()`` and ``close()`` of N stdio servers against
a floor of plain ``subprocess.Popen`` (a benchmark, not a test).

The floor is the least a client can do for the same result: start N servers with
``Popen`` (all at once, so their interpreters start in parallel), write one ``initialize``
to each and read its answer, then close them: close every stdin first, then wait for every
process. The Manager does the same through its public API: ``start_all()`` of N
``ServerConfig`` entries (handshake, then tool discovery in the background, which is let
finish before ``close()`` is timed), then ``close()``.

Both start each server in a session of its own (``start_new_session``, as mcpsync does): where
the kernel groups processes by session for scheduling (Linux's autogroup), servers sharing
this process's session would otherwise get one share of the CPUs between them, and on a
busy machine the floor would lose by that alone.

Each round runs the floor and then the Manager, side by side, so that both see the same
load; the figures are medians over the rounds: wall milliseconds and this process's CPU
milliseconds (all threads), for the start and for the close.

Run: ``python benchmarks/manager_many.py [--servers 50] [--rounds 7] --server-dir DIR [--json]``
where DIR holds ``echo_server.py`` (a dependency-free MCP stdio server that exits at stdin
EOF), which is started as ``python -S echo_server.py``. ``--affinity 1`` pins this process
and the servers to CPU 1.

``--baseline DIR`` (a folder holding another version's ``mcpsync`` package, for example
main's, unpacked with ``git archive``) adds ``mcpsync@base`` to the same rounds. Then both
Managers run in worker processes of their own (the same script, one importing this tree's
``mcpsync``, the other the baseline's), each timing its rounds with its own clocks, so that
neither pays for the other's imports or threads; the floor stays in this process. Each
round runs the floor, then the two Managers, in an order that alternates round by round.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from mcpsync import Manager, ServerConfig

_INIT = (json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                     "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                "clientInfo": {"name": "bench-floor", "version": "0"}}})
         + "\n").encode()
_INITIALIZED = b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n'

Timing = dict[str, float]


def _timed(fn: Callable[[], object]) -> tuple[float, float]:
    """Wall and CPU milliseconds of ``fn()``."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return (time.perf_counter() - wall) * 1e3, (time.process_time() - cpu) * 1e3


def floor_round(argv: list[str], servers: int) -> Timing:
    """Popen N servers, one initialize each; then close every stdin and wait for all."""
    procs: list[subprocess.Popen[bytes]] = []

    def start() -> None:
        for _ in range(servers):
            procs.append(subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          start_new_session=True))
        for proc in procs:
            assert proc.stdin is not None
            os.write(proc.stdin.fileno(), _INIT)
        for proc in procs:
            assert proc.stdout is not None and proc.stdin is not None
            reply = json.loads(proc.stdout.readline())
            assert "result" in reply, reply
            os.write(proc.stdin.fileno(), _INITIALIZED)

    def close() -> None:
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.close()
        for proc in procs:
            proc.wait()
            assert proc.stdout is not None
            proc.stdout.close()

    start_wall, start_cpu = _timed(start)
    close_wall, close_cpu = _timed(close)
    return {"start_ms": start_wall, "start_cpu_ms": start_cpu,
            "close_ms": close_wall, "close_cpu_ms": close_cpu}


def manager_round(argv: list[str], servers: int) -> Timing:
    """``Manager.start_all()`` of N servers, then (once every discovery ended) ``close()``."""
    configs = [ServerConfig(id=f"echo{i}", command=argv[0], args=argv[1:])
               for i in range(servers)]
    manager = Manager(configs=configs, max_parallel_starts=servers)
    outcome: dict[str, BaseException | None] = {}

    def start() -> None:
        outcome.update(manager.start_all())

    try:
        start_wall, start_cpu = _timed(start)
        failed = {k: v for k, v in outcome.items() if v is not None}
        if failed:
            raise RuntimeError(f"servers failed to start: {failed}")
        deadline = time.monotonic() + 30
        while not all(manager.server_ready(c.id) for c in configs):
            if time.monotonic() > deadline:
                raise RuntimeError("tool discovery did not finish within 30 s")
            time.sleep(0.005)
        close_wall, close_cpu = _timed(manager.close)
    finally:
        manager.close()
    return {"start_ms": start_wall, "start_cpu_ms": start_cpu,
            "close_ms": close_wall, "close_cpu_ms": close_cpu}


class _Worker:
    """A worker process running Manager rounds on request, importing ``mcpsync`` from
    ``path`` (``None``: wherever this interpreter finds it)."""

    def __init__(self, path: str | None, server_dir: Path, servers: int) -> None:
        env = dict(os.environ)
        if path is not None:
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (os.path.abspath(path), os.environ.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", "--server-dir", str(server_dir),
             "--servers", str(servers)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            env=env, text=True)
        self.package = self._ask("where")["package"]

    def _ask(self, what: str) -> dict[str, object]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(what + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the worker ended (status {self.proc.wait()})")
        answer: dict[str, object] = json.loads(line)
        return answer

    def round(self) -> Timing:
        return {k: float(v) for k, v in self._ask("round").items()}  # type: ignore[arg-type]

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait()


def worker(server_dir: Path, servers: int) -> None:
    """The worker's side: warm up, then answer ``where`` and ``round`` lines on stdin."""
    import mcpsync

    argv = [sys.executable, "-S", str(server_dir / "echo_server.py")]
    manager_round(argv, min(servers, 4))
    for line in sys.stdin:
        if line.strip() == "where":
            answer: object = {"package": os.path.dirname(mcpsync.__file__)}
        else:
            answer = manager_round(argv, servers)
        print(json.dumps(answer), flush=True)


def _median(rounds: list[Timing], key: str) -> float:
    return statistics.median(r[key] for r in rounds)


def run(server_dir: Path, servers: int, rounds: int,
        baseline: str | None = None) -> dict[str, dict[str, float]]:
    """Alternate floor and Manager rounds; return the medians of each figure per client."""
    script = server_dir / "echo_server.py"
    if not script.is_file():
        raise SystemExit(f"no echo_server.py in {server_dir}; pass --server-dir DIR")
    argv = [sys.executable, "-S", str(script)]
    floor_round(argv, min(servers, 4))   # warm the page cache and the imports
    results: dict[str, list[Timing]] = {"floor": [], "mcpsync": []}
    if baseline is None:
        manager_round(argv, min(servers, 4))
        for _ in range(rounds):
            results["floor"].append(floor_round(argv, servers))
            results["mcpsync"].append(manager_round(argv, servers))
    else:
        workers = {"mcpsync": _Worker(None, server_dir, servers),
                   "mcpsync@base": _Worker(baseline, server_dir, servers)}
        try:
            for label, each in workers.items():
                print(f"{label}: {each.package}", file=sys.stderr, flush=True)
            if workers["mcpsync"].package == workers["mcpsync@base"].package:
                raise SystemExit(f"--baseline {baseline}: both import the same mcpsync")
            results["mcpsync@base"] = []
            for n in range(rounds):
                results["floor"].append(floor_round(argv, servers))
                for label in (("mcpsync", "mcpsync@base") if n % 2 == 0
                              else ("mcpsync@base", "mcpsync")):
                    results[label].append(workers[label].round())
        finally:
            for each in workers.values():
                each.close()
    keys = ("start_ms", "start_cpu_ms", "close_ms", "close_cpu_ms")
    return {label: {key: _median(runs, key) for key in keys} for label, runs in results.items()}


def report(medians: dict[str, dict[str, float]], servers: int, rounds: int) -> None:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    floor = medians["floor"]
    print(f"{servers} servers, {rounds} rounds, medians, load average {load:.2f}")
    print(f"{'client':<12} {'start ms':>9} {'x floor':>8} {'CPU ms':>8} "
          f"{'close ms':>9} {'x floor':>8} {'CPU ms':>8}")
    for label, m in medians.items():
        print(f"{label:<12} {m['start_ms']:9.1f} {m['start_ms'] / floor['start_ms']:8.2f} "
              f"{m['start_cpu_ms']:8.1f} {m['close_ms']:9.1f} "
              f"{m['close_ms'] / floor['close_ms']:8.2f} {m['close_cpu_ms']:8.1f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--server-dir", type=Path, required=True,
                        help="the directory holding the cross-SDK harness's echo_server.py")
    parser.add_argument("--affinity", type=int, default=None,
                        help="pin this process (and so the servers) to this CPU")
    parser.add_argument("--json", action="store_true", help="print the medians as JSON")
    parser.add_argument("--baseline", metavar="DIR",
                        help="a folder holding another version's mcpsync package, timed in "
                             "the same rounds as mcpsync@base")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.affinity is not None:
        os.sched_setaffinity(0, {args.affinity})
    if args.worker:
        worker(args.server_dir, args.servers)
        return
    if args.baseline is not None and not os.path.isfile(
            os.path.join(args.baseline, "mcpsync", "__init__.py")):
        parser.error(f"--baseline {args.baseline}: no mcpsync package in that folder")
    medians = run(args.server_dir, args.servers, args.rounds, args.baseline)
    if args.json:
        print(json.dumps({"servers": args.servers, "rounds": args.rounds, "medians": medians}))
    else:
        report(medians, args.servers, args.rounds)


if __name__ == "__main__":
    main()
