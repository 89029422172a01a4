"""``mcpsync login URL`` end to end, and later commands reusing the login it saved.

Everything is real except the person: the CLI runs as a subprocess (``python -m mcpsync``);
the MCP server is the loopback fault server made an OAuth protected resource of a real authlib
authorization server (``auth_peers``), both in this test process; the "browser" is
``tests/fake_browser.py``, which ``webbrowser`` starts through ``$BROWSER`` and which follows
the authorization redirect to the CLI's loopback callback, as a browser would after the user
clicked "allow". So the test covers what ``tests/test_cli.py`` (a stand-in provider) and
``tests/auth/test_e2e_authlib.py`` (mcpauth in-process, with an ``authorization_handler``)
do not: the CLI's own wiring of ``webbrowser``, the loopback listener and the file store, and
a second process finding the token the first one stored.

``$BROWSER`` with ``%s`` is a command line: Python 3.11's ``webbrowser`` splits it with
``shlex``, substitutes the URL for ``%s`` and *waits* for the command (``GenericBrowser``);
exit status 0 means opened. Waiting is harmless here because the callback listener runs on
its own thread, and it means the browser process is reaped before the CLI exits.

The device-code flow (``login --device``) is not tested here: the authlib peer offers no
device authorization endpoint.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shlex
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from auth_peers.fixtures import (  # noqa: F401 - registers the fixtures
    ProtectedMCP,
    protected_mcp_factory_fixture,
    protected_mcp_fixture,
)

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
