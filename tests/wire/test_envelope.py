"""The tolerant envelope: kinds, raw spans, byte-exact re-emission and one-member splices."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from mcpsync._codes import INVALID_REQUEST, PARSE_ERROR
from mcpsync._envelope import KEEP_DECODED, EnvelopeError, decode_object, parse_envelope

ODD = ('{"result":{"n":1.50,"big":1E2,"neg":-0,"s":"caf\\u00e9","z":1,"a":2},'
       '"x-future":{"k":[1.0,2E-3]},"id":"r\\u0031","jsonrpc":"2.0"}')


def test_odd_frame_is_kept_byte_for_byte() -> None:
    env = parse_envelope(ODD.encode())
    assert env.kind == "response"
    assert env.id == '"r\\u0031"'
    assert env.raw("result") == '{"n":1.50,"big":1E2,"neg":-0,"s":"caf\\u00e9","z":1,"a":2}'
    assert env.raw("x-future") == '{"k":[1.0,2E-3]}'
    assert env.members == ["result", "x-future", "id", "jsonrpc"]
    assert env.to_bytes() == ODD.encode()


def test_replacing_the_id_changes_only_the_id() -> None:
    env = parse_envelope(ODD.encode())
    moved = env.replace("id", "17")
    assert moved.id == "17"
    assert moved.to_bytes() == ODD.replace('"r\\u0031"', "17").encode()
    assert moved.raw("x-future") == '{"k":[1.0,2E-3]}'
    assert env.to_bytes() == ODD.encode()   # the original is a value: unchanged


def test_replacing_params_keeps_the_rest_and_whitespace() -> None:
    text = '{ "jsonrpc" : "2.0" , "id" : 7 , "method" : "tools/call" , "params" : {"a": 1} }'
    env = parse_envelope(text)
    assert (env.kind, env.id, env.method) == ("request", "7", "tools/call")
    out = env.replace("params", '{"b":2.50}').replace("id", '"g-1"')
    assert out.text == ('{ "jsonrpc" : "2.0" , "id" : "g-1" , "method" : "tools/call" , '
                        '"params" : {"b":2.50} }')


def test_adding_a_member_appends_it() -> None:
    env = parse_envelope('{"jsonrpc":"2.0","method":"ping"}')
    assert env.kind == "notification"
    assert env.replace("id", "3").text == '{"jsonrpc":"2.0","method":"ping","id":3}'
    assert parse_envelope('{"result":1}').replace("id", "1").text == '{"result":1,"id":1}'


@pytest.mark.parametrize(("text", "kind", "rid"), [
    ('{"jsonrpc":"1.0","id":1,"method":"m"}', "request", "1"),        # jsonrpc passes
    ('{"id":1.5,"method":"m"}', "request", "1.5"),                    # any JSON id, raw
    ('{"id":[1,{"a":2}],"method":"m"}', "request", '[1,{"a":2}]'),
    ('{"id":null,"method":"m"}', "notification", "null"),
    ('{"method":"notifications/x","params":[]}', "notification", None),
    ('{"id":true,"error":{"code":1,"message":"m"}}', "error", "true"),
    ('{"id":2,"result":null}', "response", "2"),
    ('\ufeff {"id":2,"result":{}} ', "response", "2"),
])
def test_kinds_and_raw_ids(text: str, kind: str, rid: str | None) -> None:
    env = parse_envelope(text)
    assert (env.kind, env.id) == (kind, rid)
    assert env.to_bytes() == text.encode()


@pytest.mark.parametrize(("text", "code"), [
    ("{", PARSE_ERROR), ('{"id":1,}', PARSE_ERROR), ("nope", PARSE_ERROR),
    ('{"id":1,"method":"m"} x', PARSE_ERROR), (b'{"id":"\xff"}', PARSE_ERROR),
    ('{"id":1}', INVALID_REQUEST), ('{"method":3}', INVALID_REQUEST),
    ("[1,2]", INVALID_REQUEST), ('{"a":01}', PARSE_ERROR),
])
def test_refusals(text: str | bytes, code: int) -> None:
    with pytest.raises(EnvelopeError) as info:
        parse_envelope(text)
    assert info.value.code == code


def test_duplicate_keys_keep_the_last() -> None:
    env = parse_envelope('{"id":1,"method":"a","id":2}')
    assert env.id == "2"
    assert env.members == ["method", "id"]


# --- properties --------------------------------------------------------------------------

_number_text = st.one_of(
    st.integers().map(str),
    st.sampled_from(["1.50", "1E2", "-0", "0.0", "1e-7", "-12.500E+3", "2E308"]),
)
_string_text = st.text().map(lambda s: json.dumps(s, ensure_ascii=st_ascii_flag(s)))


def st_ascii_flag(s: str) -> bool:
    return len(s) % 2 == 0   # half the strings escaped (\u00e9), half raw UTF-8


_scalar = st.one_of(_number_text, _string_text, st.sampled_from(["true", "false", "null"]))
_value = st.recursive(
    _scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(lambda xs: "[" + ",".join(xs) + "]"),
        st.lists(st.tuples(_string_text, inner), max_size=4).map(
            lambda kv: "{" + ",".join(f"{k}:{v}" for k, v in kv) + "}")),
    max_leaves=12)
_ws = st.sampled_from(["", " ", "\n", "\t ", "\r\n"])
_names = st.text(min_size=1, max_size=8).filter(
    lambda n: n not in ("id", "method", "result", "error", "params", "jsonrpc"))


Frame = tuple[str, dict[str, str], dict[str, int]]


@st.composite
def _frames(draw: st.DrawFn) -> Frame:
    members: dict[str, str] = {"method": json.dumps(draw(st.text(max_size=10))),
                               "id": draw(_value), "params": draw(_value)}
    for name in draw(st.lists(_names, max_size=3, unique=True)):
        members[name] = draw(_value)
    keys = draw(st.permutations(list(members)))
    text = "{"
    starts: dict[str, int] = {}
    for n, k in enumerate(keys):
        text += ("," if n else "") + f"{draw(_ws)}{json.dumps(k)}{draw(_ws)}:{draw(_ws)}"
        starts[k] = len(text)
        text += members[k] + draw(_ws)
    return text + "}", {k: members[k] for k in keys}, starts


@settings(max_examples=200, deadline=None)
@given(_frames())
def test_any_frame_round_trips_and_keeps_each_member(frame: Frame) -> None:
    text, members, _ = frame
    env = parse_envelope(text.encode())
    assert env.to_bytes() == text.encode()
    assert env.members == list(members)
    for key, value in members.items():
        assert env.raw(key) == value
    assert env.method == json.loads(members["method"])


@settings(max_examples=200, deadline=None)
@given(_frames(), _value)
def test_replacing_one_member_changes_only_it(frame: Frame,
                                              new: str) -> None:
    text, members, starts = frame
    env = parse_envelope(text)
    for key in ("id", "params"):
        out = env.replace(key, new)
        start = starts[key]
        assert out.text == text[:start] + new + text[start + len(members[key]):]
        assert parse_envelope(out.text).raw(key) == new
        for other, value in members.items():
            if other != key:
                assert out.raw(other) == value


def test_id_keys_match_calls_as_json_does() -> None:
    assert parse_envelope('{"id":"a\\u0031","method":"m"}').id_key == ("str", "a1")
    assert parse_envelope('{"id":"a1","result":{}}').id_key == ("str", "a1")
    assert parse_envelope('{"id":1,"result":{}}').id_key == ("int", 1)
    assert parse_envelope('{"id":"1","result":{}}').id_key == ("str", "1")
    assert parse_envelope('{"id":1.0,"result":{}}').id_key == ("raw", "1.0")
    assert parse_envelope('{"id":null,"error":{}}').id_key == ("raw", "null")
    assert parse_envelope('{"method":"m"}').id_key is None
    assert parse_envelope('{"id":1,"method":"m"}').replace("id", '"x"').id_key == ("str", "x")


def test_a_small_frame_keeps_what_its_parse_decoded_and_a_large_one_does_not() -> None:
    small = parse_envelope(b'{"jsonrpc":"2.0","id":1,"method":"tools/call",'
                           b'"params":{"name":"echo","arguments":{"n":1.50}}}')
    assert small.decoded() == {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                               "params": {"name": "echo", "arguments": {"n": 1.5}}}
    assert small.replace("id", "2").decoded() is None   # a copy's values would be stale
    text = '{"jsonrpc":"2.0","id":1,"result":{"text":"%s"}}' % ("x" * KEEP_DECODED)
    assert parse_envelope(text).decoded() is None


# --- the quick look of the gateway's pass-through -----------------------------------------

@pytest.mark.parametrize("text", [
    b"{", b'{"id":1,}', b"nope", b'{"id":1,"method":"m"} x', b'{"id":"\xff"}', b"[1,2]",
    b'{"a":01}', b" {}", b"{} ", b"\xef\xbb\xbf{}", b"", b"1", b'"s"',
])
def test_the_quick_look_gives_up_on_what_is_not_one_bare_object(text: bytes) -> None:
    """None: the full parse decides (and names the error, where there is one)."""
    assert decode_object(text) is None


@settings(max_examples=200, deadline=None)
@given(_frames(), st.sampled_from(["", " ", "x", "}", "\ufeff"]))
def test_the_quick_look_agrees_with_the_parse(frame: Frame, extra: str) -> None:
    """On any frame the quick look either gives up or decodes what the parse decodes, and
    gives up on a frame the parse takes only when space or a byte-order mark surrounds it."""
    text = frame[0]
    for candidate in (text, text + extra, extra + text):
        data = candidate.encode("utf-8", "surrogatepass")
        quick = decode_object(data)
        try:
            env = parse_envelope(data)
        except EnvelopeError:
            assert quick is None
            continue
        if quick is not None:
            assert quick == json.loads(candidate)
            assert env.decoded() in (None, quick)   # None: a frame too large to keep it
        else:   # only a frame with space or a byte-order mark around it
            assert candidate != candidate.strip(" \t\r\n\ufeff")
