"""Servers started by npx and uvx, and servers that will not start: the recipes, run as written.

``third_party.py`` is run with ``npx -y @modelcontextprotocol/server-everything`` (the
pinned copy that ``.ci/install-conformance.sh`` installs, found by npx in that folder's
``node_modules`` with npm told to stay offline, under the Node 22 installed beside it) and
with ``uvx``, which builds a throwaway environment from this repository's source and runs the
demo server in it. ``debug_start.py`` must print the three diagnoses its page promises.
Missing npx, the installed server or uv fail under ``CI=true`` and skip elsewhere.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import IN_CI, ROOT
from http_peers.everything import ENTRY, NODE

from recipes._run import RECIPES

EVERYTHING_DIR = ENTRY.parents[3]   # the folder whose node_modules holds the package


def _need(what: str, present: bool) -> None:
    if not present:  # pragma: no cover - depends on the environment
        if IN_CI:
            pytest.fail(f"{what} is missing in CI")
        pytest.skip(f"{what} is not installed")


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(RECIPES / "third_party.py"), *argv], cwd=cwd,
                          env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=180)


def test_npx_starts_server_everything() -> None:
    _need("npx", shutil.which("npx") is not None)
    _need("server-everything (.ci/install-conformance.sh)", ENTRY.exists() and NODE.exists())
    path = os.pathsep.join([str(NODE.parent), os.environ.get("PATH", "")])
    proc = _run(["npx", "-y", "@modelcontextprotocol/server-everything", "stdio"],
                EVERYTHING_DIR, {"PATH": path, "npm_config_offline": "true"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("mcp-servers/everything: ") and lines[0].endswith(" tools")
    assert any(line.startswith("  get-sum: ") for line in lines), proc.stdout
    assert lines[-1] == "echo -> Echo: hello"


def test_uvx_starts_a_server_from_a_python_package(tmp_path: Path) -> None:
    bin_dir = Path(sys.executable).parent
    _need("uv (the test extra)", (bin_dir / "uvx").exists() or shutil.which("uvx") is not None)
    path = os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")])
    proc = _run(["uvx", "--from", str(ROOT), "python", "-m", "mcpsync.demo"], tmp_path,
                {"PATH": path, "UV_CACHE_DIR": str(tmp_path / "uv-cache")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == "mcpsync-demo: 4 tools"
    assert lines[-1] == "echo -> hello"
    # the server ran from uv's own environment, not from this virtual environment
    assert (tmp_path / "uv-cache").is_dir()


def test_debugging_a_server_that_will_not_start(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(RECIPES / "debug_start.py")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "[1] ServerExited, exit code 1:" in out
    assert "server 'weather' exited with code 1" in out
    assert out.index("its stderr ends with:\nloading settings\nWEATHER_API_KEY is not set") > 0
    assert "[2] ConfigError: starting 'no-such-mcp-server': command not found" in out
    assert "its first line on stdout was 'Server ready on port 8000'" in out
    assert proc.stderr.splitlines() == ["[weather] loading settings",
                                        "[weather] WEATHER_API_KEY is not set"]
