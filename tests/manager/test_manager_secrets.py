"""Manager secrets: a file per spawn (mode, content), deleted on stop, crash, restart, close."""

from __future__ import annotations

import json
import logging
import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from http_peers.fault_server import FaultServer

from mcpsync.config import ServerConfig
from mcpsync.errors import ConfigError, ConnectionLost, SecretError
from mcpsync.manager import Manager
from mcpsync.secrets import render_secret

from .test_manager import DictResolver, config, wait_for, write_helper

SECRET = {"API_TOKEN": 's3cr3t "quoted" $HOME `id` #x\nline2', "USER": "émile"}
VALUE = "s3cr3t"


@pytest.fixture
def helper(tmp_path: Path) -> list[str]:
    return write_helper(tmp_path)


@pytest.fixture
def manager() -> Iterator[Manager]:
    m = Manager(DictResolver({"vault/app": SECRET}))
    yield m
    m.close()


def secret_config(server_id: str, helper: list[str], fmt: str = "env") -> ServerConfig:
    return config(server_id, helper, secret_ref="vault/app", secret_format=fmt,
                  env={"SECRET_PATH": "{{secret_file}}"})


def secret_path(manager: Manager, server_id: str) -> str:
    return manager.call_tool(server_id, "getenv", {"name": "SECRET_PATH"}).text


@pytest.mark.timeout(30)
@pytest.mark.parametrize("fmt", ["env", "properties", "json"])
def test_secret_file_mode_content_and_deletion_on_stop(no_leaks: None, manager: Manager,
                                                       helper: list[str], fmt: str) -> None:
    manager.start_server(secret_config("app", helper, fmt))
    path = secret_path(manager, "app")
    assert os.path.basename(path) == f"secret.{fmt}"
    directory = os.path.dirname(path)
    assert os.path.basename(directory).startswith("mcpsync-secret-")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
    if fmt != "properties":   # the helper reads UTF-8; properties is Latin-1 with escapes
        assert manager.call_tool("app", "readfile", {"path": path}).text \
            == render_secret(fmt, SECRET)
    with open(path, "rb") as f:
        data = f.read()
    expected = render_secret(fmt, SECRET)
    assert data == expected.encode("latin-1" if fmt == "properties" else "utf-8")
    if fmt == "json":
        assert json.loads(data) == SECRET
    # The secret value is in no arg, env value, repr or log of the Manager.
    client = manager.client("app")
    assert VALUE not in repr(client) and VALUE not in repr(manager)
    assert manager.stop_server("app") is True
    assert not os.path.exists(path) and not os.path.exists(directory)


@pytest.mark.timeout(30)
def test_each_spawn_gets_a_new_file_and_restart_deletes_the_old(
        no_leaks: None, manager: Manager, helper: list[str]) -> None:
    manager.start_server(secret_config("app", helper))
    first = secret_path(manager, "app")
    manager.start_server(secret_config("app", helper))
    second = secret_path(manager, "app")
    assert first != second
    assert not os.path.exists(first) and os.path.exists(second)
    manager.start_server(secret_config("other", helper))
    third = secret_path(manager, "other")
    assert third not in (first, second)


@pytest.mark.timeout(30)
def test_crash_deletes_the_file_at_once(no_leaks: None, manager: Manager,
                                        helper: list[str]) -> None:
    manager.start_server(secret_config("app", helper))
    path = secret_path(manager, "app")
    assert os.path.exists(path)
    with pytest.raises(ConnectionLost):
        manager.call_tool("app", "crash")
    # Deleted when the process exits, without any further call on the Manager.
    assert wait_for(lambda: not os.path.exists(os.path.dirname(path)))
    assert not manager.server_started("app")
    # A new start writes a new file.
    manager.start_server(secret_config("app", helper))
    again = secret_path(manager, "app")
    assert again != path and os.path.exists(again)


