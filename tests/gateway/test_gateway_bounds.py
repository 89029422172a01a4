"""Bounded memory under a flood: an upstream that stops reading gets a bounded queue, and the
requests beyond it are refused at once while the gateway keeps reading the host."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import PEERS

from gateway.helpers_gw import RawHost, write_config
from mcpsync.gateway._upstream import QUEUE_BYTES

pytestmark = pytest.mark.timeout(90)

DEAF = [sys.executable, str(PEERS / "deaf_server.py")]
INIT = ('{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":'
        '"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}')


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_a_flood_to_a_deaf_upstream_is_refused_not_buffered(tmp_path: Path) -> None:
    host = RawHost(write_config(tmp_path, {"deaf": DEAF}))
    answers: list[dict[str, object]] = []
    done = threading.Event()

    def read_all() -> None:
        while True:
            line = host.proc.stdout.readline() if host.proc.stdout else b""
            if not line:
                break
            answers.append(json.loads(line))
            if answers[-1].get("id") is None:   # the answer to the bad line, sent last
                done.set()
    try:
        assert host.call(INIT)["id"] == 0
        host.send('{"jsonrpc":"2.0","method":"notifications/initialized"}')
        deaf = host.call('{"jsonrpc":"2.0","id":1,"method":"tools/call",'
                         '"params":{"name":"deaf","arguments":{"seconds":-1}}}')
        assert deaf["id"] == 1
        reader = threading.Thread(target=read_all, name="test-gw-flood-reader", daemon=True)
        reader.start()
        before = _rss_kib(host.proc.pid)
        filler = "x" * 50_000
        total = 0
        started = time.monotonic()
        for i in range(2000):    # 100 MB of requests, 12 times the queue's bound
            line = (f'{{"jsonrpc":"2.0","id":{i + 10},"method":"tools/call","params":'
                    f'{{"name":"size","arguments":{{"pad":"{filler}"}}}}}}')
            host.send(line)
            total += len(line)
        host.send("{not json")    # the front still reads the host: it answers this at once
        assert done.wait(30), f"{len(answers)} answers so far"
        took = time.monotonic() - started
        grown = _rss_kib(host.proc.pid) - before
        refused = [a for a in answers if isinstance(a.get("error"), dict)
                   and "not keeping up" in str(a["error"])]
        print(f"flood: {len(answers)} answers, {len(refused)} refused, RSS +{grown} KiB, "
              f"{took:.1f} s")
        assert len(refused) > 1500, len(refused)
        assert len(answers) == len(refused) + 1   # the rest wait in the queue, none failed
        assert any(a.get("id") is None and "could not read" in str(a.get("error"))
                   for a in answers)
        assert total > 10 * QUEUE_BYTES
        assert grown < 3 * QUEUE_BYTES // 1024, f"the gateway grew by {grown} KiB"
        assert took < 30
    finally:
        host.proc.kill()
        host.proc.wait(10)
        for pipe in (host.proc.stdin, host.proc.stdout):
            if pipe is not None:
                pipe.close()
