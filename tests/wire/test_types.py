"""MCP data types: tolerant parsing, unknown fields kept, required fields enforced."""

from __future__ import annotations

import base64
import copy
import dataclasses
import pickle
from typing import Any

import pytest
from helpers import DOCS

from mcpsync.errors import ProtocolError
from mcpsync.types import (
    AudioContent,
    CallToolResult,
    CompleteResult,
    ContentBlock,
    EmbeddedResource,
    GetPromptResult,
    ImageContent,
    Prompt,
    PromptArgument,
    PromptMessage,
    ReadResourceResult,
    Resource,
    ResourceContents,
    ResourceLink,
    ResourceTemplate,
    Root,
    ServerInfo,
    TextContent,
    Tool,
    content_block_from_dict,
)

PNG = base64.b64encode(b"\x89PNG...").decode()


# --- content blocks -------------------------------------------------------------------------

def test_text_block_plain() -> None:
    d = {"type": "text", "text": "hi"}
    block = content_block_from_dict(d)
    assert isinstance(block, TextContent)
    assert (block.type, block.text, block.extra, block.raw) == ("text", "hi", {}, d)
    assert block.raw is d
    assert block.to_dict() == d


def test_text_block_with_annotations_meta_and_unknown() -> None:
    d = {"type": "text", "text": "hi", "annotations": {"audience": ["user"]},
         "_meta": {"k": 1}, "future": True}
    block = TextContent.from_dict(d)
    assert block.annotations == {"audience": ["user"]}
    assert block.meta == {"k": 1}
    assert block.extra == {"future": True}


def test_text_block_missing_text_raises_alone_degrades_in_a_list() -> None:
    with pytest.raises(ProtocolError, match="text"):
        TextContent.from_dict({"type": "text"})
    with pytest.raises(ProtocolError, match="must be a string"):
        TextContent.from_dict({"type": "text", "text": 3})
    block = content_block_from_dict({"type": "text", "text": 3})
    assert isinstance(block, ContentBlock) and block.type == "text"
    assert block.raw == {"type": "text", "text": 3}


def test_image_and_audio() -> None:
    img = content_block_from_dict({"type": "image", "data": PNG, "mimeType": "image/png"})
    assert isinstance(img, ImageContent)
    assert img.mime_type == "image/png" and img.decode() == b"\x89PNG..."
    assert img.bytes == b"\x89PNG..." and img.data == PNG      # .bytes decoded, .data as sent
    aud = content_block_from_dict({"type": "audio", "data": PNG, "mimeType": "audio/wav",
                                   "x": 1})
    assert isinstance(aud, AudioContent) and aud.type == "audio" and aud.extra == {"x": 1}
    assert aud.decode() == b"\x89PNG..."
    assert aud.bytes == b"\x89PNG..."
    with pytest.raises(ProtocolError, match="mimeType"):
        ImageContent.from_dict({"type": "image", "data": PNG})
    with pytest.raises(ProtocolError, match="data"):
        AudioContent.from_dict({"type": "audio", "mimeType": "audio/wav"})


def test_resource_link() -> None:
    d = {"type": "resource_link", "uri": "file:///a.txt", "name": "a", "size": 12,
         "mimeType": "text/plain", "title": 5}
    link = content_block_from_dict(d)
    assert isinstance(link, ResourceLink)
    assert (link.uri, link.name, link.size, link.mime_type) == ("file:///a.txt", "a", 12,
                                                                 "text/plain")
    assert link.title is None and link.raw["title"] == 5  # wrong type: kept in raw only
    with pytest.raises(ProtocolError, match="name"):
        ResourceLink.from_dict({"type": "resource_link", "uri": "file:///a"})


def test_embedded_resource() -> None:
    d = {"type": "resource", "resource": {"uri": "file:///a", "text": "body",
                                          "mimeType": "text/plain"}}
    block = content_block_from_dict(d)
    assert isinstance(block, EmbeddedResource)
    assert block.resource.text == "body" and block.resource.is_text
    assert block.resource.data == b"body"
    with pytest.raises(ProtocolError, match="resource"):
        EmbeddedResource.from_dict({"type": "resource"})


def test_unknown_block_type_is_generic() -> None:
    d = {"type": "tool_use", "id": "t1", "name": "x", "input": {}}
    block = content_block_from_dict(d)
    assert isinstance(block, ContentBlock)
    assert block.type == "tool_use"
    assert block.extra == {"id": "t1", "name": "x", "input": {}}
    assert block.raw is d
    untyped = content_block_from_dict({"text": "no type"})
    assert isinstance(untyped, ContentBlock) and untyped.type == ""


