"""A 2025-11-25 MCP server (stdio, JSON lines) whose tool list changes as it is listed.

It offers tool tasks, and its one tool, ``research``, runs only as a task (a ``tools/call``
without ``params.task`` is refused: "requires task augmentation"). Each ``tools/list`` is
answered after two notifications: ``notifications/message`` with the text "hold" (a test's
``on_log`` can hold the client's dispatcher thread there), then
``notifications/tools/list_changed``. So the client reads the list's answer while that
``list_changed``, which arrived before it, is still queued for the dispatcher. The
``research`` task completes at once; ``tasks/result`` gives "researched: <topic>".
"""

from __future__ import annotations

import json
import sys
from typing import Any

VERSION = "2025-11-25"
TOOL = {"name": "research", "inputSchema": {"type": "object"},
        "execution": {"taskSupport": "required"}}
_tasks: dict[str, dict[str, Any]] = {}


def _send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def _task(task_id: str) -> dict[str, Any]:
    return {"taskId": task_id, "status": "completed", "createdAt": "2025-11-25T00:00:00Z",
            "lastUpdatedAt": "2025-11-25T00:00:00Z", "ttl": 60000, "pollInterval": 50}


def handle(method: str, params: dict[str, Any]) -> Any:
    if method == "initialize":
        return {"protocolVersion": VERSION, "serverInfo": {"name": "relisting", "version": "1"},
                "capabilities": {"tools": {"listChanged": True}, "logging": {},
                                 "tasks": {"requests": {"tools": {"call": {}}}}}}
    if method == "tools/list":
        _send({"jsonrpc": "2.0", "method": "notifications/message",
               "params": {"level": "info", "data": "hold"}})
        _send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        return {"tools": [TOOL]}
    if method == "tools/call":
        if "task" not in params:
            raise ValueError(f"tool {params.get('name')!r} requires task augmentation")
        task_id = f"task-{len(_tasks) + 1}"
        _tasks[task_id] = params.get("arguments") or {}
        return {"task": _task(task_id)}
    if method == "tasks/get":
        return _task(params["taskId"])
    if method == "tasks/result":
        topic = _tasks[params["taskId"]].get("topic")
        return {"content": [{"type": "text", "text": f"researched: {topic}"}]}
    if method == "ping":
        return {}
    raise NotImplementedError(method)


def main() -> None:
    for line in sys.stdin:
        msg = json.loads(line)
        if "id" not in msg or "method" not in msg:
            continue
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": msg["id"]}
        try:
            reply["result"] = handle(msg["method"], msg.get("params") or {})
        except ValueError as exc:
            reply["error"] = {"code": -32600, "message": str(exc)}
        except NotImplementedError as exc:
            reply["error"] = {"code": -32601, "message": f"method not found: {exc}"}
        _send(reply)


if __name__ == "__main__":
    main()
