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
    python benchmarks/stdio_instructions.py --echo <harness>/echo_server.py --client floor

valgrind runs the process about 50 times slower than it runs natively, so the background
reader's short sleep between two calls (``HANDOFF_GRACE``, 5 ms: about 250 sequential calls
natively) would end every few calls and make it take the reader role in a gap between two
calls, which then costs the next call two thread hand-overs: a native run sees that once in a
few hundred calls, a run under valgrind every few calls, and how often varies with the
machine's load (+-8,000 instructions per call and more between runs). ``--grace`` (default
0.25 s, 50 times 5 ms) sets that sleep in the counted process so that it ends as rarely per
call as natively; ``--grace 0`` counts with the library's own 5 ms.

Each thread is counted apart (``--separate-threads``): besides the whole process, the script
prints what the calling (main) thread alone executes per call, which leaves out the
background reader's wake-ups and so moves much less between runs; a call that had to take
the reader role back from it still pays its part of that hand-over in the main thread.

It prints one line per run, then ``main thread per call: <n>`` and ``instructions per call:
<n>`` (all threads); ``--client floor`` counts
the harness's floor (``floor.py``, beside the echo server) the same way, for the ratio.
Needs ``valgrind``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Any

ECHO_TEXT = "hello"
WARMUP_CALLS = 20


def _loop(echo: str, n: int, grace: float, text: str = ECHO_TEXT,
          poll_first: bool = False) -> None:
    """The harness's ``seq`` loop (benchmarks/mcpsync_client.py), without its clocks.

    ``poll_first``: every read polls before it reads (see ``--poll-first``)."""
    import mcpsync
    import mcpsync.client  # loaded before the loop, as the harness does

    if grace > 0:
        import mcpsync.session._background as background

        vars(background)["HANDOFF_GRACE"] = grace  # see --grace

    with mcpsync.connect([sys.executable, "-S", echo]) as c:
        if poll_first:
            transport: Any = c._session._transport    # a StdioTransport here
            transport._skip_eager = 10**9   # the read-first try never made
        for _ in range(WARMUP_CALLS):
            c.call_tool("echo", {"text": text})
        res = None
        for _ in range(n):
            res = c.call_tool("echo", {"text": text})
        if res is None or res.text != text:
            raise SystemExit(f"echo mismatch: {res!r}")


def _floor(echo: str, n: int) -> None:
    """The harness's floor (``floor.py``: prebuilt lines, raw pipes, ``json.loads``)."""
    sys.path.insert(0, os.path.dirname(echo))
    import floor  # type: ignore[import-not-found]  # the harness's, beside its echo server

    floor.run("seq", n, [sys.executable, "-S", echo])


def _count(echo: str, n: int, pin: str | None, client: str, grace: float,
           text: str = ECHO_TEXT, poll_first: bool = False) -> tuple[int, int]:
    """Total instructions (``Ir``) of one run of the loop with ``n`` timed calls: of the whole
    process, and of its main thread alone (the thread that calls)."""
    with tempfile.TemporaryDirectory(prefix="mcpsync-callgrind-") as tmp:
        out = os.path.join(tmp, "callgrind.out")
        argv = ["valgrind", "--tool=callgrind", "--separate-threads=yes",
                f"--callgrind-out-file={out}",
                sys.executable, os.path.abspath(__file__), "--child", str(n), "--echo", echo,
                "--client", client, "--grace", str(grace), "--text", text]
        if poll_first:
            argv.append("--poll-first")
        if pin is not None and shutil.which("taskset"):
            argv = ["taskset", "-c", pin, *argv]
        # A fixed hash seed: string hashes decide dict and set layouts, and with them a few
        # hundred instructions per call that would otherwise differ from run to run.
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env=env)
        # One file per thread (callgrind.out-01 is the main thread), each with its totals.
        per_thread: dict[int, int] = {}
        for entry in os.listdir(tmp):
            number = re.fullmatch(r"callgrind\.out-(\d+)", entry)
            if number is None:
                continue
            with open(os.path.join(tmp, entry), encoding="utf-8", errors="replace") as f:
                found = re.search(r"^(?:summary|totals): (\d+)", f.read(), re.MULTILINE)
            if found is not None:
                per_thread[int(number.group(1))] = int(found.group(1))
    if 1 not in per_thread:
        raise SystemExit("callgrind wrote no totals")
    return sum(per_thread.values()), per_thread[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--echo", required=True, help="the harness's echo_server.py")
    parser.add_argument("--calls", type=int, default=1200, help="timed calls of the long run")
    parser.add_argument("--base", type=int, default=200, help="timed calls of the short run")
    parser.add_argument("--cpu", default="1", help="CPU to pin to ('' for none)")
    parser.add_argument("--client", choices=("mcpsync", "floor"), default="mcpsync",
                        help="what to count: mcpsync's client or the harness's floor")
    parser.add_argument("--grace", type=float, default=0.25,
                        help="the background reader's short sleep in the counted process, in "
                             "seconds (0: the library's own, 5 ms); see the module docstring")
    parser.add_argument("--text", default=ECHO_TEXT,
                        help="the text each call echoes (Python escapes allowed: "
                             "'hello\\nworld' is a text with a newline)")
    parser.add_argument("--poll-first", action="store_true",
                        help="make every read poll first (natively, most pinned calls do: "
                             "under valgrind the server answers before the read, so the "
                             "read-first try would succeed far more often than natively)")
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    echo = os.path.abspath(args.echo)
    text = args.text.encode("ascii", "backslashreplace").decode("unicode_escape")
    if args.child is not None:
        text = args.text
        if args.client == "floor":
            _floor(echo, args.child)
        else:
            _loop(echo, args.child, args.grace, text, args.poll_first)
        return
    if not os.path.exists(echo):
        raise SystemExit(f"no echo server at {echo}; pass the harness's echo_server.py")
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed; install it (apt-get install valgrind)")
    pin = args.cpu or None
    # One native run first, so that neither counted run pays for compiling bytecode.
    subprocess.run([sys.executable, os.path.abspath(__file__), "--child", "1", "--echo", echo,
                    "--client", args.client], check=True)
    long_run, long_main = _count(echo, args.calls, pin, args.client, args.grace, text,
                                 args.poll_first)
    print(f"{args.client}, {args.calls} calls: {long_run} instructions "
          f"({long_main} in the main thread)", flush=True)
    short_run, short_main = _count(echo, args.base, pin, args.client, args.grace, text,
                                   args.poll_first)
    print(f"{args.client}, {args.base} calls: {short_run} instructions "
          f"({short_main} in the main thread)", flush=True)
    calls = args.calls - args.base
    print(f"main thread per call: {(long_main - short_main) / calls:.0f}")
    print(f"instructions per call: {(long_run - short_run) / calls:.0f}")

if __name__ == "__main__":
    main()
