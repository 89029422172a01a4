"""The reader role given back without the session's lock (a leader's usual give-back, in
``Session._request``).

A caller that led gives the role back by a plain store, and takes the lock only to wake the
background reader. What could go wrong is a wake-up lost between the two threads: the
caller decides whether to wake the reader from ``long_park`` (is it in a long sleep?) while
the reader decides, under the lock but without the caller, to sleep long because the caller
still held the role. These tests hold both orders to a woken reader, deterministically: a
trace function on the background reader's thread stretches its sleep to 60 s (so a lost
wake-up shows as a notification never read within the 30 s the test waits, nothing is
timed) or stops it inside its locked section while the caller gives the role back. The
others hold the role's mutual exclusion against calls from several threads and a close.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import CodeType, FrameType
from typing import Any

import pytest

from mcpsync.errors import ClosedError, ConnectionLost
from mcpsync.jsonrpc import Message
from mcpsync.session import Session
from mcpsync.session._background import BackgroundReader
from mcpsync.session._base import HANDOFF_GRACE
from mcpsync.session._engine import Session as EngineSession
from mcpsync.session._role import BG
from mcpsync.transport.memory import Deliver, MemoryTransport

from .helpers import open_session

pytestmark = pytest.mark.timeout(90)

_BG_RUN = BackgroundReader._bg_run.__code__


_RELEASE_ROLE = EngineSession._release_role.__code__
#: Where a leader gives the role back without the lock (the lead is written in _request).
_REQUEST = EngineSession._request.__code__


def _line_of(text: str) -> int:
    """The line number of the one line of ``_bg_run`` that contains ``text``."""
    lines, first = inspect.getsourcelines(BackgroundReader._bg_run)
    found = [first + i for i, line in enumerate(lines) if text in line]
    assert len(found) == 1, (text, found)
    return found[0]


def _loop_top_line() -> int:
    """The first line of ``_bg_run``'s loop (where it takes the lock to look at the role)."""
    lines, first = inspect.getsourcelines(BackgroundReader._bg_run)
    found = [first + i + 1 for i, line in enumerate(lines) if line.strip() == "while True:"]
    assert len(found) == 1, found
    assert lines[found[0] - first].strip() == "with self._lock:", lines[found[0] - first]
    return found[0]


def _fast_store_line() -> int:
    """The line of the lock-free give-back (``holder = None`` in ``_request``, the first
    statement of its line: the token's store follows it on the same line)."""
    lines, first = inspect.getsourcelines(EngineSession._request)
    found = [first + i for i, line in enumerate(lines)
             if line.strip().startswith("role.holder = None;")]
    assert len(found) == 1, found
    return found[0]


@contextlib.contextmanager
def _tracing(code: CodeType, on_line: Callable[[FrameType], None], *,
             new_threads: bool = False) -> Iterator[None]:
    """Run ``on_line(frame)`` before each line of ``code``: in this thread, or with
    ``new_threads`` in the threads started inside instead."""
    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            on_line(frame)
        return local

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        return local if frame.f_code is code else None

    settrace = threading.settrace if new_threads else sys.settrace
    settrace(trace)
    try:
        yield
    finally:
        settrace(None)


def _tracing_release(
        on_line: Callable[[FrameType], None]) -> contextlib.AbstractContextManager[None]:
    """This thread runs ``on_line(frame)`` before each line of ``_release_role``."""
    return _tracing(_RELEASE_ROLE, on_line)


def _tracing_give_back(
        on_line: Callable[[FrameType], None]) -> contextlib.AbstractContextManager[None]:
    """This thread runs ``on_line(frame)`` before each line of ``_request`` (where a leader
    gives the role back without the lock)."""
    return _tracing(_REQUEST, on_line)


def _tracing_reader(
        on_line: Callable[[FrameType], None]) -> contextlib.AbstractContextManager[None]:
    """Threads started inside run ``on_line(frame)`` before each line of ``_bg_run``."""
    return _tracing(_BG_RUN, on_line, new_threads=True)


def _notes() -> tuple[queue.Queue[Message], Callable[[Message], None]]:
    notes: queue.Queue[Message] = queue.Queue()
    return notes, notes.put


def _is_long_call(frame: FrameType) -> bool:
    holder = frame.f_locals.get("holder")
    return getattr(holder, "method", None) == "notify_later"


