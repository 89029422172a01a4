"""The stream watchdog: a silent SSE stream is ended and counts as dropped."""

from __future__ import annotations

import pytest
from http_peers.fault_server import FaultServer

import mcpsync
from mcpsync.transport.http import _watchdog as _http_watchdog
from mcpsync.transport.http._conn import Abortable
from mcpsync.transport.http._watchdog import StreamWatch

pytestmark = pytest.mark.timeout(30)


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_limit_is_300_s_then_twice_the_longest_keepalive_gap(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock()
    monkeypatch.setattr(_http_watchdog, "_clock", clock)
    watch = StreamWatch(Abortable())
    assert watch.limit() == 300.0
    watch.seen(1)                 # first keep-alive
    clock.now += 15
    watch.seen(2)                 # second one, 15 s later
    assert watch.limit() == 30.0
    clock.now += 40
    watch.seen(2)                 # data, no new comment: the gap is unchanged
    assert watch.limit() == 30.0
    clock.now += 1
    watch.seen(3)                 # a 41 s gap since the last comment
    assert watch.limit() == 82.0


def test_limit_never_below_10_s(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock()
    monkeypatch.setattr(_http_watchdog, "_clock", clock)
    watch = StreamWatch(Abortable())
    for count in range(1, 5):
        clock.now += 0.5
        watch.seen(count)
    assert watch.limit() == 10.0


def test_a_silent_get_stream_is_ended_and_reopened(fault_server: FaultServer,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_http_watchdog, "SILENCE", 0.3)
    monkeypatch.setattr(_http_watchdog, "CHECK", 0.05)
    server = fault_server
    server.faults.era = "legacy"
    with mcpsync.connect(server.url, era="legacy", timeout=5) as client:
        server.wait_for_requests(lambda r: r.method == "GET", count=2, timeout=10)
        assert client.call_tool("echo", {"text": "alive"}).text == "alive"
