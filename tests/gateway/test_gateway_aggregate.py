"""Several upstreams behind one gateway command: prefixed tool names, calls routed by the
name table, ids remapped under concurrency, one upstream's death leaving the others alone."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import PEERS, require_peer

import mcpsync
from gateway.helpers_gw import GATEWAY, ODD, child_pids, write_config

pytestmark = pytest.mark.timeout(90)

DEMO = [sys.executable, "-m", "mcpsync.demo"]
OFFICIAL = [sys.executable, str(PEERS / "official_stdio_server.py")]


def _argv(tmp_path: Path) -> list[str]:
    return [*GATEWAY, write_config(tmp_path, {"demo": DEMO, "official": OFFICIAL, "odd": ODD})]


@pytest.mark.parametrize("era", ["auto", "legacy"])
def test_three_upstreams_as_one_server(tmp_path: Path, era: str) -> None:
    require_peer("mcp")
    with mcpsync.connect(_argv(tmp_path), era=era) as client:
        assert client.era == ("modern" if era == "auto" else "legacy")
        assert client.server_info.name == "mcpsync-gateway"
        names = {t.name for t in client.list_tools()}
        assert {"demo__echo", "demo__add", "demo__slow", "official__add", "official__echo",
                "odd__odd"} <= names
        assert client.call_tool("demo__add", {"a": 1, "b": 2}).structured == {"sum": 3}
        assert client.call_tool("official__add", {"a": 1, "b": 2}).structured == {"sum": 3.0}
        assert client.call_tool("odd__odd").text == "odd"
        progress: list[float] = []
        client.call_tool("demo__slow", {"seconds": 0.1, "steps": 2},
                         progress=lambda p, t, m: progress.append(p))
        assert progress == [1.0, 2.0]
        with pytest.raises(mcpsync.RemoteError, match="no tool named 'nope'"):
            client.submit("tools/call", {"name": "nope", "arguments": {}}).result(timeout=10)


def test_fifty_threads_across_three_upstreams_get_their_own_answers(tmp_path: Path) -> None:
    require_peer("mcp")
    errors: list[str] = []
    answered = []
    with mcpsync.connect(_argv(tmp_path), era="legacy") as client:
        client.list_tools()

        def work(k: int) -> None:
            for i in range(4):
                tool = ("demo__echo", "official__echo")[(k + i) % 2]
                text = f"t{k}-{i}"
                try:
                    got = client.call_tool(tool, {"text": text}).text
                except Exception as exc:
                    errors.append(f"{tool} {text!r}: {exc}")
                    continue
                answered.append(text)
                if got != text:
                    errors.append(f"{tool} {text!r} -> {got!r}")
        threads = [threading.Thread(target=work, args=(k,), name=f"test-agg-{k}")
                   for k in range(50)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert errors == []
    assert len(answered) == 200


def test_one_upstream_dying_fails_its_call_and_leaves_the_others(tmp_path: Path) -> None:
    require_peer("mcp")
    with mcpsync.connect(_argv(tmp_path), era="legacy") as client:
        assert client.pid is not None
        before = set(child_pids(client.pid))
        client.list_tools()   # the host learns the names (the gateway's table with them)
        future = client.submit("tools/call", {"name": "demo__slow",
                                              "arguments": {"seconds": 30, "steps": 30}})
        time.sleep(0.5)
        demo_pid = next(p for p in before
                        if b"mcpsync.demo" in Path(f"/proc/{p}/cmdline").read_bytes())
        started = time.monotonic()
        os.kill(demo_pid, signal.SIGKILL)
        with pytest.raises(mcpsync.RemoteError, match="upstream 'demo' stopped"):
            future.result(timeout=10)
        assert time.monotonic() - started < 3.0
        assert client.call_tool("official__echo", {"text": "still"}).text == "still"
        assert client.call_tool("demo__add", {"a": 2, "b": 2}).structured == {"sum": 4}
