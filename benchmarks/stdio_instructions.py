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
``--client minimal`` counts about the least a correct single-threaded client does per call
(its request line built from the arguments, a poll bounded by a deadline, the answer's id
matched, a small result object: see ``_minimal``), and ``--client minimal-prebuilt`` the
same with the floor's kind of prebuilt request line: what lies between the floor and any
client. Needs ``valgrind``.
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


def _minimal(echo: str, n: int, text: str = ECHO_TEXT, prebuilt: bool = False) -> None:
    """About the least a correct single-threaded client does per call (not a design, a
    measure of what the floor leaves out): the request line built from its id and the
    arguments (a piece cached per tool name and the stdlib's C encoder on the arguments, the
    same bytes as mcpsync's serializer writes), a poll bounded by the call's deadline, the
    answer decoded as strict UTF-8 (a read that brings exactly one line straight from the
    read, anything else through a buffer) and its id matched, a small result object made.
    No threads, no locks, no notifications handled, no cancellation.

    ``prebuilt``: the request line made by ``%``-formatting the id into a prebuilt line, as
    the floor's are, instead; the rest as above.

    ``json.loads`` is given ``str``: given ``bytes`` it first guesses their encoding in
    Python code, about 6,400 instructions per call here (mcpsync decodes strict UTF-8
    itself)."""
    import json
    import select
    import time

    from mcpsync.jsonrpc import _c_chunks, _encode_str

    assert _c_chunks is not None, "the stdlib's C JSON encoder is needed"
    chunks = _c_chunks
    proc = subprocess.Popen([sys.executable, "-S", echo], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    wfd, rfd = proc.stdin.fileno(), proc.stdout.fileno()
    poller = select.poll()
    poller.register(rfd, select.POLLIN)
    buf = bytearray()
    loads, monotonic = json.loads, time.monotonic

    class Result:
        __slots__ = ("content", "is_error", "structured", "text")
        content: list[Any]
        is_error: bool
        structured: Any
        text: str | None

    def answer(rid: int, timeout: float) -> dict[str, Any]:
        deadline = 0.0
        left = timeout
        while True:
            nl = buf.find(b"\n")
            if nl >= 0:
                msg = loads(buf[:nl].decode())
                del buf[:nl + 1]
                if type(msg) is dict and msg.get("id") == rid:
                    return msg
                continue    # a notification, or another id: not this call's
            if deadline:
                left = deadline - monotonic()
                if left <= 0:
                    raise TimeoutError(f"no answer to request {rid}")
            else:
                deadline = monotonic() + timeout
            if not poller.poll(left * 1000):
                continue
            chunk = os.read(rfd, 65536)
            if not chunk:
                raise EOFError("the server closed its stdout")
            if not buf and chunk.find(b"\n") == len(chunk) - 1:
                msg = loads(chunk.decode())
                if type(msg) is dict and msg.get("id") == rid:
                    return msg
                continue
            buf.extend(chunk)

    os.write(wfd, (json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "minimal", "version": "1"}}}) + "\n").encode())
    answer(0, 30.0)
    os.write(wfd, b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
    rid = 0
    line = (b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo",'
            b'"arguments":' + json.dumps({"text": text}).encode() + b'}}\n')

    heads: dict[str, bytes] = {}
    join = "".join

    def call_tool(name: str, arguments: dict[str, Any], timeout: float = 30.0) -> Result:
        nonlocal rid
        rid += 1
        if prebuilt:
            os.write(wfd, line % rid)
        else:
            head = heads.get(name)
            if head is None:
                head = heads[name] = (',"method":"tools/call","params":{"name":'
                                      + _encode_str(name) + ',"arguments":').encode()
            os.write(wfd, b'{"jsonrpc":"2.0","id":%d%b%b}}\n'
                     % (rid, head, join(chunks(arguments, 0)).encode()))
        msg = answer(rid, timeout)
        res = msg["result"]
        out = Result()
        out.content = content = res.get("content", [])
        out.structured = res.get("structuredContent")
        out.is_error = res.get("isError") is True
        first = content[0] if content else None
        out.text = first.get("text") if first and first.get("type") == "text" else None
        return out

    for _ in range(WARMUP_CALLS):
        call_tool("echo", {"text": text})
    res = None
    for _ in range(n):
        res = call_tool("echo", {"text": text})
    if res is None or res.text != text:
        raise SystemExit(f"echo mismatch: {None if res is None else res.text!r}")
    os.close(wfd)
    proc.stdin = None   # closed above
    proc.wait()
    proc.stdout.close()


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
    parser.add_argument("--client", choices=("mcpsync", "floor", "minimal", "minimal-prebuilt"),
                        default="mcpsync",
                        help="what to count: mcpsync's client, the harness's floor, or a "
                             "minimal single-threaded client (see _minimal) building its "
                             "request lines or formatting prebuilt ones")
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
        elif args.client.startswith("minimal"):
            _minimal(echo, args.child, text, prebuilt=args.client == "minimal-prebuilt")
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
