"""A dependency-free WSGI echo answering the benchmark's requests with no MCP code at all.

Served by gunicorn, it measures what gunicorn's own request handling costs, so that the
MCP app's share of a gunicorn figure can be told apart (docs/performance.md)::

    MCPSYNC_SERVER="gunicorn -k gthread -w 1 --threads 16 -b 127.0.0.1:{port} \
        --chdir benchmarks wsgi_floor:application" .venv/bin/python benchmarks/http_server_tree.py
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

_INIT = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
         "serverInfo": {"name": "wsgi-floor", "version": "1"}}


def application(environ: dict[str, Any],
                start_response: Callable[..., Any]) -> Iterable[bytes]:
    length = int(environ.get("CONTENT_LENGTH") or 0)
    message = json.loads(environ["wsgi.input"].read(length))
    if message.get("id") is None:
        start_response("202 Accepted", [("Content-Length", "0")])
        return []
    headers = [("Content-Type", "application/json")]
    if message["method"] == "initialize":
        result: dict[str, Any] = _INIT
        headers.append(("Mcp-Session-Id", "floor"))
    else:
        result = {"content": [{"type": "text", "text": message["params"]["arguments"]["text"]}]}
    body = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}).encode()
    headers.append(("Content-Length", str(len(body))))
    start_response("200 OK", headers)
    return [body]
