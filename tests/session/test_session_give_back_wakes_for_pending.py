"""A leader that gives the reader role back while another caller's call is still pending wakes
the background reader, even when the reader's sleep is a short one.

The lock-free give-back (in ``Session._request``) wakes the background reader when it sleeps
long (``long_park``), or when calls are still pending: then someone must read their answers,
and nobody else will (a follower only sleeps on its call). In a short sleep the reader would
look again within ``HANDOFF_GRACE`` by itself, so dropping the pending-calls reason would
cost a follower up to that much latency, never its answer; at 5 ms no test could tell. Here
a trace function on the background reader's thread stretches that short sleep to 30 s (the
reader still says it sleeps short: ``long_park`` is false), so a give-back that did not wake
it would leave the follower's answer unread for 30 s, where the test allows 10; a woken
reader reads it at once. Nothing is timed but those generous bounds.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import CodeType, FrameType
from typing import Any

import pytest

from mcpsync.session._background import BackgroundReader
from mcpsync.session._base import HANDOFF_GRACE
from mcpsync.session._engine import Session as EngineSession

from .helpers import open_session

pytestmark = pytest.mark.timeout(90)

#: How long the reader's short sleep is made, and how long the follower may wait for its
#: answer (which the server sends 1 s after the request) before the test fails.
STRETCHED = 30.0
BOUND = 10.0


def _line_in(func: Callable[..., Any], text: str) -> int:
    """The line number of the one line of ``func`` that is ``text`` (stripped), or whose
    first statement it is (``text;`` and more statements on the same line)."""
    lines, first = inspect.getsourcelines(func)
    found = [first + i for i, line in enumerate(lines)
             if line.strip() == text or line.strip().startswith(text + ";")]
    assert len(found) == 1, (text, found)
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


def _is_leader_call(call: object) -> bool:
    return getattr(call, "method", None) == "sleep" and \
        getattr(call, "params", None) == {"ms": 300, "leader": True}


def test_a_give_back_with_a_follower_pending_wakes_a_reader_in_a_short_sleep(
        no_leaks: None) -> None:
    """The main thread leads a call answered after 300 ms; meanwhile another thread's call,
    answered after 1 s, follows (it finds the role taken). The background reader, seeing the
    new holder, decides on a short sleep, which is stretched to 30 s. The leader reads its
    own answer, and gives the role back (without the lock: the reader is parked) while the
    follower's call is pending and its answer not yet read: it must wake the reader, which
    then reads the follower's answer as it comes (well within 10 s of the request)."""
    acquire_line = _line_in(BackgroundReader._bg_run, "if not gate.acquire(timeout=park_for):")
    fast_line = _line_in(EngineSession._request, "role.holder = None")
    stretched = threading.Event()
    armed = [False]
    at_give_back: list[tuple[list[str], bool, bool]] = []

    def stretch(frame: FrameType) -> None:
        if (frame.f_lineno == acquire_line and armed[0]
                and frame.f_locals["park_for"] == HANDOFF_GRACE
                and _is_leader_call(frame.f_locals.get("holder"))):
            armed[0] = False
            assert frame.f_locals["self"]._role.long_park is False
            frame.f_locals["park_for"] = STRETCHED   # written back when the trace returns
            stretched.set()

    def watch_give_back(frame: FrameType) -> None:
        if frame.f_lineno == fast_line and _is_leader_call(frame.f_locals.get("call")):
            role = session._role
            at_give_back.append(([c.method for c in session._pending.values()],
                                 role.parked, role.long_park))

    with _tracing(BackgroundReader._bg_run.__code__, stretch, new_threads=True):
        session = open_session(reader=True)
    follower_got: list[Any] = []
    follower_took: list[float] = []

    def follow() -> None:
        # Sent once the leader holds the role, so that this call follows.
        deadline = time.monotonic() + 20
        while not _is_leader_call(session._role.holder) and time.monotonic() < deadline:
            time.sleep(0.001)
        began = time.monotonic()
        try:
            follower_got.append(session.request("sleep", {"ms": 1000}, timeout=60))
        except BaseException as exc:  # reported below
            follower_got.append(exc)
        follower_took.append(time.monotonic() - began)

    follower = threading.Thread(target=follow, name="mcpsync-test-follower", daemon=True)
    try:
        for attempt in range(20):
            assert session.request("echo", {"warm": attempt}) == {"warm": attempt}
            if session._role.holder is None:   # given back: the next call claims it
                break
        armed[0] = True
        follower.start()
        with _tracing(EngineSession._request.__code__, watch_give_back):
            got = session.request("sleep", {"ms": 300, "leader": True}, timeout=30)
        assert got["slept"] == 300
        assert stretched.wait(5), "the background reader never slept short seeing the leader"
        assert at_give_back, "the leader did not give the role back by the lock-free path"
        pending, parked, long_park = at_give_back[0]
        assert pending == ["sleep"], "the follower's call was not pending at the give-back"
        assert parked and not long_park, (parked, long_park)
        follower.join(BOUND)
        assert not follower.is_alive(), (
            f"the follower's answer was not read within {BOUND:g} s: the give-back left "
            "the background reader asleep with a call pending")
        assert isinstance(follower_got[0], dict) and follower_got[0]["slept"] == 1000, \
            follower_got
        assert follower_took[0] < BOUND, follower_took
        assert session.request("echo", {"after": 1}) == {"after": 1}
    finally:
        session.close()
        follower.join(30)
