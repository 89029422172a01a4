"""``receive(timeout, main_slice)``, the session leader's read: the main thread's wait is cut
to the slice, and the thread is asked only where the wait begins (the eager read found
nothing). Each wait is the one the leader asked for before it passed the slice:
``receive(main_slice)`` on the main thread when its remaining time was longer, else
``receive(None if remaining == math.inf else remaining)``."""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcpsync.session._base import MAIN_THREAD_SLICE
from mcpsync.transport.stdio import StdioTransport

pytestmark = pytest.mark.timeout(60)

REMAINING = [1e-9, 0.05, 0.0999, 0.1, 0.1000001, 0.25, 1.0, 30.0, 86400.0, 1e12, math.inf]


class _Recorder:
    def __init__(self) -> None:
        self.asked: list[object] = []

    def poll(self, timeout: object = None) -> list[tuple[int, int]]:
        self.asked.append(timeout)
        return []


@pytest.fixture
def quiet(tmp_path: Path, no_leaks: None) -> Iterator[StdioTransport]:
    path = tmp_path / "quiet.py"
    path.write_text("import sys\nsys.stdin.read()\n")
    t = StdioTransport([sys.executable, str(path)], name="quiet")
    t.start()
    try:
        yield t
    finally:
        t.close()


def _polls(t: StdioTransport, calls: list[tuple[float | None, ...]]) -> list[object]:
    """What poll() was asked for each ``receive(*args)``, the eager read skipped."""
    real = t._poller
    recorder = _Recorder()
    t._poller = recorder
    try:
        for args in calls:
            t._skip_eager = 1   # poll at once, as after a read that found nothing
            assert t.receive(*args) == []
    finally:
        t._poller = real
    return recorder.asked


def _before(remaining: float, main: bool) -> float | None:
    """The timeout the leader passed before it passed the slice."""
    if remaining > MAIN_THREAD_SLICE and main:
        return MAIN_THREAD_SLICE
    return None if remaining == math.inf else remaining


def _compare(t: StdioTransport, main: bool) -> None:
    sliced = _polls(t, [(r, MAIN_THREAD_SLICE) for r in REMAINING])
    before = _polls(t, [(_before(r, main),) for r in REMAINING])
    assert sliced == before


def test_on_the_main_thread_the_wait_is_the_slice_at_most(quiet: StdioTransport) -> None:
    assert threading.current_thread() is threading.main_thread()
    _compare(quiet, main=True)
    assert _polls(quiet, [(math.inf, MAIN_THREAD_SLICE)]) == [100]


def test_on_another_thread_the_wait_is_the_whole_remaining_time(
        quiet: StdioTransport) -> None:
    errors: list[BaseException] = []

    def other() -> None:
        try:
            _compare(quiet, main=False)
            assert _polls(quiet, [(math.inf, MAIN_THREAD_SLICE)]) == [None]  # poll(): forever
        except BaseException as exc:  # reported below
            errors.append(exc)

    thread = threading.Thread(target=other, name="mcpsync-test-other", daemon=True)
    thread.start()
    thread.join(30)
    assert not thread.is_alive()
    assert not errors, errors


def test_the_thread_is_asked_only_when_the_eager_read_finds_nothing(
        tmp_path: Path, no_leaks: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read that finds a line at once decides no wait, so it does not ask which thread
    it runs on; one that finds nothing does, once."""
    path = tmp_path / "talk.py"
    path.write_text("import sys\nfor line in sys.stdin:\n    print(line.strip(), flush=True)\n")
    t = StdioTransport([sys.executable, str(path)], name="talk")
    t.start()
    asked: list[object] = []
    real = threading.get_ident

    def counting() -> int:
        asked.append(1)
        return real()

    try:
        monkeypatch.setattr(threading, "get_ident", counting)
        assert t.receive(0.5, MAIN_THREAD_SLICE) == []   # nothing written yet: it polls
        assert len(asked) == 1
        t.send_bytes(b'{"jsonrpc":"2.0","method":"x"}')
        got: list[object] = []
        for _ in range(200):
            t._skip_eager = 0
            asked.clear()
            got = list(t.receive(math.inf, MAIN_THREAD_SLICE) or [])
            if got:
                break
        assert got and len(got) == 1
        # The line came either from the eager read (no thread asked) or after a poll (one).
        assert len(asked) <= 1
    finally:
        monkeypatch.undo()
        t.close()


def test_the_session_hands_a_stdio_leader_the_slice(quiet: StdioTransport) -> None:
    from mcpsync.session import Session
    from mcpsync.transport.memory import MemoryTransport

    session = Session(quiet, name="quiet")
    assert session._receive_sliced is not None
    assert session._receive_sliced.__func__ is StdioTransport.receive  # type: ignore[attr-defined]
    # A transport whose receive() takes no slice: the leader asks for the thread itself.
    memory = MemoryTransport(lambda deliver: None, name="memory")  # type: ignore[arg-type,return-value]
    assert Session(memory, name="memory")._receive_sliced is None
