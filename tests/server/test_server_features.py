"""Every server feature, in both eras, in process and over stdio, driven by our own client.

The server is ``tests/peers/feature_server.py``: the same code is served in this process
(``mcpsync.connect(server)``) and as a real subprocess, so each assertion below holds for both
paths. The official SDK's client drives the same server in ``test_server_official_client``.
"""

from __future__ import annotations

import base64
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import PEERS
from peers import feature_server

import mcpsync
from mcpsync.errors import MissingCapability, RemoteError, ResourceNotFound

ERAS = ["legacy", "modern"]
HOW = ["memory", "stdio"]


def elicit(request: Any) -> dict[str, Any]:
    if request.message == "Your name?":
        return {"action": "accept", "content": {"name": "Ada"}}
    if request.message == "Name?":
        return {"action": "accept", "content": {"v": "Ada"}}
    if request.message == "Colour?":
        return {"action": "accept", "content": {"v": "blue"}}
    if request.message == "Password?":
        return {"action": "accept", "content": {"pw": "open"}}
    return {"action": "decline"}


def sample(request: Any) -> dict[str, Any]:
    question = request.messages[0]["content"]["text"]
    return {"role": "assistant", "model": "echo-1",
            "content": {"type": "text", "text": f"you asked {question!r}"}}


def _connect(how: str, era: str, server: mcpsync.Server | None = None,
             **options: Any) -> mcpsync.Client:
    target: Any = server if how == "memory" else [sys.executable,
                                                    str(PEERS / "feature_server.py")]
    defaults: dict[str, Any] = {"era": era, "elicitation": elicit, "sampling": sample,
                                "roots": ["file:///work", "file:///data"], "timeout": 20}
    defaults.update(options)
    return mcpsync.connect(target, **defaults)


@pytest.fixture(params=[(h, e) for h in HOW for e in ERAS], ids=lambda p: f"{p[0]}-{p[1]}")
def client(request: pytest.FixtureRequest) -> Iterator[mcpsync.Client]:
    how, era = request.param
    with _connect(how, era, feature_server.build()) as c:
        yield c


# -- tools -------------------------------------------------------------------------------

def test_tools_list_and_results(client: mcpsync.Client) -> None:
    tools = {t.name: t for t in client.list_tools()}
    assert tools["add"].annotations == {"readOnlyHint": True}
    assert tools["add"].output_schema is not None
    assert client.call_tool("greet", {"name": "Bo"}).content[0].text == "hello Bo"
    added = client.call_tool("add", {"a": 1, "b": 2})
    assert added.structured == {"sum": 3}
    pic = client.call_tool("picture")
    assert pic.content[0].bytes == feature_server.PNG
    assert pic.content[1].resource.text == "hi there"
    failed = client.call_tool("fail")
    assert failed.is_error and failed.content[0].text == "RuntimeError: on purpose"


def test_a_refusal_is_a_json_rpc_error_with_the_handlers_code(client: mcpsync.Client) -> None:
    with pytest.raises(RemoteError) as info:
        client.call_tool("refuse", {"code": -32010})
    assert info.value.code == -32010
    assert info.value.data == {"why": "test"}
    assert "refused on purpose" in str(info.value)
    assert client.call_tool("greet", {"name": "x"}).content[0].text == "hello x"  # alive


# -- resources ---------------------------------------------------------------------------

def test_resources_read_text_blob_and_templates(client: mcpsync.Client) -> None:
    listed = {r.uri: r for r in client.list_resources()}
    assert set(listed) == {"memo://greeting", "memo://logo", "memo://secret"}
    assert listed["memo://greeting"].mime_type == "text/plain"
    templates = client.list_resource_templates()
    assert [t.uri_template for t in templates] == ["memo://notes/{name}"]
    text = client.read_resource("memo://greeting").contents[0]
    assert (text.text, text.mime_type) == ("hi there", "text/plain")
    blob = client.read_resource("memo://logo").contents[0]
    assert base64.b64decode(blob.blob or "") == feature_server.PNG
    assert blob.mime_type == "image/png"
    note = client.read_resource("memo://notes/today").contents[0]
    assert (note.uri, note.text, note.mime_type) == ("memo://notes/today", "# today",
                                                     "text/markdown")


@pytest.mark.parametrize("uri", ["memo://nothing", "memo://notes/missing"])
def test_a_missing_resource_is_not_found_in_each_eras_code(client: mcpsync.Client,
                                                           uri: str) -> None:
    with pytest.raises(ResourceNotFound) as info:
        client.read_resource(uri)
    assert info.value.code == (-32602 if client.era == "modern" else -32002)
    assert info.value.data == {"uri": uri}


def test_a_resource_handler_can_ask_for_input(client: mcpsync.Client) -> None:
    assert client.read_resource("memo://secret").contents[0].text == "the secret"


# -- prompts and completion ----------------------------------------------------------------

def test_prompts_with_arguments_resources_and_images(client: mcpsync.Client) -> None:
    (prompt,) = client.list_prompts()
    assert prompt.name == "summarize"
    assert [(a.name, a.required) for a in prompt.arguments] == [("text", True),
                                                                ("style", False)]
    got = client.get_prompt("summarize", {"text": "long story", "style": "bullet"})
    assert got.description == "Summarise a text"
    roles = [m.role for m in got.messages]
    assert roles == ["user", "user", "assistant"]
    assert got.messages[0].content.text == "Summarise in a bullet style:"
    assert got.messages[1].content.resource.text == "long story"
    assert got.messages[2].content.bytes == feature_server.PNG
    with pytest.raises(RemoteError) as info:
        client.get_prompt("summarize", {})
    assert info.value.code == -32602 and "text" in str(info.value)
    with pytest.raises(RemoteError) as unknown:
        client.get_prompt("nope")
    assert unknown.value.code == -32602


