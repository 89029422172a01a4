"""Upstreams side by side (the base aggregation will build on): one that stopped reading does
not hold up another, and each has its own threads, named and joined on close."""

from __future__ import annotations

import sys
import threading
import time

import pytest
from helpers import PEERS

from mcpsync import ServerConfig
from mcpsync._envelope import Envelope, parse_envelope
from mcpsync.errors import ConfigError
from mcpsync.gateway._upstream import Upstream, refuse_self_launch

pytestmark = pytest.mark.timeout(60)

INIT = ('{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":'
        '"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}')


class _Seen:
    def __init__(self) -> None:
        self.lines: list[tuple[str, bytes]] = []
        self.cond = threading.Condition()

    def on_line(self, upstream: Upstream, line: bytes) -> None:
        with self.cond:
            self.lines.append((upstream.id, line))
            self.cond.notify_all()

    def wait_for(self, upstream: str, needle: bytes, timeout: float) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: any(u == upstream and needle in line
                                                  for u, line in self.lines), timeout)


def _upstream(sid: str, argv: list[str], seen: _Seen) -> Upstream:
    def nothing(*args: object) -> None:
        return None
    return Upstream(ServerConfig(id=sid, command=argv[0], args=argv[1:]), on_line=seen.on_line,
                    on_down=nothing, on_refused=nothing, on_failed=nothing)


def test_a_deaf_upstream_does_not_stall_another() -> None:
    seen = _Seen()
    deaf = _upstream("deaf", [sys.executable, str(PEERS / "deaf_server.py")], seen)
    demo = _upstream("demo", [sys.executable, "-m", "mcpsync.demo"], seen)
    try:
        for each in (deaf, demo):
            each.start()
            each.submit(parse_envelope(INIT))
        assert seen.wait_for("deaf", b'"id": 0', 20)
        assert seen.wait_for("demo", b'"id":0', 20)
        deaf.submit(parse_envelope('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":'
                                   '{"name":"deaf","arguments":{"seconds":-1}}}'))
        assert seen.wait_for("deaf", b'"id": 1', 20)
        pad = "y" * 60_000
        queued = 0
        for i in range(200):   # 12 MB: the deaf one's pipe and queue fill up
            big: Envelope = parse_envelope(f'{{"jsonrpc":"2.0","id":{i + 10},"method":"tools/'
                                           f'call","params":{{"name":"n","arguments":'
                                           f'{{"p":"{pad}"}}}}}}')
            queued += deaf.submit(big)
        assert 0 < queued < 200
        started = time.monotonic()
        demo.submit(parse_envelope('{"jsonrpc":"2.0","id":2,"method":"tools/call","params":'
                                   '{"name":"add","arguments":{"a":1,"b":2}}}'))
        assert seen.wait_for("demo", b'"id":2', 10)
        assert time.monotonic() - started < 2.0
        names = {t.name for t in threading.enumerate()}
        assert {"mcpsync-gateway-writer-deaf", "mcpsync-gateway-reader-deaf",
                "mcpsync-gateway-writer-demo", "mcpsync-gateway-reader-demo"} <= names
    finally:
        deadline = time.monotonic() + 15
        stuck = deaf.close(deadline) + demo.close(deadline)
    assert stuck == []


@pytest.mark.parametrize("argv", [
    [sys.executable, "-m", "mcpsync.demo"],
    ["mcpsync", "tools"],
    ["node", "gateway.js"],
    ["uvx", "some-gateway"],
])
def test_other_commands_are_not_taken_for_a_gateway(argv: list[str]) -> None:
    refuse_self_launch(ServerConfig(id="x", command=argv[0], args=argv[1:]), "cfg.json")


@pytest.mark.parametrize("argv", [
    ["uv", "run", "mcpsync", "gateway", "--config", "gw.json"],
    ["/usr/bin/env", "mcpsync", "gateway"],
    ["sh", "-c", "mcpsync gateway --config gw.json"],
    ["bash", "-lc", "cd /srv && exec mcpsync gateway"],
    ["cmd", "/c", "C:\\tools\\mcpsync.exe gateway"],
    ["python3", "-mmcpsync", "gateway"],
    ["python3", "-m", "mcpsync.__main__", "gateway"],
    ["uvx", "mcpsync@1.2", "gateway"],
    ["uvx", "--from", "mcpsync[dev]", "mcpsync", "gateway"],
])
def test_a_disguised_gateway_is_refused(argv: list[str]) -> None:
    """Wrappers and shells that hide the command still launch the gateway: refused."""
    with pytest.raises(ConfigError, match="gateway itself"):
        refuse_self_launch(ServerConfig(id="x", command=argv[0], args=argv[1:]), "cfg.json")


def test_the_refusal_names_file_entry_and_command() -> None:
    config = ServerConfig(id="me", command="python3", args=["-m", "mcpsync", "gateway"])
    with pytest.raises(ConfigError) as info:
        refuse_self_launch(config, "/etc/gw.json")
    text = str(info.value)
    assert "/etc/gw.json" in text and "'me'" in text and "python3 -m mcpsync gateway" in text
