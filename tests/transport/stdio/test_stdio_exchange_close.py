"""``StdioTransport.exchange`` reads without the read lock; what the lock guaranteed still
holds, by the count of exchanges that may be reading (``_exchanging``, each exchange's 1
added before it looks at the role and the closed state, taken away in a ``finally``):

- a close never closes stdout, the wake-up pipe or the pidfd while the exchange is inside
  its read or its poll (it wakes the poll and waits for the count to be 0, within its
  usual bound);
- the exit watch's finish of a claimed close does the same;
- a ``receive()`` (a reader that took the role over as the exchange's write ended) does not
  read while the exchange still does: it wakes it and waits;
- an exchange that leaves without reading (its caller's role taken over) does not let the
  close go on while another caller's exchange reads.

Each against a real server process. The spies stand in front of the exchange's own poll and
read, and note what they find there: a descriptor closed under them is the failure. The
races are run many times, with the close coming at different moments."""

from __future__ import annotations

import math
import random
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import kill_child, open_fds, release_given_up, wait_until

from mcpsync.session._role import Role
from mcpsync.transport.stdio import StdioTransport, _lifecycle
from mcpsync.transport.stdio._exit_watch import claim_close, finish_claimed_close

from .test_stdio_exchange import MIRROR  # writes back each read as it came

pytestmark = pytest.mark.timeout(120)

# Reads its stdin to the end and writes nothing; then exits.
QUIET = r'''
import sys
sys.stdin.buffer.read()
'''

# The same, but stays until it is signalled.
MUTE = QUIET + r'''
import time
while True:
    time.sleep(1)
'''

LINE = b'{"jsonrpc":"2.0","id":7,"result":{"a":1}}\n'


class _Call:
    """What the exchange reads of the session's call: its id and deadline."""

    def __init__(self, rid: int) -> None:
        self.id = rid
        self.deadline = time.monotonic() + 30


def _open(t: StdioTransport) -> tuple[int, int, int, int, int]:
    """stdout, the wake-up pipe, the pidfd and the blocking read's descriptor (-1: none)."""
    blocking = t._blocking
    return (t._stdout_fd, t._wake_r, t._wake_w, t._pidfd,
            blocking.fd if blocking is not None else -1)


class _Spies:
    """In front of the transport's poll and stdout read: each call, from the thread named
    ``slow`` (or any, with ``None``), may sleep ``delay`` first and ``after`` once the
    real call returned (as a thread that lost the CPU there would); every call notes whether
    stdout, the wake-up pipe and the pidfd were still open when it began and when it
    returned into the exchange (``closed_under`` collects the calls that found one closed),
    and how many threads were inside one of them at once."""

    def __init__(self, t: StdioTransport, delay: float, slow: str | None,
                 after: float = 0.0) -> None:
        self.t = t
        self.delay = delay
        self.after = after
        self.slow = slow
        self.entered = threading.Event()
        self.closed_under: list[str] = []
        self.inside = 0
        self.most_inside = 0
        self.events: list[str] = []
        self.lock = threading.Lock()
        self.poller = t._poller
        self.read_into = t._read_into
        self.was_open = _open(t)

    def _around(self, what: str, call: Callable[[], Any]) -> Any:
        me = threading.current_thread().name
        with self.lock:
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
            self.events.append(f"{me} {what} in")
        try:
            if _open(self.t) != self.was_open:
                self.closed_under.append(f"{me} {what}: closed before")
            self.entered.set()
            if self.slow is None or me == self.slow:
                time.sleep(self.delay)
            if _open(self.t) != self.was_open:
                self.closed_under.append(f"{me} {what}: closed as it began")
            try:
                return call()
            finally:
                if self.after and (self.slow is None or me == self.slow):
                    time.sleep(self.after)   # slow to come back from the call
                if _open(self.t) != self.was_open:
                    self.closed_under.append(f"{me} {what}: closed under it")
        finally:
            with self.lock:
                self.inside -= 1
                self.events.append(f"{me} {what} out")

    def poll(self, *ms: int) -> list[tuple[int, int]]:
        return self._around("poll", lambda: self.poller.poll(*ms))   # type: ignore[no-any-return]

    def read(self, buffer: bytearray) -> int | None:
        return self._around("read", lambda: self.read_into(buffer))   # type: ignore[no-any-return]

    def install(self) -> None:
        self.t._poller = self
        self.t._read_into = self.read
        blocking = self.t._blocking
        if blocking is not None:   # the exchange's blocking read (see _blocking_read)
            real = blocking.read
            blocking.read = lambda buffer: self._around("read", lambda: real(buffer))


