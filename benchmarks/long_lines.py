"""How long the frame decoder takes over one ``tools/call`` answer, short and long.

A stdio server's answer longer than a pipe's 64 KiB reaches the client in several reads and
is decoded by the general path once its newline is in; a short one in one read, by the
decoder's fast path. This feeds a :class:`mcpsync.jsonrpc.FrameDecoder` each answer in
reads of 64 KiB (as a pipe delivers it) and prints the best time per answer over five
repeats, for texts without escapes, with ``\\n`` escapes and with ``\\u00e9`` escapes. With
``--baseline DIR`` (a folder holding another version's ``mcpsync`` package) that version is
timed too, each in its own process, in turn, ``--rounds`` times. Run from the project root::

    python benchmarks/long_lines.py [--rounds 3] [--baseline DIR] [--quick]

``--quick`` times each answer a few times only (a smoke test of the script, not a figure).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CASES = [
    ("1 MB, no escape", "x" * 1_000_000),
    ("1 MB, 12,500 lines (\\n)", ("y" * 79 + "\n") * 12_500),
    ("1 MB, 12,500 x \\u00e9", ("y" * 79 + "\u00e9") * 12_500),
    ("5 KB, 64 lines (\\n)", ("y" * 79 + "\n") * 64),
    ("300 B, no escape", "hello world" * 25),
    ("300 B, \\n escapes", "hello\nworld" * 25),
]


def _line(text: str) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 7, "result": {"content": [
        {"type": "text", "text": text}]}}).encode() + b"\n"


def _worker(quick: bool) -> None:
    from mcpsync.jsonrpc import FrameDecoder, Message

    for name, text in CASES:
        line = _line(text)
        decoder = FrameDecoder(max_frame_bytes=1 << 26)
        chunks = [line[i:i + 65536] for i in range(0, len(line), 65536)]

        def feed(decoder: FrameDecoder = decoder, chunks: list[bytes] = chunks) -> None:
            frames = [f for chunk in chunks for f in decoder.feed(chunk)]
            assert len(frames) == 1 and isinstance(frames[0], Message)

        number = 40 if len(line) > 100_000 else 2_000 if len(line) > 2_000 else 20_000
        if quick:
            number = 2
        best = min(timeit.repeat(feed, number=number, repeat=1 if quick else 5)) / number
        print(json.dumps([name, best * 1e6]))


def _run(tree: Path, quick: bool) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    argv = [sys.executable, __file__, "--worker", *(["--quick"] if quick else [])]
    out = subprocess.run(argv, env=env, check=True, capture_output=True, text=True).stdout
    return {name: us for name, us in map(json.loads, out.splitlines())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", type=Path)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(args.quick)
        return
    trees = {"this tree": ROOT}
    if args.baseline is not None:
        trees["baseline"] = args.baseline.resolve()
    best: dict[str, dict[str, float]] = {label: {} for label in trees}
    for _ in range(args.rounds):
        for label, tree in trees.items():
            for name, us in _run(tree, args.quick).items():
                best[label][name] = min(us, best[label].get(name, us))
    print(f"{'answer':32}" + "".join(f"{label:>14}" for label in trees) + "  (us, best)")
    for name, _text in CASES:
        print(f"{name:32}" + "".join(f"{best[label][name]:14.2f}" for label in trees))


if __name__ == "__main__":
    main()
