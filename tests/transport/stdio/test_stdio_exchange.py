"""``StdioTransport.exchange`` (a sole caller's request line written and its first read made
in one call) recognises this call's plain result itself, with a copy of
``FrameDecoder.feed``'s usual case; anything else it hands to the decoder as ``receive``
would. The two copies are held here to the same decision and the same result for every
shape of line: a change to either that makes them disagree fails this test.

Against a real server process that writes back every read as it came (so the exchange's
read is exactly the bytes the test chose), one process per line (the decoder keeps what a
partial line left)."""

from __future__ import annotations

import math
import sys
import threading
import time
from typing import Any

import pytest

from mcpsync import jsonrpc
from mcpsync.jsonrpc import FrameDecoder
from mcpsync.session._role import Role
from mcpsync.transport.base import TransportClosed, WriteTimedOut
from mcpsync.transport.stdio import StdioTransport

pytestmark = pytest.mark.timeout(120)

# Writes back each read as it came: one read, one write (a line of the pipe's size or less is
# read and written whole, so the exchange reads exactly what the test wrote).
MIRROR = r'''
import os
while True:
    data = os.read(0, 1 << 20)
    if not data:
        break
    os.write(1, data)
'''

LONG = "x" * (jsonrpc._LONG_TEXT + 100)


def _result(id_text: str, result: str = '{"a":1}', jsonrpc_member: str = '"jsonrpc":"2.0",'
            ) -> bytes:
    return ('{' + jsonrpc_member + '"id":' + id_text + ',"result":' + result + '}').encode()


#: (line as written and read back, this call's id). Every shape the usual case tests for.
SHAPES: list[tuple[bytes, int]] = [
    (_result("7") + b"\n", 7),                              # the usual answer
    (_result("7", "{}") + b"\n", 7),
    (_result("7", '{"content":[{"type":"text","text":"hi"}]}') + b"\n", 7),
    (_result("8") + b"\n", 7),                              # another call's id
    (_result("0") + b"\n", 0),                              # id zero
    (_result("-3") + b"\n", -3),                            # negative
    (_result("true") + b"\n", 1),                           # a bool (== 1)
    (_result('"7"') + b"\n", 7),                            # a string id
    (_result("7.0") + b"\n", 7),                            # a float id
    (_result("7", jsonrpc_member="") + b"\n", 7),           # jsonrpc missing (two members)
    (b'{"id":7,"result":{"a":1},"x":1}\n', 7),              # three members, no jsonrpc
    (_result("7", jsonrpc_member='"jsonrpc":"1.0",') + b"\n", 7),
    (_result("7", jsonrpc_member='"jsonrpc":2,') + b"\n", 7),
    (b'{"jsonrpc":"2.0","id":7,"result":{"a":1},"extra":1}\n', 7),   # an extra member
    (b'{"jsonrpc":"2.0","id":7,"error":{"code":-1,"message":"no"}}\n', 7),
    (b'{"jsonrpc":"2.0","id":7,"method":"x"}\n', 7),                  # a request
    (_result("7", "5") + b"\n", 7),                         # results that are not objects
    (_result("7", "[]") + b"\n", 7),
    (_result("7", '"s"') + b"\n", 7),
    (_result("7", "null") + b"\n", 7),
    (_result("7", r'{"t":"a\nb\"c"}') + b"\n", 7),          # escapes other than \u
    (_result("7", r'{"t":"\u00e9"}') + b"\n", 7),           # a \u escape
    (_result("7", r'{"t":"\ud800"}') + b"\n", 7),           # a lone surrogate
    (_result("7", '{"t":"\u00e9"}') + b"\n", 7),            # raw UTF-8
    (_result("7", '{"t":"' + LONG + '"}') + b"\n", 7),       # long lines, past the mark
    (_result("7", '{"t":"' + LONG + r'\n"}') + b"\n", 7),
    (_result("7", '{"t":"' + LONG + r'\u00e9"}') + b"\n", 7),
    (_result("7", '{"t":"' + LONG + r'\ud800"}') + b"\n", 7),
    (_result("7", '{"t":"\xff"}').replace(b"\xc3\xbf", b"\xff") + b"\n", 7),   # not UTF-8
    (_result("7", '{"t":1e999}') + b"\n", 7),               # not finite
    (b" " + _result("7") + b"\n", 7),                       # whitespace around
    (_result("7") + b" \n", 7),
    (_result("7") + b"\r\n", 7),
    (_result("7") + b"\n" + _result("8") + b"\n", 7),       # two lines in one read
    (_result("8") + b"\n" + _result("7") + b"\n", 7),
    (_result("7"), 7),                                      # a partial line
    (_result("7") + b"\n" + _result("8")[:10], 7),
    (b"\n", 7),                                             # a blank line
    (b"[" + _result("7") + b"]\n", 7),                      # a batch
    (b"not json\n", 7),
    (b'{"jsonrpc":"2.0","id":7,"result":{"a":1}\n', 7),     # cut short
]


class _Call:
    """What the exchange reads of the session's call: its id and deadline."""

    def __init__(self, rid: int) -> None:
        self.id = rid
        self.deadline = time.monotonic() + 30


def _outcome(items: Any, answered: list[tuple[Any, Any]]) -> tuple[Any, ...]:
    """What a read comes to for the session: this call's result taken by the fast path, or
    the frames and the answers the hook took (a ParseError compared by its words)."""
    if type(items) is dict:
        return ("result", items, tuple(answered))
    frames = None if items is None else [
        repr(item) if isinstance(item, Exception) else item for item in items]
    return ("frames", frames, tuple(answered))


