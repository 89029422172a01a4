"""ServerConfig and logger-name hygiene."""

from __future__ import annotations

import dataclasses
import math
import pathlib
import pickle
from typing import Any

import pytest

import mcpsync
from mcpsync.config import DEFAULT_TIMEOUT, ServerConfig, logger_name_part
from mcpsync.errors import ConfigError, MCPError


def test_defaults() -> None:
    cfg = ServerConfig(command="srv")
    assert DEFAULT_TIMEOUT == 30.0
    assert (cfg.id, cfg.name, cfg.command, cfg.args) == ("", "", "srv", ())
    assert cfg.env == {} and cfg.headers == {}
    assert cfg.cwd is None and cfg.url is None
    assert cfg.timeout == DEFAULT_TIMEOUT
    assert cfg.scope == ""
    assert cfg.authorization is None and cfg.on_unauthorized is None
    assert cfg.secret_ref == "" and cfg.secret_format == "env"
    assert not cfg.is_http


def test_exported_from_the_package() -> None:
    assert mcpsync.ServerConfig is ServerConfig
    assert mcpsync.DEFAULT_TIMEOUT == 30.0


def test_fields_in_declared_order() -> None:
    assert [f.name for f in dataclasses.fields(ServerConfig)] == [
        "id", "name", "command", "args", "env", "cwd", "timeout", "scope", "url", "headers",
        "authorization", "on_unauthorized", "secret_ref", "secret_format",
        "transport", "disabled", "gateway", "extra", "auth"]   # ours, after the Manager-era fields


def test_manager_fields() -> None:
    cfg = ServerConfig(id="a", command="srv", disabled=True, gateway=True,
                       extra={"autoApprove": ["x"]})
    assert cfg.disabled and cfg.gateway and cfg.extra == {"autoApprove": ["x"]}
    assert "disabled=True" in repr(cfg) and "autoApprove" in repr(cfg)
    assert dataclasses.replace(cfg, disabled=False).extra == {"autoApprove": ["x"]}
    with pytest.raises(mcpsync.ConfigError, match="disabled"):
        ServerConfig(command="srv", disabled="yes")  # type: ignore[arg-type]
    with pytest.raises(mcpsync.ConfigError, match="extra"):
        ServerConfig(command="srv", extra=[1])  # type: ignore[arg-type]


def test_frozen() -> None:
    cfg = ServerConfig(command="srv")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.timeout = 1.0  # type: ignore[misc]


def test_replace_revalidates() -> None:
    cfg = ServerConfig(id="a", command="srv", env={"K": "v"})
    thread = dataclasses.replace(cfg, scope="thread")
    assert thread.scope == "thread" and thread.env == {"K": "v"} and thread.id == "a"
    with pytest.raises(ConfigError, match="scope"):
        dataclasses.replace(cfg, scope="galaxy")


def test_args_become_a_tuple() -> None:
    cfg = ServerConfig(command="srv", args=["a", pathlib.Path("b")])
    assert cfg.args == ("a", "b")
    assert cfg.argv == ("srv", "a", "b")


@pytest.mark.parametrize("bad", ["--flag", 3, ["ok", 4]])
def test_args_must_be_strings(bad: Any) -> None:
    with pytest.raises(ConfigError, match="args"):
        ServerConfig(command="srv", args=bad)


def test_command_is_a_string_not_argv() -> None:
    with pytest.raises(ConfigError, match=r"command.*args"):
        ServerConfig(command=["python", "server.py"])  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="command"):
        ServerConfig(command=3)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="command"):
        ServerConfig(command="  ")


# --- env ----------------------------------------------------------------------------------

def test_env_dict_is_copied() -> None:
    source: dict[str, str | None] = {"A": "1", "GONE": None}
    cfg = ServerConfig(command="srv", env=source)
    source["A"] = "changed"
    assert cfg.env == {"A": "1", "GONE": None}


def test_env_list_splits_at_first_equals() -> None:
    cfg = ServerConfig(command="srv", env=["A=1", "URL=http://x?a=b", "EMPTY="])
    assert cfg.env == {"A": "1", "URL": "http://x?a=b", "EMPTY": ""}


