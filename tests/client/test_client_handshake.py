"""Era detection and the handshake, against the scripted peer."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import PEERS

import mcpsync
from mcpsync.client import _handshake

pytestmark = pytest.mark.timeout(60)

SCRIPTED = str(PEERS / "scripted_server.py")


def argv(mode: str) -> list[str]:
    return [sys.executable, SCRIPTED, mode]


def sent(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def methods(log: Path) -> list[str]:
    return [m["method"] for m in sent(log) if "method" in m]


@pytest.fixture(autouse=True)
def _fresh_memory() -> None:
    _handshake.forget_era()


def test_silent_probe_falls_back_to_legacy_and_is_remembered(tmp_path: Path) -> None:
    log = tmp_path / "log"
    with mcpsync.connect(argv("legacy-silent"), probe_timeout=0.3,
                         env={"SCRIPTED_LOG": str(log)}) as client:
        assert (client.era, client.protocol_version) == ("legacy", "2025-11-25")
        assert client.server_info.name == "scripted" and client.instructions == "scripted"
    assert methods(log)[:3] == ["server/discover", "initialize", "notifications/initialized"]
    probe = sent(log)[0]["params"]["_meta"]
    assert probe["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"
    assert "io.modelcontextprotocol/clientCapabilities" in probe
    assert probe["io.modelcontextprotocol/clientInfo"]["name"] == "mcpsync"
    log.unlink()
    # Same (command, args, cwd): the era is remembered and the probe skipped.
    with mcpsync.connect(argv("legacy-silent"), probe_timeout=30,
                         env={"SCRIPTED_LOG": str(log)}) as client:
        assert client.era == "legacy"
    assert methods(log)[0] == "initialize"


@pytest.mark.parametrize("mode", ["empty-discover", "legacy"])
def test_non_discover_answers_mean_legacy(mode: str) -> None:
    with mcpsync.connect(argv(mode)) as client:
        assert client.era == "legacy"


def test_pinned_legacy_skips_the_probe(tmp_path: Path) -> None:
    log = tmp_path / "log"
    with mcpsync.connect(argv("legacy"), era="legacy", env={"SCRIPTED_LOG": str(log)}):
        pass
    assert "server/discover" not in methods(log)


def test_modern_pin_on_legacy_server_raises(no_leaks: None) -> None:
    with pytest.raises(mcpsync.UnsupportedProtocolVersion):
        mcpsync.connect(argv("legacy"), era="modern")


def test_pinned_legacy_version_mismatch_raises() -> None:
    with pytest.raises(mcpsync.UnsupportedProtocolVersion) as info:
        mcpsync.connect(argv("legacy-old"), protocol_version="2025-06-18")
    assert info.value.requested == "2025-06-18"
    assert info.value.supported == ["2024-11-05"]


def test_older_legacy_answer_is_accepted_unpinned() -> None:
    with mcpsync.connect(argv("legacy-old"), era="legacy") as client:
        assert client.protocol_version == "2024-11-05"


def test_unknown_version_answer_raises_naming_both(no_leaks: None) -> None:
    with pytest.raises(mcpsync.UnsupportedProtocolVersion) as info:
        mcpsync.connect(argv("legacy-bogus"), era="legacy")
    assert "1999-01-01" in str(info.value) and "2025-11-25" in str(info.value)


def test_initialize_error_with_supported_retries_once(tmp_path: Path) -> None:
    log = tmp_path / "log"
    with mcpsync.connect(argv("legacy-init-retry"), era="legacy",
                         env={"SCRIPTED_LOG": str(log)}) as client:
        assert client.protocol_version == "2025-06-18"
    inits = [m for m in sent(log) if m.get("method") == "initialize"]
    assert [m["params"]["protocolVersion"] for m in inits] == ["2025-11-25", "2025-06-18"]


def test_discover_32022_retries_the_probe_once(tmp_path: Path) -> None:
    log = tmp_path / "log"
    with mcpsync.connect(argv("modern-32022"), env={"SCRIPTED_LOG": str(log)}) as client:
        assert client.era == "modern"
    assert methods(log).count("server/discover") == 2
    assert "initialize" not in methods(log)


def test_server_exiting_during_probe_is_restarted_once_as_legacy(
        caplog: pytest.LogCaptureFixture) -> None:
    # exit-on-probe exits on server/discover; the restarted process gets initialize only.
    with (caplog.at_level("WARNING", logger="mcpsync.client"),
          mcpsync.connect(argv("exit-on-probe"), name="quitter") as client):
        assert client.era == "legacy"
    assert any("quitter" in r.getMessage() and "restarting" in r.getMessage()
               for r in caplog.records)


def test_modern_request_meta(tmp_path: Path) -> None:
    log = tmp_path / "log"
    with mcpsync.connect(argv("modern"), env={"SCRIPTED_LOG": str(log)},
                         client_info=None, log_level="debug",
                         elicitation=lambda r: {"action": "decline"}) as client:
        client.call_tool("t", {"x": 1}, meta={"trace": "abc",
                                              "io.modelcontextprotocol/protocolVersion": "no"})
    call = next(m for m in sent(log) if m.get("method") == "tools/call")
    meta = call["params"]["_meta"]
    assert meta["trace"] == "abc"
    assert meta["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"   # ours win
    assert meta["io.modelcontextprotocol/clientCapabilities"] == {"elicitation": {"form": {}}}
    assert meta["io.modelcontextprotocol/logLevel"] == "debug"
    assert "io.modelcontextprotocol/clientInfo" not in meta


def test_late_probe_answer_is_ignored() -> None:
    with mcpsync.connect(argv("legacy-silent-late"), probe_timeout=0.3) as client:
        assert client.era == "legacy"
        assert [t.name for t in client.list_tools()] == ["t", "u"]


def test_wrong_era_memory_is_detected_again() -> None:
    key = (tuple(argv("modern-only")), None)
    _handshake._remember(key, "legacy")
    with mcpsync.connect(argv("modern-only")) as client:
        assert client.era == "modern"
    assert _handshake.remembered_era(key) == "modern"


def test_modern_only_server_refuses_a_legacy_pin() -> None:
    with pytest.raises(mcpsync.UnsupportedProtocolVersion) as info:
        mcpsync.connect(argv("modern-only"), era="legacy")
    assert info.value.supported == ["2026-07-28"]
