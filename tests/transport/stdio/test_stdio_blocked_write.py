"""Timeouts that hold while a request cannot be written: a real server that stops reading.

``peers/deaf_server.py`` answers a ``deaf`` call and then reads nothing, so the pipe to it
fills. Every call must end by its deadline + 1 s: the one whose frame is partly written (the
rest is finished by the transport's writer thread, then cancelled), and the ones still waiting
for the write lock (nothing of theirs is sent).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import PEERS, open_fds

import mcpsync
from mcpsync.errors import ConnectionLost, RequestTimeout
from mcpsync.session import Session
from mcpsync.transport.stdio import _transport as stdio

DEAF = [sys.executable, str(PEERS / "deaf_server.py")]
BIG = "x" * (1 << 20)   # far beyond a pipe buffer (64 KiB on Linux)


def _connect(log: Path | None = None) -> mcpsync.Client:
    env = {"DEAF_LOG": str(log)} if log is not None else None
    return mcpsync.connect(DEAF, era="legacy", env=env, name="deaf")


def _log(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _wait_for(pred: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


def test_eight_callers_all_honour_their_deadline(no_leaks: None) -> None:
    client = _connect()
    try:
        client.call_tool("deaf", {"seconds": -1})   # from now on it reads nothing
        outcomes: dict[int, tuple[float, BaseException | None]] = {}

        def one(i: int) -> None:
            start = time.monotonic()
            try:
                client.call_tool("big", {"payload": BIG}, timeout=3)
                outcomes[i] = (time.monotonic() - start, None)
            except BaseException as exc:
                outcomes[i] = (time.monotonic() - start, exc)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert len(outcomes) == 8
        for elapsed, error in outcomes.values():
            assert isinstance(error, RequestTimeout), error
            assert "is not reading its input" in str(error)
            assert elapsed < 3 + 1, f"a caller waited {elapsed:.2f} s for a 3 s timeout"
        texts = [str(error) for _, error in outcomes.values()]
        # One frame went out in part (its rest is finished later); the others sent nothing.
        assert sum("nothing of it was sent" in t for t in texts) == 7
        assert sum("the rest is being sent, followed by its cancellation" in t
                   for t in texts) == 1
    finally:
        client.close()


def test_one_big_request_times_out_at_its_deadline(no_leaks: None) -> None:
    client = _connect()
    try:
        client.call_tool("deaf", {"seconds": -1})
        start = time.monotonic()
        with pytest.raises(RequestTimeout, match="could not be sent within 2 s"):
            client.call_tool("big", {"payload": BIG}, timeout=2)
        assert time.monotonic() - start < 2 + 1
    finally:
        client.close()


def test_a_partly_written_frame_is_finished_then_cancelled(tmp_path: Path,
                                                           no_leaks: None) -> None:
    log = tmp_path / "requests.jsonl"
    client = _connect(log)
    try:
        client.call_tool("deaf", {"seconds": 2.5})   # deaf for 2.5 s, then reads again
        start = time.monotonic()
        with pytest.raises(RequestTimeout, match="the rest is being sent") as info:
            client.call_tool("big", {"payload": BIG}, timeout=1)
        assert time.monotonic() - start < 1 + 1
        assert info.value.timeout == 1
        # Once the server reads again it gets the whole frame, then the cancellation.
        assert _wait_for(lambda: log.exists() and any(
            e.get("method") == "notifications/cancelled" for e in _log(log)), 10)
        entries = _log(log)
        assert not any("garbage" in e for e in entries), entries
        big = [e for e in entries if e.get("method") == "tools/call"
               and int(str(e["size"])) > len(BIG)]
        assert len(big) == 1
        cancel = next(e for e in entries if e.get("method") == "notifications/cancelled")
        assert entries.index(cancel) > entries.index(big[0])
        assert cancel["params"]["requestId"] == big[0]["id"]  # type: ignore[index]
        # The connection survived: the next call is answered.
        assert client.call_tool("small", {}).content[0].text  # type: ignore[union-attr]
    finally:
        client.close()


def test_a_frame_still_unfinished_after_the_grace_tears_the_connection_down(
        monkeypatch: pytest.MonkeyPatch, no_leaks: None) -> None:
    monkeypatch.setattr(stdio, "FINISH_GRACE", 1.0)
    client = _connect()
    try:
        client.call_tool("deaf", {"seconds": -1})
        pending = client.submit("tools/call", {"name": "slow", "arguments": {}},
                                timeout=60)   # written (small), never answered
        with pytest.raises(RequestTimeout):
            client.call_tool("big", {"payload": BIG}, timeout=0.5)
        start = time.monotonic()
        with pytest.raises(ConnectionLost, match="is not reading its input") as info:
            pending.result(timeout=5)
        # Torn down FINISH_GRACE after the big call's deadline, which had already passed.
        assert time.monotonic() - start < 1.0 + 1
        assert "could not be finished" in str(info.value)
        with pytest.raises(ConnectionLost):
            client.call_tool("small", {})
    finally:
        client.close()


def test_a_write_after_the_teardown_reports_the_teardown_not_an_exit(
        monkeypatch: pytest.MonkeyPatch, no_leaks: None) -> None:
    # The next write may meet the closed stdin before any reader meets EOF: it must still
    # say why the connection ended (the server does not read), not "closed its output".
    monkeypatch.setattr(stdio, "FINISH_GRACE", 0.5)
    transport = stdio.StdioTransport(DEAF, name="deaf")
    transport.start()
    session = Session(transport, name="deaf", default_timeout=1.0)
    session.start()
    try:
        session.request("tools/call", {"name": "deaf", "arguments": {"seconds": -1}})
        with pytest.raises(stdio.WriteTimedOut):
            transport.send_bytes_until(b'{"jsonrpc":"2.0","method":"x","params":"'
                                       + BIG.encode() + b'"}', time.monotonic() + 0.3)
        assert _wait_for(lambda: transport._stdin_fd < 0, 5)   # torn down
        with pytest.raises(ConnectionLost) as direct:
            transport.send_bytes_until(b"{}", time.monotonic() + 1)
        assert "is not reading its input" in str(getattr(direct.value, "reason", None))
        with pytest.raises(ConnectionLost, match="is not reading its input"):
            session.request("tools/call", {"name": "small", "arguments": {}}, timeout=5)
    finally:
        session.close()


def test_close_ends_a_frame_still_being_finished(no_leaks: None) -> None:
    fds = open_fds()
    client = _connect()
    client.call_tool("deaf", {"seconds": -1})
    with pytest.raises(RequestTimeout):
        client.call_tool("big", {"payload": BIG}, timeout=0.3)
    assert any(t.name == "mcpsync-stdio-writer-deaf" for t in threading.enumerate())
    start = time.monotonic()
    client.close()   # the writer thread is still finishing the frame: close ends it
    assert time.monotonic() - start < 5
    assert open_fds() <= fds   # no pipe left behind


# -- frames that are not requests: notifications, cancellations, answers to the server ------

def test_a_notification_to_a_server_that_stopped_reading_ends_at_the_client_timeout(
        monkeypatch: pytest.MonkeyPatch, no_leaks: None) -> None:
    monkeypatch.setattr(stdio, "FINISH_GRACE", 1.0)
    transport = stdio.StdioTransport(DEAF, name="deaf")
    transport.start()
    session = Session(transport, name="deaf", default_timeout=1.0)
    session.start()
    try:
        session.request("tools/call", {"name": "deaf", "arguments": {"seconds": -1}})
        outcome: list[BaseException | None] = []

        def notify() -> None:
            try:
                session.notify("notifications/message", {"level": "info", "data": BIG})
                outcome.append(None)
            except BaseException as exc:
                outcome.append(exc)

        start = time.monotonic()
        thread = threading.Thread(target=notify)
        thread.start()
        thread.join(1 + 1)
        assert outcome, "notify() was still blocked 1 s past the client's timeout"
        error = outcome[0]
        assert isinstance(error, RequestTimeout), error
        assert "could not be sent within 1 s" in str(error)
        assert "the rest is being sent" in str(error)
        # Half a frame cannot stay in the pipe: the same grace as for requests, then teardown.
        with pytest.raises(ConnectionLost, match="is not reading its input"):
            session.request("tools/call", {"name": "small", "arguments": {}}, timeout=5)
        assert time.monotonic() - start < 1 + 1.0 + 1
    finally:
        session.close()


def test_set_roots_waiting_behind_a_blocked_frame_ends_at_the_client_timeout(
        no_leaks: None) -> None:
    client = mcpsync.connect(DEAF, era="legacy", name="deaf", roots=[], timeout=1)
    try:
        client.call_tool("deaf", {"seconds": -1})
        with pytest.raises(RequestTimeout, match="the rest is being sent"):
            client.call_tool("big", {"payload": BIG})  # its rest holds the pipe for 5 s
        start = time.monotonic()
        with pytest.raises(RequestTimeout, match="nothing of it was sent") as info:
            client.set_roots(["file:///a"])
        assert time.monotonic() - start < 1 + 1
        assert info.value.method == "notifications/roots/list_changed"
    finally:
        client.close()


def test_a_cancellation_behind_a_blocked_frame_does_not_hold_the_caller(
        no_leaks: None) -> None:
    client = _connect()
    try:
        client.call_tool("deaf", {"seconds": -1})
        outcome: list[tuple[float, BaseException | None]] = []

        def slow() -> None:   # written whole, never answered: cancelled at its deadline
            start = time.monotonic()
            try:
                client.call_tool("slow", {}, timeout=1.5)
                outcome.append((time.monotonic() - start, None))
            except BaseException as exc:
                outcome.append((time.monotonic() - start, exc))

        thread = threading.Thread(target=slow)
        thread.start()
        time.sleep(0.3)
        with pytest.raises(RequestTimeout, match="the rest is being sent"):
            client.call_tool("big", {"payload": BIG}, timeout=0.5)  # holds the pipe 5 s
        thread.join(5)
        assert outcome, "the cancelled caller was still blocked"
        elapsed, error = outcome[0]
        assert isinstance(error, RequestTimeout) and "was cancelled" in str(error), error
        assert elapsed < 1.5 + 1, f"the caller waited {elapsed:.2f} s to send its cancel"
    finally:
        client.close()
