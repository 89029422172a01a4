"""One HTTP client shared by 64 threads, against a plain ``requests`` floor.

What it measures: T threads (default 64) all calling ``tools/call echo`` through ONE
``mcpsync.connect(url)`` client, side by side with a floor that sends the same JSON-RPC POSTs
from T threads through one ``requests.Session`` mounted with ``HTTPAdapter(pool_maxsize=T)``
(prebuilt bodies, one ``json.loads`` per reply). Each client runs in a child process of its
own, so its CPU is its own: per client the table shows calls per second, the client's CPU per
call (``os.times`` of the child, user and system, all its threads), the server's CPU per call (read
from ``/proc``, so a run the server bounds shows as such) and the TCP connections opened
after the warm-up (counted by urllib3's pools: every client here sends through urllib3; with
a pool as large as the thread count this is 0), and the context switches per call, voluntary
ones split by the kind of thread (the benchmark's callers, mcpsync's HTTP workers, its session
reader, its GET stream). The client CPU per call is also given as the ratio to the floor's
round by round: both ran in the same minute, so a change of load between rounds does not
move it (a change within a round still does; on a busy machine one round's ratio can be
off by half).

The server is the cross-SDK harness's dependency-free floor server (stdlib
``ThreadingHTTPServer``, legacy 2025-06-18 session, JSON replies), kept outside this
repository (see docs/performance.md): give its folder as ``HARNESS``. It speaks only the
legacy session, so the mcpsync client runs with ``era="legacy"``; ``--server`` runs any other
server command (``{port}`` is replaced) and ``--era`` picks what mcpsync negotiates.

Usage, from the project root::

    HARNESS=<harness> .venv/bin/python benchmarks/http_threads.py            # 3 runs
    HARNESS=<harness> .venv/bin/python benchmarks/http_threads.py --calls 50 --runs 1
    .venv/bin/python benchmarks/http_threads.py --url http://127.0.0.1:PORT/mcp --server-pid PID

``--baseline DIR`` adds ``mcpsync@base``: the same client importing the ``mcpsync`` package
found in DIR (another version, e.g. ``git archive <commit> mcpsync | tar -x -C DIR``), in
the same runs. ``--profile FILE`` runs the mcpsync child once more, not counted, under
cProfile (every thread it starts, warm-up included); read it with ``python -m pstats FILE``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

HERE = os.path.abspath(__file__)
CLIENTS = ("floor", "mcpsync")
BASE = "mcpsync@base"      # with --baseline: another version of mcpsync, in the same runs
MIN_WARMUP = 5             # warm-up calls per thread at least
MAX_WARMUP = 200           # and at most
QUIET_CALLS = 10           # warm-up ends once this many calls per thread opened nothing
TEXT = "t%d-%d"            # each call echoes its own text, so crossed answers would show

_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


# ---------------------------------------------------------------- measuring, in the child

def _server_cpu(pid: int | None) -> float:
    """User + system CPU seconds of process ``pid`` (0 without one)."""
    if not pid:
        return 0.0
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class _Connections:
    """Counts every TCP connection urllib3 opens in this process: a pool's new connection,
    and a pooled one the server had dropped, which urllib3 reconnects in place."""

    def __init__(self) -> None:
        from urllib3.util import connection
        self.opened = 0
        self.for_stream = 0   # of which by mcpsync's legacy GET stream thread
        lock = threading.Lock()
        original = connection.create_connection

        def counted(*args: Any, **kwargs: Any) -> Any:
            stream = threading.current_thread().name.startswith("mcpsync-http-get-")
            with lock:
                self.opened += 1
                self.for_stream += stream
            return original(*args, **kwargs)
        connection.create_connection = counted


def _kind(name: str) -> str:
    """Which part of the client a thread is: the benchmark's callers, mcpsync's session
    reader, its GET stream, its HTTP workers, or anything else."""
    if name.startswith("bench-"):
        return "callers"
    if name.startswith("mcpsync-http-reader-"):
        return "reader"
    if name.startswith("mcpsync-http-get-"):
        return "get"
    if name.startswith("mcpsync-http-"):
        return "workers"
    return "other"


def _switches_by_kind() -> dict[str, int]:
    """Voluntary context switches so far of every live thread, summed by :func:`_kind`
    (``/proc/self/task/<tid>/status``; empty where there is no ``/proc``)."""
    out: dict[str, int] = {}
    for thread in threading.enumerate():
        try:
            with open(f"/proc/self/task/{thread.native_id}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        kind = _kind(thread.name)
                        out[kind] = out.get(kind, 0) + int(line.split()[1])
                        break
        except OSError:
            continue
    return out


def _drive(threads: int, calls: int, server_pid: int | None, conns: _Connections,
           make_call: Callable[[int], Callable[[int], str]]) -> dict[str, Any]:
    """Warm up, then run ``threads`` threads of ``calls`` calls each and time that.

    ``make_call(k)`` returns thread k's call function: ``call(i)`` makes call i and returns
    the echoed text, which must be ``TEXT % (k, i)``.
    """
    ready = threading.Barrier(threads + 1)     # every thread is warm and idle
    start = threading.Barrier(threads + 1)     # the counters are read: go
    stop = threading.Barrier(threads + 1)
    counted = threading.Barrier(threads + 1)   # callers live on until their switches are read
    errors: list[str] = []
    warmup_errors: list[str] = []   # a connection refused in the opening burst, say

    first = conns.opened
    warm = {"calls": 0, "quiet_since": 0, "seen": first, "done": False}
    quiet = QUIET_CALLS * threads

    def worker(k: int) -> None:
        call = make_call(k)
        # Calls until the client held a connection per thread, or opened none during the
        # last QUIET_CALLS calls per thread (MIN_WARMUP to MAX_WARMUP calls per thread).
        for i in range(MAX_WARMUP):
            if warm["done"] and i >= MIN_WARMUP:
                break
            try:
                call(i)
            except BaseException as exc:  # report, and still meet the barriers
                warmup_errors.append(f"thread {k} warm-up: {exc!r}")
                break
            warm["calls"] += 1
            opened = conns.opened
            if opened != warm["seen"]:
                warm["seen"], warm["quiet_since"] = opened, warm["calls"]
            if opened - first >= threads or warm["calls"] - warm["quiet_since"] >= quiet:
                warm["done"] = True
        ready.wait()
        start.wait()
        try:
            for i in range(MAX_WARMUP, MAX_WARMUP + calls):
                got = call(i)
                if got != TEXT % (k, i):
                    errors.append(f"thread {k} call {i}: got {got!r}")
                    break
        except BaseException as exc:
            errors.append(f"thread {k}: {exc!r}")
        stop.wait()
        counted.wait()

    workers = [threading.Thread(target=worker, args=(k,), name=f"bench-{k}", daemon=True)
               for k in range(threads)]
    for t in workers:
        t.start()
    # The counters are read while every caller waits idle, before they are let go: read
    # after (as before 2026-12-05), the 64 released callers held the GIL while this thread
    # read ~130 /proc files, so the clocks started late, after a part of the calls, by a
    # varying amount (the "other regime" of docs/performance.md: rounds at several times
    # the usual calls per second and a fraction of the CPU per call).
    ready.wait()
    opened0, stream0 = conns.opened, conns.for_stream
    r0 = resource.getrusage(resource.RUSAGE_SELF)   # context switches: every thread's
    k0 = _switches_by_kind()
    s0, c0, t0 = _server_cpu(server_pid), os.times(), time.perf_counter()
    start.wait()
    stop.wait()
    c1, wall = os.times(), time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    k1 = _switches_by_kind()
    counted.wait()
    user, system = c1.user - c0.user, c1.system - c0.system
    cpu = user + system
    server, opened = _server_cpu(server_pid) - s0, conns.opened - opened0
    stream = conns.for_stream - stream0
    for t in workers:
        t.join()
    n = threads * calls
    return {"calls": n, "calls_s": n / wall, "client_cpu_us": cpu / n * 1e6,
            "client_sys_us": system / n * 1e6,
            "voluntary_switches": (r1.ru_nvcsw - r0.ru_nvcsw) / n,
            "involuntary_switches": (r1.ru_nivcsw - r0.ru_nivcsw) / n,
            "voluntary_by_kind": {k: (v - k0.get(k, 0)) / n for k, v in sorted(k1.items())},
            "server_cpu_us": server / n * 1e6, "new_connections": opened,
            "new_stream_connections": stream,
            "warmup_calls": warm["calls"], "warmup_connections": opened0 - first,
            "errors": errors[:5], "error_count": len(errors),
            "warmup_errors": warmup_errors[:3], "warmup_error_count": len(warmup_errors)}


def _floor(url: str, threads: int, calls: int, server_pid: int | None,
           conns: _Connections) -> dict[str, Any]:
    import requests
    from requests.adapters import HTTPAdapter

    session = requests.Session()
    adapter = HTTPAdapter(pool_maxsize=threads)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "bench-floor", "version": "0"}}}
    r = session.post(url, data=json.dumps(init).encode(), headers=_HEADERS)
    r.raise_for_status()
    headers = dict(_HEADERS)
    sid = r.headers.get("Mcp-Session-Id")
    if sid:
        headers["Mcp-Session-Id"] = sid
    headers["MCP-Protocol-Version"] = json.loads(r.content)["result"]["protocolVersion"]
    session.post(url, data=b'{"jsonrpc":"2.0","method":"notifications/initialized"}',
                 headers=headers).close()
    loads, post = json.loads, session.post

    def make_call(k: int) -> Callable[[int], str]:
        bodies = [json.dumps({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
                              "params": {"name": "echo", "arguments": {"text": TEXT % (k, i)}}}
                             ).encode() for i in range(MAX_WARMUP + calls)]

        def call(i: int) -> str:
            reply = loads(post(url, data=bodies[i], headers=headers).content)
            text: str = reply["result"]["content"][0]["text"]
            return text
        return call

    try:
        return _drive(threads, calls, server_pid, conns, make_call)
    finally:
        session.close()


def _mcpsync(url: str, threads: int, calls: int, server_pid: int | None,
             conns: _Connections, era: str, profile: str | None) -> dict[str, Any]:
    import mcpsync

    profiles: list[Any] = []
    if profile:   # one profiler per thread started from now on (the client's and ours)
        import cProfile

        def start(*_: Any) -> None:
            prof = cProfile.Profile(time.thread_time)   # CPU, not waits
            profiles.append(prof)
            prof.enable()
        threading.setprofile(start)
    with mcpsync.connect(url, era=era) as client:
        proto = client.protocol_version

        def make_call(k: int) -> Callable[[int], str]:
            call_tool = client.call_tool

            def call(i: int) -> str:
                return call_tool("echo", {"text": TEXT % (k, i)}).text
            return call

        row = _drive(threads, calls, server_pid, conns, make_call)
    row["protocol_version"] = proto
    row["package"] = os.path.dirname(os.path.dirname(os.path.abspath(mcpsync.__file__)))
    if profile:
        import pstats
        threading.setprofile(None)
        pstats.Stats(*profiles).dump_stats(profile)
    return row


def _child(args: argparse.Namespace) -> None:
    conns = _Connections()
    pid = args.server_pid or None
    if args.child == "floor":
        row = _floor(args.url, args.threads, args.calls, pid, conns)
    else:
        row = _mcpsync(args.url, args.threads, args.calls, pid, conns, args.era, args.profile)
    print(json.dumps(row))


# ---------------------------------------------------------------- the parent

def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _start_server(command: str) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    proc = subprocess.Popen(shlex.split(command.format(port=port)),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 15
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return proc, f"http://127.0.0.1:{port}/mcp"
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise SystemExit(f"the server {command!r} did not listen on port "
                                 f"{port}") from None
            time.sleep(0.05)


def _run_child(client: str, url: str, pid: int | None, args: argparse.Namespace,
               profile: str | None) -> dict[str, Any]:
    env = None
    if client == BASE:   # the same client, importing mcpsync from the baseline folder
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (os.path.abspath(args.baseline), os.environ.get("PYTHONPATH")) if p)}
        client = "mcpsync"
    argv = [sys.executable, HERE, "--child", client, "--url", url, "--threads",
            str(args.threads), "--calls", str(args.calls), "--era", args.era]
    if pid:
        argv += ["--server-pid", str(pid)]
    if profile:
        argv += ["--profile", profile]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False,
                          env=env)
    if done.returncode != 0:
        raise SystemExit(f"the {client} client failed (exit {done.returncode}):\n"
                         f"{done.stderr[-3000:]}")
    row: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return row


def _span(rows: list[dict[str, Any]], key: str, fmt: str) -> str:
    """``median (min-max)`` of one figure over the runs."""
    values = [r[key] for r in rows]
    return f"{fmt % statistics.median(values)} ({fmt % min(values)}-{fmt % max(values)})"


def _most(rows: list[dict[str, Any]]) -> str:
    """The most new connections of any run, with those of mcpsync's GET stream thread (a
    server that refuses the stream with a closing error is asked again on a back-off)."""
    row = max(rows, key=lambda r: r["new_connections"])
    stream = row["new_stream_connections"]
    return f"{row['new_connections']}" + (f" ({stream} GET)" if stream else "")


def _round_ratios(mine: list[dict[str, Any]], floor: list[dict[str, Any]]) -> list[float]:
    """Client CPU per call over the floor's, round by round: the two ran back to back,
    under much the same load, so a load that changes from one round to the next moves
    the ratio less than it moves either figure (one that changes within a round still
    moves it)."""
    return [m["client_cpu_us"] / f["client_cpu_us"] for m, f in zip(mine, floor, strict=True)]


def _ratios(values: list[float]) -> str:
    """``median (min-max)`` of per-round ratios."""
    return (f"median {statistics.median(values):.2f}x ({min(values):.2f}-{max(values):.2f}, "
            f"{len(values)} rounds)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=64)
    parser.add_argument("--calls", type=int, default=100, help="timed calls per thread")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--era", default="legacy", choices=("legacy", "modern", "auto"))
    parser.add_argument("--server", help="server command with {port} (default: the "
                        "harness's floor server, from the HARNESS folder)")
    parser.add_argument("--url", help="an already running server")
    parser.add_argument("--server-pid", type=int, default=0, help="its pid, for its CPU")
    parser.add_argument("--profile", help="write a cProfile of one extra mcpsync run here")
    parser.add_argument("--baseline", help="a folder holding another version's mcpsync "
                        "package, measured in the same runs as mcpsync@base")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--child", choices=CLIENTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args)
        return
    clients = [c for c in args.clients.split(",") if c]
    unknown = sorted(set(clients) - set(CLIENTS))
    if unknown:
        parser.error(f"unknown client {unknown[0]!r}; choose from {', '.join(CLIENTS)}")
    proc = None
    if args.url:
        url, pid = args.url, args.server_pid or None
    else:
        command = args.server
        if command is None:
            harness = os.environ.get("HARNESS")
            script = os.path.join(harness or "", "http_server_bench.py")
            if not harness or not os.path.isfile(script):
                parser.error("set HARNESS to the benchmark harness's folder (it holds "
                             "http_server_bench.py), or pass --server CMD or --url URL")
            command = f"{shlex.quote(sys.executable)} {shlex.quote(script)} --floor-server {{port}}"
        proc, url = _start_server(command)
        pid = proc.pid
    if args.baseline:
        if not os.path.isfile(os.path.join(args.baseline, "mcpsync", "__init__.py")):
            parser.error(f"--baseline {args.baseline}: no mcpsync package in that folder")
        clients.append(BASE)
    rows: dict[str, list[dict[str, Any]]] = {c: [] for c in clients}
    try:
        for rnd in range(args.runs):
            order = clients[rnd % len(clients):] + clients[:rnd % len(clients)]
            for client in order:
                rows[client].append(_run_child(client, url, pid, args, None))
        if args.profile:   # one more run, not counted: the profiler slows it down
            _run_child("mcpsync", url, pid, args, args.profile)
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
    keys = ("calls_s", "client_cpu_us", "client_sys_us", "server_cpu_us", "new_connections",
            "new_stream_connections", "voluntary_switches", "involuntary_switches")
    medians = {c: {k: statistics.median(r[k] for r in rs) for k in keys}
               for c, rs in rows.items()}
    errors = {c: sum(r["error_count"] for r in rs) for c, rs in rows.items()}
    result: dict[str, Any] = {"threads": args.threads, "calls_per_thread": args.calls,
                              "runs": args.runs, "medians": medians, "errors": errors,
                              "rows": rows, "loadavg": os.getloadavg()[0]}
    if "floor" in medians and "mcpsync" in medians:
        result["mcpsync_x_floor_cpu"] = (medians["mcpsync"]["client_cpu_us"]
                                         / medians["floor"]["client_cpu_us"])
        result["mcpsync_x_floor_calls"] = (medians["mcpsync"]["calls_s"]
                                           / medians["floor"]["calls_s"])
        result["mcpsync_round_ratios"] = _round_ratios(rows["mcpsync"], rows["floor"])
    if "floor" in medians and BASE in medians:
        result["base_x_floor_cpu"] = (medians[BASE]["client_cpu_us"]
                                      / medians["floor"]["client_cpu_us"])
        result["base_round_ratios"] = _round_ratios(rows[BASE], rows["floor"])
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{args.threads} threads x {args.calls} calls, {args.runs} runs, medians "
              f"(min-max); load average {result['loadavg']:.2f}")
        print(f"{'client':12s} {'calls/s':>18s} {'client CPU us/call':>24s} "
              f"{'server CPU us/call':>22s} {'new conns':>9s} errors")
        for c, rs in rows.items():
            print(f"{c:12s} {_span(rs, 'calls_s', '%.0f'):>18s} "
                  f"{_span(rs, 'client_cpu_us', '%.1f'):>24s} "
                  f"{_span(rs, 'server_cpu_us', '%.1f'):>22s} "
                  f"{_most(rs):>9s} {errors[c]}")
        print(f"{'':12s} {'context switches/call, voluntary':>34s} {'involuntary':>12s} "
              f"{'system CPU us/call':>20s}")
        for c, rs in rows.items():
            kinds = sorted({k for r in rs for k in r["voluntary_by_kind"]})
            split = ", ".join(
                f"{k} {statistics.median(r['voluntary_by_kind'].get(k, 0.0) for r in rs):.1f}"
                for k in kinds)
            print(f"{c:12s} {_span(rs, 'voluntary_switches', '%.2f'):>34s} "
                  f"{statistics.median(r['involuntary_switches'] for r in rs):>12.2f} "
                  f"{_span(rs, 'client_sys_us', '%.1f'):>20s}  voluntary by thread: {split}")
        if "mcpsync_x_floor_cpu" in result:
            print(f"mcpsync client CPU per call {result['mcpsync_x_floor_cpu']:.2f}x the floor's "
                  f"(medians); per round {_ratios(result['mcpsync_round_ratios'])}; "
                  f"calls/s {result['mcpsync_x_floor_calls']:.2f}x")
        if "base_x_floor_cpu" in result:
            print(f"mcpsync@base client CPU per call {result['base_x_floor_cpu']:.2f}x the "
                  f"floor's (medians); per round {_ratios(result['base_round_ratios'])}")
    if any(errors.values()):
        for client, rs in rows.items():
            for row in rs:
                for text in row["warmup_errors"] + row["errors"]:
                    print(f"error ({client}): {text}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
