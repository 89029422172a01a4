"""``Server`` and ``register_tool``: wiring checks and the frozen registry."""

from __future__ import annotations

from typing import Any

import pytest

from mcpsync.server import Context, Server

from .helpers import PipeServer, modern_meta


def handler(arguments: dict[str, Any], ctx: Context) -> str:
    return "ok"


def test_register_tool_takes_a_wire_shaped_mapping() -> None:
    server = Server("t", "1")
    server.register_tool({"name": "plain"}, handler)
    server.register_tool({"name": "full", "title": "Full", "description": "d",
                          "inputSchema": {"type": "object", "properties": {}},
                          "outputSchema": {"type": "object"},
                          "annotations": {"readOnlyHint": True}, "icons": []}, handler)
    plain, full = server.tools
    assert plain == {"name": "plain", "inputSchema": {"type": "object"}}
    assert list(full) == ["name", "title", "description", "inputSchema", "outputSchema",
                          "annotations", "icons"]


@pytest.mark.parametrize(("tool", "func", "match"), [
    ({"name": ""}, handler, "non-empty"),
    ({}, handler, "non-empty"),
    ({"name": "x"}, None, "callable"),
    ({"name": "x"}, "not callable", "callable"),
    ({"name": "x", "inputSchema": {"type": "array"}}, handler, "inputSchema"),
    ({"name": "x", "inputSchema": ["type", "object"]}, handler, "inputSchema"),
    ({"name": "x", "inputSchema": {}}, handler, "inputSchema"),
])
def test_wiring_mistakes_raise_value_error(tool: dict[str, Any], func: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Server("t", "1").register_tool(tool, func)


def test_duplicate_name_raises() -> None:
    server = Server("t", "1")
    server.register_tool({"name": "x"}, handler)
    with pytest.raises(ValueError, match="already registered"):
        server.register_tool({"name": "x"}, handler)


@pytest.mark.parametrize("kwargs", [{"concurrency": 0}, {"concurrency": 1.5},
                                    {"max_frame_bytes": 0}])
def test_bad_options_raise(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        Server("t", "1", **kwargs)


def test_declared_tools_freeze_once_serve_starts_and_add_tool_is_the_live_path() -> None:
    server = Server("t", "1", title="T", instructions="use me")
    server.register_tool({"name": "x"}, handler)
    with PipeServer(server) as ps:
        init = ps.initialize()
        with pytest.raises(ValueError, match="add_tool"):
            server.register_tool({"name": "late"}, handler)
        with pytest.raises(ValueError, match="add_tool"):
            server.tool()(lambda: None)
        discover = ps.request(2, "server/discover", {"_meta": modern_meta()})
        server.add_tool({"name": "late"}, handler)
        assert ps.recv() == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
        assert [t["name"] for t in ps.request(3, "tools/list")["result"]["tools"]] == [
            "x", "late"]
    assert init["result"]["capabilities"]["tools"] == {"listChanged": True}
    assert init["result"]["serverInfo"] == {"name": "t", "version": "1", "title": "T"}
    assert init["result"]["instructions"] == "use me"
    assert discover["result"]["capabilities"]["tools"] == {"listChanged": True}
    assert [t["name"] for t in server.tools] == ["x", "late"]


def test_serve_twice_raises_runtime_error() -> None:
    server = Server("t", "1")
    with PipeServer(server) as ps:
        ps.eof()
        assert ps.wait()
    with pytest.raises(RuntimeError, match="once"):
        server.serve()


def test_register_tool_takes_a_client_side_tool() -> None:
    from mcpsync.types import Tool

    listed = Tool.from_dict({"name": "remote", "description": "d",
                             "inputSchema": {"type": "object", "properties": {}},
                             "x-extra": 1})
    built = Tool("local", description="by hand")
    server = Server("t", "1")
    server.register_tool(listed, handler)
    server.register_tool(built, handler)
    assert server.tools == [
        {"name": "remote", "description": "d",
         "inputSchema": {"type": "object", "properties": {}}, "x-extra": 1},
        {"name": "local", "description": "by hand", "inputSchema": {"type": "object"}},
    ]
