"""Session engine: notifications on the dispatcher, server->client requests on the pool."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from mcpsync.errors import Rejected, RemoteError
from mcpsync.jsonrpc import Message
from mcpsync.session import Session
from mcpsync.session._delivery import BACKLOG_WARNING, Dispatcher

from .helpers import open_session, peer_session

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def peer(no_leaks: None) -> Iterator[Session]:
    yield from peer_session()


def _until(predicate: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_ping_is_answered_without_a_handler(peer: Session) -> None:
    assert peer.request("ask", {"method": "ping"}) == {}


def test_unknown_server_request_without_a_handler_is_method_not_found(peer: Session) -> None:
    answer = peer.request("ask", {"method": "sampling/createMessage", "params": {}})
    assert answer["error"]["code"] == -32601


def test_on_request_runs_on_the_callback_pool(no_leaks: None) -> None:
    threads: list[str] = []

    def on_request(message: Message) -> Any:
        threads.append(threading.current_thread().name)
        return {"method": message.method, "params": message.params}

    session = open_session(on_request=on_request)
    try:
        answer = session.request("ask", {"method": "roots/list", "params": {"a": 1}})
        assert answer == {"method": "roots/list", "params": {"a": 1}}
        assert threads == ["mcpsync-callback-peer-1"]
    finally:
        session.close()


@pytest.mark.parametrize(("raised", "code", "message"), [
    (RemoteError("nope", code=-32602, remote_message="bad params", data={"x": 1}), -32602,
     "bad params"),
    (Rejected("the user said no"), -1, "rejected by user"),
    (ValueError("kaput"), -32603, "kaput"),
])
def test_callback_errors_become_error_responses(no_leaks: None, raised: Exception, code: int,
                                                 message: str) -> None:
    def on_request(message: Message) -> Any:
        raise raised

    session = open_session(on_request=on_request)
    try:
        answer = session.request("ask", {"method": "elicitation/create", "params": {}})
        error = answer["error"]
        assert error["code"] == code
        assert error["message"] == message
        assert "Traceback" not in str(error)
        if code == -32602:
            assert error["data"] == {"x": 1}
    finally:
        session.close()


def test_the_callback_pool_has_at_most_four_threads(no_leaks: None) -> None:
    names: set[str] = set()
    lock = threading.Lock()

    def on_request(message: Message) -> Any:
        with lock:
            names.add(threading.current_thread().name)
        time.sleep(0.05)
        return {"ok": True}

    session = open_session(on_request=on_request)
    try:
        answers: list[Any] = []
        threads = [threading.Thread(target=lambda: answers.append(session.request(
            "ask", {"method": "roots/list"}, timeout=10))) for _ in range(10)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(15)
        assert answers == [{"ok": True}] * 10
        assert 1 <= len(names) <= 4
        assert names <= {f"mcpsync-callback-peer-{k}" for k in range(1, 5)}
    finally:
        session.close()


def test_ping_with_a_handler_that_does_not_know_it(no_leaks: None) -> None:
    def on_request(message: Message) -> Any:
        raise RemoteError("unknown", code=-32601, remote_message="unknown method")

    session = open_session(on_request=on_request)
    try:
        assert session.request("ask", {"method": "ping"}) == {}
    finally:
        session.close()


def test_a_callback_may_call_back_into_the_session(no_leaks: None) -> None:
    holder: dict[str, Session] = {}

    def on_request(message: Message) -> Any:
        inner = holder["s"].request("echo", {"from": "callback"}, timeout=5)
        return {"inner": inner}

    session = open_session(on_request=on_request)
    holder["s"] = session
    try:
        answer = session.request("ask", {"method": "sampling/createMessage", "params": {}},
                                 timeout=10)
        assert answer == {"inner": {"from": "callback"}}
    finally:
        session.close()


def test_notifications_arrive_in_order_on_the_dispatcher(no_leaks: None) -> None:
    seen: list[tuple[int, str]] = []

    def on_notification(message: Message) -> None:
        seen.append((message.params["i"], threading.current_thread().name))

    session = open_session(on_notification=on_notification)
    try:
        assert session.request("notify", {"count": 200}) == "notified"
        _until(lambda: len(seen) == 200)
        assert [i for i, _ in seen] == list(range(200))
        assert {name for _, name in seen} == {"mcpsync-dispatch-peer"}
    finally:
        session.close()


def test_a_raising_callback_is_logged_and_dispatch_goes_on(
        no_leaks: None, caplog: pytest.LogCaptureFixture) -> None:
    seen: list[int] = []

    def on_notification(message: Message) -> None:
        if message.params["i"] == 1:
            raise RuntimeError("callback bug")
        seen.append(message.params["i"])

    caplog.set_level(logging.WARNING, logger="mcpsync.session")
    session = open_session(on_notification=on_notification)
    try:
        session.request("notify", {"count": 3})
        _until(lambda: len(seen) == 2)
        assert seen == [0, 2]
        records = [r for r in caplog.records if "callback raised" in r.getMessage()]
        assert len(records) == 1 and records[0].levelname == "WARNING"
        assert records[0].exc_info is not None  # with its traceback
    finally:
        session.close()


def test_notifications_and_requests_between_calls_are_handled(no_leaks: None) -> None:
    """What the server sends while no call is in flight is still read (by the background
    reader) and handled: a notification, then a ping."""
    seen: list[str] = []
    pinged = threading.Event()

    def on_request(message: Message) -> Any:
        pinged.set()
        return {}

    session = open_session(on_notification=lambda m: seen.append(m.method or ""),
                           on_request=on_request)
    try:
        assert session.request("notify_later", {"ms": 100, "ask": True}) == "later"
        assert pinged.wait(5)  # nothing else was sent after the call returned
        _until(lambda: seen)  # the notification went to the dispatcher, the ping to the pool
        assert seen == ["test/later"]
    finally:
        session.close()


def test_backlog_warning_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("mcpsync.session")
    caplog.set_level(logging.WARNING, logger="mcpsync.session")
    dispatcher = Dispatcher("backlog", logger)
    release = threading.Event()
    dispatcher.post(release.wait)
    try:
        for _ in range(BACKLOG_WARNING + 100):
            dispatcher.post(lambda: None)
    finally:
        release.set()
        dispatcher.stop(5)
    warnings = [r for r in caplog.records if "notifications are waiting" in r.getMessage()]
    assert len(warnings) == 1
