"""Session engine: Ctrl-C while a call blocks, and use after fork."""

from __future__ import annotations

import _thread
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import mcpsync.session._engine as engine
from mcpsync.errors import RequestTimeout, UsedAfterFork
from mcpsync.session import Session
from mcpsync.session._call import Call
from mcpsync.transport.base import WriteTimedOut
from mcpsync.transport.stdio import StdioTransport

from .helpers import open_session, peer_session, reader_from_the_start

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def peer(no_leaks: None) -> Iterator[Session]:
    yield from peer_session()


def _cancelled(session: Session) -> list[dict[str, object]]:
    deadline = time.monotonic() + 5
    while True:
        got = session.request("cancelled")
        if got or time.monotonic() > deadline:
            return got  # type: ignore[no-any-return]
        time.sleep(0.01)


def test_keyboard_interrupt_while_reading_cancels_and_keeps_the_session(
        peer: Session) -> None:
    """The interrupted caller held the reader role (it was the only call in flight)."""
    timer = threading.Timer(0.2, _thread.interrupt_main)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            peer.request("ignore", {}, timeout=20)
    finally:
        timer.cancel()
    cancelled = _cancelled(peer)
    assert cancelled == [{"requestId": 1,
                          "reason": "interrupted by the user (KeyboardInterrupt)"}]
    assert peer.request("echo", {"usable": True}) == {"usable": True}
    assert not peer._pending


def test_a_simulated_ctrl_c_reaches_a_main_thread_leader_with_no_time_limit(
        peer: Session) -> None:
    """``interrupt_main`` interrupts no system call: the main thread's leader polls in
    slices of MAIN_THREAD_SLICE, so even a call with no time limit, whose poll would
    otherwise never return, sees it."""
    peer.request("echo", {"warm": True})   # lead the next call: the role is free
    timer = threading.Timer(0.3, _thread.interrupt_main)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            peer.request("ignore", {}, timeout=math.inf)
    finally:
        timer.cancel()
    assert peer.request("echo", {"usable": True}) == {"usable": True}
    assert not peer._pending


