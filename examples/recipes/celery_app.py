"""Celery tasks that call MCP tools: one Manager per worker process, one token file for all.

Run it with a prefork pool (``celery -A celery_app worker --pool=prefork --concurrency=2``).
Each worker process makes its own :class:`mcpsync.Manager` in ``worker_process_init``, after
the fork: a Manager made before the fork belongs to the parent and raises ``UsedAfterFork``
in a child. The OAuth tokens live in one ``mcpauth.FileTokenStore`` file that every worker
opens; its lock makes sure two workers never spend the same refresh token.

The broker is kombu's filesystem transport and the results go to files, so this runs with no
broker server: swap ``broker_url``/``result_backend`` for Redis or RabbitMQ in production.
Settings come from the environment:

- ``MCP_URL``: the MCP server (an OAuth-protected Streamable HTTP endpoint);
- ``MCP_TOKEN_FILE``: the token file (default ``~/.config/mcpauth/tokens.json``), filled
  beforehand by one interactive login (``mcpsync login MCP_URL``);
- ``CELERY_STATE_DIR``: where the queue and the results are kept (default ``celery-state``).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from celery import Celery
from celery.signals import worker_process_init, worker_process_shutdown

import mcpauth
import mcpsync

MCP_URL = os.environ.get("MCP_URL", "https://mcp.example.com/mcp")
TOKEN_FILE = os.environ.get("MCP_TOKEN_FILE") or None
STATE = Path(os.environ.get("CELERY_STATE_DIR", "celery-state")).resolve()
for folder in ("queue", "processed", "results", "control"):
    (STATE / folder).mkdir(parents=True, exist_ok=True)

app = Celery("mcp_recipe")
app.conf.update(
    broker_url="filesystem://",
    broker_transport_options={"data_folder_in": str(STATE / "queue"),
                              "data_folder_out": str(STATE / "queue"),
                              "processed_folder": str(STATE / "processed"),
                              "control_folder": str(STATE / "control")},
    result_backend=f"file://{STATE / 'results'}",
    worker_prefetch_multiplier=1,      # hand tasks out one at a time, so both workers get some
    task_serializer="json", result_serializer="json", accept_content=["json"],
)

_log = logging.getLogger(__name__)
_manager: mcpsync.Manager | None = None
_provider: mcpauth.OAuthProvider | None = None


@worker_process_init.connect
def start_manager(**_: Any) -> None:
    """In each worker process, after the fork: a Manager and a provider of its own."""
    global _manager, _provider
    store = mcpauth.FileTokenStore(TOKEN_FILE)  # the same file in every worker
    _provider = mcpauth.OAuthProvider(MCP_URL, store=store, interactive=False)
    _manager = mcpsync.Manager(configs=[
        mcpsync.ServerConfig(id="tools", url=MCP_URL, auth=_provider)])
    failed = {sid: err for sid, err in _manager.start_all().items() if err is not None}
    if failed:
        _log.error("MCP servers that did not start in worker %d: %s", os.getpid(), failed)


@worker_process_shutdown.connect
def stop_manager(**_: Any) -> None:
    """Stop this worker's servers and close its provider's HTTP session."""
    if _manager is not None:
        _manager.close()
    if _provider is not None:
        _provider.close()


@app.task
def add(a: float, b: float) -> dict[str, Any]:
    """Call the server's ``add`` tool; the worker's pid comes back too, to see who ran it."""
    assert _manager is not None, "the worker_process_init handler did not run"
    result = _manager.call_tool("tools", "add", {"a": a, "b": b})
    return {"sum": (result.structured or {})["sum"], "pid": os.getpid()}
