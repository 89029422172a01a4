"""Unit tests of the JSON-RPC message model, parsing and serialisation.

Framing (reader, writer, decoder) is in test_framing.py; generated inputs are in
test_jsonrpc_properties.py.
"""

from __future__ import annotations

import ast
import inspect
import json
import pickle
import sys
import threading

import pytest
from helpers import DOCS

from mcpsync import jsonrpc
from mcpsync.errors import MCPError
from mcpsync.jsonrpc import (
    MISSING,
    Batch,
    Message,
    ParseError,
    RequestId,
    StreamError,
    error,
    notification,
    parse,
    request,
    result,
    serialize,
)


def parse_error(data: bytes | str, **kwargs: bool) -> ParseError:
    with pytest.raises(ParseError) as info:
        parse(data, **kwargs)
    return info.value


# --- numbers -------------------------------------------------------------------------------


def test_frame_limit_is_32_mib() -> None:
    assert jsonrpc.MAX_FRAME_BYTES == 33_554_432
    assert jsonrpc.FrameDecoder().max_frame_bytes == 33_554_432


def test_error_excerpt_is_the_first_200_bytes() -> None:
    line = b'{"jsonrpc":"2.0","method":' + b"x" * 1000
    exc = parse_error(line)
    assert exc.excerpt == line[:200].decode()
    assert repr(exc.excerpt) in str(exc)
    assert "x" * 201 not in str(exc)


# --- the message model ---------------------------------------------------------------------


def test_module_does_no_io_and_uses_no_clock_or_threads() -> None:
    tree = ast.parse(inspect.getsource(jsonrpc))
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
    forbidden = {"os", "io", "socket", "select", "time", "datetime", "subprocess", "asyncio",
                 "concurrent.futures", "selectors"}
    assert not imported & forbidden
    # threading is imported for the writer's lock only: nothing here starts a thread.
    source = inspect.getsource(jsonrpc)
    assert "Thread(" not in source and "time." not in source


def test_parse_starts_no_thread() -> None:
    before = threading.active_count()
    parse(b'{"jsonrpc":"2.0","id":1,"method":"ping"}')
    assert threading.active_count() == before


def test_constructors_and_kinds() -> None:
    req = request(1, "tools/call", {"name": "echo"})
    assert (req.is_request, req.is_notification, req.is_response, req.is_error) == (
        True, False, False, False)
    assert req.id == RequestId("1", 1) and req.result is MISSING and req.error is None
    note = notification("notifications/initialized")
    assert (note.is_request, note.is_notification, note.is_response) == (False, True, False)
    assert note.id is None and note.params is None
    res = result("a", None)
    assert res.is_response and not res.is_error and res.result is None
    assert res.id == RequestId('"a"', "a")
    err = error(7, jsonrpc.METHOD_NOT_FOUND, "no such method", {"method": "x"})
    assert err.is_response and err.is_error
    assert err.error == {"code": -32601, "message": "no such method", "data": {"method": "x"}}
    assert "data" not in error(7, -32603, "boom").error  # type: ignore[operator]