def test_dict_subclass_block_is_accepted() -> None:
    from collections import OrderedDict

    block = content_block_from_dict(OrderedDict(type="text", text="x"))
    assert isinstance(block, TextContent) and block.text == "x"


@pytest.mark.parametrize("bad", ["text", 3, None, ["x"]])
def test_non_object_block_raises(bad: Any) -> None:
    with pytest.raises(ProtocolError, match="JSON object"):
        content_block_from_dict(bad)


# --- tools ----------------------------------------------------------------------------------

def test_tool_full() -> None:
    d = {"name": "add", "title": "Add", "description": "adds",
         "inputSchema": {"type": "object"}, "outputSchema": {"type": "object"},
         "annotations": {"readOnlyHint": True}, "icons": [{"src": "https://i"}],
         "_meta": {"m": 1}, "execution": {"taskSupport": "optional"}, "x-vendor": 1}
    tool = Tool.from_dict(d)
    assert tool.name == "add" and tool.title == "Add" and tool.description == "adds"
    assert tool.input_schema == {"type": "object"}
    assert tool.output_schema == {"type": "object"}
    assert tool.annotations == {"readOnlyHint": True}
    assert tool.icons == [{"src": "https://i"}]
    assert tool.meta == {"m": 1}
    assert tool.extra == {"execution": {"taskSupport": "optional"}, "x-vendor": 1}
    assert tool.raw is d


def test_tool_tolerates_wrong_optional_types() -> None:
    d = {"name": "t", "description": 3, "inputSchema": "nope", "annotations": []}
    tool = Tool.from_dict(d)
    assert tool.description is None and tool.input_schema == {} and tool.annotations is None
    assert tool.raw["description"] == 3


@pytest.mark.parametrize("bad", [{}, {"name": 3}, {"description": "x"}])
def test_tool_needs_a_name(bad: dict[str, Any]) -> None:
    with pytest.raises(ProtocolError, match="name"):
        Tool.from_dict(bad)


def test_tool_display_title() -> None:
    assert Tool.from_dict({"name": "n"}).display_title == "n"
    assert Tool.from_dict({"name": "n", "annotations": {"title": "A"}}).display_title == "A"
    assert Tool.from_dict({"name": "n", "title": "T",
                           "annotations": {"title": "A"}}).display_title == "T"


# --- tool results ---------------------------------------------------------------------------

def test_call_result_simple() -> None:
    d = {"content": [{"type": "text", "text": "3"}]}
    res = CallToolResult.from_dict(d)
    assert res.text == "3" and res.structured is None and res.is_error is False
    assert res.raw is d and res.extra == {}


def test_call_result_text_joins_text_blocks_only() -> None:
    d = {"content": [{"type": "text", "text": "a"},
                     {"type": "image", "data": PNG, "mimeType": "image/png"},
                     {"type": "text", "text": "b"}], "isError": True}
    res = CallToolResult.from_dict(d)
    assert res.text == "a\nb" and res.is_error is True
    assert [b.type for b in res.content] == ["text", "image", "text"]


def test_call_result_structured_meta_extra() -> None:
    d = {"content": [], "structuredContent": [1, 2], "_meta": {"m": 1}, "resultType": "complete",
         "extension": "x"}
    res = CallToolResult.from_dict(d)
    assert res.structured == [1, 2]  # any JSON value (2026-07-28)
    assert res.meta == {"m": 1}
    assert res.extra == {"extension": "x"}


def test_call_result_structured_alone() -> None:
    res = CallToolResult.from_dict({"structuredContent": {"a": 1}})
    assert res.content == [] and res.structured == {"a": 1} and res.text == ""


def test_call_result_is_error_must_be_true() -> None:
    assert CallToolResult.from_dict({"content": [], "isError": "yes"}).is_error is False


def test_call_result_bad_content_raises() -> None:
    with pytest.raises(ProtocolError, match="content"):
        CallToolResult.from_dict({"content": "3"})
    with pytest.raises(ProtocolError, match="JSON object"):
        CallToolResult.from_dict(["not", "a", "dict"])  # type: ignore[arg-type]


def test_call_result_does_not_mutate_input() -> None:
    d = {"content": [{"type": "text", "text": "a", "z": 1}], "isError": False, "q": 1}
    before = copy.deepcopy(d)
    CallToolResult.from_dict(d)
    assert d == before


_TEXT = {"type": "text", "text": "hi"}


