"""A 2026-07-28 MCP server speaking the Tasks extension (``io.modelcontextprotocol/tasks``).

No server outside this repository serves that extension yet, so this small one stands in: it
answers ``tools/call`` with ``resultType: "task"`` when (and only when) the request declared
the extension in its client capabilities, and serves ``tasks/get``, ``tasks/update`` and
``tasks/cancel``. ``argv[1]`` is ``stdio`` (JSON lines) or ``http`` (Streamable HTTP, JSON
answers, on a free loopback port printed as the first line of stdout). Every request's
method, ``Mcp-Name`` header (HTTP) and whether it declared the extension go, one JSON object a
line, to ``$TASKS_LOG`` when set.

Tools: ``slow`` completes after ``polls`` ``tasks/get`` (default 3) with the text "done";
``ask`` goes ``input_required`` with an elicitation and completes with the answer;
``boom`` fails with JSON-RPC error -32603; ``plain`` never makes a task.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODERN = "2026-07-28"
EXT = "io.modelcontextprotocol/tasks"
CAPS = "io.modelcontextprotocol/clientCapabilities"
INFO = {"name": "tasks-peer", "version": "1.0"}
TOOLS = [{"name": n, "inputSchema": {"type": "object"}} for n in ("slow", "ask", "boom", "plain")]
_lock = threading.Lock()
_tasks: dict[str, dict[str, Any]] = {}
_ids = iter(range(1, 10**6))


def _log(entry: dict[str, Any]) -> None:
    if log := os.environ.get("TASKS_LOG"):
        with _lock, open(log, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")


def _task_view(task: dict[str, Any]) -> dict[str, Any]:
    view = {k: task[k] for k in ("taskId", "status", "createdAt", "lastUpdatedAt", "ttlMs",
                                 "pollIntervalMs")}
    for key in ("statusMessage", "result", "error", "inputRequests"):
        if key in task:
            view[key] = task[key]
    return view


def _text(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": False}


def _advance(task: dict[str, Any]) -> None:
    """One poll's worth of progress."""
    if task["status"] != "working":
        return
    task["polls"] += 1
    task["statusMessage"] = f"step {task['polls']}"
    if task["tool"] == "boom":
        task["status"] = "failed"
        task["error"] = {"code": -32603, "message": "the tool blew up"}
    elif task["tool"] == "ask" and not task.get("answered"):
        task["status"] = "input_required"
        task["inputRequests"] = {"q1": {"method": "elicitation/create", "params": {
            "message": "colour?", "requestedSchema": {"type": "object", "properties": {
                "colour": {"type": "string"}}}}}}
    elif task["polls"] >= task["need"]:
        task["status"] = "completed"
        answer = task.get("answered")
        task["result"] = {"resultType": "complete",
                          **_text("done" if answer is None else json.dumps(answer))}


def handle(method: str, params: dict[str, Any]) -> Any:
    if method == "server/discover":
        return {"resultType": "complete", "supportedVersions": [MODERN],
                "capabilities": {"tools": {}, "extensions": {EXT: {}}},
                "ttlMs": 0, "cacheScope": "public",
                "_meta": {"io.modelcontextprotocol/serverInfo": INFO}}
    if method == "tools/list":
        return {"resultType": "complete", "tools": TOOLS, "ttlMs": 0, "cacheScope": "public"}
    if method == "tools/call":
        declared = EXT in (((params.get("_meta") or {}).get(CAPS) or {}).get("extensions") or {})
        name = params.get("name")
        if not declared or name == "plain":
            return {"resultType": "complete", **_text(f"plain {name}")}
        task_id = f"task-{next(_ids)}"
        task = {"taskId": task_id, "status": "working", "createdAt": "2026-07-28T00:00:00Z",
                "lastUpdatedAt": "2026-07-28T00:00:00Z", "ttlMs": 60000,
                "pollIntervalMs": 50, "tool": name, "polls": 0,
                "need": int((params.get("arguments") or {}).get("polls", 3))}
        with _lock:
            _tasks[task_id] = task
        return {"resultType": "task", **_task_view(task)}
    if method in ("tasks/get", "tasks/update", "tasks/cancel"):
        with _lock:
            task = _tasks.get(params.get("taskId"))  # type: ignore[arg-type]
            if task is None:
                raise LookupError(params.get("taskId"))
            if method == "tasks/get":
                _advance(task)
                return {"resultType": "complete", **_task_view(task)}
            if method == "tasks/update":
                responses = params.get("inputResponses") or {}
                if "q1" in responses:
                    task["answered"] = responses["q1"]
                    task.pop("inputRequests", None)
                    task["status"] = "working"
                return {"resultType": "complete"}
            if task["status"] in ("working", "input_required"):
                task["status"] = "cancelled"
                task["statusMessage"] = "cancelled by the client"
            return {"resultType": "complete"}
    if method == "ping":
        return {"resultType": "complete"}
    raise NotImplementedError(method)


def answer(msg: dict[str, Any], name_header: str | None) -> dict[str, Any] | None:
    if "id" not in msg or "method" not in msg:
        return None
    params = msg.get("params") or {}
    declared = EXT in (((params.get("_meta") or {}).get(CAPS) or {}).get("extensions") or {})
    _log({"method": msg["method"], "mcpName": name_header, "declared": declared,
          "taskId": params.get("taskId")})
    reply: dict[str, Any] = {"jsonrpc": "2.0", "id": msg["id"]}
    try:
        reply["result"] = handle(msg["method"], params)
    except LookupError as exc:
        reply["error"] = {"code": -32602, "message": f"unknown task {exc}"}
    except NotImplementedError as exc:
        reply["error"] = {"code": -32601, "message": f"method not found: {exc}"}
    return reply


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:   # quiet: tests read the log
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        reply = answer(json.loads(body), self.headers.get("Mcp-Name"))
        if reply is None:
            self.send_response(202)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self.send_response(405)
        self.send_header("Content-Length", "0")
        self.end_headers()


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "http":
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        print(server.server_address[1], flush=True)
        server.serve_forever()
        return
    for line in sys.stdin:
        reply = answer(json.loads(line), None)
        if reply is not None:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
