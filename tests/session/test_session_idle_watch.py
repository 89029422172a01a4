"""A stdio session starts no reader thread while one caller at a time uses it; the shared
idle watch (``mcpsync-stdio-watch``) looks at its server meanwhile, with real servers.

What must hold with the reader absent: sequential calls start no reader; many sessions share
one watch thread, which ends with the last; what a server sends unasked while nobody calls
(a notification, a request) is read, and the reader started for it; a server that exits
while idle is seen as lost, and ``on_lost`` runs; concurrent callers, futures and a write
that finds stdin's pipe full each start the reader; nothing is left after a close; the
watch's pause doubles while calls come back to back, and starts over after a rest.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import types
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from helpers import open_fds, wait_until

from mcpsync.errors import ConnectionLost, ServerExited
from mcpsync.jsonrpc import Message
from mcpsync.session import Session
from mcpsync.session._base import HANDOFF_GRACE, MAX_WATCH_PAUSE
from mcpsync.transport.stdio import _idle_watch

from .helpers import open_session

pytestmark = [pytest.mark.timeout(60),
              pytest.mark.skipif(not hasattr(__import__("select"), "poll"),
                                 reason="the idle watch needs poll()")]


def _readers() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("mcpsync-stdio-reader-")]


def _watchers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "mcpsync-stdio-watch"]


def test_sequential_calls_start_no_reader_and_sessions_share_one_watch(no_leaks: None) -> None:
    fds_before = open_fds()
    sessions = [open_session(name=f"idle{i}") for i in range(4)]
    try:
        for session in sessions:
            for n in range(50):
                assert session.request("echo", {"n": n}, timeout=5) == {"n": n}
        assert _readers() == []
        assert len([t for t in _watchers() if t.is_alive()]) == 1
        assert all(session._role.absent for session in sessions)
    finally:
        for session in sessions:
            session.close()
    assert [t for t in _watchers() if t.is_alive()] == []   # joined by the last close
    assert _idle_watch.active_watch_thread() is None
    assert open_fds() <= fds_before


def test_a_notification_sent_while_idle_is_delivered() -> None:
    got: list[Message] = []
    arrived = threading.Event()

    def on_note(message: Message) -> None:
        got.append(message)
        arrived.set()

    session = open_session(on_notification=on_note)
    try:
        # Answered at once; the notification follows 100 ms later, while nobody calls.
        assert session.request("notify_later", {"ms": 100}, timeout=5) == "later"
        assert _readers() == []
        assert arrived.wait(5), "the notification sent while idle was never read"
        assert got[0].method == "test/later"
        assert _readers() == ["mcpsync-stdio-reader-peer"]   # started for it, and kept
        assert session.request("echo", {"after": 1}, timeout=5) == {"after": 1}
    finally:
        session.close()


def test_a_server_request_sent_while_idle_is_answered() -> None:
    asked: list[str | None] = []

    def on_request(message: Message) -> Any:
        asked.append(message.method)
        return {}

    session = open_session(on_request=on_request)
    try:
        assert session.request("notify_later", {"ms": 50, "ask": True}, timeout=5) == "later"
        assert wait_until(lambda: asked == ["ping"], 5), asked
    finally:
        session.close()


def test_a_server_that_exits_while_idle_is_seen_lost() -> None:
    lost: list[ConnectionLost] = []
    seen = threading.Event()

    def on_lost(error: ConnectionLost) -> None:
        lost.append(error)
        seen.set()

    session = open_session(on_lost=on_lost)
    try:
        assert session.request("echo", {}, timeout=5) == {}
        pid = session._transport.pid   # type: ignore[attr-defined]
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        assert seen.wait(5), "the exit of an idle server went unnoticed"
        assert isinstance(lost[0], ServerExited)
        assert isinstance(session.lost, ServerExited)
        with pytest.raises(ServerExited):
            session.request("echo", {}, timeout=5)
    finally:
        session.close()


def test_concurrent_callers_start_the_reader_and_every_answer_is_its_own() -> None:
    session = open_session()
    try:
        assert _readers() == []

        def call(n: int) -> Any:
            return session.request("sleep", {"ms": 2, "n": n}, timeout=10)

        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(call, range(200)))
        assert len(answers) == 200
        assert _readers() == ["mcpsync-stdio-reader-peer"]
        assert session.request("echo", {"k": "v"}, timeout=5) == {"k": "v"}
    finally:
        session.close()


def test_a_future_starts_the_reader() -> None:
    session = open_session()
    try:
        assert session.request("echo", {}, timeout=5) == {}
        future = session.submit("sleep", {"ms": 20}, timeout=5)
        assert future.result(5)["slept"] == 20
        assert _readers() == ["mcpsync-stdio-reader-peer"]
    finally:
        session.close()


# Reads one line at a time and handles it before reading the next: ``flood`` is answered,
# then 4 MiB of notifications are written (blocking once stdout's pipe is full, so stdin is
# not read meanwhile); ``echo`` is answered with its params.
FLOODER = r'''
import json, sys
out = sys.stdout.buffer

def send(obj):
    out.write(json.dumps(obj).encode() + b"\n")

for line in sys.stdin.buffer:
    msg = json.loads(line)
    if msg["method"] == "flood":
        send({"jsonrpc": "2.0", "id": msg["id"], "result": "flooding"})
        out.flush()
        for _ in range(1024):
            send({"jsonrpc": "2.0", "method": "test/flood", "params": {"pad": "p" * 4000}})
        out.flush()
    else:
        params = msg["params"]
        big = params["arguments"]["big"] if msg["method"] == "tools/call" else params["big"]
        send({"jsonrpc": "2.0", "id": msg["id"], "result": len(big)})
        out.flush()
'''


@pytest.mark.parametrize("watch", ["watch-quiet", "watch-as-is"])
@pytest.mark.parametrize("path", ["request", "tool-call"])
def test_a_write_that_finds_stdin_full_starts_the_reader_to_drain_stdout(
        path: str, watch: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server is blocked writing to its full stdout and reads nothing; our 1 MiB request
    fills its stdin. The caller writes and reads nothing meanwhile, so only a reader can
    unblock both sides, and the call must come back long before its timeout. Both ways a
    request is written: ``request`` (the transport's ``send_bytes_until``) and a tool call
    (its ``exchange``, the write and first read in one).

    ``watch-quiet``: the idle watch starts no reader (it may otherwise see the flood with
    the role free, between the two calls, and start one first), so the reader must be the
    one the full pipe starts, with the reader still absent when the pipe filled.
    ``watch-as-is``: whichever starts it."""
    full: list[bool] = []
    real_full = Session._idle_full

    def spy(self: Session) -> None:
        full.append(self._role.absent)   # the reader still absent when the pipe filled
        real_full(self)

    monkeypatch.setattr(Session, "_idle_full", spy)
    if watch == "watch-quiet":
        monkeypatch.setattr(Session, "_idle_ready", lambda self, force: 0.005)
    notes: list[Message] = []
    session = open_session([sys.executable, "-c", FLOODER], name="flooder",
                           on_notification=notes.append)
    try:
        assert session.request("flood", {}, timeout=5) == "flooding"
        started = time.monotonic()
        big = "b" * (1 << 20)
        if path == "request":
            assert session.request("big", {"big": big}, timeout=30) == len(big)
        else:
            assert session._exchange is not None
            assert session._request("tools/call", {"name": "big", "arguments": {"big": big}},
                                    30, None, None, True, "big") == len(big)
        assert time.monotonic() - started < 10
        assert _readers() == ["mcpsync-stdio-reader-flooder"]
        if watch == "watch-quiet":
            assert full and full[0] is True
        assert wait_until(lambda: len(notes) == 1024, 10), len(notes)
    finally:
        session.close()