def _slow_result(d: dict[str, Any]) -> CallToolResult:
    """What ``from_dict`` built before its fast path: the dataclass constructors."""
    blocks = [TextContent(b["text"], b.get("annotations"), b.get("_meta"),
                          {k: v for k, v in b.items()
                           if k not in ("type", "text", "annotations", "_meta")}, b)
              for b in d.get("content", [])]
    meta = d.get("_meta")
    return CallToolResult(blocks, d.get("structuredContent"), d.get("isError") is True,
                          meta if isinstance(meta, dict) else None,
                          {k: v for k, v in d.items() if k not in (
                              "content", "structuredContent", "isError", "_meta",
                              "resultType")}, d)


def _fields(obj: Any) -> dict[str, Any]:
    # Every field, read one by one: a field the fast path forgot to set raises here.
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


@pytest.mark.parametrize("d", [
    {"content": [dict(_TEXT)]},
    {"content": [dict(_TEXT)], "isError": False},
    {"content": [dict(_TEXT)], "isError": True},
    {"content": [dict(_TEXT)], "isError": "yes"},
    {"content": [dict(_TEXT)], "structuredContent": {"a": 1}},
    {"content": [dict(_TEXT)], "structuredContent": None, "isError": False},
    {"content": [dict(_TEXT)], "structuredContent": [1], "isError": True},
    # Not the usual shape: these take the general path, and must come out the same too.
    {"content": [dict(_TEXT)], "_meta": {"m": 1}},
    {"content": [dict(_TEXT)], "resultType": "complete", "isError": False},
    {"content": [dict(_TEXT)], "structuredContent": 1, "other": 2},
    {"content": [dict(_TEXT), dict(_TEXT)]},
    {"content": [{"type": "text", "text": "a", "annotations": {"p": 1}}]},
    {"content": [{"type": "text", "text": "a", "z": 1}], "isError": False},
])
def test_call_result_usual_shape_is_built_like_the_constructors(d: dict[str, Any]) -> None:
    fast = CallToolResult.from_dict(d)
    slow = _slow_result(d)
    assert type(fast) is CallToolResult and fast == slow
    assert _fields(fast) == _fields(slow)
    assert [_fields(b) for b in fast.content] == [_fields(b) for b in slow.content]
    assert all(type(b) is TextContent for b in fast.content)
    assert fast.raw is d and fast.content[0].raw is d["content"][0]
    assert repr(fast) == repr(slow)
    copied = pickle.loads(pickle.dumps(fast))
    assert copied == fast and _fields(copied.content[0]) == _fields(fast.content[0])
    assert dataclasses.replace(fast, is_error=not fast.is_error).is_error is not fast.is_error
    fast.content[0].extra["k"] = 1   # each result has its own dicts
    assert CallToolResult.from_dict(d).content[0].extra == slow.content[0].extra


def test_call_result_usual_shape_rejects_odd_blocks() -> None:
    # A text block whose text is not a string, or an unknown type, is not the fast shape.
    odd = CallToolResult.from_dict({"content": [{"type": "text", "text": 3}]})
    assert type(odd.content[0]) is not TextContent
    other = CallToolResult.from_dict({"content": [{"type": "texts", "text": "x"}]})
    assert type(other.content[0]) is not TextContent


# --- resources ------------------------------------------------------------------------------

def test_resource() -> None:
    d = {"uri": "file:///a", "name": "a", "size": "big", "mimeType": "text/plain", "k": 1}
    res = Resource.from_dict(d)
    assert res.uri == "file:///a" and res.size is None and res.mime_type == "text/plain"
    assert res.extra == {"k": 1}
    with pytest.raises(ProtocolError, match="uri"):
        Resource.from_dict({"name": "a"})
    assert Resource.from_dict({"uri": "u", "name": "n", "size": True}).size is None


def test_resource_template() -> None:
    t = ResourceTemplate.from_dict({"uriTemplate": "file:///{p}", "name": "files"})
    assert t.uri_template == "file:///{p}" and t.name == "files"
    with pytest.raises(ProtocolError, match="uriTemplate"):
        ResourceTemplate.from_dict({"name": "files"})


def test_resource_contents_text_or_blob() -> None:
    blob = ResourceContents.from_dict({"uri": "u", "blob": base64.b64encode(b"\0\1").decode()})
    assert not blob.is_text and blob.data == b"\0\1"
    assert blob.bytes == b"\0\1"
    text = ResourceContents.from_dict({"uri": "u", "text": "h\u00e9"})
    assert text.is_text and text.bytes == text.data == "h\u00e9".encode()
    with pytest.raises(ProtocolError, match="neither"):
        ResourceContents.from_dict({"uri": "u"})


