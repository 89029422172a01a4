"""Every content type a handler can return: the typed blocks' wire form and constructors, the
converters for tools, prompts and resources, and the blocks read back by our own client, in
process (both eras, and 2024-11-05) and from a real stdio subprocess."""

from __future__ import annotations

import base64
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from helpers import DOCS

import mcpsync
from mcpsync.errors import RemoteError
from mcpsync.server._results import to_call_tool_result, to_prompt_messages, to_read_contents
from mcpsync.types import (
    AudioContent,
    CallToolResult,
    ContentBlock,
    EmbeddedResource,
    ImageContent,
    PromptMessage,
    ResourceContents,
    ResourceLink,
    TextContent,
    content_block_from_dict,
)

# A 1x1 PNG and a few bytes that are not valid UTF-8, so a text round trip would show.
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8/5+hHgAHggJ/"
                       "PchI7wAAAABJRU5ErkJggg==")
WAV = b"RIFF\x24\x00\x00\x00WAVEfmt \xff\xfe\x00"


def convert(value: Any, version: str = "2025-11-25", *, structured: bool = False) -> Any:
    return to_call_tool_result(value, structured=structured, version=version)


# --- to_dict and the constructors --------------------------------------------------------

def test_hand_built_blocks_have_their_wire_form() -> None:
    ann, meta = {"audience": ["user"], "priority": 0.5}, {"k": 1}
    assert TextContent("hi", ann, meta, {"x-extra": 1}).to_dict() == {
        "type": "text", "text": "hi", "annotations": ann, "_meta": meta, "x-extra": 1}
    assert TextContent("hi").to_dict() == {"type": "text", "text": "hi"}
    assert ImageContent("AAAA", "image/png", ann).to_dict() == {
        "type": "image", "data": "AAAA", "mimeType": "image/png", "annotations": ann}
    assert AudioContent("AAAA", "audio/wav", meta=meta).to_dict() == {
        "type": "audio", "data": "AAAA", "mimeType": "audio/wav", "_meta": meta}
    assert ResourceLink("file:///r.txt", "r", title="R", size=3).to_dict() == {
        "type": "resource_link", "uri": "file:///r.txt", "name": "r", "title": "R", "size": 3}
    assert EmbeddedResource(ResourceContents("mem://a", "text/plain", "x"), ann).to_dict() == {
        "type": "resource", "resource": {"uri": "mem://a", "mimeType": "text/plain",
                                         "text": "x"}, "annotations": ann}
    assert ContentBlock("tool_use", {"id": "1"}).to_dict() == {"type": "tool_use", "id": "1"}


@pytest.mark.parametrize("wire", [
    {"type": "text", "text": "t", "annotations": {"priority": 1}, "future": [1]},
    {"type": "image", "data": "AAAA", "mimeType": "image/png", "_meta": {"a": 1}, "z": 0},
    {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"},
    {"type": "resource_link", "uri": "u://x", "name": "x", "icons": [], "vendor": True},
    {"type": "resource", "resource": {"uri": "u://b", "blob": "AAAA", "odd": 1}},
    {"type": "tool_use", "id": "1", "name": "n", "input": {}},
])
def test_parsed_blocks_give_back_the_dict_they_came_from(wire: dict[str, Any]) -> None:
    block = content_block_from_dict(wire)
    assert block.to_dict() is wire
    # and a copy rebuilt from the fields alone says the same (nothing lost on the way)
    rebuilt = content_block_from_dict(dict(wire))
    rebuilt.raw = {}
    if isinstance(rebuilt, EmbeddedResource):
        rebuilt.resource.raw = {}
    assert rebuilt.to_dict() == wire


def test_from_bytes_encodes_and_the_client_decodes() -> None:
    image = ImageContent.from_bytes(PNG, "image/png", annotations={"priority": 1})
    assert image.to_dict()["data"] == base64.b64encode(PNG).decode()
    assert ImageContent.from_dict(image.to_dict()).bytes == PNG
    audio = AudioContent.from_bytes(bytearray(WAV), "audio/wav")
    assert AudioContent.from_dict(audio.to_dict()).bytes == WAV
    with pytest.raises(TypeError, match="takes bytes, got str: use a text block"):
        ImageContent.from_bytes("iVBOR", "image/png")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="MIME type such as 'image/png', got 'png'"):
        ImageContent.from_bytes(PNG, "png")