def test_env_tuple_works_too() -> None:
    assert ServerConfig(command="srv", env=("A=1",)).env == {"A": "1"}


def test_env_entry_without_equals_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"env.*'NOVALUE'.*no '='"):
        ServerConfig(command="srv", env=["A=1", "NOVALUE"])


@pytest.mark.parametrize("bad", [
    "A=1",                # a bare string
    42,
    [3],                  # a list entry that is not a str
    {"": "x"},            # empty name
    {"A=B": "x"},         # '=' in a name
    {"A": 1},             # non-string value
    {1: "x"},             # non-string name
    ["=x"],               # empty name from the list form
])
def test_env_bad_shapes(bad: Any) -> None:
    with pytest.raises(ConfigError, match="env"):
        ServerConfig(command="srv", env=bad)


def test_env_value_never_in_error() -> None:
    with pytest.raises(ConfigError) as info:
        ServerConfig(command="srv", env={"TOKEN": 12345})
    assert "12345" not in str(info.value)
    assert "TOKEN" in str(info.value)


# --- checks -------------------------------------------------------------------------------

def test_exactly_one_of_command_and_url() -> None:
    with pytest.raises(ConfigError, match=r"command.*url"):
        ServerConfig()
    with pytest.raises(ConfigError, match="not both"):
        ServerConfig(command="srv", url="https://example.com/mcp")


@pytest.mark.parametrize("bad", [0, -1, -math.inf, math.nan, True, "30", None])
def test_timeout_positive_number(bad: Any) -> None:
    with pytest.raises(ConfigError, match="timeout"):
        ServerConfig(command="srv", timeout=bad)


def test_timeout_inf_means_no_limit_per_request() -> None:
    assert ServerConfig(command="srv", timeout=math.inf).timeout == math.inf


def test_timeout_int_becomes_float() -> None:
    cfg = ServerConfig(command="srv", timeout=5)
    assert cfg.timeout == 5.0 and isinstance(cfg.timeout, float)


@pytest.mark.parametrize("scope", ["", "project", "thread"])
def test_scopes(scope: str) -> None:
    assert ServerConfig(command="srv", scope=scope).scope == scope


def test_bad_scope() -> None:
    with pytest.raises(ConfigError, match=r"scope.*'global'"):
        ServerConfig(command="srv", scope="global")


@pytest.mark.parametrize("fmt", ["env", "properties", "json"])
def test_secret_formats(fmt: str) -> None:
    assert ServerConfig(command="srv", secret_format=fmt, secret_ref="vault/x").secret_format \
        == fmt


def test_bad_secret_format() -> None:
    with pytest.raises(ConfigError, match="secret_format"):
        ServerConfig(command="srv", secret_format="yaml")


@pytest.mark.parametrize(("field", "value"), [
    ("headers", {"X-Key": "v"}),
    ("authorization", lambda: "Bearer t"),
    ("on_unauthorized", lambda challenge: None),
])
def test_http_only_fields_need_url(field: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=field):
        ServerConfig(command="srv", **{field: value})
    cfg = ServerConfig(url="https://example.com/mcp", **{field: value})
    assert getattr(cfg, field) == value


def test_hooks_must_be_callable() -> None:
    with pytest.raises(ConfigError, match="authorization"):
        ServerConfig(url="https://e.example/mcp", authorization="Bearer t")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="on_unauthorized"):
        ServerConfig(url="https://e.example/mcp", on_unauthorized=3)  # type: ignore[arg-type]


@pytest.mark.parametrize("url", ["ftp://e.example", "example.com/mcp", "http://", "file:///x"])
def test_url_must_be_http(url: str) -> None:
    with pytest.raises(ConfigError, match="url"):
        ServerConfig(url=url)


