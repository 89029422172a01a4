"""``mcpsync login URL`` end to end, and later commands reusing the login it saved.

Everything is real except the person: the CLI runs as a subprocess (``python -m mcpsync``);
the MCP server is the loopback fault server made an OAuth protected resource of a real authlib
authorization server (``auth_peers``), both in this test process; the "browser" is
``tests/cli/fake_browser.py``, which ``webbrowser`` starts through ``$BROWSER`` and which follows
the authorization redirect to the CLI's loopback callback, as a browser would after the user
clicked "allow". So the test covers what ``tests/cli/test_cli.py`` (a stand-in provider) and
``tests/auth/test_e2e_authlib.py`` (mcpauth in-process, with an ``authorization_handler``)
do not: the CLI's own wiring of ``webbrowser``, the loopback listener and the file store, and
a second process finding the token the first one stored.

``$BROWSER`` with ``%s`` is a command line: Python 3.11's ``webbrowser`` splits it with
``shlex``, substitutes the URL for ``%s`` and *waits* for the command (``GenericBrowser``);
exit status 0 means opened. Waiting is harmless here because the callback listener runs on
its own thread, and it means the browser process is reaped before the CLI exits.

``login --device`` runs the device authorization grant (RFC 8628) instead: no browser; the
CLI prints the verification URL and user code on stderr, and the test plays the user by
reading that line from the running process and approving the code at the authorization
server, as a person would on another device.
"""

from __future__ import annotations

import base64
import hashlib
import os
import queue
import re
import shlex
import signal
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from auth_peers.authlib_server import DEVICE_GRANT
from auth_peers.fixtures import ProtectedMCP

PY = sys.executable
FAKE_BROWSER = Path(__file__).with_name("fake_browser.py")
_RUN_TIMEOUT = 15.0   # one CLI command; a login stuck waiting for its callback is killed

pytestmark = pytest.mark.timeout(60)


@dataclass(frozen=True)
class _Run:
    code: int
    stdout: str
    stderr: str


def _browser(*args: str) -> str:
    """A ``$BROWSER`` command line running fake_browser.py, the URL in place of ``%s``."""
    return " ".join(shlex.quote(a) for a in (PY, str(FAKE_BROWSER), *args)) + " %s"


def _env(home: Path, browser: str) -> dict[str, str]:
    """No display, no inherited config; the token file under ``home`` (XDG_CONFIG_HOME)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("MCPSYNC_CONFIG", "DISPLAY", "WAYLAND_DISPLAY", "BROWSER")}
    env.update(XDG_CONFIG_HOME=str(home), HOME=str(home), BROWSER=browser)
    return env


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - a reused id of someone else's group
        return False
    return True


def _workdir(home: Path) -> Path:
    """The commands' working directory: not ``home`` itself. ``python -m`` puts the working
    directory first on ``sys.path``, and there ``home/mcpauth`` (the token directory) would be
    imported as a namespace package ahead of the editable install's ``mcpauth``."""
    path = home / "work"
    path.mkdir(exist_ok=True)
    return path


def _mcpsync(*args: str, env: dict[str, str], cwd: Path) -> _Run:
    """Run ``python -m mcpsync ARGS`` in its own process group, stdin closed.

    A run that hangs is killed with its whole group (the browser included) and fails the
    test; a run that finishes must leave no process of its group behind.
    """
    proc = subprocess.Popen([PY, "-m", "mcpsync", *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=cwd, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=_RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"mcpsync {args[0]} did not finish within {_RUN_TIMEOUT:g} s; "
                    f"stdout {out!r}, stderr {err!r}")
    deadline = time.monotonic() + 5
    while _group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    if _group_alive(proc.pid):
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"mcpsync {args[0]} left a process of its group running")
    return _Run(proc.returncode, out, err)


