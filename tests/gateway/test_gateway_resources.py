"""Prompts, resources, templates, completion and subscriptions across three upstreams, end to
end through ``mcpsync gateway --config``: our demo server and the feature server over stdio,
the official SDK's server over Streamable HTTP, our client as the host, both eras."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from helpers import PEERS, require_peer

import mcpsync
from gateway.helpers_gw import GATEWAY

pytestmark = pytest.mark.timeout(90)

FEATURES = PEERS / "feature_server.py"


def _argv(tmp_path: Path, official_url: str) -> list[str]:
    doc = {"mcpServers": {
        "demo": {"command": sys.executable, "args": ["-m", "mcpsync.demo"]},
        "feat": {"command": sys.executable, "args": [str(FEATURES)]},
        "official": {"url": official_url},
    }}
    path = tmp_path / "gateway.json"
    path.write_text(json.dumps(doc))
    return [*GATEWAY, str(path)]


@pytest.mark.parametrize("era", ["auto", "legacy"])
def test_prompts_resources_and_completion_of_three_upstreams(
        tmp_path: Path, era: str, official_http_server: Any) -> None:
    require_peer("mcp")
    with mcpsync.connect(_argv(tmp_path, official_http_server.url), era=era,
                         timeout=30) as client:
        assert client.era == ("modern" if era == "auto" else "legacy")
        prompts = {p.name for p in client.list_prompts()}
        assert {"feat__summarize", "official__review"} <= prompts
        uris = {r.uri for r in client.list_resources()}
        assert {"mcpgw://feat/memo://greeting", "mcpgw://feat/memo://logo",
                "mcpgw://official/memo://hello"} <= uris
        templates = {t.uri_template for t in client.list_resource_templates()}
        assert "mcpgw://feat/memo://notes/{name}" in templates

        assert client.read_resource("mcpgw://feat/memo://greeting").text == "hi there"
        read = client.read_resource("mcpgw://official/memo://hello")
        assert read.text == "hello resource"
        assert read.contents[0].uri == "mcpgw://official/memo://hello"
        assert client.read_resource("mcpgw://feat/memo://notes/x").text == "# x"

        review = client.get_prompt("official__review", {"code": "x = 1"})
        assert "Please review: x = 1" in json.dumps(review.raw)
        summary = client.get_prompt("feat__summarize", {"text": "words"})
        # The embedded resource in the prompt points through the gateway.
        assert "mcpgw://feat/memo://text" in json.dumps(summary.raw)

        assert client.complete({"type": "ref/prompt", "name": "feat__summarize"},
                               ("style", "b")).values == ["bullet"]
        notes = client.complete({"type": "ref/resource",
                                 "uri": "mcpgw://feat/memo://notes/{name}"}, ("name", "n"))
        assert notes.values[:2] == ["n0", "n1"]

        with pytest.raises(mcpsync.RemoteError, match="not a resource URI of this gateway"):
            client.read_resource("memo://greeting")
        with pytest.raises(mcpsync.RemoteError, match="no prompt named"):
            client.get_prompt("summarize", {"text": "t"})


@pytest.mark.parametrize("era", ["auto", "legacy"])
def test_a_subscription_hears_its_upstreams_update_under_the_wrapped_uri(
        tmp_path: Path, era: str, official_http_server: Any) -> None:
    require_peer("mcp")
    heard: list[str] = []
    got = threading.Event()

    def on_update(uri: str) -> None:
        heard.append(uri)
        got.set()

    with mcpsync.connect(_argv(tmp_path, official_http_server.url), era=era,
                         timeout=30) as client:
        client.list_tools()
        with client.subscribe("mcpgw://feat/memo://greeting", on_update):
            assert client.call_tool("feat__touch", {"uri": "memo://greeting"}).text == "touched"
            assert got.wait(10), "no resources/updated reached the host"
        assert heard == ["mcpgw://feat/memo://greeting"]
        # Still served after the subscription was closed.
        assert client.call_tool("demo__echo", {"text": "after"}).text == "after"
