"""The handshake against slow, silent and unlimited-timeout cases, with real processes.

- a modern server slower to start than ``probe_timeout`` (the official SDK's stdio peer
  behind a ``sleep``) refuses the fallback ``initialize`` with -32022; the client probes
  once more and connects as modern;
- a server that never answers the probe yet refuses ``initialize`` that way fails with an
  error that names the fix;
- ``era="modern"`` against a silent server says the probe timed out;
- ``timeout=math.inf`` is accepted, and the handshake stays bounded.
"""

from __future__ import annotations

import math
import shlex
import sys
import time

import pytest
from helpers import PEERS, require_peer

import mcpsync
from mcpsync.client import _handshake

pytestmark = pytest.mark.timeout(90)

SCRIPTED = str(PEERS / "scripted_server.py")
OFFICIAL = str(PEERS / "official_stdio_server.py")


@pytest.fixture(autouse=True)
def _fresh_memory() -> None:
    _handshake.forget_era()


def _slow_start(seconds: float, *argv: str) -> list[str]:
    """Start ``argv`` only after ``seconds``: the client's first messages wait in the pipe."""
    return ["/bin/sh", "-c", f"sleep {seconds}; exec {shlex.join(argv)}"]


def test_a_slow_starting_modern_server_is_probed_again_and_connects() -> None:
    require_peer("mcp")
    argv = _slow_start(1.0, sys.executable, OFFICIAL)
    start = time.monotonic()
    with mcpsync.connect(argv, probe_timeout=0.3, timeout=20) as client:
        elapsed = time.monotonic() - start
        assert client.era == "modern"
        assert client.server_info.name == "official-peer"
        assert client.call_tool("echo", {"text": "hi"}).text == "hi"
    assert elapsed < 15, f"connect took {elapsed:.1f} s"
    assert _handshake.remembered_era((tuple(argv), None)) == "modern"


def test_a_modern_server_that_ignores_the_probe_names_the_fix() -> None:
    start = time.monotonic()
    with pytest.raises(mcpsync.UnsupportedProtocolVersion) as info:
        mcpsync.connect([sys.executable, SCRIPTED, "modern-deaf"], probe_timeout=0.3,
                        timeout=0.5)
    elapsed = time.monotonic() - start
    message = str(info.value)
    assert "refused initialize as a modern server does (it speaks ['2026-07-28'])" in message
    assert "raise probe_timeout= or connect with era='modern'" in message
    assert "none of which this client speaks" not in message
    assert info.value.supported == ["2026-07-28"]
    assert elapsed < 5, f"the error took {elapsed:.1f} s"


def test_era_modern_against_a_silent_server_says_it_timed_out() -> None:
    start = time.monotonic()
    with pytest.raises(mcpsync.RequestTimeout) as info:
        mcpsync.connect([sys.executable, SCRIPTED, "legacy-silent"], era="modern",
                        timeout=0.5)
    elapsed = time.monotonic() - start
    message = str(info.value)
    assert "server/discover got no answer within 0.5 s" in message, message
    assert "as a legacy server does" not in message
    assert info.value.method == "server/discover"
    assert elapsed < 5, f"the error took {elapsed:.1f} s"


def test_an_unlimited_timeout_is_accepted_for_the_client_and_the_config() -> None:
    demo = [sys.executable, "-m", "mcpsync.demo"]
    with mcpsync.connect(demo, timeout=math.inf) as client:
        assert client.call_tool("echo", {"text": "x"}).text == "x"
    config = mcpsync.ServerConfig(command=demo[0], args=demo[1:], timeout=math.inf)
    with mcpsync.connect(config) as client:
        assert client.call_tool("echo", {"text": "y"}).text == "y"


def test_an_unlimited_timeout_keeps_the_handshake_bounded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``timeout=math.inf`` a server that never answers initialize still fails, at the
    handshake bound (shortened here so the test is quick)."""
    monkeypatch.setattr(_handshake, "HANDSHAKE_BOUND", 0.5)
    start = time.monotonic()
    with pytest.raises(mcpsync.RequestTimeout) as info:
        mcpsync.connect([sys.executable, SCRIPTED, "silent-init"], era="legacy",
                        timeout=math.inf)
    elapsed = time.monotonic() - start
    assert info.value.method == "initialize"
    assert elapsed < 5, f"the error took {elapsed:.1f} s"
