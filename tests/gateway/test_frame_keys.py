"""The pass-through's frame check, both ways: msgspec's (``mcpsync[fast]``) and the standard
library's. msgspec's may say *yes* only where the standard library's says yes with the same
key; the full path decides every *no*."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import msgspec  # a test dependency: the fast check must be the one tested here
import pytest
from hypothesis import given, settings, strategies as st

from mcpsync.gateway._frame_keys import _msgspec_checks, checks, stdlib_checks

FAST = _msgspec_checks()
assert FAST is not None, "msgspec is installed with the test extras"
STD = stdlib_checks()

CALL = b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo"}}'
ANSWER = b'{"jsonrpc":"2.0","id":"a7","result":{"content":[],"isError":false}}'

# (line, its call key, its answer key), the same for both checks.
AGREED: list[tuple[bytes, Any, Any]] = [
    (CALL, ("int", 7), None),
    (CALL + b"\n", ("int", 7), None),
    (ANSWER, None, ("str", "a7")),
    (ANSWER + b"\n", None, ("str", "a7")),
    (b'{"jsonrpc":"2.0","id":-3,"error":{"code":1,"message":"m"}}', None, ("int", -3)),
    (b'{"id":"\\u00e9","method":"x"}', ("str", "\u00e9"), None),
    (b'{"id":123456789012345678901234567890,"method":"x"}',
     ("int", 123456789012345678901234567890), None),
    (b'{"id":1,"method":"x","p":"\xc3\xa9"}', ("int", 1), None),   # UTF-8, not ASCII
    # Above 2**64 (msgspec 0.18 decoded some of these wrongly: the extra asks for 0.19).
    (b'{"id":19446744073709551617,"method":"x"}', ("int", 19446744073709551617), None),
    (b'{"id":19999999999999999999,"result":{}}', None, ("int", 19999999999999999999)),
    (b'{"id":1,"method":"y","method":"x"}', ("int", 1), None),     # the last one counts
    # What neither says yes to.
    (b'{"id":1,"method":"initialize"}', None, None),
    (b'{"method":"notifications/initialized"}', None, None),
    (b'{"id":1.0,"method":"x"}', None, None),
    (b'{"id":true,"method":"x"}', None, None),
    (b'{"id":null,"result":{}}', None, None),
    (b'{"id":1,"method":"x","result":{}}', ("int", 1), None),      # a method: a call
    (b'{"id":1}', None, None),
    (b'{"id":1,"method":"x","p":"\xff"}', None, None),               # not UTF-8
    (b'{"id":"\x80","method":"ping"}', None, None),                    # in a member read
    (b'{"id":1,"method":"\xc3"}', None, None),
    (b'{"id":1,"result":{},"\xff":0}', None, None),
    (b' {"id":1,"method":"x"}', None, None),                        # whitespace around
    (b'{"id":1,"method":"x"} ', None, None),
    (b'{"id":1,"method":"x"}\r\n', None, None),
    (b'{"id":1,"method":"x"}\n\n', None, None),
    (b'\xef\xbb\xbf{"id":1,"method":"x"}', None, None),
    (b'{"id":1,"method":"x",}', None, None),
    (b'{"id":1,"method":"x"}{"id":2,"method":"x"}', None, None),
    (b'[{"id":1,"method":"x"}]', None, None),
    (b'{"id":1,"method":"x","p":' + b"[" * 5000 + b"]" * 5000 + b"}", None, None),
    (b"", None, None),
    (b"\n", None, None),
]


@pytest.mark.parametrize(("line", "call", "answer"), AGREED)
@pytest.mark.parametrize("way", ["msgspec", "stdlib"])
def test_each_check_gives_the_key_or_none(line: bytes, call: Any, answer: Any,
                                          way: str) -> None:
    call_key, answer_key = FAST if way == "msgspec" else STD
    assert call_key(line) == call
    assert answer_key(line) == answer
    assert call_key(bytearray(line)) == call   # the upstream's reads are bytearrays
    assert answer_key(bytearray(line)) == answer


def test_where_only_the_standard_library_says_yes_msgspec_leaves_it_to_the_full_path() -> None:
    for line in (b'{"id":1,"method":"x","p":NaN}', b'{"id":1,"method":"x","p":"\\ud800"}',
                 b'{"id":1,"method":1,"method":"x"}'):
        assert STD[0](line) == ("int", 1)
        assert FAST[0](line) is None


def test_checks_are_msgspecs_when_it_is_installed_and_the_standard_librarys_without() -> None:
    assert checks()[0].__qualname__ == "_msgspec_checks.<locals>.call_key"
    code = ("import sys; sys.modules['msgspec'] = None; "
            "from mcpsync.gateway._frame_keys import checks; "
            "print(checks()[0].__qualname__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    assert out.strip() == "_std_call_key"


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                max_size=3),
    max_leaves=8)


@st.composite
def _frames(draw: st.DrawFn) -> bytes:
    """A frame-like JSON object (a call or an answer, odd ids and members among them),
    written with or without spaces and ASCII escapes, then maybe broken: a byte cut out,
    replaced or put in."""
    obj: dict[str, Any] = {"jsonrpc": "2.0"}
    obj["id"] = draw(st.integers() | st.text(max_size=6) | _JSON)
    if draw(st.booleans()):
        obj["method"] = draw(st.sampled_from(["tools/call", "ping", "initialize"])
                             | st.text(max_size=6) | _JSON)
    else:
        obj[draw(st.sampled_from(["result", "error", "results"]))] = draw(_JSON)
    for key, value in draw(st.dictionaries(st.text(max_size=5), _JSON, max_size=2)).items():
        obj.setdefault(key, value)
    data = json.dumps(obj, ensure_ascii=draw(st.booleans()),
                      separators=draw(st.sampled_from([(",", ":"), (", ", ": ")]))).encode()
    if draw(st.booleans()):
        at = draw(st.integers(0, len(data)))
        how = draw(st.sampled_from(["cut", "replace", "insert"]))
        byte = bytes([draw(st.integers(0, 255))])
        data = (data[:at] + byte + data[at:] if how == "insert"
                else data[:at] + (byte if how == "replace" else b"") + data[at + 1:])
    return data + (b"\n" if draw(st.booleans()) else b"")


@settings(max_examples=2000, deadline=None)
@given(_frames())
def test_msgspec_says_yes_only_where_the_standard_library_says_yes_with_the_same_key(
        line: bytes) -> None:
    for fast, std in zip(FAST, STD, strict=True):
        key = fast(line)
        if key is not None:
            assert std(line) == key
            assert type(std(line)[1]) is type(key[1])


@settings(max_examples=500, deadline=None)
@given(st.integers() | st.text(max_size=10), st.text(max_size=20), _JSON)
def test_a_well_formed_call_and_answer_take_the_fast_way_in_both(
        rid: int | str, method: str, payload: Any) -> None:
    """What real peers send is not left to the full path by msgspec alone."""
    call = json.dumps({"jsonrpc": "2.0", "id": rid, "method": method or "m",
                       "params": {"p": payload}}, separators=(",", ":")).encode()
    answer = json.dumps({"jsonrpc": "2.0", "id": rid, "result": {"p": payload}}).encode()
    kind = "int" if isinstance(rid, int) else "str"
    if (method or "m") not in ("initialize", "notifications/initialized"):
        assert FAST[0](call) == STD[0](call) == (kind, rid)
    assert FAST[1](answer) == STD[1](answer) == (kind, rid)


def test_msgspec_is_the_version_the_extra_asks_for() -> None:
    major, minor = (int(part) for part in msgspec.__version__.split(".")[:2])
    assert (major, minor) >= (0, 19)