def test_from_file_guesses_the_mime_type_or_says_what_to_pass(tmp_path: Path) -> None:
    png = tmp_path / "dot.png"
    png.write_bytes(PNG)
    image = ImageContent.from_file(png)
    assert (image.mime_type, image.bytes) == ("image/png", PNG)
    odd = tmp_path / "dot.unknownext"
    odd.write_bytes(PNG)
    with pytest.raises(ValueError, match=r"dot\.unknownext.*pass mime_type="):
        ImageContent.from_file(odd)
    assert ImageContent.from_file(odd, "image/png").bytes == PNG
    notes = tmp_path / "notes.txt"
    notes.write_text("hi")
    with pytest.raises(ValueError, match=r"notes\.txt' looks like text/plain, not image"):
        ImageContent.from_file(notes)
    with pytest.raises(ValueError, match="looks like image/png, not audio"):
        AudioContent.from_file(png)
    with pytest.raises(FileNotFoundError, match=r"missing\.png"):
        ImageContent.from_file(tmp_path / "missing.png")


def test_resource_contents_constructors() -> None:
    text = ResourceContents.from_text("mem://t", "héllo", "text/plain")
    assert text.to_dict() == {"uri": "mem://t", "mimeType": "text/plain", "text": "héllo"}
    blob = ResourceContents.from_bytes("mem://b", WAV)
    assert blob.to_dict() == {"uri": "mem://b", "blob": base64.b64encode(WAV).decode()}
    assert ResourceContents.from_dict(blob.to_dict()).bytes == WAV
    embedded = EmbeddedResource.from_bytes("mem://b", WAV, "audio/wav").to_dict()
    assert embedded["resource"]["mimeType"] == "audio/wav"
    assert EmbeddedResource.from_text("mem://t", "x").to_dict() == {
        "type": "resource", "resource": {"uri": "mem://t", "text": "x"}}
    with pytest.raises(TypeError, match="use from_bytes"):
        ResourceContents.from_text("mem://t", b"x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-empty str"):
        ResourceContents.from_bytes("", b"x")
    with pytest.raises(ValueError, match="'mem://n' need exactly one of 'text' and 'blob'"):
        ResourceContents("mem://n").to_dict()
    with pytest.raises(ValueError, match="exactly one"):
        ResourceContents("mem://n", text="a", blob="AAAA").to_dict()


# --- tool results --------------------------------------------------------------------------

def test_a_single_typed_block_or_contents() -> None:
    image = ImageContent.from_bytes(PNG, "image/png")
    assert convert(image) == {"content": [image.to_dict()]}
    contents = ResourceContents.from_text("mem://a", "x")
    assert convert(contents) == {"content": [{"type": "resource", "resource": contents.to_dict()}]}
    link = ResourceLink("mem://a", "a")
    assert convert(link) == {"content": [{"type": "resource_link", "uri": "mem://a",
                                          "name": "a"}]}


def test_a_list_mixing_blocks_dicts_and_strings() -> None:
    out = convert(["caption", ImageContent("AAAA", "image/png"),
                   {"type": "text", "text": "wire"}, ResourceContents.from_bytes("m://b", b"1")])
    assert out == {"content": [
        {"type": "text", "text": "caption"},
        {"type": "image", "data": "AAAA", "mimeType": "image/png"},
        {"type": "text", "text": "wire"},
        {"type": "resource", "resource": {"uri": "m://b", "blob": "MQ=="}}]}
    # a string beside a block dict is a text block too; strings alone are data, as before
    assert convert(["a", {"type": "text", "text": "b"}])["content"][0] == {
        "type": "text", "text": "a"}
    assert convert(["a", "b"]) == {"content": [{"type": "text", "text": '["a","b"]'}]}


def test_a_list_with_a_block_and_something_else_names_the_item() -> None:
    with pytest.raises(TypeError, match=r"content\[1\] is a int, not a content block"):
        convert([TextContent("a"), 3])
    with pytest.raises(TypeError, match=r"content\[1\] is bytes.*ImageContent\.from_bytes"):
        convert([TextContent("a"), b"\x89PNG"])
    with pytest.raises(ValueError, match=r"content\[1\]: an image content block has no "
                                         r"'mimeType'"):
        convert([TextContent("a"), {"type": "image", "data": "AAAA"}])


@pytest.mark.parametrize("value", [PNG, bytearray(PNG), memoryview(PNG)])
def test_bytes_are_refused_with_what_to_do(value: Any) -> None:
    with pytest.raises(TypeError) as info:
        convert(value)
    message = str(info.value)
    for hint in ("ImageContent.from_bytes(data, mime_type)", "AudioContent.from_bytes",
                 "EmbeddedResource.from_bytes(uri, data, mime_type)"):
        assert hint in message


