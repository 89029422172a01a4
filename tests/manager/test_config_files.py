"""Config files: both dialects, expansion, our own keys, and errors with key paths.

Each dialect is tested with a file shaped like the one its tool writes: Claude Desktop,
Claude Code's ``.mcp.json``, Cursor's ``.cursor/mcp.json`` and VS Code's ``.vscode/mcp.json``.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from mcpsync.config import ServerConfig
from mcpsync.config_files import default_config_path, expand, load_config
from mcpsync.errors import ConfigError

SECRET_MARK = "SUPERSECRET-VALUE-42"


def write(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = data if isinstance(data, str) else json.dumps(data, indent=2)
    path.write_text(text, encoding="utf-8")
    return path


def load_error(source: Any, **kwargs: Any) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(source, **kwargs)
    return str(info.value)


# -- the four dialect files --------------------------------------------------------------

def test_claude_desktop_file(tmp_path: Path) -> None:
    path = write(tmp_path / "claude_desktop_config.json", {
        "mcpServers": {
            "filesystem": {
                "command": "npx",
                "args": ["-y", "@modelcontextprotocol/server-filesystem", "/Users/me/Desktop"],
            },
            "github": {
                "command": "docker",
                "args": ["run", "-i", "--rm", "-e", "GITHUB_PERSONAL_ACCESS_TOKEN",
                         "ghcr.io/github/github-mcp-server"],
                "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": SECRET_MARK},
            },
        },
        "preferences": {"theme": "dark"},
    })
    fs, gh = load_config(path, environ={})
    assert fs == ServerConfig(id="filesystem", name="filesystem", command="npx",
                              args=["-y", "@modelcontextprotocol/server-filesystem",
                                    "/Users/me/Desktop"])
    assert gh.id == gh.name == "github"
    assert gh.command == "docker" and gh.args[-1] == "ghcr.io/github/github-mcp-server"
    assert dict(gh.env) == {"GITHUB_PERSONAL_ACCESS_TOKEN": SECRET_MARK}
    assert SECRET_MARK not in repr(gh)


def test_claude_code_mcp_json_with_defaults(tmp_path: Path) -> None:
    path = write(tmp_path / ".mcp.json", {
        "mcpServers": {
            "api": {
                "type": "http",
                "url": "${API_BASE_URL:-https://api.example.com}/mcp",
                "headers": {"Authorization": "Bearer ${API_KEY}"},
            },
            "local": {
                "type": "stdio",
                "command": "${HOME}/bin/server",
                "args": ["--port", "${PORT:-8080}", "--root", "${workspaceFolder}"],
                "env": {"CACHE": "${CACHE_DIR:-/tmp/cache}", "EMPTY": "${EMPTY:-fallback}"},
            },
            "legacy": {"type": "sse", "url": "http://localhost:9000/sse"},
            "modern": {"type": "streamable-http", "url": "http://localhost:9001/mcp"},
        },
    })
    environ = {"HOME": "/home/me", "API_KEY": SECRET_MARK, "PORT": "9999", "EMPTY": ""}
    api, local, legacy, modern = load_config(path, environ=environ)
    assert api.url == "https://api.example.com/mcp"
    assert dict(api.headers) == {"Authorization": f"Bearer {SECRET_MARK}"}
    assert api.transport == ""  # type http: detection with the SSE fallback
    assert local.command == "/home/me/bin/server"
    assert local.args == ("--port", "9999", "--root", str(tmp_path))
    # ${VAR:-default}: the default applies when unset or empty, as in a shell.
    assert dict(local.env) == {"CACHE": "/tmp/cache", "EMPTY": "fallback"}
    assert legacy.transport == "sse" and legacy.url == "http://localhost:9000/sse"
    assert modern.transport == "" and modern.is_http


def test_cursor_file_with_env_prefix(tmp_path: Path) -> None:
    path = write(tmp_path / "project" / ".cursor" / "mcp.json", {
        "mcpServers": {
            "db": {
                "command": "${userHome}${pathSeparator}.local${pathSeparator}bin/db-mcp",
                "args": ["--dsn", "${env:DATABASE_URL}"],
                "env": {"LOG": "${workspaceFolder}/logs"},
            },
            "remote": {"url": "https://mcp.example.com/mcp",
                       "headers": {"X-Api-Key": "${env:REMOTE_KEY}"}},
        },
    })
    environ = {"HOME": "/home/me", "DATABASE_URL": "postgres://db/x", "REMOTE_KEY": "k"}
    db, remote = load_config(path, environ=environ)
    assert db.command == f"/home/me{os.sep}.local{os.sep}bin/db-mcp"
    assert db.args == ("--dsn", "postgres://db/x")
    # Not under .vscode: the workspace folder is the file's own directory.
    assert dict(db.env) == {"LOG": f"{tmp_path}/project/.cursor/logs"}
    assert dict(remote.headers) == {"X-Api-Key": "k"}


def test_vscode_file_with_servers_inputs_and_comments(tmp_path: Path) -> None:
    workspace = tmp_path / "my-project"
    path = write(workspace / ".vscode" / "mcp.json", """\