@pytest.mark.timeout(30)
def test_close_deletes_every_file(no_leaks: None, helper: list[str],
                                  tmp_path: Path) -> None:
    m = Manager(DictResolver({"vault/app": SECRET}))
    m.start_server(secret_config("a", helper))
    m.start_thread_server("int", "t1", ServerConfig(
        command=helper[0], args=helper[1:], secret_ref="vault/app",
        env={"SECRET_PATH": "{{secret_file}}"}, cwd="{{worktree_root}}"),
        worktree_root=tmp_path)
    paths = [secret_path(m, "a"), secret_path(m, "int__t1")]
    assert all(os.path.exists(p) for p in paths)
    m.close()
    assert not any(os.path.exists(os.path.dirname(p)) for p in paths)


@pytest.mark.timeout(30)
def test_secret_file_in_args(no_leaks: None, manager: Manager, helper: list[str],
                             tmp_path: Path) -> None:
    script = tmp_path / "argserver.py"
    script.write_text(
        "import sys\nfrom mcpsync.server import Server\n"
        "s = Server('args', '1')\n"
        "@s.tool()\ndef argv() -> str:\n    '''The arguments.'''\n"
        "    return '|'.join(sys.argv[1:])\n"
        "s.serve()\n", encoding="utf-8")
    manager.start_server(config("args", [helper[0], str(script), "--secrets",
                                         "{{secret_file}}"], secret_ref="vault/app"))
    flag, path = manager.call_tool("args", "argv").text.split("|")
    assert flag == "--secrets" and path.endswith("secret.env") and os.path.exists(path)


def test_checks_run_before_anything_is_spawned(tmp_path: Path, helper: list[str]) -> None:
    marker = tmp_path / "spawned"
    spawn = [helper[0], "-c", f"open({str(marker)!r}, 'w').close()"]
    resolver = DictResolver({"vault/app": SECRET})
    with Manager() as m:
        with pytest.raises(ConfigError, match="resolver") as info:
            m.start_server(config("a", spawn, secret_ref="vault/app"))
        assert "'a'" in str(info.value)
        assert isinstance(m.server_ready_error("a"), ConfigError)
    with Manager(resolver) as m:
        with pytest.raises(ConfigError, match="secret_ref"):
            m.start_server(ServerConfig(id="b", command=spawn[0],
                                        args=[*spawn[1:], "{{secret_file}}"]))
        with pytest.raises(ConfigError, match="needs a header"):
            m.start_server(ServerConfig(id="c", url="http://127.0.0.1:9/mcp",
                                        secret_ref="vault/app"))
        assert resolver.calls == 0
    assert not marker.exists()


def test_resolver_failure_never_shows_the_value(tmp_path: Path, helper: list[str]) -> None:
    class Leaky:
        def resolve(self, ref: str) -> Mapping[str, str]:
            raise RuntimeError(f"vault said: token={VALUE}")

    before = set(os.listdir(tmp_path))
    with Manager(Leaky()) as m:
        with pytest.raises(SecretError) as info:
            m.start_server(secret_config("app", helper))
        exc = info.value
        assert VALUE not in str(exc) and "'app'" in str(exc) and "vault/app" in str(exc)
        assert exc.ref == "vault/app"
        assert m.server_ready_error("app") is exc and not m.server_started("app")
    assert set(os.listdir(tmp_path)) == before


def test_set_secret_resolver_applies_to_later_starts(no_leaks: None, helper: list[str],
                                                     caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="mcpsync"), Manager() as m:
        with pytest.raises(ConfigError):
            m.start_server(secret_config("app", helper))
        resolver = DictResolver({"vault/app": {"K": VALUE}})
        m.set_secret_resolver(resolver)
        m.start_server(secret_config("app", helper))
        path = secret_path(m, "app")
        with open(path, encoding="utf-8") as f:
            assert f.read() == f"K={VALUE}\n"
        assert resolver.calls == 1
    assert all(VALUE not in record.getMessage() for record in caplog.records)


