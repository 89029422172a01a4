"""A call's lock is made only when its caller is about to sleep: these tests hold every way a
sleeping caller is woken (its answer, the reader role granted, a close from another thread,
the server's death) to waking it, over a real stdio peer, and the lazily made lock itself to
the order that makes it safe (the completer sets ``done`` first, the waiter makes its lock
first)."""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from mcpsync.errors import ConnectionLost, RequestTimeout, ServerExited
from mcpsync.session import Session, _background as background
from mcpsync.session._call import Call

from .helpers import open_session, peer_session

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def peer(no_leaks: None) -> Iterator[Session]:
    yield from peer_session()


def _call() -> Call:
    return Call(1, "m", None, 5.0, None, False, True, time.monotonic(), math.inf)


@pytest.mark.parametrize("reused", [False, True], ids=["new", "spare"])
@pytest.mark.parametrize(("timeout", "cancellable"), [(1.0, True), (1.5, False)])
def test_the_usual_requests_record_has_every_slot_the_constructor_gives(
        peer: Session, timeout: float, cancellable: bool, reused: bool) -> None:
    """Session.request makes the usual call's record without calling Call (a hot-path
    shortcut): caught while it waits, it matches Call(...) slot by slot, so a slot added to
    Call and forgotten there fails here. The same for the spare, the record an earlier
    clean call gave back (taken by the next call of that path, only some of its slots
    stored again): it must be indistinguishable from a new one."""
    seen: list[Call] = []
    done = threading.Event()
    spare = peer._role.spare
    if reused:
        # A first call follows the background reader; the next ones lead and give their
        # record back. Made from this thread with other params and a shorter timeout, so
        # that what they leave in it differs from what the caught call must hold.
        for n in range(50):
            assert peer.request("echo", {"warm": n}, timeout=0.5, cancellable=not cancellable) \
                == {"warm": n}
            if spare:
                break
        assert spare, "no call gave its record back"
        given_back = spare[0]
        assert given_back.result is None and given_back.params is None   # let go
    else:
        spare.clear()

    def call() -> None:
        with contextlib.suppress(RequestTimeout):
            peer.request("ignore", {"n": 1}, timeout=timeout, cancellable=cancellable)
        done.set()

    threading.Thread(target=call, name="mcpsync-test-caller", daemon=True).start()
    deadline = time.monotonic() + 5
    while not seen and time.monotonic() < deadline:
        seen = [c for c in list(peer._pending.values()) if c.method == "ignore"]
        time.sleep(0.001)
    assert seen, "the request never appeared in the pending table"
    made = seen[0]
    start = made.deadline - timeout
    built = Call(made.id, "ignore", {"n": 1}, timeout, None, False, cancellable, start,
                 made.limit - start)
    assert type(made) is Call
    assert (made is given_back) if reused else not spare
    for slot in Call.__slots__:
        getattr(made, slot)   # set at all (an unset slot raises AttributeError)
        if slot in ("deadline", "limit", "lock"):
            continue   # the clock's values, and the lock its caller may have made to sleep
        assert getattr(made, slot) == getattr(built, slot), slot
        assert type(getattr(made, slot)) is type(getattr(built, slot)), slot
    assert made.deadline == pytest.approx(built.deadline)
    assert made.limit == pytest.approx(built.limit)
    assert done.wait(10)
    assert spare.get(0) is not made   # it timed out: never given back


def test_a_caller_that_never_sleeps_makes_no_lock() -> None:
    call = _call()
    call.finish("r", None)
    assert call.lock is None and call.done and call.result == "r"
    call.signal()   # a grant to a caller that never slept: nothing to release
    assert call.lock is None


def test_a_call_finished_before_its_caller_sleeps_is_seen_done() -> None:
    call = _call()
    call.finish("r", None)
    lock = call.waiter()   # made after the completion: the waiter tests done next
    assert call.done
    assert not lock.acquire(False)   # made locked, and nobody released it


