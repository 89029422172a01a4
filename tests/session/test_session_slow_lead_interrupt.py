"""Ctrl-C at any C call's return in a lead whose answer takes longer than one slice.

A leader's first wait longer than ``MAIN_THREAD_SLICE`` is cut to one slice without asking
which thread leads; only a later wait asks (``get_ident()``, compared with the main thread's
ident), so that question is reached only by a call whose answer has not come within the
first slice. The sweeps of ``test_session_hot_path_interrupt`` make quick calls, answered in
the first wait: these make one answered after 250 ms, against a real server process, so the
interrupt lands at that question's return too (and at every other C call's return of the
lead's later rounds). After each: no lock or role held, nothing pending, the session answers;
and for an interrupt at the question itself, the call is cancelled on the wire.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from types import FrameType

import pytest
from helpers import assert_nothing_held, interrupt_at_return

from mcpsync.session import Session
from mcpsync.session._engine import Session as EngineSession

from .helpers import peer_session

pytestmark = pytest.mark.timeout(90)

_REQUEST = EngineSession._request.__code__
#: The server answers after this many ms: more than one MAIN_THREAD_SLICE (100 ms).
SLOW_MS = 250


@pytest.fixture
def peer(no_leaks: None) -> Iterator[Session]:
    yield from peer_session()


def test_ctrl_c_at_any_return_in_a_lead_longer_than_a_slice_leaves_nothing_held(
        peer: Session) -> None:
    """Interrupt a warm (leading) call answered after 250 ms at the 1st, 2nd, ... C call's
    return in ``_request``, until three calls in a row meet none; the interrupts must have
    reached the second wait's ``get_ident``."""
    assert threading.current_thread() is threading.main_thread()
    interrupted: list[str] = []
    nth = misses = 0
    while misses < 3:
        assert nth < 200, interrupted
        assert peer.request("echo", {"warm": nth}) == {"warm": nth}
        seen: list[str] = []
        try:
            with interrupt_at_return({_REQUEST}, nth, seen, qualified=True):
                got = peer.request("sleep", {"ms": SLOW_MS, "n": nth}, timeout=20)
        except KeyboardInterrupt:
            assert seen
        else:
            assert got["slept"] == SLOW_MS
        nth += 1
        if not seen:
            misses += 1
            continue
        misses = 0
        interrupted += seen
        assert_nothing_held(peer, seen[0])
        assert peer.request("echo", {"after": nth}, timeout=10) == {"after": nth}
    names = " ".join(interrupted)
    assert "_request: get_ident" in names, names
    # The lead's later rounds were interrupted too: its clock reads past the first wait's.
    assert names.count("_request: monotonic") >= 3, names


def _interrupt_at_get_ident(peer: Session) -> int:
    """Make a leading call answered after 250 ms, interrupted as the lead's ``get_ident()``
    returns (its second wait); the interrupted call's id."""
    ids: list[int] = []

    def hook(frame: FrameType, event: str, arg: object) -> None:
        if (event == "c_return" and frame.f_code is _REQUEST and not ids
                and getattr(arg, "__name__", None) == "get_ident"):
            ids.append(frame.f_locals["call"].id)
            raise KeyboardInterrupt

    for attempt in range(20):
        assert peer.request("echo", {"warm": attempt}) == {"warm": attempt}
        sys.setprofile(hook)
        try:
            peer.request("sleep", {"ms": SLOW_MS}, timeout=20)
        except KeyboardInterrupt:
            assert ids
            return ids[0]
        finally:
            sys.setprofile(None)
        # Answered: the call did not lead (the background reader kept the role on a busy
        # machine) or its answer came within the first slice. Try again.
    raise AssertionError("no call reached the second wait's get_ident()")


def _check_abandoned(peer: Session, rid: int) -> None:
    """After the interrupt: nothing held, the call cancelled on the wire, the session
    answers (its late answer is dropped)."""
    assert_nothing_held(peer, "get_ident")
    deadline = time.monotonic() + 10
    cancelled: list[object] = []
    while time.monotonic() < deadline:
        cancelled = [c.get("requestId") for c in peer.request("cancelled", timeout=10)]
        if rid in cancelled:
            break
        time.sleep(0.02)
    assert rid in cancelled, (rid, cancelled)
    time.sleep(SLOW_MS / 1000)   # the late answer arrives, and is dropped
    for i in range(3):
        assert peer.request("echo", {"after": i}, timeout=10) == {"after": i}
    assert_nothing_held(peer, "get_ident, later")


def test_ctrl_c_at_the_second_waits_get_ident_abandons_the_call_cleanly(
        peer: Session) -> None:
    """On the main thread (whose waits are all sliced)."""
    assert threading.current_thread() is threading.main_thread()
    rid = _interrupt_at_get_ident(peer)
    _check_abandoned(peer, rid)


def test_ctrl_c_at_get_ident_on_another_thread(peer: Session) -> None:
    """On another thread (whose later waits are whole): the same, the interrupt raised
    there by the hook (a KeyboardInterrupt reaches only the main thread in real life, but
    any exception leaving the lead there is handled alike)."""
    out: list[object] = []

    def run() -> None:
        try:
            out.append(_interrupt_at_get_ident(peer))
        except BaseException as exc:  # reported below
            out.append(exc)

    thread = threading.Thread(target=run, name="mcpsync-test-leader", daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive()
    assert len(out) == 1 and isinstance(out[0], int), out
    _check_abandoned(peer, out[0])