def test_constructors_check_their_arguments() -> None:
    with pytest.raises(TypeError):
        request(True, "m")
    with pytest.raises(TypeError):
        request(1.0, "m")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        request(1, 5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        notification("m", "not params")
    with pytest.raises(ValueError):
        request(1, "m", extra={"id": 2})
    with pytest.raises(TypeError):
        error(1, "-32600", "x")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        error(1, -32600, None)  # type: ignore[arg-type]


def test_unknown_members_kept_in_order_and_written_after_known_ones() -> None:
    line = (b'{"zeta":1,"jsonrpc":"2.0","alpha":{"deep":[1,2]},"method":"m",'
            b'"id":3,"params":{"_meta":{"x":1},"keep":true},"mid":null}')
    msg = parse(line)
    assert isinstance(msg, Message)
    assert list(msg.extra) == ["zeta", "alpha", "mid"]
    assert msg.params == {"_meta": {"x": 1}, "keep": True}
    assert serialize(msg) == (b'{"jsonrpc":"2.0","id":3,"method":"m",'
                              b'"params":{"_meta":{"x":1},"keep":true},'
                              b'"zeta":1,"alpha":{"deep":[1,2]},"mid":null}')


def test_members_inside_result_and_error_are_never_filtered() -> None:
    line = (b'{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"m",'
            b'"data":[1],"newField":{"a":1}}}')
    msg = parse(line)
    assert isinstance(msg, Message)
    assert msg.error == {"code": -32000, "message": "m", "data": [1], "newField": {"a": 1}}
    assert serialize(msg) == line
    line = b'{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","future":[{}]}}'
    assert serialize(parse(line)) == line  # type: ignore[arg-type]


def test_serialised_member_order() -> None:
    msg = Message(id=RequestId.of(1), method="m", params=[1], result=2,
                  error={"code": 1, "message": "e"}, extra={"x": 0})
    assert serialize(msg) == (b'{"jsonrpc":"2.0","id":1,"method":"m","params":[1],"result":2,'
                              b'"error":{"code":1,"message":"e"},"x":0}')
    shuffled = b'{"result":{"a":1},"id":9,"jsonrpc":"2.0"}'
    assert serialize(parse(shuffled)) == b'{"jsonrpc":"2.0","id":9,"result":{"a":1}}'  # type: ignore[arg-type]


@pytest.mark.parametrize("bad_id", ["true", "false", "1.0", "1e2", "1E2", "-1.5", "{}", "[]",
                                    '{"a":1}', "[1]"])
def test_non_ids_make_a_request_invalid(bad_id: str) -> None:
    exc = parse_error(f'{{"jsonrpc":"2.0","id":{bad_id},"method":"m"}}')
    assert exc.code == jsonrpc.INVALID_REQUEST
    assert exc.id is None


@pytest.mark.parametrize("raw", ["0", "-0", "7", "-12", "123456789012345678901234567890",
                                 '""', '"1"', '"a\\u0062"', '"\\u00e9"', '"é"', '"\\ud83d\\ude00"',
                                 '"\\"q\\""', '"a\\/b"'])
def test_ids_are_written_back_byte_for_byte(raw: str) -> None:
    line = f'{{"jsonrpc":"2.0","id":{raw},"method":"m"}}'.encode()
    msg = parse(line)
    assert isinstance(msg, Message)
    assert msg.id is not None and msg.id.raw == raw
    assert serialize(msg) == line
    answer = result(msg.id, {})
    assert serialize(answer) == f'{{"jsonrpc":"2.0","id":{raw},"result":{{}}}}'.encode()


def test_id_raw_is_found_past_escapes_and_nested_ids() -> None:
    line = (b'{"jsonrpc":"2.0","params":{"id":"inner","text":"a\\nb"},'
            b' "method" : "m" , "\\u0069d" : "x\\u0079" }')
    msg = parse(line)
    assert isinstance(msg, Message)
    assert msg.id == RequestId('"x\\u0079"', "xy")


def test_id_value_and_decoded_escapes() -> None:
    msg = parse(b'{"jsonrpc":"2.0","id":"a\\u0062","method":"m"}')
    assert isinstance(msg, Message) and msg.id is not None
    assert msg.id.value == "ab" and msg.id.key == ("str", "ab")


def test_correlation_keys_keep_kinds_apart() -> None:
    one = RequestId.of(1)
    text_one = RequestId.of("1")
    assert one.key == ("int", 1) and text_one.key == ("str", "1")
    assert one.key != text_one.key  # type: ignore[comparison-overlap]
    assert one.key != ("bool", True)
    table = {one.key: "int", text_one.key: "str"}
    assert len(table) == 2
    with pytest.raises(TypeError):
        RequestId.of(True)
    with pytest.raises(ValueError):
        RequestId.of("\ud800")
    # An escaped and a plain spelling are the same id for correlation.
    assert RequestId('"a\\u0062"', "ab").key == RequestId.of("ab").key


def test_request_id_is_immutable_and_hashable() -> None:
    rid = RequestId.of("x")
    with pytest.raises(AttributeError):
        rid.raw = "y"  # type: ignore[misc]
    assert {rid: 1}[RequestId('"x"', "x")] == 1
    assert pickle.loads(pickle.dumps(rid)) == rid
    assert str(rid) == '"x"'


@pytest.mark.parametrize("line", [b'{"jsonrpc":"2.0","method":"notifications/x"}',
                                  b'{"jsonrpc":"2.0","method":"notifications/x","id":null}'])
def test_absent_or_null_id_with_method_is_a_notification(line: bytes) -> None:
    msg = parse(line)
    assert isinstance(msg, Message)
    assert msg.is_notification and msg.id is None
    assert serialize(msg) == b'{"jsonrpc":"2.0","method":"notifications/x"}'


@pytest.mark.parametrize("line", [b'{"jsonrpc":"2.0","error":{"code":-32700,"message":"bad"}}',
                                  b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,'
                                  b'"message":"bad"}}'])
def test_error_without_id_parses_as_uncorrelated(line: bytes) -> None:
    msg = parse(line)
    assert isinstance(msg, Message)
    assert msg.is_error and msg.id is None
    assert msg.error == {"code": -32700, "message": "bad"}


def test_error_code_constants() -> None:
    assert (jsonrpc.PARSE_ERROR, jsonrpc.INVALID_REQUEST, jsonrpc.METHOD_NOT_FOUND,
            jsonrpc.INVALID_PARAMS, jsonrpc.INTERNAL_ERROR) == (
        -32700, -32600, -32601, -32602, -32603)
    assert jsonrpc.RESOURCE_NOT_FOUND == -32002
    assert jsonrpc.URL_ELICITATION_REQUIRED == -32042
    assert jsonrpc.HEADER_MISMATCH == -32020
    assert jsonrpc.MISSING_CLIENT_CAPABILITY == -32021
    assert jsonrpc.UNSUPPORTED_PROTOCOL_VERSION == -32022
    assert (jsonrpc.DENIED_BY_POLICY, jsonrpc.APPROVAL_REJECTED, jsonrpc.BUDGET_EXCEEDED) == (
        -32010, -32011, -32012)


def test_gateway_codes_get_no_meaning_on_receipt() -> None:
    msg = parse(b'{"jsonrpc":"2.0","id":1,"error":{"code":-32010,"message":"denied"}}')
    assert isinstance(msg, Message)
    assert type(msg) is Message and msg.error == {"code": -32010, "message": "denied"}


# --- parsing -------------------------------------------------------------------------------


def test_parse_error_is_an_mcp_error_and_stream_error_is_distinct() -> None:
    assert issubclass(ParseError, MCPError) and issubclass(StreamError, MCPError)
    assert not issubclass(StreamError, ParseError) and not issubclass(ParseError, StreamError)


@pytest.mark.parametrize("data", [b"\xff", b'{"jsonrpc":"2.0","method":"\xc3"}',
                                  b'{"jsonrpc":"2.0","method":"\xed\xa0\x80"}',  # CESU surrogate
                                  b"\xc0\xaf", b'"\xf4\x90\x80\x80"'])
def test_invalid_utf8_is_a_parse_error(data: bytes) -> None:
    assert parse_error(data).code == jsonrpc.PARSE_ERROR


def test_utf16_is_not_guessed() -> None:
    text = '{"jsonrpc":"2.0","method":"m"}'
    assert json.loads(text.encode("utf-16"))  # what json.loads(bytes) would let through
    assert parse_error(text.encode("utf-16")).code == jsonrpc.PARSE_ERROR
    assert parse_error(text.encode("utf-32-le")).code == jsonrpc.PARSE_ERROR


def test_leading_bom_is_ignored() -> None:
    body = '{"jsonrpc":"2.0","id":1,"method":"m"}'
    assert parse(("\ufeff" + body).encode()) == parse(body.encode())
    assert parse("\ufeff" + body) == parse(body)
    # Only a leading one: elsewhere it is not JSON whitespace.
    assert parse_error((" \ufeff" + body).encode()).code == jsonrpc.PARSE_ERROR
    assert parse_error(("\ufeff\ufeff" + body).encode()).code == jsonrpc.PARSE_ERROR


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_constants_are_parse_errors(constant: str) -> None:
    exc = parse_error(f'{{"jsonrpc":"2.0","id":1,"result":{{"v":{constant}}}}}')
    assert exc.code == jsonrpc.PARSE_ERROR and constant in str(exc)
    assert parse_error(constant).code == jsonrpc.PARSE_ERROR


@pytest.mark.parametrize("line", [
    '{"jsonrpc":"2.0","method":"m","params":{"v":"\\ud800"}}',
    '{"jsonrpc":"2.0","method":"m","params":{"v":"\\uDFFF"}}',
    '{"jsonrpc":"2.0","method":"m","params":{"\\udc00key":1}}',
    '{"jsonrpc":"2.0","method":"m\\uD83D"}',
    '{"jsonrpc":"2.0","method":"m","params":["\\ude00\\ud83d"]}',  # reversed pair
    '{"jsonrpc":"2.0","id":"\\ud800","method":"m"}',
    '{"jsonrpc":"2.0","method":"m","params":[[[{"a":["x\\udbffy"]}]]]}',
])
def test_lone_surrogates_anywhere_are_parse_errors(line: str) -> None:
    assert parse_error(line.encode()).code == jsonrpc.PARSE_ERROR


def test_surrogate_pairs_and_lookalikes_are_fine() -> None:
    msg = parse(b'{"jsonrpc":"2.0","method":"m","params":{"e":"\\ud83d\\ude00"}}')
    assert isinstance(msg, Message) and msg.params == {"e": "\U0001F600"}
    # An escaped backslash followed by "ud800" is six plain characters.
    msg = parse(b'{"jsonrpc":"2.0","method":"m","params":{"e":"\\\\ud800"}}')
    assert isinstance(msg, Message) and msg.params == {"e": "\\ud800"}


def test_raw_surrogate_in_str_input_is_a_parse_error() -> None:
    assert parse_error('{"jsonrpc":"2.0","method":"\ud800"}').code == jsonrpc.PARSE_ERROR


def test_deep_nesting_is_a_parse_error() -> None:
    depth = sys.getrecursionlimit() * 4
    exc = parse_error(b'{"jsonrpc":"2.0","method":"m","params":' + b"[" * depth + b"]" * depth
                      + b"}")
    assert exc.code == jsonrpc.PARSE_ERROR
    assert parse_error(b"[" * 100_000).code == jsonrpc.PARSE_ERROR


def test_moderate_nesting_is_fine() -> None:
    msg = parse(b'{"jsonrpc":"2.0","method":"m","params":' + b"[" * 50 + b"]" * 50 + b"}")
    assert isinstance(msg, Message)


def test_huge_integer_is_a_parse_error() -> None:
    assert parse_error(b'{"jsonrpc":"2.0","id":' + b"9" * 5000 + b',"method":"m"}').code == (
        jsonrpc.PARSE_ERROR)


def test_duplicate_keys_last_wins() -> None:
    msg = parse(b'{"jsonrpc":"2.0","id":1,"method":"a","method":"b","id":"two",'
                b'"params":{"k":1,"k":2}}')
    assert isinstance(msg, Message)
    assert msg.method == "b" and msg.params == {"k": 2}
    assert msg.id == RequestId('"two"', "two")
    msg = parse(b'{"jsonrpc":"2.0","id":"a\\u0061","id":"b\\u0062","method":"m"}')
    assert isinstance(msg, Message) and msg.id == RequestId('"b\\u0062"', "bb")


@pytest.mark.parametrize("line", ["1", '"text"', "null", "true", "3.5"])
def test_non_object_top_level_is_invalid_request(line: str) -> None:
    assert parse_error(line).code == jsonrpc.INVALID_REQUEST


@pytest.mark.parametrize("line", ["", "   ", "{", "{}x", '{"a":1,}', "{'a':1}", "\x0b{}"])
def test_malformed_json_is_parse_error(line: str) -> None:
    exc = parse_error(line)
    assert exc.code == jsonrpc.PARSE_ERROR and exc.id is None


@pytest.mark.parametrize("version", ['"1.0"', "2.0", "null", '"2.00"', '["2.0"]'])
def test_jsonrpc_member_must_be_the_string_2_0(version: str) -> None:
    exc = parse_error(f'{{"jsonrpc":{version},"id":4,"method":"m"}}')
    assert exc.code == jsonrpc.INVALID_REQUEST
    assert exc.id == RequestId("4", 4)
    assert parse_error('{"id":4,"method":"m"}').code == jsonrpc.INVALID_REQUEST


@pytest.mark.parametrize("method", ["1", "null", "[]", "{}", "true"])
def test_method_must_be_a_string(method: str) -> None:
    exc = parse_error(f'{{"jsonrpc":"2.0","id":"r","method":{method}}}')
    assert exc.code == jsonrpc.INVALID_REQUEST and exc.id == RequestId('"r"', "r")


@pytest.mark.parametrize("params", ['"s"', "1", "null", "true"])
def test_params_must_be_object_or_array(params: str) -> None:
    assert parse_error(f'{{"jsonrpc":"2.0","id":1,"method":"m","params":{params}}}').code == (
        jsonrpc.INVALID_REQUEST)


def test_params_array_is_allowed() -> None:
    msg = parse(b'{"jsonrpc":"2.0","id":1,"method":"m","params":[1,"a"]}')
    assert isinstance(msg, Message) and msg.params == [1, "a"]


@pytest.mark.parametrize("line", [
    '{"jsonrpc":"2.0","id":1}',
    '{"jsonrpc":"2.0","id":1,"result":1,"error":{"code":1,"message":"m"}}',
    '{"jsonrpc":"2.0","id":1,"error":"bad"}',
    '{"jsonrpc":"2.0","id":1,"error":null}',
    '{"jsonrpc":"2.0","id":1,"error":{"message":"m"}}',
    '{"jsonrpc":"2.0","id":1,"error":{"code":1.5,"message":"m"}}',
    '{"jsonrpc":"2.0","id":1,"error":{"code":"1","message":"m"}}',
    '{"jsonrpc":"2.0","id":1,"error":{"code":true,"message":"m"}}',
    '{"jsonrpc":"2.0","id":1,"error":{"code":1}}',
    '{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":2}}',
    '{"jsonrpc":"2.0","id":1,"method":"m","result":1}',
    '{"jsonrpc":"2.0","id":1,"method":"m","error":{"code":1,"message":"m"}}',
])
def test_response_shape_errors_keep_the_id(line: str) -> None:
    exc = parse_error(line)
    assert exc.code == jsonrpc.INVALID_REQUEST
    assert exc.id == RequestId("1", 1)


@pytest.mark.parametrize("data", ["null", "1", '"x"', "[1,2]", "{}", '{"nested":{"x":[]}}'])
def test_error_data_may_be_any_value(data: str) -> None:
    msg = parse(f'{{"jsonrpc":"2.0","id":1,"error":{{"code":-1,"message":"m","data":{data}}}}}')
    assert isinstance(msg, Message) and msg.error is not None
    assert msg.error["data"] == json.loads(data)


@pytest.mark.parametrize("id_text", ["null", None, "true", "1.5"])
def test_a_result_needs_a_valid_id(id_text: str | None) -> None:
    member = "" if id_text is None else f',"id":{id_text}'
    exc = parse_error(f'{{"jsonrpc":"2.0"{member},"result":{{}}}}')
    assert exc.code == jsonrpc.INVALID_REQUEST and exc.id is None


def test_error_with_an_invalid_id_is_invalid() -> None:
    exc = parse_error('{"jsonrpc":"2.0","id":1.5,"error":{"code":1,"message":"m"}}')
    assert exc.code == jsonrpc.INVALID_REQUEST


def test_result_may_be_null() -> None:
    msg = parse(b'{"jsonrpc":"2.0","id":1,"result":null}')
    assert isinstance(msg, Message) and msg.result is None and msg.is_response
    assert not msg.is_error
    assert serialize(msg) == b'{"jsonrpc":"2.0","id":1,"result":null}'


def test_parse_error_carries_code_id_and_quote() -> None:
    exc = parse_error(b'{"jsonrpc":"2.0","id":"abc","method":42}')
    assert exc.code == -32600
    assert exc.id == RequestId('"abc"', "abc")
    assert '"method" must be a string' in str(exc)
    assert exc.excerpt in str(exc)
    copy = pickle.loads(pickle.dumps(exc))
    assert (copy.code, copy.id, copy.excerpt, str(copy)) == (exc.code, exc.id, exc.excerpt,
                                                             str(exc))


def test_parse_accepts_str_and_bytearray() -> None:
    line = '{"jsonrpc":"2.0","id":1,"method":"é"}'
    assert parse(line) == parse(line.encode()) == parse(bytearray(line.encode()))


def test_parse_rejects_other_types_as_programming_errors() -> None:
    with pytest.raises(TypeError):
        parse(123)  # type: ignore[arg-type]


def test_batch_rejected_unless_allowed() -> None:
    line = b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]'
    exc = parse_error(line)
    assert exc.code == jsonrpc.INVALID_REQUEST
    assert "batches are only allowed under 2025-03-26" in str(exc)
    batch = parse(line, allow_batch=True)
    assert isinstance(batch, Batch) and isinstance(batch, list)
    assert batch == [request(1, "ping")]