def test_read_resource_result() -> None:
    d = {"contents": [{"uri": "u", "text": "one"}, {"uri": "u2", "text": "two"}],
         "ttlMs": 5, "cacheScope": "public"}
    res = ReadResourceResult.from_dict(d)
    assert [c.uri for c in res.contents] == ["u", "u2"]
    assert res.text == "one\ntwo"
    assert res.extra == {}
    with pytest.raises(ProtocolError, match="contents"):
        ReadResourceResult.from_dict({})
    with pytest.raises(ProtocolError, match="list"):
        ReadResourceResult.from_dict({"contents": {}})


# --- prompts --------------------------------------------------------------------------------

def test_prompt_with_arguments() -> None:
    d = {"name": "p", "arguments": [{"name": "a", "required": True},
                                    {"name": "b", "description": "bee", "x": 1}]}
    p = Prompt.from_dict(d)
    assert [a.name for a in p.arguments] == ["a", "b"]
    assert p.arguments[0].required is True and p.arguments[1].required is False
    assert p.arguments[1].extra == {"x": 1}
    assert isinstance(p.arguments[0], PromptArgument)
    assert Prompt.from_dict({"name": "q", "arguments": "bad"}).arguments == []


def test_get_prompt_result() -> None:
    d = {"description": "d", "messages": [
        {"role": "user", "content": {"type": "text", "text": "hello"}},
        {"role": "assistant", "content": {"type": "resource_link", "uri": "u", "name": "n"}},
    ]}
    res = GetPromptResult.from_dict(d)
    assert res.description == "d"
    assert isinstance(res.messages[0], PromptMessage)
    assert isinstance(res.messages[0].content, TextContent)
    assert isinstance(res.messages[1].content, ResourceLink)
    with pytest.raises(ProtocolError, match="messages"):
        GetPromptResult.from_dict({})
    with pytest.raises(ProtocolError, match="content"):
        PromptMessage.from_dict({"role": "user"})
    with pytest.raises(ProtocolError, match="role"):
        PromptMessage.from_dict({"content": {"type": "text", "text": "x"}})


# --- completion, server info, roots ---------------------------------------------------------

def test_complete_result() -> None:
    res = CompleteResult.from_dict({"completion": {"values": ["a", "b"], "total": 10,
                                                   "hasMore": True}})
    assert (res.values, res.total, res.has_more) == (["a", "b"], 10, True)
    res = CompleteResult.from_dict({"completion": {"values": []}, "_meta": {"m": 1}, "z": 2})
    assert (res.values, res.total, res.has_more) == ([], None, False)
    assert res.meta == {"m": 1} and res.extra == {"z": 2}
    with pytest.raises(ProtocolError, match="completion"):
        CompleteResult.from_dict({})
    with pytest.raises(ProtocolError, match="values"):
        CompleteResult.from_dict({"completion": {"values": [1]}})


def test_server_info_lenient() -> None:
    info = ServerInfo.from_dict({"name": "demo", "version": "1.0", "title": "Demo",
                                 "websiteUrl": "https://x"}, protocol_version="2025-11-25",
                                instructions="use add")
    assert (info.name, info.version, info.title) == ("demo", "1.0", "Demo")
    assert info.protocol_version == "2025-11-25" and info.instructions == "use add"
    assert info.extra == {"websiteUrl": "https://x"}
    empty = ServerInfo.from_dict({"name": 3})
    assert empty.name == "" and empty.version == "" and empty.raw == {"name": 3}
    assert ServerInfo.from_dict(None).raw == {}  # type: ignore[arg-type]


def test_root_round_trip() -> None:
    assert Root("file:///w").to_dict() == {"uri": "file:///w"}
    root = Root.from_dict({"uri": "file:///w", "name": "work", "_meta": {"a": 1}, "z": 2})
    assert root.to_dict() == {"uri": "file:///w", "name": "work", "_meta": {"a": 1}, "z": 2}
    with pytest.raises(ProtocolError, match="uri"):
        Root.from_dict({"name": "x"})


def test_docs_examples_run() -> None:
    """Every Python block of docs/types.md runs as written (the docs promise it)."""
    import re

    doc = DOCS / "types.md"
    blocks = re.findall(r"```python\n(.*?)```", doc.read_text(encoding="utf-8"), re.S)
    assert len(blocks) >= 2
    for block in blocks:
        exec(compile(block, str(doc), "exec"), {})


def test_a_subclass_of_the_call_result_gets_its_own_type_for_every_shape() -> None:
    class Mine(CallToolResult):
        pass

    for d in ({"content": [_TEXT]}, {"content": [_TEXT], "isError": True},
              {"content": [], "structuredContent": {"a": 1}}):
        got = Mine.from_dict(d)
        assert type(got) is Mine
        assert got == Mine.from_dict(dict(d))