def test_a_hand_built_call_tool_result_is_complete() -> None:
    built = CallToolResult([TextContent("a"), ImageContent("AAAA", "image/png"),
                            "plain",  # type: ignore[list-item]
                            {"type": "text", "text": "wire"}],  # type: ignore[list-item]
                           structured={"n": 1}, is_error=True, meta={"trace": "t"},
                           extra={"vendor": 1})
    assert convert(built) == {
        "content": [{"type": "text", "text": "a"},
                    {"type": "image", "data": "AAAA", "mimeType": "image/png"},
                    {"type": "text", "text": "plain"}, {"type": "text", "text": "wire"}],
        "structuredContent": {"n": 1}, "isError": True, "_meta": {"trace": "t"},
        "vendor": 1}


def test_a_hand_built_non_object_structured_value_follows_the_revision() -> None:
    built = CallToolResult([], structured=[1, 2])
    assert convert(built, "2026-07-28") == {"content": [], "structuredContent": [1, 2]}
    # 2025-11-25 types it as an object: the value goes as text, as the automatic path does
    assert convert(built, "2025-11-25") == {"content": [{"type": "text", "text": "[1,2]"}]}
    with_text = CallToolResult([TextContent("two numbers")], structured=[1, 2])
    assert convert(with_text, "2025-06-18") == {
        "content": [{"type": "text", "text": "two numbers"}]}
    with pytest.raises(TypeError, match=r"CallToolResult\.content must be a list"):
        convert(CallToolResult("nope"))  # type: ignore[arg-type]


# --- revisions ------------------------------------------------------------------------------

AUDIO = {"type": "audio", "data": "AAAA", "mimeType": "audio/wav",
         "annotations": {"audience": ["user"]}}
LINK = {"type": "resource_link", "uri": "file:///r.txt", "name": "r", "title": "Report",
        "description": "the weekly report"}


def test_audio_before_2025_03_26_is_a_text_stand_in() -> None:
    assert convert([AudioContent.from_dict(AUDIO)], "2024-11-05") == {"content": [
        {"type": "text", "text": "[audio (audio/wav) omitted: protocol 2024-11-05 has no "
                                 "audio content]", "annotations": {"audience": ["user"]}}]}
    for version in ("2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"):
        assert convert([AUDIO], version) == {"content": [AUDIO]}


def test_a_resource_link_before_2025_06_18_keeps_its_uri_as_text() -> None:
    stand_in = {"type": "text", "text": "[resource link: Report <file:///r.txt>: the weekly "
                                        "report]"}
    for version in ("2024-11-05", "2025-03-26"):
        assert convert(ResourceLink.from_dict(LINK), version) == {"content": [stand_in]}
    assert convert(ResourceLink("u://x", "x"), "2025-03-26")["content"] == [
        {"type": "text", "text": "[resource link: x <u://x>]"}]
    for version in ("2025-06-18", "2025-11-25", "2026-07-28"):
        assert convert([LINK], version) == {"content": [LINK]}


def test_a_passed_on_result_changes_only_the_blocks_the_revision_lacks() -> None:
    raw = {"content": [{"type": "text", "text": "x"}, AUDIO], "isError": True, "z": 1}
    proxied = CallToolResult.from_dict(raw)
    assert convert(proxied, "2025-11-25") == raw
    out = convert(proxied, "2024-11-05")
    assert out["content"][0] == {"type": "text", "text": "x"}
    assert out["content"][1]["text"].startswith("[audio (audio/wav) omitted")
    assert (out["isError"], out["z"]) == (True, 1)
    assert raw["content"][1] is AUDIO  # the client's result was not changed in place


# --- prompts ------------------------------------------------------------------------------

def test_prompt_messages_from_every_shape() -> None:
    assert to_prompt_messages("Summarise this.", "2025-11-25") == [
        {"role": "user", "content": {"type": "text", "text": "Summarise this."}}]
    parsed = PromptMessage.from_dict({"role": "assistant",
                                      "content": {"type": "text", "text": "parsed"}})
    out = to_prompt_messages([
        ("user", "pair"),
        ("assistant", ImageContent("AAAA", "image/png")),
        {"role": "user", "content": {"type": "text", "text": "wire"}, "x-note": 1},
        {"role": "user", "content": EmbeddedResource.from_text("mem://a", "doc")},
        PromptMessage("user", TextContent("typed")),
        parsed,
    ], "2025-11-25")
    assert out == [
        {"role": "user", "content": {"type": "text", "text": "pair"}},
        {"role": "assistant", "content": {"type": "image", "data": "AAAA",
                                          "mimeType": "image/png"}},
        {"role": "user", "content": {"type": "text", "text": "wire"}, "x-note": 1},
        {"role": "user", "content": {"type": "resource",
                                     "resource": {"uri": "mem://a", "text": "doc"}}},
        {"role": "user", "content": {"type": "text", "text": "typed"}},
        {"role": "assistant", "content": {"type": "text", "text": "parsed"}}]
    assert to_prompt_messages(PromptMessage("user", TextContent("one")), "2026-07-28") == [
        {"role": "user", "content": {"type": "text", "text": "one"}}]
    assert to_prompt_messages([], "2025-11-25") == []


