"""The gateway in front of HTTP upstreams: the official SDK's server in both eras,
server-everything over Streamable HTTP, and the fault server, which records what reached it
(each upstream's own credentials, nothing else)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from http_peers.everything import EverythingServer
from http_peers.fault_server import FaultServer, Scripted

import mcpsync
from gateway.helpers_gw import GATEWAY

pytestmark = pytest.mark.timeout(90)


def _config(tmp_path: Path, entry: dict[str, Any]) -> list[str]:
    path = tmp_path / "gateway.json"
    path.write_text(json.dumps({"mcpServers": {"remote": entry}}))
    return [*GATEWAY, str(path)]


@pytest.mark.parametrize("era", ["auto", "legacy"])
@pytest.mark.parametrize("official_http_server", ["json-stateless", "sse-stateful"],
                         indirect=True)
def test_official_http_server_through_the_gateway(tmp_path: Path, era: str,
                                                  official_http_server: Any) -> None:
    argv = _config(tmp_path, {"url": official_http_server.url})
    with mcpsync.connect(argv, era=era) as client:
        assert client.era == ("modern" if era == "auto" else "legacy")
        assert {"add", "echo"} <= {t.name for t in client.list_tools()}
        assert client.call_tool("add", {"a": 1, "b": 2}).structured == {"sum": 3.0}
        assert client.call_tool("echo", {"text": "via http"}).text == "via http"


def test_everything_over_streamable_http(tmp_path: Path,
                                         everything_server: EverythingServer) -> None:
    argv = _config(tmp_path, {"url": everything_server.url})
    with mcpsync.connect(argv, era="legacy", timeout=30) as client:
        assert client.call_tool("echo", {"message": "hi"}).text.endswith("hi")


def test_each_upstream_gets_its_own_credentials_and_nothing_else(
        tmp_path: Path, fault_server: FaultServer) -> None:
    argv = _config(tmp_path, {"url": fault_server.url,
                              "headers": {"Authorization": "Bearer upstream-only-token",
                                          "X-Team": "blue"}})
    with mcpsync.connect(argv, era="legacy") as client:
        client.list_tools()
    posts = [r for r in fault_server.requests if r.rpc_method is not None]
    assert posts, "nothing reached the upstream"
    for request in posts:
        assert request.header("Authorization") == "Bearer upstream-only-token"
        assert request.header("X-Team") == "blue"


def test_an_http_failure_below_json_rpc_fails_that_call_naming_the_upstream(
        tmp_path: Path, fault_server: FaultServer) -> None:
    argv = _config(tmp_path, {"url": fault_server.url})
    with mcpsync.connect(argv, era="legacy") as client:
        fault_server.faults.script.append(Scripted(503, [], b"down for a moment",
                                                   "text/plain", "tools/list"))
        with pytest.raises(mcpsync.RemoteError) as info:
            client.list_tools()
        assert "upstream 'remote'" in str(info.value)
        assert "503" in str(info.value)
        assert "echo" in {t.name for t in client.list_tools()}   # the session is still up


def test_a_number_json_cannot_carry_fails_that_call_and_keeps_the_upstream(
        tmp_path: Path, fault_server: FaultServer) -> None:
    """Our HTTP transport decodes ``1E400`` to infinity, which cannot be encoded again: that
    answer fails its call, naming the upstream, and the next calls are answered (the reader
    of that upstream used to die on it, leaving every later call waiting)."""
    def huge(request: Any) -> bytes:
        rid = json.dumps(json.loads(request.body)["id"])
        return (b'{"jsonrpc":"2.0","id":' + rid.encode() + b',"result":{"content":[],'
                b'"x-huge":1E400}}')

    argv = _config(tmp_path, {"url": fault_server.url})
    with mcpsync.connect(argv, era="legacy", timeout=20) as client:
        assert "echo" in {t.name for t in client.list_tools()}
        fault_server.faults.script.append(Scripted(200, [], huge, "application/json",
                                                   "tools/call"))
        with pytest.raises(mcpsync.RemoteError) as info:
            client.call_tool("echo", {"text": "x"})
        assert "upstream 'remote'" in str(info.value) and "double" in str(info.value)
        assert client.call_tool("echo", {"text": "after"}).text == "after"


def test_mcp_name_agrees_with_the_rewritten_body_at_a_modern_upstream(tmp_path: Path) -> None:
    """Aggregated, the host calls ``up__echo`` and reads ``mcpgw://up/memo://x``; the
    2026-07-28 upstream (our server, which refuses a request whose ``Mcp-Name`` differs from
    its body) gets ``echo`` and ``memo://x`` in both."""
    import sys

    from mcpsync.server import Server
    from mcpsync.server.http import WsgiServer

    server = Server("named", "1")

    @server.tool()
    def echo(text: str) -> str:
        """Answer with ``text``."""
        return text

    @server.resource("memo://x")
    def memo() -> str:
        """A memo."""
        return "memo"

    inner = server.wsgi_app()
    seen: list[tuple[str | None, str | None]] = []

    def recording(environ: dict[str, Any], start: Any) -> Any:
        seen.append((environ.get("HTTP_MCP_METHOD"), environ.get("HTTP_MCP_NAME")))
        return inner(environ, start)

    http = WsgiServer(recording, "127.0.0.1", 0, name="test-named")
    http.start()
    try:
        path = tmp_path / "gateway.json"
        path.write_text(json.dumps({"mcpServers": {
            "up": {"url": http.url + "/mcp"},
            "demo": {"command": sys.executable, "args": ["-m", "mcpsync.demo"]}}}))
        with mcpsync.connect([*GATEWAY, str(path)], era="modern") as client:
            assert "up__echo" in {t.name for t in client.list_tools()}
            assert client.call_tool("up__echo", {"text": "hi"}).text == "hi"
            assert "mcpgw://up/memo://x" in {r.uri for r in client.list_resources()}
            assert client.read_resource("mcpgw://up/memo://x").contents[0].text == "memo"
    finally:
        http.close()
    assert ("tools/call", "echo") in seen and ("resources/read", "memo://x") in seen