def test_a_role_given_back_wakes_a_reader_in_a_long_sleep(no_leaks: None) -> None:
    """While one call keeps the role, the background reader's sleeps double (long_park);
    here each long one is made 60 s. The caller gives the role back with nothing pending:
    it must see ``long_park`` and wake the reader, which then reads the notification the
    server sends 20 ms after its answer (else it would wait out the 60 s)."""
    acquire_line = _line_of("if not gate.acquire(timeout=park_for):")

    def stretch(frame: FrameType) -> None:
        if frame.f_lineno == acquire_line and frame.f_locals["park_for"] > HANDOFF_GRACE:
            frame.f_locals["park_for"] = 60.0   # written back when the trace returns

    notes, on_note = _notes()
    with _tracing_reader(stretch):
        session = open_session(on_notification=on_note, reader=True)
    try:
        assert session.request("echo", {"warm": 1}) == {"warm": 1}
        for i in range(3):
            assert session.request("notify_later", {"before": 200, "ms": 20},
                                   timeout=20) == "later"
            assert notes.get(timeout=30).method == "test/later", i
    finally:
        session.close()


def test_the_reader_looks_again_before_a_long_sleep(no_leaks: None) -> None:
    """The other order: the caller has passed the lock-free give-back's test (the reader
    was parked, in a short sleep) and is stopped before it stores ``holder = None``. The
    reader's short sleep ends meanwhile; it sees the caller still holding the role and
    decides to sleep long, and is stopped (inside its lock) before it stores
    ``long_park``. The caller then gives the role back, without the lock (which the reader
    holds: the caller must not need it), and finds no reason to wake it
    (``long_park`` is still false). The reader must look at the role again after storing
    ``long_park`` and not sleep: the notification the server sends 50 ms after its answer
    is read (the sleep is made 60 s, so a reader that slept would miss the 30 s below).
    A short call can find the reader's sleep already long; it is then tried again."""
    store_line = _line_of("self._role.long_park = park_for > HANDOFF_GRACE")
    fast_line = _fast_store_line()
    caller_paused = threading.Event()
    reader_paused = threading.Event()
    resume = threading.Event()
    stuck: list[bool] = []
    armed = [False]

    def pause_reader(frame: FrameType) -> None:
        if (frame.f_lineno == store_line and caller_paused.is_set()
                and not reader_paused.is_set()
                and frame.f_locals["park_for"] > HANDOFF_GRACE and _is_long_call(frame)):
            frame.f_locals["park_for"] = 60.0
            reader_paused.set()
            if not resume.wait(20):   # the caller needed the lock we hold: a deadlock
                stuck.append(True)

    def pause_caller(frame: FrameType) -> None:
        if (frame.f_lineno == fast_line and armed[0]
                and getattr(frame.f_locals.get("call"), "method", None) == "notify_later"):
            armed[0] = False
            if session._role.long_park:
                return   # the reader already sleeps long: not this schedule, try again
            caller_paused.set()
            reader_paused.wait(10)   # the reader's short sleep ends, it decides long

    notes, on_note = _notes()
    with _tracing_reader(pause_reader):
        session = open_session(on_notification=on_note, reader=True)
    try:
        for attempt in range(30):
            assert session.request("echo", {"warm": attempt}) == {"warm": attempt}
            armed[0] = True
            with _tracing_give_back(pause_caller):
                assert session.request("notify_later", {"before": 0, "ms": 50},
                                       timeout=30) == "later"
            if caller_paused.is_set():
                break
            assert notes.get(timeout=30).method == "test/later"
        assert caller_paused.is_set(), "the reader's sleep was always long already"
        assert reader_paused.is_set(), "the reader never decided on a long sleep"
        assert not resume.is_set()
        assert session._role.holder is None   # given back while the reader held the lock
        assert session._role.long_park is False   # what the caller saw
        resume.set()
        assert notes.get(timeout=30).method == "test/later"
        assert not stuck, "giving the role back waited for the session's lock"
        assert session.request("echo", {"after": 1}) == {"after": 1}
    finally:
        resume.set()
        session.close()


class _BlockingPeer:
    """Answers every request with its params; a ``block`` request's write sets
    ``writing``, then waits for ``release`` (a write blocked on a full pipe)."""

    release = threading.Event()
    writing = threading.Event()   # a ``block`` request's write has begun

    def __init__(self, deliver: Deliver) -> None:
        self._deliver = deliver

    def write(self, frame: bytes) -> None:
        msg = json.loads(frame)
        if msg.get("method") == "block":
            self.writing.set()
            assert self.release.wait(30)
        if "id" in msg:
            self._deliver(json.dumps({"jsonrpc": "2.0", "id": msg["id"],
                                      "result": msg.get("params") or {}}).encode())

    def close(self) -> None:
        pass


