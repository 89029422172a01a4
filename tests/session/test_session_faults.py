"""Session engine faults: a server dying mid-call, garbage on stdout, an oversized frame."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from mcpsync.errors import ConnectionLost, ProtocolError, ServerExited
from mcpsync.jsonrpc import StreamError
from mcpsync.session import Session

from .helpers import open_session, peer_session

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def peer(no_leaks: None) -> Iterator[Session]:
    yield from peer_session()


def _start_waiters(session: Session, n: int) -> tuple[list[threading.Thread],
                                                       list[BaseException]]:
    errors: list[BaseException] = []

    def waiter() -> None:
        try:
            session.request("ignore", {}, timeout=60)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=waiter) for _ in range(n)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 5
    while len(session._pending) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    return threads, errors


def test_server_exit_fails_every_pending_call_at_once(no_leaks: None) -> None:
    lost: list[ConnectionLost] = []
    session = open_session(on_lost=lost.append)
    try:
        threads, errors = _start_waiters(session, 5)
        start = time.monotonic()
        with pytest.raises(ServerExited) as info:
            session.request("die", {"code": 3, "stderr": "first line\nfatal: boom\n"})
        for t in threads:
            t.join(10)
        elapsed = time.monotonic() - start
        assert elapsed < 5  # far below the 60 s timeout: nobody waited for it
        assert len(errors) == 5
        for err in [info.value, *errors]:
            assert isinstance(err, ServerExited)
            assert err.exit_code == 3
            assert err.server == "peer"
            assert "server 'peer' exited with code 3" in str(err)
            assert err.maybe_executed is True
        assert info.value.stderr_tail.endswith("first line\nfatal: boom\n")
        assert "its stderr ends with:\nfirst line\nfatal: boom" in str(info.value)
        deadline = time.monotonic() + 5
        while not lost and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(lost) == 1 and isinstance(lost[0], ServerExited)
        with pytest.raises(ServerExited) as later:
            session.request("echo", {})
        assert later.value.exit_code == 3
        assert session.lost is not None
    finally:
        session.close()


def test_server_killed_by_a_signal(no_leaks: None) -> None:
    session = open_session()
    try:
        threads, errors = _start_waiters(session, 3)
        pid = session._transport.pid  # type: ignore[attr-defined]
        os.kill(pid, signal.SIGKILL)
        for t in threads:
            t.join(10)
        assert len(errors) == 3
        for err in errors:
            assert isinstance(err, ServerExited)
            assert err.exit_code == -signal.SIGKILL
            assert "killed by SIGKILL" in str(err)
    finally:
        session.close()


def test_garbage_lines_are_logged_and_skipped(peer: Session,
                                              caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG", logger="mcpsync.session")
    assert peer.request("garbage", {"n": 12}) == "after garbage"
    garbage = [r for r in caplog.records if "not JSON-RPC" in r.getMessage()]
    assert len(garbage) == 12
    assert [r.levelname for r in garbage] == ["WARNING"] * 10 + ["DEBUG"] * 2
    assert "this is not json 0" in garbage[0].getMessage()
    assert peer.request("echo", {"still": "fine"}) == {"still": "fine"}


def test_invalid_message_with_a_pending_id_fails_that_call(peer: Session) -> None:
    with pytest.raises(ProtocolError) as info:
        peer.request("bad_response", {}, timeout=20)
    assert "calling 'bad_response' on server 'peer'" in str(info.value)
    assert peer.request("echo", {"ok": 1}) == {"ok": 1}


def test_uncorrelated_error_is_logged(peer: Session, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("WARNING", logger="mcpsync.session")
    assert peer.request("null_error", {}) == "ok"
    assert any("names no request" in r.getMessage() for r in caplog.records)


def test_oversized_frame_fails_pending_calls_with_connection_lost(no_leaks: None) -> None:
    session = open_session(max_frame_bytes=4096)
    try:
        threads, errors = _start_waiters(session, 2)
        with pytest.raises(ConnectionLost) as info:
            session.request("huge", {"bytes": 10_000})
        for t in threads:
            t.join(10)
        assert not isinstance(info.value, ServerExited)
        assert isinstance(info.value.__cause__, StreamError)
        assert "4096" in str(info.value)  # names the limit
        assert len(errors) == 2 and all(type(e) is ConnectionLost for e in errors)
        with pytest.raises(ConnectionLost):
            session.request("echo", {})
    finally:
        session.close()
