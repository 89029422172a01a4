"""Two Python processes on one CPU: where each process's interpreter code lies, and what
that does to a sequential stdio call.

``seq-1cpu`` pins a client and the server it spawns to one CPU, so that a call is the two
processes' work in turn. On the machine this was found on (an Intel Xeon VM, Linux 6.18),
about one pair in eight runs 1.5 to 1.8 times slower than the others, client and server
both, for the whole of their lives: the pairs whose interpreter code lies at addresses
that first differ in a bit from 24 to 30, that is, equal modulo 16 MiB but not equal (see
``docs/performance.md``, "Two Python processes on one CPU"). This script reads that fact
for each run: the address of the interpreter's machine code (the executable mapping of
``libpython``, or of the ``python`` executable on a static build) in the client and in the
server. It runs ``--runs`` pairs one after another, each a fresh client process pinned to
``--cpu`` (the server inherits the pin), times ``--calls`` sequential calls after a
warm-up, and prints each run's wall time and calling thread CPU per call with the lowest
bit in which the two code addresses differ, then the runs grouped by that bit. It runs on
any Linux machine; what it finds depends on the CPU and on how the kernel places shared
objects (this one maps ``libpython`` 2 MiB-aligned, leaving three random address bits
below 16 MiB).

``--client mcpsync`` times ``Client.call_tool``; ``--client floor`` the raw-pipe loop of the
cross-SDK harness's floor (a prebuilt request line, ``os.write``, a buffered ``readline``,
``json.loads``). The server is a stdlib-only echo server written to a temporary file, or
``--echo PATH`` (a Python script: any stdio server with an ``echo`` tool taking ``text``).

``--fixed-layout MIB`` sets the distance by hand instead of leaving it to chance: each pair
runs with address-space randomisation off (``personality(ADDR_NO_RANDOMIZE)``, as
``setarch -R`` does), the client with a stack limit of 8 MiB and the server with ``MIB``
MiB. The kernel leaves a gap below the stack that follows the limit from 128 MiB up, so
the server maps its shared objects that much lower (on this kernel, in 2 MiB steps: a
limit of 128 puts the server's code 2 MiB below the client's, 142 puts it 16 MiB below, 8
leaves the two equal). The printed addresses say where they landed. Some sandboxes
(Docker's default seccomp profile) refuse the ``personality`` call; the script then says
so.

Run from the project root::

    python benchmarks/pair_placement.py --runs 60
    python benchmarks/pair_placement.py --runs 60 --client floor --json
    python benchmarks/pair_placement.py --runs 3 --fixed-layout 142

Linux only (``/proc/PID/maps``, ``sched_setaffinity``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

WARMUP_CALLS = 300
#: The lowest differing bits of the two code addresses that marked the slow pairs on the
#: machine this was found on (see the module docstring): 24 to 30.
SLOW_BITS = range(24, 31)
#: The client's stack limit under ``--fixed-layout`` (bytes): under the 128 MiB from which
#: the kernel's gap follows the limit, so the client's layout is the kernel's default.
CLIENT_STACK = 8 << 20
#: The longest one run may take (seconds).
RUN_TIMEOUT = 300

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
    # The shared library this interpreter was built to load (a ".a" name on a static
    # build, which no mapping has): both processes run the same interpreter.
    soname = sysconfig.get_config_var("INSTSONAME") or ""
    own = None
    with open(f"/proc/{pid}/maps", encoding="ascii", errors="replace") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) < 6 or "x" not in fields[1]:
                continue
            start = int(fields[0].split("-")[0], 16)
            path = fields[5].strip()
            if soname and os.path.basename(path) == soname:
                return start
            if own is None and path == exe:
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
    wfd, readline = proc.stdin.fileno(), proc.stdout.readline

    def send(data: bytes) -> None:
        while data:
            data = data[os.write(wfd, data):]

    def line(rid: int) -> bytes:
        return (b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo",'
                b'"arguments":{"text":"x"}}}\n' % rid)

    try:
        return _floor_loop(proc.pid, send, readline, line, calls)
    except json.JSONDecodeError as exc:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(1.0)
        raise SystemExit(f"pair_placement: the server {' '.join(server)} answered with a "
                         f"line that is not JSON (exit status {proc.returncode}; empty: "
                         f"it closed its stdout): {exc}") from None
    finally:
        proc.stdin.close()
        proc.wait()
        proc.stdout.close()


def _floor_loop(pid: int, send: Callable[[bytes], None], readline: Callable[[], bytes],
                line: Callable[[int], bytes], calls: int) -> tuple[float, float, int]:
    """The floor's handshake, warm-up and timed loop (the timed loop as the harness's)."""
    loads = json.loads
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
    return wall, cpu, code_address(pid)


#: Run by the server's interpreter under ``--fixed-layout``: set the stack limit, then
#: start the echo server in a fresh image, whose mappings follow the new limit.
_WITH_STACK = ("import os, resource, sys; n = int(sys.argv[1]) << 20; "
               "resource.setrlimit(resource.RLIMIT_STACK, (n, n)); "
               "os.execv(sys.executable, [sys.executable, sys.argv[2]])")

#: personality(2)'s flag that turns address-space randomisation off for what a process
#: executes next (``setarch -R``).
ADDR_NO_RANDOMIZE = 0x0040000
#: personality(2)'s argument that only asks for the current persona.
_QUERY = 0xFFFFFFFF


def _fixed_layout_start(mib: int) -> Callable[[], None]:
    """Check, in this process, that the server's stack limit ``mib`` can be set and that
    ``personality(ADDR_NO_RANDOMIZE)`` is allowed (and put the persona back); return what
    each client process runs before its exec: that flag added to its persona, and its stack
    limit set to ``CLIENT_STACK``."""
    import ctypes
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_STACK)
    if mib < 8 or (hard != resource.RLIM_INFINITY and mib << 20 > hard):
        raise SystemExit(f"pair_placement: --fixed-layout {mib}: takes a stack limit of at "
                         f"least 8 MiB and at most the hard limit (ulimit -Hs)")
    libc = ctypes.CDLL(None, use_errno=True)
    personality = libc.personality
    personality.argtypes = [ctypes.c_ulong]
    personality.restype = ctypes.c_int
    current = personality(_QUERY)
    if current == -1 or personality(current | ADDR_NO_RANDOMIZE) == -1:
        err = ctypes.get_errno()
        raise SystemExit(f"pair_placement: --fixed-layout needs personality(ADDR_NO_RANDOMIZE), "
                         f"which was refused ({os.strerror(err)}); a sandbox's system call "
                         f"filter (Docker's default seccomp profile) does that")
    personality(current)
    client_stack = CLIENT_STACK if hard == resource.RLIM_INFINITY else min(CLIENT_STACK, hard)
    flags = current | ADDR_NO_RANDOMIZE

    def before_exec() -> None:
        if personality(flags) == -1:
            raise OSError(ctypes.get_errno(), "personality(ADDR_NO_RANDOMIZE) refused")
        resource.setrlimit(resource.RLIMIT_STACK, (client_stack, hard))

    return before_exec


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


def _one_run(args: argparse.Namespace, echo: str,
             before_exec: Callable[[], None] | None) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--child", "--client", args.client, "--calls",
            str(args.calls), "--cpu", str(args.cpu), "--echo", echo]
    if args.fixed_layout is not None:
        argv += ["--fixed-layout", str(args.fixed_layout)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT,
                              check=False, preexec_fn=before_exec)
    except subprocess.TimeoutExpired:
        raise SystemExit(f"pair_placement: a run took over {RUN_TIMEOUT} s "
                         f"({args.calls} calls); a server that does not answer?") from None
    if done.returncode != 0:
        raise SystemExit(f"pair_placement: a run failed ({done.returncode}): "
                         f"{done.stderr.strip()[-2000:]}")
    run: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    bit = lowest_different_bit(run["client_code"], run["server_code"])
    run["lowest_different_bit"] = bit
    run["slow_mark"] = bit in SLOW_BITS
    run["client_code"] = hex(run["client_code"])
    run["server_code"] = hex(run["server_code"])
    return run


def _group(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The runs' figures by the lowest bit in which the two code addresses differ."""
    groups: dict[str, dict[str, Any]] = {}
    picks: tuple[tuple[str, Callable[[int | None], bool]], ...] = (
        ("equal", lambda bit: bit is None),
        ("first differ below bit 24", lambda bit: bit is not None and bit < SLOW_BITS.start),
        ("first differ in bits 24-30", lambda bit: bit in SLOW_BITS),
        ("first differ at bit 31+", lambda bit: bit is not None and bit >= SLOW_BITS.stop))
    for name, pick in picks:
        chosen = [r for r in runs if pick(r["lowest_different_bit"])]
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
                        help="address randomisation off, the client's stack limit 8 MiB "
                             "and the server's MIB MiB (moves the server's code; see the "
                             "module docstring)")
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
    if args.cpu not in os.sched_getaffinity(0):
        raise SystemExit(f"pair_placement: --cpu {args.cpu} is not one this process may run "
                         f"on ({sorted(os.sched_getaffinity(0))})")
    before_exec = None
    if args.fixed_layout is not None:
        before_exec = _fixed_layout_start(args.fixed_layout)
    with tempfile.TemporaryDirectory(prefix="mcpsync-pair-") as tmp:
        echo = args.echo
        if echo is None:
            echo = str(Path(tmp) / "echo_server.py")
            Path(echo).write_text(ECHO_SERVER, encoding="utf-8")
        elif not Path(echo).is_file():
            raise SystemExit(f"pair_placement: --echo {echo}: no such file")
        runs = []
        for index in range(args.runs):
            run = _one_run(args, echo, before_exec)
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
        print(f"  {name:27s} {g['runs']:3d} runs: median {g['median_us']:.1f} us/call "
              f"({g['min_us']:.1f}-{g['max_us']:.1f}), CPU {g['median_cpu_us']:.1f} us "
              f"({g['min_cpu_us']:.1f}-{g['max_cpu_us']:.1f})")


if __name__ == "__main__":
    main()
