"""The Django recipe, served for real: ``runserver`` (threaded) and gunicorn ``--preload``.

``examples/recipes/django_site.py`` makes its Manager on the first request of each process
and forgets it in a forked child, so the same file answers right under Django's own server
(30 concurrent requests, one process) and under gunicorn with two preloaded workers, with no
hook. After each run no process is left below the server.
"""

from __future__ import annotations

import sys
from pathlib import Path

from recipes._run import Served, free_port
from recipes.test_flask import CALLS, _many


def test_runserver_answers_concurrent_requests(tmp_path: Path) -> None:
    port = free_port()
    argv = [sys.executable, "django_site.py", "runserver", f"127.0.0.1:{port}", "--noreload"]
    with Served(argv, tmp_path / "django.log", port=port) as served:
        answers = _many(port)
        below = served.tree()
        served.stop()
    assert [status for status, _ in answers] == [200] * CALLS, answers[:3]
    assert [body["sum"] for _, body in answers] == [i + 1 for i in range(CALLS)]
    assert {body["pid"] for _, body in answers} == {served.proc.pid}
    assert len([argv for _, _, argv in below if "mcpsync.demo" in argv]) == 1, below


def test_gunicorn_preload_needs_no_hook(tmp_path: Path) -> None:
    port = free_port()
    argv = [sys.executable, "-m", "gunicorn", "--preload", "-w", "2", "-k", "gthread",
            "-b", f"127.0.0.1:{port}", "--no-control-socket", "--graceful-timeout", "5",
            "django_site:application"]
    with Served(argv, tmp_path / "gunicorn.log", port=port) as served:
        answers = _many(port)
        workers = {pid for pid, parent, cmd in served.tree()
                   if parent == served.proc.pid and "mcpsync.demo" not in cmd}
        code = served.stop()
    assert code == 0, served.output()[-3000:]
    assert [status for status, _ in answers] == [200] * CALLS, answers[:3]
    assert [body["sum"] for _, body in answers] == [i + 1 for i in range(CALLS)]
    assert len(workers) == 2 and {body["pid"] for _, body in answers} <= workers
