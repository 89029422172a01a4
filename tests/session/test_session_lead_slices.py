"""How a caller that reads its own answer (a leader) cuts its wait into slices.

On the main thread every wait is cut into slices of ``MAIN_THREAD_SLICE``, so that a
simulated Ctrl-C (which interrupts no system call) and the deadline are noticed. Asking which
thread leads costs more than the rest of a wait's set-up, and the first wait usually ends with
the answer, so the first wait longer than a slice is cut on any thread without asking; a
later wait asks, and on another thread is whole. These tests record the timeouts a leader
hands the transport for an answer that takes 400 ms, against a real server process.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from mcpsync.session import Session
from mcpsync.session._base import MAIN_THREAD_SLICE
from mcpsync.transport.stdio import StdioTransport

from .helpers import open_session

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def recorded(no_leaks: None, monkeypatch: pytest.MonkeyPatch
             ) -> Iterator[tuple[Session, dict[str, list[float | None]]]]:
    """A session on the scriptable peer whose transport records, per thread, the timeout of
    every ``receive()``; spied on the class before the session exists."""
    waits: dict[str, list[float | None]] = {}
    receive: Callable[..., Any] = StdioTransport.receive

    def spy(self: StdioTransport, timeout: float | None) -> Any:
        waits.setdefault(threading.current_thread().name, []).append(timeout)
        return receive(self, timeout)

    monkeypatch.setattr(StdioTransport, "receive", spy)
    session = open_session()
    try:
        yield session, waits
    finally:
        session.close()


def _led_slow_call(session: Session, waits: dict[str, list[float | None]]) -> list[float | None]:
    """Make a warm call then one answered after 400 ms, until this thread led the slow one
    (read its own answer; on a loaded machine the background reader may take the role back
    between two calls): the timeouts this thread handed ``receive()`` for the slow call."""
    me = threading.current_thread().name
    for _ in range(20):
        assert session.request("echo", {"warm": 1}) == {"warm": 1}
        waits.pop(me, None)
        got = session.request("sleep", {"ms": 400}, timeout=30)
        assert got["slept"] == 400
        mine = waits.pop(me, [])
        if mine:
            return mine
    raise AssertionError("this thread never led its own call")


def test_the_main_thread_waits_in_slices(
        recorded: tuple[Session, dict[str, list[float | None]]]) -> None:
    session, waits = recorded
    assert threading.current_thread() is threading.main_thread()
    mine = _led_slow_call(session, waits)
    assert len(mine) >= 3, mine   # 400 ms in slices of 100 ms
    assert all(t is not None and 0 < t <= MAIN_THREAD_SLICE for t in mine), mine


def test_another_thread_slices_only_its_first_wait(
        recorded: tuple[Session, dict[str, list[float | None]]]) -> None:
    session, waits = recorded
    out: list[list[float | None]] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            out.append(_led_slow_call(session, waits))
        except BaseException as exc:  # reported below
            errors.append(exc)

    thread = threading.Thread(target=run, name="mcpsync-test-leader", daemon=True)
    thread.start()
    thread.join(40)
    assert not thread.is_alive()
    assert not errors, errors
    mine = out[0]
    # The first wait is a slice; the next one (asked: not the main thread) the whole rest of
    # the 30 s timeout, in which the answer arrives.
    assert mine[0] == MAIN_THREAD_SLICE, mine
    assert len(mine) >= 2, mine
    assert all(t is not None and t > 20 for t in mine[1:]), mine