def test_real_sigint_while_following_cancels(peer: Session) -> None:
    """The interrupted caller was a follower (another call was in flight first)."""
    other = threading.Thread(target=peer.request, args=("sleep", {"ms": 600}))
    other.start()
    while not peer._pending:
        time.sleep(0.005)
    timer = threading.Timer(0.2, os.kill, args=(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            peer.request("ignore", {}, timeout=20)
    finally:
        timer.cancel()
    other.join(5)
    ids = [c["requestId"] for c in _cancelled(peer)]
    assert ids == [2]
    assert peer.request("echo", {"k": 1}) == {"k": 1}


def test_keyboard_interrupt_while_waiting_on_a_future_cancels_it(peer: Session) -> None:
    future = peer.submit("ignore", {}, timeout=20)
    timer = threading.Timer(0.2, os.kill, args=(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            future.result(10)
    finally:
        timer.cancel()
    assert future.cancelled()
    assert [c["requestId"] for c in _cancelled(peer)] == [1]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_use_after_fork_raises_and_close_only_drops_references(peer: Session) -> None:
    assert peer.request("echo", {"before": 1}) == {"before": 1}
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 1
        try:
            try:
                peer.request("echo", {})
            except UsedAfterFork as exc:
                if "forked process" in str(exc):
                    code = 0
            try:
                peer.notify("x")
                code = 2
            except UsedAfterFork:
                pass
            peer.close()
        finally:
            os.write(write_fd, bytes([code]))
            os._exit(code)
    os.close(write_fd)
    _, status = os.waitpid(pid, 0)
    result = os.read(read_fd, 1)
    os.close(read_fd)
    assert result == b"\x00" and os.waitstatus_to_exitcode(status) == 0
    # The parent's session and server are untouched by the child's close().
    assert peer.request("echo", {"after": 1}) == {"after": 1}


def _interrupt_after_the_write(session: Session) -> None:
    """The next request is written in full, then Ctrl-C lands before its sender returns
    (as a signal can when the write's system call returns)."""
    send = session._send_until

    def written_then_interrupted(frame: bytes, deadline: float, ended: bool = False) -> None:
        session._send_until = send  # type: ignore[method-assign]  # only once
        send(frame, deadline, ended)
        raise KeyboardInterrupt

    session._send_until = written_then_interrupted  # type: ignore[method-assign]


@pytest.mark.parametrize("how", ["request", "request after a call", "submit"])
def test_keyboard_interrupt_right_after_the_write_cancels_on_the_wire(
        peer: Session, how: str) -> None:
    """The server has the request: the interrupted caller never gets its answer (or its
    future), so it is cancelled on the wire and not left pending (a listen would stay
    open on the server for ever). After a first call the caller claims the reader role
    before it writes (the background reader holds it in a new session)."""
    rid = 1
    if how == "request after a call":
        assert peer.request("echo", {"warm": True}) == {"warm": True}
        rid = 2
    _interrupt_after_the_write(peer)
    with pytest.raises(KeyboardInterrupt):
        if how == "submit":
            peer.submit("ignore", {}, timeout=20)
        else:
            peer.request("ignore", {}, timeout=20)
    assert _cancelled(peer) == [{"requestId": rid,
                                 "reason": "interrupted by the user (KeyboardInterrupt)"}]
    assert not peer._pending and not peer._unattended
    assert peer._role.holder is not peer._role.sending or peer._role.sending is None
    assert peer.request("echo", {"usable": True}) == {"usable": True}


def test_an_interrupted_send_keeps_another_callers_write_marked(peer: Session) -> None:
    """Another caller is still writing (its write blocked on a server that does not read),
    and this call, interrupted while it waited for the write lock, is taken out: that mark
    stays, as the background reader needs it to take the role over and drain the server's
    output so that the other write can finish. Only this call's own mark is cleared."""
    role = peer._role
    now = time.monotonic()
    other = Call(98, "other", None, 10.0, None, False, True, now, 60.0)
    mine = Call(99, "mine", None, 10.0, None, False, True, now, 60.0)
    peer._pending[mine.key] = mine
    with peer._lock:
        role.sending = other
    try:
        peer._interrupted_send(mine, KeyboardInterrupt())
        assert role.sending is other and mine.key not in peer._pending
    finally:
        with peer._lock:
            role.sending = None
    peer._pending[mine.key] = mine
    with peer._lock:
        role.sending = mine
    peer._interrupted_send(mine, KeyboardInterrupt())
    assert role.sending is None and mine.key not in peer._pending
    # Both were cancelled on the wire (a cancellation for an id the server never saw is
    # ignored by receivers); the session goes on.
    deadline = time.monotonic() + 5
    while len(ids := [c["requestId"] for c in peer.request("cancelled")]) < 2:
        assert time.monotonic() < deadline, ids
        time.sleep(0.01)
    assert ids == [99, 99]
    assert peer.request("echo", {"usable": True}) == {"usable": True}


def test_a_request_that_is_not_cancellable_is_only_forgotten(peer: Session) -> None:
    _interrupt_after_the_write(peer)
    with pytest.raises(KeyboardInterrupt):
        peer.request("echo", {"x": 1}, cancellable=False)
    assert not peer._pending
    # Its answer, which nobody waits for, arrives and is dropped; nothing was cancelled.
    assert peer.request("echo", {"after": 1}) == {"after": 1}
    assert peer.request("cancelled") == []
    assert peer.request("echo", {"usable": True}) == {"usable": True}


def test_a_ctrl_c_while_the_future_is_made_takes_the_call_out(
        peer: Session, monkeypatch: pytest.MonkeyPatch) -> None:
    """The call is registered before its future is made: a Ctrl-C there must not leave it
    pending (it would never expire, and every later call would wake the reader)."""
    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(engine, "RequestFuture", interrupted)
    with pytest.raises(KeyboardInterrupt):
        peer.submit("ignore", {}, timeout=20)
    monkeypatch.undo()
    assert not peer._pending and not peer._unattended
    assert peer.request("echo", {"usable": True}) == {"usable": True}


def test_a_write_timed_out_behind_another_write_keeps_its_mark(peer: Session) -> None:
    """No Ctrl-C needed: a caller whose timeout ran out while it waited for the write lock
    that another caller's blocked write holds leaves that caller's mark alone."""
    role = peer._role
    other = Call(98, "other", None, 10.0, None, False, True, time.monotonic(), 60.0)
    send = peer._send_until

    def timed_out(frame: bytes, deadline: float, ended: bool = False) -> None:
        peer._send_until = send  # type: ignore[method-assign]  # only once
        with peer._lock:
            role.sending = other   # the other caller's write, as this one waits for it
        raise WriteTimedOut(0, len(frame) + 1)

    peer._send_until = timed_out  # type: ignore[method-assign]
    try:
        with pytest.raises(RequestTimeout, match="nothing of it was sent"):
            peer.request("echo", {"x": 1}, timeout=5)
        assert role.sending is other and not peer._pending
    finally:
        with peer._lock:
            role.sending = None
    assert peer.request("echo", {"usable": True}) == {"usable": True}


@pytest.mark.parametrize("where", ["reader-join", "transport-close"])
def test_ctrl_c_in_close_still_closes_the_transport_and_stops_the_threads(
        where: str, monkeypatch: pytest.MonkeyPatch, no_leaks: None) -> None:
    """Session.close() runs each of its steps even when one before it was interrupted:
    the server is ended and the dispatcher stopped (no_leaks checks every thread)."""
    notes: list[object] = []
    session = open_session(on_notification=notes.append, reader=where == "reader-join")
    transport = session._transport
    assert isinstance(transport, StdioTransport)
    session.request("notify", {"count": 1})
    deadline = time.monotonic() + 5
    while not notes and time.monotonic() < deadline:
        time.sleep(0.01)
    dispatcher = session._dispatcher.thread
    assert dispatcher is not None and dispatcher.is_alive()
    if where == "reader-join":
        reader = session._bg_thread
        assert reader is not None

        def join(timeout: float | None = None) -> None:
            raise KeyboardInterrupt

        monkeypatch.setattr(reader, "join", join)
    else:
        close = transport.close

        def interrupted() -> None:   # Ctrl-C as the transport's close returns
            close()
            raise KeyboardInterrupt

        monkeypatch.setattr(transport, "close", interrupted)
    with pytest.raises(KeyboardInterrupt):
        session.close()
    monkeypatch.undo()
    assert transport.closed
    assert transport._proc is not None and transport._proc.returncode is not None
    dispatcher.join(5)
    assert not dispatcher.is_alive()


def test_ctrl_c_in_the_reader_join_ends_even_a_stubborn_server_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_leaks: None) -> None:
    """A server that ignores the end of its input: after a Ctrl-C in the session's part of
    the close, the transport does not wait 2 s for it but ends it (SIGTERM at once)."""
    server = tmp_path / "stubborn.py"
    server.write_text("import sys, time\nfor line in sys.stdin: pass\ntime.sleep(60)\n")
    transport = StdioTransport([sys.executable, str(server)], name="stubborn")
    transport.start()
    reader_from_the_start(transport)
    session = Session(transport, name="stubborn")
    session.start()
    reader = session._bg_thread
    assert reader is not None

    def join(timeout: float | None = None) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(reader, "join", join)
    polite: list[bool] = []
    monkeypatch.setattr(transport, "_shutdown", lambda: polite.append(True))
    with pytest.raises(KeyboardInterrupt):
        session.close()
    monkeypatch.undo()
    assert not polite   # the polite sequence (stdin closed, 2 s) was not run
    assert transport.closed
    assert transport._proc is not None and transport._proc.returncode == -signal.SIGTERM


def test_ctrl_c_as_the_transports_close_begins_still_ends_the_server(
        monkeypatch: pytest.MonkeyPatch, no_leaks: None) -> None:
    """A Ctrl-C right at the start of the transport's close (before it could take the
    shutdown over, so it changed nothing): the session closes it once more, at once."""
    session = open_session()
    transport = session._transport
    assert isinstance(transport, StdioTransport)
    real_close = transport.close
    calls: list[int] = []

    def close() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt
        real_close()

    polite: list[bool] = []
    monkeypatch.setattr(transport, "close", close)
    monkeypatch.setattr(transport, "_shutdown", lambda: polite.append(True))
    with pytest.raises(KeyboardInterrupt):
        session.close()
    monkeypatch.undo()
    assert len(calls) == 2 and not polite
    assert transport.closed
    assert transport._proc is not None and transport._proc.returncode is not None
