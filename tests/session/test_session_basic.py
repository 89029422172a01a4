"""Session engine: requests, ids, multiplexing, timeouts, cancellation, progress, futures,
close. Against real subprocesses (the bench echo server and the scriptable peer)."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from mcpsync.errors import Cancelled, ClosedError, ConfigError, ConnectionLost, RequestTimeout
from mcpsync.session import Session

from .helpers import DEMO_SERVER, open_session, peer_session

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def peer(no_leaks: None) -> Iterator[Session]:
    yield from peer_session()


def _wait_for(predicate: Any, timeout: float = 5.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.01)


def test_request_and_notify_against_the_demo_server(no_leaks: None) -> None:
    session = open_session(DEMO_SERVER, name="demo")
    try:
        init = session.request("initialize", {"protocolVersion": "2025-11-25",
                                              "capabilities": {},
                                              "clientInfo": {"name": "t", "version": "0"}},
                               cancellable=False)
        assert init["protocolVersion"] == "2025-11-25"
        session.notify("notifications/initialized")
        result = session.request("tools/call", {"name": "echo", "arguments": {"text": "hi"}})
        assert result["content"][0]["text"] == "hi"
    finally:
        session.close()


def test_ids_are_integers_from_one_and_never_reused(peer: Session) -> None:
    for _ in range(3):
        peer.request("echo", {})
    with pytest.raises(RequestTimeout):
        peer.request("ignore", timeout=0.05)
    seen = peer.request("ids")
    assert seen == [1, 2, 3, 4, 5]
    assert all(type(i) is int for i in seen)


def test_fifty_threads_at_once_each_get_their_own_answer(peer: Session) -> None:
    results: dict[int, Any] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(50)

    def worker(k: int) -> None:
        try:
            barrier.wait()
            for j in range(5):
                results[k * 10 + j] = peer.request("echo", {"k": k, "j": j})
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert not errors
    assert len(results) == 250
    for key, value in results.items():
        assert value == {"k": key // 10, "j": key % 10}


def test_eight_concurrent_50ms_calls_overlap(peer: Session) -> None:
    peer.request("echo", {})
    results: list[Any] = []
    barrier = threading.Barrier(8)

    def worker() -> None:
        barrier.wait()
        results.append(peer.request("sleep", {"ms": 50}))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(results) == 8
    # Multiplexing, proved by the server rather than by a clock: all eight calls were in
    # its hands at the same time (serially it would never see more than one).
    assert max(r["max_active"] for r in results) == 8


def test_timeout_raises_and_sends_cancelled(peer: Session) -> None:
    with pytest.raises(RequestTimeout) as info:
        peer.request("ignore", {"x": 1}, timeout=0.1)
    err = info.value
    assert isinstance(err, TimeoutError)
    assert err.timeout == 0.1 and err.method == "ignore" and err.server == "peer"
    assert "calling 'ignore' on server 'peer'" in str(err)
    cancelled = _wait_for(lambda: peer.request("cancelled"))
    assert cancelled == [{"requestId": 1, "reason": "timed out after 0.1 s"}]


def test_non_cancellable_timeout_sends_nothing(peer: Session) -> None:
    with pytest.raises(RequestTimeout):
        peer.request("ignore", timeout=0.05, cancellable=False)
    peer.request("echo", {})
    assert peer.request("cancelled") == []


def test_late_response_is_dropped_and_session_stays_usable(
        peer: Session, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG", logger="mcpsync.session")
    with pytest.raises(RequestTimeout):
        peer.request("sleep", {"ms": 150}, timeout=0.02)
    time.sleep(0.3)  # let the late answer arrive (not a timing assertion)
    assert peer.request("echo", {"after": True}) == {"after": True}
    assert any("dropped a response" in r.getMessage() and r.levelname == "DEBUG"
               for r in caplog.records)


def test_correlation_keeps_string_and_integer_ids_apart(
        peer: Session, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG", logger="mcpsync.session")
    assert peer.request("string_id", {}) == "right id"  # '"1"' is not the id 1
    messages = [r.getMessage() for r in caplog.records]
    assert any('unknown or cancelled request "1"' in m for m in messages)
    assert any("progress for a finished or unknown request 999999" in m for m in messages)


def test_submit_after_close_raises_closed_error(no_leaks: None) -> None:
    session = open_session()
    session.close()
    with pytest.raises(ClosedError):
        session.submit("echo", {})


def test_infinite_timeout_means_no_limit(peer: Session) -> None:
    assert peer.request("sleep", {"ms": 20}, timeout=math.inf)["slept"] == 20


def test_bad_timeout_is_a_config_error(peer: Session) -> None:
    with pytest.raises(ConfigError):
        peer.request("echo", {}, timeout=0)


def test_progress_gets_a_fresh_token_in_a_copy_and_callbacks_in_order(peer: Session) -> None:
    seen: list[tuple[Any, ...]] = []
    params = {"steps": 3, "_meta": {"keep": 1}}
    result = peer.request("progress", params, progress=lambda p, t, m: seen.append(
        (p, t, m, threading.current_thread().name)))
    assert params == {"steps": 3, "_meta": {"keep": 1}}  # the caller's dicts are untouched
    assert result["params"]["_meta"] == {"keep": 1, "progressToken": result["token"]}
    assert type(result["token"]) is int
    _wait_for(lambda: len(seen) == 3)
    assert [s[:3] for s in seen] == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]
    assert all(s[3] == "mcpsync-dispatch-peer" for s in seen)
    second = peer.request("progress", {"steps": 1}, progress=lambda *a: None)
    assert second["token"] != result["token"]


def test_reset_timeout_on_progress(peer: Session) -> None:
    params = {"steps": 6, "ms": 60}  # ~420 ms in all, progress every 60 ms
    assert peer.request("progress", params, timeout=0.25, reset_timeout_on_progress=True)
    with pytest.raises(RequestTimeout):
        peer.request("progress", params, timeout=0.25)


def test_reset_timeout_never_goes_beyond_max_timeout(no_leaks: None) -> None:
    session = open_session(max_timeout=0.3, reset_timeout_on_progress=True)
    try:
        with pytest.raises(RequestTimeout):
            session.request("progress", {"steps": 10, "ms": 60}, timeout=0.2)
    finally:
        session.close()


def test_submit_returns_a_future(peer: Session) -> None:
    future = peer.submit("echo", {"n": 1})
    assert future.result(5) == {"n": 1}
    assert future.cancel() is False  # already done


def test_future_cancel_cancels_on_the_wire(peer: Session) -> None:
    future = peer.submit("ignore", {})
    assert future.cancel() is True
    assert future.cancelled()
    with pytest.raises(Cancelled) as info:
        future.result(1)
    assert "cancelled by the caller" in str(info.value)
    cancelled = _wait_for(lambda: peer.request("cancelled"))
    assert cancelled == [{"requestId": 1, "reason": "cancelled by the caller"}]


def test_future_times_out_without_anyone_waiting(peer: Session) -> None:
    future = peer.submit("ignore", {}, timeout=0.1)
    error = future.exception(5)
    assert isinstance(error, RequestTimeout)
    assert _wait_for(lambda: peer.request("cancelled"))[0]["requestId"] == 1


def test_future_done_callbacks_run_on_the_dispatcher(peer: Session) -> None:
    names: list[str] = []
    done = threading.Event()
    future = peer.submit("sleep", {"ms": 30})

    def on_done(_: object) -> None:
        names.append(threading.current_thread().name)
        done.set()

    future.add_done_callback(on_done)
    assert done.wait(5)
    assert names == ["mcpsync-dispatch-peer"]


def test_close_fails_pending_refuses_new_calls_and_leaves_no_threads(no_leaks: None) -> None:
    session = open_session()
    errors: list[BaseException] = []
    started = threading.Event()

    def waiter() -> None:
        started.set()
        try:
            session.request("ignore", {}, timeout=30)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=waiter)
    thread.start()
    started.wait()
    _wait_for(lambda: session._pending)
    session.close()
    thread.join(5)
    assert len(errors) == 1 and type(errors[0]) is ConnectionLost
    assert "client closed" in str(errors[0])
    with pytest.raises(ClosedError):
        session.request("echo", {})
    with pytest.raises(ClosedError):
        session.notify("x")
    session.close()  # idempotent


def test_close_from_many_threads_at_once(no_leaks: None) -> None:
    session = open_session()
    session.request("notify", {"count": 3})  # starts the dispatcher too
    threads = [threading.Thread(target=session.close) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert session.closed
