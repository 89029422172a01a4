"""The gateway's HTTP front under a real gunicorn (``-k gthread``, one worker), loaded from
the documented entry point ``'mcpsync.gateway:wsgi()'`` with ``MCPSYNC_GATEWAY_CONFIG``
naming the config: our client in both eras and the official SDK's client as hosts, each
legacy session with its own demo process in the worker, gone once gunicorn stops."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import require_peer
from server.peers_http.gunicorn_run import Gunicorn

import mcpsync
from gateway.front_http_helpers import DEMO, wait_for, write_config

pytestmark = pytest.mark.timeout(120)
ENTRY = "mcpsync.gateway:wsgi()"


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(p) for p in (task / "children").read_text().split()]
    return out


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Gunicorn]:
    require_peer("gunicorn")
    config = write_config(tmp_path, {"demo": DEMO})
    with Gunicorn(tmp_path / "gunicorn.log", ENTRY, workers=1,
                  env={"MCPSYNC_GATEWAY_CONFIG": config}) as running:
        yield running


def test_both_eras_and_a_process_per_session_under_gunicorn(served: Gunicorn) -> None:
    (worker,) = _children(served.proc.pid)
    with mcpsync.connect(served.url, era="modern") as modern:
        steps: list[float] = []
        done = modern.call_tool("slow", {"seconds": 0.2, "steps": 2},
                                progress=lambda d, total, message: steps.append(d))
        assert done.text == "done: 2 steps in 0.2 s" and steps == [1, 2]
    shared = set(_children(worker))
    assert len(shared) == 1            # the 2026-07-28 hosts' shared upstream
    with mcpsync.connect(served.url, era="legacy") as one, \
            mcpsync.connect(served.url, era="legacy") as two:
        assert one.call_tool("echo", {"text": "one"}).text == "one"
        assert two.call_tool("add", {"a": 1, "b": 2}).structured == {"sum": 3}
        per_session = set(_children(worker)) - shared
        assert len(per_session) == 2
    assert wait_for(lambda: set(_children(worker)) == shared)
    served.close()
    assert wait_for(lambda: not any(Path(f"/proc/{p}").exists() for p in shared))


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_the_official_client_under_gunicorn(served: Gunicorn, mode: str) -> None:
    anyio = require_peer("anyio")
    require_peer("mcp")
    from mcp import Client

    async def scenario() -> None:
        async with Client(served.url, mode=mode, read_timeout_seconds=20) as client:
            assert {t.name for t in (await client.list_tools()).tools} == {
                "echo", "add", "slow", "fail"}
            added = await client.call_tool("add", {"a": 40, "b": 2})
            assert added.structured_content == {"sum": 42}

    anyio.run(scenario)


def test_without_the_config_variable_the_worker_does_not_boot(tmp_path: Path) -> None:
    require_peer("gunicorn")
    running = Gunicorn(tmp_path / "gunicorn.log", ENTRY, workers=1, wait=False)
    try:
        assert running.exit_status() != 0
        assert "MCPSYNC_GATEWAY_CONFIG" in running.text()
    finally:
        running.close()
