"""The reader role claimed by its token, without the session's lock.

A caller on the usual path claims a free role by ``del role.token`` (``Role``'s slot, set
while the role is free): one bytecode that one thread only can complete, followed on the
same line by the store of ``holder``. The locked claimers (``_send``, ``_claim_after_write``,
the background reader, ``start()``) take the same token through ``Role.take``. These tests
hold the guarantees that rest on it: a token taken and its holder not yet stored keeps every
other claimer out; the background reader, having looked at a free role, parks when a caller
took the token first; nothing between the token's ``del`` and the holder's store can run
Python code or take a Ctrl-C; ``start()`` gives the token to the background reader before a
caller can claim; a claim in a session closed meanwhile puts the token back; a claim of a
taken role raises nothing; and many threads never read two at a time.
"""

from __future__ import annotations

import dis
import inspect
import sys
import threading
import time
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

import pytest

from mcpsync.errors import ClosedError, ConnectionLost
from mcpsync.session import Session
from mcpsync.session._background import BackgroundReader
from mcpsync.session._base import Phase
from mcpsync.session._engine import Session as EngineSession
from mcpsync.session._role import BG, Role

from .test_session_engine import FakeTransport

pytestmark = pytest.mark.timeout(90)

_REQUEST = EngineSession._request.__code__
_BG_RUN = BackgroundReader._bg_run.__code__
_START = EngineSession.start.__code__


def _line_in(func: Callable[..., Any], text: str) -> int:
    """The number of the one line of ``func`` that contains ``text``."""
    lines, first = inspect.getsourcelines(func)
    found = [first + i for i, line in enumerate(lines) if text in line]
    assert len(found) == 1, (text, found)
    return found[0]


def _has_token(role: Role) -> bool:
    return hasattr(role, "token")


def _session() -> tuple[Session, FakeTransport]:
    transport = FakeTransport()
    session = Session(transport, name="fake")
    session.start()
    return session, transport


def _still_serves(session: Session, transport: FakeTransport) -> None:
    """After a staged race: later calls are answered, and never were two readers at once."""
    for i in range(5):
        assert session.request("m", {"after": i}, timeout=10) == {"after": i}
    assert transport.max_readers == 1


def _after_token_offset() -> int:
    """The offset of ``_request``'s instruction right after the token's ``del``."""
    ins = list(dis.get_instructions(_REQUEST))
    at = [k for k, x in enumerate(ins) if x.opname == "DELETE_ATTR" and x.argval == "token"]
    assert len(at) == 1, at
    return ins[at[0] + 1].offset


def test_a_caller_stopped_right_after_taking_the_token_keeps_every_other_claimer_out(
        no_leaks: None) -> None:
    """A caller is stopped (an opcode-level trace on its thread) right after it took the
    token and before it stored itself as holder: the role then looks free (``holder`` is
    None) but its token is gone. While it stays there (longer than the background
    reader's short sleep), neither the background reader nor a second caller may claim:
    nobody reads, the second call stays unanswered, the role is still nobody's. Once the
    first caller goes on it stores itself, leads, and every call answers; nothing hangs."""
    target = _after_token_offset()
    stopped = threading.Event()
    resume = threading.Event()
    armed = [False]

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "opcode" and armed[0] and frame.f_lasti == target:
            armed[0] = False
            stopped.set()
            resume.wait(30)
        return local

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        if frame.f_code is _REQUEST:
            frame.f_trace_opcodes = True
            return local
        return None

    session, transport = _session()
    results: dict[str, Any] = {}
    errors: list[BaseException] = []

    def first() -> None:
        try:
            for attempt in range(50):
                assert session.request("m", {"warm": attempt}) == {"warm": attempt}
                time.sleep(0.002)   # the background reader's short sleep begins
                if session._role.holder is not None:
                    continue
                armed[0] = True
                sys.settrace(trace)
                try:
                    results["first"] = session.request("m", {"first": attempt}, timeout=30)
                finally:
                    sys.settrace(None)
                    armed[0] = False
                if stopped.is_set():
                    return
        except BaseException as exc:  # reported below
            errors.append(exc)

    def second() -> None:
        try:
            results["second"] = session.request("m", {"second": 1}, timeout=30)
        except BaseException as exc:  # reported below
            errors.append(exc)

    one = threading.Thread(target=first, name="mcpsync-test-first", daemon=True)
    two = threading.Thread(target=second, name="mcpsync-test-second", daemon=True)
    try:
        one.start()
        assert stopped.wait(30), "the caller never took the token of a free role"
        role = session._role
        assert role.holder is None and not _has_token(role)
        frames_before = dict(transport.frames_read)
        two.start()
        time.sleep(0.6)   # several of the background reader's short sleeps (50 ms)
        assert role.holder is None, f"claimed while the token was taken: {role.holder!r}"
        assert transport.readers == 0, "somebody reads while the token's owner is stopped"
        assert transport.frames_read == frames_before
        assert "second" not in results and two.is_alive()
        resume.set()
        one.join(30)
        two.join(30)
        assert not one.is_alive() and not two.is_alive(), "a call hangs"
        assert not errors, errors
        assert results["second"] == {"second": 1}
        assert list(results["first"]) == ["first"]
        _still_serves(session, transport)
    finally:
        resume.set()
        session.close()


