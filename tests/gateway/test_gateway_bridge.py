"""Era bridging through the gateway command, end to end with real servers.

A modern host (our client pinned to 2026-07-28) reaches legacy-only servers, and a legacy
host (our client pinned to 2025-11-25, the official SDK client) reaches modern-only ones, all
through ``mcpsync gateway --bridge``. The servers are our feature server and the official
SDK's, made one-era by ``peers/era_guard.py``, which also logs what reached them: so each
test can see that the server really was spoken to in its own era.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import require_peer
from http_peers.everything import ENTRY, NODE
from peers import feature_server
from server.test_server_http_app import Served

import mcpsync
from gateway.helpers_gw import GATEWAY, ODD, PEERS, RawHost, write_config
from gateway.peers.odd_server import ODD_EXTRA, ODD_RESULT
from mcpsync.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
FEATURES = [sys.executable, str(ROOT / "tests" / "peers" / "feature_server.py")]
OFFICIAL = [sys.executable, str(ROOT / "tests" / "peers" / "official_stdio_server.py")]
GUARD = [sys.executable, str(PEERS / "era_guard.py")]

pytestmark = pytest.mark.timeout(90)


def guarded(only: str, log: Path, server: list[str]) -> list[str]:
    return [*GUARD, "--only", only, "--log", str(log), "--", *server]


def config(tmp_path: Path, servers: dict[str, list[str]]) -> str:
    doc = {"mcpServers": {sid: {"command": argv[0], "args": argv[1:]}
                          for sid, argv in servers.items()}}
    path = tmp_path / "bridge.json"
    path.write_text(json.dumps(doc))
    return str(path)


def through(cfg: str) -> list[str]:
    return [*GATEWAY, cfg, "--bridge"]


def seen(log: Path) -> list[dict[str, Any]]:
    """The frames that reached the guarded server, decoded."""
    return [json.loads(line) for line in log.read_text().splitlines()]


def methods(log: Path) -> list[str]:
    return [m.get("method", "<answer>") for m in seen(log)]


# ---------------------------------------------------------------- modern host, legacy server

def test_modern_host_uses_a_legacy_server(tmp_path: Path) -> None:
    log = tmp_path / "up.jsonl"
    asked: list[Any] = []

    def elicit(request: Any) -> dict[str, Any]:
        asked.append(request)
        return {"action": "accept", "content": {"name": "Ada"}}

    cfg = config(tmp_path, {"feat": guarded("legacy", log, FEATURES)})
    with mcpsync.connect(through(cfg), protocol_version="2026-07-28", elicitation=elicit,
                         timeout=30) as client:
        assert client.server_info.protocol_version == "2026-07-28"
        assert client.server_info.name == "features"
        assert "ask_name" in {t.name for t in client.list_tools()}
        assert client.call_tool("greet", {"name": "x"}).text == "hello x"
        started = time.monotonic()
        assert client.call_tool("ask_name", {}).text == "hello Ada"
        elapsed = time.monotonic() - started
    assert [a.message for a in asked][:1] == ["Your name?"]
    frames = seen(log)
    kinds = methods(log)
    # The server was spoken to as a legacy server: one initialize, the bridge's, first.
    assert kinds.count("initialize") == 1
    init = next(f for f in frames if f.get("method") == "initialize")
    assert init["params"]["protocolVersion"] == "2025-11-25"
    assert init["params"]["capabilities"] == {"elicitation": {"form": {}}}
    assert "notifications/initialized" in kinds
    # No request after the handshake names the modern version (the guard would refuse it).
    for frame in frames[kinds.index("notifications/initialized"):]:
        meta = (frame.get("params") or {}).get("_meta") or {}
        assert "io.modelcontextprotocol/protocolVersion" not in meta
    # The elicitation was answered upstream as a legacy response to the server's own request.
    answers = [f for f in frames if "result" in f and isinstance(f["result"], dict)
               and f["result"].get("action") == "accept"]
    assert answers and answers[0]["result"]["content"] == {"name": "Ada"}
    assert elapsed < 10


def test_modern_host_two_rounds_and_arguments_byte_for_byte(tmp_path: Path) -> None:
    log = tmp_path / "up.jsonl"
    answers = iter([{"action": "accept", "content": {"v": "Ada"}},
                    {"action": "accept", "content": {"v": "red"}}])
    cfg = config(tmp_path, {"feat": guarded("legacy", log, FEATURES)})
    with mcpsync.connect(through(cfg), protocol_version="2026-07-28",
                         elicitation=lambda req: next(answers), timeout=30) as client:
        result = client.call_tool("ask_twice", {})
        assert "Ada" in result.text and "red" in result.text
        assert client.call_tool("add", {"a": 1.5, "b": 2}).structured == {"sum": 3.5}
    add = next(f for f in seen(log) if (f.get("params") or {}).get("name") == "add")
    assert add["params"]["arguments"] == {"a": 1.5, "b": 2}


def test_modern_host_listen_becomes_legacy_subscribe(tmp_path: Path) -> None:
    log = tmp_path / "up.jsonl"
    cfg = config(tmp_path, {"feat": guarded("legacy", log, FEATURES)})
    heard: list[str] = []
    got = threading.Event()
    with mcpsync.connect(through(cfg), protocol_version="2026-07-28", timeout=30) as client:
        with client.subscribe("memo://greeting", lambda uri: (heard.append(uri), got.set())):
            client.call_tool("touch", {"uri": "memo://logo"})      # not subscribed
            client.call_tool("touch", {"uri": "memo://greeting"})
            assert got.wait(10), "no resources/updated reached the modern host"
        assert heard == ["memo://greeting"]
        time.sleep(0.3)
    kinds = methods(log)
    assert "resources/subscribe" in kinds
    assert "resources/unsubscribe" in kinds
    assert "subscriptions/listen" not in kinds


def test_modern_host_official_legacy_server_elicits(tmp_path: Path) -> None:
    log = tmp_path / "up.jsonl"
    cfg = config(tmp_path, {"official": guarded("legacy", log, OFFICIAL)})
    with mcpsync.connect(through(cfg), protocol_version="2026-07-28", timeout=30,
                         elicitation=lambda req: {"action": "accept",
                                                  "content": {"name": "Bo", "age": 7}}
                         ) as client:
        assert client.server_info.name == "official-peer"
        assert client.call_tool("echo", {"text": "hi"}).text == "hi"
        assert client.call_tool("greet", {}).text == "hello Bo (7)"
    assert methods(log).count("initialize") == 1
    assert "elicitation/create" not in methods(log)   # it went the other way: server to us


def _sample(request: Any) -> dict[str, Any]:
    return {"role": "assistant", "model": "echo-1",
            "content": {"type": "text", "text": f"got {len(request.messages)}"}}


def test_modern_host_three_asks_of_a_legacy_server(tmp_path: Path) -> None:
    # The legacy server sends three requests during one call; the modern host answers them
    # in one or more rounds, and the server gets each answer as a response to its request.
    log = tmp_path / "up.jsonl"
    cfg = config(tmp_path, {"feat": guarded("legacy", log, FEATURES)})
    with mcpsync.connect(through(cfg), protocol_version="2026-07-28", timeout=30,
                         elicitation=lambda req: {"action": "accept",
                                                  "content": {"name": "Cy"}},
                         sampling=_sample, roots=["file:///a", "file:///b"]) as client:
        assert client.call_tool("ask_many", {}).text == "Cy | got 1 | 2 roots"
    answered = [f for f in seen(log) if "result" in f and "id" in f]
    assert len(answered) == 3


DEMO = [sys.executable, "-m", "mcpsync.demo"]


def test_modern_host_progress_logs_and_cancel_on_the_legacy_demo(tmp_path: Path) -> None:
    log = tmp_path / "up.jsonl"
    cfg = config(tmp_path, {"demo": guarded("legacy", log, DEMO)})
    steps: list[float] = []
    logs: list[Any] = []
    with mcpsync.connect(through(cfg), protocol_version="2026-07-28", timeout=30,
                         log_level="info",
                         on_log=lambda level, logger, data: logs.append(data)) as client:
        assert client.server_info.name == "mcpsync-demo"
        result = client.call_tool("slow", {"seconds": 0.3, "steps": 3},
                                  progress=lambda done, total, message: steps.append(done))
        assert result.text
        with pytest.raises(mcpsync.RequestTimeout):
            client.call_tool("slow", {"seconds": 30, "steps": 2}, timeout=0.5)
        assert client.call_tool("echo", {"text": "after"}).text == "after"
    assert steps == [1, 2, 3]
    assert any("step 3/3" in str(entry) for entry in logs)
    kinds = methods(log)
    assert kinds.count("logging/setLevel") == 1
    assert "notifications/cancelled" in kinds
    tool_calls = [f for f in seen(log) if f.get("method") == "tools/call"]
    assert all("progressToken" in f["params"]["_meta"] for f in tool_calls[:1])



def test_modern_host_on_server_everything_found_legacy_by_the_probe(tmp_path: Path) -> None:
    # No "era" pinned: server-everything answers server/discover with -32601, so the probe
    # finds it legacy, and its elicitation request reaches the modern host as a round.
    if not ENTRY.exists():
        pytest.skip(f"server-everything is not installed at {ENTRY} "
                    "(export MCPSYNC_CONFORMANCE_DIR)")
    cfg = config(tmp_path, {"everything": [str(NODE), str(ENTRY), "stdio"]})
    asked: list[Any] = []

    def elicit(request: Any) -> dict[str, Any]:
        asked.append(request.requested_schema)
        return {"action": "accept", "content": {"name": "Zed"}}

    with mcpsync.connect(through(cfg), protocol_version="2026-07-28", timeout=30,
                         elicitation=elicit) as client:
        assert client.server_info.name == "mcp-servers/everything"
        assert client.call_tool("get-sum", {"a": 1, "b": 2}).text == "The sum of 1 and 2 is 3."
        result = client.call_tool("trigger-elicitation-request", {})
    assert "Zed" in " ".join(block.text for block in result.content)
    assert asked and "name" in asked[0]["properties"]



async def _official_modern_host(argv: list[str]) -> dict[str, Any]:
    from mcp import Client, types
    from mcp.client.stdio import StdioServerParameters

    async def on_elicit(context: Any, params: Any) -> Any:
        return types.ElicitResult(action="accept", content={"name": "Mo"})

    params = StdioServerParameters(command=argv[0], args=argv[1:])
    async with Client(params, mode="auto", elicitation_callback=on_elicit,
                      read_timeout_seconds=30) as client:
        listed = await client.list_tools()
        name = (await client.call_tool("ask_name", {})).content[0]
        return {"version": client.protocol_version, "tools": len(listed.tools) > 5,
                "ask_name": getattr(name, "text", None),
                "add": (await client.call_tool("add", {"a": 1, "b": 2})).structured_content}


def test_official_modern_client_uses_a_legacy_server(tmp_path: Path) -> None:
    # The official client checks what a 2026-07-28 result must hold (resultType, cache
    # hints), which the bridge adds to the legacy server's results.
    require_peer("mcp")
    anyio = require_peer("anyio")
    log = tmp_path / "up.jsonl"
    cfg = config(tmp_path, {"feat": guarded("legacy", log, FEATURES)})
    got = anyio.run(_official_modern_host, through(cfg))
    assert got == {"version": "2026-07-28", "tools": True, "ask_name": "hello Mo",
                   "add": {"sum": 3}}
    assert methods(log).count("initialize") == 1


# ---------------------------------------------------------------- legacy host, modern server

def test_legacy_host_uses_a_modern_server(tmp_path: Path) -> None:
    log = tmp_path / "up.jsonl"
    asked: list[str] = []

    def elicit(request: Any) -> dict[str, Any]:
        asked.append(request.message)
        return {"action": "accept", "content": {"name": "Ada", "v": request.message}}

    cfg = config(tmp_path, {"feat": guarded("modern", log, FEATURES)})
    with mcpsync.connect(through(cfg), protocol_version="2025-11-25", elicitation=elicit,
                         sampling=_sample, roots=["file:///r"], timeout=30) as client:
        assert client.server_info.protocol_version == "2025-11-25"
        assert client.server_info.name == "features"
        assert "ask_name" in {t.name for t in client.list_tools()}
        assert client.call_tool("greet", {"name": "x"}).text == "hello x"
        assert client.call_tool("ask_name", {}).text == "hello Ada"
        assert client.call_tool("ask_twice", {}).text == "Name? likes Colour?"
        assert client.call_tool("ask_many", {}).text == "Ada | got 1 | 1 roots"
        client.ping()
    assert asked == ["Your name?", "Name?", "Colour?", "Your name?"]
    frames = seen(log)
    kinds = methods(log)
    assert "initialize" not in kinds and "notifications/initialized" not in kinds
    assert "ping" not in kinds
    # Every request carried the modern _meta, with the host's capabilities in modern shape.
    for frame in frames:
        if "id" in frame and "method" in frame:
            meta = frame["params"]["_meta"]
            assert meta["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"
    calls = [f for f in frames if f.get("method") == "tools/call"]
    caps = calls[-1]["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]
    assert caps["roots"] == {} and "elicitation" in caps and "sampling" in caps
    # Input rounds: the retries carried inputResponses under new ids, never the host's.
    retries = [f for f in calls if "inputResponses" in f["params"]]
    assert len(retries) == 4
    assert all(str(f["id"]).startswith("mcpsync-bridge-") for f in retries)


def test_legacy_host_subscribes_on_a_modern_server(tmp_path: Path) -> None:
    log = tmp_path / "up.jsonl"
    cfg = config(tmp_path, {"feat": guarded("modern", log, FEATURES)})
    heard: list[str] = []
    got = threading.Event()
    tools_changed = threading.Event()
    with mcpsync.connect(through(cfg), protocol_version="2025-11-25", timeout=30) as client:
        client.on_list_changed("tools", lambda kind: tools_changed.set())
        with client.subscribe("memo://greeting", lambda uri: (heard.append(uri), got.set())):
            client.call_tool("touch", {"uri": "memo://logo"})
            client.call_tool("touch", {"uri": "memo://greeting"})
            assert got.wait(10), "no resources/updated reached the legacy host"
        client.call_tool("add_extra", {"name": "x1"})
        assert tools_changed.wait(10), "no tools/list_changed reached the legacy host"
        assert "x1" in {t.name for t in client.list_tools()}
    assert heard == ["memo://greeting"]
    listens = [f for f in seen(log) if f.get("method") == "subscriptions/listen"]
    assert any(f["params"]["notifications"].get("resourceSubscriptions")
               == ["memo://greeting"] for f in listens)
    assert "resources/subscribe" not in methods(log)



def test_legacy_host_cancels_a_call_waiting_on_its_input(tmp_path: Path) -> None:
    # The call times out while the host's own callback still runs: the round ends in the
    # bridge (nothing is upstream to cancel), and the late answer goes nowhere.
    log = tmp_path / "up.jsonl"
    cfg = config(tmp_path, {"feat": guarded("modern", log, FEATURES)})

    def slow_elicit(request: Any) -> dict[str, Any]:
        time.sleep(1.5)
        return {"action": "accept", "content": {"name": "Late"}}

    with mcpsync.connect(through(cfg), protocol_version="2025-11-25", timeout=30,
                         elicitation=slow_elicit) as client:
        with pytest.raises(mcpsync.RequestTimeout):
            client.call_tool("ask_name", {}, timeout=0.5)
        time.sleep(1.5)
        assert client.call_tool("greet", {"name": "on"}).text == "hello on"
    frames = seen(log)
    assert not [f for f in frames if "result" in f or "error" in f]   # no stray answers
    assert [f["params"]["name"] for f in frames if f.get("method") == "tools/call"] == [
        "ask_name", "greet"]


async def _official_legacy_host(argv: list[str]) -> dict[str, Any]:
    from mcp import Client, types
    from mcp.client.stdio import StdioServerParameters

    async def on_elicit(context: Any, params: Any) -> Any:
        return types.ElicitResult(action="accept", content={"name": "Dee"})

    async def on_sample(context: Any, params: Any) -> Any:
        return types.CreateMessageResult(role="assistant", model="m",
                                         content=types.TextContent(type="text", text="ok"))

    async def on_roots(context: Any) -> Any:
        return types.ListRootsResult(roots=[types.Root(uri="file:///w")])

    params = StdioServerParameters(command=argv[0], args=argv[1:])
    async with Client(params, mode="legacy", elicitation_callback=on_elicit,
                      sampling_callback=on_sample, list_roots_callback=on_roots,
                      read_timeout_seconds=30) as client:
        name = (await client.call_tool("ask_name", {})).content[0]
        many = (await client.call_tool("ask_many", {})).content[0]
        return {"version": client.protocol_version, "ask_name": getattr(name, "text", None),
                "ask_many": getattr(many, "text", None)}


def test_official_legacy_client_uses_a_modern_server(tmp_path: Path) -> None:
    require_peer("mcp")
    anyio = require_peer("anyio")
    log = tmp_path / "up.jsonl"
    cfg = config(tmp_path, {"feat": guarded("modern", log, FEATURES)})
    got = anyio.run(_official_legacy_host, through(cfg))
    assert got == {"version": "2025-11-25", "ask_name": "hello Dee",
                   "ask_many": "Dee | ok | 1 roots"}
    assert "initialize" not in methods(log)


# ---------------------------------------------------------------- several upstreams, mixed eras

@pytest.mark.parametrize("host", ["2026-07-28", "2025-11-25"])
def test_mixed_eras_behind_one_aggregating_gateway(tmp_path: Path, host: str) -> None:
    old_log, new_log = tmp_path / "old.jsonl", tmp_path / "new.jsonl"
    cfg = config(tmp_path, {"old": guarded("legacy", old_log, FEATURES),
                            "new": guarded("modern", new_log, FEATURES)})
    answer = {"action": "accept", "content": {"name": "Eve"}}
    with mcpsync.connect(through(cfg), protocol_version=host, timeout=30,
                         elicitation=lambda req: answer) as client:
        assert client.server_info.protocol_version == host
        names = {t.name for t in client.list_tools()}
        assert {"old__ask_name", "new__ask_name"} <= names
        assert client.call_tool("old__ask_name", {}).text == "hello Eve"
        assert client.call_tool("new__ask_name", {}).text == "hello Eve"
        assert client.call_tool("new__greet", {"name": "n"}).text == "hello n"
    assert methods(old_log).count("initialize") == 1
    assert "initialize" not in methods(new_log)


# ---------------------------------------------------------------- bytes, restarts, refusals

class BridgedRawHost(RawHost):
    """The raw host of the pass-through tests, on ``mcpsync gateway --bridge``."""

    def __init__(self, config: str) -> None:
        self.proc = subprocess.Popen([*GATEWAY, config, "--bridge"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.stderr: list[bytes] = []
        self._drain = threading.Thread(target=self._read_err, name="test-gw-stderr",
                                       daemon=True)
        self._drain.start()


META = ('{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
        '"io.modelcontextprotocol/clientCapabilities":{"roots":{}},'
        '"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"}}')


def _call(rid: str, name: str, extra: str = "") -> str:
    return ('{"jsonrpc":"2.0","id":' + rid + ',"method":"tools/call","params":{"name":"'
            + name + '","arguments":{},' + extra + '"_meta":' + META + '}}')


def test_raw_modern_host_on_the_odd_legacy_server(tmp_path: Path) -> None:
    host = BridgedRawHost(write_config(tmp_path, {"odd": ODD}))
    try:
        discover = host.call('{"jsonrpc":"2.0","id":1,"method":"server/discover",'
                             '"params":{"_meta":' + META + '}}')
        result = discover["result"]
        assert result["supportedVersions"] == ["2026-07-28"]
        assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "odd-peer"
        assert result["capabilities"] == {"tools": {}}
        # A result reaches the host byte for byte, but for the resultType a 2026-07-28
        # result carries, appended.
        host.send(_call("2", "odd"))
        assert host.recv() == (f'{{"jsonrpc":"2.0","id":2,"result":{ODD_RESULT[:-1]},'
                               f'"resultType":"complete"}},{ODD_EXTRA}}}').encode()
        # The server's roots/list becomes an input_required answer to the call...
        asked = host.call(_call('"c1"', "ask"))
        assert asked["id"] == "c1"
        rounds = asked["result"]
        assert rounds["resultType"] == "input_required"
        [(key, request)] = rounds["inputRequests"].items()
        assert request["method"] == "roots/list"
        state = json.dumps(rounds["requestState"])
        # ...and the retry's answer goes to the server as the response to its own request.
        answer = '{"roots":[{"uri":"file:///w","name":"w 1.50"}]}'
        final = host.call(_call('"c2"', "ask", '"inputResponses":{"' + key + '":' + answer
                                + '},"requestState":' + state + ','))
        assert final["id"] == "c2"
        assert final["result"]["content"][0]["text"] == (
            '{"jsonrpc":"2.0","id":"s2c-1","result":' + answer + '}')
        # The same requestState again: the call is over, so the bridge says so.
        again = host.call(_call('"c3"', "ask", '"inputResponses":{},"requestState":'
                                + state + ','))
        assert again["error"]["code"] == -32602
        assert "odd" in again["error"]["message"]
        # A retry cancelled: the server hears the cancel under the call's first id; an
        # answer it sends after the cancel reaches no one, one sent before it comes under
        # the retry's id (never the first id, which the host saw answered already).
        asked = host.call(_call('"d1"', "ask"))
        state = json.dumps(asked["result"]["requestState"])
        [key] = asked["result"]["inputRequests"]
        host.send(_call('"d2"', "ask", '"inputResponses":{"' + key + '":{"roots":[]}},'
                        '"requestState":' + state + ',')
                  + '\n{"jsonrpc":"2.0","method":"notifications/cancelled",'
                    '"params":{"requestId":"d2"}}')
        # A crash fails the call; the next one restarts the server, initialized again by the
        # bridge (the host never sent initialize).
        host.send(_call("4", "die"))
        died = json.loads(host.recv())
        if died.get("id") == "d2":
            died = json.loads(host.recv())
        assert died["id"] == 4 and died["error"]["data"] == {"upstream": "odd"}, died
        host.send(_call("5", "odd"))
        assert host.recv().startswith(b'{"jsonrpc":"2.0","id":5,"result":{"z":1.50')
        # A list gets the cache hints a 2026-07-28 list carries: none, so never cached.
        listed = host.call('{"jsonrpc":"2.0","id":6,"method":"tools/list","params":{"_meta":'
                           + META + '}}')
        assert listed["result"]["ttlMs"] == 0 and listed["result"]["cacheScope"] == "private"
        assert listed["result"]["tools"][0]["x-unknown"] == 1
    finally:
        assert host.close() == 0


def test_bridge_refuses_nonsense(tmp_path: Path) -> None:
    entry = {"command": sys.executable, "args": [str(PEERS / "odd_server.py")]}
    with pytest.raises(ConfigError, match=r"'odd' has \"era\": 'medieval'; use one of"):
        mcpsync.Gateway({"mcpServers": {"odd": {**entry, "era": "medieval"}}}, bridge=True)
    with pytest.raises(ConfigError, match="only the bridge reads; run the gateway with "
                                          "--bridge"):
        mcpsync.Gateway({"mcpServers": {"odd": {**entry, "era": "legacy"}}})
    with pytest.raises(ConfigError, match="bridge must be True or False"):
        mcpsync.Gateway({"mcpServers": {"odd": entry}}, bridge="yes")  # type: ignore[arg-type]


# ---------------------------------------------------------------- over HTTP

@pytest.mark.parametrize("official_http_server", ["sse-stateful"], indirect=True)
def test_modern_host_official_http_server_pinned_legacy(tmp_path: Path,
                                                        official_http_server: Any) -> None:
    # The official server speaks both eras; "era": "legacy" makes the bridge speak
    # 2025-11-25 to it (initialize, a session, its elicitation as a request on the stream).
    path = tmp_path / "http.json"
    path.write_text(json.dumps({"mcpServers": {"official": {
        "url": official_http_server.url, "era": "legacy"}}}))
    answer = {"action": "accept", "content": {"name": "Hal", "age": 9}}
    with mcpsync.connect(through(str(path)), protocol_version="2026-07-28", timeout=30,
                         elicitation=lambda req: answer) as client:
        assert client.server_info.name == "official-http-peer"
        assert client.call_tool("echo", {"text": "over http"}).text == "over http"
        assert client.call_tool("add", {"a": 1, "b": 2}).structured == {"sum": 3.0}
        assert client.call_tool("greet", {}).text == "hello Hal (9)"


def test_legacy_host_modern_http_server(tmp_path: Path) -> None:
    # Our feature server on Streamable HTTP, pinned modern: the bridge sends it 2026-07-28
    # POSTs (no initialize, no session) and turns its input rounds into requests to the host.
    served = Served(feature_server.build())
    try:
        path = tmp_path / "http.json"
        path.write_text(json.dumps({"mcpServers": {"feat": {"url": served.url,
                                                            "era": "modern"}}}))
        with mcpsync.connect(through(str(path)), protocol_version="2025-11-25", timeout=30,
                             elicitation=lambda req: {"action": "accept",
                                                      "content": {"name": "Ida"}}) as client:
            assert client.server_info.protocol_version == "2025-11-25"
            assert client.call_tool("greet", {"name": "h"}).text == "hello h"
            assert client.call_tool("ask_name", {}).text == "hello Ida"
            assert served.server.runs["ask_name"] == 2   # type: ignore[attr-defined]
    finally:
        served.close()


def test_a_server_that_could_not_start_is_probed_again(tmp_path: Path) -> None:
    # The probe cannot reach a server that does not start; once it can be started, the
    # next request probes again, so the server is bridged as what it is.
    script = tmp_path / "server.sh"
    log = tmp_path / "up.jsonl"
    host = BridgedRawHost(config(tmp_path, {"late": [str(script)]}))
    discover = ('{"jsonrpc":"2.0","id":ID,"method":"server/discover","params":{"_meta":'
                + META + '}}')
    try:
        first = host.call(discover.replace("ID", "1"))
        assert "could not be started" in first["error"]["message"]
        argv = " ".join(f"'{a}'" for a in guarded("legacy", log, FEATURES))
        script.write_text(f"#!/bin/sh\nexec {argv}\n")
        script.chmod(0o755)
        second = host.call(discover.replace("ID", "2"))
        assert second["id"] == 2
        info = second["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]
        assert info["name"] == "features"
        assert methods(log)[:2] == ["server/discover", "initialize"]
    finally:
        assert host.close() == 0
