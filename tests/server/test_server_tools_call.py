"""``tools/call`` errors per negotiated revision, one test per revision."""

from __future__ import annotations

from typing import Any

import pytest

from mcpsync.server import Server

from .helpers import PipeServer, modern_meta

LEGACY_TABLE = ["2024-11-05", "2025-03-26", "2025-06-18"]


def make_server() -> Server:
    server = Server("t", "1")

    @server.tool()
    def greet(name: str, times: int = 1) -> str:
        return " ".join([f"hi {name}"] * times)

    @server.tool()
    def boom(message: str) -> None:
        raise KeyError(message)

    return server


class Caller:
    def __init__(self, ps: PipeServer, version: str) -> None:
        self.ps = ps
        self.version = version
        self.n = 0
        if version != "2026-07-28":
            ps.initialize(version)

    def __call__(self, params: Any) -> dict[str, Any]:
        self.n += 1
        if self.version == "2026-07-28":
            params = {**(params if isinstance(params, dict) else {}), "_meta": modern_meta()}
        return self.ps.request(self.n, "tools/call", params)


def check_table(version: str) -> None:
    with PipeServer(make_server()) as ps:
        call = Caller(ps, version)
        ok = call({"name": "greet", "arguments": {"name": "ann", "times": 2}})
        assert ok["result"]["content"] == [{"type": "text", "text": "hi ann hi ann"}]
        # unknown tool: always -32602
        assert call({"name": "nope", "arguments": {}})["error"]["code"] == -32602
        # params not of CallToolRequest shape: always -32602
        for bad in ({}, {"name": 5}, {"name": "greet", "arguments": [1]},
                    {"name": "greet", "arguments": None}):
            assert call(bad)["error"]["code"] == -32602, bad
        # arguments that fail the input schema
        failed = call({"name": "greet", "arguments": {"name": 3}})
        if version in LEGACY_TABLE:
            assert failed["error"]["code"] == -32602
            assert "arguments.name" in failed["error"]["message"]
        else:
            result = failed["result"]
            assert result["isError"] is True
            assert len(result["content"]) == 1
            assert "arguments.name" in result["content"][0]["text"]
        missing = call({"name": "greet"})
        text = (missing["error"]["message"] if version in LEGACY_TABLE
                else missing["result"]["content"][0]["text"])
        assert "arguments.name" in text
        # the handler raises: an isError result in every revision
        raised = call({"name": "boom", "arguments": {"message": "gone"}})["result"]
        assert raised["isError"] is True
        assert raised["content"] == [{"type": "text", "text": "KeyError: 'gone'"}]


def test_2024_11_05() -> None:
    check_table("2024-11-05")


def test_2025_03_26() -> None:
    check_table("2025-03-26")


def test_2025_06_18() -> None:
    check_table("2025-06-18")


def test_2025_11_25() -> None:
    check_table("2025-11-25")


def test_2026_07_28() -> None:
    check_table("2026-07-28")


@pytest.mark.parametrize(("version", "structured"), [
    ("2025-06-18", False), ("2025-11-25", False), ("2026-07-28", True)])
def test_non_object_structured_content_only_under_2026(version: str, structured: bool) -> None:
    server = Server("t", "1")

    @server.tool(output_schema={"type": "array"})
    def listing() -> list[int]:
        return [1, 2]

    with PipeServer(server) as ps:
        result = Caller(ps, version)({"name": "listing"})["result"]
    assert result["content"] == [{"type": "text", "text": "[1,2]"}]
    assert ("structuredContent" in result) is structured


def test_system_exit_in_a_tool_is_a_tool_error_and_the_server_goes_on() -> None:
    import sys

    server = Server("t", "1")

    @server.tool()
    def leave() -> None:
        sys.exit(3)

    with PipeServer(server) as ps:
        ps.initialize()
        result = ps.call(1, "leave")["result"]
        assert result == {"content": [{"type": "text", "text": "SystemExit: 3"}], "isError": True}
        assert ps.request(2, "ping")["result"] == {}
