"""Two Python processes on one CPU: where each process's interpreter code lies, and what
that does to a sequential stdio call.

``seq-1cpu`` pins a client and the server it spawns to one CPU, so that a call is the two
processes' work in turn. Run to run, a process pair lands in one of two states: about 1.6
to 1.7 times slower in the other, for the whole of the process's life, the client and the
server both (see ``docs/performance.md``, "Two Python processes on one CPU"). This script
tells the states apart by one fact about each run: the address of the interpreter's
machine code (the executable mapping of ``libpython``, or of the ``python`` executable on a
static build) in the client and in the server. It runs ``--runs`` pairs one after another,
each a fresh client process pinned to ``--cpu`` (the server inherits the pin), times
``--calls`` sequential calls after a warm-up, and prints each run's wall time and calling
thread CPU per call with the lowest address bit in which the two code addresses differ,
then the runs grouped by whether the two addresses are equal modulo 16 MiB.

``--client mcpsync`` times ``Client.call_tool``; ``--client floor`` the raw-pipe loop of the
cross-SDK harness's floor (a prebuilt request line, ``os.write``, a buffered ``readline``,
``json.loads``). The server is a stdlib-only echo server written to a temporary file, or
``--echo PATH`` (any stdio server with an ``echo`` tool taking ``text``).

``--fixed-layout MIB`` moves the two addresses by hand instead of leaving them to chance:
each pair runs with address-space randomisation off (``personality(ADDR_NO_RANDOMIZE)``,
as ``setarch -R`` does), so that both processes would map their code at the same address,
and the server's stack limit is set to ``MIB`` MiB before it starts, which moves where the
kernel maps its shared objects (the gap it leaves below the stack follows the limit, from
128 MiB up). The printed addresses say where they landed.

Run from the project root::

    python benchmarks/pair_placement.py --runs 60
    python benchmarks/pair_placement.py --runs 60 --client floor --json

Linux only (``/proc/PID/maps``, ``sched_setaffinity``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

WARMUP_CALLS = 300
#: Two code addresses equal modulo this many bytes (and different above) are the slow
#: state's mark on the machine this was found on (see the module docstring).
SAME_MODULO = 1 << 24

ECHO_SERVER = r'''
import json, sys
out = sys.stdout
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    if msg["method"] == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"],
                  "capabilities": {"tools": {}}, "serverInfo": {"name": "echo", "version": "1"}}
    elif msg["method"] == "tools/list":
        result = {"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}
    else:
        text = msg["params"]["arguments"]["text"]
        result = {"content": [{"type": "text", "text": text}]}
    out.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}) + "\n")
    out.flush()
'''


def code_address(pid: int) -> int:
    """Where process ``pid``'s interpreter code starts: the first executable mapping of a
    ``libpython`` shared object, else of the Python executable itself."""
    exe = os.path.realpath(f"/proc/{pid}/exe")
    own = None
    with open(f"/proc/{pid}/maps", encoding="ascii", errors="replace") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) < 6 or "x" not in fields[1]:
                continue
            start = int(fields[0].split("-")[0], 16)
            if "libpython" in os.path.basename(fields[5]):
                return start
            if own is None and fields[5] == exe:
                own = start
    if own is None:
        raise SystemExit(f"pair_placement: no executable mapping of the interpreter in "
                         f"/proc/{pid}/maps")
    return own


def lowest_different_bit(a: int, b: int) -> int | None:
    """The lowest bit in which ``a`` and ``b`` differ (None: they are equal)."""
    x = a ^ b
    return None if x == 0 else (x & -x).bit_length() - 1


def _timed_mcpsync(server: list[str], calls: int) -> tuple[float, float, int]:
    import mcpsync

    with mcpsync.connect(server) as c:
        for _ in range(WARMUP_CALLS):
            c.call_tool("echo", {"text": "x"})
        t0, c0 = time.perf_counter(), time.thread_time()
        res = None
        for _ in range(calls):
            res = c.call_tool("echo", {"text": "x"})
        wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
        if res is None or res.text != "x":
            raise SystemExit(f"pair_placement: echo mismatch: {res!r}")
        transport: Any = c._session._transport    # a StdioTransport here
        pid = transport.pid
        if pid is None:
            raise SystemExit("pair_placement: the client's transport has no process id")
        return wall, cpu, code_address(pid)


def _timed_floor(server: list[str], calls: int) -> tuple[float, float, int]:
    proc = subprocess.Popen(server, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    wfd, readline, loads = proc.stdin.fileno(), proc.stdout.readline, json.loads

    def send(data: bytes) -> None:
        while data:
            data = data[os.write(wfd, data):]

    def line(rid: int) -> bytes:
        return (b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo",'
                b'"arguments":{"text":"x"}}}\n' % rid)

    try:
        send(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "floor", "version": "1"}}}).encode() + b"\n")
        loads(readline())
        send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        for rid in range(1, WARMUP_CALLS + 1):
            send(line(rid))
            loads(readline())
        lines = [line(rid) for rid in range(WARMUP_CALLS + 1, WARMUP_CALLS + 1 + calls)]
        t0, c0 = time.perf_counter(), time.thread_time()
        reply = None
        for one in lines:
            send(one)
            reply = loads(readline())
        wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
        if reply is None or reply["result"]["content"][0]["text"] != "x":
            raise SystemExit(f"pair_placement: echo mismatch: {reply!r}")
        return wall, cpu, code_address(proc.pid)
    finally:
        proc.stdin.close()
        proc.wait()
        proc.stdout.close()


#: Run by the server's interpreter under ``--fixed-layout``: set the stack limit, then
#: start the echo server in a fresh image, whose mappings follow the new limit.
_WITH_STACK = ("import os, resource, sys; n = int(sys.argv[1]) << 20; "
               "resource.setrlimit(resource.RLIMIT_STACK, (n, n)); "
               "os.execv(sys.executable, [sys.executable, sys.argv[2]])")

#: personality(2)'s flag that turns address-space randomisation off for what a process
#: executes next (``setarch -R``).
ADDR_NO_RANDOMIZE = 0x0040000


def _no_randomisation() -> None:
    """In the child before its exec (``preexec_fn``): no address-space randomisation."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.personality(ADDR_NO_RANDOMIZE) == -1:
        raise OSError(ctypes.get_errno(), "personality(ADDR_NO_RANDOMIZE) failed")


