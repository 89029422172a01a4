"""Ctrl-C at any C call's return on ``Client.call_tool``'s usual path, which enters the session
by ``Session._request`` directly (not through ``Session.request``): after each interrupt no
lock, reader role or call is left held, the interrupted call's record is not given back for
reuse, and the next call answers. Against a real server
process (the demo server), with the caller leading its reads and after the background reader
took the role back."""

from __future__ import annotations

import select
import sys
import time
from collections.abc import Callable, Iterator
from types import CodeType, FrameType
from typing import Any

import pytest
from helpers import assert_nothing_held, interrupt_at_return

import mcpsync
from mcpsync import jsonrpc
from mcpsync.client._client import Client
from mcpsync.session._engine import Session as EngineSession
from mcpsync.transport.stdio import StdioTransport, _lifecycle

pytestmark = pytest.mark.timeout(120)

DEMO = [sys.executable, "-m", "mcpsync.demo"]
CODES = [Client.call_tool.__code__, EngineSession._request.__code__, EngineSession._send.__code__,
         EngineSession._claim_after_write.__code__, EngineSession._release_role.__code__,
         jsonrpc.FrameDecoder.feed.__code__, StdioTransport.receive.__code__,
         StdioTransport.exchange.__code__]


@pytest.fixture(scope="module", params=[None, "legacy"], ids=["negotiated", "legacy"])
def client(request: pytest.FixtureRequest) -> Iterator[mcpsync.Client]:
    """The demo as negotiated (the newest era: params carry ``_meta``) and in the legacy era,
    where ``call_tool`` hands the session its tool's name and ``Session._request`` takes its
    own branch for it (no type tests, ``_serialize_tool_call``)."""
    era = request.param
    with mcpsync.connect(DEMO, timeout=30, **({} if era is None else {"era": era})) as c:
        assert c._modern is (era is None)
        # The background reader started now, not when an interrupted call first needs it
        # (a stdio session starts it only then): it belongs to this module's client, not
        # to whichever test starts it (each test checks that it leaves no thread behind),
        # and ``first-call`` needs it. Ctrl-C on the path with the reader absent is swept
        # by the session's own tests.
        session = c._session
        with session._lock:
            session._start_reader()
        yield c


@pytest.mark.parametrize("code", CODES, ids=lambda c: c.co_name)
@pytest.mark.parametrize("warm", [True, False], ids=["leading", "first-call"])
def test_ctrl_c_at_any_return_in_call_tool_leaves_nothing_held(
        client: mcpsync.Client, code: CodeType, warm: bool) -> None:
    # A first call follows the background reader's reads: it does not lead. A leader
    # claims the free role, writes and reads in _request itself (_send runs only when the
    # role was not free: a first call), and gives the role back without a call (no lock)
    # unless it must wake the background reader: the session's tests sweep that locked
    # branch. call_tool's own C calls include those that make the plain-text result
    # (written out there), in either era.
    # _claim_after_write runs after a first call's write (in _send), as _send does.
    # A leader's legacy tool call writes and makes its first read in one transport call
    # (StdioTransport.exchange), which recognises the echo's answer itself: receive() and
    # the decoder's feed() may then never run, so only the exchange is expected there; a
    # modern call's params carry _meta, its line is not a tool's own, and it never takes
    # the exchange.
    send = EngineSession._send.__code__
    after_write = EngineSession._claim_after_write.__code__
    exchange = StdioTransport.exchange.__code__
    fused = warm and not client._modern
    expected = (warm and code is not EngineSession._release_role.__code__
                and code is not send and code is not after_write
                and (code is not exchange or fused)
                and (not fused or code not in (jsonrpc.FrameDecoder.feed.__code__,
                                               StdioTransport.receive.__code__))) \
        or (not warm and code in (send, after_write))
    interrupted: list[str] = []
    nth = misses = tries = 0
    # Until three calls in a row meet no C call of ``code``; and while an interrupt is
    # expected and none has landed, from the start again (60 calls at most): on a loaded
    # machine the background reader may take the role back between two calls (its grace
    # ended while this thread waited for a CPU), and the call then follows instead of
    # leading, which three calls in a row can do.
    while misses < 3 or (expected and not interrupted and tries < 60):
        tries += 1
        if misses >= 3:
            nth = misses = 0
        if warm:
            assert client.call_tool("echo", {"text": "warm"}).text == "warm"
        else:
            time.sleep(0.03)   # past the hand-off grace: the background reader holds the role
        seen: list[str] = []
        spare = client._session._role.spare
        before = spare.get(0)
        before_id = None if before is None else before.id
        try:
            with interrupt_at_return({code}, nth, seen, qualified=True):
                result = client.call_tool("echo", {"text": str(nth)}, timeout=20)
        except KeyboardInterrupt:
            assert seen
        else:
            assert result.text == str(nth)
        nth += 1
        if not seen:
            misses += 1
            continue
        misses = 0
        interrupted += seen
        assert_nothing_held(client._session, seen[0])
        _assert_not_reused(spare, before, before_id, seen[0])
        assert client.call_tool("echo", {"text": "after"}, timeout=10).text == "after"
    if expected:
        assert interrupted, f"no C call's return was interrupted in {code.co_name}"
    if warm and code is Client.call_tool.__code__ and not client._modern:
        # Including the two objects of the plain-text result, made in call_tool itself (a
        # modern answer carries resultType: its result is made by the general part).
        assert sum(name.endswith("__new__") for name in interrupted) >= 2, interrupted


