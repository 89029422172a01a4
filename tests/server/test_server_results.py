"""Handler return values → ``CallToolResult``."""

from __future__ import annotations

from typing import Any

import pytest

from mcpsync.server._results import to_call_tool_result
from mcpsync.types import CallToolResult, TextContent


def convert(value: Any, *, structured: bool = False, version: str = "2025-11-25") -> Any:
    return to_call_tool_result(value, structured=structured, version=version)


def test_call_tool_result_passes_unchanged() -> None:
    raw = {"content": [{"type": "text", "text": "x"}], "isError": True, "_meta": {"k": 1},
           "futureField": [1]}
    assert convert(CallToolResult.from_dict(raw)) == raw
    built = CallToolResult([TextContent("a")], structured={"s": 1}, is_error=True)
    assert convert(built) == {"content": [{"type": "text", "text": "a"}],
                              "structuredContent": {"s": 1}, "isError": True}


def test_str_none_and_content_lists() -> None:
    assert convert("hello") == {"content": [{"type": "text", "text": "hello"}]}
    assert convert(None) == {"content": []}
    blocks = [{"type": "text", "text": "a"},
              {"type": "image", "data": "AAAA", "mimeType": "image/png"}]
    assert convert(blocks) == {"content": blocks}


def test_other_values_become_compact_json_or_str() -> None:
    assert convert({"a": [1, 2]}) == {"content": [{"type": "text", "text": '{"a":[1,2]}'}]}
    assert convert(3.5) == {"content": [{"type": "text", "text": "3.5"}]}
    assert convert([1, "x"]) == {"content": [{"type": "text", "text": '[1,"x"]'}]}

    class Thing:
        def __str__(self) -> str:
            return "a thing"

    assert convert(Thing()) == {"content": [{"type": "text", "text": "a thing"}]}


@pytest.mark.parametrize("version", ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25",
                                     "2026-07-28"])
def test_structured_object_in_every_revision(version: str) -> None:
    out = convert({"sum": 3}, structured=True, version=version)
    assert out["content"] == [{"type": "text", "text": '{"sum":3}'}]
    # structuredContent exists from 2025-06-18 on; before, the text block carries the value.
    if version in ("2024-11-05", "2025-03-26"):
        assert "structuredContent" not in out
    else:
        assert out["structuredContent"] == {"sum": 3}


def test_structured_non_object_only_under_2026() -> None:
    assert convert([1, 2], structured=True, version="2026-07-28") == {
        "content": [{"type": "text", "text": "[1,2]"}], "structuredContent": [1, 2]}
    for version in ("2025-06-18", "2025-11-25"):
        # structuredContent must be an object there: the value goes out as text only
        assert convert([1, 2], structured=True, version=version) == {
            "content": [{"type": "text", "text": "[1,2]"}]}


def test_structured_value_that_is_not_json_raises() -> None:
    with pytest.raises((TypeError, ValueError)):
        convert({"x": object()}, structured=True)
    with pytest.raises(ValueError):
        convert({"x": float("nan")}, structured=True)


def test_which_lists_are_content_and_which_are_data() -> None:
    # data: no block in it, or an item that is neither a block nor a str
    assert convert([{"a": 1}, "x"]) == {"content": [{"type": "text", "text": '[{"a":1},"x"]'}]}
    assert convert([{"type": ["odd"]}]) == {"content": [{"type": "text",
                                                        "text": '[{"type":["odd"]}]'}]}
    assert convert([{"type": "text", "text": "a"}, 1])["content"][0]["text"] == (
        '[{"type":"text","text":"a"},1]')
    # content: a typed block anywhere makes every item a block, or an error naming it
    assert convert((TextContent("a"), "b")) == {"content": [{"type": "text", "text": "a"},
                                                            {"type": "text", "text": "b"}]}
    with pytest.raises(ValueError, match=r"content\[1\] has type None; a content block's "
                                         r"type is one of"):
        convert([TextContent("a"), {"a": 1}])


def test_a_block_dict_that_would_be_read_wrongly_is_refused() -> None:
    # it looks like content, so it is checked as the client would parse it
    with pytest.raises(ValueError, match=r"content\[0\]: a text content block has no 'text'"):
        convert([{"type": "text", "value": 3}])


def test_block_dicts_follow_the_revision_too() -> None:
    audio = {"type": "audio", "data": "AAAA", "mimeType": "audio/ogg"}
    out = convert([{"type": "text", "text": "a"}, audio], version="2024-11-05")
    assert out["content"][1] == {
        "type": "text", "text": "[audio (audio/ogg) omitted: protocol 2024-11-05 has no audio "
                                "content]"}
    assert convert([audio], version="2025-03-26") == {"content": [audio]}