def test_headers_must_be_strings() -> None:
    with pytest.raises(ConfigError, match="headers"):
        ServerConfig(url="https://e.example/mcp", headers={"X": 1})  # type: ignore[dict-item]
    with pytest.raises(ConfigError, match="headers"):
        ServerConfig(url="https://e.example/mcp", headers=["X: 1"])  # type: ignore[arg-type]


@pytest.mark.parametrize(("field", "value"), [("id", 1), ("name", None), ("secret_ref", 0)])
def test_string_fields(field: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=field):
        ServerConfig(command="srv", **{field: value})


def test_cwd_accepts_pathlike(tmp_path: pathlib.Path) -> None:
    assert ServerConfig(command="srv", cwd=tmp_path).cwd == str(tmp_path)
    with pytest.raises(ConfigError, match="cwd"):
        ServerConfig(command="srv", cwd=3)  # type: ignore[arg-type]


def test_config_error_is_value_error_and_mcp_error() -> None:
    with pytest.raises(ValueError):
        ServerConfig()
    with pytest.raises(MCPError):
        ServerConfig()


# --- repr, display name, hashing -----------------------------------------------------------

def test_repr_shows_keys_never_values() -> None:
    cfg = ServerConfig(command="srv", env={"API_KEY": "sk-secret-1"}, name="x")
    text = repr(cfg)
    assert "API_KEY" in text and "sk-secret-1" not in text
    http = ServerConfig(url="https://e.example/mcp", headers={"Authorization": "Bearer tok-2"},
                        authorization=lambda: "Bearer tok-3")
    text = repr(http)
    assert "Authorization" in text and "tok-2" not in text
    assert "tok-3" not in text and "authorization=<set>" in text
    assert str(cfg) == repr(cfg)


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({"name": "Nice", "id": "id1", "command": "/usr/bin/srv"}, "Nice"),
    ({"id": "id1", "command": "/usr/bin/srv"}, "id1"),
    ({"command": "/usr/local/bin/my-server"}, "my-server"),
    ({"command": "npx"}, "npx"),
    ({"command": "C:\\Tools\\server.exe"}, "server.exe"),
    ({"url": "https://mcp.example.com:8443/v1/mcp"}, "mcp.example.com"),
])
def test_display_name(kwargs: dict[str, Any], expected: str) -> None:
    assert ServerConfig(**kwargs).display_name == expected


def test_argv_of_url_config_is_an_error() -> None:
    with pytest.raises(ConfigError, match="HTTP"):
        _ = ServerConfig(url="https://e.example/mcp").argv


def test_hashable_and_equal() -> None:
    a = ServerConfig(command="srv", args=["x"], env={"A": "1"})
    b = ServerConfig(command="srv", args=("x",), env=["A=1"])
    c = ServerConfig(command="srv", args=("x",), env={"A": "2"})
    assert a == b and hash(a) == hash(b)
    assert a != c
    assert len({a, b, c}) == 2


def test_pickles() -> None:
    cfg = ServerConfig(id="a", command="srv", args=["x"], env={"A": None}, timeout=3)
    assert pickle.loads(pickle.dumps(cfg)) == cfg


# --- logger names ---------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "expected"), [
    ("demo", "demo"),
    ("my-server_2", "my-server_2"),
    ("my.server", "my_server"),
    ("a b/c:d", "a_b_c_d"),
    ("héllo", "h_llo"),
    ("", "_"),
])
def test_logger_name_part(name: str, expected: str) -> None:
    assert logger_name_part(name) == expected


@pytest.mark.parametrize("url", [
    "http://localhost:8001\\@127.0.0.1:8000/mcp",
    "http://127.0.0.1:8000/mcp\t",
    "http://127.0.0.1:80\n00/mcp",
    "http://127.0.0.1:8000/\u200bmcp",
    "http://127.0.0.1:8000/m cp",
])
def test_url_with_a_character_parsers_disagree_on_is_refused(url: str) -> None:
    with pytest.raises(ConfigError, match="server 'svc': the URL is refused because it "
                                          "contains") as info:
        ServerConfig(id="svc", url=url)
    assert "8000" not in str(info.value)  # the URL itself is not echoed (it may hold a token)
