"""Per-server credentials in ``ServerConfig`` and in config files, checked where written.

``ServerConfig(auth=...)`` refuses a second source of credentials beside it; a config file's
``oauth`` object becomes that entry's own (lazy) OAuth provider instead of an ignored key;
``authServerMetadataUrl`` must be https; and the plain ``on_unauthorized`` callable, given a
second parameter, learns which ``Authorization`` the server refused (against the real
loopback fault server, which rotates nothing: the hook does).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import pytest
from http_peers.fault_server import FaultServer

import mcpsync
from mcpsync import BearerToken, ServerConfig
from mcpsync._config_oauth import ConfigOAuth
from mcpsync.config_files import load_config

URL = "http://127.0.0.1:9/mcp"


def test_auth_takes_hooks_a_bearer_token_or_a_str() -> None:
    config = ServerConfig(id="a", url=URL, auth="s3cret")
    assert config.auth == BearerToken("s3cret")
    assert "s3cret" not in repr(config) and "auth=<BearerToken>" in repr(config)
    with pytest.raises(mcpsync.ConfigError, match="auth: only allowed with url"):
        ServerConfig(id="a", command="x", auth="t")
    with pytest.raises(mcpsync.ConfigError, match="auth: expected an AuthHooks object"):
        ServerConfig(id="a", url=URL, auth=42)  # type: ignore[arg-type]


@pytest.mark.parametrize("other", [{"authorization": lambda: "Bearer x"},
                                   {"on_unauthorized": lambda www: None},
                                   {"headers": {"authorization": "Bearer x"}}])
def test_auth_beside_other_credentials_names_both(other: dict[str, Any]) -> None:
    with pytest.raises(mcpsync.ConfigError) as info:
        ServerConfig(id="a", url=URL, auth="t", **other)
    text = str(info.value)
    assert "auth" in text
    assert ("authorization" in text.lower()) or ("on_unauthorized" in text)
    assert "Bearer x" not in text


def test_connect_uses_the_configs_auth(fault_server: FaultServer) -> None:
    fault_server.faults.require_authorization = "Bearer per-server"
    with mcpsync.connect(ServerConfig(id="s", url=fault_server.url, auth="per-server"),
                         timeout=5) as client:
        assert client.call_tool("echo", {"text": "ok"}).text == "ok"
    assert fault_server.rpc_requests("tools/call")[-1].header("Authorization") == \
        "Bearer per-server"


def test_two_argument_on_unauthorized_learns_the_refused_value(
        fault_server: FaultServer) -> None:
    fault_server.faults.require_authorization = "Bearer fresh"
    current = ["Bearer stale"]
    refused: list[tuple[str, str | None]] = []

    def refresh(www_authenticate: str, refused_authorization: str | None) -> None:
        refused.append((www_authenticate, refused_authorization))
        current[0] = "Bearer fresh"

    config = ServerConfig(id="s", url=fault_server.url, authorization=lambda: current[0],
                          on_unauthorized=refresh)
    with mcpsync.connect(config, timeout=5) as client:
        assert client.call_tool("echo", {"text": "ok"}).text == "ok"
    assert [r[1] for r in refused] == ["Bearer stale"]
    # The one-argument form keeps working.
    calls: list[str] = []
    current[0] = "Bearer stale"
    config = ServerConfig(id="s", url=fault_server.url, authorization=lambda: current[0],
                          on_unauthorized=lambda www: (calls.append(www),
                                                       current.__setitem__(0, "Bearer fresh")))
    with mcpsync.connect(config, timeout=5) as client:
        assert client.call_tool("echo", {"text": "ok"}).text == "ok"
    assert len(calls) == 1


def test_the_refused_value_goes_only_to_a_hook_that_asks_for_it(
        fault_server: FaultServer) -> None:
    """An optional second parameter meant for something else never receives the token."""
    fault_server.faults.require_authorization = "Bearer fresh"
    current = ["Bearer stale"]
    seen: list[tuple[str, object]] = []

    def with_log(www_authenticate: str, log: object = None) -> None:
        seen.append(("log", log))
        current[0] = "Bearer fresh"

    def named_refused(www_authenticate: str, refused: str | None = None) -> None:
        seen.append(("refused", refused))
        current[0] = "Bearer fresh"

    def star_args(*args: object) -> None:
        seen.append(("args", args[1:]))
        current[0] = "Bearer fresh"

    for hook in (with_log, named_refused, star_args):
        current[0] = "Bearer stale"
        config = ServerConfig(id="s", url=fault_server.url, authorization=lambda: current[0],
                              on_unauthorized=hook)
        with mcpsync.connect(config, timeout=5) as client:
            assert client.call_tool("echo", {"text": "ok"}).text == "ok"
    assert seen == [("log", None), ("refused", "Bearer stale"), ("args", ())]


def _entry(**entry: Any) -> dict[str, Any]:
    return {"mcpServers": {"srv": {"url": "https://mcp.example.com/mcp", **entry}}}


def test_an_oauth_object_configures_the_entrys_own_provider(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="mcpsync.config"):
        [config] = load_config(_entry(oauth={
            "clientId": "cid", "callbackPort": 33418, "scopes": "read write",
            "authServerMetadataUrl": "https://as.example.com/.well-known/oauth"}))
    hooks = config.auth
    assert isinstance(hooks, ConfigOAuth)
    assert (hooks.client_id, hooks.redirect_port, hooks.scopes) == ("cid", 33418,
                                                                    ("read", "write"))
    assert hooks.metadata_url and hooks.metadata_url.startswith("https://as.example.com/")
    assert hooks.interactive is False
    assert config.extra == {} and caplog.text == ""
    # Nothing was built, fetched or sent: no 401 came yet.
    assert "started=False" in repr(hooks)


def test_every_http_entry_gets_its_own_provider_but_not_with_a_static_header() -> None:
    configs = load_config({"mcpServers": {
        "a": {"url": "https://a.example.com/mcp"},
        "b": {"url": "https://b.example.com/mcp"},
        "c": {"url": "https://c.example.com/mcp", "headers": {"Authorization": "Bearer k"}},
        "d": {"command": "server"},
    }}, interactive_login=True)
    a, b, c, d = (cfg.auth for cfg in configs)
    assert isinstance(a, ConfigOAuth) and isinstance(b, ConfigOAuth) and a is not b
    assert a.url.startswith("https://a.") and b.url.startswith("https://b.")
    assert a.interactive is True
    assert c is None and d is None


@pytest.mark.parametrize(("entry", "where", "says"), [
    (_entry(oauth={"authServerMetadataUrl": "http://as.example.com/meta"}),
     "mcpServers.srv.oauth.authServerMetadataUrl", "must be an https:// URL"),
    (_entry(oauth={"authServerMetadataUrl": "http://as.example.com\\@127.0.0.1/m"}),
     "mcpServers.srv.oauth.authServerMetadataUrl", "not a valid URL"),
    (_entry(oauth={"callbackPort": "80"}), "mcpServers.srv.oauth.callbackPort", "port"),
    (_entry(oauth={"scopes": ["a"]}), "mcpServers.srv.oauth.scopes", "space-separated"),
    (_entry(oauth="yes"), "mcpServers.srv.oauth", "expected an object"),
    (_entry(oauth={}, headers={"Authorization": "Bearer k"}), "mcpServers.srv.oauth",
     "headers.Authorization"),
    ({"mcpServers": {"srv": {"command": "x", "oauth": {}}}}, "mcpServers.srv.oauth",
     "only for HTTP servers"),
])
def test_bad_oauth_settings_name_the_file_and_key(tmp_path: Any, entry: dict[str, Any],
                                                  where: str, says: str) -> None:
    import json

    path = tmp_path / "mcp.json"
    path.write_text(json.dumps(entry), encoding="utf-8")
    with pytest.raises(mcpsync.ConfigError) as info:
        load_config(path)
    text = str(info.value)
    assert text.startswith(f"{path}: {where}: "), text
    assert says in text
    assert "Bearer k" not in text


def test_loopback_metadata_over_http_is_accepted() -> None:
    [config] = load_config(_entry(oauth={"authServerMetadataUrl": "http://127.0.0.1:8/m"}))
    assert isinstance(config.auth, ConfigOAuth)
    assert config.auth.metadata_url == "http://127.0.0.1:8/m"


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX modes")
def test_an_unreadable_default_store_warns_and_only_fails_a_server_that_needs_oauth(
        fault_server: FaultServer, tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """A tokens.json in a group-writable directory: the store refuses it (rightly), but a
    server that never answers 401 must still work; the refusal shows only where OAuth is
    needed."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    store_dir = tmp_path / "mcpauth"
    store_dir.mkdir(mode=0o700)
    (store_dir / "tokens.json").write_text('{"version": 1, "entries": {}}', encoding="utf-8")
    os.chmod(store_dir / "tokens.json", 0o600)
    os.chmod(store_dir, 0o770)   # group-writable: FileTokenStore refuses to use it
    [config] = load_config({"mcpServers": {"open": {"url": fault_server.url}}})
    assert isinstance(config.auth, ConfigOAuth)
    with caplog.at_level(logging.WARNING, logger="mcpsync.auth"), \
            mcpsync.connect(config, timeout=5) as client:
        assert client.call_tool("echo", {"text": "ok"}).text == "ok"
        assert client.call_tool("echo", {"text": "again"}).text == "again"
    [warning] = [r for r in caplog.records if r.name == "mcpsync.auth"]
    text = warning.getMessage()
    assert str(store_dir) in text and f"chmod 700 {store_dir}" in text
    assert fault_server.url.split("?")[0] in text
    # A server that does need OAuth gets the store's error from its 401.
    fault_server.faults.require_authorization = "Bearer needed"
    [config] = load_config({"mcpServers": {"closed": {"url": fault_server.url}}})
    with pytest.raises(mcpsync.AuthHookError) as info, \
            mcpsync.connect(config, timeout=5) as client:
        client.call_tool("echo", {"text": "x"})
    assert f"chmod 700 {store_dir}" in str(info.value)


