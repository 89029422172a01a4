"""The ``mcpsync`` command, end to end: the CLI runs as a real subprocess
(``python -m mcpsync ...``) against real servers (the demo server, and a small raw peer with
resources, prompts and a tool whose schema has every JSON type), inline and through config
files. The pure parts (``key=value`` conversion, exit-code mapping) and the HTTP 401 case
(the fault server lives in the test process) run in-process through ``cli.main(argv)``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from helpers import DOCS
from http_peers.fault_server import FaultServer

from mcpsync import cli, errors
from mcpsync.cli import CLIError, convert_arguments, convert_value, exit_code_for

PY = sys.executable
DEMO = f"{shlex.quote(PY)} -m mcpsync.demo"
DEMO_TOOLS = ["echo", "add", "slow", "fail"]

# A legacy JSON-lines server with what the demo lacks: resources (text and blob), prompts,
# a tool whose input schema has every type and that answers with structured content only,
# and a tool answering a JSON-RPC error.
PEER_SOURCE = textwrap.dedent('''
    import json, sys

    PROPS = {
        "i": {"type": "integer"}, "n": {"type": "number"}, "b": {"type": "boolean"},
        "z": {"type": "null"}, "o": {"type": "object"}, "a": {"type": "array"},
        "s": {"type": "string"}, "e": {}, "l": {"type": ["string", "integer"]},
        "opt": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
    }
    TOOLS = [
        {"name": "typed", "description": "Echo the arguments as structured content.\\nMore.",
         "inputSchema": {"type": "object", "properties": PROPS}},
        {"name": "rpcerror", "inputSchema": {"type": "object"}},
    ]
    RESOURCES = [
        {"uri": "memo://text", "name": "text", "mimeType": "text/plain"},
        {"uri": "memo://blob", "name": "blob", "mimeType": "application/octet-stream"},
    ]
    PROMPTS = [{"name": "review", "description": "Review some code.\\nAt length.",
                "arguments": [{"name": "code", "required": True}]}]
    CONTENTS = {
        "memo://text": {"uri": "memo://text", "mimeType": "text/plain",
                        "text": "hello resource"},
        "memo://blob": {"uri": "memo://blob", "mimeType": "application/octet-stream",
                        "blob": "AAECAwQ="},
    }

    def send(rid, result=None, error=None):
        msg = {"jsonrpc": "2.0", "id": rid}
        if error is None:
            msg["result"] = result
        else:
            msg["error"] = error
        sys.stdout.write(json.dumps(msg) + "\\n")
        sys.stdout.flush()

    for line in sys.stdin:
        msg = json.loads(line)
        rid, method, params = msg.get("id"), msg.get("method"), msg.get("params") or {}
        if rid is None or method is None:
            continue
        if method == "initialize":
            send(rid, {"protocolVersion": params.get("protocolVersion"),
                       "serverInfo": {"name": "cli-peer", "version": "1"},
                       "capabilities": {"tools": {}, "resources": {}, "prompts": {}}})
        elif method == "tools/list":
            send(rid, {"tools": TOOLS})
        elif method == "tools/call" and params.get("name") == "rpcerror":
            send(rid, error={"code": -32000, "message": "the peer refuses"})
        elif method == "tools/call":
            send(rid, {"content": [], "structuredContent": params.get("arguments") or {}})
        elif method == "resources/list":
            send(rid, {"resources": RESOURCES})
        elif method == "resources/read" and params.get("uri") in CONTENTS:
            send(rid, {"contents": [CONTENTS[params["uri"]]]})
        elif method == "resources/read":
            send(rid, error={"code": -32002, "message": "Resource not found"})
        elif method == "prompts/list":
            send(rid, {"prompts": PROMPTS})
        elif method == "ping":
            send(rid, {})
        else:
            send(rid, error={"code": -32601, "message": "Method not found"})
''')


@pytest.fixture(scope="module")
def peer(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The command string that starts the raw peer."""
    path = tmp_path_factory.mktemp("peer") / "cli_peer.py"
    path.write_text(PEER_SOURCE)
    return f"{shlex.quote(PY)} {shlex.quote(str(path))}"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The environment of a CLI run: no inherited $MCPSYNC_CONFIG, a private token dir."""
    out = dict(os.environ)
    out.pop("MCPSYNC_CONFIG", None)
    out.pop("COLUMNS", None)   # tables are cut only where a test asks for it
    out["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")
    return out


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """An empty directory to run in (no .mcp.json unless a test writes one)."""
    path = tmp_path / "work"
    path.mkdir()
    return path


def run(*args: str, cwd: Path, env: dict[str, str], input: str | None = None,
        timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-m", "mcpsync", *args], cwd=cwd, env=env, input=input,
                          capture_output=True, text=True, timeout=timeout)


def trust(path: Path, env: dict[str, str]) -> None:
    """Trust a project config as its owner would (``mcpsync trust PATH``); without this a
    ``.mcp.json`` found in the current directory is refused (``tests/cli/test_cli_trust.py``)."""
    res = run("trust", str(path), cwd=path.parent, env=env)
    assert res.returncode == 0, res.stderr


def assert_error(res: subprocess.CompletedProcess[str], code: int, *fragments: str) -> str:
    """Exit ``code``, stdout empty, exactly one ``mcpsync: error:`` line holding fragments."""
    assert res.returncode == code, (res.returncode, res.stdout, res.stderr)
    assert res.stdout == ""
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("mcpsync: error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def ok(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode == 0, (res.returncode, res.stdout, res.stderr)
    assert res.stderr == ""
    return res.stdout


def table(text: str) -> list[list[str]]:
    """A printed table as rows of cells (columns are two or more spaces apart)."""
    return [re.split(r" {2,}", line) for line in text.splitlines()]


def write_config(path: Path, peer: str, *, key: str = "mcpServers",
                 extra: dict[str, Any] | None = None) -> Path:
    servers: dict[str, Any] = {
        "demo": {"command": PY, "args": ["-m", "mcpsync.demo"]},
        "peer": {"command": PY, "args": shlex.split(peer)[1:]},
        "off": {"command": "no-such-command-mcpsync-test", "disabled": True},
        **(extra or {}),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({key: servers}))
    return path


# --- help, laziness ---------------------------------------------------------------------

def test_help_lists_every_command_and_imports_nothing_heavy(workdir: Path,
                                                           env: dict[str, str]) -> None:
    out = ok(run("--help", cwd=workdir, env=env))
    for command in ("tools", "call", "resources", "read", "prompts", "login", "--timeout",
                    "--json", "--verbose", "--config"):
        assert command in out
    code = ("import sys, mcpsync.cli as c\n"
            "rc = c.main(['call', '--help'])\n"
            "heavy = [m for m in ('mcpsync.manager', 'mcpsync.client', 'requests', "
            "'mcpauth.provider') if m in sys.modules]\n"
            "print(rc, heavy, file=sys.stderr)")
    res = subprocess.run([PY, "-c", code], cwd=workdir, env=env, capture_output=True,
                         text=True, timeout=30)
    assert res.stderr.strip() == "0 []", res.stderr
    assert "key=value" in res.stdout and "--args" in res.stdout


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from mcpsync import __version__

    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out == f"mcpsync {__version__}\n"


def test_a_missing_config_from_the_environment_exits_2(
        workdir: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(workdir)
    monkeypatch.setenv("MCPSYNC_CONFIG", str(workdir / "gone.json"))
    assert cli.main(["prompts"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("mcpsync: error: config file ")
    assert "gone.json" in err and "does not exist" in err


def test_console_script_entry_point_returns_the_exit_code() -> None:
    from mcpsync.__main__ import main

    assert main(["call"]) == 2          # missing SERVER and TOOL: a usage error
    assert main(["--help"]) == 0


# --- tools, call: inline command string -------------------------------------------------

def test_tools_of_an_inline_command(workdir: Path, env: dict[str, str]) -> None:
    rows = table(ok(run("tools", DEMO, cwd=workdir, env=env)))
    assert rows[0] == ["SERVER", "TOOL", "DESCRIPTION"]
    assert [r[1] for r in rows[1:]] == DEMO_TOOLS
    assert all(r[0] == DEMO for r in rows[1:])
    # The first line of the description only.
    assert rows[2][2] == ('Add two numbers; the sum comes back as structured content '
                          '{"sum": a + b}.')


def test_tools_json_is_one_document_with_server_keys(workdir: Path,
                                                     env: dict[str, str]) -> None:
    doc = json.loads(ok(run("--json", "tools", DEMO, cwd=workdir, env=env)))
    assert [t["name"] for t in doc] == DEMO_TOOLS
    assert all(t["server"] == DEMO for t in doc)
    assert doc[1]["inputSchema"]["properties"]["a"]["type"] == "number"


def test_global_options_after_the_command(workdir: Path, env: dict[str, str]) -> None:
    after = run("tools", DEMO, "--json", "--timeout", "20", cwd=workdir, env=env)
    before = run("--json", "--timeout", "20", "tools", DEMO, cwd=workdir, env=env)
    assert json.loads(ok(after)) == json.loads(ok(before))


def test_call_items_after_options(workdir: Path, env: dict[str, str]) -> None:
    doc = json.loads(ok(run("call", DEMO, "add", "a=1", "--json", "b=2", "--timeout", "20",
                            cwd=workdir, env=env)))
    assert doc["structuredContent"] == {"sum": 3}


def test_unknown_options_still_fail_after_items(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["call", DEMO, "add", "a=1", "--bogus"]) == 2
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err
    assert cli.main(["tools", DEMO, "extra"]) == 2
    assert "unrecognized arguments: extra" in capsys.readouterr().err


def test_call_prints_text_content(workdir: Path, env: dict[str, str]) -> None:
    assert ok(run("call", DEMO, "echo", "text=hello world", cwd=workdir, env=env)) == \
        "hello world\n"
    # A number-typed argument arrives as a number: the sum is computed, not concatenated.
    assert json.loads(ok(run("call", DEMO, "add", "a=2", "b=0.5", cwd=workdir,
                             env=env))) == {"sum": 2.5}


def test_call_json_is_the_result_as_sent(workdir: Path, env: dict[str, str]) -> None:
    doc = json.loads(ok(run("call", DEMO, "add", "a=1", "b=2", "--json", cwd=workdir,
                            env=env)))
    assert doc["structuredContent"] == {"sum": 3}
    assert doc["content"][0]["type"] == "text"
    assert doc.get("isError") in (None, False)


def test_call_structured_only_prints_the_json(workdir: Path, env: dict[str, str],
                                              peer: str) -> None:
    out = ok(run("call", peer, "typed", "i=5", "s=007", cwd=workdir, env=env))
    assert json.loads(out) == {"i": 5, "s": "007"}


def test_call_converts_every_type_by_the_schema(workdir: Path, env: dict[str, str],
                                                peer: str) -> None:
    items = ["i=-3", "n=2.5", "b=YES", "z=null", 'o={"k": [1]}', "a=[1, \"x\"]", "s=42",
             "e=17", "l=8", "opt=null", "unknown=true"]
    out = ok(run("--json", "call", peer, "typed", *items, cwd=workdir, env=env))
    assert json.loads(out)["structuredContent"] == {
        "i": -3, "n": 2.5, "b": True, "z": None, "o": {"k": [1]}, "a": [1, "x"], "s": "42",
        "e": "17", "l": 8, "opt": None, "unknown": "true"}


def test_call_args_from_stdin_and_inline(workdir: Path, env: dict[str, str]) -> None:
    out = ok(run("call", DEMO, "echo", "--args", "-", cwd=workdir, env=env,
                 input='{"text": "from stdin"}'))
    assert out == "from stdin\n"
    out = ok(run("call", DEMO, "add", "--args", '{"a": 1.5, "b": 1}', cwd=workdir, env=env))
    assert json.loads(out) == {"sum": 2.5}


# --- resources, read, prompts -----------------------------------------------------------

def test_resources_and_prompts_tables(workdir: Path, env: dict[str, str], peer: str) -> None:
    rows = table(ok(run("resources", peer, cwd=workdir, env=env)))
    assert rows == [["SERVER", "URI", "NAME", "MIME"],
                    [peer, "memo://text", "text", "text/plain"],
                    [peer, "memo://blob", "blob", "application/octet-stream"]]
    rows = table(ok(run("prompts", peer, cwd=workdir, env=env)))
    assert rows == [["SERVER", "PROMPT", "DESCRIPTION"], [peer, "review", "Review some code."]]
    doc = json.loads(ok(run("prompts", peer, "--json", cwd=workdir, env=env)))
    assert doc == [{"server": peer, "name": "review", "description":
                    "Review some code.\nAt length.",
                    "arguments": [{"name": "code", "required": True}]}]


def test_read_text_blob_and_json(workdir: Path, env: dict[str, str], peer: str) -> None:
    assert ok(run("read", peer, "memo://text", cwd=workdir, env=env)) == "hello resource\n"
    assert ok(run("read", peer, "memo://blob", cwd=workdir, env=env)) == \
        "<5 bytes of application/octet-stream>\n"
    doc = json.loads(ok(run("--json", "read", peer, "memo://blob", cwd=workdir, env=env)))
    assert doc == {"contents": [{"uri": "memo://blob", "mimeType": "application/octet-stream",
                                 "blob": "AAECAwQ="}]}


def test_listing_what_a_server_does_not_offer_is_empty(workdir: Path,
                                                       env: dict[str, str]) -> None:
    assert ok(run("resources", DEMO, cwd=workdir, env=env)) == "SERVER  URI  NAME  MIME\n"
    assert json.loads(ok(run("--json", "prompts", DEMO, cwd=workdir, env=env))) == []


# --- config files -----------------------------------------------------------------------

def test_mcp_json_in_the_current_directory(workdir: Path, env: dict[str, str],
                                           peer: str) -> None:
    trust(write_config(workdir / ".mcp.json", peer), env)
    rows = table(ok(run("tools", cwd=workdir, env=env)))
    # Every enabled server (the disabled one is not started), by server id.
    assert [(r[0], r[1]) for r in rows[1:]] == \
        [("demo", t) for t in DEMO_TOOLS] + [("peer", "typed"), ("peer", "rpcerror")]
    rows = table(ok(run("resources", cwd=workdir, env=env)))
    assert [r[:2] for r in rows[1:]] == [["peer", "memo://text"], ["peer", "memo://blob"]]
    # SERVER as an id of the file.
    assert ok(run("call", "demo", "echo", "text=by id", cwd=workdir, env=env)) == "by id\n"


def test_config_option_and_environment_variable(tmp_path: Path, workdir: Path,
                                                env: dict[str, str], peer: str) -> None:
    path = write_config(tmp_path / "elsewhere" / "servers.json", peer)
    out = ok(run("--config", str(path), "call", "peer", "typed", "b=no", cwd=workdir,
                 env=env))
    assert json.loads(out) == {"b": False}
    env["MCPSYNC_CONFIG"] = str(path)
    doc = json.loads(ok(run("prompts", "--json", cwd=workdir, env=env)))
    assert [(p["server"], p["name"]) for p in doc] == [("peer", "review")]


def test_vscode_mcp_json_is_found(workdir: Path, env: dict[str, str], peer: str) -> None:
    trust(write_config(workdir / ".vscode" / "mcp.json", peer, key="servers"), env)
    assert ok(run("call", "demo", "echo", "text=vscode", cwd=workdir, env=env)) == "vscode\n"


def test_a_disabled_server_can_be_named(workdir: Path, env: dict[str, str],
                                        peer: str) -> None:
    demo = {"command": PY, "args": ["-m", "mcpsync.demo"], "disabled": True}
    trust(write_config(workdir / ".mcp.json", peer, extra={"sleepy": demo}), env)
    assert ok(run("call", "sleepy", "echo", "text=awake", cwd=workdir, env=env)) == "awake\n"


# --- exit 1 -----------------------------------------------------------------------------

def test_tool_error_exits_1_with_its_output(workdir: Path, env: dict[str, str]) -> None:
    res = run("call", DEMO, "fail", "message=it broke", cwd=workdir, env=env)
    assert res.returncode == 1
    assert "it broke" in res.stdout
    assert res.stderr.splitlines() == ["mcpsync: error: tool 'fail' reported an error "
                                       "(isError)"]
    res = run("--json", "call", DEMO, "fail", cwd=workdir, env=env)
    assert res.returncode == 1
    assert json.loads(res.stdout)["isError"] is True


def test_jsonrpc_errors_exit_1(workdir: Path, env: dict[str, str], peer: str) -> None:
    assert_error(run("call", peer, "rpcerror", cwd=workdir, env=env), 1, "the peer refuses")
    assert_error(run("read", peer, "memo://missing", cwd=workdir, env=env), 1,
                 "memo://missing")
    assert_error(run("read", DEMO, "memo://x", cwd=workdir, env=env), 1, "resources")


# --- exit 2 -----------------------------------------------------------------------------

@pytest.mark.parametrize(("argv", "fragment"), [
    (["call", DEMO, "echo", "hello"], "expected key=value, got 'hello'"),
    (["call", DEMO, "echo", "=x"], "expected key=value"),
    (["call", DEMO, "echo", "text=a", "text=b"], "'text' is given more than once"),
    (["call", DEMO, "echo", "text=a", "--args", "{}"], "not both"),
    (["call", DEMO, "echo", "--args", "[1]"], "expected a JSON object"),
    (["call", DEMO, "echo", "--args", "{bad"], "invalid JSON"),
    ([], "required"),
    (["frobnicate"], "invalid choice"),
    (["--timeout", "0", "tools", DEMO], "--timeout"),
    (["tools", "--timeout", "soon", DEMO], "--timeout"),
    (["tools"], "no SERVER given and no config file found"),
    (["--config", "missing.json", "tools"], "missing.json"),
    (["tools", "'unclosed"], "cannot split"),
    (["login", "not-a-url"], "http:// or https://"),
])
def test_usage_errors_exit_2_before_anything_starts(argv: list[str], fragment: str,
                                                    workdir: Path,
                                                    capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(workdir)
    monkeypatch.delenv("MCPSYNC_CONFIG", raising=False)
    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.splitlines()) == 1 and err.startswith("mcpsync: error: ")
    assert fragment in err


def test_failed_conversion_exits_2(workdir: Path, env: dict[str, str], peer: str) -> None:
    assert_error(run("call", DEMO, "add", "a=x", "b=1", cwd=workdir, env=env), 2,
                 "argument 'a': expected a number, got 'x'")
    assert_error(run("call", peer, "typed", "i=1.5", cwd=workdir, env=env), 2,
                 "argument 'i': expected an integer")
    assert_error(run("call", peer, "typed", "o=[1]", cwd=workdir, env=env), 2,
                 "expected a JSON object")


def test_bad_config_files_exit_2(workdir: Path, env: dict[str, str]) -> None:
    (workdir / ".mcp.json").write_text('{"mcpServers": {"x": {"command": }}}')
    assert_error(run("tools", cwd=workdir, env=env), 2, ".mcp.json")
    (workdir / ".mcp.json").write_text('{"mcpServers": {"x": {"command": "a", '
                                       '"args": "not-a-list"}}}')
    assert_error(run("tools", "x", cwd=workdir, env=env), 2, "args")
    (workdir / ".mcp.json").write_text('{"mcpServers": {"x": {"command": "a", '
                                       '"disabled": true}}}')
    assert_error(run("tools", cwd=workdir, env=env), 2, "no enabled project servers")


def test_a_secret_the_cli_cannot_resolve_exits_2(workdir: Path, env: dict[str, str],
                                                 peer: str) -> None:
    vault = {"command": PY, "args": ["-m", "mcpsync.demo"], "secret_ref": "vault/demo"}
    trust(write_config(workdir / ".mcp.json", peer, extra={"vault": vault}), env)
    assert_error(run("tools", "vault", cwd=workdir, env=env), 2, "vault")


# --- exit 3 -----------------------------------------------------------------------------

def test_a_command_that_does_not_exist_exits_3(workdir: Path, env: dict[str, str]) -> None:
    assert_error(run("tools", "no-such-command-mcpsync-test --x", cwd=workdir, env=env), 3,
                 "no-such-command-mcpsync-test")


def test_a_word_unlike_any_id_is_named_as_both(workdir: Path, env: dict[str, str],
                                               peer: str) -> None:
    write_config(workdir / ".mcp.json", peer)
    assert_error(run("tools", "zzqx", cwd=workdir, env=env), 3,
                 "'zzqx' is not a server id in", "demo, peer, off", "as a command")


def test_a_mistyped_id_is_a_usage_error(workdir: Path, env: dict[str, str],
                                        peer: str) -> None:
    write_config(workdir / ".mcp.json", peer)
    res = run("tools", "dmeo", cwd=workdir, env=env)
    assert_error(res, 2, "'dmeo' is not a server id in", "did you mean 'demo'?",
                 "(its servers: demo, peer, off)")
    assert "as a command" not in res.stderr and len(res.stderr) < 200, res.stderr


def test_a_server_that_exits_at_start_exits_3(workdir: Path, env: dict[str, str]) -> None:
    dying = f"{shlex.quote(PY)} -c 'import sys; sys.stderr.write(\"bye\\n\"); sys.exit(4)'"
    assert_error(run("call", dying, "echo", cwd=workdir, env=env), 3, "code 4")


def test_a_url_nobody_listens_on_exits_3(workdir: Path, env: dict[str, str]) -> None:
    import socket

    with socket.socket() as sock:   # a port that was free a moment ago
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    line = assert_error(run("tools", f"http://127.0.0.1:{port}/mcp", cwd=workdir, env=env),
                        3, f"could not connect to http://127.0.0.1:{port}/mcp (connection "
                           "refused); is the server running there?")
    assert "_Tracked" not in line and "Max retries" not in line, line


def test_a_failed_server_under_start_all_exits_3_after_the_others(
        workdir: Path, env: dict[str, str], peer: str) -> None:
    trust(write_config(workdir / ".mcp.json", peer,
                       extra={"broken": {"command": PY, "args": ["-c", "raise SystemExit(7)"]},
                              "gone": {"command": "no-such-command-mcpsync-test"}}),
          env)
    res = run("tools", cwd=workdir, env=env)
    assert res.returncode == 3, res
    # The servers that answered are on stdout; one stderr line per server that did not.
    assert {row[0] for row in table(res.stdout)[1:]} == {"demo", "peer"}
    lines = res.stderr.splitlines()
    assert len(lines) == 2, res.stderr
    assert lines[0].startswith("mcpsync: error: server 'broken' did not start: "), lines
    assert lines[1].startswith("mcpsync: error: server 'gone' did not start: "), lines
    assert "command not found" in lines[1]
    # Every server answering is exit 0.
    write_config(workdir / ".mcp.json", peer)
    trust(workdir / ".mcp.json", env)
    assert ok(run("tools", cwd=workdir, env=env)).startswith("SERVER")


# --- exit 4, 5, 130 ---------------------------------------------------------------------

def test_unauthorized_exits_4(fault_server: FaultServer, capsys: pytest.CaptureFixture[str],
                              monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                              no_leaks: None) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    fault_server.faults.require_authorization = "Bearer the-right-one"
    assert cli.main(["tools", fault_server.url]) == 4
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.splitlines()) == 1 and err.startswith("mcpsync: error: ")
    assert "401" in err
    assert err.rstrip().endswith(f"(log in with 'mcpsync login {fault_server.url}')"), err
    # With the header the server wants, the same command works (the URL form of SERVER).
    fault_server.faults.require_authorization = None
    assert cli.main(["--json", "call", fault_server.url, "add", "a=1", "b=2"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["structuredContent"] == {"sum": 3} and err == ""


def test_a_stored_login_is_used_for_its_url(fault_server: FaultServer,
                                            capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                            no_leaks: None) -> None:
    import time

    from mcpauth import FileTokenStore
    from mcpauth.discovery import canonical_resource
    from mcpauth.tokens import Token, credential_key, resource_index_key

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    fault_server.faults.require_authorization = "Bearer stored-token"
    assert cli.main(["tools", fault_server.url]) == 4
    assert not (tmp_path / "xdg").exists()   # no login: nothing created, nothing discovered
    capsys.readouterr()
    # What `mcpsync login` leaves behind: the resource's index entry and its token.
    resource, issuer = canonical_resource(fault_server.url), "https://as.example"
    store = FileTokenStore()
    store.put(resource_index_key(resource), {"issuer": issuer, "client_id": "cid"})
    store.put(credential_key(issuer, "cid", resource),
              Token("stored-token", expires_at=time.time() + 3600, issuer=issuer,
                    client_id="cid", resource=resource).to_dict())
    assert cli.main(["call", fault_server.url, "echo", "text=with the stored login"]) == 0
    out, err = capsys.readouterr()
    assert out == "with the stored login\n" and err == ""
    calls = fault_server.rpc_requests("tools/call")
    assert calls and calls[-1].header("Authorization") == "Bearer stored-token"


def _processes_with(marker: str) -> list[int]:
    """Pids whose command line holds ``marker`` (Linux; elsewhere nothing is checked)."""
    pids = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if marker.encode() in (entry / "cmdline").read_bytes():
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def _marked_demo(marker: int) -> str:
    """The demo server with a unique (harmless) argument to find its process by."""
    return f"{DEMO} --max-frame-bytes {marker}"


def test_timeout_exits_5(workdir: Path, env: dict[str, str]) -> None:
    marker = 33_000_000 + os.getpid() % 10_000
    assert_error(run("--timeout", "0.5", "call", _marked_demo(marker), "slow", "seconds=20",
                     cwd=workdir, env=env), 5, "0.5 s")
    assert _processes_with(f"--max-frame-bytes\0{marker}") == []


def test_a_silent_server_is_a_timeout_at_start(workdir: Path, env: dict[str, str]) -> None:
    silent = f"{shlex.quote(PY)} -c 'import sys; sys.stdin.read()'"
    assert_error(run("--timeout", "0.5", "tools", silent, cwd=workdir, env=env), 5,
                 "no answer within 0.5 s")


@pytest.mark.timeout(60)
def test_ctrl_c_exits_130(workdir: Path, env: dict[str, str]) -> None:
    marker = 34_000_000 + os.getpid() % 10_000
    proc = subprocess.Popen([PY, "-m", "mcpsync", "--verbose", "call", _marked_demo(marker),
                             "slow",
                             "seconds=60", "steps=600"], cwd=workdir, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        seen = []
        for line in proc.stderr:   # the call is running once the server logs a step
            seen.append(line)
            if "slow: step 1/600" in line:
                break
        else:
            pytest.fail(f"the call never started: {''.join(seen)}")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert out == ""
    assert err.splitlines()[-1] == "mcpsync: error: interrupted"
    assert _processes_with(f"--max-frame-bytes\0{marker}") == []   # the server was stopped


def test_verbose_logs_mcpsync_at_debug(workdir: Path, env: dict[str, str]) -> None:
    res = run("-v", "call", DEMO, "echo", "text=x", cwd=workdir, env=env)
    assert res.returncode == 0 and res.stdout == "x\n"
    assert "mcpsync.cli DEBUG" in res.stderr and "calling tool 'echo'" in res.stderr


# --- login (the OAuth flow itself is mcpauth's; here only the wiring) -------------------

class _FakeStore:
    def __init__(self) -> None:
        self.path = "/tmp/fake-tokens.json"


class _FakeProvider:
    made: list[tuple[str, dict[str, Any]]] = []

    def __init__(self, url: str, **options: Any) -> None:
        self.made.append((url, options))

    def login(self) -> Any:
        return type("Token", (), {"scope": "read write"})()


@pytest.fixture
def fake_mcpauth(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[_FakeProvider]]:
    import mcpauth

    _FakeProvider.made = []
    monkeypatch.setattr(mcpauth, "OAuthProvider", _FakeProvider, raising=False)
    monkeypatch.setattr(mcpauth, "FileTokenStore", _FakeStore, raising=False)
    yield _FakeProvider


def test_login_uses_the_file_store_and_says_where(fake_mcpauth: type[_FakeProvider],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    url = "https://mcp.example.com/mcp"
    assert cli.main(["login", url, "--scope", "read write", "--scope", "admin"]) == 0
    out, err = capsys.readouterr()
    assert out == f"logged in to {url}; the token is stored in /tmp/fake-tokens.json\n"
    assert err == ""
    (made_url, options), = fake_mcpauth.made
    assert made_url == url and isinstance(options["store"], _FakeStore)
    assert options["scopes"] == ["read", "write", "admin"]
    assert options["interactive"] is True and options["grant"] == "authorization_code"
    assert cli.main(["--json", "login", url, "--device"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc == {"url": url, "token_store": "/tmp/fake-tokens.json", "scope": "read write"}
    assert fake_mcpauth.made[1][1]["grant"] == "device_code"
    assert callable(fake_mcpauth.made[1][1]["device_code_handler"])


# --- the pure parts ---------------------------------------------------------------------

@pytest.mark.parametrize(("schema", "text", "value"), [
    ({"type": "integer"}, "42", 42),
    ({"type": "integer"}, "-7", -7),
    ({"type": "number"}, "3", 3),
    ({"type": "number"}, "2.5", 2.5),
    ({"type": "number"}, "-1e3", -1000.0),
    ({"type": "boolean"}, "TRUE", True),
    ({"type": "boolean"}, "Yes", True),
    ({"type": "boolean"}, "1", True),
    ({"type": "boolean"}, "fAlSe", False),
    ({"type": "boolean"}, "NO", False),
    ({"type": "boolean"}, "0", False),
    ({"type": "null"}, "null", None),
    ({"type": "object"}, '{"a": [1, null]}', {"a": [1, None]}),
    ({"type": "array"}, "[]", []),
    ({"type": "string"}, "007", "007"),
    ({"type": "string"}, "", ""),
    ({"type": "string"}, "a=b", "a=b"),
    (None, "true", "true"),
    ({}, "12", "12"),
    ({"description": "no type"}, "12", "12"),
    ({"type": ["string", "integer"]}, "5", 5),
    ({"type": ["string", "integer"]}, "five", "five"),
    ({"type": ["integer", "null"]}, "null", None),
    ({"type": ["boolean", "number"]}, "1", True),
    ({"type": ["number", "boolean"]}, "1", 1),
    ({"anyOf": [{"type": "integer"}, {"type": "null"}]}, "3", 3),
])
def test_convert_value(schema: Any, text: str, value: Any) -> None:
    got = convert_value("k", text, schema)
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize(("schema", "text"), [
    ({"type": "integer"}, "1.5"),
    ({"type": "integer"}, "1_000"),
    ({"type": "integer"}, " 1"),
    ({"type": "number"}, "nan"),
    ({"type": "number"}, "inf"),
    ({"type": "number"}, "1e999"),
    ({"type": "number"}, "x"),
    ({"type": "boolean"}, "maybe"),
    ({"type": "boolean"}, "on"),
    ({"type": "null"}, "NULL"),
    ({"type": "null"}, ""),
    ({"type": "object"}, "[1]"),
    ({"type": "object"}, "{bad"),
    ({"type": "array"}, '{"a": 1}'),
    ({"type": ["integer", "null"]}, "x"),
])
def test_convert_value_failures_exit_2(schema: Any, text: str) -> None:
    with pytest.raises(CLIError) as info:
        convert_value("k", text, schema)
    assert info.value.code == 2
    assert "argument 'k'" in str(info.value) and repr(text) in str(info.value)


def test_convert_arguments() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    assert convert_arguments(["n=1", "s=x=y", "e="], schema) == {"n": 1, "s": "x=y", "e": ""}
    assert convert_arguments(["n=1"], None) == {"n": "1"}
    for items, fragment in ((["n"], "key=value"), (["n=1", "n=2"], "more than once"),
                            (["=1"], "key=value")):
        with pytest.raises(CLIError, match=fragment) as info:
            convert_arguments(items, schema)
        assert info.value.code == 2


def test_exit_codes_of_errors() -> None:
    assert exit_code_for(errors.ToolError("x")) == 1
    assert exit_code_for(errors.RemoteError("x", code=-32601)) == 1
    assert exit_code_for(errors.ResourceNotFound("x")) == 1
    assert exit_code_for(errors.ConfigError("x")) == 2
    assert exit_code_for(errors.ConnectionLost("x")) == 3
    assert exit_code_for(errors.ServerExited("x", exit_code=1)) == 3
    assert exit_code_for(errors.SessionExpired("x")) == 3
    assert exit_code_for(errors.ConnectFailed("x", url="http://127.0.0.1:9/mcp")) == 3
    assert exit_code_for(errors.TransportError("x", status=500)) == 3
    assert exit_code_for(errors.Unauthorized("x")) == 4
    assert exit_code_for(errors.AuthHookError("x")) == 4
    assert exit_code_for(errors.RequestTimeout("x", timeout=1)) == 5
    assert exit_code_for(KeyboardInterrupt()) == 130
    from mcpauth.errors import AuthError, LoginRequired

    assert exit_code_for(AuthError("x", step="discovery")) == 4
    assert exit_code_for(LoginRequired("x", step="authorization")) == 4


# --- the docs ---------------------------------------------------------------------------

DOCS_CLI = DOCS / "cli.md"


def _transcript() -> tuple[str, list[tuple[str, str]]]:
    """docs/cli.md's session: the .mcp.json it uses and its ``$`` commands with output."""
    text = DOCS_CLI.read_text(encoding="utf-8")
    session = text[text.index("## A session"):]
    config = re.search(r"^```json\n(.*?)^```", session, re.DOTALL | re.MULTILINE)
    console = re.search(r"^```console\n(.*?)^```", session, re.DOTALL | re.MULTILINE)
    assert config is not None and console is not None
    steps: list[tuple[str, str]] = []
    for line in console.group(1).splitlines(keepends=True):
        if line.startswith("$ "):
            steps.append((line[2:].rstrip("\n"), ""))
        else:
            command, expected = steps[-1]
            steps[-1] = (command, expected + line)
    return config.group(1), steps


