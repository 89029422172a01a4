"""Era bridging through the gateway command, end to end with real servers.

A modern host (our client pinned to 2026-07-28) reaches legacy-only servers, and a legacy
host (our client pinned to 2025-11-25, the official SDK client) reaches modern-only ones, all
through ``mcpsync gateway --bridge``. The servers are our feature server and the official
SDK's, made one-era by ``peers/era_guard.py``, which also logs what reached them: so each
test can see that the server really was spoken to in its own era.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import mcpsync
from gateway.helpers_gw import GATEWAY, PEERS

ROOT = Path(__file__).resolve().parents[2]
FEATURES = [sys.executable, str(ROOT / "tests" / "peers" / "feature_server.py")]
OFFICIAL = [sys.executable, str(ROOT / "tests" / "peers" / "official_stdio_server.py")]
GUARD = [sys.executable, str(PEERS / "era_guard.py")]


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