def _assert_not_reused(spare: dict[int, Any], before: Any, before_id: int | None,
                       where: str) -> None:
    """After a Ctrl-C at ``where``: the interrupted call's record (``Call``) is not in the
    session's spare, so no later call reuses it, unless the interrupt landed in
    ``call_tool`` after the session had returned the answer, the record given back whole.
    The interrupted call took the spare when there was one (``before``, its id then
    ``before_id``): finding it there again with another id means it was given back."""
    after = spare.get(0)
    if after is None or (after is before and after.id == before_id):
        return   # nothing given back, or the spare untouched (interrupted before its take)
    assert where.startswith("call_tool: "), f"Ctrl-C at {where}: its record was given back"
    assert after.done and after.error is None and after.lock is None, where
    assert after.result is None and after.params is None, where

def _interrupting(code: CodeType, nth: int, calls: list[str], seen: list[str],
                  answered: int = -1) -> Callable[[FrameType, str, object], None]:
    """A profile hook: KeyboardInterrupt as the ``nth`` C call made by ``code`` returns.

    With ``answered`` (a descriptor: the server's stdout), ``code``'s first ``readinto``
    is made only once the descriptor is readable (up to 10 s): a read tried first then
    always finds the answer, so the C calls and their order are the same in every run and
    the ``nth`` one is the same call each time. (Else a read made before the server has
    answered, which a loaded machine makes likely, finds nothing and adds a back-off, a
    poll and a second read, which shifts the calls after it, and a sweep could end before
    any run put a given call at the index it tried.)"""
    def hook(frame: FrameType, event: str, arg: object) -> None:
        if event == "c_call" and answered >= 0 and frame.f_code is code \
                and getattr(arg, "__name__", None) == "readinto" \
                and "readinto" not in calls:
            assert select.select([answered], [], [], 10.0)[0], "the server did not answer"
        elif event == "c_return" and frame.f_code is code:
            calls.append(getattr(arg, "__name__", repr(arg)))
            if len(calls) == nth + 1:
                seen.append(calls[-1])
                raise KeyboardInterrupt
    return hook