def test_the_background_reader_parks_when_a_caller_takes_the_token_after_its_look(
        no_leaks: None) -> None:
    """The background reader has looked at the role, found it free, and is stopped (under
    the session's lock) before it tries the token. A caller claims meanwhile, without the
    lock. Let go, the reader must fail to take the token and park (the branch it enters is
    the parking one, not the store of ``holder = BG``); the caller leads and answers, and
    nobody ever reads beside it."""
    claim_line = _line_in(BackgroundReader._bg_run, "holder is None and self._role.take(_BG)")
    takeover_line = _line_in(BackgroundReader._bg_run, "self._role.holder = _BG")
    park_line = _line_in(BackgroundReader._bg_run, "if holder is None:")
    armed = [False]
    arm_lock = threading.Lock()
    stopped = threading.Event()
    resume = threading.Event()
    after: list[int] = []

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event != "line":
            return local
        if frame.f_lineno == claim_line and frame.f_locals["holder"] is None:
            with arm_lock:
                if not armed[0]:
                    return local
                armed[0] = False
                stopped.set()
            resume.wait(30)
            after.append(0)   # the branch it takes next: see below
        elif after == [0] and frame.f_lineno in (takeover_line, park_line):
            after[0] = frame.f_lineno
        return local

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        return local if frame.f_code is _BG_RUN else None

    threading.settrace(trace)
    try:
        session, transport = _session()
    finally:
        threading.settrace(None)
    got: list[Any] = []
    caller = threading.Thread(target=lambda: got.append(
        session.request("m", {"caller": 1}, timeout=30)), name="mcpsync-test-caller",
        daemon=True)
    try:
        # Armed only between calls: stopped (holding the session's lock) while this
        # thread's own call is under way, the reader would keep that call's give-back
        # waiting for the lock.
        for attempt in range(50):
            assert session.request("m", {"warm": attempt}) == {"warm": attempt}
            with arm_lock:
                armed[0] = True
            stopped.wait(0.3)
            with arm_lock:
                armed[0] = False
                if stopped.is_set():
                    break
        assert stopped.is_set(), "the background reader never looked at a free role"
        role = session._role
        assert role.holder is None and _has_token(role)
        caller.start()
        deadline = time.monotonic() + 30
        while role.holder is None and time.monotonic() < deadline:
            time.sleep(0.001)
        holder = role.holder
        assert holder is not None and holder is not BG, "the caller did not claim"
        assert not _has_token(role)
        resume.set()
        caller.join(30)
        assert not caller.is_alive()
        assert got == [{"caller": 1}]
        assert after and after[0] != takeover_line, "the reader claimed a taken role"
        assert after[0] == park_line, after
        _still_serves(session, transport)
    finally:
        resume.set()
        session.close()


def _path(code: CodeType, first: Callable[[dis.Instruction], bool],
          last: Callable[[dis.Instruction], bool]) -> list[dis.Instruction]:
    ins = list(dis.get_instructions(code))
    starts = [k for k, x in enumerate(ins) if first(x)]
    assert len(starts) == 1, starts
    k = starts[0]
    end = next(j for j in range(k + 1, len(ins)) if last(ins[j]))
    return ins[k:end + 1]