def _started(script: str = MIRROR, *, blocking: bool = False) -> StdioTransport:
    """Started; without the exchange's blocking read unless ``blocking`` (without it, every
    read of the exchange polls first or reads first, as where ``/proc`` is missing)."""
    t = StdioTransport([sys.executable, "-S", "-c", script], name="exchange-close")
    t.start()
    if blocking:
        # The blocking read hangs on the session's idle watch, which wakes it: watched
        # here as a session would have it (a ready stdout just leaves it out for 50 ms).
        assert t.watch_idle(lambda force: 0.05, lambda: None)
        t._open_blocking_read()
        assert t._blocking is not None
    return t


def _exchange_in_thread(t: StdioTransport, timeout: float) -> tuple[threading.Thread,
                                                                     list[Any]]:
    call = _Call(7)
    role = Role()
    role.holder = role.sending = call
    got: list[Any] = []

    def run() -> None:
        try:
            got.append(t.exchange(LINE, call, role, timeout))
        except BaseException as exc:   # reported by the test
            got.append(exc)

    thread = threading.Thread(target=run, name="test-exchange", daemon=True)
    thread.start()
    return thread, got


@pytest.mark.parametrize("where", ["read", "poll", "blocking read"])
@pytest.mark.parametrize("n", range(8))
def test_a_close_waits_for_an_exchange_inside_its_read_or_poll(
        no_leaks: None, where: str, n: int) -> None:
    """The exchange made slow inside its read (a read-first try, or the blocking read) or
    its poll (the first poll), by 0 to 0.35 s; a close from another thread comes as it is
    there. The close waits for it (woken, the poll returns at once, the blocking read
    finds the close's wake-up byte; the read ends after the spy's sleep), and only then
    closes the descriptors: none is found closed by the read or the poll."""
    before = open_fds()
    t = _started(blocking=where == "blocking read")
    where = where.replace("blocking ", "")
    spies = _Spies(t, delay=0.05 * n, slow="test-exchange")
    spies.install()
    t._skip_eager = 1 if where == "poll" else 0
    try:
        thread, got = _exchange_in_thread(t, 5.0)
        assert spies.entered.wait(5)
        started = time.monotonic()
        t.close()
        took = time.monotonic() - started
        thread.join(5)
        assert not thread.is_alive()
        assert not spies.closed_under, spies.closed_under
        assert spies.events[0] == f"test-exchange {where} in", spies.events
        assert len(got) == 1 and not isinstance(got[0], BaseException), got
        # The read made before the close ends returns what it read (the mirror's line, or
        # nothing yet); the poll is woken by the close and returns that it is closed.
        assert got[0] in ({"a": 1}, [], None), got
        assert t._rx_error is None   # no read met a descriptor closed under it
        assert t._exchanging == 0
        assert _open(t) == (-1, -1, -1, -1, -1)
        assert took < _lifecycle.JOIN_TIMEOUT + 2.0
    finally:
        t.close()
    assert wait_until(lambda: open_fds() == before, 5), open_fds() - before


@pytest.mark.parametrize("blocking", [False, True])
@pytest.mark.parametrize("seed", range(30))
def test_a_close_racing_an_exchange_never_closes_under_its_read_or_poll(
        no_leaks: None, seed: int, blocking: bool) -> None:
    """The close comes at a random moment of the exchange (before it, during its write, its
    read or its poll, or after it), the exchange's thread slow by a random time to come
    back from its read or poll, against a mirror that answers at once or a server that
    never answers (and exits at its stdin's end). Whatever the order, no read or poll of
    the exchange finds a descriptor closed, the exchange returns a clean value and the
    close does not wait for its bound."""
    rng = random.Random(seed)
    before = open_fds()
    t = _started(MIRROR if seed % 2 else QUIET, blocking=blocking)
    # The exchange's thread may lose the CPU as its read or poll returns (up to 30 ms,
    # about what the close takes to reach the descriptors here).
    spies = _Spies(t, delay=0.0, slow="test-exchange", after=rng.uniform(0, 0.03))
    spies.install()
    t._skip_eager = rng.choice([0, 1])
    try:
        thread, got = _exchange_in_thread(t, 2.0)
        time.sleep(rng.uniform(0, 0.004))
        started = time.monotonic()
        t.close()
        took = time.monotonic() - started
        thread.join(5)
        assert not thread.is_alive()
        assert not spies.closed_under, spies.closed_under
        assert len(got) == 1, got
        # Before the close, a write may also meet it (a closed transport); never anything
        # else.
        assert not isinstance(got[0], BaseException) or "closed" in str(got[0]), got
        assert t._exchanging == 0 and _open(t) == (-1, -1, -1, -1, -1)
        assert took < _lifecycle.JOIN_TIMEOUT   # both servers exit at their stdin's end
    finally:
        t.close()
    assert wait_until(lambda: open_fds() == before, 5), open_fds() - before


