"""The server recipe: ``inventory_server.py`` over stdio, and under gunicorn with two workers.

Over stdio the desktop-app way (the file as the command); under a real gunicorn (``-k
gthread``, two workers, one ``MCPSYNC_STATE_KEY``) called by the mcpsync client in both
protocol eras, with a progress report that crosses gunicorn; without the key two workers
refuse to boot and gunicorn exits, naming the variable in its log. The legacy era runs one
worker: its session lives in the worker that opened it, and gunicorn hands each of the
client's connections (the GET stream's, the POSTs', any reopened one) to whichever worker
accepts it first, so with two a request may reach the other worker and get a 404.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import mcpsync
from recipes._run import RECIPES, Served, free_port

KEY = {"MCPSYNC_STATE_KEY": "the same long secret for every worker of this test"}


def _gunicorn(port: int, workers: int = 2) -> list[str]:
    return [sys.executable, "-m", "gunicorn", "-k", "gthread", "--threads", "16",
            "-w", str(workers),
            "-b", f"127.0.0.1:{port}", "--no-control-socket", "--graceful-timeout", "5",
            "inventory_server:application"]


def test_over_stdio() -> None:
    with mcpsync.connect([sys.executable, str(RECIPES / "inventory_server.py")]) as client:
        assert client.server_info.name == "inventory"
        assert client.call_tool("stock", {"item": "apple"}).text == "7"


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_under_gunicorn_with_two_workers(tmp_path: Path, era: str) -> None:
    port = free_port()
    # Legacy sessions are per worker and gunicorn alone cannot route by Mcp-Session-Id
    # (docs/server.md, "Under gunicorn, with several workers"): one worker for that era.
    workers = 1 if era == "legacy" else 2
    with Served(_gunicorn(port, workers), tmp_path / "gunicorn.log", port=port,
                env=KEY) as served:
        url = f"http://127.0.0.1:{port}/mcp"
        steps: list[float] = []
        with mcpsync.connect(url, era=era, timeout=20) as client:
            assert client.era == era
            assert client.call_tool("stock", {"item": "plum"}).text == "31"
            text = client.call_tool("restock", {"items": ["apple", "pear", "plum"]},
                                    progress=lambda done, total, msg: steps.append(done)).text
        code = served.stop()
    assert code == 0, served.output()[-3000:]
    assert text.startswith("low: pear (pid ")
    assert steps == [1, 2, 3]


def test_two_workers_without_a_shared_key_refuse_to_boot(tmp_path: Path) -> None:
    port = free_port()
    served = Served(_gunicorn(port), tmp_path / "gunicorn.log", env={"MCPSYNC_STATE_KEY": ""})
    code = served.proc.wait(60)
    served.stop()
    assert code != 0
    assert "MCPSYNC_STATE_KEY" in served.output()
