"""The Celery recipe: a prefork pool of two worker processes calls an OAuth-protected server.

The worker runs ``examples/recipes/celery_app.py`` as written, under a real ``celery worker
--pool=prefork --concurrency=2``, with kombu's filesystem broker and file results (no broker
server). The test logs in once, as a person would before deploying, into a token file; the
access token then expires, so both workers meet an expired token as they start and must
share one refresh through the file's lock. Every task's result is checked, both processes
must have run some, the authorization server must have seen exactly one refresh and no
spent refresh token, and at shutdown every worker and the processes under it are gone.
"""

from __future__ import annotations

import importlib.util
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import requests
from auth_peers.fixtures import ProtectedMCP

import mcpauth
import mcpsync
from recipes._run import RECIPES, Served

TASKS = 20


def _follow_authorize(url: str) -> str:
    """The person at the browser: the test authorization server approves at once."""
    response = requests.get(url, allow_redirects=False, timeout=5)
    assert response.status_code in (302, 303), response.text
    return str(response.headers["Location"])


@pytest.fixture
def recipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., ModuleType]]:
    """Import celery_app.py in this process (the producer side) with the test's settings."""
    loaded: list[str] = []

    def load(env: dict[str, str]) -> ModuleType:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        spec = importlib.util.spec_from_file_location("celery_app", RECIPES / "celery_app.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["celery_app"] = module
        loaded.append("celery_app")
        spec.loader.exec_module(module)
        return module

    yield load
    for name in loaded:
        sys.modules.pop(name, None)


@pytest.mark.timeout(180)
def test_two_prefork_workers_call_tools_and_share_one_refresh(
        protected_mcp_factory: Callable[..., ProtectedMCP], recipe: Callable[..., ModuleType],
        tmp_path: Path) -> None:
    protected = protected_mcp_factory(access_token_lifetime=2)
    token_file = tmp_path / "tokens" / "tokens.json"
    # 1. One interactive login, before the workers exist.
    login = mcpauth.OAuthProvider(protected.url, store=mcpauth.FileTokenStore(token_file),
                                  authorization_handler=_follow_authorize)
    with mcpsync.connect(protected.url, auth=login, timeout=10) as client:
        assert client.call_tool("echo", {"text": "login"}).text == "login"
    login.close()
    first = login.token
    assert first is not None and first.expires_at is not None
    while time.time() < first.expires_at + 0.1:   # set-up: let the stored token expire
        time.sleep(0.05)
    protected.auth.access_token_lifetime = 3600   # the refreshed token stays valid
    env = {"MCP_URL": protected.url, "MCP_TOKEN_FILE": str(token_file),
           "CELERY_STATE_DIR": str(tmp_path / "celery")}
    app = recipe(env)

    # 2. The worker pool, as the recipe page starts it.
    argv = [sys.executable, "-m", "celery", "-A", "celery_app", "worker", "--pool=prefork",
            "--concurrency=2", "--without-mingle", "--without-gossip", "--without-heartbeat",
            "--loglevel=INFO"]
    started = time.monotonic()
    with Served(argv, tmp_path / "worker.log", env=env) as worker:
        results = [app.add.delay(i, 100) for i in range(TASKS)]
        answers: list[dict[str, Any]] = [r.get(timeout=90) for r in results]
        took = time.monotonic() - started
        processes = worker.descendants()
        assert len([p for p in processes if p.ppid() == worker.proc.pid]) == 2
        code = worker.stop(signal.SIGTERM)   # warm shutdown: worker_process_shutdown runs
    log = worker.output()
    assert code == 0, log[-3000:]
    assert [a["sum"] for a in answers] == [i + 100 for i in range(TASKS)]
    pids = {a["pid"] for a in answers}
    assert len(pids) == 2, f"one process ran every task: {pids}"
    auth = protected.auth
    assert auth.token_requests == {"authorization_code": 1, "refresh_token": 1}, log[-3000:]
    assert auth.refresh_reuse == 0
    assert (token_file.stat().st_mode & 0o777) == 0o600
    assert "Traceback" not in log and "UsedAfterFork" not in log, log[-3000:]
    assert not (RECIPES / "control").exists(), "the broker wrote outside CELERY_STATE_DIR"
    assert (tmp_path / "celery" / "control").is_dir()
    print(f"{TASKS} tasks on 2 workers in {took:.1f} s, pids {sorted(pids)}")
