"""The cross-SDK HTTP server benchmark, counting the CPU of the server's whole process tree.

The harness's ``http_server_bench.py`` (kept outside this repository, see
docs/performance.md) reads the CPU of the process it started. gunicorn serves from a worker
process that its master forks, so that figure would be the idle master's. This runs the same
harness, unchanged otherwise, with the CPU read summed over the started process and its
descendants, which for a single-process server (the floor, the built-in server) is the same
number.

Usage, from the project root::

    HARNESS=<harness> MCPSYNC_SERVER="gunicorn -k gthread -w 1 --threads 16 \
        -b 127.0.0.1:{port} --chdir benchmarks mcpsync_echo_wsgi:application" \
        .venv/bin/python benchmarks/http_server_tree.py 300 8
"""

from __future__ import annotations

import os
import sys
from typing import Any

sys.path.insert(0, os.environ.get("HARNESS", "."))
import http_server_bench as harness  # found through HARNESS


def _tree(pid: int) -> list[int]:
    """``pid`` and every descendant, read from /proc."""
    pids, todo = [], [pid]
    while todo:
        current = todo.pop()
        pids.append(current)
        try:
            with open(f"/proc/{current}/task/{current}/children") as f:
                todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return pids


def _cpu(proc: Any) -> float:
    if proc is None:
        return 0.0
    total = 0.0
    for pid in _tree(proc.pid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


if __name__ == "__main__":
    harness._cpu = _cpu
    harness.main()
