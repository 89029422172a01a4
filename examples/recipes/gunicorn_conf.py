"""gunicorn settings for flask_app: load the app once, then a fresh Manager in each worker.

``preload_app`` imports ``flask_app`` in the gunicorn master before it forks the workers,
which is where a broken server config should fail. The Manager that import started belongs
to the master: in a worker it raises ``UsedAfterFork``. ``post_fork`` gives each worker a
Manager of its own; ``worker_exit`` stops that worker's servers.
"""

from __future__ import annotations

from typing import Any

bind = "127.0.0.1:8000"
workers = 2
worker_class = "gthread"   # threads: a tool call blocks its request's thread, not the worker
threads = 8
preload_app = True


def post_fork(server: Any, worker: Any) -> None:
    import flask_app

    flask_app.start_manager()


def worker_exit(server: Any, worker: Any) -> None:
    import flask_app

    flask_app.stop_manager()
