"""A legacy JSON-lines MCP server that reports on stderr what reached it (a test peer).

Client tests need to see the wire from the server's side: that a Ctrl-C or a cancelled
future really wrote ``notifications/cancelled``, that many calls are in flight at once before
the server dies. Every request and notification is written to stderr as one line
(``got tools/call hang 7``, ``cancelled 7 <reason>``), which the client keeps in its stderr
ring (``client.stderr_tail()``).

Tools: ``echo`` (answers ``arguments.text``), ``hang`` (never answers), ``die`` (writes 30
numbered stderr lines, then exits with code 3), ``progress`` (``n`` progress notifications
for the call's token, then the answer).
"""

from __future__ import annotations

import json
import sys
from typing import Any


def send(msg: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def note(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def call(rid: Any, params: dict[str, Any]) -> None:
    name = params.get("name")
    args = params.get("arguments") or {}
    note(f"got tools/call {name} {rid}")
    if name == "echo":
        send({"jsonrpc": "2.0", "id": rid,
              "result": {"content": [{"type": "text", "text": str(args.get("text"))}]}})
    elif name == "die":
        for i in range(30):
            note(f"dying line {i}")
        sys.exit(3)
    elif name == "progress":
        token = (params.get("_meta") or {}).get("progressToken")
        n = int(args.get("n", 5))
        for i in range(1, n + 1):
            send({"jsonrpc": "2.0", "method": "notifications/progress",
                  "params": {"progressToken": token, "progress": i, "total": n}})
        send({"jsonrpc": "2.0", "id": rid,
              "result": {"content": [{"type": "text", "text": "done"}]}})
    # "hang" (and anything else): no answer


def main() -> None:
    for line in sys.stdin:
        msg = json.loads(line)
        method = msg.get("method")
        rid = msg.get("id")
        params = msg.get("params") or {}
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": rid, "result": {
                "protocolVersion": params.get("protocolVersion"),
                "serverInfo": {"name": "wire", "version": "1"},
                "capabilities": {"tools": {}}}})
        elif method == "notifications/cancelled":
            note(f"cancelled {params.get('requestId')} {params.get('reason')}")
        elif method == "tools/call":
            call(rid, params)
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": rid, "result": {"tools": [
                {"name": n, "inputSchema": {"type": "object"}}
                for n in ("echo", "hang", "die", "progress")]}})
        elif rid is not None and method is not None:
            note(f"got {method} {rid}")
            send({"jsonrpc": "2.0", "id": rid,
                  "error": {"code": -32601, "message": f"no {method}"}})
        elif method is not None:
            note(f"got {method}")


if __name__ == "__main__":
    main()