def _reference(data: bytes, rid: int, buffered: bytes = b"") -> tuple[Any, ...]:
    """``receive`` + ``feed`` as the session has them: the answer hook takes this call's
    plain result (the session's ``_take_answer``, which then settles it). ``buffered``: a
    partial line an earlier read left in the decoder."""
    answered: list[tuple[Any, Any]] = []
    decoder = FrameDecoder()
    if buffered:
        assert decoder.feed(buffered) == []

    def answer(got: int, result: Any) -> bool:
        answered.append((got, result))
        return got == rid

    decoder.answer = answer
    items = decoder.feed(data)
    if items == [] and answered and answered[-1][0] == rid and type(answered[-1][1]) is dict \
            and len(answered) == 1:
        return ("result", answered[0][1], ())
    return _outcome(items, answered)


def _exchanged(data: bytes, rid: int, buffered: bytes = b"") -> tuple[Any, ...]:
    answered: list[tuple[Any, Any]] = []

    def answer(got: int, result: Any) -> bool:
        answered.append((got, result))
        return got == rid

    t = StdioTransport([sys.executable, "-S", "-c", MIRROR], name="mirror")
    t.start()
    try:
        t.route_answers(answer)
        if buffered:   # what an earlier read left: a line not yet complete
            assert t._decoder.feed(buffered) == []
        call = _Call(rid)
        role = Role()
        role.holder = role.sending = call
        got = t.exchange(data, call, role, 10.0)
        assert role.sending is None
        return _outcome(got, answered)
    finally:
        t.close()


@pytest.mark.parametrize(("data", "rid"), SHAPES,
                         ids=[f"{n}-{d[:40]!r}" for n, (d, _) in enumerate(SHAPES)])
def test_the_exchange_decides_as_the_decoders_usual_case(no_leaks: None, data: bytes,
                                                         rid: int) -> None:
    assert _exchanged(data, rid) == _reference(data, rid)


#: (a partial line already buffered, the read, this call's id): a read that alone would be
#: this call's usual answer, after an earlier read left part of a line in the decoder.
BUFFERED: list[tuple[bytes, bytes, int]] = [
    (b" ", _result("7") + b"\n", 7),                         # whitespace before the object
    (b'{"jsonrpc":"2.0","id":8,"result":{"t":"', _result("7") + b"\n", 7),  # broken line
    (b'{"jsonrpc":"2.0","id":8,', b'"result":{}}\n', 8),    # the rest of another answer
]


@pytest.mark.parametrize(("buffered", "data", "rid"), BUFFERED,
                         ids=[f"{n}-{b[:20]!r}" for n, (b, _, _) in enumerate(BUFFERED)])
def test_a_partial_line_buffered_before_the_read_goes_the_decoders_way(
        no_leaks: None, buffered: bytes, data: bytes, rid: int) -> None:
    """The usual case needs nothing buffered: a read that completes an earlier partial line
    is that line's end, not a line of its own, whatever it looks like alone."""
    got = _exchanged(data, rid, buffered)
    assert got == _reference(data, rid, buffered)
    if rid == 7:
        assert got[0] == "frames"   # never taken as this call's own answer


def test_the_usual_answer_takes_the_fast_path_and_the_others_do_not() -> None:
    """The shapes above are not all sent the general way by both copies alike: the usual
    answer is this call's result in either, and the decoder's usual case is what decides."""
    fast = [data for data, rid in SHAPES if _reference(data, rid)[0] == "result"]
    assert _result("7") + b"\n" in fast
    assert _result("7", r'{"t":"a\nb\"c"}') + b"\n" in fast
    assert _result("7", '{"t":"' + LONG + r'\n"}') + b"\n" in fast
    assert _result("7", r'{"t":"\u00e9"}') + b"\n" not in fast
    assert _result("7", "5") + b"\n" not in fast
    assert _result("0") + b"\n" not in fast


def test_a_taken_over_role_and_a_waited_write_read_nothing(no_leaks: None) -> None:
    t = StdioTransport([sys.executable, "-S", "-c", MIRROR], name="mirror")
    t.start()
    try:
        call = _Call(7)
        role = Role()
        role.sending = call   # the holder is someone else: taken over during the write
        assert t.exchange(_result("7") + b"\n", call, role, 1.0) is False
        assert role.sending is None
        # What was written came back, and is read by receive() as before.
        items = t.receive(5.0)
        assert items and items[0].result == {"a": 1}
        # The write lock held by another writer for a moment: the exchange waits for it
        # and then leaves the read to the session's loop.
        role.holder = role.sending = call
        t._write_lock.acquire()
        threading.Timer(0.2, t._write_lock.release).start()
        assert t.exchange(_result("7") + b"\n", call, role, 1.0) == []
        assert t.receive(5.0)[0].result == {"a": 1}   # type: ignore[index]
        assert not t._write_lock.locked() and not t._rx_lock.locked()
    finally:
        t.close()


def test_a_write_that_cannot_start_raises_as_send_bytes_until(no_leaks: None) -> None:
    t = StdioTransport([sys.executable, "-S", "-c", MIRROR], name="mirror")
    t.start()
    try:
        call = _Call(7)
        call.deadline = time.monotonic() + 0.1
        role = Role()
        role.holder = role.sending = call
        t._write_lock.acquire()
        try:
            with pytest.raises(WriteTimedOut) as raised:
                t.exchange(_result("7") + b"\n", call, role, 1.0)
            assert raised.value.written == 0
            assert role.sending is call   # the session's _write_failed clears it
        finally:
            t._write_lock.release()
    finally:
        t.close()
    call.deadline = math.inf
    with pytest.raises(TransportClosed) as closed:
        t.exchange(_result("7") + b"\n", call, role, 1.0)
    assert "closed" in str(closed.value)