def _s256(verifier: str) -> str:
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_login_saves_a_token_that_tools_and_call_reuse(protected_mcp: ProtectedMCP,
                                                       tmp_path: Path) -> None:
    auth, url = protected_mcp.auth, protected_mcp.url
    token_file = tmp_path / "mcpauth" / "tokens.json"
    forbidden = tmp_path / "forbidden-browser-started"

    login = _mcpsync("login", url, env=_env(tmp_path, _browser()), cwd=_workdir(tmp_path))

    assert login.code == 0, login.stderr
    assert login.stdout == f"logged in to {url}; the token is stored in {token_file}\n"
    assert login.stderr == ""
    # The authorization server: one dynamic registration of a loopback redirect ...
    assert len(auth.registrations) == 1
    client = auth.registrations[0]
    assert len(client.redirect_uris) == 1
    redirect = client.redirect_uris[0]
    assert re.fullmatch(r"http://127\.0\.0\.1:[0-9]+/callback", redirect), redirect
    # ... one authorization request with PKCE S256, for this resource ...
    assert len(auth.authorizations) == 1
    query = auth.authorizations[0]
    assert query["response_type"] == ["code"]
    assert query["client_id"] == [client.client_id]
    assert query["redirect_uri"] == [redirect]
    assert query["code_challenge_method"] == ["S256"]
    assert query["resource"] == [url]
    assert "mcp:tools" in query["scope"][0].split()
    assert query["state"][0]
    # ... and one code exchange, whose verifier matches that challenge, and nothing else.
    assert dict(auth.token_requests) == {"authorization_code": 1}
    [exchange] = auth.requests_of("authorization_code")
    assert exchange.status == 200, exchange.response
    verifier = exchange.value("code_verifier")
    assert verifier is not None and _s256(verifier) == query["code_challenge"][0]
    assert exchange.value("redirect_uri") == redirect
    assert len(auth.tokens) == 1
    issued = auth.tokens[0]
    assert issued.resource == url and "mcp:tools" in issued.scope.split()
    # The token file: 0600 in a 0700 directory, holding the token that was issued.
    assert token_file.is_file()
    assert _mode(token_file) == 0o600
    assert _mode(token_file.parent) == 0o700
    assert issued.access_token in token_file.read_text(encoding="utf-8")

    # Later commands: the saved token, no browser (one that records being started), no new
    # authorization, registration or token request.
    later_env = _env(tmp_path, _browser("--forbidden", str(forbidden)))
    seen = len(protected_mcp.mcp_requests())
    tools = _mcpsync("tools", url, env=later_env, cwd=_workdir(tmp_path))
    assert tools.code == 0, tools.stderr
    assert tools.stderr == ""
    rows = [line.split()[:2] for line in tools.stdout.splitlines()]
    assert rows[0] == ["SERVER", "TOOL"] and [url, "echo"] in rows[1:]

    call = _mcpsync("call", url, "echo", "text=with the saved login", env=later_env,
                    cwd=_workdir(tmp_path))
    assert call.code == 0, call.stderr
    assert (call.stdout, call.stderr) == ("with the saved login\n", "")

    assert not forbidden.exists()
    assert len(auth.registrations) == 1 and len(auth.authorizations) == 1
    assert dict(auth.token_requests) == {"authorization_code": 1}
    later = protected_mcp.mcp_requests()[seen:]
    assert later, "the later commands sent nothing to the MCP server"
    assert {r.header("Authorization") for r in later} == {f"Bearer {issued.access_token}"}

    # No secret of the flow is ever printed.
    secrets = [issued.access_token, verifier, exchange.value("code")]
    if issued.refresh_token:
        secrets.append(issued.refresh_token)
    printed = "".join(r.stdout + r.stderr for r in (login, tools, call))
    for secret in secrets:
        assert secret and secret not in printed


def test_tools_without_a_saved_login_exits_4_and_starts_no_login(
        protected_mcp: ProtectedMCP, tmp_path: Path) -> None:
    auth, url = protected_mcp.auth, protected_mcp.url
    forbidden = tmp_path / "forbidden-browser-started"
    env = _env(tmp_path, _browser("--forbidden", str(forbidden)))

    run = _mcpsync("tools", url, env=env, cwd=_workdir(tmp_path))

    assert run.code == 4
    assert run.stdout == ""
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("mcpsync: error: "), run.stderr
    assert "401" in lines[0]
    # Called without credentials; no browser, no discovery or login at the authorization
    # server, and no token file created.
    assert not forbidden.exists()
    requests = protected_mcp.mcp_requests()
    assert requests and all(r.header("Authorization") is None for r in requests)
    assert not [r for r in protected_mcp.mcp.requests if r.path.startswith("/.well-known/")]
    assert auth.registrations == [] and auth.authorizations == []
    assert not auth.token_requests
    assert not (tmp_path / "mcpauth").exists()