@pytest.mark.timeout(120)
def test_docs_transcript(workdir: Path, env: dict[str, str]) -> None:
    config, steps = _transcript()
    assert len(steps) >= 8
    (workdir / ".mcp.json").write_text(config)
    env["PATH"] = os.path.dirname(PY) + os.pathsep + env.get("PATH", "")

    def output(command: str) -> str:
        return subprocess.run(["bash", "-c", command], cwd=workdir, env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=30).stdout

    # The session starts by trusting the file; the other steps are independent (nothing
    # writes), so they run a few at a time.
    assert steps[0][0] == "mcpsync trust .mcp.json"
    outputs = [output(steps[0][0])]
    with ThreadPoolExecutor(max_workers=4) as pool:
        outputs += list(pool.map(output, [command for command, _ in steps[1:]]))
    for (command, expected), got in zip(steps, outputs, strict=True):
        assert got == expected, f"$ {command}\n{got}"


def test_json_errors_leave_stdout_empty(workdir: Path, env: dict[str, str]) -> None:
    """With ``--json`` a failure prints no document at all: one line on stderr only."""
    assert_error(run("--json", "tools", "no-such-command-mcpsync-test", cwd=workdir, env=env),
                 3, "no-such-command-mcpsync-test")
    assert_error(run("--json", "call", DEMO, "echo", "text=a", "--args", "{}", cwd=workdir,
                     env=env), 2, "not both")
    assert_error(run("--json", "call", DEMO, "add", "a=x", cwd=workdir, env=env), 2,
                 "argument 'a'")


def test_a_shadowed_mcpauth_is_reported_not_silently_ignored(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from mcpsync.cli._login import _stored_login
    from mcpsync.config import ServerConfig

    monkeypatch.setitem(sys.modules, "mcpauth", None)     # import mcpauth -> ImportError
    with caplog.at_level("WARNING", logger="mcpsync.cli"):
        assert _stored_login(ServerConfig(id="x", url="http://127.0.0.1:9/mcp")) is None
    assert "stored logins are not used: mcpauth cannot be imported" in caplog.text
