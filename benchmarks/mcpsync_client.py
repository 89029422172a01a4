"""mcpsync as a client of the cross-SDK benchmark harness, which is kept outside this
repository (see docs/performance.md; ``<harness>`` below is where it is checked out).

Run from the project root, with the harness's requirements and mcpsync in one venv::

    CLIENTS=floor,official_sdk,mcpsync_client BENCH_PATH=benchmarks \
        PY=.venv-bench/bin/python <harness>/run_all.sh \
        --scenarios seq,seq-1cpu,concurrent,naive-sync

The HTTP modes (``http-seq``, ``http-concurrent``) connect to the harness's ``http_server.py``
URL with ``mcpsync.connect(url)`` (era detection on, as a user would run it)::

    CLIENTS=floor,official_sdk,mcpsync_client BENCH_PATH=benchmarks RUNS=1 \
        PY=.venv-bench/bin/python <harness>/run_all.sh --scenarios http-seq,http-concurrent

With ``MCPSYNC_BENCH_LISTED=1`` in the environment the sequential modes list the tools once
before the warm-up, so every timed ``call_tool`` runs its check against the cached list.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from _common import CONCURRENCY, ECHO_TEXT, SLEEP_MS, WARMUP_CALLS, check_echo, cpu, now, result

import mcpsync

# Load the client now, so the harness counts it in "import ms" (as it counts the other SDKs'
# imports) rather than inside the first timed connect: mcpsync loads its modules lazily.
import mcpsync.client

LABEL = "mcpsync"
# MCPSYNC_BENCH_LISTED=1: list the tools once before the warm-up calls of a sequential mode.
_LISTED = os.environ.get("MCPSYNC_BENCH_LISTED") == "1"
MODES = ("seq", "concurrent", "naive-sync", "http-seq", "http-concurrent")


def _connect(server: Any) -> mcpsync.Client:
    if isinstance(server, str):   # the http-* modes get the endpoint URL
        return mcpsync.connect(server)
    return mcpsync.connect(list(server))


def run(mode: str, n: int, server: Any) -> dict[str, Any]:
    if mode == "naive-sync":
        t1, c1 = now(), cpu()
        for _ in range(n):
            with _connect(server) as c:
                check_echo(c.call_tool("echo", {"text": ECHO_TEXT}).text)
        return result(n, now() - t1, cpu_s=cpu() - c1)
    t0 = now()
    with _connect(server) as c:
        setup_ms = (now() - t0) * 1e3
        proto = c.protocol_version
        if mode in ("concurrent", "http-concurrent"):
            c.call_tool("sleep", {"ms": 0})
            batch_ms: list[float] = []
            with ThreadPoolExecutor(CONCURRENCY) as pool:
                t1, c1 = now(), cpu()
                for _ in range(n):
                    tb = now()
                    list(pool.map(lambda _: c.call_tool("sleep", {"ms": SLEEP_MS}),
                                  range(CONCURRENCY)))
                    batch_ms.append((now() - tb) * 1e3)
                return result(n * CONCURRENCY, now() - t1, cpu_s=cpu() - c1,
                              batch_ms=batch_ms, setup_ms=setup_ms, protocol_version=proto)
        if _LISTED:   # cache the tool list, so call_tool's argument check runs on every call
            c.list_tools()
        for _ in range(WARMUP_CALLS):
            c.call_tool("echo", {"text": ECHO_TEXT})
        t1, c1 = now(), cpu()
        for _ in range(n):
            res = c.call_tool("echo", {"text": ECHO_TEXT})
        elapsed, cpu_s = now() - t1, cpu() - c1
        check_echo(res.text)
        return result(n, elapsed, cpu_s=cpu_s, setup_ms=setup_ms, protocol_version=proto)


if __name__ == "__main__":
    import sys
    from pathlib import Path

    echo = Path(__file__).resolve().parents[2] / "shared" / "bench" / "echo_server.py"
    mode = sys.argv[1] if len(sys.argv) > 1 else "seq"
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    print(run(mode, count, [sys.executable, "-S", str(echo)]))  # -S as the harness runs it
