"""The demo driven by a client we did not write: the official ``mcp`` SDK.

Its default mode (``"auto"``) probes ``server/discover`` at 2026-07-28 first and adopts the
modern era; ``"legacy"`` does the ``initialize`` handshake. Both must see the same tools.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest
from helpers import require_peer


async def drive(mode: str) -> dict[str, Any]:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    progress: list[tuple[float, float | None, str | None]] = []
    logs: list[Any] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    async def on_log(params: Any) -> None:
        logs.append(params)

    params = StdioServerParameters(command=sys.executable, args=["-m", "mcpsync.demo"])
    # log_level opts in to notifications/message on modern requests; legacy sends nothing
    # until the client asks for a level with logging/setLevel.
    options: dict[str, Any] = {"log_level": "info"} if mode == "auto" else {}
    async with Client(params, mode=mode, logging_callback=on_log, read_timeout_seconds=20,
                      **options) as client:
        if mode == "legacy":
            await client.set_logging_level("info")
        listed = await client.list_tools()
        return {
            "version": client.protocol_version,
            "server": client.server_info,
            "tools": {tool.name: tool for tool in listed.tools},
            "echo": await client.call_tool("echo", {"text": "héllo"}),
            "add": await client.call_tool("add", {"a": 1, "b": 2.5}),
            "fail": await client.call_tool("fail", {"message": "on purpose"}),
            "slow": await client.call_tool("slow", {"seconds": 0.2, "steps": 4},
                                           progress_callback=on_progress),
            "progress": progress,
            "logs": logs,
        }


def check(seen: dict[str, Any]) -> None:
    assert seen["server"].name == "mcpsync-demo"
    assert list(seen["tools"]) == ["echo", "add", "slow", "fail"]
    assert seen["tools"]["add"].output_schema["required"] == ["sum"]
    echo = seen["echo"]
    assert not echo.is_error and echo.content[0].text == "héllo"
    add = seen["add"]
    assert add.structured_content == {"sum": 3.5}
    assert add.content[0].text == '{"sum":3.5}'
    fail = seen["fail"]
    assert fail.is_error is True
    assert fail.content[0].text == "RuntimeError: on purpose"
    assert not seen["slow"].is_error
    assert seen["progress"] == [(1.0, 4.0, "step 1/4"), (2.0, 4.0, "step 2/4"),
                                (3.0, 4.0, "step 3/4"), (4.0, 4.0, "step 4/4")]
    assert [(entry.level, entry.data) for entry in seen["logs"]] == [
        ("info", f"slow: step {i}/4") for i in range(1, 5)]


@pytest.mark.timeout(60)
def test_official_client_default_mode_speaks_2026_07_28() -> None:
    require_peer("mcp")
    anyio = require_peer("anyio")
    seen = anyio.run(drive, "auto")
    assert seen["version"] == "2026-07-28"
    check(seen)


@pytest.mark.timeout(60)
def test_official_client_legacy_mode() -> None:
    require_peer("mcp")
    anyio = require_peer("anyio")
    seen = anyio.run(drive, "legacy")
    assert seen["version"] == "2025-11-25"
    check(seen)


async def cancel_then_echo(mode: str) -> str:
    import anyio
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=["-m", "mcpsync.demo"])
    async with Client(params, mode=mode, read_timeout_seconds=10) as client:
        with anyio.move_on_after(0.3):
            await client.call_tool("slow", {"seconds": 60, "steps": 60})
        # The demo is sequential: this answer can only come once slow has seen the client's
        # notifications/cancelled and stopped (otherwise it would wait a minute and time out).
        result = await client.call_tool("echo", {"text": "after cancel"})
        return str(result.content[0].text)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_official_client_cancel_stops_slow(mode: str) -> None:
    require_peer("mcp")
    anyio = require_peer("anyio")
    assert anyio.run(cancel_then_echo, mode) == "after cancel"
