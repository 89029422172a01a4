"""The idle watch (``mcpsync-stdio-watch``) on its own, with plain pipes for descriptors.

What must hold: a ready descriptor is asked about; a pause leaves it out of the poll for that
long and no longer; a watch let go (by its answer, or by ``unwatch``) is never asked again,
even when its descriptor's number is another pipe's by then; a look that raises makes the
watch tell that session to read for itself; the thread ends when the last watch is let go,
and ``join_ended`` joins it; a forked child starts with no watch.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from helpers import wait_child, wait_until

from mcpsync.transport.stdio import _idle_watch
from mcpsync.transport.stdio._idle_watch import DROP, KEEP, IdleWatch, join_ended, unwatch, watch

pytestmark = pytest.mark.timeout(30)


class Asked:
    """An ``on_ready`` that records each look and answers what ``answer`` says."""

    def __init__(self, answer: Callable[[int], float]) -> None:
        self.looks: list[bool] = []
        self.at: list[float] = []
        self.answer = answer
        self.lock = threading.Lock()

    def __call__(self, force: bool) -> float:
        with self.lock:
            self.looks.append(force)
            self.at.append(time.monotonic())
            return self.answer(len(self.looks))


@pytest.fixture
def pipes() -> Iterator[list[tuple[int, int]]]:
    made: list[tuple[int, int]] = []
    yield made
    for r, w in made:
        for fd in (r, w):
            with contextlib.suppress(OSError):
                os.close(fd)


def _pipe(made: list[tuple[int, int]]) -> tuple[int, int]:
    r, w = os.pipe()
    made.append((r, w))
    return r, w


def _done(*watches: IdleWatch) -> None:
    for w in watches:
        unwatch(w)
    join_ended(5)


def test_a_ready_descriptor_is_asked_about_and_dropped(pipes: list[tuple[int, int]],
                                                        no_leaks: None) -> None:
    r, w = _pipe(pipes)
    asked = Asked(lambda n: DROP)
    watched = watch([r], asked)
    try:
        time.sleep(0.05)
        assert asked.looks == []           # nothing ready: nothing asked
        os.write(w, b"x")
        assert wait_until(lambda: asked.looks == [False], 5)
        time.sleep(0.1)
        assert asked.looks == [False]      # dropped: still readable, never asked again
    finally:
        _done(watched)


def test_keep_asks_again_only_when_ready_again(pipes: list[tuple[int, int]],
                                               no_leaks: None) -> None:
    r, w = _pipe(pipes)

    def answer(n: int) -> float:
        os.read(r, 100)   # what was ready is read (as a caller would), then: keep watching
        return KEEP

    asked = Asked(answer)
    watched = watch([r], asked)
    try:
        os.write(w, b"1")
        assert wait_until(lambda: len(asked.looks) == 1, 5)
        time.sleep(0.05)
        assert len(asked.looks) == 1
        os.write(w, b"2")
        assert wait_until(lambda: len(asked.looks) == 2, 5)
    finally:
        _done(watched)


def test_a_pause_leaves_the_descriptor_out_that_long(pipes: list[tuple[int, int]],
                                                     no_leaks: None) -> None:
    r, w = _pipe(pipes)
    asked = Asked(lambda n: 0.2 if n == 1 else DROP)
    other_r, other_w = _pipe(pipes)
    other = Asked(lambda n: DROP)
    watched = watch([r], asked)
    watched_other = watch([other_r], other)
    try:
        os.write(w, b"x")   # stays readable throughout
        assert wait_until(lambda: len(asked.looks) == 1, 5)
        # The other session is served during the pause.
        os.write(other_w, b"y")
        assert wait_until(lambda: len(other.looks) == 1, 5)
        assert wait_until(lambda: len(asked.looks) == 2, 5)
        gap = asked.at[1] - asked.at[0]
        assert 0.19 <= gap < 2.0, gap
    finally:
        _done(watched, watched_other)


def test_an_unwatched_descriptor_is_never_asked_about_even_when_its_number_is_reused(
        pipes: list[tuple[int, int]], no_leaks: None) -> None:
    keep_alive = Asked(lambda n: KEEP)
    anchor_r, _ = _pipe(pipes)
    anchor = watch([anchor_r], keep_alive)   # the generation outlives the first watch
    r, w = os.pipe()
    old = Asked(lambda n: KEEP)
    watched = watch([r], old)
    try:
        time.sleep(0.02)
        unwatch(watched)
        os.close(r)
        os.close(w)
        # The number is free: the next pipe may get it, and is watched by another.
        r2, w2 = _pipe(pipes)
        new = Asked(lambda n: DROP)
        watched_new = watch([r2], new)
        os.write(w2, b"z")
        assert wait_until(lambda: new.looks == [False], 5)
        time.sleep(0.05)
        assert old.looks == []
        unwatch(watched_new)
    finally:
        _done(anchor)


def test_a_look_that_raises_makes_the_session_read_for_itself(
        pipes: list[tuple[int, int]], no_leaks: None, caplog: pytest.LogCaptureFixture) -> None:
    r, w = _pipe(pipes)
    looks: list[bool] = []

    def on_ready(force: bool) -> float:
        looks.append(force)
        if not force:
            raise RuntimeError("a bug")
        return DROP

    watched = watch([r], on_ready)
    try:
        os.write(w, b"x")
        assert wait_until(lambda: looks == [False, True], 5), looks
        time.sleep(0.05)
        assert looks == [False, True]
        assert "idle watch" in caplog.text
    finally:
        _done(watched)


def test_the_thread_ends_with_the_last_watch_and_a_new_one_starts_after(
        pipes: list[tuple[int, int]], no_leaks: None) -> None:
    r, _ = _pipe(pipes)
    first = watch([r], Asked(lambda n: KEEP))
    thread = _idle_watch.active_watch_thread()
    assert thread is not None and thread.is_alive() and thread.daemon
    unwatch(first)
    assert _idle_watch.active_watch_thread() is None
    join_ended(5)
    assert not thread.is_alive()
    second = watch([r], Asked(lambda n: KEEP))
    again = _idle_watch.active_watch_thread()
    assert again is not None and again is not thread
    _done(second)
    assert not again.is_alive()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() only")
def test_a_forked_child_starts_with_no_watch(pipes: list[tuple[int, int]],
                                             no_leaks: None) -> None:
    r, _ = _pipe(pipes)
    watched = watch([r], Asked(lambda n: KEEP))
    try:
        pid = os.fork()
        if pid == 0:   # pragma: no cover - the child
            code = 1
            try:
                ok = _idle_watch.active_watch_thread() is None and not _idle_watch._open
                unwatch(watched)   # the parent's watch: a no-op here
                cr, cw = os.pipe()
                asked = Asked(lambda n: DROP)
                mine = watch([cr], asked)
                os.write(cw, b"c")
                deadline = time.monotonic() + 5
                while asked.looks != [False] and time.monotonic() < deadline:
                    time.sleep(0.01)
                unwatch(mine)
                join_ended(5)
                code = 0 if ok and asked.looks == [False] else 2
            finally:
                os._exit(code)
        assert wait_child(pid, "the forked child's watch") == 0
    finally:
        _done(watched)


@pytest.mark.parametrize("began", [True, False], ids=["thread-began", "thread-never-began"])
def test_a_failed_start_of_the_thread_leaves_nothing_behind(
        began: bool, pipes: list[tuple[int, int]], monkeypatch: pytest.MonkeyPatch,
        no_leaks: None) -> None:
    """``Thread.start()`` interrupted after the thread began (a Ctrl-C in its wait), or
    failing before (out of threads): the watch is not handed out, so nobody would let it
    go; the generation must end by itself (or never run) and leave no thread or pipe."""
    from helpers import open_fds

    real = _idle_watch.new_thread

    def new_thread(name: str, target: Callable[..., object]) -> threading.Thread:
        thread = real(name, target)
        real_start = thread.start

        def start() -> None:
            if began:
                real_start()
                raise KeyboardInterrupt
            raise RuntimeError("can't start new thread")

        thread.start = start  # type: ignore[method-assign]
        return thread

    monkeypatch.setattr(_idle_watch, "new_thread", new_thread)
    r, _ = _pipe(pipes)
    fds_before = open_fds()
    with pytest.raises(KeyboardInterrupt if began else RuntimeError):
        watch([r], Asked(lambda n: KEEP))
    assert _idle_watch.active_watch_thread() is None
    join_ended(5)
    assert wait_until(lambda: open_fds() <= fds_before, 5)   # the wake-up pipe closed
    monkeypatch.undo()
    # The next watch starts a generation of its own, which works.
    r2, w2 = _pipe(pipes)
    asked = Asked(lambda n: DROP)
    watched = watch([r2], asked)
    try:
        os.write(w2, b"x")
        assert wait_until(lambda: asked.looks == [False], 5)
    finally:
        _done(watched)