def test_batch_items_are_messages_or_parse_errors() -> None:
    line = (b'[{"jsonrpc":"2.0","id":"\\u0061","method":"a"}, 5,'
            b' {"jsonrpc":"2.0","id":2,"method":7},{"jsonrpc":"2.0","method":"n"}]')
    batch = parse(line, allow_batch=True)
    assert isinstance(batch, Batch) and len(batch) == 4
    first, second, third, fourth = batch
    assert isinstance(first, Message) and first.id == RequestId('"\\u0061"', "a")
    assert isinstance(second, ParseError) and second.code == -32600 and second.excerpt == "5"
    assert isinstance(third, ParseError) and third.id == RequestId("2", 2)
    assert third.excerpt == '{"jsonrpc":"2.0","id":2,"method":7}'
    assert isinstance(fourth, Message) and fourth.is_notification


def test_empty_batch_is_invalid_request() -> None:
    assert parse_error(b"[ ]", allow_batch=True).code == jsonrpc.INVALID_REQUEST


def test_malformed_batch_is_parse_error() -> None:
    assert parse_error(b'[{"jsonrpc":"2.0"', allow_batch=True).code == jsonrpc.PARSE_ERROR


# --- serialisation ----------------------------------------------------------------------------


def test_serialisation_is_compact_and_never_holds_a_newline() -> None:
    msg = request(1, "m", {"text": "a\nb\r\u2028c", "list": [1, 2], "nested": {"k": None}})
    frame = serialize(msg)
    assert b"\n" not in frame and b": " not in frame and b", " not in frame
    assert json.loads(frame)["params"]["text"] == "a\nb\r\u2028c"
    assert msg.to_bytes() == frame


