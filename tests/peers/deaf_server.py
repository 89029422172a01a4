"""A legacy MCP server that stops reading its stdin on request (a test peer).

``tools/call`` of ``deaf`` with ``{"seconds": S}`` is answered at once, then the server reads
nothing for S seconds (forever when S < 0), as a synchronous server inside a long call does.
Any other tool answers with the size of its request line. Each request line it reads is
logged to ``$DEAF_LOG`` (method, id, byte size, whether it parsed) when set, so a test can
check that a frame arrived whole and what followed it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

_LOG = os.environ.get("DEAF_LOG")


def send(msg: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def log(entry: dict[str, Any]) -> None:
    if _LOG:
        with open(_LOG, "a") as f:
            f.write(json.dumps(entry) + "\n")


def main() -> None:
    stdin = sys.stdin.buffer
    while True:
        line = stdin.readline()
        if not line:
            return
        try:
            msg = json.loads(line)
        except ValueError:
            log({"garbage": len(line)})
            continue
        method, rid = msg.get("method"), msg.get("id")
        log({"method": method, "id": rid, "size": len(line),
             "params": msg.get("params") if method == "notifications/cancelled" else None})
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": rid, "result": {
                "protocolVersion": msg["params"]["protocolVersion"],
                "capabilities": {"tools": {}}, "serverInfo": {"name": "deaf", "version": "1"}}})
        elif method == "tools/call":
            params = msg["params"]
            text = str(len(line))
            send({"jsonrpc": "2.0", "id": rid,
                  "result": {"content": [{"type": "text", "text": text}]}})
            if params["name"] == "deaf":
                seconds = float(params["arguments"]["seconds"])
                time.sleep(seconds if seconds >= 0 else 3600)
        elif rid is not None and method is not None:
            send({"jsonrpc": "2.0", "id": rid, "result": {}})


if __name__ == "__main__":
    main()
