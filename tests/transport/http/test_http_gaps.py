"""The HTTP transport's remaining rules, against the real loopback fault server.

Subscriptions restored after a session-expiry 404, the one retry of a connection
error on ``*/list`` and ``resources/read``, era re-detection, forcing HTTP+SSE.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from http_peers.fault_server import (
    MODERN_VERSION,
    FaultServer,
    RecordedRequest,
    Scripted,
    rpc_error,
)

import mcpsync
from mcpsync.config import ServerConfig
from mcpsync.errors import ConfigError, ConnectionLost, MCPError, RemoteError, TransportError
from mcpsync.transport.http import _watchdog as _http_watchdog

pytestmark = pytest.mark.timeout(30)


def _posts(server: FaultServer, method: str) -> list[RecordedRequest]:
    return [r for r in server.requests if r.method == "POST" and r.rpc_method == method]


def _legacy(server: FaultServer, **faults: Any) -> FaultServer:
    server.faults.era = "legacy"
    for key, value in faults.items():
        setattr(server.faults, key, value)
    return server


def test_404_restores_resource_subscriptions(fault_server: FaultServer) -> None:
    server = _legacy(fault_server)
    seen: list[str] = []
    updated = threading.Event()

    def changed(uri: str) -> None:
        seen.append(uri)
        updated.set()

    with mcpsync.connect(server.url, era="legacy", timeout=5) as client:
        client.subscribe("memo://hello", changed)
        old = server.sessions[0]
        server.expire_sessions()
        assert client.call_tool("echo", {"text": "again"}).text == "again"
        new = server.sessions[0]
        server.wait_for_requests(
            lambda r: r.method == "GET" and r.header("Mcp-Session-Id") == new, 1)
        # The old session's GET may still take one push before it notices: push until seen.
        for _ in range(25):
            server.push({"jsonrpc": "2.0", "method": "notifications/resources/updated",
                         "params": {"uri": "memo://hello"}})
            if updated.wait(0.2):
                break
        assert updated.is_set()
    assert set(seen) == {"memo://hello"}
    subs = _posts(server, "resources/subscribe")
    assert [r.json["params"]["uri"] for r in subs] == ["memo://hello", "memo://hello"]
    assert [r.header("Mcp-Session-Id") for r in subs] == [old, new]
    inits = _posts(server, "initialize")
    assert len(inits) == 2 and inits[1].time < subs[1].time


def test_unsubscribed_resources_are_not_restored(fault_server: FaultServer) -> None:
    server = _legacy(fault_server)
    with mcpsync.connect(server.url, era="legacy", timeout=5) as client:
        client.subscribe("memo://hello", lambda uri: None).close()
        server.expire_sessions()
        assert client.call_tool("echo", {"text": "x"}).text == "x"
    assert len(_posts(server, "resources/subscribe")) == 1
    assert len(_posts(server, "resources/unsubscribe")) == 1


@pytest.mark.parametrize("method", ["tools/list", "resources/list", "resources/read"])
def test_connection_error_is_retried_once_after_half_a_second(
        fault_server: FaultServer, method: str) -> None:
    server = _legacy(fault_server)
    with mcpsync.connect(server.url, era="legacy", timeout=5) as client:
        server.faults.script.append(Scripted(hangup=True, match=method))
        if method == "tools/list":
            assert [t.name for t in client.list_tools()][:1] == ["echo"]
        elif method == "resources/list":
            assert [r.uri for r in client.list_resources()] == ["memo://hello"]
        else:
            assert client.read_resource("memo://hello").contents[0].text == "hello"
    sent = _posts(server, method)
    assert len(sent) == 2
    assert sent[1].time - sent[0].time >= 0.5
    assert sent[0].rpc_id == sent[1].rpc_id


def test_connection_error_on_a_tool_call_is_not_retried(fault_server: FaultServer) -> None:
    server = _legacy(fault_server)
    with mcpsync.connect(server.url, era="legacy", timeout=5) as client:
        server.faults.script.append(Scripted(hangup=True, match="tools/call"))
        started = time.monotonic()
        with pytest.raises(ConnectionLost):
            client.call_tool("echo", {"text": "x"})
        assert time.monotonic() - started < 5
    assert len(_posts(server, "tools/call")) == 1


def test_a_second_connection_error_fails_the_list(fault_server: FaultServer) -> None:
    server = _legacy(fault_server)
    with mcpsync.connect(server.url, era="legacy", timeout=5) as client:
        server.faults.script.extend([Scripted(hangup=True, match="tools/list"),
                                     Scripted(hangup=True, match="tools/list")])
        with pytest.raises(ConnectionLost):
            client.list_tools()
    assert len(_posts(server, "tools/list")) == 2


# ---------------------------------------------------------------- era re-detection

def test_a_modern_error_on_a_legacy_session_redetects_once(fault_server: FaultServer) -> None:
    server = fault_server
    server.faults.era = "legacy"
    with mcpsync.connect(server.url, timeout=5) as client:
        assert client.era == "legacy"
        server.faults.era = "modern"        # the server was upgraded behind our back
        server.faults.script.append(rpc_error(
            400, -32022, "Unsupported protocol version",
            {"supported": [MODERN_VERSION], "requested": "2025-11-25"}, match="tools/call"))
        assert client.call_tool("echo", {"text": "now"}).text == "now"
        assert client.era == "modern"
        # Once per client: a second contradiction is an ordinary error.
        server.faults.script.append(rpc_error(404, -32601, "Method not found",
                                              match="tools/list"))
        with pytest.raises(RemoteError) as info:
            client.list_tools()
        assert info.value.code == -32601
        assert client.era == "modern"
    assert len(_posts(server, "server/discover")) == 2
    calls = _posts(server, "tools/call")
    assert [r.header("MCP-Protocol-Version") for r in calls] == ["2025-11-25", MODERN_VERSION]


def test_method_not_found_for_tools_list_on_a_modern_session_redetects(
        fault_server: FaultServer) -> None:
    server = fault_server
    server.faults.era = "modern"
    with mcpsync.connect(server.url, timeout=5) as client:
        assert client.era == "modern"
        server.faults.era = "legacy"
        server.faults.script.append(rpc_error(404, -32601, "Method not found",
                                              match="tools/list"))
        assert "echo" in [t.name for t in client.list_tools()]
        assert client.era == "legacy"
        assert client.call_tool("echo", {"text": "x"}).text == "x"
    assert len(_posts(server, "initialize")) == 1
    assert len(_posts(server, "server/discover")) == 2


def test_a_pinned_era_is_never_redetected(fault_server: FaultServer) -> None:
    server = _legacy(fault_server)
    with mcpsync.connect(server.url, era="legacy", timeout=5) as client:
        server.faults.script.append(rpc_error(400, -32021, "Missing capability",
                                              match="tools/call"))
        with pytest.raises(RemoteError):
            client.call_tool("echo", {"text": "x"})
        assert client.era == "legacy"
    assert not _posts(server, "server/discover")


# ---------------------------------------------------------------- forcing HTTP+SSE

@pytest.mark.parametrize("via", ["keyword", "config"])
def test_transport_sse_skips_detection(fault_server: FaultServer, via: str,
                                       no_leaks: None) -> None:
    server = fault_server
    server.faults.era = "sse2024"
    if via == "keyword":
        client = mcpsync.connect(server.url, transport="sse", timeout=5)
    else:
        client = mcpsync.connect(ServerConfig(url=server.url, transport="sse"), timeout=5)
    with client:
        assert client.era == "legacy"
        assert client.call_tool("echo", {"text": "old"}).text == "old"
    kinds = [(r.method, r.rpc_method) for r in server.requests]
    assert kinds[0] == ("GET", None)
    assert not _posts(server, "server/discover")
    assert all("/messages" in r.path for r in server.requests if r.method == "POST")
    assert [r.rpc_method for r in server.requests if r.method == "POST"][:3] == [
        "initialize", "notifications/initialized", "tools/call"]


def test_transport_sse_against_a_streamable_server_fails_fast(
        fault_server: FaultServer) -> None:
    server = _legacy(fault_server, get_stream=False)
    with pytest.raises(TransportError):
        mcpsync.connect(server.url, transport="sse", timeout=5)
    assert not _posts(server, "initialize")


def test_transport_streamable_http_never_falls_back(fault_server: FaultServer) -> None:
    server = fault_server
    server.faults.era = "sse2024"
    with pytest.raises(MCPError):
        mcpsync.connect(server.url, transport="streamable-http", timeout=5)
    assert not [r for r in server.requests if r.method == "GET"]


def test_transport_is_validated() -> None:
    with pytest.raises(ConfigError, match="transport"):
        ServerConfig(url="http://127.0.0.1:1/mcp", transport="websocket")
    with pytest.raises(ConfigError, match="transport"):
        ServerConfig(command="x", transport="sse")
    with pytest.raises(ConfigError, match="transport"):
        mcpsync.connect(["python", "-c", "pass"], transport="sse")
    config = ServerConfig(url="http://127.0.0.1:1/mcp", transport="sse")
    assert "transport='sse'" in repr(config)
    assert ServerConfig(url="http://127.0.0.1:1/mcp").transport == ""


# ---------------------------------------------------------------- the watchdog on HTTP+SSE

def test_the_watchdog_ends_a_silent_http_sse_stream(fault_server: FaultServer,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_http_watchdog, "SILENCE", 0.5)
    monkeypatch.setattr(_http_watchdog, "CHECK", 0.05)
    server = fault_server
    server.faults.era = "sse2024"
    with mcpsync.connect(server.url, transport="sse", timeout=10) as client:
        with pytest.raises(ConnectionLost, match="HTTP\\+SSE stream ended"):
            client.call_tool("slow", {"seconds": 3})      # silent far beyond the limit
        # The peer answers the next POST only after `slow` (same keep-alive connection):
        # let the new stream wait for it.
        monkeypatch.setattr(_http_watchdog, "SILENCE", 300.0)
        assert client.call_tool("echo", {"text": "back"}).text == "back"
    assert len([r for r in server.requests if r.method == "GET"]) >= 2
    assert len(_posts(server, "initialize")) >= 2