def test_a_sleeping_caller_is_woken_by_the_completion() -> None:
    call = _call()
    lock = call.waiter()
    assert call.waiter() is lock   # made once
    woke: list[bool] = []
    sleeper = threading.Thread(target=lambda: woke.append(lock.acquire(timeout=10)),
                               name="mcpsync-test-sleeper")
    sleeper.start()
    time.sleep(0.05)
    call.finish("r", None)
    sleeper.join(10)
    assert woke == [True] and call.done


def test_many_followers_each_woken_by_their_answer(peer: Session) -> None:
    # 16 threads at once over stdio: most calls follow (sleep on a lazily made lock) and are
    # settled by whichever thread reads their answer, through the transport's shortcut.
    # A lost wake-up would surface as a RequestTimeout within the 5 s timeout.
    errors: list[BaseException] = []
    results: dict[tuple[int, int], Any] = {}
    barrier = threading.Barrier(16)

    def worker(k: int) -> None:
        try:
            barrier.wait()
            for j in range(60):
                results[k, j] = peer.request("echo", {"k": k, "j": j}, timeout=5)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,), name=f"mcpsync-test-w{k}")
               for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    assert len(results) == 16 * 60
    assert all(value == {"k": k, "j": j} for (k, j), value in results.items())


def _followers(session: Session, n: int) -> tuple[list[threading.Thread], list[BaseException]]:
    """``n`` callers blocked on calls the peer never answers (one leads, the rest sleep)."""
    errors: list[BaseException] = []

    def waiter() -> None:
        try:
            session.request("ignore", {}, timeout=30)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=waiter, name=f"mcpsync-test-f{k}") for k in range(n)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while len(session._pending) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(session._pending) == n
    time.sleep(0.05)   # let them go to sleep
    return threads, errors


def test_sleeping_followers_are_woken_by_a_close_from_another_thread(no_leaks: None) -> None:
    session = open_session()
    threads, errors = _followers(session, 4)
    closer = threading.Thread(target=session.close, name="mcpsync-test-closer")
    closer.start()
    closer.join(10)
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads)
    assert len(errors) == 4 and all(type(e) is ConnectionLost for e in errors)


def test_sleeping_followers_are_woken_by_the_servers_death(no_leaks: None) -> None:
    session = open_session()
    try:
        threads, errors = _followers(session, 4)
        with pytest.raises(ServerExited):
            session.request("die", {"code": 3}, timeout=10)
        for t in threads:
            t.join(10)
        assert not any(t.is_alive() for t in threads)
        assert len(errors) == 4 and all(isinstance(e, ConnectionLost) for e in errors)
    finally:
        session.close()


def test_a_submit_after_a_sequential_call_wakes_the_background_reader(
        monkeypatch: pytest.MonkeyPatch, no_leaks: None) -> None:
    """A sequential call gives the reader role back and leaves the background reader in its
    short sleep (HANDOFF_GRACE), for the caller's next call to lead. A ``submit()`` never
    leads, so nobody reads its answer until that sleep ends, unless submit() wakes the
    reader. The sleep is made 60 s long here: the answer arriving at all within the 30 s
    below shows the wake-up (nothing is timed)."""
    monkeypatch.setattr(background, "HANDOFF_GRACE", 60.0)
    session = open_session()
    try:
        for i in range(3):   # sequential calls: the caller leads, then gives the role back
            assert session.request("echo", {"i": i}) == {"i": i}
        assert session._role.holder is None   # given back, the reader left asleep
        future = session.submit("echo", {"submitted": True})
        assert future.result(timeout=30) == {"submitted": True}
        # And again after another sequential call, with the reader's role given up.
        assert session.request("echo", {"i": 3}) == {"i": 3}
        assert session.submit("echo", {"again": 1}).result(timeout=30) == {"again": 1}
    finally:
        session.close()
