"""Tools served as tasks (2026-07-28 tasks extension): over real pipes and over real HTTP.

What the conformance suite cannot check is here: ``notifications/tasks`` on a
``subscriptions/listen`` stream (the suite's scenario is a placeholder), expiry after the TTL,
the store's bounds, threads joined when the connection ends, and that legacy clients and
clients without the extension get plain results.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from mcpsync.protocol import META_CLIENT_CAPABILITIES
from mcpsync.server import Context, Server, _tasks as tasks_module

from .helpers import MODERN, PipeServer, modern_meta

TASKS = {"extensions": {"io.modelcontextprotocol/tasks": {}}}
FORM = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def build() -> Server:
    server = Server("tasks-test", "1")
    release = threading.Event()
    server.release = release   # type: ignore[attr-defined]

    @server.tool(task="optional")
    def wait_for_release(ctx: Context, label: str = "") -> str:
        """Runs until released or cancelled."""
        while not release.wait(0.02):
            if ctx.cancelled.is_set():
                return "cancelled"
        return f"released {label}"

    @server.tool(task="optional")
    def ask_name(ctx: Context) -> str:
        answer = ctx.elicit("Name?", FORM, key="who")
        return f"hi {(answer.content or {}).get('name')}"

    @server.tool(task="required")
    def must_be_task() -> str:
        return "done"

    @server.tool()
    def plain() -> str:
        return "plain"

    return server


def meta(caps: dict[str, Any] | None = None) -> dict[str, Any]:
    return modern_meta(**{META_CLIENT_CAPABILITIES: {**TASKS, "elicitation": {}}
                          if caps is None else caps})


@pytest.fixture
def pipe() -> Iterator[PipeServer]:
    with PipeServer(build()) as p:
        yield p


def _get(p: PipeServer, rid: Any, task_id: str) -> dict[str, Any]:
    reply = p.request(rid, "tasks/get", {"taskId": task_id, "_meta": meta()})
    assert "result" in reply, reply
    return dict(reply["result"])


def _until(p: PipeServer, task_id: str, status: str) -> dict[str, Any]:
    deadline = time.monotonic() + 5
    n = 0
    while time.monotonic() < deadline:
        n += 1
        got = _get(p, f"poll-{task_id}-{n}", task_id)
        if got["status"] == status:
            return got
        time.sleep(0.02)
    raise AssertionError(f"task {task_id} never reached {status}: {got}")


def test_a_task_tool_answers_a_task_and_its_result_is_inlined(pipe: PipeServer) -> None:
    created = pipe.call(1, "wait_for_release", {"label": "x"}, meta=meta())["result"]
    assert created["resultType"] == "task" and created["status"] == "working"
    assert isinstance(created["ttlMs"], int) and created["ttlMs"] > 0
    assert created["createdAt"].endswith("Z") and "result" not in created
    assert _get(pipe, 2, created["taskId"])["status"] == "working"
    pipe.server.release.set()   # type: ignore[attr-defined]
    done = _until(pipe, created["taskId"], "completed")
    assert done["result"]["content"][0]["text"] == "released x"
    assert done["resultType"] == "complete"


def test_without_the_extension_the_call_is_plain_and_required_is_refused(
        pipe: PipeServer) -> None:
    pipe.server.release.set()   # type: ignore[attr-defined]
    reply = pipe.call(1, "wait_for_release", {}, meta=modern_meta())["result"]
    assert reply["resultType"] == "complete" and "taskId" not in reply
    refused = pipe.call(2, "must_be_task", {}, meta=modern_meta())["error"]
    assert refused["code"] == -32021
    assert refused["data"] == {"requiredCapabilities": TASKS}
    for method in ("tasks/get", "tasks/cancel"):
        err = pipe.request(method, method, {"taskId": "x", "_meta": modern_meta()})["error"]
        assert err["code"] == -32021, method
    unknown = pipe.request(3, "tasks/get", {"taskId": "nope", "_meta": meta()})["error"]
    assert unknown["code"] == -32602
    assert pipe.request(4, "tasks/list", {"_meta": meta()})["error"]["code"] == -32601


def test_a_legacy_client_gets_plain_results(pipe: PipeServer) -> None:
    pipe.initialize()
    pipe.server.release.set()   # type: ignore[attr-defined]
    reply = pipe.call(1, "wait_for_release", {"label": "old"})["result"]
    assert reply["content"][0]["text"] == "released old" and "taskId" not in reply
    assert pipe.call(2, "must_be_task", {})["error"]["code"] == -32021
    assert pipe.request(3, "tasks/get", {"taskId": "x"})["error"]["code"] == -32601


def test_an_ask_inside_a_task_waits_for_tasks_update(pipe: PipeServer) -> None:
    task_id = pipe.call(1, "ask_name", {}, meta=meta())["result"]["taskId"]
    waiting = _until(pipe, task_id, "input_required")
    assert waiting["inputRequests"]["who"]["method"] == "elicitation/create"
    ack = pipe.request(2, "tasks/update", {"taskId": task_id, "_meta": meta(),
                                           "inputResponses": {"who": {
                                               "action": "accept",
                                               "content": {"name": "Ada"}}}})["result"]
    assert set(ack) == {"resultType", "_meta"}
    assert _until(pipe, task_id, "completed")["result"]["content"][0]["text"] == "hi Ada"


def test_cancel_settles_the_task_cancelled_and_is_idempotent(pipe: PipeServer) -> None:
    task_id = pipe.call(1, "wait_for_release", {}, meta=meta())["result"]["taskId"]
    assert pipe.request(2, "tasks/cancel", {"taskId": task_id, "_meta": meta()})["result"][
        "resultType"] == "complete"
    assert _get(pipe, 3, task_id)["status"] == "cancelled"
    again = pipe.request(4, "tasks/cancel", {"taskId": task_id, "_meta": meta()})
    assert again["result"]["resultType"] == "complete"
    time.sleep(0.1)   # the handler notices and returns: what it returned is dropped
    assert _get(pipe, 5, task_id)["status"] == "cancelled"


def test_status_notifications_reach_a_listen_that_asked_for_the_task(
        pipe: PipeServer) -> None:
    task_id = pipe.call(1, "ask_name", {}, meta=meta())["result"]["taskId"]
    _until(pipe, task_id, "input_required")
    pipe.send({"jsonrpc": "2.0", "id": "listen", "method": "subscriptions/listen",
               "params": {"_meta": meta(), "notifications": {"taskIds": [task_id, "gone"]}}})
    ack = pipe.notification("notifications/subscriptions/acknowledged")
    assert ack["params"]["notifications"] == {"taskIds": [task_id]}
    pipe.send({"jsonrpc": "2.0", "id": 2, "method": "tasks/update",
               "params": {"taskId": task_id, "_meta": meta(), "inputResponses": {
                   "who": {"action": "accept", "content": {"name": "Lin"}}}}})
    seen: list[dict[str, Any]] = []
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not any(
            m.get("params", {}).get("status") == "completed" for m in seen):
        message = pipe.recv(1)
        if isinstance(message, dict) and message.get("method") == "notifications/tasks":
            seen.append(message)
    final = seen[-1]["params"]
    assert final["taskId"] == task_id and final["status"] == "completed"
    assert final["result"]["content"][0]["text"] == "hi Lin"
    assert final["_meta"]["io.modelcontextprotocol/subscriptionId"] == "listen"
    refused = pipe.request(3, "subscriptions/listen", {
        "_meta": modern_meta(), "notifications": {"taskIds": [task_id]}})["error"]
    assert refused["code"] == -32021


def test_finished_tasks_are_forgotten_after_their_ttl(pipe: PipeServer,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tasks_module, "DEFAULT_TTL_MS", 200)
    pipe.server.release.set()   # type: ignore[attr-defined]
    task_id = pipe.call(1, "wait_for_release", {}, meta=meta())["result"]["taskId"]
    assert _until(pipe, task_id, "completed")["ttlMs"] == 200
    time.sleep(0.3)
    assert pipe.request(2, "tasks/get", {"taskId": task_id, "_meta": meta()})["error"][
        "code"] == -32602


def test_the_store_is_bounded_and_its_threads_end_with_the_connection(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tasks_module, "MAX_RUNNING", 2)
    with PipeServer(build()) as pipe:
        for n in (1, 2):
            assert pipe.call(n, "wait_for_release", {}, meta=meta())["result"]["taskId"]
        assert sum(t.name.startswith("mcpsync-task-") for t in threading.enumerate()) >= 2
        refused = pipe.call(3, "wait_for_release", {}, meta=meta())["error"]
        assert refused["code"] == -32603 and "tasks" in refused["message"]
    assert not [t for t in threading.enumerate() if t.name.startswith("mcpsync-task-")]


def test_a_task_nobody_answers_fails_after_its_ttl_and_frees_its_slot(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tasks_module, "MAX_RUNNING", 1)
    monkeypatch.setattr(tasks_module, "DEFAULT_TTL_MS", 300)
    with PipeServer(build()) as pipe:
        task_id = pipe.call(1, "ask_name", {}, meta=meta())["result"]["taskId"]
        assert _until(pipe, task_id, "input_required")["status"] == "input_required"
        failed = _until(pipe, task_id, "failed")     # past its TTL: failed, its thread ends
        assert "ttlMs" in failed["error"]["message"]
        deadline = time.monotonic() + 5
        while any(t.name.startswith("mcpsync-task-") for t in threading.enumerate()):
            assert time.monotonic() < deadline, "the abandoned task's thread did not end"
            time.sleep(0.02)
        pipe.server.release.set()   # type: ignore[attr-defined]
        again = pipe.call(2, "wait_for_release", {}, meta=meta())["result"]
        assert _until(pipe, again["taskId"], "completed")


def test_a_cancelled_handler_that_goes_on_still_counts_against_the_bound(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tasks_module, "MAX_RUNNING", 1)
    gate = threading.Event()
    server = Server("stubborn", "1")

    @server.tool(task="optional")
    def stubborn() -> str:
        gate.wait(10)            # ignores its cancellation
        return "done"

    with PipeServer(server) as pipe:
        task_id = pipe.call(1, "stubborn", {}, meta=meta())["result"]["taskId"]
        assert "result" in pipe.request(2, "tasks/cancel", {"taskId": task_id, "_meta": meta()})
        refused = pipe.call(3, "stubborn", {}, meta=meta())["error"]
        assert refused["code"] == -32603 and "already runs 1" in refused["message"]
        gate.set()
    assert not [t for t in threading.enumerate() if t.name.startswith("mcpsync-task-")]


def test_a_full_store_of_finished_tasks_makes_room(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tasks_module, "MAX_KEPT", 2)
    with PipeServer(build()) as pipe:
        pipe.server.release.set()   # type: ignore[attr-defined]
        ids = []
        for n in range(1, 5):
            task_id = pipe.call(n, "wait_for_release", {}, meta=meta())["result"]["taskId"]
            _until(pipe, task_id, "completed")
            ids.append(task_id)
        # The oldest finished were forgotten to make room; the newest is still there.
        assert _get(pipe, 10, ids[-1])["status"] == "completed"
        assert pipe.request(11, "tasks/get", {"taskId": ids[0], "_meta": meta()})["error"][
            "code"] == -32602


def test_over_http_mcp_name_must_repeat_the_task_id() -> None:
    server = build()
    stop, ready = threading.Event(), threading.Event()
    urls: list[str] = []

    def on_ready(url: str) -> None:
        urls.append(url)
        ready.set()

    thread = threading.Thread(target=server.serve_http, name="test-serve-http", daemon=True,
                              kwargs={"host": "127.0.0.1", "port": 0, "stop": stop,
                                      "ready": on_ready})
    thread.start()
    assert ready.wait(10)
    port = int(urls[0].split(":")[2].split("/")[0])

    def post(method: str, params: dict[str, Any], name: str | None) -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        headers = {"Content-Type": "application/json",
                   "Accept": "application/json, text/event-stream",
                   "MCP-Protocol-Version": MODERN, "Mcp-Method": method}
        if name is not None:
            headers["Mcp-Name"] = name
        body = {"jsonrpc": "2.0", "id": 1, "method": method,
                "params": {**params, "_meta": meta()}}
        try:
            conn.request("POST", "/mcp", json.dumps(body), headers)
            response = conn.getresponse()
            return response.status, json.loads(response.read())
        finally:
            conn.close()

    try:
        status, created = post("tools/call", {"name": "wait_for_release"}, "wait_for_release")
        task_id = created["result"]["taskId"]
        assert post("tasks/get", {"taskId": task_id}, task_id)[1]["result"]["taskId"] == task_id
        status, wrong = post("tasks/get", {"taskId": task_id}, "another")
        assert status == 400 and wrong["error"]["code"] == -32020
        status, missing = post("tasks/cancel", {"taskId": task_id}, None)
        assert status == 400 and missing["error"]["code"] == -32020
        assert post("tasks/cancel", {"taskId": task_id}, task_id)[1]["result"] is not None
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_the_docs_example_runs_as_a_task_over_stdio(tmp_path: Any) -> None:
    """The first example of "Serving tasks" (docs/tasks.md), run as written, as a task."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    page = (Path(__file__).parents[2] / "docs" / "tasks.md").read_text()
    text = page.split("## Serving tasks", 1)[1]
    match = re.search(r"^```python\n(.*?)^```", text, re.DOTALL | re.MULTILINE)
    assert match is not None
    script = tmp_path / "tasks_server.py"
    script.write_text(match.group(1))
    proc = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None

    def ask(rid: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method,
                                     "params": {**params, "_meta": meta()}}).encode() + b"\n")
        proc.stdin.flush()
        while True:
            reply = json.loads(proc.stdout.readline())
            if reply.get("id") == rid:
                return dict(reply["result"])

    try:
        task_id = ask(1, "tools/call", {"name": "build_report", "arguments": {"pages": 2}})[
            "taskId"]
        rid, got = 2, {"status": "working"}
        while got["status"] == "working":
            rid += 1
            got = ask(rid, "tasks/get", {"taskId": task_id})
        assert got["status"] == "input_required" and "format" in got["inputRequests"]
        ask(100, "tasks/update", {"taskId": task_id, "inputResponses": {"format": {
            "action": "accept", "content": {"format": "pdf"}}}})
        while got["status"] != "completed":
            rid += 1
            got = ask(rid, "tasks/get", {"taskId": task_id})
        assert got["result"]["content"][0]["text"] == "2 pages as pdf"
    finally:
        proc.stdin.close()
        assert proc.wait(10) == 0
        proc.stdout.close()
        assert proc.stderr is not None
        proc.stderr.close()
