"""The client's own connection pool holds a connection for every request in flight plus the
long-lived stream: 64 threads calling a slow tool at once, while the legacy GET stream is
open, reuse their connections instead of opening and dropping one each time (urllib3 says
"Connection pool is full, discarding connection" when the pool is too small)."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest
from http_peers.fault_server import FaultServer
from urllib3.util import connection

import mcpsync
from mcpsync.transport.http._conn import MAX_WORKERS, POOL_MAXSIZE

pytestmark = pytest.mark.timeout(60)


def test_64_calls_at_once_beside_the_get_stream_keep_their_connections(
        fault_server: FaultServer, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    assert POOL_MAXSIZE >= MAX_WORKERS + 1
    opened: list[int] = []
    original = connection.create_connection

    def counted(*args: Any, **kwargs: Any) -> Any:
        opened.append(1)
        return original(*args, **kwargs)
    monkeypatch.setattr(connection, "create_connection", counted)
    caplog.set_level(logging.WARNING, logger="urllib3")
    errors: list[BaseException] = []
    with mcpsync.connect(fault_server.url, era="legacy") as client:
        fault_server.wait_for_requests(lambda r: r.method == "GET", 1)

        def round_of_calls(seconds: float) -> None:
            start = threading.Barrier(MAX_WORKERS)

            def work() -> None:
                try:
                    start.wait()   # every thread's call in flight at once
                    text = client.call_tool("slow", {"seconds": seconds}).text
                    assert text == f"slept {seconds}"
                except BaseException as exc:
                    errors.append(exc)
                    start.abort()
            threads = [threading.Thread(target=work, name=f"test-pool-{k}")
                       for k in range(MAX_WORKERS)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        # The first round opens the connections: its calls last long enough that all 64
        # are in flight at once on a loaded machine (with 0.3 s, a CI run once saw the
        # first ones answered before the last were sent: 50 connections, reused after).
        round_of_calls(1.5)
        warm = len(opened)
        round_of_calls(0.3)
        round_of_calls(0.3)
        after = len(opened) - warm
    assert errors == []
    calls = [r for r in fault_server.requests if r.rpc_method == "tools/call"]
    assert len(calls) == 3 * MAX_WORKERS
    assert MAX_WORKERS <= warm <= MAX_WORKERS + 3, warm
    assert after == 0, f"{after} connections opened after the first round"
    assert not [r for r in caplog.records if "pool is full" in r.getMessage()]
