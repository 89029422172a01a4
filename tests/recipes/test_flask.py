"""The Flask recipe, served for real: Flask's threaded server, and gunicorn with two workers.

``examples/recipes/flask_app.py`` starts its Manager at import. On the threaded development
server 30 concurrent requests share that one Manager. Under gunicorn with ``--preload`` the
import happens in the master, before the fork: with ``gunicorn_conf.py``'s ``post_fork`` hook
every request is answered by a worker's own Manager; without the hook every request fails
with ``UsedAfterFork`` (the master's Manager, used in a child); without ``--preload`` each
worker imports the app itself and needs no hook. Each run ends with no process
left under the server (workers, demo servers).
"""

from __future__ import annotations

import json
import signal
import sys
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from recipes._run import Served, free_port

CALLS = 30


def _get(port: int, a: int, b: int) -> tuple[int, dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/add?a={a}&b={b}"
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _many(port: int) -> list[tuple[int, dict[str, Any]]]:
    with ThreadPoolExecutor(10) as pool:
        return list(pool.map(lambda i: _get(port, i, 1), range(CALLS)))


def _gunicorn(port: int, *options: str) -> list[str]:
    return [sys.executable, "-m", "gunicorn", *options, "-b", f"127.0.0.1:{port}",
            "--no-control-socket", "--graceful-timeout", "5", "flask_app:app"]


def test_the_threaded_dev_server_shares_one_manager(tmp_path: Path) -> None:
    port = free_port()
    with Served([sys.executable, "flask_app.py", str(port)], tmp_path / "flask.log",
                port=port) as served:
        answers = _many(port)
        below = served.tree()
        served.stop(signal.SIGINT)   # Ctrl-C: the Manager closes at exit
    assert [status for status, _ in answers] == [200] * CALLS, answers[:3]
    assert [body["sum"] for _, body in answers] == [i + 1 for i in range(CALLS)]
    assert {body["pid"] for _, body in answers} == {served.proc.pid}
    assert [pid for pid, parent, argv in below if "mcpsync.demo" in argv], below


def test_gunicorn_preload_with_post_fork_gives_each_worker_a_manager(tmp_path: Path) -> None:
    port = free_port()
    with Served(_gunicorn(port, "-c", "gunicorn_conf.py"), tmp_path / "gunicorn.log",
                port=port) as served:
        answers = _many(port)
        workers = {pid for pid, parent, argv in served.tree()
                   if parent == served.proc.pid and "mcpsync.demo" not in argv}
        code = served.stop()
    assert code == 0, served.output()[-3000:]
    assert [status for status, _ in answers] == [200] * CALLS, answers[:3]
    assert [body["sum"] for _, body in answers] == [i + 1 for i in range(CALLS)]
    assert len(workers) == 2 and {body["pid"] for _, body in answers} <= workers


def test_gunicorn_preload_without_post_fork_fails_every_request(tmp_path: Path) -> None:
    """What goes wrong without the hook: the workers hold the master's Manager."""
    port = free_port()
    with Served(_gunicorn(port, "--preload", "-w", "2", "-k", "gthread"),
                tmp_path / "gunicorn.log", port=port) as served:
        answers = _many(port)
        code = served.stop()
    assert code == 0, served.output()[-3000:]
    assert {status for status, _ in answers} == {502}
    assert {body["error"] for _, body in answers} == {"UsedAfterFork"}
    assert "create a new one in the child" in answers[0][1]["message"]


@pytest.fixture(autouse=True)
def _no_recipe_module_left() -> None:
    """The recipe runs in its own processes; nothing here imports it."""
    assert "flask_app" not in sys.modules


def test_gunicorn_without_preload_needs_no_hook(tmp_path: Path) -> None:
    """Each worker imports the app after the fork, so its Manager is its own."""
    port = free_port()
    with Served(_gunicorn(port, "-w", "2", "-k", "gthread"), tmp_path / "gunicorn.log",
                port=port) as served:
        answers = _many(port)
        code = served.stop()
    assert code == 0, served.output()[-3000:]
    assert [status for status, _ in answers] == [200] * CALLS, answers[:3]
    assert [body["sum"] for _, body in answers] == [i + 1 for i in range(CALLS)]