def test_serialisation_keeps_non_ascii_as_utf8() -> None:
    assert serialize(notification("m", {"t": "é"})) == (
        '{"jsonrpc":"2.0","method":"m","params":{"t":"é"}}'.encode())


@pytest.mark.parametrize("bad", [
    request(1, "m", {"v": float("nan")}),
    request(1, "m", {"v": float("inf")}),
    result(1, [float("-inf")]),
    request(1, "m", {"v": "\ud800"}),
    request(1, "m", {"\udc00": 1}),
    notification("m\ud800"),
    request(1, "m", extra={"x": "\udfff"}),
    error(1, 1, "bad \ud800"),
])
def test_unencodable_values_raise_value_error(bad: Message) -> None:
    with pytest.raises(ValueError):
        serialize(bad)


def test_circular_values_raise_value_error() -> None:
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(ValueError):
        serialize(result(1, loop))


def test_non_json_values_raise_type_error() -> None:
    with pytest.raises(TypeError):
        serialize(result(1, {1, 2}))


def test_uncorrelated_error_serialises_null_id() -> None:
    assert serialize(error(None, -32700, "bad")) == (
        b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"bad"}}')


def test_to_dict() -> None:
    msg = parse(b'{"jsonrpc":"2.0","id":"a\\u0062","method":"m","params":{},"x":1}')
    assert isinstance(msg, Message)
    assert msg.to_dict() == {"jsonrpc": "2.0", "id": "ab", "method": "m", "params": {}, "x": 1}
    assert error(None, 1, "e").to_dict() == {"jsonrpc": "2.0", "id": None,
                                             "error": {"code": 1, "message": "e"}}


def test_round_trip_equality_and_repr() -> None:
    msgs = [request("r-1", "tools/call", {"name": "x"}, extra={"future": 1}),
            notification("n", [1]), result(3, {"ok": True}), error(None, -1, "e", None)]
    for msg in msgs:
        assert parse(serialize(msg)) == msg
        assert "Message(" in repr(msg)


def test_missing_is_a_falsy_singleton() -> None:
    assert not MISSING and repr(MISSING) == "MISSING"
    assert pickle.loads(pickle.dumps(MISSING)) is MISSING
    assert type(MISSING)() is MISSING


def test_the_example_in_docs_wire_md_runs() -> None:
    doc = DOCS / "wire.md"
    text = doc.read_text(encoding="utf-8")
    blocks = text.split("```python\n")[1:]
    assert blocks, "docs/wire.md has no python example"
    for block in blocks:
        exec(compile(block.split("```")[0], str(doc), "exec"), {})
