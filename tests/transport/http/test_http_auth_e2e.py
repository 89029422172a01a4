"""The auth hooks through a whole client, against the fault-injecting loopback server.

The flow itself is unit-tested in ``test_http_auth_flow.py``; these tests check that a real
``mcpsync.connect(url, auth=...)`` client runs every request through it: a second 401 ends in
``Unauthorized``, a DPoP nonce challenge gets its one extra retry, and a 403
``insufficient_scope`` is a step-up. And a ``~/.netrc`` entry for the server's host never
replaces the token (``requests`` alone would send the entry's Basic credentials instead).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import pytest
from http_peers.fault_server import (
    FaultServer,
    dpop_nonce_challenge,
    insufficient_scope,
    unauthorized,
)

import mcpsync
from mcpsync import HttpChallenge


def _legacy(server: FaultServer, **faults: Any) -> FaultServer:
    server.faults.era = "legacy"
    for key, value in faults.items():
        setattr(server.faults, key, value)
    return server


class Hooks:
    """Records every challenge; ``new_token`` is what a refresh or step-up yields."""

    def __init__(self, token: str, new_token: str | None = None) -> None:
        self.token = token
        self.new_token = new_token
        self.calls: list[HttpChallenge] = []

    def headers(self, method: str, url: str) -> Mapping[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def on_unauthorized(self, challenge: HttpChallenge) -> None:
        self.calls.append(challenge)
        if self.new_token is not None:
            self.token = self.new_token


def test_a_second_401_raises_unauthorized_without_the_token(fault_server: FaultServer) -> None:
    server = _legacy(fault_server, require_authorization="Bearer good")
    hooks = Hooks("s3cr3t-stale")  # the refresh never yields a token the server accepts
    with pytest.raises(mcpsync.Unauthorized) as info:
        mcpsync.connect(server.url, auth=hooks, timeout=5)
    assert info.value.status == 401
    assert info.value.www_authenticate
    assert "s3cr3t-stale" not in str(info.value) and "s3cr3t-stale" not in repr(info.value)
    assert len(hooks.calls) == 1


def test_dpop_nonce_challenge_gets_one_more_hook_call_and_retry(
        fault_server: FaultServer) -> None:
    server = _legacy(fault_server)
    hooks = Hooks("t")
    # The first tools/call meets a plain 401, its retry a DPoP nonce challenge.
    server.faults.script.append(dataclasses.replace(unauthorized(), match="tools/call"))
    server.faults.script.append(dataclasses.replace(dpop_nonce_challenge("n-1"),
                                                    match="tools/call"))
    with mcpsync.connect(server.url, auth=hooks, timeout=5) as client:
        assert client.call_tool("echo", {"text": "ok"}).text == "ok"
    assert [c.status for c in hooks.calls] == [401, 401]
    assert hooks.calls[1].headers.get("dpop-nonce") == "n-1"
    assert any("use_dpop_nonce" in value for value in hooks.calls[1].www_authenticate)


def test_403_insufficient_scope_is_a_step_up(fault_server: FaultServer) -> None:
    server = _legacy(fault_server)
    server.faults.script.append(dataclasses.replace(insufficient_scope("tools:write"),
                                                    match="tools/call"))
    hooks = Hooks("narrow", new_token="wide")
    with mcpsync.connect(server.url, auth=hooks, timeout=5) as client:
        assert client.call_tool("echo", {"text": "ok"}).text == "ok"
    assert [c.status for c in hooks.calls] == [403]
    calls = [r for r in server.requests if r.rpc_method == "tools/call"]
    assert [r.header("Authorization") for r in calls] == ["Bearer narrow", "Bearer wide"]


NETRC_BASIC = "Basic bnU6bnA="   # login nu, password np


@pytest.fixture()
def netrc_for_loopback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home whose ``.netrc`` has credentials for 127.0.0.1 (NETRC unset)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("NETRC", raising=False)
    (tmp_path / ".netrc").write_text("machine 127.0.0.1 login nu password np\n")
    (tmp_path / ".netrc").chmod(0o600)
    return tmp_path


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_netrc_never_replaces_the_token(era: Literal["legacy", "modern"], fault_server: FaultServer,
                                        netrc_for_loopback: Path) -> None:
    server = fault_server
    server.faults.era = era
    with mcpsync.connect(server.url, auth="OAUTH-TOKEN", timeout=5) as client:
        assert client.call_tool("echo", {"text": "ok"}).text == "ok"
    sent = [r.header_values("Authorization") for r in server.requests]
    assert sent and all(values == ["Bearer OAUTH-TOKEN"] for values in sent), sent


def test_netrc_credentials_still_sent_without_auth(fault_server: FaultServer,
                                                   netrc_for_loopback: Path) -> None:
    """Without any auth, the entry for the host is sent, as ``requests`` sends it."""
    server = fault_server
    with mcpsync.connect(server.url, timeout=5) as client:
        assert client.call_tool("echo", {"text": "ok"}).text == "ok"
    sent = [r.header_values("Authorization") for r in server.requests]
    assert sent and all(values == [NETRC_BASIC] for values in sent), sent