def _child(args: argparse.Namespace) -> None:
    """One run, in a process of its own: pinned, timed, both code addresses read."""
    os.sched_setaffinity(0, {args.cpu})
    server = [sys.executable, args.echo]
    if args.fixed_layout is not None:
        server = [sys.executable, "-c", _WITH_STACK, str(args.fixed_layout), args.echo]
    timed = _timed_mcpsync if args.client == "mcpsync" else _timed_floor
    wall, cpu, server_code = timed(server, args.calls)
    print(json.dumps({"us_per_call": wall / args.calls * 1e6,
                      "cpu_us_per_call": cpu / args.calls * 1e6,
                      "client_code": code_address(os.getpid()),
                      "server_code": server_code}))


def _one_run(args: argparse.Namespace, echo: str) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--child", "--client", args.client, "--calls",
            str(args.calls), "--cpu", str(args.cpu), "--echo", echo]
    fixed = args.fixed_layout is not None
    if fixed:
        argv += ["--fixed-layout", str(args.fixed_layout)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False,
                          preexec_fn=_no_randomisation if fixed else None)
    if done.returncode != 0:
        raise SystemExit(f"pair_placement: a run failed ({done.returncode}): "
                         f"{done.stderr.strip()[-2000:]}")
    run: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    bit = lowest_different_bit(run["client_code"], run["server_code"])
    run["lowest_different_bit"] = bit
    run["same_modulo_16mib"] = (run["client_code"] - run["server_code"]) % SAME_MODULO == 0
    run["client_code"] = hex(run["client_code"])
    run["server_code"] = hex(run["server_code"])
    return run