def test_what_arrives_just_after_a_call_is_read() -> None:
    """A notification 1 ms after the answer: the watch most likely finds the role still
    held then and leaves the session out of its poll for HANDOFF_GRACE; it must look again
    after that and start the reader. A new session each time, so each starts absent."""
    for attempt in range(5):
        arrived = threading.Event()
        session = open_session(name=f"soon{attempt}",
                               on_notification=lambda _message, arrived=arrived: arrived.set())
        try:
            assert session._role.absent
            assert session.request("notify_later", {"ms": 1}, timeout=5) == "later"
            assert arrived.wait(5), attempt
        finally:
            session.close()


def test_the_watch_pause_doubles_while_asked_at_each_pause_end_and_starts_over_later(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The session's answer to the watch with the role held, on a clock of the test's own:
    asked just after each pause ends (calls back to back), 5, 10, 20, 40 ms, then 50 and no
    more; asked later than HANDOFF_GRACE after a pause's end, 5 ms again."""
    from mcpsync.session import _background
    from mcpsync.session._base import Aside, Phase

    now = [1000.0]
    clock = types.SimpleNamespace(**{name: getattr(time, name) for name in dir(time)
                                     if not name.startswith("_")})
    clock.monotonic = lambda: now[0]
    monkeypatch.setattr(_background, "time", clock)
    session: Any = types.SimpleNamespace(
        _lock=threading.Lock(), _role=types.SimpleNamespace(absent=True, holder=object()),
        _phase=Phase.OPEN, _aside=Aside(False, None), _transport=None)

    def ask_at_each_end(times: int) -> list[float]:
        answers = []
        for _ in range(times):
            answers.append(_background.BackgroundReader._idle_ready(session, False))
            now[0] += answers[-1] + 0.0005   # the next answer comes right after the pause
        return answers

    assert ask_at_each_end(7) == [0.005, 0.01, 0.02, 0.04, 0.05, 0.05, 0.05]
    assert MAX_WATCH_PAUSE == 0.05 and HANDOFF_GRACE == 0.005
    now[0] += HANDOFF_GRACE   # 5.5 ms after the last pause ended: not back to back
    assert ask_at_each_end(2) == [0.005, 0.01]
    now[0] += 10.0            # left alone
    assert ask_at_each_end(1) == [0.005]


def test_calls_back_to_back_lengthen_the_watch_pause_and_a_later_call_gets_the_short_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With a real server: calls back to back take the watch's pause to MAX_WATCH_PAUSE
    and no further; a call made after the session was left alone longer than that is
    answered HANDOFF_GRACE first; a notification sent 1 ms after the last call is read."""
    pauses: list[float] = []
    real = Session._idle_ready

    def spy(self: Session, force: bool) -> float:
        answer = real(self, force)
        if answer > 0:
            pauses.append(answer)
        return answer

    monkeypatch.setattr(Session, "_idle_ready", spy)
    arrived = threading.Event()
    session = open_session(name="busy", on_notification=lambda _message: arrived.set())
    try:
        ends = time.monotonic() + 10
        n = 0
        while MAX_WATCH_PAUSE not in pauses and time.monotonic() < ends:
            assert session.request("echo", {"n": n}, timeout=5) == {"n": n}
            n += 1
        assert pauses[0] == HANDOFF_GRACE, pauses
        assert MAX_WATCH_PAUSE in pauses, (n, pauses)
        assert max(pauses) == MAX_WATCH_PAUSE
        assert _readers() == []
        # Left alone longer than the longest pause before each call: each call's first
        # pause (when the watch finds its role held at all) is the short one.
        firsts = []
        for n in range(10):
            time.sleep(MAX_WATCH_PAUSE + 0.02)
            mark = len(pauses)
            assert session.request("echo", {"n": n}, timeout=5) == {"n": n}
            if len(pauses) > mark:
                firsts.append(pauses[mark])
        assert firsts and set(firsts) == {HANDOFF_GRACE}, (firsts, pauses)
        assert _readers() == []
        # Sent just after a call: read (the reader started for it once the pause ends).
        assert session.request("notify_later", {"ms": 1}, timeout=5) == "later"
        assert arrived.wait(5), "what came just after the last call was never read"
    finally:
        session.close()


def test_a_reader_that_cannot_be_started_leaves_the_session_watched_and_usable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The process is out of threads when a future needs the reader: the submit fails with
    that error, the reader is left absent and watched (nothing half-started), and the next
    need starts it."""
    from mcpsync.session import _background

    real = _background.new_thread
    failures = [1]

    def new_thread(name: str, target: Any, *args: Any) -> threading.Thread:
        thread = real(name, target, *args)
        if failures:
            failures.pop()

            def start() -> None:
                raise RuntimeError("can't start new thread")

            thread.start = start  # type: ignore[method-assign]
        return thread

    monkeypatch.setattr(_background, "new_thread", new_thread)
    session = open_session()
    try:
        assert session.request("echo", {}, timeout=5) == {}
        with pytest.raises(RuntimeError, match="can't start new thread"):
            session.submit("echo", {"n": 1}, timeout=5)
        # Absent and watched still, or started by the clean-up's own wake-up that followed.
        role, reader = session._role, session._bg_thread
        assert (role.absent and reader is None and role.parked and not role.long_park) \
            or (not role.absent and reader is not None and reader.is_alive())
        assert session.submit("echo", {"n": 2}, timeout=5).result(5) == {"n": 2}
        assert _readers() == ["mcpsync-stdio-reader-peer"]
    finally:
        session.close()


def test_close_of_an_idle_session_starts_no_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[str] = []
    real = Session._start_reader

    def spy(self: Session) -> None:
        started.append(self.name)
        real(self)

    monkeypatch.setattr(Session, "_start_reader", spy)
    session = open_session()
    assert session.request("echo", {}, timeout=5) == {}
    session.close()
    assert _readers() == []
    # Asked (the close wakes the reader role as it always did), but nothing was started.
    assert session._bg_thread is None


def test_a_reader_the_watch_cannot_start_is_tried_again(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The watch finds a notification with the role free, and the process is out of threads
    as it starts the reader: the session stays watched, the watch asks again a moment
    later, and the notification is read then."""
    from mcpsync.session import _background

    real = _background.new_thread
    failed_on: list[str] = []

    def new_thread(name: str, target: Any, *args: Any) -> threading.Thread:
        thread = real(name, target, *args)
        if not failed_on:
            failed_on.append(threading.current_thread().name)

            def start() -> None:
                raise RuntimeError("can't start new thread")

            thread.start = start  # type: ignore[method-assign]
        return thread

    monkeypatch.setattr(_background, "new_thread", new_thread)
    arrived = threading.Event()
    session = open_session(on_notification=lambda _message: arrived.set())
    try:
        assert session.request("notify_later", {"ms": 50}, timeout=5) == "later"
        assert arrived.wait(5), "the notification was never read"
        assert failed_on == ["mcpsync-stdio-watch"]
        assert "could not start its reader" in caplog.text
        assert _readers() == ["mcpsync-stdio-reader-peer"]
    finally:
        session.close()
