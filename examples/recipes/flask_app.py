"""A Flask app that calls MCP tools, with one Manager per process.

The Manager is started when the module is imported, so a server that cannot start fails the
deploy instead of the first request. Under a forking server (gunicorn) each worker process
must then call :func:`start_manager` again after the fork: see ``gunicorn_conf.py``.

Run it on Flask's threaded development server with ``python flask_app.py 5000``, or under
gunicorn with ``gunicorn -c gunicorn_conf.py flask_app:app``.
"""

from __future__ import annotations

import os
import sys

from flask import Flask, jsonify, request
from flask.typing import ResponseReturnValue

import mcpsync

CONFIGS = [
    # any stdio or HTTP server: ServerConfig(id="files", command="npx", args=(...)), ...
    mcpsync.ServerConfig(id="demo", command=sys.executable, args=("-m", "mcpsync.demo")),
]

app = Flask(__name__)
_manager: mcpsync.Manager | None = None


def start_manager() -> mcpsync.Manager:
    """Start this process's Manager and its servers. In a forked child, closing the copy
    inherited from the parent only drops it: the parent's servers are left alone."""
    global _manager
    if _manager is not None:
        _manager.close()
    _manager = mcpsync.Manager(configs=CONFIGS)
    failed = {sid: err for sid, err in _manager.start_all().items() if err is not None}
    if failed:
        raise RuntimeError(f"MCP servers did not start: {failed}")
    return _manager


def stop_manager() -> None:
    """Stop this process's servers (gunicorn's ``worker_exit`` hook calls it)."""
    if _manager is not None:
        _manager.close()


start_manager()


@app.get("/add")
def add() -> ResponseReturnValue:
    assert _manager is not None
    a, b = float(request.args.get("a", 0)), float(request.args.get("b", 0))
    result = _manager.call_tool("demo", "add", {"a": a, "b": b})   # blocks this thread only
    return jsonify(sum=(result.structured or {})["sum"], pid=os.getpid())


@app.errorhandler(mcpsync.MCPError)
def mcp_failed(exc: mcpsync.MCPError) -> ResponseReturnValue:
    """Any MCP failure (a server that died, a timeout, a refused call) is a 502."""
    return jsonify(error=type(exc).__name__, message=str(exc), pid=os.getpid()), 502


if __name__ == "__main__":
    # threaded=True: each request runs on its own thread; one Manager serves them all
    app.run("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 5000, threaded=True)
