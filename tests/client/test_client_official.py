"""The client against a server built with the official ``mcp`` SDK, in both eras.

The peer (``tests/peers/official_stdio_server.py``) asks for elicitation, sampling and roots,
which reach our callbacks as server→client requests (legacy) or ``input_required`` rounds
(modern): one set of callbacks must serve both.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import pytest
from helpers import PEERS, require_peer

import mcpsync

pytestmark = pytest.mark.timeout(60)

PEER = [sys.executable, str(PEERS / "official_stdio_server.py")]
ERAS = ["auto", "legacy"]


def _elicit(req: mcpsync.client.ElicitationRequest) -> dict[str, Any]:
    assert req.mode == "form" and req.message == "Who are you?"
    assert req.requested_schema is not None
    return {"action": "accept", "content": {"name": "Ada"}}   # age left out: default 42


def _sample(req: mcpsync.client.SamplingRequest) -> dict[str, Any]:
    assert req.max_tokens == 10
    return {"role": "assistant", "content": {"type": "text", "text": "4"}, "model": "test"}


def _connect(era: str, **options: Any) -> mcpsync.Client:
    require_peer("mcp")
    opts: dict[str, Any] = {"elicitation": _elicit, "sampling": _sample,
                            "roots": ["file:///work", mcpsync.Root("file:///data", "data")]}
    opts.update(options)
    return mcpsync.connect(PEER, era=era, **opts)


@pytest.mark.parametrize("era", ERAS)
def test_tools_resources_prompts(era: str, no_leaks: None) -> None:
    with _connect(era) as client:
        assert client.era == ("modern" if era == "auto" else "legacy")
        assert client.server_info.name == "official-peer"
        assert client.server_info.version == "9.9.9"
        assert client.instructions == "official SDK test peer"
        tools = {t.name: t for t in client.list_tools()}
        assert {"add", "echo", "boom", "greet", "think", "roots"} <= set(tools)
        assert tools["add"].output_schema is not None
        assert client.call_tool("add", {"a": 1, "b": 2}).structured == {"sum": 3.0}
        assert client.call_tool("echo", {"text": "hi"}).text == "hi"
        assert client.call_tool("boom").is_error
        assert [r.uri for r in client.list_resources()] == ["memo://hello"]
        assert [t.uri_template for t in client.list_resource_templates()] == [
            "memo://items/{item}"]
        assert client.read_resource("memo://hello").text == "hello resource"
        assert client.read_resource("memo://items/7").text == "item 7"
        with pytest.raises(mcpsync.ResourceNotFound):
            client.read_resource("memo://missing")
        prompts = client.list_prompts()
        assert [p.name for p in prompts] == ["review"]
        rendered = client.get_prompt("review", {"code": "x = 1"})
        assert "x = 1" in rendered.messages[0].content.text  # type: ignore[union-attr]


@pytest.mark.parametrize("era", ERAS)
def test_callbacks_serve_both_eras(era: str) -> None:
    with _connect(era) as client:
        assert client.call_tool("greet").text == "hello Ada (42)"
        assert client.call_tool("think").text == "model said: 4"
        assert client.call_tool("roots").text == "file:///work,file:///data"
        client.set_roots(["file:///other"])
        assert client.call_tool("roots").text == "file:///other"


@pytest.mark.parametrize("era", ERAS)
def test_missing_callback(era: str) -> None:
    with _connect(era, elicitation=None) as client:
        # The SDK checks our declared capabilities in both eras before asking.
        with pytest.raises(mcpsync.MissingCapability) as info:
            client.call_tool("greet")
        assert info.value.required_capabilities == {"elicitation": {"form": {}}}
        assert client.call_tool("echo", {"text": "usable"}).text == "usable"


@pytest.mark.parametrize("era", ERAS)
def test_rejected_callback(era: str) -> None:
    def reject(req: Any) -> dict[str, Any]:
        raise mcpsync.Rejected("no")

    with _connect(era, sampling=reject) as client:
        if era == "auto":
            with pytest.raises(mcpsync.Rejected):   # modern: the caller sees its own refusal
                client.call_tool("think")
        else:
            # Legacy: the server got -1 ("rejected by user") and passed it on to us.
            with pytest.raises(mcpsync.RemoteError) as info:
                client.call_tool("think")
            assert info.value.code == -1


@pytest.mark.parametrize("era", ERAS)
def test_callback_may_call_back_into_the_client(era: str) -> None:
    holder: dict[str, mcpsync.Client] = {}

    def elicit(req: Any) -> dict[str, Any]:
        name = holder["c"].call_tool("echo", {"text": "Nested"}).text
        return {"action": "accept", "content": {"name": name, "age": 7}}

    with _connect(era, elicitation=elicit) as client:
        holder["c"] = client
        assert client.call_tool("greet").text == "hello Nested (7)"


def test_modern_subscriptions_and_list_changed(no_leaks: None) -> None:
    updated = threading.Event()
    with _connect("auto") as client:
        assert client.era == "modern"
        handle = client.subscribe("memo://hello", lambda uri: updated.set())
        watch = client.on_list_changed("tools", lambda kind: None)
        assert client.call_tool("touch", {"uri": "memo://hello"}).text == "ok"
        assert updated.wait(5)
        second = client.subscribe("memo://items/1", lambda uri: None)  # re-opens the listen
        updated.clear()
        client.call_tool("touch", {"uri": "memo://hello"})
        assert updated.wait(5)
        for h in (handle, watch, second):
            h.close()
            h.close()


def test_legacy_subscribe_not_offered_by_official_peer() -> None:
    with _connect("legacy") as client, pytest.raises(mcpsync.CapabilityNotSupported):
        client.subscribe("memo://hello", print)


def test_output_validation() -> None:
    with _connect("auto") as client:
        client.list_tools()
        assert client._toolset.schemas.get("add")   # cached from the listing
    with _connect("auto", validate_output=False) as client:
        client.list_tools()
        assert not client._toolset.schemas


def test_listen_is_reopened_after_a_modern_restart(no_leaks: None) -> None:
    import os
    import signal

    updated = threading.Event()
    with _connect("auto") as client:
        client.subscribe("memo://hello", lambda uri: updated.set())
        first = client.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        # The next call restarts the server, re-runs discovery and re-opens the listen.
        deadline_calls = 0
        while True:
            try:
                assert client.call_tool("touch", {"uri": "memo://hello"}).text == "ok"
                break
            except mcpsync.ConnectionLost:
                deadline_calls += 1   # the death may be noticed by this very call
                assert deadline_calls < 3
        assert client.pid != first
        assert updated.wait(5)
