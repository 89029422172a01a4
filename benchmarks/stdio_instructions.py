"""Instructions per sequential ``call_tool`` over stdio, counted by valgrind's callgrind.

Wall time and even CPU time move with the load of a shared machine; the number of
instructions the client process executes per call barely does. This runs the cross-SDK
harness's sequential loop (connect, 20 warm-up calls, N ``tools/call echo``, close) against
the harness's ``echo_server.py`` under ``valgrind --tool=callgrind`` twice, with ``--calls``
and ``--base`` timed calls, and prints the difference of the two totals divided by the
difference of the call counts: start-up, import, the handshake, the warm-up and the close
cancel out. Only the client process is counted (the server is not traced). Both runs are
pinned to one CPU with ``taskset`` (as the harness's ``seq-1cpu`` scenario does) when it is
available.

Run from the project root::

    python benchmarks/stdio_instructions.py --echo <harness>/echo_server.py
    python benchmarks/stdio_instructions.py --echo <harness>/echo_server.py --calls 1200 --base 200

It prints one line per run and then ``instructions per call: <n>``. Needs ``valgrind``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

ECHO_TEXT = "hello"
WARMUP_CALLS = 20


def _loop(echo: str, n: int) -> None:
    """The harness's ``seq`` loop (benchmarks/mcpsync_client.py), without its clocks."""
    import mcpsync
    import mcpsync.client  # loaded before the loop, as the harness does

    with mcpsync.connect([sys.executable, "-S", echo]) as c:
        for _ in range(WARMUP_CALLS):
            c.call_tool("echo", {"text": ECHO_TEXT})
        res = None
        for _ in range(n):
            res = c.call_tool("echo", {"text": ECHO_TEXT})
        if res is None or res.text != ECHO_TEXT:
            raise SystemExit(f"echo mismatch: {res!r}")


def _count(echo: str, n: int, pin: str | None) -> int:
    """Total instructions (``Ir``) of one run of the loop with ``n`` timed calls."""
    with tempfile.TemporaryDirectory(prefix="mcpsync-callgrind-") as tmp:
        out = os.path.join(tmp, "callgrind.out")
        argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                sys.executable, os.path.abspath(__file__), "--child", str(n), "--echo", echo]
        if pin is not None and shutil.which("taskset"):
            argv = ["taskset", "-c", pin, *argv]
        # A fixed hash seed: string hashes decide dict and set layouts, and with them a few
        # hundred instructions per call that would otherwise differ from run to run.
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env=env)
        with open(out, encoding="utf-8", errors="replace") as f:
            text = f.read()
    found = re.search(r"^(?:summary|totals): (\d+)", text, re.MULTILINE)
    if found is None:
        raise SystemExit("callgrind wrote no totals")
    return int(found.group(1))


def main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    default_echo = os.path.join(here, "..", "..", "shared", "bench", "echo_server.py")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--echo", default=default_echo, help="the harness's echo_server.py")
    parser.add_argument("--calls", type=int, default=1200, help="timed calls of the long run")
    parser.add_argument("--base", type=int, default=200, help="timed calls of the short run")
    parser.add_argument("--cpu", default="1", help="CPU to pin to ('' for none)")
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    echo = os.path.abspath(args.echo)
    if args.child is not None:
        _loop(echo, args.child)
        return
    if not os.path.exists(echo):
        raise SystemExit(f"no echo server at {echo}; pass --echo <harness>/echo_server.py")
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed; install it (apt-get install valgrind)")
    pin = args.cpu or None
    long_run = _count(echo, args.calls, pin)
    print(f"{args.calls} calls: {long_run} instructions", flush=True)
    short_run = _count(echo, args.base, pin)
    print(f"{args.base} calls: {short_run} instructions", flush=True)
    print(f"instructions per call: {(long_run - short_run) / (args.calls - args.base):.0f}")


if __name__ == "__main__":
    main()
