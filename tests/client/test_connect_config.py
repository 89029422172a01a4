"""``connect(config, server_id=None)`` from a config file or mapping, and
``stderr="show"``, against real server processes."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
from helpers import PEERS

import mcpsync

pytestmark = pytest.mark.timeout(60)

PEER = {"command": sys.executable, "args": [str(PEERS / "proxy_server.py"), "--stderr"]}
DEMO = {"command": sys.executable, "args": ["-m", "mcpsync.demo"]}


def test_one_entry_and_one_of_several(tmp_path: Path) -> None:
    with mcpsync.connect(DEMO) as client:
        assert client.call_tool("echo", {"text": "x"}).text == "x"
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"demo": DEMO, "peer": PEER}}))
    with pytest.raises(mcpsync.ConfigError, match=r"2 servers \('demo', 'peer'\); pass "
                                                  r"server_id="):
        mcpsync.connect(path)
    with pytest.raises(mcpsync.ConfigError, match=r"no server 'dem'; did you mean 'demo'"):
        mcpsync.connect(path, server_id="dem")
    with mcpsync.connect(path, server_id="demo") as client:
        assert client.name == "demo"
        assert client.call_tool("add", {"a": 1, "b": 2}).structured == {"sum": 3}
    # The VS Code dialect, as a mapping.
    with mcpsync.connect({"servers": {"only": DEMO}}) as client:
        assert client.name == "only"


def test_a_config_without_servers_says_so(tmp_path: Path) -> None:
    for source in ({"mcpServers": {}}, {"servers": {}}):
        with pytest.raises(mcpsync.ConfigError) as empty:
            mcpsync.connect(source)
        assert "it holds no servers" in str(empty.value), empty.value
        assert "0 servers" not in str(empty.value) and "server_id=" not in str(empty.value)
        with pytest.raises(mcpsync.ConfigError, match="it holds no servers"):
            mcpsync.connect(source, server_id="demo")
    path = tmp_path / "empty.json"
    path.write_text('{"mcpServers": {}}')
    with pytest.raises(mcpsync.ConfigError, match=f"connecting from {path}: it holds no"):
        mcpsync.connect(path)


def test_a_secret_ref_needs_a_manager(tmp_path: Path) -> None:
    entry = {**DEMO, "secret_ref": "vault:demo"}
    with pytest.raises(mcpsync.ConfigError, match="use a Manager"):
        mcpsync.connect({"mcpServers": {"demo": entry}})


def test_a_string_stays_a_command_and_server_id_needs_a_config() -> None:
    with mcpsync.connect(f"{sys.executable} -m mcpsync.demo") as client:
        assert client.server_info.name == "mcpsync-demo"
    with pytest.raises(TypeError, match="server_id"):
        mcpsync.connect([sys.executable, "-m", "mcpsync.demo"], server_id="x")


def test_oauth_keys_are_read_as_the_loader_reads_them() -> None:
    entry = {"url": "http://127.0.0.1:9/mcp", "oauth": {"clientId": "abc"}}
    config = mcpsync.load_config({"mcpServers": {"x": entry}})[0]
    from mcpsync.client._connect_config import config_from

    got = config_from(entry, None)
    assert type(got.auth) is type(config.auth) and got.auth is not None
    assert got.url == config.url


def test_stderr_show_prints_through_sys_stderr(monkeypatch: pytest.MonkeyPatch,
                                                capfd: pytest.CaptureFixture[str]) -> None:
    shown = io.StringIO()
    monkeypatch.setattr(sys, "stderr", shown)
    lines: list[str] = []
    with mcpsync.connect(PEER, name="peer", stderr="show", on_stderr=lines.append) as client:
        client.list_tools()
        for _ in range(100):
            if "ready" in shown.getvalue():
                break
            import time

            time.sleep(0.02)
    monkeypatch.undo()
    assert shown.getvalue() == "[peer] proxy-peer: starting\n[peer] proxy-peer: ready\n"
    assert lines == ["proxy-peer: starting", "proxy-peer: ready"]   # the user's callback too
    assert "proxy-peer" not in capfd.readouterr().err     # nothing on file descriptor 2


def test_stderr_is_quiet_by_default_and_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    shown = io.StringIO()
    monkeypatch.setattr(sys, "stderr", shown)
    with mcpsync.connect(PEER) as client:
        client.list_tools()
    monkeypatch.undo()
    assert shown.getvalue() == ""
    with pytest.raises(mcpsync.ConfigError, match="stderr: must be 'show'"):
        mcpsync.connect(DEMO, stderr="print")