@pytest.mark.parametrize("blocking", [False, True])
def test_the_exit_watchs_finish_wakes_an_exchange_and_waits_for_it(
        no_leaks: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        blocking: bool) -> None:
    """A claimed close finished while an exchange polls (or blocks in its read) a server
    that writes nothing and does not die (given up after SIGKILL: the signals stubbed, so
    that no exit wakes the poll): the poll (or the read) is woken, the exchange returns
    first, and only then are the descriptors closed, well within the bound (the exchange
    alone would poll 10 s)."""
    before = open_fds()
    t = _started(MUTE, blocking=blocking)
    pid = t.pid
    assert pid is not None
    # Slow to come back from its poll (0.3 s), woken or not: the finish must wait for it.
    spies = _Spies(t, delay=0.0, slow="test-exchange", after=0.3)
    spies.install()
    t._skip_eager = 1
    try:
        thread, got = _exchange_in_thread(t, 10.0)
        assert spies.entered.wait(5)
        # Inside the poll; the blocking read is woken by the idle watch after 0.05 to 0.1
        # s (and then slow to come back, so still inside).
        time.sleep(0.02 if blocking else 0.1)
        assert t._exchanging == 1 and not t._rx_lock.locked()
        t.close_input()
        assert claim_close(t)
        monkeypatch.setattr(t, "_signal_group", lambda **kw: None)
        started = time.monotonic()
        finish_claimed_close(t, False)
        took = time.monotonic() - started
        thread.join(5)
        # (The blocking read woken by the watch before the finish returns [].)
        assert not thread.is_alive() and got in ([None], [[]] if blocking else [None]), got
        assert not spies.closed_under, spies.closed_under
        assert _open(t) == (-1, -1, -1, -1, -1)
        assert took < _lifecycle.JOIN_TIMEOUT, took
    finally:
        monkeypatch.undo()
        kill_child(pid)
        release_given_up(t)
        t.close()
    assert wait_until(lambda: open_fds() == before, 5), open_fds() - before


@pytest.mark.parametrize("blocking", [False, True])
def test_a_receive_after_a_takeover_waits_for_the_exchanges_read(
        no_leaks: None, blocking: bool) -> None:
    """A reader that took the role over as a caller's write ended (the background reader)
    calls receive() while that caller's exchange still polls (or is in its blocking read):
    receive() wakes it and reads only once it has returned, so that the two never poll or
    read at once, and the frame the mirror sent back is read by exactly one of them."""
    before = open_fds()
    t = _started(blocking=blocking)
    first = "read" if blocking else "poll"
    spies = _Spies(t, delay=0.3, slow="test-exchange")
    spies.install()
    t._skip_eager = 4   # both poll first
    try:
        thread, got = _exchange_in_thread(t, 5.0)
        assert spies.entered.wait(5)
        assert t._exchanging == 1
        items = t.receive(0.5)
        thread.join(5)
        assert not thread.is_alive()
        assert spies.most_inside == 1, spies.events
        assert spies.events[:2] == [f"test-exchange {first} in",
                                    f"test-exchange {first} out"], spies.events
        # The mirror's line: taken by the exchange (its result), or left to receive().
        results = [x for x in (got[0], items) if x]
        assert len(results) == 1, (got, items)
        assert results[0] == {"a": 1} or results[0][0].result == {"a": 1}
    finally:
        t.close()
    assert wait_until(lambda: open_fds() == before, 5), open_fds() - before