@pytest.mark.parametrize("way", ["blocking", "read-first", "poll-first"])
def test_a_close_right_after_ctrl_c_in_the_exchange_does_not_wait(
        no_leaks: None, monkeypatch: pytest.MonkeyPatch, way: str) -> None:
    """Ctrl-C at each C call's return in ``StdioTransport.exchange`` (a legacy call that
    leads), and the client closed at once after it: the exchange's read takes no lock, and
    the count it adds to instead is 0 again, so the close neither waits for it (its bound
    made long here, so that a wait would show) nor keeps stdout, the wake-up pipe, the
    pidfd or the blocking read's descriptor open for it. One connection per interrupt; the
    blocking read (``_blocking_read``), or with it stopped, the read tried first, or the
    poll made first (as after reads that found nothing). The first read is made once the
    answer is there, so that it never waits nor misses (see ``_interrupting``): each run
    makes the same C calls, and each is interrupted in turn."""
    eager = way != "poll-first"
    monkeypatch.setattr(_lifecycle, "JOIN_TIMEOUT", 30.0)   # CLOSE_BOUND (5 s) bounds it
    code = StdioTransport.exchange.__code__
    interrupted: list[str] = []
    nth = misses = tries = 0
    while misses < 3:
        tries += 1
        assert tries < 200, interrupted
        calls: list[str] = []   # every C call of the exchange that returned
        seen: list[str] = []
        with mcpsync.connect(DEMO, timeout=30, era="legacy") as client:
            transport = client._session._transport
            assert isinstance(transport, StdioTransport)
            hook = _interrupting(code, nth, calls, seen,
                                 transport._stdout_fd if eager else -1)
            assert client.call_tool("echo", {"text": "warm"}).text == "warm"   # leads next
            blocking = transport._blocking
            assert blocking is not None   # made by the first tool call
            if way != "blocking":
                blocking.stop()
            transport._skip_eager = 0 if eager else 1
            sys.setprofile(hook)
            try:
                result = client.call_tool("echo", {"text": str(nth)}, timeout=20)
            except KeyboardInterrupt:
                assert seen
            else:
                assert result.text == str(nth)
            finally:
                sys.setprofile(None)
            assert transport._exchanging == 0, seen
            # Read first, the read never missed: no poll was made.
            assert not eager or "poll" not in calls, calls
            started = time.monotonic()
        took = time.monotonic() - started
        assert took < 3.0, (seen, took)
        assert (transport._stdout_fd, transport._wake_r, transport._wake_w,
                transport._pidfd, blocking.fd) == (-1, -1, -1, -1, -1), seen
        assert transport._blocking is None and blocking.blocked_on == 0, seen
        if not calls:
            continue   # the call followed (the background reader held the role): again
        if not seen:
            misses += 1
        else:
            misses = 0
            interrupted += seen
        nth += 1
    # The blocking read is made by starmap's iteration, where the hook sees no call of the
    # exchange's: a Ctrl-C raised as it returns is test_stdio_blocking_read.py's (held).
    read = {"readinto"} if way != "blocking" else set()
    assert {"write", "tobytes", "decode"} | read <= set(interrupted), interrupted
    if not eager:
        assert "poll" in interrupted, interrupted


@pytest.mark.parametrize("fresh", [False, True], ids=["cached-name", "new-name"])
def test_ctrl_c_at_any_return_in_the_tool_calls_serialiser_leaves_nothing_held(
        no_leaks: None, fresh: bool) -> None:
    """The same sweep over what writes the line when the params are just ``name`` and
    ``arguments`` (a legacy server's: a modern one's carry ``_meta``, and take
    ``serialize_request``): for a new tool name each time, ``_serialize_tool_call`` (its
    piece of the line encoded and remembered); for a name seen before, the copy of its usual
    case in ``Session._request`` (the piece from the cache), swept with the rest of that
    method's C calls. The line is made whole before anything is written, so no interrupt
    can leave half a line on the stream: the next call answers."""
    code = (jsonrpc._serialize_tool_call if fresh else EngineSession._request).__code__
    # The table of cached pieces is bounded and shared by the whole run: emptied here (and
    # given its entries back after), so that "echo" is cached whatever ran before.
    saved = dict(jsonrpc._TOOL_PARTS)
    jsonrpc._TOOL_PARTS.clear()
    try:
        _sweep_the_line(code, fresh)
    finally:
        jsonrpc._TOOL_PARTS.clear()
        jsonrpc._TOOL_PARTS.update(saved)


def _sweep_the_line(code: CodeType, fresh: bool) -> None:
    with mcpsync.connect(DEMO, timeout=30, era="legacy") as client:
        interrupted: list[str] = []
        nth = misses = 0
        while misses < 3:
            name = f"no-such-tool-{nth}-{time.monotonic_ns()}" if fresh else "echo"
            if not fresh:
                assert client.call_tool("echo", {"text": "warm"}).text == "warm"   # leads
            seen: list[str] = []
            try:
                with interrupt_at_return({code}, nth, seen, qualified=True):
                    result = client.call_tool(name, {"text": str(nth)}, timeout=20)
            except KeyboardInterrupt:
                assert seen
            except mcpsync.RemoteError:
                assert fresh   # the demo has no tool by that name: it answers an error
            else:
                assert result.text == str(nth)
            nth += 1
            if not seen:
                misses += 1
                continue
            misses = 0
            interrupted += seen
            assert_nothing_held(client._session, seen[0])
            assert client.call_tool("echo", {"text": "after"}, timeout=10).text == "after"
        calls = {name.split(": ")[1] for name in interrupted}
        if fresh:
            assert calls == {"get", "encode_basestring", "join", "encode"}, interrupted
        else:
            # The copy's own calls: the cache's lookup, the join and the encode (the C
            # encoder's call is not a builtin function: no return event to raise at).
            assert {"get", "join", "encode"} <= calls, interrupted