def _group(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The runs' figures by how the two code addresses lie: equal, equal modulo 16 MiB
    only, or different modulo 16 MiB."""
    groups: dict[str, dict[str, Any]] = {}
    picks: tuple[tuple[str, Callable[[dict[str, Any]], bool]], ...] = (
        ("equal", lambda r: r["lowest_different_bit"] is None),
        ("same modulo 16 MiB",
         lambda r: r["same_modulo_16mib"] and r["lowest_different_bit"] is not None),
        ("different modulo 16 MiB", lambda r: not r["same_modulo_16mib"]))
    for name, pick in picks:
        chosen = [r for r in runs if pick(r)]
        if not chosen:
            continue
        walls = [r["us_per_call"] for r in chosen]
        cpus = [r["cpu_us_per_call"] for r in chosen]
        groups[name] = {"runs": len(chosen),
                        "median_us": statistics.median(walls),
                        "min_us": min(walls), "max_us": max(walls),
                        "median_cpu_us": statistics.median(cpus),
                        "min_cpu_us": min(cpus), "max_cpu_us": max(cpus)}
    return groups


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=40, help="process pairs (default 40)")
    parser.add_argument("--calls", type=int, default=3000,
                        help="timed calls per run, after 300 warm-up calls (default 3000)")
    parser.add_argument("--cpu", type=int, default=None,
                        help="the CPU to pin each pair to (default: the lowest allowed, "
                             "as the harness's seq-1cpu does)")
    parser.add_argument("--client", choices=("mcpsync", "floor"), default="mcpsync")
    parser.add_argument("--echo", default=None,
                        help="a stdio echo server script (default: a built-in one)")
    parser.add_argument("--fixed-layout", type=int, default=None, metavar="MIB",
                        help="address randomisation off, the server's stack limit MIB MiB "
                             "(moves its code; see the module docstring)")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not hasattr(os, "sched_setaffinity") or not Path("/proc/self/maps").exists():
        raise SystemExit("pair_placement: needs Linux (sched_setaffinity, /proc/PID/maps)")
    if args.cpu is None:
        args.cpu = min(os.sched_getaffinity(0))
    if args.child:
        _child(args)
        return
    if args.runs < 1 or args.calls < 1:
        raise SystemExit("pair_placement: --runs and --calls must be at least 1")
    if args.fixed_layout is not None and args.fixed_layout < 8:
        raise SystemExit("pair_placement: --fixed-layout takes a stack limit of at least "
                         "8 MiB")
    with tempfile.TemporaryDirectory(prefix="mcpsync-pair-") as tmp:
        echo = args.echo
        if echo is None:
            echo = str(Path(tmp) / "echo_server.py")
            Path(echo).write_text(ECHO_SERVER, encoding="utf-8")
        elif not Path(echo).is_file():
            raise SystemExit(f"pair_placement: --echo {echo}: no such file")
        runs = []
        for index in range(args.runs):
            run = _one_run(args, echo)
            runs.append(run)
            if not args.json:
                bit = run["lowest_different_bit"]
                print(f"run {index + 1:3d}: {run['us_per_call']:6.1f} us/call, "
                      f"CPU {run['cpu_us_per_call']:5.1f} us; code addresses "
                      f"{run['client_code']} and {run['server_code']}, "
                      f"{'equal' if bit is None else f'first differ at bit {bit}'}",
                      flush=True)
    result = {"client": args.client, "cpu": args.cpu, "calls": args.calls,
              "fixed_layout_mib": args.fixed_layout, "runs": runs, "groups": _group(runs)}
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(f"\n{args.client}, {args.runs} runs on CPU {args.cpu}, {args.calls} calls each:")
    for name, g in result["groups"].items():
        print(f"  {name:24s} {g['runs']:3d} runs: median {g['median_us']:.1f} us/call "
              f"({g['min_us']:.1f}-{g['max_us']:.1f}), CPU {g['median_cpu_us']:.1f} us "
              f"({g['min_cpu_us']:.1f}-{g['max_cpu_us']:.1f})")


if __name__ == "__main__":
    main()
