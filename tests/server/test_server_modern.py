"""Modern rules (2026-07-28): ``_meta`` checks, ``server/discover``, result envelope."""

from __future__ import annotations

from typing import Any

import pytest

from mcpsync.protocol import META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, META_SERVER_INFO
from mcpsync.server import Server

from .helpers import PipeServer, modern_meta

SUPPORTED = ["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"]


@pytest.fixture
def ps() -> Any:
    server = Server("modern", "3.1", instructions="hello")
    server.register_tool({"name": "t", "description": "a tool"}, lambda args, ctx: "ok")
    with PipeServer(server) as pipe:
        yield pipe


def test_discover(ps: PipeServer) -> None:
    result = ps.request(1, "server/discover", {"_meta": modern_meta()})["result"]
    assert result == {
        "supportedVersions": SUPPORTED,
        "capabilities": {"tools": {"listChanged": True}, "logging": {}},
        "instructions": "hello",
        "ttlMs": 60000,
        "cacheScope": "public",
        "resultType": "complete",
        "_meta": {META_SERVER_INFO: {"name": "modern", "version": "3.1"}},
    }


def test_every_result_has_result_type_and_server_info(ps: PipeServer) -> None:
    listed = ps.request(1, "tools/list", {"_meta": modern_meta()})["result"]
    assert listed["tools"] == [{"name": "t", "description": "a tool",
                                "inputSchema": {"type": "object"}}]
    assert (listed["ttlMs"], listed["cacheScope"], listed["resultType"]) == (
        60000, "public", "complete")
    called = ps.request(2, "tools/call", {"name": "t", "_meta": modern_meta()})["result"]
    assert called["resultType"] == "complete"
    assert called["_meta"] == {META_SERVER_INFO: {"name": "modern", "version": "3.1"}}
    assert "ttlMs" not in called


def test_missing_client_capabilities_is_32602_naming_the_key(ps: PipeServer) -> None:
    for method in ("server/discover", "tools/list"):
        reply = ps.request(1, method, {"_meta": {META_PROTOCOL_VERSION: "2026-07-28"}})
        assert reply["error"]["code"] == -32602
        assert META_CLIENT_CAPABILITIES in reply["error"]["message"]


def test_missing_protocol_version_before_initialize_is_32602(ps: PipeServer) -> None:
    reply = ps.request(1, "server/discover", {"_meta": {META_CLIENT_CAPABILITIES: {}}})
    assert reply["error"]["code"] == -32602
    assert META_PROTOCOL_VERSION in reply["error"]["message"]


@pytest.mark.parametrize("version", ["2099-01-01", "2025-11-25"])
def test_unsupported_version_is_32022_with_data(ps: PipeServer, version: str) -> None:
    for method in ("server/discover", "tools/call"):
        reply = ps.request(1, method, {"name": "t", "_meta": modern_meta(version)})
        assert reply["error"]["code"] == -32022
        assert reply["error"]["data"] == {"supported": SUPPORTED, "requested": version}


@pytest.mark.parametrize("method", ["ping", "initialize", "logging/setLevel",
                                    "resources/subscribe", "no/such"])
def test_unoffered_methods_are_32601(ps: PipeServer, method: str) -> None:
    reply = ps.request(1, method, {"_meta": modern_meta(), "level": "info"})
    assert reply["error"]["code"] == -32601


def test_unknown_log_level_in_meta_is_32602(ps: PipeServer) -> None:
    reply = ps.request(1, "tools/call", {"name": "t", "_meta": modern_meta(log_level="loud")})
    assert reply["error"]["code"] == -32602


def test_modern_requests_do_not_initialize_a_legacy_session(ps: PipeServer) -> None:
    ps.request(1, "server/discover", {"_meta": modern_meta()})
    assert ps.request(2, "tools/list")["error"]["code"] == -32602  # still no legacy era
    assert ps.initialize()["result"]["protocolVersion"] == "2025-11-25"