def _device_login(protected: ProtectedMCP, env: dict[str, str], cwd: Path) -> _Run:
    """``mcpsync login URL --device``, with the user approving the code it prints.

    stderr is read line by line while the login runs (on a reader thread, so a silent CLI
    cannot hang the test); the user code on the "enter the code" line is approved at the
    authorization server once the CLI has polled at least once, i.e. is seen waiting.
    """
    url, auth = protected.url, protected.auth
    proc = subprocess.Popen([PY, "-m", "mcpsync", "login", url, "--device"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=cwd,
                            start_new_session=True)
    lines: queue.Queue[str | None] = queue.Queue()
    err: list[str] = []

    def read_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            err.append(line)
            lines.put(line)
        lines.put(None)

    reader = threading.Thread(target=read_stderr, name="test-cli-device-stderr", daemon=True)
    reader.start()
    try:
        user_code = None
        while user_code is None:
            line = lines.get(timeout=_RUN_TIMEOUT)
            assert line is not None, f"the CLI ended without showing a code: {err!r}"
            match = re.search(r"enter the code (\S+)", line)
            user_code = match.group(1) if match else None
        [record] = auth.device_authorizations
        assert record.user_code == user_code
        deadline = time.monotonic() + _RUN_TIMEOUT
        while record.polls < 1 and time.monotonic() < deadline:  # setup: the CLI is waiting
            time.sleep(0.01)
        auth.approve_device(user_code)
        code = proc.wait(timeout=_RUN_TIMEOUT)
    except (queue.Empty, subprocess.TimeoutExpired, AssertionError):
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    finally:
        reader.join(5)
    assert proc.stdout is not None
    out = proc.stdout.read()
    proc.stdout.close()
    assert not reader.is_alive() and not _group_alive(proc.pid)
    return _Run(code, out, "".join(err))


def test_login_device_prints_the_code_and_tools_reuses_the_token(
        protected_mcp: ProtectedMCP, tmp_path: Path) -> None:
    auth, url = protected_mcp.auth, protected_mcp.url
    token_file = tmp_path / "mcpauth" / "tokens.json"
    forbidden = tmp_path / "forbidden-browser-started"
    env = _env(tmp_path, _browser("--forbidden", str(forbidden)))

    login = _device_login(protected_mcp, env, _workdir(tmp_path))

    assert login.code == 0, login.stderr
    assert login.stdout == f"logged in to {url}; the token is stored in {token_file}\n"
    [record] = auth.device_authorizations
    assert login.stderr == (f"To log in, open {auth.issuer}/device?user_code={record.user_code}"
                            f" and enter the code {record.user_code}\n")
    # One registration for the device grant (no redirect URI), one device authorization for
    # this resource, polls that waited for the user and then got the token; no browser.
    [client] = auth.registrations
    assert client.grant_types == [DEVICE_GRANT, "refresh_token"] and client.redirect_uris == []
    assert record.client_id == client.client_id and record.resources == (url,)
    polls = auth.requests_of(DEVICE_GRANT)
    assert [p.error for p in polls[:-1]] == ["authorization_pending"] * (len(polls) - 1)
    assert len(polls) >= 2 and polls[-1].status == 200
    assert not auth.authorizations and not forbidden.exists()
    [issued] = auth.tokens
    assert issued.resource == url and issued.grant_type == DEVICE_GRANT
    assert issued.access_token in token_file.read_text(encoding="utf-8")
    assert _mode(token_file) == 0o600

    # A later command uses the stored token: no new login or token request.
    seen = len(protected_mcp.mcp_requests())
    tools = _mcpsync("tools", url, env=env, cwd=_workdir(tmp_path))
    assert tools.code == 0, tools.stderr
    assert tools.stderr == ""
    assert [url, "echo"] in [line.split()[:2] for line in tools.stdout.splitlines()[1:]]
    assert len(auth.device_authorizations) == 1 and len(auth.registrations) == 1
    assert dict(auth.token_requests) == {DEVICE_GRANT: len(polls)}
    later = protected_mcp.mcp_requests()[seen:]
    assert later and {r.header("Authorization") for r in later} == {
        f"Bearer {issued.access_token}"}
    # The device code and the tokens are secrets: never printed.
    printed = login.stdout + login.stderr + tools.stdout + tools.stderr
    for secret in (record.device_code, issued.access_token, issued.refresh_token):
        assert secret and secret not in printed