def test_completion_of_prompt_arguments_and_template_variables(client: mcpsync.Client) -> None:
    got = client.complete({"type": "ref/prompt", "name": "summarize"}, ("style", "b"))
    assert got.values == ["bullet"]
    many = client.complete("memo://notes/{name}", ("name", "n"))
    assert len(many.values) == 100 and many.has_more is True and many.total == 150
    with pytest.raises(RemoteError) as info:
        client.complete({"type": "ref/prompt", "name": "nope"}, ("x", ""))
    assert info.value.code == -32602


# -- asking the client ---------------------------------------------------------------------

def test_elicitation_sampling_and_roots_through_one_api(client: mcpsync.Client) -> None:
    assert client.call_tool("ask_name").content[0].text == "hello Ada"
    assert client.call_tool("ask_twice").content[0].text == "Ada likes blue"
    llm = client.call_tool("ask_llm", {"question": "why?"}).content[0].text
    assert llm == "echo-1: you asked 'why?'"
    assert client.call_tool("roots").structured is None
    assert "file:///data" in client.call_tool("roots").content[0].text


def test_several_asks_at_once(client: mcpsync.Client) -> None:
    text = client.call_tool("ask_many").content[0].text
    assert text == "Ada | you asked 'why?' | 2 roots"


@pytest.mark.parametrize("era", ERAS)
def test_several_asks_take_one_round(era: str) -> None:
    server = feature_server.build()
    with _connect("memory", era, server) as c:
        c.call_tool("ask_many")
    assert server.runs["ask_many"] == (2 if era == "modern" else 1)  # type: ignore[attr-defined]


@pytest.mark.parametrize("era", ERAS)
def test_modern_rounds_rerun_the_handler_and_legacy_blocks(era: str) -> None:
    server = feature_server.build()
    with _connect("memory", era, server) as c:
        assert c.call_tool("ask_twice").content[0].text == "Ada likes blue"
    runs = server.runs["ask_twice"]  # type: ignore[attr-defined]
    # Legacy: one run that blocked twice. Modern: a run per round (two asks, three rounds).
    assert runs == (3 if era == "modern" else 1)


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("era", ERAS)
def test_asking_for_an_undeclared_capability(how: str, era: str) -> None:
    with _connect(how, era, feature_server.build(), elicitation=None, sampling=None) as c:
        if era == "modern":
            with pytest.raises(MissingCapability) as info:
                c.call_tool("ask_name")
            assert info.value.code == -32021
            assert info.value.data == {"requiredCapabilities": {"elicitation": {"form": {}}}}
        else:   # legacy: CapabilityNotSupported in the handler, here uncaught: isError
            result = c.call_tool("ask_llm", {"question": "q"})
            assert result.is_error
            assert "CapabilityNotSupported" in result.content[0].text
            assert "sampling" in result.content[0].text


# -- changes while serving -----------------------------------------------------------------

def test_tools_added_and_removed_live_are_announced(client: mcpsync.Client) -> None:
    changed = threading.Event()
    with client.on_list_changed("tools", lambda kind: changed.set()):
        client.call_tool("add_extra", {"name": "extra"})
        assert changed.wait(5), "no tools/list_changed"
        assert "extra" in {t.name for t in client.list_tools()}
        assert client.call_tool("extra").content[0].text == "I am extra"
        changed.clear()
        assert client.call_tool("remove_extra", {"name": "extra"}).content[0].text == "true"
        assert changed.wait(5)
        assert "extra" not in {t.name for t in client.list_tools()}


def test_resource_subscriptions_get_updates(client: mcpsync.Client) -> None:
    seen: list[str] = []
    got = threading.Event()

    def updated(uri: str) -> None:
        seen.append(uri)
        got.set()

    with client.subscribe("memo://greeting", updated):
        client.call_tool("touch", {"uri": "memo://logo"})      # not subscribed: nothing
        client.call_tool("touch", {"uri": "memo://greeting"})
        assert got.wait(5), "no resources/updated"
    assert seen == ["memo://greeting"]


# -- run() -------------------------------------------------------------------------------

def test_run_serves_stdio_and_http() -> None:
    import json
    import signal
    import socket
    import subprocess

    script = str(PEERS / "feature_server.py")
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"}}}
    served = subprocess.run([sys.executable, script], input=json.dumps(init).encode() + b"\n",
                            capture_output=True, timeout=20, check=False)
    assert served.returncode == 0, served.stderr
    assert json.loads(served.stdout)["result"]["serverInfo"]["name"] == "features"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen([sys.executable, script, "--http", f"127.0.0.1:{port}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()   # "features: serving MCP at http://..." once listening
        assert f"http://127.0.0.1:{port}/mcp".encode() in line, line
        for era in ERAS:
            with mcpsync.connect(f"http://127.0.0.1:{port}/mcp", era=era, timeout=20) as c:
                assert c.call_tool("greet", {"name": "web"}).content[0].text == "hello web"
        proc.send_signal(signal.SIGINT)   # Ctrl-C: a clean stop
        out, _ = proc.communicate(timeout=20)
        assert proc.returncode == 0 and out == b""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    bad = subprocess.run([sys.executable, script, "--http", "nowhere"], capture_output=True,
                         timeout=20, check=False)
    assert bad.returncode == 2 and b"HOST:PORT" in bad.stderr
