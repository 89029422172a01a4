"""Every server feature driven by a client we did not write: the official ``mcp`` SDK.

The server is ``tests/peers/feature_server.py`` run as a real stdio process; our own client
drives the same server in ``test_server_features``. Each test runs once per era of the
official client: ``mode="auto"`` probes ``server/discover`` and speaks 2026-07-28,
``mode="legacy"`` does the ``initialize`` handshake (2025-11-25).

What the official client must do by itself is the point here: in 2026-07-28 a handler that
asks the client (elicitation, sampling, roots) answers ``input_required``, and the official
client runs the rounds through its callbacks and resends the request with the answers and the
sealed ``requestState``; in legacy the same callbacks answer server-to-client requests. Change
notifications arrive through ``Client.listen()`` (``subscriptions/listen``) in 2026-07-28 and
through ``message_handler`` after ``subscribe_resource`` in legacy.
"""

from __future__ import annotations

import base64
import json
import sys
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from helpers import PEERS, require_peer
from peers.feature_server import PNG

MODES = ["auto", "legacy"]
VERSIONS = {"auto": "2026-07-28", "legacy": "2025-11-25"}
# A missing resource: -32602 in 2026-07-28, the older -32002 before it.
NOT_FOUND = {"auto": -32602, "legacy": -32002}
ELICIT_ANSWERS = {"Your name?": {"name": "Ada"}, "Name?": {"v": "Ada"},
                  "Colour?": {"v": "blue"}, "Password?": {"pw": "open"}}

pytestmark = [pytest.mark.timeout(60), pytest.mark.parametrize("mode", MODES)]


class Asked:
    """What the server asked this client through the official callbacks, and how to answer."""

    def __init__(self) -> None:
        self.elicitations: list[tuple[str, dict[str, Any]]] = []
        self.samplings: list[Any] = []
        self.roots = 0
        self.decline = False


@asynccontextmanager
async def official(mode: str, asked: Asked | None = None, **options: Any) -> AsyncIterator[Any]:
    """An official ``mcp.Client`` on a fresh feature server; callbacks record into ``asked``."""
    require_peer("mcp")
    import mcp_types as types
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    seen = asked if asked is not None else Asked()

    async def on_elicit(context: Any, params: Any) -> Any:
        seen.elicitations.append((params.message, dict(params.requested_schema)))
        if seen.decline:
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content=ELICIT_ANSWERS[params.message])

    async def on_sample(context: Any, params: Any) -> Any:
        seen.samplings.append(params)
        question = params.messages[0].content.text
        return types.CreateMessageResult(role="assistant", model="echo-1",
                                         content=types.TextContent(type="text",
                                                                   text=f"you asked {question!r}"))

    async def on_roots(context: Any) -> Any:
        seen.roots += 1
        return types.ListRootsResult(roots=[types.Root(uri="file:///work"),
                                            types.Root(uri="file:///data", name="data")])

    params = StdioServerParameters(command=sys.executable,
                                   args=[str(PEERS / "feature_server.py")])
    async with Client(params, mode=mode, elicitation_callback=on_elicit,
                      sampling_callback=on_sample, list_roots_callback=on_roots,
                      read_timeout_seconds=20, **options) as client:
        assert client.protocol_version == VERSIONS[mode]
        assert client.server_info is not None and client.server_info.name == "features"
        yield client


def run(scenario: Any, mode: str) -> Any:
    anyio = require_peer("anyio")
    return anyio.run(scenario, mode)


def text(result: Any) -> str:
    assert not result.is_error, result
    return str(result.content[0].text)


# -- tools -------------------------------------------------------------------------------

def test_tools_list_and_call_structured_image_and_errors(mode: str) -> None:
    from mcp.shared.exceptions import MCPError

    async def scenario(mode: str) -> None:
        async with official(mode) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert {"greet", "add", "picture", "ask_name", "count_up"} <= set(tools)
            add = tools["add"]
            assert add.output_schema == {"type": "object", "required": ["sum"],
                                         "properties": {"sum": {"type": "number"}}}
            assert add.annotations is not None and add.annotations.read_only_hint is True
            assert tools["greet"].input_schema["required"] == ["name"]

            assert text(await client.call_tool("greet", {"name": "Bo"})) == "hello Bo"
            added = await client.call_tool("add", {"a": 1, "b": 2.5})
            assert added.structured_content == {"sum": 3.5}
            assert json.loads(text(added)) == {"sum": 3.5}

            picture = await client.call_tool("picture")
            image, embedded = picture.content
            assert (image.type, image.mime_type) == ("image", "image/png")
            assert base64.b64decode(image.data) == PNG
            assert embedded.type == "resource"
            assert (embedded.resource.uri, embedded.resource.text) == ("memo://greeting",
                                                                       "hi there")

            failed = await client.call_tool("fail")
            assert failed.is_error is True
            assert failed.content[0].text == "RuntimeError: on purpose"
            with pytest.raises(MCPError) as refused:
                await client.call_tool("refuse", {"code": -32010})
            assert refused.value.error.code == -32010
            assert refused.value.error.data == {"why": "test"}
            assert "refused on purpose" in refused.value.error.message

    run(scenario, mode)


