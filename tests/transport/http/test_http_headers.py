"""Modern request headers: value encoding, Mcp-Method / Mcp-Name /
Mcp-Param-*, and the x-mcp-header validity rules, including the exact tool list of conformance
scenario ``http-invalid-tool-headers`` and the tool of ``http-custom-headers``."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from hypothesis import given, strategies as st

from mcpsync.transport.http._headers import (
    MAX_SAFE_INTEGER,
    encode_header_value,
    header_annotations,
    invalid_header_reason,
    modern_headers,
    needs_base64,
)
from mcpsync.types import Tool


def b64(text: str) -> str:
    return "=?base64?" + base64.b64encode(text.encode()).decode() + "?="


def decode(header: str) -> str:
    if header.startswith("=?base64?") and header.endswith("?="):
        return base64.b64decode(header[9:-2]).decode()
    return header


# ---- encoding -----------------------------------------------------------------------------

@pytest.mark.parametrize(("value", "expected"), [
    ("us-west1", "us-west1"),
    ("", ""),
    ("two words", "two words"),
    (True, "true"),
    (False, "false"),
    (0, "0"),
    (42, "42"),
    (-7, "-7"),
    (MAX_SAFE_INTEGER, "9007199254740991"),
    (-MAX_SAFE_INTEGER, "-9007199254740991"),
    (3.0, "3"),
    ("h\u00e9llo", b64("h\u00e9llo")),
    (" lead", b64(" lead")),
    ("trail ", b64("trail ")),
    ("\tTab", b64("\tTab")),
    ("a\r\nb", b64("a\r\nb")),
    ("ctl\x01", b64("ctl\x01")),
    ("del\x7f", b64("del\x7f")),
    ("=?base64?SGVsbG8=?=", b64("=?base64?SGVsbG8=?=")),
    ("=?BASE64?x?=", b64("=?BASE64?x?=")),
    ("=?base64?SGVsbG8=", "=?base64?SGVsbG8="),  # no suffix: plain
    ("\u65e5\u672c", b64("\u65e5\u672c")),
])
def test_encode_header_value(value: Any, expected: str) -> None:
    assert encode_header_value(value) == expected


def test_bool_is_tested_before_int() -> None:
    assert encode_header_value(True) == "true"
    assert encode_header_value(1) == "1"


@pytest.mark.parametrize("value", [MAX_SAFE_INTEGER + 1, -MAX_SAFE_INTEGER - 1, 2**64])
def test_integers_beyond_safe_range_raise(value: int) -> None:
    with pytest.raises(ValueError, match="2\\^53"):
        encode_header_value(value)


@pytest.mark.parametrize("value", [1.5, None, [1], {"a": 1}, b"x"])
def test_other_types_raise(value: Any) -> None:
    with pytest.raises(ValueError):
        encode_header_value(value)


@given(st.text())
def test_every_string_encodes_to_a_safe_header_that_decodes_back(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates cannot come from JSON text anyway
        return
    header = encode_header_value(text)
    assert all(" " <= c <= "~" for c in header)
    assert header == header.strip()
    assert decode(header) == text
    assert needs_base64(text) == (header != text)


# ---- Mcp-Method / Mcp-Name / Mcp-Param-* ---------------------------------------------------

def test_method_and_name_headers() -> None:
    assert modern_headers("tools/list", {}) == {"Mcp-Method": "tools/list"}
    assert modern_headers("tools/call", {"name": "add", "arguments": {}}) == {
        "Mcp-Method": "tools/call", "Mcp-Name": "add"}
    assert modern_headers("prompts/get", {"name": "greet"})["Mcp-Name"] == "greet"
    assert modern_headers("resources/read", {"uri": "file:///a b"})["Mcp-Name"] == "file:///a b"
    assert modern_headers("resources/read", {"uri": "file:///caf\u00e9"})["Mcp-Name"] == b64(
        "file:///caf\u00e9")
    assert modern_headers("server/discover", None) == {"Mcp-Method": "server/discover"}
    assert "Mcp-Name" not in modern_headers("resources/list", {"name": "x"})


CUSTOM_TOOL = {  # the tool of conformance scenario http-custom-headers (abridged)
    "name": "test_custom_headers",
    "inputSchema": {
        "type": "object",
        "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "priority": {"type": "integer", "x-mcp-header": "Priority"},
            "verbose": {"type": "boolean", "x-mcp-header": "Verbose"},
            "debug": {"type": "boolean", "x-mcp-header": "Debug"},
            "empty_val": {"type": "string", "x-mcp-header": "EmptyVal"},
            "method_val": {"type": "string", "x-mcp-header": "Method"},
            "float_val": {"type": "number"},
            "non_ascii_val": {"type": "string", "x-mcp-header": "NonAscii"},
            "whitespace_val": {"type": "string", "x-mcp-header": "Whitespace"},
            "internal_space_val": {"type": "string", "x-mcp-header": "InternalSpace"},
            "crlf_val": {"type": "string", "x-mcp-header": "CrLf"},
            "tab_val": {"type": "string", "x-mcp-header": "Tab"},
            "query": {"type": "string"},
        },
        "required": ["region", "priority", "query"],
    },
}


def test_param_headers_of_the_conformance_tool() -> None:
    args = {"region": "us-west1", "priority": 5, "verbose": False, "debug": True,
            "empty_val": "", "method_val": "GET", "float_val": 1.5, "non_ascii_val": "\u00fc",
            "whitespace_val": " x ", "internal_space_val": "a b", "crlf_val": "a\r\nb",
            "tab_val": "\tt", "query": "q"}
    assert invalid_header_reason(CUSTOM_TOOL) is None
    headers = modern_headers("tools/call", {"name": "test_custom_headers", "arguments": args},
                             Tool.from_dict(CUSTOM_TOOL))
    assert headers == {
        "Mcp-Method": "tools/call", "Mcp-Name": "test_custom_headers",
        "Mcp-Param-Region": "us-west1", "Mcp-Param-Priority": "5",
        "Mcp-Param-Verbose": "false", "Mcp-Param-Debug": "true", "Mcp-Param-EmptyVal": "",
        "Mcp-Param-Method": "GET", "Mcp-Param-NonAscii": b64("\u00fc"),
        "Mcp-Param-Whitespace": b64(" x "), "Mcp-Param-InternalSpace": "a b",
        "Mcp-Param-CrLf": b64("a\r\nb"), "Mcp-Param-Tab": b64("\tt"),
    }


def test_null_and_absent_arguments_send_no_header() -> None:
    headers = modern_headers("tools/call", {"name": "t", "arguments": {
        "region": "eu", "priority": None}}, CUSTOM_TOOL)
    assert headers == {"Mcp-Method": "tools/call", "Mcp-Name": "t", "Mcp-Param-Region": "eu"}


def test_nested_properties_chain() -> None:
    tool = {"name": "t", "inputSchema": {"type": "object", "properties": {
        "target": {"type": "object", "properties": {
            "location": {"type": "object", "properties": {
                "zone": {"type": "string", "x-mcp-header": "Zone"}}},
            "id": {"type": "integer", "x-mcp-header": "TargetId"}}}}}}
    assert invalid_header_reason(tool) is None
    assert list(header_annotations(tool["inputSchema"])) == [
        (("target", "location", "zone"), "Zone"), (("target", "id"), "TargetId")]
    headers = modern_headers("tools/call", {"name": "t", "arguments": {
        "target": {"location": {"zone": "z1"}, "id": 9}}}, tool)
    assert headers["Mcp-Param-Zone"] == "z1"
    assert headers["Mcp-Param-TargetId"] == "9"
    # a missing or non-object intermediate means no header
    headers = modern_headers("tools/call", {"name": "t", "arguments": {"target": "flat"}}, tool)
    assert not any(k.startswith("Mcp-Param-") for k in headers)


def test_unencodable_argument_raises_value_error_naming_it() -> None:
    with pytest.raises(ValueError, match=r"priority.*Mcp-Param-Priority"):
        modern_headers("tools/call", {"name": "t", "arguments": {"priority": 2**60}},
                       CUSTOM_TOOL)


def test_no_tool_means_no_param_headers() -> None:
    headers = modern_headers("tools/call", {"name": "t", "arguments": {"region": "eu"}}, None)
    assert headers == {"Mcp-Method": "tools/call", "Mcp-Name": "t"}


# ---- invalid tools -------------------------------------------------------------------------

def _tool(props: dict[str, Any], **schema: Any) -> dict[str, Any]:
    return {"name": "t", "inputSchema": {"type": "object", "properties": props, **schema}}


# The exact tools/list of conformance scenario http-invalid-tool-headers (0.2.0-alpha.12).
INVALID_SCENARIO = [
    ("invalid_empty_header", {"value": {"type": "string", "x-mcp-header": ""}}, "empty"),
    ("invalid_object_header", {"data": {"type": "object", "x-mcp-header": "Data"}}, "type"),
    ("invalid_array_header", {"items": {"type": "array", "items": {"type": "string"},
                                        "x-mcp-header": "Items"}}, "type"),
    ("invalid_null_header", {"nil": {"type": "null", "x-mcp-header": "Nil"}}, "type"),
    ("invalid_number_header", {"score": {"type": "number", "x-mcp-header": "Score"}}, "type"),
    ("invalid_duplicate_same_case", {"field1": {"type": "string", "x-mcp-header": "Region"},
                                     "field2": {"type": "string", "x-mcp-header": "Region"}},
     "duplicates"),
    ("invalid_duplicate_diff_case", {"field1": {"type": "string", "x-mcp-header": "MyField"},
                                     "field2": {"type": "string", "x-mcp-header": "myfield"}},
     "duplicates"),
    ("invalid_space_in_name", {"value": {"type": "string", "x-mcp-header": "My Region"}},
     "token"),
    ("invalid_colon_in_name", {"value": {"type": "string", "x-mcp-header": "Region:Primary"}},
     "token"),
    ("invalid_non_ascii_name", {"value": {"type": "string", "x-mcp-header": "R\u00e9gion"}},
     "token"),
    ("invalid_control_char_name", {"value": {"type": "string", "x-mcp-header": "Region\t1"}},
     "token"),
]


@pytest.mark.parametrize(("name", "props", "why"), INVALID_SCENARIO,
                         ids=[c[0] for c in INVALID_SCENARIO])
def test_conformance_invalid_tools_are_invalid(name: str, props: dict[str, Any],
                                               why: str) -> None:
    reason = invalid_header_reason(_tool(props))
    assert reason is not None
    assert why in reason


def test_conformance_valid_tool_is_valid() -> None:
    tool = _tool({"region": {"type": "string", "x-mcp-header": "Region"}}, required=["region"])
    assert invalid_header_reason(tool) is None
    assert invalid_header_reason(Tool.from_dict(tool)) is None


@pytest.mark.parametrize("props", [
    {"v": {"type": "string", "x-mcp-header": 5}},
    {"v": {"type": "string", "x-mcp-header": None}},
    {"v": {"type": "string", "x-mcp-header": "A\r\nB"}},
    {"v": {"type": "string", "x-mcp-header": "A\nB"}},
    {"v": {"x-mcp-header": "NoType"}},
    {"v": {"type": ["string", "null"], "x-mcp-header": "Union"}},
])
def test_more_invalid_annotations(props: dict[str, Any]) -> None:
    assert invalid_header_reason(_tool(props)) is not None


@pytest.mark.parametrize(("schema", "where"), [
    ({"properties": {"a": {"type": "array", "items": {"type": "string", "x-mcp-header": "A"}}}},
     "/properties/a/items"),
    ({"anyOf": [{"properties": {"a": {"type": "string", "x-mcp-header": "A"}}}]}, "/anyOf/0"),
    ({"oneOf": [{"type": "object", "properties": {"a": {"type": "string",
                                                         "x-mcp-header": "A"}}}]}, "/oneOf"),
    ({"allOf": [{"properties": {"a": {"type": "string", "x-mcp-header": "A"}}}]}, "/allOf"),
    ({"not": {"properties": {"a": {"type": "string", "x-mcp-header": "A"}}}}, "/not"),
    ({"if": {"properties": {"a": {"type": "string", "x-mcp-header": "A"}}}}, "/if"),
    ({"then": {"properties": {"a": {"type": "string", "x-mcp-header": "A"}}}}, "/then"),
    ({"else": {"properties": {"a": {"type": "string", "x-mcp-header": "A"}}}}, "/else"),
    ({"$defs": {"d": {"type": "string", "x-mcp-header": "A"}},
      "properties": {"a": {"$ref": "#/$defs/d"}}}, "/$defs/d"),
    ({"properties": {"a": {"type": "object", "additionalProperties": {
        "type": "string", "x-mcp-header": "A"}}}}, "additionalProperties"),
    ({"properties": {"a": {"type": "object", "properties": {"b": {
        "type": "array", "items": {"type": "object", "properties": {
            "c": {"type": "string", "x-mcp-header": "C"}}}}}}}}, "/items"),
    ({"x-mcp-header": "Root"}, "root"),
])
def test_annotation_off_the_properties_chain_is_invalid(schema: dict[str, Any],
                                                        where: str) -> None:
    reason = invalid_header_reason({"name": "t", "inputSchema": {"type": "object", **schema}})
    assert reason is not None
    assert where in reason


def test_annotation_like_keys_inside_data_keywords_are_not_annotations() -> None:
    tool = _tool({"v": {"type": "string", "default": "x",
                        "examples": [{"x-mcp-header": "not-an-annotation"}],
                        "const": {"x-mcp-header": "nope"}}})
    assert invalid_header_reason(tool) is None


def test_a_property_named_like_a_keyword_is_still_on_the_chain() -> None:
    tool = _tool({"items": {"type": "string", "x-mcp-header": "Items"},
                  "properties": {"type": "integer", "x-mcp-header": "Props"}})
    assert invalid_header_reason(tool) is None
    headers = modern_headers("tools/call", {"name": "t", "arguments": {
        "items": "a", "properties": 2}}, tool)
    assert headers["Mcp-Param-Items"] == "a" and headers["Mcp-Param-Props"] == "2"


def test_tools_without_annotations_or_schema_are_valid() -> None:
    assert invalid_header_reason({"name": "t"}) is None
    assert invalid_header_reason({"name": "t", "inputSchema": {"type": "object"}}) is None
    assert invalid_header_reason(_tool({"a": {"type": "number"}})) is None