def test_prompt_messages_follow_the_revision() -> None:
    out = to_prompt_messages([("user", AUDIO), ("user", LINK)], "2024-11-05")
    assert [m["content"]["type"] for m in out] == ["text", "text"]
    assert "file:///r.txt" in out[1]["content"]["text"]
    assert to_prompt_messages([("user", LINK)], "2025-06-18")[0]["content"] == LINK


def test_bad_prompt_messages_say_what_is_wrong() -> None:
    with pytest.raises(ValueError, match=r"prompt message 1 has the role 'system'; .* 'user' "
                                         r"or 'assistant'"):
        to_prompt_messages([("user", "a"), ("system", "b")], "2025-11-25")
    with pytest.raises(ValueError, match="role 'System'"):
        to_prompt_messages([{"role": "System", "content": "x"}], "2025-11-25")
    with pytest.raises(ValueError, match="needs 'role' and 'content'"):
        to_prompt_messages([{"role": "user"}], "2025-11-25")
    with pytest.raises(TypeError, match=r"pair it with a role, \('user', text\)"):
        to_prompt_messages(["a", "b"], "2025-11-25")
    with pytest.raises(TypeError, match="one message per block"):
        to_prompt_messages([("user", ["a", "b"])], "2025-11-25")
    with pytest.raises(TypeError, match="prompt message 0's content is bytes"):
        to_prompt_messages([("user", PNG)], "2025-11-25")
    with pytest.raises(TypeError, match="returned a int: return a str, or a list"):
        to_prompt_messages(3, "2025-11-25")
    with pytest.raises(ValueError, match="type 'video'"):
        to_prompt_messages([("user", {"type": "video"})], "2025-11-25")


# --- resource contents -----------------------------------------------------------------------

def test_read_contents_from_every_shape() -> None:
    assert to_read_contents("hello", "mem://a", "text/plain", "2025-11-25") == [
        {"uri": "mem://a", "mimeType": "text/plain", "text": "hello"}]
    assert to_read_contents(PNG, "mem://p", None, "2025-11-25") == [
        {"uri": "mem://p", "blob": base64.b64encode(PNG).decode()}]
    assert to_read_contents(bytearray(b"1"), "mem://p", "x/y", "2026-07-28") == [
        {"uri": "mem://p", "mimeType": "x/y", "blob": "MQ=="}]
    one = ResourceContents.from_text("mem://dir/a", "a")
    assert to_read_contents(one, "mem://dir", None, "2025-11-25") == [one.to_dict()]
    wire = {"uri": "mem://dir/b", "blob": "AAAA", "_meta": {"k": 1}}
    assert to_read_contents([one, wire], "mem://dir", None, "2025-11-25") == [
        one.to_dict(), wire]
    assert to_read_contents(wire, "mem://dir", None, "2025-11-25") == [wire]


def test_read_contents_refuse_nothing_and_bad_items() -> None:
    for nothing in (None, [], ()):
        with pytest.raises(ValueError, match="'mem://gone': the handler returned no contents; "
                                             "report a resource that does not exist as not "
                                             "found"):
            to_read_contents(nothing, "mem://gone", None, "2025-11-25")
    with pytest.raises(ValueError, match="contents 0: resource contents for 'mem://x' have "
                                         "neither"):
        to_read_contents([{"uri": "mem://x"}], "mem://x", None, "2025-11-25")
    with pytest.raises(TypeError, match=r"contents 1 is a str.*its own URI"):
        to_read_contents([ResourceContents.from_text("m://a", "a"), "b"], "m://", None,
                         "2025-11-25")
    with pytest.raises(TypeError, match="contents 0 is a int"):
        to_read_contents(3, "m://", None, "2025-11-25")


# --- end to end: our client reads what the server sent -----------------------------------------

