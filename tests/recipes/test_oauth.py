"""The headless OAuth recipe: a script logs in with a device code or a pasted redirect.

``examples/recipes/oauth_headless.py`` runs as a child process against the MCP test server
guarded by the authlib authorization server; the test plays the person on another device: it
reads the code the script prints and approves it at the authorization server, or opens the
printed authorization URL (the server approves at once) and pastes back the address the
browser would have ended on. The token file must then be 0600, and a second run must call the
tools with the stored token: no second authorization, nothing read from stdin.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from auth_peers.fixtures import ProtectedMCP

from recipes._run import RECIPES


def _start(url: str, how: str, home: Path, stdin: int = subprocess.PIPE
           ) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(RECIPES / "oauth_headless.py"), url, how],
        stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "XDG_CONFIG_HOME": str(home), "BROWSER": "false"})


def _rest(proc: subprocess.Popen[str]) -> str:
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-3000:]
    return out


def _second_run(protected: ProtectedMCP, how: str, home: Path) -> None:
    proc = _start(protected.url, how, home, stdin=subprocess.DEVNULL)   # it must not ask
    out = _rest(proc)
    assert "echo: from a headless machine" in out and "open" not in out.lower()


@pytest.mark.timeout(90)
def test_device_code(protected_mcp: ProtectedMCP, tmp_path: Path) -> None:
    proc = _start(protected_mcp.url, "device", tmp_path)
    assert proc.stdout is not None
    first = proc.stdout.readline()
    match = re.fullmatch(r"On any device, open (\S+) and enter the code (\S+)\n", first)
    assert match, first
    assert match.group(1).startswith(protected_mcp.auth.issuer)
    protected_mcp.auth.approve_device(match.group(2))   # the person, on their phone
    out = _rest(proc)
    assert "tools: echo, add" in out and "echo: from a headless machine" in out
    token_file = tmp_path / "mcpauth" / "tokens.json"
    assert token_file.stat().st_mode & 0o777 == 0o600
    _second_run(protected_mcp, "device", tmp_path)
    assert protected_mcp.auth.token_requests["urn:ietf:params:oauth:grant-type:device_code"] >= 1
    assert len(protected_mcp.auth.device_authorizations) == 1


@pytest.mark.timeout(90)
def test_pasted_redirect(protected_mcp: ProtectedMCP, tmp_path: Path) -> None:
    proc = _start(protected_mcp.url, "paste", tmp_path)
    assert proc.stdout is not None and proc.stdin is not None
    assert proc.stdout.readline() == "Open this address in a browser on any machine:\n"
    url = proc.stdout.readline().strip()
    assert url.startswith(f"{protected_mcp.auth.issuer}/authorize?")
    landed = requests.get(url, allow_redirects=False, timeout=5).headers["Location"]
    assert landed.startswith("http://127.0.0.1:8765/callback?code=")
    proc.stdin.write(landed + "\n")
    proc.stdin.flush()
    out = _rest(proc)
    assert "echo: from a headless machine" in out
    assert protected_mcp.auth.token_requests["authorization_code"] == 1
    _second_run(protected_mcp, "paste", tmp_path)
    assert protected_mcp.auth.token_requests["authorization_code"] == 1
    assert len(protected_mcp.auth.authorizations) == 1
