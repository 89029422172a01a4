"""Property tests of the wire layer.

- Any byte string gives a Message, a Batch or a ParseError, never another exception; the
  strategies aim at the hard cases (invalid UTF-8, NaN, surrogate escapes, deep nesting).
- Ids and unknown members survive a round trip byte for byte.
- Framing does not depend on how the bytes arrive: whole, byte by byte, in random chunks, or
  with the last line unterminated.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from hypothesis import HealthCheck, given, settings, strategies as st

from mcpsync.jsonrpc import (
    Batch,
    FrameDecoder,
    FrameReader,
    Message,
    ParseError,
    parse,
    serialize,
)

SETTINGS = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

# Text without surrogates: what a well-behaved peer can put in a JSON string.
safe_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False), safe_text)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(safe_text, inner, max_size=4)),
    max_leaves=12)

KNOWN = {"jsonrpc", "id", "method", "params", "result", "error"}
extra_names = safe_text.filter(lambda name: name not in KNOWN)


def _escape_char(ch: str, how: int) -> str:
    """Spell one character inside a JSON string in one of several legal ways."""
    code = ord(ch)
    short = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r",
             "\t": "\\t"}
    if how == 0 and ch in short:
        return short[ch]
    if how == 1 or code < 0x20 or ch in '"\\':
        if code > 0xFFFF:  # a valid surrogate pair
            code -= 0x10000
            return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04X}"
        return f"\\u{code:04x}" if how != 2 else f"\\u{code:04X}"
    if ch == "/" and how == 2:
        return "\\/"
    return ch


@st.composite
def raw_string_ids(draw: st.DrawFn) -> str:
    """A JSON string literal with an arbitrary mix of plain and escaped characters."""
    value = draw(safe_text)
    spelling = draw(st.lists(st.integers(0, 3), min_size=len(value), max_size=len(value)))
    return '"' + "".join(_escape_char(c, h) for c, h in zip(value, spelling, strict=True)) + '"'


raw_int_ids = st.one_of(st.integers(min_value=-(2**80), max_value=2**80).map(str),
                        st.just("-0"))
raw_ids = st.one_of(raw_int_ids, raw_string_ids())


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


@st.composite
def message_texts(draw: st.DrawFn) -> str:
    """A valid message, spelled compactly in canonical member order, with unknown members."""
    kind = draw(st.sampled_from(["request", "notification", "result", "error"]))
    parts = ['"jsonrpc":"2.0"']
    if kind != "notification":
        parts.append(f'"id":{draw(raw_ids)}')
    if kind in ("request", "notification"):
        parts.append(f'"method":{compact(draw(safe_text))}')
        if draw(st.booleans()):
            params = draw(st.one_of(st.dictionaries(safe_text, json_values, max_size=3),
                                    st.lists(json_values, max_size=3)))
            parts.append(f'"params":{compact(params)}')
    elif kind == "result":
        parts.append(f'"result":{compact(draw(json_values))}')
    else:
        body: dict[str, Any] = {"code": draw(st.integers(-40000, 40000)),
                                "message": draw(safe_text)}
        if draw(st.booleans()):
            body["data"] = draw(json_values)
        parts.append(f'"error":{compact(body)}')
    extra = draw(st.dictionaries(extra_names, json_values, max_size=3))
    parts.extend(f"{compact(k)}:{compact(v)}" for k, v in extra.items())
    return "{" + ",".join(parts) + "}"


# Hostile inputs: fragments glued together so that invalid UTF-8, NaN, surrogate escapes and
# deep nesting land in and around otherwise valid JSON-RPC.
hostile_fragments = st.one_of(
    st.sampled_from([
        b'{"jsonrpc":"2.0"', b',"id":', b'"method":"m"', b',"params":', b"NaN", b"Infinity",
        b"-Infinity", b'"\\ud800"', b'"\\uDFFF"', b'"\\ud83d\\ude00"', b'"\\ud83d"',
        b"\xed\xa0\x80", b"\xff", b"\xc3", b"\xef\xbb\xbf", b"{", b"}", b"[", b"]", b",", b":",
        b"1e400", b"-0",
        b"true", b"null", b'"', b"\\", b"\r", b" ", b'"result":', b'"error":{"code":1,',
        b'"message":"x"}', b"\x00", b"1.0", b"[" * 5000, b"]" * 5000, b"{\"a\":" * 3000,
    ]),
    st.binary(max_size=20),
)
hostile_bytes = st.one_of(
    st.binary(max_size=200),
    st.lists(hostile_fragments, max_size=12).map(b"".join),
    message_texts().map(str.encode),
    st.tuples(message_texts(), st.integers(0, 200), hostile_fragments).map(
        lambda t: t[0].encode()[:t[1]] + t[2] + t[0].encode()[t[1]:]),
)


def check_outcome(data: bytes, allow_batch: bool) -> Message | Batch | ParseError:
    try:
        outcome = parse(data, allow_batch=allow_batch)
    except ParseError as exc:
        assert exc.code in (-32700, -32600)
        return exc
    if isinstance(outcome, Batch):
        assert allow_batch and len(outcome) > 0
        assert all(isinstance(item, (Message, ParseError)) for item in outcome)
    else:
        assert isinstance(outcome, Message)
    return outcome


@SETTINGS
@given(hostile_bytes, st.booleans())
def test_any_bytes_give_a_message_a_batch_or_a_parse_error(data: bytes,
                                                           allow_batch: bool) -> None:
    check_outcome(data, allow_batch)


@SETTINGS
@given(st.lists(hostile_bytes, min_size=1, max_size=4))
def test_any_batch_shaped_bytes_are_handled(items: list[bytes]) -> None:
    check_outcome(b"[" + b",".join(items) + b"]", True)


@SETTINGS
@given(st.text(max_size=60), st.booleans())
def test_any_str_gives_a_message_a_batch_or_a_parse_error(text: str, allow_batch: bool) -> None:
    with contextlib.suppress(ParseError):
        parse(text, allow_batch=allow_batch)


@SETTINGS
@given(st.integers(1, 50_000), st.sampled_from([b"[", b'{"a":', b'{"jsonrpc":"2.0","params":[']))
def test_deep_nesting_never_escapes_as_another_exception(depth: int, opener: bytes) -> None:
    check_outcome(opener * depth, True)


@SETTINGS
@given(message_texts())
def test_valid_messages_round_trip_byte_for_byte(text: str) -> None:
    data = text.encode()
    msg = parse(data)
    assert isinstance(msg, Message)
    assert serialize(msg) == data
    assert parse(serialize(msg)) == msg


@SETTINGS
@given(raw_ids, st.dictionaries(extra_names, json_values, max_size=4), st.booleans())
def test_ids_and_unknown_members_survive_a_round_trip(raw: str, extra: dict[str, Any],
                                                      request: bool) -> None:
    extra_text = "".join(f",{compact(k)}:{compact(v)}" for k, v in extra.items())
    body = '"method":"m"' if request else '"result":{"ok":true}'
    # Extra members first and whitespace around the id: the id is still found and kept.
    line = f'{{"jsonrpc":"2.0"{extra_text}, "id" : {raw} ,{body}}}'.encode()
    msg = parse(line)
    assert isinstance(msg, Message) and msg.id is not None
    assert msg.id.raw == raw
    assert msg.id.value == json.loads(raw)
    assert list(msg.extra) == list(extra)
    frame = serialize(msg)
    assert f'"id":{raw},'.encode() in frame
    assert frame.endswith((extra_text + "}").encode())


def outcomes(items: list[Any]) -> list[Any]:
    """Comparable form of decoded frames: messages as themselves, errors by code and quote."""
    out: list[Any] = []
    for item in items:
        if isinstance(item, ParseError):
            out.append(("error", item.code, item.excerpt, item.id))
        elif isinstance(item, Batch):
            out.append(("batch", outcomes(list(item))))
        else:
            out.append(item)
    return out


line_strategy = st.one_of(
    message_texts(),
    st.sampled_from(["", "  ", "\t\r", "garbage", "[1]", "{\"jsonrpc\":\"2.0\"}", "NaN",
                     '"\\ud800"', "\ufeff{\"jsonrpc\":\"2.0\",\"method\":\"bom\"}"]),
    st.text(max_size=30).filter(lambda t: "\n" not in t),
).map(lambda t: t.encode("utf-8", "surrogatepass"))


@st.composite
def streams(draw: st.DrawFn) -> tuple[list[bytes], bool]:
    lines = draw(st.lists(line_strategy, min_size=1, max_size=8))
    crlf = draw(st.booleans())
    return [line + b"\r" if crlf and line else line for line in lines], draw(st.booleans())


class ChunkedStream:
    def __init__(self, data: bytes, sizes: list[int]) -> None:
        self._data = data
        self._sizes = sizes or [1]
        self._pos = 0
        self._n = 0

    def read1(self, size: int = -1, /) -> bytes:
        step = self._sizes[self._n % len(self._sizes)]
        self._n += 1
        chunk = self._data[self._pos:self._pos + min(step, size)]
        self._pos += len(chunk)
        return chunk


def via_decoder(data: bytes, sizes: list[int], allow_batch: bool) -> list[Any]:
    decoder = FrameDecoder(allow_batch=allow_batch)
    out: list[Any] = []
    pos = 0
    k = 0
    while pos < len(data):
        step = sizes[k % len(sizes)] if sizes else len(data)
        out.extend(decoder.feed(data[pos:pos + step]))
        pos += step
        k += 1
    out.extend(decoder.finish())
    return outcomes(out)


def via_reader(data: bytes, sizes: list[int], allow_batch: bool) -> list[Any]:
    reader = FrameReader(ChunkedStream(data, sizes), allow_batch=allow_batch)
    out: list[Any] = []
    while True:
        item: Any
        try:
            item = reader.read()
        except ParseError as exc:
            out.append(exc)
            continue
        if item is None:
            return outcomes(out)
        out.append(item)


@SETTINGS
@given(streams(), st.lists(st.integers(1, 64), min_size=1, max_size=5))
def test_framing_does_not_depend_on_how_bytes_arrive(stream: tuple[list[bytes], bool],
                                                     sizes: list[int]) -> None:
    lines, allow_batch = stream
    data = b"".join(line + b"\n" for line in lines)
    whole = via_decoder(data, [], allow_batch)
    assert via_decoder(data, [1], allow_batch) == whole
    assert via_decoder(data, sizes, allow_batch) == whole
    assert via_reader(data, [len(data) or 1], allow_batch) == whole
    assert via_reader(data, [1], allow_batch) == whole
    assert via_reader(data, sizes, allow_batch) == whole
    # The same input with its last line unterminated gives the same messages.
    partial = data[:-1]
    assert via_decoder(partial, [], allow_batch) == whole
    assert via_decoder(partial, [1], allow_batch) == whole
    assert via_reader(partial, [1], allow_batch) == whole
    assert via_reader(partial, sizes, allow_batch) == whole
    # And each line decodes as parse() would decode it alone.
    expected: list[Any] = []
    for line in lines:
        if not line.strip(b" \t\r"):
            continue
        try:
            expected.append(parse(line, allow_batch=allow_batch))
        except ParseError as exc:
            expected.append(exc)
    assert whole == outcomes(expected)
