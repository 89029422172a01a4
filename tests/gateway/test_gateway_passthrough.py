"""The gateway command as a pass-through: real hosts in front, real servers behind.

Hosts: our client and the official ``mcp`` SDK's client, each launching
``python -m mcpsync gateway --config FILE``; and a raw host that writes and reads bytes, to
see that odd JSON reaches it exactly as the upstream wrote it. Upstreams: our demo server, the
official SDK's server (both eras), server-everything over stdio, and the odd peer.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import PEERS, require_peer
from http_peers.everything import ENTRY, NODE

import mcpsync
from gateway.helpers_gw import GATEWAY, ODD, RawHost, child_pids, write_config
from gateway.peers.odd_server import ODD_EXTRA, ODD_RESULT

pytestmark = pytest.mark.timeout(90)

DEMO = [sys.executable, "-m", "mcpsync.demo"]
OFFICIAL = [sys.executable, str(PEERS / "official_stdio_server.py")]
INIT = ('{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":'
        '"2025-06-18","capabilities":{"roots":{}},"clientInfo":{"name":"raw","version":"1"}}}')


def _through(tmp_path: Path, sid: str, argv: list[str]) -> list[str]:
    return [*GATEWAY, write_config(tmp_path, {sid: argv})]


# --- our client as the host -------------------------------------------------------------

@pytest.mark.parametrize("era", ["auto", "legacy"])
def test_our_client_through_the_gateway_to_the_demo(tmp_path: Path, era: str) -> None:
    progress: list[float] = []
    with mcpsync.connect(_through(tmp_path, "demo", DEMO), era=era) as client:
        # The gateway does not negotiate: the host gets the demo's own revision and name.
        assert client.server_info.name == "mcpsync-demo"
        assert client.era == ("modern" if era == "auto" else "legacy")
        assert [t.name for t in client.list_tools()] == ["echo", "add", "slow", "fail"]
        assert client.call_tool("add", {"a": 1, "b": 2}).structured == {"sum": 3}
        assert client.call_tool("echo", {"text": "héllo"}).text == "héllo"
        assert client.call_tool("fail", {"message": "x"}).is_error
        slow = client.call_tool("slow", {"seconds": 0.2, "steps": 3},
                                progress=lambda p, t, m: progress.append(p))
        assert not slow.is_error
        assert progress == [1.0, 2.0, 3.0]


def _elicit(req: Any) -> dict[str, Any]:
    return {"action": "accept", "content": {"name": "Ada"}}


def _sample(req: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": {"type": "text", "text": "4"}, "model": "t"}


@pytest.mark.parametrize("era", ["auto", "legacy"])
def test_server_to_client_requests_and_input_required_rounds_pass(tmp_path: Path,
                                                                  era: str) -> None:
    """Legacy: elicitation, sampling and roots are server-to-client requests through the
    gateway; modern (2026-07-28): they are input_required rounds inside results."""
    require_peer("mcp")
    with mcpsync.connect(_through(tmp_path, "official", OFFICIAL), era=era,
                         elicitation=_elicit, sampling=_sample,
                         roots=["file:///work"]) as client:
        assert client.era == ("modern" if era == "auto" else "legacy")
        assert client.server_info.name == "official-peer"
        assert client.call_tool("greet").text == "hello Ada (42)"
        assert client.call_tool("think").text == "model said: 4"
        assert client.call_tool("roots").text == "file:///work"
        assert client.read_resource("memo://items/7").text == "item 7"
        assert [p.name for p in client.list_prompts()] == ["review"]


def test_server_everything_over_stdio(tmp_path: Path) -> None:
    if not ENTRY.exists():
        pytest.skip(f"server-everything is not installed at {ENTRY} "
                    "(export MCPSYNC_CONFORMANCE_DIR)")
    with mcpsync.connect(_through(tmp_path, "everything", [str(NODE), str(ENTRY), "stdio"]),
                         timeout=30) as client:
        names = {t.name for t in client.list_tools()}
        assert "echo" in names
        assert client.call_tool("echo", {"message": "through"}).text.endswith("through")
        assert client.list_resources()


# --- the official SDK as the host ---------------------------------------------------------

async def _official_host(argv: list[str], mode: str) -> dict[str, Any]:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(command=argv[0], args=argv[1:])
    async with Client(params, mode=mode, read_timeout_seconds=30) as client:
        listed = await client.list_tools()
        return {"version": client.protocol_version, "server": client.server_info.name,
                "tools": [t.name for t in listed.tools],
                "add": (await client.call_tool("add", {"a": 1, "b": 2.5})).structured_content}


@pytest.mark.parametrize(("mode", "version"), [("auto", "2026-07-28"),
                                               ("legacy", "2025-11-25")])
def test_official_sdk_client_through_the_gateway(tmp_path: Path, mode: str,
                                                 version: str) -> None:
    require_peer("mcp")
    anyio = require_peer("anyio")
    seen = anyio.run(_official_host, _through(tmp_path, "demo", DEMO), mode)
    assert seen == {"version": version, "server": "mcpsync-demo",
                    "tools": ["echo", "add", "slow", "fail"], "add": {"sum": 3.5}}


# --- bytes ---------------------------------------------------------------------------------

def test_odd_json_reaches_the_host_byte_for_byte(tmp_path: Path) -> None:
    host = RawHost(write_config(tmp_path, {"odd": ODD}))
    try:
        host.send(INIT)
        init = json.loads(host.recv())
        assert init["result"]["serverInfo"]["name"] == "odd-peer"
        host.send('{"jsonrpc":"2.0","method":"notifications/initialized"}')
        host.send('{"jsonrpc":"2.0","id":"a\\u0031","method":"tools/list"}')
        assert host.recv() == (b'{"jsonrpc":"2.0","id":"a\\u0031","result":{"tools":[{"name":'
                               b'"odd","inputSchema":{"type":"object"},"x-unknown":1E0}]}}')
        host.send('{"method":"tools/call","id":7,"params":{"name":"odd"},"jsonrpc":"2.0"}')
        assert host.recv() == (f'{{"jsonrpc":"2.0","id":7,"result":{ODD_RESULT},'
                               f'{ODD_EXTRA}}}').encode()
        # And the other way: the upstream sees the host's bytes (spaces, 1.50, an unknown
        # member, a string id written with an escape).
        sent = ('{ "params" : {"name":"echo_raw","arguments":{"n":1.50,"e":"\\u00e9"}},'
                ' "x-host":[-0], "id" : "\\u0062", "method":"tools/call", "jsonrpc":"2.0" }')
        answer = host.call(sent)
        assert answer["id"] == "b"
        assert answer["result"]["content"][0]["text"] == sent
    finally:
        assert host.close() == 0


def test_a_server_to_client_request_and_its_answer_pass_verbatim(tmp_path: Path) -> None:
    host = RawHost(write_config(tmp_path, {"odd": ODD}))
    try:
        host.send(INIT)
        host.recv()
        host.send('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ask"}}')
        assert host.recv() == b'{"jsonrpc":"2.0","id":"s2c-1","method":"roots/list","x-k":1.50}'
        reply = '{"id":"s2c-1","jsonrpc":"2.0","result":{"roots":[]},"x-r":2E1}'
        answer = host.call(reply)
        assert answer["id"] == 1
        assert answer["result"]["content"][0]["text"] == reply
    finally:
        assert host.close() == 0


def test_a_line_that_is_not_json_gets_a_parse_error_and_the_session_goes_on(
        tmp_path: Path) -> None:
    host = RawHost(write_config(tmp_path, {"odd": ODD}))
    try:
        bad = host.call("{not json")
        assert bad["id"] is None and bad["error"]["code"] == -32700
        assert host.call(INIT)["result"]["serverInfo"]["name"] == "odd-peer"
    finally:
        assert host.close() == 0


# --- reliability ---------------------------------------------------------------------------

def test_an_upstream_that_dies_mid_call_fails_it_at_once_and_restarts(tmp_path: Path) -> None:
    host = RawHost(write_config(tmp_path, {"odd": ODD}))
    try:
        host.send(INIT)
        host.recv()
        host.send('{"jsonrpc":"2.0","method":"notifications/initialized"}')
        [first] = child_pids(host.proc.pid)
        started = time.monotonic()
        died = host.call('{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"die"}}')
        took = time.monotonic() - started
        assert died["id"] == 5
        assert died["error"]["data"] == {"upstream": "odd"}
        assert "upstream 'odd' stopped" in died["error"]["message"]
        assert "code 3" in died["error"]["message"]
        assert took < 3.0
        # The next call restarts it (the host's initialize replayed, its answer not re-sent).
        again = host.call('{"jsonrpc":"2.0","id":6,"method":"tools/call",'
                          '"params":{"name":"odd"}}')
        assert again["id"] == 6 and again["result"]["z"] == 1.5
        [second] = child_pids(host.proc.pid)
        assert second != first
    finally:
        assert host.close() == 0
    assert b"restarted" in b"".join(host.stderr)


def test_killing_the_demo_mid_call_through_our_client(tmp_path: Path) -> None:
    with mcpsync.connect(_through(tmp_path, "demo", DEMO), era="legacy") as client:
        assert client.pid is not None
        [upstream] = child_pids(client.pid)
        future = client.submit("tools/call", {"name": "slow",
                                              "arguments": {"seconds": 30, "steps": 30}})
        time.sleep(0.5)
        started = time.monotonic()
        os.kill(upstream, signal.SIGKILL)
        with pytest.raises(mcpsync.RemoteError, match="upstream 'demo' stopped"):
            future.result(timeout=10)
        assert time.monotonic() - started < 3.0
        assert client.call_tool("add", {"a": 2, "b": 3}).structured == {"sum": 5}


# --- config ---------------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [
    [sys.executable, "-m", "mcpsync", "gateway", "--config", "x.json"],
    ["/usr/local/bin/mcpsync", "gateway", "--config", "x.json"],
    ["mcpsync.exe", "-v", "gateway"],
])
def test_a_config_that_launches_the_gateway_is_refused(tmp_path: Path, argv: list[str]) -> None:
    path = write_config(tmp_path, {"loop": argv})
    with pytest.raises(mcpsync.ConfigError, match=r"'loop'.*gateway itself"):
        mcpsync.Gateway(path)
    import subprocess
    done = subprocess.run([*GATEWAY, path], stdin=subprocess.DEVNULL, capture_output=True,
                          timeout=30)
    assert done.returncode == 2
    assert done.stdout == b""
    assert b"gateway itself" in done.stderr


def test_library_gateway_on_pipes(tmp_path: Path) -> None:
    """mcpsync.Gateway in this process, on two pipes: serve_stdio returns at the host's EOF."""
    import threading
    host_w_r, host_w_w = os.pipe()
    host_r_r, host_r_w = os.pipe()
    frames: list[tuple[str, str, str]] = []
    with mcpsync.Gateway(write_config(tmp_path, {"odd": ODD}),
                         on_frame=lambda d, u, e, lat: frames.append((d, u, e.kind))) as gw, \
            os.fdopen(host_w_r, "rb") as stdin, os.fdopen(host_r_w, "wb") as stdout, \
            os.fdopen(host_w_w, "wb") as to_gw, os.fdopen(host_r_r, "rb") as from_gw:
        server = threading.Thread(target=gw.serve_stdio, args=(stdin, stdout),
                                  name="mcpsync-test-gateway", daemon=True)
        server.start()
        to_gw.write(INIT.encode() + b"\n")
        to_gw.flush()
        assert json.loads(from_gw.readline())["id"] == 0
        to_gw.close()
        server.join(15)
        assert not server.is_alive()
    assert frames == [("to_upstream", "odd", "request"), ("to_host", "odd", "response")]


def test_an_upstream_that_cannot_start_is_named_in_the_answer(tmp_path: Path) -> None:
    host = RawHost(write_config(tmp_path, {"ghost": ["/nonexistent/mcp-server", "--x"]}))
    try:
        answer = host.call(INIT)
        assert answer["id"] == 0
        assert answer["error"]["data"] == {"upstream": "ghost"}
        assert "upstream 'ghost' could not be started" in answer["error"]["message"]
        assert "/nonexistent/mcp-server" in answer["error"]["message"]
        again = host.call('{"jsonrpc":"2.0","id":1,"method":"ping"}')   # tried again, named
        assert again["id"] == 1 and "could not be started" in again["error"]["message"]
    finally:
        assert host.close() == 0
    assert b"ghost" in b"".join(host.stderr)