#: What may run between the token and the holder's store: loads and stores of locals and
#: of slots, the stack shuffled; none runs Python code, calls anything, allocates or
#: jumps, so no Ctrl-C, no thread switch and no garbage collection can happen there.
_QUIET = {"DELETE_ATTR", "STORE_ATTR", "LOAD_FAST", "LOAD_FAST_LOAD_FAST", "COPY", "DUP_TOP",
          "NOP", "CACHE", "EXTENDED_ARG"}


@pytest.mark.parametrize("where", ["_request", "Role.take"])
def test_nothing_between_the_token_and_the_holder_can_run_code(where: str) -> None:
    """On the running Python, the bytecode from the token's ``DELETE_ATTR`` to the holder's
    ``STORE_ATTR`` (on the success path: they follow each other) holds no call, no jump
    (backward or conditional), nothing that could run Python code, and no line starts
    inside it (no trace function's line event between the two). The interrupt sweeps
    only see C calls that return: this keeps a later edit from slipping a Ctrl-C or a
    thread switch in there unseen."""
    code = _REQUEST if where == "_request" else Role.take.__code__
    path = _path(code, lambda x: x.opname == "DELETE_ATTR" and x.argval == "token",
                 lambda x: x.opname == "STORE_ATTR" and x.argval == "holder")
    names = [x.opname for x in path]
    assert not [n for n in names if "CALL" in n or "JUMP" in n], names
    assert set(names) <= _QUIET, names
    if sys.version_info >= (3, 11):
        assert len({x.positions.lineno for x in path if x.positions}) == 1, names
    else:   # 3.10: starts_line is set on the first instruction of a line only
        assert all(x.starts_line is None for x in path[1:]), names


def test_the_give_backs_store_holder_then_token_with_nothing_between() -> None:
    """The owner gives the role back by ``holder = None`` and then ``token = True`` (the
    other order would let a claim take the token and have its store undone): nothing runs
    code between the two, in ``Role.free`` and in ``_request``'s lock-free give-back, and
    both are on one line (a Ctrl-C raised by a trace function's line event between them
    would leave the role owned by nobody)."""
    for code in (Role.free.__code__, _REQUEST):
        ins = list(dis.get_instructions(code))
        gives = [k for k, x in enumerate(ins)
                 if x.opname == "STORE_ATTR" and x.argval == "token"]
        assert gives, code
        for k in gives:
            j = max(i for i in range(k) if ins[i].opname == "STORE_ATTR"
                    and ins[i].argval == "holder")
            path = ins[j:k + 1]
            names = [x.opname for x in path]
            assert set(names) <= _QUIET | {"LOAD_CONST"}, names
            # and on one line: no trace function's line event between the two stores
            if sys.version_info >= (3, 11):
                assert len({x.positions.lineno for x in path if x.positions}) == 1, names
            else:   # 3.10: starts_line is set on the first instruction of a line only
                assert all(x.starts_line is None for x in path[1:]), names


def test_start_gives_the_token_to_the_background_reader_before_the_phase_opens(
        no_leaks: None) -> None:
    """``start()`` takes the token for the background reader before it stores the open
    phase: a caller that claims without the lock once it sees the session open must find
    the role taken, not take it beside the background reader."""
    phase_line = _line_in(EngineSession.start, "self._phase = Phase.OPEN")
    seen: list[tuple[object, bool, Phase]] = []

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line" and frame.f_lineno == phase_line:
            role = frame.f_locals["self"]._role
            seen.append((role.holder, _has_token(role), frame.f_locals["self"]._phase))
        return local

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        return local if frame.f_code is _START else None

    transport = FakeTransport()
    session = Session(transport, name="fake")
    sys.settrace(trace)
    try:
        session.start()
    finally:
        sys.settrace(None)
    try:
        assert seen == [(BG, False, Phase.NEW)]
        assert session.request("m", {"a": 1}) == {"a": 1}
    finally:
        session.close()


