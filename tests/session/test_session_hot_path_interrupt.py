"""Ctrl-C at any C call's return on a sequential call's path leaves no lock or role held.

The session's lock (claiming the reader role, giving it back) and the stdio transport's read
lock are taken on that path by a ``for`` loop over a ``starmap`` of ``acquire`` and released
in a ``finally``, not by ``with``: CPython raises a ``KeyboardInterrupt`` where a call
returns, and no call returns into the frame between the acquire and the ``try``. These tests
raise the interrupt at each C call's return in those functions in turn (with a profile hook,
the one way to hit each exact point every time), against a real server process, and check
after each that every lock is free, that no call is pending or holds the role, and that the
session still answers.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from types import CodeType

import pytest
from helpers import assert_nothing_held, interrupt_at_return

from mcpsync import jsonrpc
from mcpsync.session import Session, _engine as engine
from mcpsync.session._engine import Session as EngineSession
from mcpsync.transport.stdio import StdioTransport

from .helpers import peer_session

pytestmark = pytest.mark.timeout(60)

#: The functions a sequential request runs through, where an interrupt is raised in turn.
#: ``_request`` claims a free role, writes, leads and gives the role back itself (request
#: only forwards to it: no C call of its own); ``_send`` writes when the role was not free
#: (a first call), and ``_claim_after_write`` then takes the role (or asks the background
#: reader for it) after that write; ``_release_role`` gives it back when the reader must be
#: woken.
HOT = {
    EngineSession._request.__code__,
    EngineSession._send.__code__, EngineSession._claim_after_write.__code__,
    EngineSession._release_role.__code__,
    EngineSession._take_answer.__code__, StdioTransport.receive.__code__,
    StdioTransport.send_bytes_until.__code__, jsonrpc.FrameDecoder.feed.__code__,
    jsonrpc.serialize_request.__code__,
}


@pytest.fixture
def peer(no_leaks: None) -> Iterator[Session]:
    yield from peer_session()


#: How each sweep's session is used: ``leading`` (the caller has made a call before, so it
#: claims the free role and reads its own answer: the sequential steady state), with the
#: background reader absent (stdio's default: started only when needed) or present from the
#: start (as on transports without the idle watch); ``first-call``: every interrupted
#: request is the first after the background reader took the role back (it is given the
#: time), which needs a reader present.
MODES = {"leading": (True, False), "leading-with-reader": (True, True),
         "first-call": (False, True)}


@pytest.fixture(params=list(MODES))
def mode(request: pytest.FixtureRequest, no_leaks: None) -> Iterator[tuple[Session, bool]]:
    """A session for one of MODES, and whether the sweep warms it (``leading``)."""
    warm, reader = MODES[request.param]
    for session in peer_session(reader=reader):
        yield session, warm


def _sweep(peer: Session, code: CodeType, warm: bool, want: str | None = None) -> list[str]:
    """Interrupt a request at the 1st, 2nd, ... C call's return in ``code`` until a few
    requests in a row meet none (which path a read takes varies: a read that finds the
    answer at once, or a poll first, and the two make different numbers of calls), and
    until ``want`` was among them (200 requests at most); check after each interrupt. The
    names interrupted."""
    interrupted: list[str] = []
    nth = misses = tries = 0
    while misses < 3 or (want is not None and tries < 200
                         and not any(want in name for name in interrupted)):
        tries += 1
        if misses >= 3:   # a request's path ran out of calls before ``want``: from the start
            nth = misses = 0
        if warm:
            assert peer.request("echo", {"warm": nth}) == {"warm": nth}
        else:
            time.sleep(0.03)   # past HANDOFF_GRACE: the background reader holds the role
        seen: list[str] = []
        try:
            with interrupt_at_return({code}, nth, seen, qualified=True):
                got = peer.request("echo", {"n": nth}, timeout=20)
        except KeyboardInterrupt:
            assert seen
        else:
            assert got == {"n": nth}
        nth += 1
        if not seen:
            misses += 1
            continue
        misses = 0
        interrupted += seen
        assert_nothing_held(peer, seen[0])
        # The next call reads its answer: no lock is stuck (this would time out).
        assert peer.request("echo", {"after": nth}, timeout=10) == {"after": nth}
    return interrupted


@pytest.mark.parametrize("code", sorted(HOT, key=lambda c: c.co_name),
                         ids=lambda c: c.co_name)
def test_ctrl_c_at_any_return_on_the_sequential_path_leaves_nothing_held(
        mode: tuple[Session, bool], code: CodeType) -> None:
    """In each of MODES. ``_release_role`` usually gives the role back without a call (no
    lock): its locked branch is swept by the test below."""
    peer, warm = mode
    want = {StdioTransport.send_bytes_until.__code__: "write"}.get(code)
    if code is StdioTransport.receive.__code__ and warm:
        want = "receive: release"
    if code is EngineSession._claim_after_write.__code__ and not warm:
        want = "_claim_after_write: len"
    names = " ".join(_sweep(peer, code, warm, want))
    # The interrupts reached the write, and (for a caller that reads its own answer) the
    # release of the read lock, and of the session's lock after the claim in _request.
    if code is StdioTransport.send_bytes_until.__code__:
        assert "write" in names
    if code is StdioTransport.receive.__code__ and warm:
        assert "receive: release" in names
    if code is EngineSession._request.__code__ and warm:
        # The claim takes the role's token without the session's lock: no C call (no
        # lock release) between the token and the holder's store.
        assert "_request: release" not in names
        # The call record's reading of the clock and the lead's: both interrupted.
        assert names.count("_request: monotonic") >= 2, names
    if code is EngineSession._claim_after_write.__code__ and not warm:
        # A first call claims the role after its write under the session's lock: the
        # interrupts reached the C calls inside it.
        assert "_claim_after_write: len" in names


def test_ctrl_c_at_any_return_in_release_roles_locked_branch(
        mode: tuple[Session, bool], monkeypatch: pytest.MonkeyPatch) -> None:
    """``_release_role`` takes the session's lock only to wake the background reader (or
    when the call is not the plain holder). With ``EAGER_HANDBACK`` every release wakes it,
    so each C call of the locked branch (the acquire, the gate's release, the lock's
    release) is interrupted in turn: nothing is left held, and the next call answers."""
    peer, warm = mode
    monkeypatch.setattr(engine, "EAGER_HANDBACK", True)
    names = " ".join(_sweep(peer, EngineSession._release_role.__code__, warm,
                            "_release_role: release"))
    assert "_release_role: release" in names


def test_ctrl_c_at_any_return_while_another_thread_calls(peer: Session) -> None:
    """The same, with a second thread calling in a loop meanwhile, so that the locks are
    contended and the role goes back and forth: the other thread's calls all complete."""
    stop = threading.Event()
    errors: list[BaseException] = []
    done = [0]

    def other() -> None:
        try:
            while not stop.is_set():
                assert peer.request("echo", {"other": done[0]}, timeout=20) == \
                    {"other": done[0]}
                done[0] += 1
        except BaseException as exc:  # reported below
            errors.append(exc)

    thread = threading.Thread(target=other, name="mcpsync-test-other", daemon=True)
    thread.start()
    try:
        nth = 0
        while nth < 400:
            seen: list[str] = []
            try:
                with interrupt_at_return(HOT, nth, seen, qualified=True):
                    peer.request("echo", {"n": nth}, timeout=20)
            except KeyboardInterrupt:
                pass
            if not seen:
                break
            nth += 1
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive()
    assert not errors, errors
    assert done[0] > 0
    assert_nothing_held(peer, "the end")
    assert peer.request("echo", {"last": 1}) == {"last": 1}