# -- resources ---------------------------------------------------------------------------

def test_resources_templates_text_blob_and_not_found(mode: str) -> None:
    from mcp.shared.exceptions import MCPError

    async def scenario(mode: str) -> None:
        async with official(mode) as client:
            listed = {str(r.uri): r for r in (await client.list_resources()).resources}
            assert set(listed) == {"memo://greeting", "memo://logo", "memo://secret"}
            assert listed["memo://greeting"].mime_type == "text/plain"
            assert listed["memo://greeting"].description == "a greeting"
            templates = (await client.list_resource_templates()).resource_templates
            assert [(t.uri_template, t.mime_type) for t in templates] == [
                ("memo://notes/{name}", "text/markdown")]

            greeting = (await client.read_resource("memo://greeting")).contents
            assert [(str(c.uri), c.mime_type, c.text) for c in greeting] == [
                ("memo://greeting", "text/plain", "hi there")]
            logo = await client.read_resource("memo://logo")
            (blob,) = logo.contents
            assert (blob.mime_type, base64.b64decode(blob.blob)) == ("image/png", PNG)
            (note,) = (await client.read_resource("memo://notes/today")).contents
            assert (str(note.uri), note.mime_type, note.text) == ("memo://notes/today",
                                                                  "text/markdown", "# today")
            if mode == "auto":   # the caching hints exist only in 2026-07-28
                assert (logo.ttl_ms, logo.cache_scope) == (5000, "private")

            for uri in ("memo://nothing", "memo://notes/missing"):
                with pytest.raises(MCPError) as missing:
                    await client.read_resource(uri)
                assert missing.value.error.code == NOT_FOUND[mode], uri
                assert missing.value.error.data == {"uri": uri}

    run(scenario, mode)


# -- prompts and completion --------------------------------------------------------------

def test_prompts_with_arguments_and_completion(mode: str) -> None:
    import mcp_types as types
    from mcp.shared.exceptions import MCPError

    async def scenario(mode: str) -> None:
        async with official(mode) as client:
            (prompt,) = (await client.list_prompts()).prompts
            assert (prompt.name, prompt.description) == ("summarize", "Summarise a text")
            assert [(a.name, bool(a.required)) for a in prompt.arguments or []] == [
                ("text", True), ("style", False)]

            got = await client.get_prompt("summarize", {"text": "long story", "style": "bullet"})
            assert got.description == "Summarise a text"
            assert [m.role for m in got.messages] == ["user", "user", "assistant"]
            first, embedded, image = (m.content for m in got.messages)
            assert first.text == "Summarise in a bullet style:"
            assert (str(embedded.resource.uri), embedded.resource.text) == ("memo://text",
                                                                            "long story")
            assert (image.mime_type, base64.b64decode(image.data)) == ("image/png", PNG)
            default = await client.get_prompt("summarize", {"text": "t"})
            assert default.messages[0].content.text == "Summarise in a short style:"
            with pytest.raises(MCPError) as missing:
                await client.get_prompt("summarize", {})
            assert missing.value.error.code == -32602
            assert "text" in missing.value.error.message

            styles = await client.complete(types.PromptReference(type="ref/prompt",
                                                                 name="summarize"),
                                           {"name": "style", "value": "b"})
            assert styles.completion.values == ["bullet"]
            notes = await client.complete(
                types.ResourceTemplateReference(type="ref/resource", uri="memo://notes/{name}"),
                {"name": "name", "value": "n"})
            assert notes.completion.values == [f"n{i}" for i in range(100)]
            assert (notes.completion.total, notes.completion.has_more) == (150, True)

    run(scenario, mode)


# -- asking the client -------------------------------------------------------------------