def test_a_takeover_of_a_blocked_write_is_not_undone_by_the_give_back(
        no_leaks: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A caller's write blocks for a whole sleep of the background reader, which then
    takes the role over (it has tested ``sending is holder`` and is stopped before it
    stores ``holder = BG``). The write ends; the caller clears ``sending``, leads, reads
    its own answer and gives the role back. The lock-free give-back must not pass its test
    here (else: the reader stores BG and reads, then the caller stores None, and the role
    is free while the reader reads, so every later call reads beside it): it requires the
    reader to be parked, which a reader deciding a takeover is not, and so waits for the
    lock. The caller is let run to its lock-free store if it reaches it, the reader then
    stores BG, then the caller goes on; the role must end with the reader, and later calls
    never read two at a time.

    The schedule does not depend on the machine's speed: the reader is held at the top of
    its loop, with the role free and outside its lock, until the caller has claimed the
    role and its write has begun (else, on a loaded machine, the reader's short sleep could
    end first and it would take the free role itself, and the write would never be seen
    blocked by a reader that looks)."""
    _BlockingPeer.release = threading.Event()
    _BlockingPeer.writing = threading.Event()
    takeover_line = _line_of("self._role.holder = _BG")
    top_line = _loop_top_line()
    fast_line = _fast_store_line()
    hold_at_top = [False]
    held_at_top = threading.Event()
    held_too_long: list[bool] = []
    reader_paused = threading.Event()
    resume_reader = threading.Event()
    caller_paused = threading.Event()
    resume_caller = threading.Event()
    armed = [True]
    inside: set[str] = set()
    most = [0]
    guard = threading.Lock()
    receive = MemoryTransport.receive

    def counting_receive(self: MemoryTransport, timeout: float | None) -> Any:
        with guard:
            inside.add(threading.current_thread().name)
            most[0] = max(most[0], len(inside))
        try:
            return receive(self, timeout)
        finally:
            with guard:
                inside.discard(threading.current_thread().name)

    monkeypatch.setattr(MemoryTransport, "receive", counting_receive)

    def is_block(call: object) -> bool:
        return getattr(call, "method", None) == "block"

    def pause_reader(frame: FrameType) -> None:
        if (frame.f_lineno == top_line and hold_at_top[0]
                and frame.f_locals["self"]._role.holder is None):
            # About to look at a free role: wait (outside the lock) until the caller has
            # claimed it and is writing, so that the reader finds the write in progress.
            hold_at_top[0] = False
            held_at_top.set()
            if not _BlockingPeer.writing.wait(20):
                held_too_long.append(True)
        elif frame.f_lineno == takeover_line and armed[0]:
            holder = frame.f_locals.get("holder")
            if is_block(holder) and frame.f_locals["self"]._role.sending is holder:
                armed[0] = False
                reader_paused.set()
                resume_reader.wait(20)

    def pause_caller(frame: FrameType) -> None:
        if frame.f_lineno == fast_line and is_block(frame.f_locals.get("call")):
            caller_paused.set()
            resume_caller.wait(20)

    def director() -> None:
        if not reader_paused.wait(20):
            return
        _BlockingPeer.release.set()
        caller_paused.wait(2)   # the fixed give-back never gets there: it waits for the lock
        resume_reader.set()
        time.sleep(0.3)         # the reader stores BG and reads
        resume_caller.set()

    transport = MemoryTransport(_BlockingPeer, name="blocking")
    transport.start()
    with _tracing_reader(pause_reader):
        session = Session(transport, name="blocking", default_timeout=5.0)
        session.start()
    steer = threading.Thread(target=director, name="mcpsync-test-director", daemon=True)
    try:
        # Each call leads or is answered by the reader; either way the reader comes back to
        # the top of its loop with the role free (after a call that led, once its sleep
        # ends; when it holds the role, a later call asks for it and gets it granted).
        hold_at_top[0] = True
        for attempt in range(20):
            assert session.request("echo", {"warm": attempt}) == {"warm": attempt}
            if held_at_top.wait(2):
                break
        assert held_at_top.is_set(), \
            "the background reader never came back to look at a free role"
        assert session._role.holder is None
        steer.start()
        with _tracing_give_back(pause_caller):
            assert session.request("block", {"b": 1}, timeout=20) == {"b": 1}
        steer.join(30)
        assert not held_too_long, "the caller's write never began"
        assert reader_paused.is_set(), "the reader never took the blocked write's role"
        assert not caller_paused.is_set(), "the give-back passed its lock-free test"
        assert session._role.holder is BG or session._role.holder is None
        most[0] = 0
        for i in range(10):
            assert session.request("echo", {"n": i}, timeout=5) == {"n": i}
        assert most[0] == 1, "two threads read at once"
    finally:
        _BlockingPeer.release.set()
        _BlockingPeer.writing.set()
        resume_reader.set()
        resume_caller.set()
        if steer.is_alive():
            steer.join(30)
        session.close()


def test_a_ctrl_c_while_the_wake_up_waits_for_the_lock_still_wakes_the_reader(
        no_leaks: None) -> None:
    """The lock-free give-back has stored ``holder = None`` and decided to wake the reader
    (it sleeps long: each long sleep is made 60 s here), and waits for the session's lock,
    which another thread holds; a real SIGINT arrives meanwhile, so the lock is never taken
    there and the KeyboardInterrupt leaves the call. The call's own clean-up gives the role
    back again under the lock: finding the role free (not this call's any more) with the
    reader in a long sleep, it must still wake it, so the notification the server sends
    20 ms after its answer is read (a lost wake-up would miss the 30 s below)."""
    acquire_line = _line_of("if not gate.acquire(timeout=park_for):")
    lines, first = inspect.getsourcelines(EngineSession._release_role)
    lock_line = [first + i for i, line in enumerate(lines)
                 if "for held in self._locking" in line]
    assert len(lock_line) == 1
    armed = [False]
    grab = threading.Event()
    grabbed = threading.Event()
    seen: list[object] = []

    def stretch(frame: FrameType) -> None:
        if frame.f_lineno == acquire_line and frame.f_locals["park_for"] > HANDOFF_GRACE:
            frame.f_locals["park_for"] = 60.0   # written back when the trace returns

    def at_lock(frame: FrameType) -> None:
        if (frame.f_lineno == lock_line[0] and armed[0]
                and getattr(frame.f_locals.get("call"), "method", None) == "notify_later"):
            armed[0] = False
            seen.append(session._role.holder)
            grab.set()
            assert grabbed.wait(10)

    def hold_the_lock() -> None:
        if not grab.wait(20):
            return
        with session._lock:
            grabbed.set()
            time.sleep(0.1)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)

    notes, on_note = _notes()
    with _tracing_reader(stretch):
        session = open_session(on_notification=on_note, reader=True)
    helper = threading.Thread(target=hold_the_lock, name="mcpsync-test-holder", daemon=True)
    try:
        assert session.request("echo", {"warm": 1}) == {"warm": 1}
        helper.start()
        armed[0] = True
        with pytest.raises(KeyboardInterrupt), _tracing_release(at_lock):
            session.request("notify_later", {"before": 200, "ms": 20}, timeout=20)
        helper.join(20)
        assert seen == [None], "the call did not reach the wake-up by the lock-free path"
        assert notes.get(timeout=30).method == "test/later"
        assert not session._lock.locked()
        assert not session._pending
        assert session.request("echo", {"after": 1}) == {"after": 1}
    finally:
        grab.set()
        grabbed.set()
        if helper.is_alive():
            helper.join(20)
        session.close()


def test_calls_from_several_threads_and_a_close_meanwhile(no_leaks: None) -> None:
    """Three threads call in loops (the role goes back and forth, given back without the
    lock) while the server sends notifications, and a fourth thread closes the session at
    a different moment each round: every call either answers or fails with the close, every
    caller ends, and no call is left pending or holding the role."""
    for round_ in range(8):
        _, on_note = _notes()
        session = open_session(on_notification=on_note, reader=True)
        errors: list[BaseException] = []
        counts = [0, 0, 0]

        def caller(k: int, session: Session = session, errors: list[BaseException] = errors,
                   counts: list[int] = counts) -> None:
            try:
                while True:
                    method = "notify" if counts[k] % 5 == 0 else "echo"
                    got = session.request(method, {"k": k, "n": counts[k]}, timeout=20)
                    assert got == ("notified" if method == "notify"
                                   else {"k": k, "n": counts[k]})
                    counts[k] += 1
            except (ClosedError, ConnectionLost):
                return
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=caller, args=(k,), daemon=True,
                                    name=f"mcpsync-test-caller-{k}") for k in range(3)]
        try:
            for t in threads:
                t.start()
            time.sleep(0.02 + 0.015 * round_)
            closer = threading.Thread(target=session.close, name="mcpsync-test-closer",
                                      daemon=True)
            closer.start()
            closer.join(20)
            assert not closer.is_alive()
            for t in threads:
                t.join(20)
            assert not any(t.is_alive() for t in threads), round_
            assert not errors, errors
            assert not session._pending
            # A caller may claim the role while the close is failing the calls (the
            # phase is CLOSING) and then find its call failed and never lead: the role
            # then stays with that settled call, which nothing reads for any more (so
            # since before the lock-free give-back; main's tree shows it too).
            holder = session._role.holder
            assert holder is None or holder is BG or getattr(holder, "done", False), holder
            assert not session._lock.locked()
        finally:
            session.close()