def test_a_close_between_the_registration_and_the_claim_puts_the_token_back(
        no_leaks: None) -> None:
    """A caller registered its call and saw the session open, and is stopped before its
    lock-free claim while another thread closes the session. Let go, it takes the free
    token, finds the session closed and gives the role back: the token is back, nobody
    holds the role, and the call fails with the close rather than hang."""
    claim_line = _line_in(EngineSession._request, "if role.holder is None:")
    back_line = _line_in(EngineSession._request, "role.holder = role.sending = None;")
    seen_back: list[bool] = []

    for attempt in range(20):
        session, _ = _session()
        closed: list[bool] = []
        armed = [False]

        def local(frame: FrameType, event: str, arg: Any, session: Session = session,
                  closed: list[bool] = closed, armed: list[bool] = armed) -> Any:
            if event != "line":
                return local
            if armed[0] and frame.f_lineno == claim_line:
                armed[0] = False
                if session._role.holder is None:   # else the claim is not tried: again
                    closer = threading.Thread(target=session.close, daemon=True,
                                              name="mcpsync-test-closer")
                    closer.start()
                    closer.join(30)
                    closed.append(not closer.is_alive())
            elif frame.f_lineno == back_line:
                seen_back.append(True)
            return local

        def trace(frame: FrameType, event: str, arg: Any,
                  local: Callable[..., Any] = local) -> Any:
            return local if frame.f_code is _REQUEST else None

        try:
            assert session.request("m", {"warm": attempt}) == {"warm": attempt}
            time.sleep(0.002)
            armed[0] = True
            sys.settrace(trace)
            try:
                with pytest.raises((ClosedError, ConnectionLost)):
                    session.request("m", {"late": attempt}, timeout=10)
            except pytest.fail.Exception:
                if closed:
                    raise
                continue   # the role was taken at the stop: no close made, try again
            finally:
                sys.settrace(None)
            if not closed:
                continue
            assert closed == [True]
            role = session._role
            assert seen_back == [True], "the claim in a closed session was not given back"
            assert _has_token(role) and role.holder is None and role.sending is None
            assert not session._pending
            return
        finally:
            sys.settrace(None)
            session.close()
    pytest.fail("the role was never free before the claim")


def test_a_claim_of_a_taken_role_raises_nothing(no_leaks: None) -> None:
    """The lock-free claim looks at ``holder`` before it tries the token: a taken role
    (here the background reader's, right after ``start()``) costs no raised and caught
    ``AttributeError`` (about 1,850 instructions more than a look). ``Role.take`` of a
    taken role returns False, and raises nothing either."""
    raised: list[str] = []

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "exception":
            raised.append(arg[0].__name__)
        return local

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        return local if frame.f_code is _REQUEST else None

    session, _ = _session()
    try:
        assert session._role.holder is BG and not _has_token(session._role)
        sys.settrace(trace)
        try:
            assert session.request("m", {"a": 1}) == {"a": 1}
        finally:
            sys.settrace(None)
        assert raised == [], raised
        role = Role()
        assert role.take("one") is True and role.holder == "one"
        assert role.take("two") is False and role.holder == "one"
        role.free("two")
        assert role.holder == "one" and not _has_token(role)
        role.free("one")
        assert role.holder is None and _has_token(role)
    finally:
        session.close()


@pytest.mark.parametrize("traced", [False, True], ids=["untraced", "traced"])
def test_many_threads_never_read_two_at_a_time(no_leaks: None, traced: bool) -> None:
    """Six threads call in loops, with bursts of sequential calls (so the role goes back
    and forth between the lock-free claim, the locked claims and the background reader),
    with threads switched as often as CPython allows; traced, a no-op trace function's
    line events add switch points between lines. Every call answers, and ``receive()`` is
    never entered by two threads at once."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    transport = FakeTransport(delay=0.0002)
    session = Session(transport, name="fake")
    session.start()
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            for j in range(120):
                assert session.request("m", {"k": k, "j": j}, timeout=30) == {"k": k, "j": j}
                if j % 7 == 0:
                    for i in range(5):
                        assert session.request("m", {"s": i}, timeout=30) == {"s": i}
        except BaseException as exc:  # reported below
            errors.append(exc)

    def noop(frame: FrameType, event: str, arg: Any) -> Any:
        return noop

    threads = [threading.Thread(target=worker, args=(k,), name=f"mcpsync-test-w{k}",
                                daemon=True) for k in range(6)]
    try:
        if traced:
            threading.settrace(noop)
        for t in threads:
            t.start()
        threading.settrace(None)
        for t in threads:
            t.join(60)
        for j in range(30):
            assert session.request("m", {"seq": j}, timeout=30) == {"seq": j}
        assert not errors, errors[:1]
        assert not any(t.is_alive() for t in threads), "a call hangs"
        assert transport.max_readers == 1, transport.max_readers
    finally:
        threading.settrace(None)
        sys.setswitchinterval(old)
        session.close()
