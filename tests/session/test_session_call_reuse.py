"""A call's record (``Call``) is reused: a call of the usual path that went through whole
gives it back to the session's one spare (on its ``Role``), and the next call takes it
instead of making a new one. These tests hold the rule: a sequence of clean calls uses one
record; a record that another thread settled (a takeover of a blocked write), that timed
out or that met an error is never given back; two threads calling at once never share one;
and the background reader, which compares holders across its sleeps (to lengthen a sleep,
to take over a blocked write), still tells two calls in the same record apart. Over a real
stdio peer, and a memory peer whose write blocks."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import Any

import pytest

from mcpsync.errors import ProtocolError, RequestTimeout
from mcpsync.session import Session
from mcpsync.session._base import HANDOFF_GRACE
from mcpsync.session._call import Call
from mcpsync.session._role import BG
from mcpsync.transport.memory import MemoryTransport

from .helpers import open_session, peer_session
from .test_session_role_release import (
    _BlockingPeer as _RoleReleasePeer,
    _line_of,
    _loop_top_line,
    _tracing_reader,
)

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def peer(no_leaks: None) -> Iterator[Session]:
    yield from peer_session()


def _warm(session: Session) -> Call:
    """Calls until one led and gave its record back (a first call follows the background
    reader); that record."""
    spare = session._role.spare
    for n in range(50):
        assert session.request("echo", {"warm": n}, timeout=5) == {"warm": n}
        if spare:
            return spare[0]
    raise AssertionError("no call gave its record back")


def test_a_sequence_of_clean_calls_reuses_one_record(peer: Session) -> None:
    record = _warm(peer)
    spare = peer._role.spare
    ids = []
    for n in range(30):
        assert peer.request("echo", {"n": n}, timeout=5) == {"n": n}
        # A call that followed (the background reader took the role back between two
        # calls on a loaded machine) keeps its record: only the leaders' go back.
        if spare.get(0) is record:
            ids.append(record.id)
    assert len(ids) >= 20, ids
    assert ids == sorted(set(ids))   # one record, a new id each time
    assert record.done and record.lock is None and record.error is None
    assert record.result is None and record.params is None   # let go once given back
    assert record.id not in peer._pending


def test_a_call_that_timed_out_is_not_reused(peer: Session) -> None:
    record = _warm(peer)
    with pytest.raises(RequestTimeout):
        peer.request("ignore", {"n": 1}, timeout=0.2)
    assert record.error is not None   # it was this call's record
    assert peer._role.spare.get(0) is not record
    assert peer.request("echo", {"n": 2}, timeout=5) == {"n": 2}
    assert peer._role.spare.get(0) is not record


def test_a_call_that_met_an_error_is_not_reused(peer: Session) -> None:
    record = _warm(peer)
    with pytest.raises(ProtocolError):   # the peer answers with an invalid message
        peer.request("bad_response", {}, timeout=5)
    assert record.error is not None
    assert peer._role.spare.get(0) is not record


def test_two_threads_calling_at_once_never_share_a_record(peer: Session) -> None:
    """Eight threads at once: each call must get its own answer, and the pending table
    must never hold one record under two ids. The record given back before is taken by
    one of them (checked: the spare is used while calls overlap)."""
    record = _warm(peer)
    errors: list[BaseException] = []
    stop = threading.Event()
    clashes: list[tuple[int, int]] = []
    spare_used = threading.Event()
    barrier = threading.Barrier(8)

    def worker(k: int) -> None:
        try:
            barrier.wait()
            for j in range(150):
                assert peer.request("echo", {"k": k, "j": j}, timeout=10) == {"k": k, "j": j}
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def watch() -> None:
        while not stop.is_set():
            for key, call in list(peer._pending.items()):
                if call.key != key and call.key in peer._pending:
                    clashes.append((key, call.key))
                if call is record:
                    spare_used.set()
            time.sleep(0)

    watcher = threading.Thread(target=watch, name="mcpsync-test-watch", daemon=True)
    watcher.start()
    threads = [threading.Thread(target=worker, args=(k,), name=f"mcpsync-test-w{k}")
               for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    stop.set()
    watcher.join(10)
    assert not errors, errors[:3]
    assert not clashes, clashes[:3]
    assert spare_used.is_set() or peer._role.spare.get(0) is not record, \
        "the spare was never taken while the calls overlapped"


class _BlockingPeer(_RoleReleasePeer):
    """The role-release tests' peer (a ``block`` request's write sets ``writing`` and
    waits for ``release``), with its own events, and a hook after a ``block`` request's
    answer is delivered."""

    release = threading.Event()
    writing = threading.Event()
    #: After a ``block`` request's answer is delivered, the write waits for this to say
    #: that the answer was read (so that its caller finds the call settled).
    answered: Any = None

    def write(self, frame: bytes) -> None:
        super().write(frame)
        answered = _BlockingPeer.answered   # from the class: a plain function
        if answered is not None:
            msg = json.loads(frame)
            if msg.get("method") == "block" and "id" in msg:
                answered(msg["id"])


def test_a_call_answered_by_the_reader_after_a_takeover_is_not_reused(no_leaks: None) -> None:
    """The write blocks until the background reader has taken the role over (seen, not
    timed); the reader then reads the answer and settles the call, on its own thread, and
    only then does the write return. The caller finds its call settled without ever
    sleeping (no lock made), but it did not pop it: its record must not be given back."""
    _BlockingPeer.release = threading.Event()
    _BlockingPeer.writing = threading.Event()
    transport = MemoryTransport(_BlockingPeer, name="blocking")
    transport.start()
    session = Session(transport, name="blocking", default_timeout=10.0)
    session.start()

    def wait_answered(rid: int) -> None:
        deadline = time.monotonic() + 20
        while rid in session._pending and time.monotonic() < deadline:
            time.sleep(0.001)

    _BlockingPeer.answered = wait_answered
    taken_over: list[bool] = []

    def release_after_takeover() -> None:
        if not _BlockingPeer.writing.wait(20):
            return
        deadline = time.monotonic() + 20
        while session._role.holder is not BG and time.monotonic() < deadline:
            time.sleep(0.001)
        taken_over.append(session._role.holder is BG)
        _BlockingPeer.release.set()

    releaser = threading.Thread(target=release_after_takeover, name="mcpsync-test-release",
                                daemon=True)
    try:
        record = _warm(session)
        releaser.start()
        assert session.request("block", {"b": 1}, timeout=30) == {"b": 1}
        releaser.join(30)
        assert taken_over == [True]
        assert record.lock is None and record.error is None   # this call's record, settled
        assert record.params == {"b": 1}                        # by the reader, unslept...
        assert session._role.spare.get(0) is not record   # ...not given back
        assert session.request("echo", {"n": 1}, timeout=5) == {"n": 1}
    finally:
        _BlockingPeer.answered = None
        _BlockingPeer.release.set()
        _BlockingPeer.writing.set()
        if releaser.is_alive():
            releaser.join(30)
        session.close()


def test_the_background_reader_tells_two_calls_in_one_record_apart(no_leaks: None) -> None:
    """The background reader lengthens its sleep (up to MAX_PARK, and a long sleep makes
    every give-back wake it) only while the same call keeps the role across two of its
    sleeps. Sequential calls reusing one record show it the same object each time; each is
    a new call (a new id), so its sleeps must stay short. Recorded at each sleep of the
    reader during 0.4 s of sequential calls, each far shorter than a sleep."""
    acquire_line = _line_of("if not gate.acquire(timeout=park_for):")
    sleeps: list[float] = []

    def record(frame: FrameType) -> None:
        if frame.f_lineno == acquire_line:
            sleeps.append(frame.f_locals["park_for"])

    with _tracing_reader(record):
        session = open_session(reader=True)
    try:
        _warm(session)
        sleeps.clear()
        reused = 0
        end = time.monotonic() + 0.4
        record_seen: Any = session._role.spare.get(0)
        while time.monotonic() < end:
            assert session.request("echo", {"n": 1}, timeout=5) == {"n": 1}
            reused += session._role.spare.get(0) is record_seen
        assert reused > 50, reused
        assert len(sleeps) >= 5, sleeps
        longer = [s for s in sleeps if s > HANDOFF_GRACE]
        # Each call lasts well under a sleep; on a loaded machine one may be descheduled
        # across a sleep, so a few longer ones are allowed, not most of them.
        assert len(longer) * 4 < len(sleeps), sleeps
    finally:
        session.close()


def test_a_new_write_in_a_reused_record_is_not_taken_over(no_leaks: None) -> None:
    """The background reader takes a holder's role over when, at two of its decisions in a
    row, the same call is writing (its write is taken to be blocked). A record seen writing
    at one decision may be another call's at the next: call A, seen writing, ends and gives
    its record back, and call B takes it and is writing when the reader looks again. That
    is a new write, not a blocked one; the reader must tell it apart by the call's id (the
    object is the same) and sleep again, not take the role over.

    Staged without timing, each step waited for: the reader is held at the top of its loop,
    the role free, until A's write has begun; it then decides (A writing) and is held right
    after that decision, outside its lock, while A's write is let go, A reads its answer,
    gives the role and the record back, and B takes both and begins its write, which waits
    for the reader's next decision; the reader is held after that one until B is over.
    The outcome of each decision is recorded where the reader acts on it (``if park:``)."""
    a_writing, a_release = threading.Event(), threading.Event()
    b_writing, b_release = threading.Event(), threading.Event()
    b_done = threading.Event()
    top_line = _loop_top_line()
    decided_line = _line_of("if park:")
    hold_at_top = [False]
    held_at_top = threading.Event()
    armed = [False]
    #: At each decision while armed: (holder, its id then, park, the role's holder then,
    #: whether the holder was writing, the id the reader keeps for the next decision).
    decisions: list[tuple[object, int, bool, object, bool, int]] = []
    stuck: list[str] = []

    def steer(frame: FrameType) -> None:
        if frame.f_lineno == top_line and hold_at_top[0] \
                and frame.f_locals["self"]._role.holder is None:
            # About to look at a free role: wait (outside the lock) until A has claimed it
            # and is writing, so that the next decision finds A's write going on.
            hold_at_top[0] = False
            held_at_top.set()
            if not a_writing.wait(20):
                stuck.append("A's write never began")
        elif frame.f_lineno == decided_line and armed[0]:
            role = frame.f_locals["self"]._role
            holder = frame.f_locals["holder"]
            decisions.append((holder, getattr(holder, "id", 0), frame.f_locals["park"],
                              role.holder, role.sending is holder,
                              frame.f_locals["seen_id"]))
            if len(decisions) == 1:
                # A seen writing: let its write end, and hold this reader (outside its
                # lock, parked) until B, in the same record, is writing.
                a_release.set()
                if not b_writing.wait(20):
                    stuck.append("B's write never began")
            else:
                # B seen writing: let its write end. When the reader sleeps again, hold it
                # until B is over (else, on a loaded machine, its sleep could end while B
                # has yet to clear ``sending``: a write seen at two decisions, rightly
                # taken over). When it took the role, B now waits for it to read: go on.
                armed[0] = False
                b_release.set()
                if frame.f_locals["park"] and not b_done.wait(20):
                    stuck.append("B never ended")

    _BlockingPeer.writing, _BlockingPeer.release = a_writing, a_release
    transport = MemoryTransport(_BlockingPeer, name="blocking")
    transport.start()
    with _tracing_reader(steer):
        session = Session(transport, name="blocking", default_timeout=10.0)
        session.start()
    try:
        # Each call leads or is answered by the reader; either way the reader comes back to
        # the top of its loop with the role free (see the same wait in the role tests).
        hold_at_top[0] = True
        for attempt in range(20):
            assert session.request("echo", {"warm": attempt}, timeout=5) == {"warm": attempt}
            if held_at_top.wait(2):
                break
        assert held_at_top.is_set(), "the background reader never came back to a free role"
        armed[0] = True
        assert session.request("block", {"call": "A"}, timeout=20) == {"call": "A"}
        assert len(decisions) == 1, decisions   # the reader is held until B writes
        record, a_id = decisions[0][0], decisions[0][1]
        assert isinstance(record, Call)
        assert session._role.spare.get(0) is record, "A did not give its record back"
        _BlockingPeer.writing, _BlockingPeer.release = b_writing, b_release
        assert session.request("block", {"call": "B"}, timeout=20) == {"call": "B"}
        b_done.set()
        assert not stuck, stuck
        assert len(decisions) == 2, decisions
        (_, id_a, park_a, role_a, sending_a, kept_a), \
            (holder_b, id_b, park_b, role_b, sending_b, kept_b) = decisions
        # The first decision: A, in the record, writing; the reader slept.
        assert id_a == a_id and sending_a and park_a and role_a is record and kept_a == a_id
        # The next one: the same record, a new call (B), writing too; it still slept, and
        # the role stayed with B.
        assert holder_b is record and id_b > a_id and sending_b
        assert park_b, "the reader took a new write in a reused record for a blocked one"
        assert role_b is record and kept_b == id_b
        assert session._role.spare.get(0) is record   # B led through: given back too
        assert not session._pending
        assert session.request("echo", {"n": 1}, timeout=5) == {"n": 1}
    finally:
        a_release.set()
        a_writing.set()
        b_release.set()
        b_writing.set()
        b_done.set()
        session.close()
