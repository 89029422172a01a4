"""Clients we did not write against our Streamable HTTP server, run as its own process.

``python tests/peers/feature_server.py --http 127.0.0.1:PORT`` (``Server.run()``'s ``--http``)
serves http://127.0.0.1:PORT/mcp; then:

- the official ``mcp`` SDK (2.3.0)'s Streamable HTTP client, in both eras it speaks
  (``mode="auto"`` negotiates 2026-07-28, ``mode="legacy"`` a 2025-11-25 session): tools
  listed and called, progress, an elicitation answered by its callback, a resource read, a
  prompt;
- the MCP Inspector CLI (2.12.0, ``--cli --transport http --server-url URL``): ``tools/list``
  and ``tools/call``, in both its protocol eras.

Missing peers fail the tests under ``CI=true`` and skip them elsewhere.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import PEERS, ROOT, require_peer

from .helpers import MODERN
from .test_server_inspector import ENTRY, NODE, inspector_env, require_inspector

pytestmark = pytest.mark.timeout(90)
SERVER_INFO = "io.modelcontextprotocol/serverInfo"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, str(PEERS / "feature_server.py"), "--http",
                             f"127.0.0.1:{port}"], cwd=ROOT, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while not _listening(port):
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else b""
            assert time.monotonic() < deadline, "the feature server did not start listening"
            time.sleep(0.05)   # polling a socket that is not listening yet
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stderr:
            proc.stderr.close()


@pytest.mark.parametrize(("mode", "version"), [("auto", MODERN), ("legacy", "2025-11-25")])
def test_the_official_sdk_client_over_streamable_http(url: str, mode: str, version: str) -> None:
    anyio = require_peer("anyio")
    require_peer("mcp")
    import mcp_types as types
    from mcp import Client

    asked: list[str] = []
    progress: list[float] = []

    async def on_elicit(context: Any, params: Any) -> Any:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    async def scenario() -> None:
        async with Client(url, mode=mode, elicitation_callback=on_elicit,
                          read_timeout_seconds=20) as client:
            assert client.protocol_version == version
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert {"greet", "add", "ask_name", "count_up"} <= names
            assert (await client.call_tool("greet", {"name": "x"})).content[0].text == "hello x"
            assert (await client.call_tool("add", {"a": 2, "b": 3})).structured_content == {
                "sum": 5}
            counted = await client.call_tool("count_up", {"steps": 3},
                                             progress_callback=on_progress)
            assert counted.content[0].text == "counted to 3"
            assert (await client.call_tool("ask_name")).content[0].text == "hello Ada"
            read = await client.read_resource("memo://greeting")
            assert read.contents[0].text == "hi there"
            prompt = await client.get_prompt("summarize", {"text": "abc"})
            assert prompt.messages

    anyio.run(scenario)
    assert asked == ["Your name?"]
    assert progress == [1, 2, 3]


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_the_inspector_cli_over_streamable_http(url: str, era: str, tmp_path: Path) -> None:
    require_inspector()

    def inspect(method: str, *options: str) -> dict[str, Any]:
        argv = [str(NODE), str(ENTRY), "--cli", "--format", "json", "--protocol-era", era,
                "--transport", "http", "--server-url", url, "--method", method, *options]
        done = subprocess.run(argv, cwd=tmp_path, env=inspector_env(tmp_path),
                              capture_output=True, text=True, timeout=45,
                              stdin=subprocess.DEVNULL)
        assert done.returncode == 0, f"exit {done.returncode}: {done.stdout}\n{done.stderr}"
        reply: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        result: dict[str, Any] = reply.get("result", reply)
        return result

    listed = inspect("tools/list")
    assert {"greet", "add", "count_up"} <= {tool["name"] for tool in listed["tools"]}
    called = inspect("tools/call", "--tool-name", "add", "--tool-arg", "a=2", "b=3")
    assert called["structuredContent"] == {"sum": 5}
    greeted = inspect("tools/call", "--tool-name", "greet", "--tool-arg", "name=Ada")
    assert greeted["content"][0]["text"] == "hello Ada"
    # Which era was spoken: a 2026-07-28 result names the server in its _meta.
    assert (SERVER_INFO in greeted.get("_meta", {})) == (era == "modern")
