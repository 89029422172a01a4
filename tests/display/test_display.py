"""Short reprs and notebook rendering of the types, with server-supplied text kept inert.

The HTML is parsed with :mod:`html.parser`: a test that only searched for substrings could
miss an element or attribute that a browser would build.
"""

from __future__ import annotations

import base64
from html.parser import HTMLParser
from typing import Any

from mcpsync import (
    AudioContent,
    CallToolResult,
    GetPromptResult,
    ImageContent,
    Prompt,
    ReadResourceResult,
    Resource,
    ResourceLink,
    ResourceTemplate,
    TextContent,
    Tool,
)
from mcpsync._display import DisplayList, b64_size

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(3000)).decode()
EVIL = '<script>alert("x")</script><img src=x onerror=alert(1)>'


class _Tags(HTMLParser):
    """Every start tag with its attributes, and the text seen inside <script>."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _parse(markup: str) -> _Tags:
    parser = _Tags()
    parser.feed(markup)
    parser.close()
    return parser


def _assert_inert(markup: str) -> _Tags:
    tags = _parse(markup)
    for tag, attrs in tags.tags:
        assert tag not in ("script", "iframe", "object", "embed", "svg", "style"), markup
        for name, value in attrs.items():
            assert not name.startswith("on"), (tag, name)
            if name in ("href", "src"):
                assert value is not None
                assert value.startswith(("http://", "https://", "data:image/png;base64,",
                                         "data:audio/wav;base64,")), (tag, name, value)
        if tag == "a":
            assert attrs.get("rel") == "noopener noreferrer"
    return tags


def _tool(description: str = "Adds two numbers. " * 40) -> Tool:
    return Tool.from_dict({"name": "add", "description": description, "inputSchema": {
        "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
        "required": ["a"]}, "annotations": {"readOnlyHint": True}})


def test_tool_repr_is_one_short_line_without_raw() -> None:
    tool = _tool()
    text = repr(tool)
    assert "\n" not in text and len(text) <= 120, text
    assert "raw" not in text and "inputSchema" not in text
    assert "'add'" in text and "a*, b" in text and text.count("…") == 1
    assert len(repr(Tool.from_dict({"name": "n", "description": "d" * 5000}))) < 120


def test_binary_content_repr_shows_kind_size_and_mime_never_base64() -> None:
    image = ImageContent.from_dict({"type": "image", "data": PNG, "mimeType": "image/png"})
    audio = AudioContent.from_bytes(bytes(2048), "audio/wav")
    assert repr(image) == "ImageContent(mime_type='image/png', size=2.9 KiB)"   # 3,008 B
    assert b64_size(PNG) == 3008 and b64_size(base64.b64encode(b"ab").decode()) == 2
    assert repr(audio) == "AudioContent(mime_type='audio/wav', size=2.0 KiB)"
    result = CallToolResult.from_dict({"content": [image.raw, {"type": "text", "text": "x" * 999}]})
    text = repr(result)
    assert PNG[:20] not in text and len(text) < 300 and "…" in text


def test_every_type_has_a_repr_without_raw() -> None:
    items: list[Any] = [
        _tool(), TextContent("hi"), Resource.from_dict({"uri": "file:///a", "name": "a"}),
        ResourceTemplate.from_dict({"uriTemplate": "file:///{x}", "name": "t"}),
        Prompt.from_dict({"name": "p", "arguments": [{"name": "q", "required": True}]}),
        GetPromptResult.from_dict({"messages": [{"role": "user", "content": {
            "type": "text", "text": "hello"}}]}),
        ReadResourceResult.from_dict({"contents": [{"uri": "file:///b", "blob": PNG}]}),
    ]
    for item in items:
        text = repr(item)
        assert text.startswith(type(item).__name__ + "(") and "raw=" not in text, text
        assert PNG[:20] not in text


def test_result_html_escapes_server_text_and_refuses_javascript_links() -> None:
    result = CallToolResult.from_dict({"content": [
        {"type": "text", "text": EVIL},
        {"type": "resource_link", "uri": "javascript:alert(1)", "name": EVIL},
        {"type": "resource_link", "uri": "https://example.com/a?b=1&c=\"2\"", "name": "ok"},
        {"type": "resource", "resource": {"uri": "javascript:x", "text": EVIL}},
        {"type": "image", "data": PNG, "mimeType": "image/png"},
        {"type": "image", "data": "PHN2Zz48c2NyaXB0Pjwvc2NyaXB0Pjwvc3ZnPg==",
         "mimeType": "image/svg+xml"},
        {"type": "image", "data": "not base64 \"><script>", "mimeType": "image/png"},
        {"type": "weird", "payload": EVIL},
    ], "structuredContent": {"k": EVIL}, "isError": True})
    markup = result._repr_html_()
    tags = _assert_inert(markup)
    links = [attrs for tag, attrs in tags.tags if tag == "a"]
    assert [a["href"] for a in links] == ['https://example.com/a?b=1&c="2"']
    images = [attrs["src"] for tag, attrs in tags.tags if tag == "img"]
    assert len(images) == 1 and images[0] == f"data:image/png;base64,{PNG}"
    # the evil text is there, as text a reader sees
    assert "".join(tags.text).count('<script>alert("x")</script>') >= 3
    assert "tool error" in "".join(tags.text)


def test_media_bundles_only_for_raster_images_and_audio() -> None:
    png = ImageContent.from_dict({"type": "image", "data": PNG, "mimeType": "image/png"})
    bundle = png._repr_mimebundle_()
    assert bundle["image/png"] == PNG and "text/plain" in bundle
    for mime in ("image/jpeg", "image/gif", "image/webp"):
        assert mime in ImageContent(PNG, mime)._repr_mimebundle_()
    assert ImageContent(PNG, "image/svg+xml")._repr_mimebundle_() is None
    assert ImageContent("%%%", "image/png")._repr_mimebundle_() is None
    assert "audio/wav" in AudioContent.from_bytes(b"RIFF", "audio/wav")._repr_mimebundle_()
    assert AudioContent(PNG, "image/png")._repr_mimebundle_() is None
    svg_html = ImageContent(PNG, "image/svg+xml")._repr_html_()
    assert "<img" not in svg_html and "image/svg+xml" in svg_html


def test_lists_render_as_tables_and_stay_lists() -> None:
    tools = DisplayList([_tool(EVIL), Tool.from_dict({"name": "b"})])
    assert tools == [tools[0], tools[1]] and isinstance(tools, list)
    tags = _assert_inert(tools._repr_html_())
    assert sum(1 for tag, _ in tags.tags if tag == "tr") == 3
    resources = DisplayList([
        Resource.from_dict({"uri": "https://example.com/r", "name": EVIL}),
        Resource.from_dict({"uri": "javascript:alert(1)", "name": "bad"}),
    ])
    tags = _assert_inert(resources._repr_html_())
    assert [a["href"] for t, a in tags.tags if t == "a"] == ["https://example.com/r"]
    link = ResourceLink.from_dict({"type": "resource_link", "uri": "http://x.test/", "name": "x"})
    assert [a["href"] for t, a in _assert_inert(link._repr_html_()).tags if t == "a"] == [
        "http://x.test/"]
    _assert_inert(Prompt.from_dict({"name": EVIL, "description": EVIL})._repr_html_())
    _assert_inert(GetPromptResult.from_dict({"description": EVIL, "messages": [
        {"role": EVIL, "content": {"type": "text", "text": EVIL}}]})._repr_html_())