def _proc_text(pid: int, name: str) -> str:
    try:
        with open(f"/proc/{pid}/{name}", "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


@pytest.mark.timeout(30)
def test_no_secret_value_in_args_env_logs_reprs_or_errors(
        no_leaks: None, helper: list[str], caplog: pytest.LogCaptureFixture) -> None:
    """Everything at DEBUG, on every logger: the value shows up nowhere but in the file."""
    import traceback

    values = [v for v in SECRET.values()] + [VALUE]
    with caplog.at_level(logging.DEBUG), Manager(DictResolver({"vault/app": SECRET})) as m:
        m.start_server(config("app", [*helper, "{{secret_file}}"], secret_ref="vault/app",
                              env={"SECRET_PATH": "{{secret_file}}"}))
        path = secret_path(m, "app")
        client = m.client("app")
        pid = client.pid
        assert pid is not None
        seen = [repr(m), repr(client), repr(m.configs), repr(m.server_info("app")),
                m.server_stderr("app"), repr(m.tools()), repr(m.capabilities("app"))]
        if os.path.isdir("/proc"):
            # What the process was given: the path, never the value.
            cmdline, environ = _proc_text(pid, "cmdline"), _proc_text(pid, "environ")
            assert path in cmdline and f"SECRET_PATH={path}" in environ
            seen += [cmdline, environ]
        assert m.stop_server("app") is True

        class Parsing:
            """A resolver whose own error quotes the value (int() of a non-number does)."""

            def resolve(self, ref: str) -> Mapping[str, str]:
                return {"PORT": str(int(VALUE))}

        m.set_secret_resolver(Parsing())
        with pytest.raises(SecretError) as info:
            m.start_server(config("app", helper, secret_ref="vault/app"))
        seen += ["".join(traceback.format_exception(info.value)),
                 repr(m.server_ready_error("app"))]
    seen += [record.getMessage() for record in caplog.records]
    seen += [record.exc_text or "" for record in caplog.records]
    assert any("vault/app" in text for text in seen)   # the reference may be named
    for value in values:
        for line in value.splitlines():
            assert not any(line in text for text in seen), line


@pytest.mark.timeout(30)
def test_interpreter_exit_closes_the_manager_and_deletes_its_files(helper: list[str],
                                                                   tmp_path: Path) -> None:
    """A Manager left open: at exit its servers stop and every secret file goes."""
    import subprocess
    import sys
    import textwrap

    from .test_manager import pid_gone

    script = tmp_path / "left_open.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        from mcpsync.config import ServerConfig
        from mcpsync.manager import Manager

        class Resolver:
            def resolve(self, ref):
                return {{"K": "v"}}

        m = Manager(Resolver())
        for sid in ("a", "b"):
            m.start_server(ServerConfig(id=sid, command={helper[0]!r}, args=[{helper[1]!r}],
                                        secret_ref="ref", env={{"P": "{{{{secret_file}}}}"}}))
            print(m.call_tool(sid, "getenv", {{"name": "P"}}).text, m.client(sid).pid)
        sys.stdout.flush()
        # no close(): the atexit hook must do it
    """), encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=25)
    assert proc.returncode == 0, proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines()]
    assert len(rows) == 2
    for path, pid in rows:
        assert path.endswith("secret.env")
        assert not os.path.exists(os.path.dirname(path))
        assert wait_for(lambda pid=int(pid): pid_gone(pid))   # type: ignore[misc]


@pytest.mark.timeout(30)
def test_an_http_server_gets_its_secret_in_a_header(fault_server: FaultServer) -> None:
    """``{{secret:KEY}}`` in a header: the value of KEY, only on the wire, for every start."""
    token = "tok-" + "x7Qz" * 6
    fault_server.faults.require_authorization = f"Bearer {token}"
    resolver = DictResolver({"vault/web": {"TOKEN": token}})
    with Manager(resolver) as m:
        m.start_server(ServerConfig(id="web", url=fault_server.url, secret_ref="vault/web",
                                    headers={"Authorization": "Bearer {{secret:TOKEN}}"}))
        assert m.call_tool("web", "add", {"a": 1, "b": 2}).structured == {"sum": 3}
        assert token not in repr(m.client("web")) and token not in repr(m)
    assert fault_server.rpc_requests("tools/call")[-1].header("Authorization") == \
        f"Bearer {token}"
    assert resolver.calls == 1
