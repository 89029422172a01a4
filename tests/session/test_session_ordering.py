"""Progress ordering lives in the session: a request with a progress callback is
settled on the dispatcher, behind every progress callback for a notification that arrived
before its response; plain requests take no extra hop. Also ``RequestFuture.request_id``."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from mcpsync.session import Session

from .helpers import peer_session

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def peer(no_leaks: None) -> Iterator[Session]:
    yield from peer_session()


def _slow_recorder(seen: list[Any], delay: float = 0.005) -> Any:
    def progress(done: float, total: float | None, message: str | None) -> None:
        time.sleep(delay)     # slower than the peer: the response arrives before we finish
        seen.append((done, total, message, threading.current_thread().name))
    return progress


def test_request_returns_after_every_earlier_progress_callback(peer: Session) -> None:
    for _ in range(5):
        seen: list[Any] = []
        result = peer.request("progress", {"steps": 10}, progress=_slow_recorder(seen))
        assert result["token"] == result["params"]["_meta"]["progressToken"]
        assert [s[0] for s in seen] == list(range(1, 11))
        assert all(s[3].startswith("mcpsync-dispatch-") for s in seen)


def test_future_with_progress_resolves_after_its_progress(peer: Session) -> None:
    seen: list[Any] = []
    future = peer.submit("progress", {"steps": 10}, progress=_slow_recorder(seen))
    assert isinstance(future.request_id, int)
    future.result(10)
    assert [s[0] for s in seen] == list(range(1, 11))


def test_concurrent_progress_calls_each_see_their_own_progress(peer: Session) -> None:
    results: dict[int, list[Any]] = {}

    def work(i: int) -> None:
        seen: list[Any] = []
        peer.request("progress", {"steps": 5, "ms": 1}, progress=_slow_recorder(seen, 0.001))
        results[i] = [s[0] for s in seen]

    threads = [threading.Thread(target=work, args=(i,), name=f"test-{i}") for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert results == {i: [1, 2, 3, 4, 5] for i in range(8)}


def test_plain_requests_never_touch_the_dispatcher(peer: Session) -> None:
    for _ in range(20):
        peer.request("echo", {"x": 1})
    assert peer._dispatcher.thread is None   # zero extra hops on the hot path


def test_a_progress_request_from_a_progress_callback_does_not_deadlock(peer: Session) -> None:
    inner: list[Any] = []

    def outer(done: float, total: float | None, message: str | None) -> None:
        if done == 1:   # on the dispatcher: this request must not wait for the dispatcher
            inner.append(peer.request("progress", {"steps": 2},
                                      progress=lambda *a: None, timeout=5))

    peer.request("progress", {"steps": 2}, progress=outer, timeout=10)
    assert len(inner) == 1 and "token" in inner[0]


def test_close_settles_an_answered_call_stuck_behind_a_callback(no_leaks: None) -> None:
    sessions = peer_session()
    session = next(sessions)
    release = threading.Event()
    entered = threading.Event()
    outcome: list[Any] = []

    def stuck(done: float, total: float | None, message: str | None) -> None:
        entered.set()
        release.wait(10)

    def call() -> None:
        try:
            outcome.append(session.request("progress", {"steps": 1}, progress=stuck))
        except BaseException as exc:
            outcome.append(exc)

    caller = threading.Thread(target=call, name="test-caller")
    caller.start()
    try:
        assert entered.wait(5)
        deadline = time.monotonic() + 5   # the response arrives behind the stuck callback
        while not session._answered and time.monotonic() < deadline:
            time.sleep(0.01)
        assert session._answered
        assert not outcome
        session.close()               # the dispatcher cannot run: close settles the call
        caller.join(5)
        assert len(outcome) == 1
        assert isinstance(outcome[0], dict) and outcome[0]["params"]["steps"] == 1
    finally:
        release.set()
        caller.join(5)
        for _ in sessions:
            pass
