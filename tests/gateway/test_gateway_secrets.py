"""An upstream entry's ``secret_ref`` behind ``mcpsync gateway --config F --secrets-dir D``.

The secret lives in a 0600 file of a temporary secrets directory; the gateway must give the
upstream what the Manager gives a spawn (a fresh 0600 file whose path fills
``{{secret_file}}``, deleted when the process ends), and the value must appear in no argv,
no environment, no traffic log, no stderr and no repr. The upstream
(``peers/secret_server.py``) reports a SHA-256 of what it read, never the value.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from http_peers.fault_server import FaultServer

import mcpsync
from mcpsync.config import ServerConfig
from mcpsync.errors import ConfigError, SecretError
from mcpsync.gateway import Gateway
from mcpsync.gateway._secretdir import DirectorySecrets
from mcpsync.secrets import write_secret_file

PEER = Path(__file__).with_name("peers") / "secret_server.py"
REF = "vault/app"


def _secrets_dir(tmp_path: Path, value: str, mode: int = 0o600) -> Path:
    directory = tmp_path / "secrets"
    (directory / "vault").mkdir(parents=True, mode=0o700)
    path = directory / REF
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "w") as f:
        json.dump({"API_KEY": value, "USER": "bot"}, f)
    os.chmod(path, mode)
    return directory


def _config(tmp_path: Path, **entry: Any) -> Path:
    path = tmp_path / "gateway.json"
    path.write_text(json.dumps({"mcpServers": {"peer": {
        "command": sys.executable, "args": [str(PEER)],
        "env": {"SECRET_FILE": "{{secret_file}}"}, "secret_ref": REF, **entry}}}))
    return path


def _proc_text(pid: int, name: str) -> str:
    return Path(f"/proc/{pid}/{name}").read_bytes().replace(b"\0", b" ").decode(errors="replace")


def _seen(client: mcpsync.Client) -> dict[str, Any]:
    answer = json.loads(client.call_tool("seen", {}, raise_on_error=True).text)
    assert isinstance(answer, dict)
    return answer


@pytest.mark.timeout(60)
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads /proc (Linux)")
def test_a_stdio_upstream_gets_its_secret_file_and_nothing_leaks(tmp_path: Path) -> None:
    value = "sk-" + secrets.token_urlsafe(24)
    directory = _secrets_dir(tmp_path, value)
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    log = tmp_path / "traffic.log"
    gateway = ServerConfig(
        command=sys.executable,
        args=["-m", "mcpsync", "gateway", "--config", str(_config(tmp_path)),
              "--secrets-dir", str(directory), "--log", str(log), "--log-detail", "full"],
        env={"XDG_RUNTIME_DIR": str(runtime)})
    with mcpsync.connect(gateway, timeout=20) as client:
        first = _seen(client)
        # The upstream read the value: a fresh 0600 file in the runtime directory.
        assert first["api_key_sha256"] == hashlib.sha256(value.encode()).hexdigest()
        assert first["keys"] == ["API_KEY", "USER"]
        assert first["mode"] == 0o600
        assert Path(first["path"]).parent.parent == runtime
        assert Path(first["path"]).parent.name.startswith("mcpsync-secret-")
        # Nowhere in the argv or environment of the upstream or of the gateway.
        for pid in (first["pid"], first["ppid"]):
            for name in ("cmdline", "environ"):
                assert value not in _proc_text(pid, name), f"the secret is in {name} of {pid}"
        # A crash: the file goes with the process; the restart gets a new one.
        os.kill(first["pid"], signal.SIGKILL)
        deadline = time.monotonic() + 10
        while Path(first["path"]).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not Path(first["path"]).exists(), "the dead upstream's secret file stayed"
        second = _seen(client)   # the next call restarts the upstream
        assert second["pid"] != first["pid"] and second["path"] != first["path"]
        assert second["api_key_sha256"] == first["api_key_sha256"]
        stderr = client.stderr_tail()
    assert value not in stderr
    assert log.exists() and '"seen"' in log.read_text()
    assert value not in log.read_text()
    # Closing the gateway deleted the live file and its directory.
    assert list(runtime.iterdir()) == []


@pytest.mark.timeout(60)
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads /proc (Linux)")
def test_an_http_upstream_gets_its_secret_in_a_header(tmp_path: Path,
                                                      fault_server: FaultServer) -> None:
    value = "sk-" + secrets.token_urlsafe(24)
    fault_server.faults.require_authorization = f"Bearer {value}"   # 401 otherwise
    directory = _secrets_dir(tmp_path, value)
    config = tmp_path / "gateway.json"
    config.write_text(json.dumps({"mcpServers": {"web": {
        "url": fault_server.url, "secret_ref": REF,
        "headers": {"Authorization": "Bearer {{secret:API_KEY}}", "X-User": "{{secret:USER}}"}}}}))
    log = tmp_path / "traffic.log"
    argv = [sys.executable, "-m", "mcpsync", "gateway", "--config", str(config),
            "--secrets-dir", str(directory), "--log", str(log), "--log-detail", "full"]
    with mcpsync.connect(argv, era="legacy", timeout=20) as client:
        assert client.call_tool("add", {"a": 1, "b": 2}).structured == {"sum": 3}
        assert client.pid is not None
        for name in ("cmdline", "environ"):
            assert value not in _proc_text(client.pid, name)
        stderr = client.stderr_tail()
    calls = fault_server.rpc_requests("tools/call")
    assert calls and calls[-1].header("Authorization") == f"Bearer {value}"
    assert calls[-1].header("X-User") == "bot"
    assert value not in stderr and value not in log.read_text()
    assert '"add"' in log.read_text()


def _gateway_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mcpsync", "gateway", *args],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)


def test_the_command_refuses_a_secret_it_cannot_resolve(tmp_path: Path) -> None:
    value = "sk-" + secrets.token_urlsafe(24)
    config = str(_config(tmp_path))
    done = _gateway_cli("--config", config)
    assert done.returncode == 2, done.stderr
    assert "'peer'" in done.stderr and "--secrets-dir" in done.stderr
    readable = _secrets_dir(tmp_path, value, mode=0o644)
    done = _gateway_cli("--config", config, "--secrets-dir", str(readable))
    assert done.returncode == 2, done.stderr
    assert "chmod 600" in done.stderr and "0644" in done.stderr
    assert value not in done.stdout + done.stderr
    done = _gateway_cli("--config", config, "--secrets-dir", str(tmp_path / "nowhere"))
    assert done.returncode == 2 and "not a directory" in done.stderr


def test_a_reference_stays_inside_the_directory(tmp_path: Path) -> None:
    resolver = DirectorySecrets(_secrets_dir(tmp_path, "v"))
    for ref in ("../secrets/vault/app", "/etc/passwd", "vault/./app", ""):
        with pytest.raises(ConfigError, match="relative path inside"):
            resolver.resolve(ref)
    link = tmp_path / "secrets" / "link"
    link.symlink_to(tmp_path / "secrets" / REF)
    with pytest.raises(ConfigError, match="cannot open"):
        resolver.resolve("link")
    assert resolver.resolve(REF) == {"API_KEY": "v", "USER": "bot"}


def test_an_unreadable_secret_fails_the_spawn_naming_only_its_reference(tmp_path: Path) -> None:
    """A file that turns bad after the start check: the Manager's SecretError, no value."""
    value = "sk-" + secrets.token_urlsafe(24)
    directory = _secrets_dir(tmp_path, value)
    (directory / REF).write_text('{"API_KEY": ' + json.dumps(value) + ', "USER": 1}')
    config = ServerConfig(id="peer", command="x", secret_ref=REF)
    with pytest.raises(SecretError) as caught:
        write_secret_file(config, DirectorySecrets(directory))
    assert REF in str(caught.value) and value not in str(caught.value)
    assert caught.value.__cause__ is None


