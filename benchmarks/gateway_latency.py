"""Per-call latency added by the gateway, beside the floor proxy and a direct connection.

Three ways to reach the demo server (``python -m mcpsync.demo``) over stdio, all driven by
our client (``mcpsync.connect``), so the client's own cost is the same in each and cancels
out of the differences:

- direct: the client spawns the demo;
- floor: the client spawns ``benchmarks/gateway_floor.py``, which spawns the demo and
  forwards lines without parsing;
- gateway: the client spawns ``python -m mcpsync gateway --config FILE`` with the demo as its
  one upstream.

Each does ``tools/call echo`` sequentially (N calls) and from 8 threads at once (N calls in
all), after a warm-up. Prints median and mean microseconds per call, and for the concurrent
runs the wall time per call. Run from the project root::

    .venv/bin/python benchmarks/gateway_latency.py [N]
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import mcpsync

HERE = Path(__file__).resolve().parent
DEMO = [sys.executable, "-m", "mcpsync.demo"]
WARMUP = 200
THREADS = 8


def _argvs(config: str) -> dict[str, list[str]]:
    return {"direct": DEMO,
            "floor": [sys.executable, str(HERE / "gateway_floor.py"), "--", *DEMO],
            "gateway": [sys.executable, "-m", "mcpsync", "gateway", "--config", config]}


def _sequential(client: mcpsync.Client, n: int) -> list[float]:
    times = []
    for i in range(n):
        start = time.perf_counter()
        client.call_tool("echo", {"text": f"x{i}"})
        times.append(time.perf_counter() - start)
    return times


def _concurrent(client: mcpsync.Client, n: int) -> tuple[list[float], float]:
    times: list[float] = []
    lock = threading.Lock()
    per = n // THREADS

    def work() -> None:
        mine = _sequential(client, per)
        with lock:
            times.extend(mine)

    threads = [threading.Thread(target=work, name=f"bench-{k}") for k in range(THREADS)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return times, (time.perf_counter() - start) / (per * THREADS)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "gateway.json"
        config.write_text(json.dumps({"mcpServers": {"demo": {"command": DEMO[0],
                                                               "args": DEMO[1:]}}}))
        rows = {}
        for label, argv in _argvs(str(config)).items():
            with mcpsync.connect(argv) as client:
                _sequential(client, WARMUP)
                seq = _sequential(client, n)
                conc, wall = _concurrent(client, n)
            rows[label] = (statistics.median(seq) * 1e6, statistics.fmean(seq) * 1e6,
                           statistics.median(conc) * 1e6, wall * 1e6)
    print(f"{n} calls each; microseconds per call")
    print(f"{'':8} {'seq median':>11} {'seq mean':>9} {'8x median':>10} {'8x wall/call':>13}")
    for label, (a, b, c, d) in rows.items():
        print(f"{label:8} {a:11.0f} {b:9.0f} {c:10.0f} {d:13.0f}")
    direct = rows["direct"]
    for label in ("floor", "gateway"):
        row = rows[label]
        print(f"added by {label}: seq median {row[0] - direct[0]:+.0f} us, "
              f"8x wall/call {row[3] - direct[3]:+.0f} us")
    floor_added = rows["floor"][0] - direct[0]
    gw_added = rows["gateway"][0] - direct[0]
    if floor_added > 0:
        print(f"gateway / floor added latency (seq median): {gw_added / floor_added:.2f}x")


if __name__ == "__main__":
    main()