SERVER_SOURCE = textwrap.dedent('''
    import base64
    from mcpsync import AudioContent, CallToolResult, EmbeddedResource, ImageContent
    from mcpsync import ResourceLink, TextContent
    from mcpsync.server import Server

    PNG = base64.b64decode(%r)
    WAV = %r

    def build():
        server = Server("content", "1")

        @server.tool()
        def image() -> ImageContent:
            return ImageContent.from_bytes(PNG, "image/png")

        @server.tool()
        def audio() -> AudioContent:
            return AudioContent.from_bytes(WAV, "audio/wav")

        @server.tool()
        def link() -> ResourceLink:
            return ResourceLink("file:///tmp/report.txt", "report", mime_type="text/plain")

        @server.tool()
        def embedded() -> EmbeddedResource:
            return EmbeddedResource.from_text("mem://notes", "the notes", "text/plain")

        @server.tool()
        def mixed() -> list:
            return ["caption", ImageContent.from_bytes(PNG, "image/png"),
                    {"type": "text", "text": "wire"}]

        @server.tool()
        def failed() -> CallToolResult:
            return CallToolResult([TextContent("half done"),
                                   EmbeddedResource.from_bytes("mem://log", WAV)],
                                  is_error=True)

        @server.tool()
        def raw_bytes() -> bytes:
            return PNG

        return server

    if __name__ == "__main__":
        build().serve()
''') % (base64.b64encode(PNG).decode(), WAV)


def _build_server() -> Any:
    namespace: dict[str, Any] = {"__name__": "content_server"}
    exec(compile(SERVER_SOURCE, "content_server", "exec"), namespace)
    return namespace["build"]()


def _check_every_type(client: mcpsync.Client, version: str) -> None:
    image = client.call_tool("image").content
    assert isinstance(image[0], ImageContent) and image[0].bytes == PNG
    assert image[0].mime_type == "image/png"
    audio = client.call_tool("audio").content[0]
    link = client.call_tool("link").content[0]
    if version == "2024-11-05":
        assert isinstance(audio, TextContent) and "audio (audio/wav) omitted" in audio.text
        assert isinstance(link, TextContent)
        assert link.text == "[resource link: report <file:///tmp/report.txt>]"
    else:
        assert isinstance(audio, AudioContent) and audio.bytes == WAV
        assert isinstance(link, ResourceLink)
        assert (link.uri, link.name, link.mime_type) == ("file:///tmp/report.txt", "report",
                                                         "text/plain")
    embedded = client.call_tool("embedded").content[0]
    assert isinstance(embedded, EmbeddedResource)
    assert (embedded.resource.uri, embedded.resource.text) == ("mem://notes", "the notes")
    mixed = client.call_tool("mixed")
    assert [type(b) for b in mixed.content] == [TextContent, ImageContent, TextContent]
    assert mixed.text == "caption\nwire"
    failed = client.call_tool("failed")
    assert failed.is_error and failed.text == "half done"
    log = failed.content[1]
    assert isinstance(log, EmbeddedResource) and log.resource.bytes == WAV
    with pytest.raises(RemoteError) as info:
        client.call_tool("raw_bytes")
    assert info.value.code == -32603


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("options", "version"), [
    ({"era": "legacy"}, "2025-11-25"),
    ({"protocol_version": "2024-11-05"}, "2024-11-05"),
    ({"era": "modern"}, "2026-07-28"),
])
def test_every_content_type_reaches_our_client_in_process(
        options: dict[str, Any], version: str, capsys: pytest.CaptureFixture[str]) -> None:
    with mcpsync.connect(_build_server(), **options) as client:
        assert client.protocol_version == version
        _check_every_type(client, version)
    # the author's mistake is explained where the server logs, not to the caller
    assert "ImageContent.from_bytes(data, mime_type)" in capsys.readouterr().err


@pytest.mark.timeout(60)
def test_every_content_type_over_stdio_from_a_subprocess(tmp_path: Path) -> None:
    script = tmp_path / "content_server.py"
    script.write_text(SERVER_SOURCE)
    stderr: list[str] = []
    with mcpsync.connect([sys.executable, str(script)], era="legacy",
                         on_stderr=stderr.append) as client:
        _check_every_type(client, client.protocol_version)
    assert any("ImageContent.from_bytes(data, mime_type)" in line for line in stderr), stderr


@pytest.mark.timeout(60)
def test_the_returning_content_example_in_docs_server_md_runs(tmp_path: Path) -> None:
    doc = (DOCS / "server.md").read_text(encoding="utf-8")
    section = doc.split("## Returning content", 1)[1]
    block = section.split("```python\n", 1)[1].split("```", 1)[0]
    script = tmp_path / "gallery.py"
    script.write_text(block, encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=30, cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stderr
    # each printed line is the comment beside the print() that wrote it
    expected = [line.split("# ", 1)[1] for line in block.splitlines()
                if line.lstrip().startswith("print(")]
    assert proc.stdout.splitlines() == expected