def test_elicitation_sampling_and_roots_through_the_official_callbacks(mode: str) -> None:
    async def scenario(mode: str) -> None:
        asked = Asked()
        async with official(mode, asked) as client:
            assert text(await client.call_tool("ask_name")) == "hello Ada"
            assert asked.elicitations == [("Your name?", {
                "type": "object", "properties": {"name": {"type": "string"}},
                "required": ["name"]})]
            assert text(await client.call_tool("ask_twice")) == "Ada likes blue"
            assert [m for m, _ in asked.elicitations[1:]] == ["Name?", "Colour?"]

            llm = text(await client.call_tool("ask_llm", {"question": "why?"}))
            assert llm == "echo-1: you asked 'why?'"
            (sampled,) = asked.samplings
            assert (sampled.system_prompt, sampled.max_tokens) == ("be brief", 50)
            assert [(m.role, m.content.text) for m in sampled.messages] == [("user", "why?")]

            roots = await client.call_tool("roots")
            assert json.loads(text(roots)) == ["file:///work", "file:///data"]
            assert asked.roots == 1

            # A resource handler may ask too: the official client drives read_resource's rounds.
            secret = (await client.read_resource("memo://secret")).contents[0]
            assert secret.text == "the secret"
            assert asked.elicitations[-1][0] == "Password?"

            asked.decline = True
            assert text(await client.call_tool("ask_name")) == "no name (decline)"

            # 2026-07-28 runs a handler once per round (ask_twice: two asks, three runs), and
            # each round's result had to reach the client; legacy blocks one run on each ask.
            runs = json.loads(text(await client.call_tool("handler_runs")))
            if mode == "auto":
                assert runs == {"ask_name": 4, "ask_twice": 3, "ask_llm": 2}
            else:
                assert runs == {"ask_name": 2, "ask_twice": 1, "ask_llm": 1}

    run(scenario, mode)


# -- notifications -----------------------------------------------------------------------

def test_logging_and_progress(mode: str) -> None:
    async def scenario(mode: str) -> None:
        logs: list[tuple[str, Any]] = []
        progress: list[tuple[float, float | None, str | None]] = []

        async def on_log(params: Any) -> None:
            logs.append((params.level, params.data))

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append((value, total, message))

        # 2026-07-28: each request opts in with a level in _meta (the client's log_level);
        # legacy: logging/setLevel sets the session's threshold (no logs before it).
        options: dict[str, Any] = {"log_level": "debug"} if mode == "auto" else {}
        async with official(mode, logging_callback=on_log, **options) as client:
            assert text(await client.call_tool("log_some")) == "logged"
            if mode == "legacy":
                assert logs == []   # no level asked for yet: no log message

                with warnings.catch_warnings():   # deprecated by the SDK, as in 2026-07-28
                    warnings.simplefilter("ignore")
                    await client.set_logging_level("debug")
                assert text(await client.call_tool("log_some")) == "logged"
            assert logs == [("debug", "a debug message"), ("info", "a info message"),
                            ("error", "a error message")]

            done = await client.call_tool("count_up", {"steps": 3}, progress_callback=on_progress)
            assert text(done) == "counted to 3"
            assert progress == [(1.0, 3.0, "step 1/3"), (2.0, 3.0, "step 2/3"),
                                (3.0, 3.0, "step 3/3")]

    run(scenario, mode)


def test_list_changed_and_resource_updates(mode: str) -> None:
    anyio = require_peer("anyio")

    async def scenario(mode: str) -> None:
        got: list[Any] = []

        async def on_message(message: Any) -> None:
            got.append(message)

        async with official(mode, message_handler=on_message) as client:
            before = {tool.name for tool in (await client.list_tools()).tools}
            assert "extra" not in before
            if mode == "auto":
                await modern_changes(client)
            else:
                await legacy_changes(client, got)
            # The listing is fetched again after the change (2026-07-28: not served from the
            # client's cache, which the server's ttlMs would otherwise allow for a minute).
            after = {tool.name for tool in (await client.list_tools()).tools}
            assert after == before | {"extra"}
            assert text(await client.call_tool("extra")) == "I am extra"

    async def modern_changes(client: Any) -> None:
        from mcp.client.subscriptions import ResourceUpdated, ToolsListChanged

        async with client.listen(tools_list_changed=True,
                                 resource_subscriptions=["memo://greeting"]) as sub:
            assert sub.honored.tools_list_changed is True
            assert sub.honored.resource_subscriptions == ["memo://greeting"]
            await client.call_tool("add_extra", {"name": "extra"})
            with anyio.fail_after(5):
                assert await sub.__anext__() == ToolsListChanged()
            await client.call_tool("touch", {"uri": "memo://logo"})       # not subscribed
            await client.call_tool("touch", {"uri": "memo://greeting"})
            with anyio.fail_after(5):
                assert await sub.__anext__() == ResourceUpdated(uri="memo://greeting")

    async def legacy_changes(client: Any, got: list[Any]) -> None:
        import mcp_types as types

        with warnings.catch_warnings():   # deprecated by the SDK because 2026-07-28 removed it
            warnings.simplefilter("ignore")
            await client.subscribe_resource("memo://greeting")
        await client.call_tool("add_extra", {"name": "extra"})
        await client.call_tool("touch", {"uri": "memo://logo"})           # not subscribed
        await client.call_tool("touch", {"uri": "memo://greeting"})
        with anyio.fail_after(5):
            while len(got) < 2:
                await anyio.sleep(0.01)
        listed, updated = got
        assert isinstance(listed, types.ToolListChangedNotification)
        assert isinstance(updated, types.ResourceUpdatedNotification)
        assert str(updated.params.uri) == "memo://greeting"

    run(scenario, mode)
