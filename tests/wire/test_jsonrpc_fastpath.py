"""The hot-path shortcuts of the wire layer agree exactly with its general path.

``parse()`` takes a fast path for the usual line (one object, no ``\\u`` escape), and the
session serialises requests with ``serialize_request()`` instead of building a ``Message``.
These differential tests hold both shortcuts to the general code: same messages, same ids
(byte for byte), same unknown members in the same order, same error codes.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from mcpsync import jsonrpc

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                 max_size=3),
    max_leaves=8,
)
_ids = (st.integers(-(2**64), 2**64) | st.text(max_size=6) | st.booleans() | st.none()
        | st.floats(allow_nan=False) | st.just(1.0))
_members = st.sampled_from(["jsonrpc", "id", "method", "params", "result", "error", "x-extra"])


@st.composite
def _objects(draw: st.DrawFn) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key in draw(st.lists(_members, max_size=6, unique=True)):
        if key == "jsonrpc":
            obj[key] = draw(st.sampled_from(["2.0", "1.0", 2]))
        elif key == "id":
            obj[key] = draw(_ids)
        elif key == "method":
            obj[key] = draw(st.sampled_from(["tools/call", "ping", ""]) | st.integers())
        elif key == "error":
            obj[key] = draw(st.fixed_dictionaries(
                {"code": st.integers(-33000, 0) | st.text(max_size=2),
                 "message": st.text(max_size=5) | st.integers()}) | _json)
        else:
            obj[key] = draw(_json)
    return obj


def _render(obj: dict[str, Any], style: int) -> str:
    if style == 0:
        return json.dumps(obj, separators=(",", ":"))
    if style == 1:
        return json.dumps(obj, ensure_ascii=False)
    return " " + json.dumps(obj, indent=1) + " "


def _outcome(parse: Any, text: str) -> tuple[Any, ...]:
    try:
        msg = parse(text)
    except jsonrpc.ParseError as exc:
        return ("error", exc.code, exc.id.raw if exc.id is not None else None)
    except ValueError:
        return ("value-error",)  # a NaN that cannot be written back; both paths must agree
    if isinstance(msg, jsonrpc.Batch):
        return ("batch", len(msg))
    return ("message", msg.id.raw if msg.id is not None else None, list(msg.extra),
            msg.to_bytes() if _writable(msg) else None)


def _writable(msg: jsonrpc.Message) -> bool:
    try:
        msg.to_bytes()
    except ValueError:
        return False
    return True


def _general_parse(text: str) -> Any:
    original = jsonrpc._parse_plain
    jsonrpc._parse_plain = lambda _text: None  # type: ignore[assignment]
    try:
        return jsonrpc.parse(text)
    finally:
        jsonrpc._parse_plain = original


@settings(max_examples=400, deadline=None)
@given(_objects(), st.integers(0, 2))
def test_fast_parse_agrees_with_the_general_path(obj: dict[str, Any], style: int) -> None:
    try:
        text = _render(obj, style)
    except ValueError:
        return
    assert _outcome(jsonrpc.parse, text) == _outcome(_general_parse, text)
    data = text.encode("utf-8", "surrogatepass")
    assert _outcome(jsonrpc.parse, data) == _outcome(_general_parse, data)


@pytest.mark.parametrize("line", [
    '{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"hi"}]}}',
    '{"jsonrpc":"2.0","id":"a\\u0062","result":{}}',
    '{"jsonrpc":"2.0","id":1,"result":{"t":"\\ud800"}}',
    '{"jsonrpc":"2.0","id":1,"result":NaN}',
    '{"jsonrpc":"2.0","id":true,"result":{}}',
    '{"jsonrpc":"2.0","id":1,"result":{}} trailing',
    '{"jsonrpc":"2.0","id":01,"result":{}}',
    '{"jsonrpc":"2.0","id":1,"id":2,"result":{}}',
    '{"jsonrpc":"2.0","id":0,"result":null,"z":1,"a":2}',
])
def test_known_lines_agree(line: str) -> None:
    assert _outcome(jsonrpc.parse, line) == _outcome(_general_parse, line)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 2**62), st.text(min_size=1, max_size=12),
       st.none() | st.dictionaries(st.text(max_size=5), _json, max_size=4))
def test_serialize_request_matches_serialize(rid: int, method: str,
                                             params: dict[str, Any] | None) -> None:
    try:
        expected: Any = jsonrpc.serialize(jsonrpc.request(rid, method, params))
    except ValueError:
        expected = ValueError
    try:
        got: Any = jsonrpc.serialize_request(rid, method, params)
    except ValueError:
        got = ValueError
    assert got == expected


_tool_params = st.one_of(
    st.fixed_dictionaries({"name": st.text(max_size=6), "arguments": _json}),
    st.fixed_dictionaries({"arguments": _json, "name": st.text(max_size=6)}),   # other order
    st.fixed_dictionaries({"name": _json, "arguments": _json}),
    st.dictionaries(st.sampled_from(["name", "arguments", "_meta"]), _json, max_size=3),
)


@settings(max_examples=400, deadline=None)
@given(st.integers(1, 2**62), _tool_params)
def test_serialize_request_of_a_tool_call_matches_serialize(rid: int,
                                                            params: dict[str, Any]) -> None:
    # tools/call with {"name", "arguments"} takes the cached name's part; byte for byte
    # (and error for error) the same as encoding the whole params.
    outcomes = []
    for _ in range(2):   # the second time the name's part comes from the cache
        try:
            expected: Any = jsonrpc.serialize(jsonrpc.request(rid, "tools/call", params))
        except (ValueError, TypeError) as exc:
            expected = type(exc)
        try:
            got: Any = jsonrpc.serialize_request(rid, "tools/call", params)
        except (ValueError, TypeError) as exc:
            got = type(exc)
        outcomes.append(got)
        assert got == expected
    assert outcomes[0] == outcomes[1]


def test_serialize_request_of_a_tool_call_known_cases() -> None:
    circular: dict[str, Any] = {}
    circular["self"] = circular
    for params in ({"name": "echo", "arguments": {"text": "hello"}},
                   {"name": "é\n\"\u2028", "arguments": {}},
                   {"name": "\ud800", "arguments": {}},
                   {"name": "n", "arguments": {"f": float("nan")}},
                   {"name": "n", "arguments": circular},
                   {"name": "n", "arguments": {"o": object()}}):
        outcomes = []
        for encode in (lambda p: jsonrpc.serialize_request(3, "tools/call", p),
                       lambda p: jsonrpc.serialize(jsonrpc.request(3, "tools/call", p))):
            try:
                outcomes.append(encode(params))
            except (ValueError, TypeError) as exc:
                outcomes.append((type(exc), str(exc)))
        assert outcomes[0] == outcomes[1], params


@settings(max_examples=400, deadline=None)
@given(st.integers(1, 2**62), st.one_of(st.text(max_size=6), _json), _json)
def test_serialize_tool_call_matches_serialize(rid: int, name: Any, arguments: Any) -> None:
    # call_tool's params, {"name", "arguments"} in that order: byte for byte (and error for
    # error) what encoding the whole params gives, whatever the two values are (a name that
    # is not a str, arguments that are not a dict: the general way).
    params = {"name": name, "arguments": arguments}
    outcomes = []
    for _ in range(2):   # the second time the name's part comes from the cache
        try:
            expected: Any = jsonrpc.serialize(jsonrpc.request(rid, "tools/call", params)) \
                + b"\n"   # _serialize_tool_call writes the whole line
        except (ValueError, TypeError) as exc:
            expected = type(exc)
        try:
            got: Any = jsonrpc._serialize_tool_call(rid, name, params)
        except (ValueError, TypeError) as exc:
            got = type(exc)
        outcomes.append(got)
        assert got == expected
    assert outcomes[0] == outcomes[1]


def test_serialize_tool_call_known_cases() -> None:
    circular: dict[str, Any] = {}
    circular["self"] = circular
    for params in ({"name": "echo", "arguments": {"text": "hello"}},
                   {"name": "\u00e9\n\"\u2028", "arguments": {}},
                   {"name": "\ud800", "arguments": {}},
                   {"name": "n", "arguments": {"t": "\udfff"}},
                   {"name": "n", "arguments": {"f": float("nan")}},
                   {"name": "n", "arguments": circular},
                   {"name": "n", "arguments": {"o": object()}},
                   {"name": "n", "arguments": [1, 2]},
                   {"name": 7, "arguments": {}}):
        outcomes = []
        for encode in (lambda p: jsonrpc._serialize_tool_call(3, p["name"], p),
                       lambda p: jsonrpc.serialize_request(3, "tools/call", p) + b"\n",
                       lambda p: jsonrpc.serialize(jsonrpc.request(3, "tools/call", p))
                       + b"\n"):
            try:
                outcomes.append(encode(params))
            except (ValueError, TypeError) as exc:
                outcomes.append((type(exc), str(exc)))
        assert outcomes[0] == outcomes[1] == outcomes[2], params


def _fed(data: bytes) -> Any:
    """What the frame decoder makes of ``data`` read as one complete line (its fast path)."""
    items = jsonrpc.FrameDecoder().feed(data + b"\n")
    assert len(items) == 1
    if isinstance(items[0], jsonrpc.ParseError):
        raise items[0]
    return items[0]


def _worded(parse: Any, data: bytes) -> tuple[Any, ...]:
    try:
        return _outcome(parse, data)  # type: ignore[no-any-return]
    finally:
        try:
            parse(data)
        except jsonrpc.ParseError as exc:
            message = str(exc)
        else:
            message = ""
        assert message == _message(data)


def _message(data: bytes) -> str:
    try:
        _general_parse(data)
    except jsonrpc.ParseError as exc:
        return str(exc)
    return ""


@settings(max_examples=400, deadline=None)
@given(_objects(), st.integers(0, 1))
def test_framed_line_agrees_with_the_general_path(obj: dict[str, Any], style: int) -> None:
    try:
        text = _render(obj, style)
    except ValueError:
        return
    data = text.encode("utf-8", "surrogatepass")
    assert _worded(_fed, data) == _outcome(_general_parse, data)


@pytest.mark.parametrize("data", [
    b'{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"hi"}]}}',
    b'{"jsonrpc":"2.0","id":7,"result":{"t":"\xc3\xa9"}}',
    b'{"jsonrpc":"2.0","id":7,"result":{"t":"\xff"}}',
    b'{"jsonrpc":"2.0","id":7,"result":{}}  \r',
    b'{"jsonrpc":"2.0","id":7,"result":{}}{}',
    b'{"jsonrpc":"2.0","id":0,"result":{}}',
    b'{"jsonrpc":"2.0","id":-0,"result":{}}',
    b'{"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"no"}}',
    b'{"jsonrpc":"2.0","id":7,"result":{},"error":{"code":1,"message":"x"}}',
    b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}',
    b'{"jsonrpc":"2.0","id":"s\\"q","method":"ping"}',
    b'{"jsonrpc":"2.0","id":7,"result":{"t":"\\ud800"}}',
    # Backslashes without a \u escape (the fast path's one-character test finds them,
    # then looks for "\u"), an escaped backslash before a "u", a \u escape of a BMP letter.
    b'{"jsonrpc":"2.0","id":7,"result":{"t":"a\\nb\\t\\/\\"c"}}',
    b'{"jsonrpc":"2.0","id":7,"result":{"t":"\\\\u0041"}}',
    b'{"jsonrpc":"2.0","id":7,"result":{"t":"\\u00e9"}}',
    b'{"jsonrpc":"2.0","id":7,"result":{"t":"\xc3\xa9\\n"}}',
    b'{"jsonrpc":"1.0","id":7,"result":{}}',
    # The line decoded without its newline: whitespace around members and after the
    # object, a UTF-8 error in the last byte (never taken for the end of the object).
    b'{ "jsonrpc" : "2.0" , "id" : 7 , "result" : {} }',
    b'{"jsonrpc":"2.0","id":7,"result":{}} ',
    b'{"jsonrpc":"2.0","id":7,"result":{}}\t',
    b'{"jsonrpc":"2.0","id":7,"result":{}}\xc3',
    b'{\xc3',
    b'{"jsonrpc":"2.0","id":"a","result":7}',
    b'{"jsonrpc":"2.0","id":7,"x":1}',
    b'{"jsonrpc":"2.0","id":7,"result":NaN}',
    b'{',
    b'{}',
])
def test_known_framed_lines_agree(data: bytes) -> None:
    assert _worded(_fed, data) == _outcome(_general_parse, data)


@pytest.mark.parametrize("data", [
    b'{"jsonrpc":"2.0",\n"id":7,"result":{}}\n',
    b'{"jsonrpc":"2.0","id":7,"result":{}}\n\n',
    b'{"jsonrpc":"2.0","id":7,"result":{}}\n{"jsonrpc":"2.0","id":8,"result":{}}\n',
    b'{"jsonrpc":"2.0","id":7,\r\n"result":{}}\n',
    b'{\n',
    b'{"a":1}',
    # One line that does not start with "{": not the usual read either.
    b'   \n',
    b' {"jsonrpc":"2.0","id":7,"result":{}}\n',
    b'\xef\xbb\xbf{"jsonrpc":"2.0","id":7,"result":{}}\n',
    b'[{"jsonrpc":"2.0","id":7,"result":{}}]\n',
    b'"{}"\n',
    b'7\n',
    b'null\n',
    b'\xff{}\n',
])
def test_a_read_whose_newline_is_not_its_only_one_is_split_as_before(data: bytes) -> None:
    """The usual read's test (its one newline is its last byte, its first byte a "{")
    declines these: each line decodes as the general path decodes it alone (a blank line to
    nothing), and a partial line is held."""
    decoder = jsonrpc.FrameDecoder()
    got = decoder.feed(data)
    lines = data.split(b"\n")
    rest = lines.pop()
    want: list[Any] = []
    for line in lines:
        if line.strip():
            try:
                want.append(_general_parse(line))
            except jsonrpc.ParseError as exc:
                want.append((type(exc), str(exc)))
    assert [(type(g), str(g)) if isinstance(g, jsonrpc.ParseError) else g for g in got] \
        == want
    assert decoder.buffered == len(rest)
