"""The 2026-07-28 Tasks extension (SEP-2663) from the client side, against
``peers/tasks_server.py`` run as a real process over stdio and over Streamable HTTP.

No server outside this repository serves the extension yet; this peer follows its text
(``resultType: "task"`` only for a request that declared the extension, ``tasks/get`` with
the result or error inline, ``tasks/update`` for input, ``tasks/cancel``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import mcpsync

PEER = Path(__file__).with_name("peers") / "tasks_server.py"


def _elicit(request: Any) -> dict[str, Any]:
    return {"action": "accept", "content": {"colour": "blue"}}


@pytest.fixture(params=["stdio", "http"])
def peer(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[mcpsync.Client, Path]]:
    log = tmp_path / "requests.jsonl"
    env = {"TASKS_LOG": str(log)}
    if request.param == "stdio":
        with mcpsync.connect([sys.executable, str(PEER), "stdio"], env=env,
                             elicitation=_elicit) as client:
            yield client, log
        return
    proc = subprocess.Popen([sys.executable, str(PEER), "http"], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, **env})
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        with mcpsync.connect(f"http://127.0.0.1:{port}/mcp", elicitation=_elicit) as client:
            yield client, log
    finally:
        proc.kill()
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


def _log(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_a_server_directed_task_returns_the_final_result(peer: tuple[mcpsync.Client, Path]
                                                         ) -> None:
    client, log = peer
    assert client.protocol_version == "2026-07-28"
    seen: list[str] = []
    result = client.call_tool("slow", {}, progress=lambda p, t, m: seen.append(m))
    assert result.text == "done"
    assert seen == ["working", "working: step 1", "working: step 2", "completed: step 3"]
    calls = [e for e in _log(log) if e["method"] == "tools/call"]
    assert calls[-1]["declared"] is True
    gets = [e for e in _log(log) if e["method"] == "tasks/get"]
    assert len(gets) == 3
    if calls[-1]["mcpName"] is not None:     # over HTTP: Mcp-Name is the task id
        assert all(e["mcpName"] == e["taskId"] for e in gets)
    # Each tasks/* request stands alone and declares the extension too (a server must refuse
    # tasks/get without it: -32021); tasks=False leaves it off a call.
    assert all(e["declared"] for e in gets)
    assert client.call_tool("slow", {}, tasks=False).text == "plain slow"
    assert _log(log)[-1]["declared"] is False


def test_mcp_name_is_the_task_id_over_http(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    proc = subprocess.Popen([sys.executable, str(PEER), "http"], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "TASKS_LOG": str(log)})
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        with mcpsync.connect(f"http://127.0.0.1:{port}/mcp") as client:
            client.call_tool("slow", {"polls": 2})
            future = client.submit_tool("slow", {"polls": 1000})
            deadline = time.monotonic() + 10
            while future.task is None and time.monotonic() < deadline:
                time.sleep(0.01)
            assert future.cancel()
    finally:
        proc.kill()
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
    tasks = [e for e in _log(log) if e["method"].startswith("tasks/")]
    assert {e["method"] for e in tasks} == {"tasks/get", "tasks/cancel"}
    assert all(e["mcpName"] == e["taskId"] and e["taskId"] for e in tasks)
    assert [e["mcpName"] for e in _log(log) if e["method"] == "tools/call"] == ["slow", "slow"]


def test_input_requests_are_answered_once_with_tasks_update(
        peer: tuple[mcpsync.Client, Path]) -> None:
    client, log = peer
    result = client.call_tool("ask", {})
    assert json.loads(result.text) == {"action": "accept", "content": {"colour": "blue"}}
    assert [e["method"] for e in _log(log)].count("tasks/update") == 1


def test_a_failed_task_raises_its_json_rpc_error(peer: tuple[mcpsync.Client, Path]) -> None:
    client, _ = peer
    with pytest.raises(mcpsync.RemoteError, match="the tool blew up") as info:
        client.call_tool("boom", {})
    assert info.value.code == -32603


def test_task_timeout_and_cancel_send_tasks_cancel(peer: tuple[mcpsync.Client, Path]) -> None:
    client, log = peer
    with pytest.raises(mcpsync.RequestTimeout, match="task_timeout"):
        client.call_tool("slow", {"polls": 1000}, task_timeout=0.3)
    cancels = [e for e in _log(log) if e["method"] == "tasks/cancel"]
    assert len(cancels) == 1
    # The server now reports that task cancelled, and resume_task says so.
    with pytest.raises(mcpsync.Cancelled, match="cancelled on the server"):
        client.resume_task(cancels[0]["taskId"])


def test_resume_task_follows_a_task_by_id(peer: tuple[mcpsync.Client, Path]) -> None:
    client, _ = peer
    future = client.submit_tool("slow", {"polls": 5})
    deadline = time.monotonic() + 10
    while future.task is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert future.task is not None
    assert client.resume_task(future.task.task_id).text == "done"
    assert future.result(10).text == "done"