// VS Code reads this file as JSON with comments.
{
  "inputs": [
    {"type": "promptString", "id": "api-key", "description": "API key", "password": true}
  ],
  "servers": {
    /* a stdio server in the workspace */
    "tools": {
      "type": "stdio",
      "command": "python",
      "args": ["${workspaceFolder}/server.py", "--name", "${workspaceFolderBasename}",],
      "env": {"PYTHONPATH": "${workspaceFolder}${pathSeparator}src", "URL": "http://x//y"},
      "envFile": "${workspaceFolder}/.env"
    },
    "remote": {"type": "http", "url": "https://example.com/mcp"},
  }
}
""")
    tools, remote = load_config(path, environ={})
    assert tools.args == (f"{workspace}/server.py", "--name", "my-project")
    assert dict(tools.env) == {"PYTHONPATH": f"{workspace}{os.sep}src", "URL": "http://x//y"}
    # Unknown keys are kept raw (not expanded) in extra.
    assert dict(tools.extra) == {"envFile": "${workspaceFolder}/.env"}
    assert remote.url == "https://example.com/mcp" and remote.transport == ""


def test_our_own_keys(tmp_path: Path) -> None:
    path = write(tmp_path / "mcp.json", {"mcpServers": {"svc": {
        "command": "srv", "cwd": "${workspaceFolder}/run", "name": "Service One",
        "timeout": 12, "scope": "thread", "secret_ref": "vault/${NOT_EXPANDED}",
        "secret_format": "json", "gateway": True, "disabled": True,
        "args": ["--secrets", "{{secret_file}}", "--root", "{{worktree_root}}"],
    }}})
    [svc] = load_config(path, environ={})
    assert svc.id == "svc" and svc.name == "Service One"
    assert svc.cwd == f"{tmp_path}/run"
    assert svc.timeout == 12.0 and svc.scope == "thread"
    assert svc.secret_ref == "vault/${NOT_EXPANDED}" and svc.secret_format == "json"
    assert svc.gateway and svc.disabled
    # {{...}} placeholders are the Manager's, not expansions.
    assert svc.args == ("--secrets", "{{secret_file}}", "--root", "{{worktree_root}}")


def test_a_dict_source_and_file_order_across_dialects(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    data = {"servers": {"b": {"command": "b", "args": ["${workspaceFolder}"]}},
            "mcpServers": {"z": {"command": "z"}, "a": {"command": "a"}}}
    configs = load_config(data, environ={})
    assert [c.id for c in configs] == ["b", "z", "a"]
    assert configs[0].args == (str(tmp_path),)
    assert load_config({"mcpServers": {}}) == []


def test_environ_defaults_to_os_environ(tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCPSYNC_TEST_TOKEN", "tok")
    data = {"mcpServers": {"s": {"command": "x", "args": ["${MCPSYNC_TEST_TOKEN}"]}}}
    assert load_config(data)[0].args == ("tok",)
    # An explicit environ replaces os.environ entirely.
    assert "MCPSYNC_TEST_TOKEN" in load_error(data, environ={})


def test_workspace_folder_argument_wins(tmp_path: Path) -> None:
    path = write(tmp_path / ".vscode" / "mcp.json",
                 {"servers": {"s": {"command": "x", "args": ["${workspaceFolder}",
                                                             "${workspaceFolderBasename}"]}}})
    assert load_config(path, environ={})[0].args == (str(tmp_path), tmp_path.name)
    assert load_config(path, workspace_folder="/elsewhere/ws",
                       environ={})[0].args == ("/elsewhere/ws", "ws")


def test_env_null_removes_a_variable() -> None:
    [s] = load_config({"mcpServers": {"s": {"command": "x", "env": {"DROP": None}}}})
    assert dict(s.env) == {"DROP": None}


# -- expand ------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("${A}", "a"),
    ("${env:A}/${A}", "a/a"),
    ("${A:-d}", "a"),
    ("${UNSET:-d}", "d"),
    ("${EMPTY:-d}", "d"),
    ("${EMPTY}", ""),
    ("${UNSET:-}", ""),
    ("${UNSET:-a b:-c}", "a b:-c"),
    ("$A and $$ and $ {A}", "$A and $$ and $ {A}"),
    ("{{secret_file}} {{worktree_root}} {{other}}", "{{secret_file}} {{worktree_root}} "
                                                    "{{other}}"),
    ("${workspaceFolder}|${workspaceFolderBasename}", "/ws/proj|proj"),
    ("${userHome}${pathSeparator}x", f"/home/u{os.sep}x"),
    ("no variables", "no variables"),
])
def test_expand(text: str, expected: str) -> None:
    environ = {"A": "a", "EMPTY": "", "HOME": "/home/u"}
    assert expand(text, environ=environ, workspace_folder="/ws/proj", where="f: k") == expected


def test_expand_does_not_re_expand_values() -> None:
    assert expand("${A}", environ={"A": "${B}"}, workspace_folder="/", where="w") == "${B}"


@pytest.mark.parametrize(("text", "problem"), [
    ("${NOPE}", "environment variable 'NOPE' is not set"),
    ("${env:NOPE}", "environment variable 'NOPE' is not set"),
    ("${input:api-key}", "${input:api-key} asks for user input"),
    ("${config:editor.fontSize}", "unknown variable ${config:editor.fontSize}"),
    ("${command:pick}", "unknown variable ${command:pick}"),
    ("${}", "unknown variable ${}"),
    ("${env:A:-x}", "unknown variable ${env:A:-x}"),
    ("${1BAD}", "unknown variable ${1BAD}"),
])
def test_expand_errors_name_where(text: str, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        expand(f"x {text} y", environ={"A": "a"}, workspace_folder="/",
               where="/x/.mcp.json: mcpServers.github.args[2]")
    assert str(info.value).startswith("/x/.mcp.json: mcpServers.github.args[2]: ")
    assert problem in str(info.value)


# -- errors with key paths ---------------------------------------------------------------

def _file_with(tmp_path: Path, entry: Any, dialect: str = "mcpServers",
               server_id: str = "github") -> Path:
    return write(tmp_path / ".mcp.json", {dialect: {server_id: entry}})


@pytest.mark.parametrize(("entry", "key_path", "problem"), [
    ({"command": "x", "args": ["a", "b", 3]}, "mcpServers.github.args[2]",
     "expected a string, got a number"),
    ({"command": "x", "args": "a b"}, "mcpServers.github.args", "expected an array"),
    ({"command": "x", "args": ["a", "${NOPE}"]}, "mcpServers.github.args[1]",
     "'NOPE' is not set"),
    ({"command": "x", "env": {"TOKEN": 5}}, "mcpServers.github.env.TOKEN",
     "expected a string, got a number"),
    ({"command": "x", "env": {"TOKEN": "${input:token}"}}, "mcpServers.github.env.TOKEN",
     "asks for user input"),
    ({"command": "x", "env": ["A=b"]}, "mcpServers.github.env", "expected an object"),
    ({"command": ["npx", "-y"]}, "mcpServers.github.command", "expected a string, got an"),
    ({"command": "${NOPE}/bin/x"}, "mcpServers.github.command", "'NOPE' is not set"),
    ({"command": "x", "cwd": "${NOPE}"}, "mcpServers.github.cwd", "'NOPE' is not set"),
    ({"url": "https://h/${NOPE}"}, "mcpServers.github.url", "'NOPE' is not set"),
    ({"url": "https://h/", "headers": {"Authorization": True}},
     "mcpServers.github.headers.Authorization", "expected a string, got a boolean"),
    ({"url": "https://h/", "headers": {"X": "${foo:bar}"}}, "mcpServers.github.headers.X",
     "unknown variable ${foo:bar}"),
    ({"command": "x", "disabled": "yes"}, "mcpServers.github.disabled",
     "expected true or false"),
    ({"command": "x", "gateway": 1}, "mcpServers.github.gateway", "expected true or false"),
    ({"command": "x", "timeout": "30"}, "mcpServers.github.timeout",
     "expected a number of seconds"),
    ({"command": "x", "timeout": True}, "mcpServers.github.timeout",
     "expected a number of seconds"),
    ({"command": "x", "secret_ref": 7}, "mcpServers.github.secret_ref", "expected a string"),
    ({"command": "x", "type": "websocket"}, "mcpServers.github.type",
     "unknown type 'websocket'"),
    ({"command": "x", "type": 3}, "mcpServers.github.type", "expected a string"),
    ({"url": "https://h/", "type": "stdio"}, "mcpServers.github.type",
     "type 'stdio' needs command and no url"),
    ({"command": "x", "type": "http"}, "mcpServers.github.type",
     "type 'http' needs url and no command"),
    ({"command": "x", "type": "sse"}, "mcpServers.github.type",
     "type 'sse' needs url and no command"),
    ({"command": "x", "url": "https://h/"}, "mcpServers.github", "has both command"),
    ({"args": ["a"]}, "mcpServers.github", "needs command"),
    ("npx server", "mcpServers.github", "expected an object, got a string"),
    # ServerConfig's own checks, with the file and entry in front.
    ({"command": "x", "scope": "global"}, "mcpServers.github", "scope"),
    ({"command": "x", "timeout": -1}, "mcpServers.github", "timeout"),
    ({"command": "x", "secret_format": "yaml"}, "mcpServers.github", "secret_format"),
    ({"command": "x", "headers": {"A": "b"}}, "mcpServers.github", "headers"),
    ({"url": "ftp://h/"}, "mcpServers.github", "url"),
])
def test_errors_name_file_and_key_path(tmp_path: Path, entry: Any, key_path: str,
                                       problem: str) -> None:
    path = _file_with(tmp_path, entry)
    message = load_error(path, environ={})
    assert message.startswith(f"{path}: {key_path}: "), message
    assert problem in message


def test_key_paths_quote_ids_that_are_not_plain(tmp_path: Path) -> None:
    path = _file_with(tmp_path, {"command": "x", "args": [1]}, dialect="servers",
                      server_id="my.server")
    assert load_error(path).startswith(f'{path}: servers["my.server"].args[0]: ')
    data = {"mcpServers": {"s": {"command": "x", "env": {"A.B": 1}}}}
    assert load_error(data).startswith('<config dict>: mcpServers.s.env["A.B"]: ')


def test_error_messages_never_hold_values(tmp_path: Path) -> None:
    path = _file_with(tmp_path, {"command": "x", "env": {"TOKEN": SECRET_MARK},
                                 "args": [SECRET_MARK, 1]})
    assert SECRET_MARK not in load_error(path)


@pytest.mark.parametrize(("data", "problem"), [
    ([], "expected a JSON object at the top level, got an array"),
    ({"mcpServers": []}, "mcpServers: expected an object of servers, got an array"),
    ({"servers": "x"}, "servers: expected an object of servers, got a string"),
    ({"other": {}}, "no 'mcpServers' (Claude, Cursor) or 'servers' (VS Code) object"),
    ({"mcpServers": {"": {"command": "x"}}}, "a server id must be a non-empty string"),
    ({"mcpServers": {"gh": {"command": "x"}}, "servers": {"gh": {"command": "y"}}},
     "server id 'gh' appears under both mcpServers and servers"),
])
def test_file_level_errors(tmp_path: Path, data: Any, problem: str) -> None:
    path = write(tmp_path / "mcp.json", data)
    message = load_error(path)
    assert message.startswith(f"{path}: ")
    assert problem in message


def test_invalid_json_names_line_and_column(tmp_path: Path) -> None:
    text = '{\n  "mcpServers": {\n    "a": {"command": "x" "args": []}\n  }\n}\n'
    path = write(tmp_path / ".mcp.json", text)
    column = text.splitlines()[2].index('"args"') + 1
    message = load_error(path)
    assert message.startswith(f"{path}: invalid JSON at line 3, column {column}: ")
    assert "delimiter" in message


def test_invalid_json_position_counts_comments(tmp_path: Path) -> None:
    text = '/* one\n two */ {"servers": // three\n {"a": {"command": "x"}}}} // trailing\n'
    path = write(tmp_path / "mcp.json", text)
    column = text.splitlines()[2].rindex("}") + 1
    assert load_error(path).startswith(f"{path}: invalid JSON at line 3, column {column}: ")


def test_jsonc_keeps_comment_markers_inside_strings(tmp_path: Path) -> None:
    path = write(tmp_path / "mcp.json",
                 '{"servers": {"a": {"command": "x", "args": ["//not", "/*no*/", "a,]"],}}}')
    assert load_config(path)[0].args == ("//not", "/*no*/", "a,]")


def test_unreadable_and_non_utf8_files(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    assert load_error(missing).startswith(f"{missing}: cannot read the config file")
    latin = tmp_path / "latin.json"
    latin.write_bytes(b'{"mcpServers": {"caf\xe9": {"command": "x"}}}')
    assert load_error(latin).startswith(f"{latin}: not UTF-8 text")
    bom = write(tmp_path / "bom.json", "\ufeff" + json.dumps({"mcpServers": {"a":
                                                                           {"command": "x"}}}))
    assert [c.id for c in load_config(bom)] == ["a"]


# -- unknown keys ------------------------------------------------------------------------

def test_unknown_keys_warn_once_per_key_per_file(tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    data = {"mcpServers": {
        "a": {"command": "x", "autoApprove": ["t"], "envFile": ".env"},
        "b": {"command": "y", "autoApprove": [], "alwaysAllow": ["u"]},
        "c": {"command": "z"},
    }}
    first = write(tmp_path / "one.json", data)
    second = write(tmp_path / "two.json", data)
    with caplog.at_level(logging.WARNING, logger="mcpsync.config"):
        a, b, c = load_config(first)
        load_config(second)
    records = [r for r in caplog.records if r.name == "mcpsync.config"]
    assert all(r.levelno == logging.WARNING for r in records)
    messages = [r.getMessage() for r in records]
    for path in (first, second):
        mine = [m for m in messages if m.startswith(f"{path}: ")]
        assert len(mine) == 3, mine
        assert sum("'autoApprove'" in m for m in mine) == 1
        assert sum("'envFile'" in m for m in mine) == 1
        assert sum("'alwaysAllow'" in m for m in mine) == 1
    assert any("'autoApprove' (in 'a', 'b')" in m for m in messages)
    assert dict(a.extra) == {"autoApprove": ["t"], "envFile": ".env"}
    assert dict(b.extra) == {"autoApprove": [], "alwaysAllow": ["u"]}
    assert dict(c.extra) == {}


def test_extra_is_a_copy(tmp_path: Path) -> None:
    nested = {"k": ["v"]}
    data = {"mcpServers": {"a": {"command": "x", "custom": nested}}}
    [a] = load_config(data)
    nested["k"].append("changed")
    assert dict(a.extra) == {"custom": {"k": ["v"]}}


def test_no_warning_for_known_keys(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="mcpsync.config"):
        load_config({"mcpServers": {"a": {
            "command": "x", "args": [], "env": {}, "cwd": "/", "type": "stdio",
            "disabled": False, "timeout": 5, "scope": "project", "secret_ref": "",
            "secret_format": "env", "gateway": False, "name": "A"}}})
    assert [r for r in caplog.records if r.name == "mcpsync.config"] == []


# -- default_config_path -----------------------------------------------------------------

def test_default_config_path(tmp_path: Path) -> None:
    assert default_config_path(str(tmp_path), environ={}) is None
    vscode = write(tmp_path / ".vscode" / "mcp.json", {"servers": {}})
    assert default_config_path(str(tmp_path), environ={}) == str(vscode)
    mcp = write(tmp_path / ".mcp.json", {"mcpServers": {}})
    assert default_config_path(str(tmp_path), environ={}) == str(mcp)
    assert default_config_path(str(tmp_path),
                               environ={"MCPSYNC_CONFIG": "/etc/mcp.json"}) == "/etc/mcp.json"
    # An empty MCPSYNC_CONFIG counts as unset.
    assert default_config_path(str(tmp_path), environ={"MCPSYNC_CONFIG": ""}) == str(mcp)


def test_default_config_path_uses_cwd_and_os_environ(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCPSYNC_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    assert default_config_path() is None
    mcp = write(tmp_path / ".mcp.json", {"mcpServers": {}})
    assert default_config_path() == os.path.join(os.getcwd(), ".mcp.json")
    assert os.path.samefile(default_config_path() or "", mcp)
    monkeypatch.setenv("MCPSYNC_CONFIG", "other.json")
    assert default_config_path() == "other.json"


def test_secret_file_in_cwd_is_refused_naming_file_and_server(tmp_path: Path) -> None:
    """The placeholder is filled in args and env only; in cwd it is an error, not a
    directory literally called ``{{secret_file}}``."""
    path = write(tmp_path / "mcp.json", {"mcpServers": {"svc": {
        "command": "srv", "secret_ref": "vault/x", "cwd": "/srv/{{secret_file}}"}}})
    message = load_error(path, environ={})
    assert str(path) in message and "mcpServers.svc" in message and "'svc'" in message
    assert "{{secret_file}} cannot be used in cwd" in message
    assert "args or an env value" in message