def test_entries_with_secret_ref_are_checked_before_anything_starts(tmp_path: Path) -> None:
    value = "sk-" + secrets.token_urlsafe(24)
    resolver = DirectorySecrets(_secrets_dir(tmp_path, value))
    entry = {"command": sys.executable, "args": [str(PEER)], "secret_ref": REF,
             "env": {"SECRET_FILE": "{{secret_file}}"}}
    with pytest.raises(ConfigError, match="--secrets-dir"):
        Gateway({"mcpServers": {"peer": entry}})
    # An HTTP entry takes its secret in a header; with none that names a key, it is refused
    # (as the Manager refuses it).
    with pytest.raises(ConfigError, match="needs a header"):
        Gateway({"mcpServers": {"web": {"url": "http://127.0.0.1:9/mcp", "secret_ref": REF}}},
                secret_resolver=resolver)
    with pytest.raises(ConfigError, match="no secret_ref"):
        Gateway({"mcpServers": {"peer": {**entry, "secret_ref": ""}}}, secret_resolver=resolver)
    with Gateway({"mcpServers": {"peer": entry}}, secret_resolver=resolver) as gateway:
        shown = repr(gateway) + repr(gateway.upstreams[0].config) + repr(resolver)
    assert value not in shown and str(tmp_path / "secrets") in repr(resolver)