def test_a_receive_does_not_wait_for_ever_for_an_exchange_that_never_clears(
        no_leaks: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Should the count stay above 0 (it cannot, short of a thread stopped inside the
    exchange), receive() gives up after its bound and returns ``[]``, as a wake-up does, and
    the close keeps stdout, the wake-up pipe and the pidfd open rather than close them under
    that read; both within their bounds."""
    import mcpsync.transport.stdio._transport as transport_module

    monkeypatch.setattr(transport_module, "_EXCHANGE_WAIT", 0.2)
    t = _started()
    fds = _open(t)
    try:
        t._exchanging = 1
        started = time.monotonic()
        assert t.receive(5.0) == []
        assert 0.2 <= time.monotonic() - started < 1.0
        started = time.monotonic()
        t.close()
        assert time.monotonic() - started < _lifecycle.CLOSE_BOUND + 0.5
        assert t.closed and _open(t) == fds
    finally:
        t._exchanging = 0
        t._close_fd("_stdout_fd", t._proc.stdout if t._proc is not None else None)
        t._close_raw("_wake_w")
        t._close_raw("_wake_r")
        t._close_raw("_pidfd")


def test_the_count_is_0_after_every_way_out_of_the_exchange(no_leaks: None) -> None:
    """Taken over, closed, answered, nothing within the slice: the count is 0 after each,
    and the read lock was never taken."""
    t = _started(QUIET)
    try:
        call = _Call(7)
        role = Role()
        role.sending = call   # another holder
        assert t.exchange(LINE, call, role, 0.05) is False
        assert t._exchanging == 0
        role.holder = role.sending = call
        assert t.exchange(LINE, call, role, 0.05) == []   # nothing within the slice
        assert t._exchanging == 0 and not t._rx_lock.locked()
    finally:
        t.close()
    call.deadline = math.inf
    role.holder = role.sending = call
    with pytest.raises(Exception, match="closed"):
        t.exchange(LINE, call, role, 0.05)
    assert t._exchanging == 0


@pytest.mark.parametrize("blocking", [False, True])
def test_an_exchange_taken_over_does_not_end_another_ones_read_for_the_close(
        no_leaks: None, blocking: bool) -> None:
    """Two exchanges inside the ``try`` around the read at once: caller B's, slowed inside its
    poll, and caller A's, whose role was taken over (another holder: A's thread waited for
    the CPU after its write, the background reader took the role, answered A and gave the
    role up, and B claimed it). A's exchange returns ``False`` without reading, and takes
    away only its own 1: the count still says that B may read, so a close made then wakes
    B's poll and waits for it, and closes nothing under it. (With a flag that A's exchange
    cleared, the close found it clear and closed the descriptors under B's poll.)"""
    before = open_fds()
    t = _started(blocking=blocking)
    first = "read" if blocking else "poll"
    spies = _Spies(t, delay=0.5, slow="test-exchange")   # B: slow inside its poll
    spies.install()
    t._skip_eager = 1
    try:
        thread, got = _exchange_in_thread(t, 5.0)   # B, holding its own role
        assert spies.entered.wait(5)
        assert t._exchanging == 1
        a = _Call(8)
        role = Role()
        role.sending = a
        role.holder = object()   # taken over
        assert t.exchange(LINE.replace(b'"id":7', b'"id":8'), a, role, 0.05) is False
        counted = t._exchanging   # B's read, still counted
        started = time.monotonic()
        t.close()
        took = time.monotonic() - started
        thread.join(5)
        assert not thread.is_alive()
        assert not spies.closed_under, (counted, spies.closed_under)
        assert counted == 1
        assert spies.events[:2] == [f"test-exchange {first} in",
                                    f"test-exchange {first} out"], spies.events
        assert len(got) == 1 and not isinstance(got[0], BaseException), got
        # The blocking read, slowed before it began, finds both lines the mirror sent back
        # already there (the close's wake-up byte with them) and returns them as frames.
        assert got[0] in ({"a": 1}, [], None) or (
            blocking and [(m.id.value, m.result) for m in got[0]] == [(7, {"a": 1}), (8, {"a": 1})]
        ), got
        assert t._exchanging == 0 and _open(t) == (-1, -1, -1, -1, -1)
        assert took < _lifecycle.JOIN_TIMEOUT, took
    finally:
        t.close()
    assert wait_until(lambda: open_fds() == before, 5), open_fds() - before
