"""Per-server OAuth through a Manager: each server gets its own token and nothing else.

Two MCP servers, each an OAuth protected resource of its own real authlib authorization
server (``auth_peers``), plus the stdio demo server, behind one Manager. Each MCP server
records every request with its ``Authorization``; the tests then check that every token a
server saw was issued by its own authorization server (never the other's), that a revoked
token is refreshed and the call retried for that server alone, and that the stdio server
starts beside them. The same is run with ``ServerConfig(auth=OAuthProvider(...))`` built in
Python, from a config file through ``Manager.from_config``, and through the ``mcpsync``
command, where each server's first 401 starts a browser login (``tests/cli/fake_browser.py``)
and a later command reuses the stored logins.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests
from auth_peers.fixtures import ProtectedMCP
from cli.test_cli_login import _browser, _env, _mcpsync, _workdir

import mcpauth
import mcpsync
from mcpsync import Manager, ServerConfig

pytestmark = pytest.mark.timeout(90)
DEMO = [sys.executable, "-m", "mcpsync.demo"]


def _follow_authorize(url: str) -> str:
    """The headless authorization handler: the AS auto-approves; return where it redirects."""
    response = requests.get(url, allow_redirects=False, timeout=5)
    assert response.status_code in (302, 303), response.text
    return response.headers["Location"]


def _login(server: ProtectedMCP, store: Any) -> None:
    """What ``mcpsync login URL`` does, headless: the token lands in ``store``."""
    provider = mcpauth.OAuthProvider(server.url, store=store,
                                     authorization_handler=_follow_authorize)
    try:
        provider.login()
    finally:
        provider.close()


def _seen(server: ProtectedMCP) -> list[str]:
    """Every Authorization value the MCP server received (requests without one left out)."""
    return [value for r in server.mcp_requests()
            if (value := r.header("Authorization")) is not None]


def _assert_only_own_tokens(mine: ProtectedMCP, other: ProtectedMCP) -> int:
    seen = _seen(mine)
    assert seen, "the server saw no token at all"
    for value in seen:
        scheme, _, token = value.partition(" ")
        assert scheme == "Bearer"
        assert mine.auth.token(token) is not None, "a token its own AS never issued"
        assert other.auth.token(token) is None, "the other server's token arrived here"
    return len(seen)


def _config_file(tmp_path: Path, a: ProtectedMCP, b: ProtectedMCP) -> Path:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {
        "alpha": {"url": a.url},                                       # no oauth object
        "beta": {"type": "http", "url": b.url, "oauth": {"scopes": "mcp:tools"}},
        "local": {"command": DEMO[0], "args": DEMO[1:]},
    }}), encoding="utf-8")
    return path


def _exercise(manager: Manager, a: ProtectedMCP, b: ProtectedMCP) -> None:
    results = manager.start_all()
    assert results == {"alpha": None, "beta": None, "local": None}
    for sid in ("alpha", "beta", "local"):
        assert manager.call_tool(sid, "echo", {"text": sid}).text == sid
    # alpha's AS revokes every token it issued: alpha refreshes and retries, beta is untouched.
    a.auth.revoke_access_tokens()
    assert manager.call_tool("alpha", "echo", {"text": "after"}).text == "after"
    assert manager.call_tool("beta", "echo", {"text": "after"}).text == "after"
    assert a.auth.token_requests.get("refresh_token") == 1
    assert b.auth.token_requests.get("refresh_token") is None


@pytest.mark.parametrize("how", ["python", "config-file"])
def test_two_oauth_servers_and_a_stdio_server_each_get_only_their_token(
        protected_mcp_factory: Callable[..., ProtectedMCP], tmp_path: Path, how: str,
        no_leaks: None) -> None:
    a, b = protected_mcp_factory(), protected_mcp_factory()
    store = mcpauth.MemoryTokenStore()
    _login(a, store)
    _login(b, store)
    providers: list[Any] = []
    if how == "python":
        for server in (a, b):
            providers.append(mcpauth.OAuthProvider(server.url, store=store, interactive=False))
        configs = [ServerConfig(id="alpha", url=a.url, auth=providers[0]),
                   ServerConfig(id="beta", url=b.url, auth=providers[1]),
                   ServerConfig(id="local", command=DEMO[0], args=DEMO[1:])]
        manager = Manager(configs=configs, connect_options={"timeout": 20})
    else:
        manager = Manager.from_config(_config_file(tmp_path, a, b), token_store=store,
                                      connect_options={"timeout": 20})
    try:
        with manager:
            _exercise(manager, a, b)
    finally:
        for provider in providers:
            provider.close()
    count = _assert_only_own_tokens(a, b) + _assert_only_own_tokens(b, a)
    assert count >= 8
    # No second login anywhere: the stored logins and one refresh were enough.
    assert a.auth.token_requests.get("authorization_code") == 1
    assert b.auth.token_requests.get("authorization_code") == 1


def test_the_cli_logs_in_to_each_server_at_its_first_401_and_reuses_the_logins(
        protected_mcp_factory: Callable[..., ProtectedMCP], tmp_path: Path) -> None:
    a, b = protected_mcp_factory(), protected_mcp_factory()
    config = _config_file(tmp_path, a, b)
    cwd = _workdir(tmp_path)
    first = _mcpsync("--config", str(config), "--json", "tools",
                     env=_env(tmp_path, _browser()), cwd=cwd)
    assert first.code == 0, first.stderr
    listed = json.loads(first.stdout)
    assert {t["server"] for t in listed} >= {"alpha", "beta", "local"}, listed
    assert len(a.auth.authorizations) == 1 and len(b.auth.authorizations) == 1
    # A later command: the stored logins are used (the browser must not start), a revoked
    # token of beta is refreshed, and each server still sees only its own tokens.
    b.auth.revoke_access_tokens()
    forbidden = tmp_path / "forbidden-browser-started"
    env = _env(tmp_path, _browser("--forbidden", str(forbidden)))
    for sid in ("alpha", "beta", "local"):
        run = _mcpsync("--config", str(config), "call", sid, "echo", f"text={sid}",
                       env=env, cwd=cwd)
        assert run.code == 0, run.stderr
        assert run.stdout == f"{sid}\n"
    assert not forbidden.exists()
    assert b.auth.token_requests.get("refresh_token") == 1
    assert a.auth.token_requests.get("refresh_token") is None
    _assert_only_own_tokens(a, b)
    _assert_only_own_tokens(b, a)


def test_connect_options_cannot_carry_credentials() -> None:
    for key, value in (("auth", "t0ken"), ("headers", {"Authorization": "Bearer x"}),
                       ("session", object()), ("authorization", lambda: "Bearer x")):
        with pytest.raises(mcpsync.ConfigError) as info:
            Manager(connect_options={key: value})
        assert key in str(info.value)
        assert "set credentials per server with ServerConfig(auth=...)" in str(info.value)
        assert "t0ken" not in str(info.value)