@pytest.mark.parametrize("url", [
    "http://localhost:8/m", "http://LOCALHOST.:8/m", "http://127.0.0.1:8/m",
    "http://127.45.6.7/m", "http://[::1]:8/m", "http://[::ffff:127.0.0.1]:8/m",
    "https://as.example.com/m",
])
def test_metadata_url_loopback_means_the_address_not_the_spelling(url: str) -> None:
    [config] = load_config(_entry(oauth={"authServerMetadataUrl": url}))
    assert isinstance(config.auth, ConfigOAuth) and config.auth.metadata_url == url


@pytest.mark.parametrize(("url", "says"), [
    ("http://127.evil.example/m", "got http to 127.evil.example"),
    ("http://127.0.0.1.evil.example/m", "got http to 127.0.0.1.evil.example"),
    ("http://localhost.evil.example/m", "got http to localhost.evil.example"),
    ("http://[::2]/m", "got http to [::2]"),
    ("http://10.0.0.1/m", "got http to 10.0.0.1"),
    ("HTTP://as.example.com/m", "got http to as.example.com"),
    ("http://127.0.0.1:9\\@as.example.com/m", "backslash"),
    ("https://u:p@as.example.com/m", "user info"),
    ("http://127.0.0.1\t.evil.example/m", "U+0009"),
    ("ftp://as.example.com/m", "not an http:// or https:// URL"),
    ("https:///m", "not"),
])
def test_metadata_url_that_would_leave_the_machine_in_cleartext_is_refused(
        tmp_path: Any, url: str, says: str) -> None:
    import json

    path = tmp_path / "mcp.json"
    path.write_text(json.dumps(_entry(oauth={"authServerMetadataUrl": url})),
                    encoding="utf-8")
    with pytest.raises(mcpsync.ConfigError) as info:
        load_config(path)
    text = str(info.value)
    assert text.startswith(f"{path}: mcpServers.srv.oauth.authServerMetadataUrl: "), text
    assert says in text
    assert "u:p" not in text


def test_mcpsyncs_loopback_rule_is_mcpauths() -> None:
    from mcpauth._http import is_loopback_host as mcpauth_rule
    from mcpsync._origin import is_loopback_host

    hosts = ["localhost", "LOCALHOST.", "127.0.0.1", "127.255.0.9", "[::1]", "::1",
             "[::ffff:127.0.0.1]", "127.evil.example", "localhost.evil", "[::2]", "10.0.0.1",
             "0.0.0.0", "", "128.0.0.1"]
    assert [is_loopback_host(h) for h in hosts] == [mcpauth_rule(h) for h in hosts]
    assert sum(is_loopback_host(h) for h in hosts) == 7
