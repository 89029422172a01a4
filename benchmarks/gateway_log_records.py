"""The traffic log's own work per frame: what the log's helper process spends on a record.

``mcpsync gateway --log FILE`` ships each forwarded frame's bytes to a helper process, which
decodes it and writes its two records (one per leg) at ``summary`` detail
(``Inspector.write_batch``). This times that step alone, in this process, for the frames of
``benchmarks/gateway_latency.py``: a ``tools/call`` of ``echo`` as our client sends it and
the demo server's answer, in batches of 200 calls as the helper gets them at about 50 us per
call. It prints the thread CPU time per frame (the minimum over ``--runs`` runs of
``--batches`` batches each, so other jobs on the machine inflate it little), for this tree
and, with ``--baseline DIR`` (a copy of another version's ``mcpsync`` package directory's
parent), for that version too, each in its own process, run one after the other in turn.
``--instructions`` counts instead the instructions per frame under ``valgrind
--tool=callgrind`` (a run of ``--batches`` batches and one of 5x as many, the difference),
which load does not move. Run from the project root::

    .venv/bin/python benchmarks/gateway_log_records.py [--runs N] [--batches N] [--baseline DIR]
    .venv/bin/python benchmarks/gateway_log_records.py --instructions [--baseline DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CALLS = 200   # calls per batch: what gathers in the log thread's 10 ms at 50 us per call
TO_UPSTREAM = ("host->gateway", "gateway->upstream")
TO_HOST = ("upstream->gateway", "gateway->host")
# The frames as they cross the gateway (the client's request carries its _meta, the demo's
# answer its resultType and _meta).
REQUEST = ('{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo",'
           '"arguments":{"text":"x%d"},"_meta":{"io.modelcontextprotocol/protocolVersion":'
           '"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},'
           '"io.modelcontextprotocol/clientInfo":{"name":"mcpsync","version":"0.1.0"}}}}')
ANSWER = ('{"jsonrpc":"2.0","id":%d,"result":{"content":[{"type":"text","text":"x%d"}],'
          '"resultType":"complete","_meta":{"io.modelcontextprotocol/serverInfo":'
          '{"name":"mcpsync-demo","version":"0.1.0"}}}}')


def _batch(first: int) -> list[tuple[Any, ...]]:
    """One batch as ``Inspector.record_line`` queues it (legs, line, upstream, wall time,
    clock, session), request and answer in turn."""
    wall, now = time.time(), time.monotonic()
    out: list[tuple[Any, ...]] = []
    for i in range(first, first + CALLS):
        out.append((TO_UPSTREAM, (REQUEST % (i, i)).encode(), "demo", wall, now, None))
        out.append((TO_HOST, (ANSWER % (i, i)).encode(), "demo", wall, now + 5e-5, None))
    return out


def measure(batches: int) -> float:
    """CPU microseconds per frame of ``write_batch`` over ``batches`` batches (this
    process's ``mcpsync``)."""
    from mcpsync.gateway._inspector import Inspector
    with tempfile.TemporaryDirectory(prefix="mcpsync-logrec-") as tmp:
        inspector = Inspector(os.path.join(tmp, "gateway.log"))
        inspector.write_batch(_batch(0), 0)   # warm: caches of names and shapes
        # One batch written again and again (each answer takes its request out of the
        # pairing table again): building it is not counted, even in instructions.
        batch = _batch(CALLS)
        start = time.thread_time()
        for _ in range(batches):
            inspector.write_batch(batch, 0)
        spent = time.thread_time() - start
        inspector.close()
    return spent / (batches * CALLS * 2) * 1e6


def _child(root: str | None, batches: int, valgrind: list[str] | None = None) -> float:
    code = ("import sys; sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[2]); "
            "import gateway_log_records as m; print(m.measure(int(sys.argv[3])))")
    out = subprocess.run([*(valgrind or []), sys.executable, "-c", code,
                          root or str(HERE.parent), str(HERE), str(batches)], check=True,
                         capture_output=True, text=True, cwd=str(HERE.parent))
    return float(out.stdout.split()[-1])


def _instructions(root: str | None, batches: int) -> float:
    """Instructions per frame of ``write_batch``: a run of 5x ``batches`` batches minus one
    of ``batches``, so start-up and the warm-up drop out."""
    counts = []
    with tempfile.TemporaryDirectory(prefix="mcpsync-logrec-") as tmp:
        out = Path(tmp) / "cg"
        for n in (batches, batches * 5):
            _child(root, n, ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"])
            found = re.search(r"^(?:totals|summary):\s*(\d+)",
                              out.read_text(errors="replace"), re.M)
            if found is None:
                raise RuntimeError("callgrind wrote no totals (is valgrind installed?)")
            counts.append(int(found.group(1)))
    return (counts[1] - counts[0]) / (batches * 4 * CALLS * 2)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--baseline", metavar="DIR")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--instructions", action="store_true",
                        help="count instructions per frame under callgrind instead")
    args = parser.parse_args(argv)
    versions = {"this tree": None} | ({"baseline": args.baseline} if args.baseline else {})
    if args.instructions:
        counted = {name: _instructions(root, args.batches) for name, root in versions.items()}
        if args.json:
            print(json.dumps(counted))
        else:
            print(f"instructions per frame of the log's records (write_batch, summary, "
                  f"{args.batches} and {args.batches * 5} batches of {CALLS} calls, the "
                  f"difference)")
            for name, count in counted.items():
                print(f"{name:10s} {count:9.0f}")
        return 0
    runs: dict[str, list[float]] = {name: [] for name in versions}
    for _ in range(args.runs):
        for name, root in versions.items():
            runs[name].append(_child(root, args.batches))
    if args.json:
        print(json.dumps(runs))
        return 0
    print(f"CPU us per frame of the log's records (write_batch, summary, {CALLS} calls per "
          f"batch, {args.batches} batches per run): min / median over {args.runs} runs")
    for name, got in runs.items():
        ordered = sorted(got)
        print(f"{name:10s} {ordered[0]:6.2f} / {ordered[len(ordered) // 2]:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
