"""2025-11-25 tasks against ``@modelcontextprotocol/server-everything``, a server we did not
write: its ``simulate-research-query`` runs only as a task (four stages of about a second).

Over stdio and Streamable HTTP: ``call_tool`` follows the task to its report with the status
on the progress callback; a ``task_timeout`` and ``future.cancel()`` send ``tasks/cancel``
(the server's own ``tasks/list`` shows the task cancelled); ``resume_task`` picks a task up
by id; Ctrl-C in a real subprocess cancels the task too.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from http_peers.everything import ENTRY, NODE, EverythingServer

import mcpsync

TOOL = "simulate-research-query"


@pytest.fixture(autouse=True)
def _installed() -> None:
    if not (NODE.exists() and ENTRY.exists()):  # pragma: no cover - environment
        why = f"server-everything is not installed at {ENTRY} (run .ci/install-conformance.sh)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(why)
        pytest.skip(why)


@pytest.fixture(params=["stdio", "http"])
def client(request: pytest.FixtureRequest) -> Iterator[mcpsync.Client]:
    if request.param == "stdio":
        with mcpsync.connect([str(NODE), str(ENTRY), "stdio"]) as c:
            yield c
        return
    server: EverythingServer = request.getfixturevalue("everything_server")
    with mcpsync.connect(server.url) as c:
        yield c


def _statuses(client: mcpsync.Client) -> dict[str, str]:
    listed = client.submit("tasks/list").result(10)
    return {t["taskId"]: t["status"] for t in listed["tasks"]}


def test_a_task_tool_just_works_with_status_as_progress(client: mcpsync.Client) -> None:
    seen: list[Any] = []
    started = time.monotonic()
    result = client.call_tool(TOOL, {"topic": "tides"},
                              progress=lambda p, total, message: seen.append((p, message)))
    took = time.monotonic() - started
    assert "# Research Report: tides" in result.text
    assert not result.is_error
    assert took > 3.0          # four stages of a second each: it really ran as a task
    messages = [m for _, m in seen]
    assert messages[0].startswith("working")
    # The stages in between are seen by polling at the server's interval: on a loaded
    # machine a poll can fall after a one-second stage, so which ones show is not fixed.
    assert all(m.startswith("working") for m in messages[:-1])
    assert messages[-1].startswith("completed")
    assert len(messages) == len(set(messages))           # one report per change
    assert [p for p, _ in seen] == sorted(p for p, _ in seen)
    tool = next(t for t in client.list_tools() if t.name == TOOL)
    assert tool.task_support == "required"
    assert next(t for t in client.list_tools() if t.name == "echo").task_support == "forbidden"


@pytest.fixture(params=["stdio", "http"])
def asking_client(request: pytest.FixtureRequest) -> Iterator[tuple[mcpsync.Client, list[Any]]]:
    """A client whose elicitation callback picks "historical" and records what it was asked."""
    asked: list[Any] = []

    def elicit(req: Any) -> dict[str, Any]:
        asked.append(req.message)
        return {"action": "accept", "content": {"interpretation": "historical"}}

    if request.param == "stdio":
        target: Any = [str(NODE), str(ENTRY), "stdio"]
    else:
        target = request.getfixturevalue("everything_server").url
    with mcpsync.connect(target, elicitation=elicit) as c:
        yield c, asked


def test_input_a_task_asks_for_goes_to_the_elicitation_callback(
        asking_client: tuple[mcpsync.Client, list[Any]]) -> None:
    client, asked = asking_client
    seen: list[str] = []
    result = client.call_tool(TOOL, {"topic": "tides", "ambiguous": True},
                              progress=lambda p, total, message: seen.append(message))
    assert "**Clarification**: historical" in result.text
    assert len(asked) == 1 and "multiple interpretations" in asked[0]
    assert any(m.startswith("input_required") for m in seen)


def test_task_timeout_cancels_the_task(client: mcpsync.Client) -> None:
    before = set(_statuses(client))
    with pytest.raises(mcpsync.RequestTimeout, match=r"task_timeout=1\.5"):
        client.call_tool(TOOL, {"topic": "slow"}, task_timeout=1.5)
    (new,) = set(_statuses(client)) - before
    assert _statuses(client)[new] == "cancelled"


def test_future_task_handle_cancel_and_resume(client: mcpsync.Client) -> None:
    future = client.submit_tool(TOOL, {"topic": "kept"})
    deadline = time.monotonic() + 10
    while future.task is None and time.monotonic() < deadline:
        time.sleep(0.02)
    handle = future.task
    assert handle is not None and handle.status == "working"
    # The same task picked up by id (as a restarted program would) gives the same report.
    resumed = client.resume_task(handle.task_id)
    assert "# Research Report: kept" in resumed.text
    assert "# Research Report: kept" in future.result(10).text

    doomed = client.submit_tool(TOOL, {"topic": "doomed"})
    while doomed.task is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert doomed.cancel()
    with pytest.raises(mcpsync.Cancelled):
        doomed.result(10)
    task_id = doomed.task.task_id
    wait_until = time.monotonic() + 5
    while _statuses(client)[task_id] != "cancelled" and time.monotonic() < wait_until:
        time.sleep(0.05)
    assert _statuses(client)[task_id] == "cancelled"


_CHILD = """
import json, sys
import mcpsync
with mcpsync.connect([sys.argv[1], sys.argv[2], "stdio"]) as c:
    try:
        c.call_tool("simulate-research-query", {"topic": "interrupted"},
                    progress=lambda p, t, m: print("status", m, flush=True))
    except KeyboardInterrupt:
        listed = c.submit("tasks/list").result(10)
        print("statuses", json.dumps([t["status"] for t in listed["tasks"]]), flush=True)
"""


def test_ctrl_c_cancels_the_task() -> None:
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(NODE), str(ENTRY)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("status working"), line + proc.stderr.read()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    statuses = json.loads(out.split("statuses", 1)[1])
    assert statuses == ["cancelled"], out + err


def test_the_cli_timeout_bounds_the_whole_task(tmp_path: Path) -> None:
    """``mcpsync --timeout 2 call`` on a task of about four seconds: each request is fast, so
    only the bound on the whole task can stop it, and it does (exit 5, a timeout)."""
    server = f"{shlex.quote(str(NODE))} {shlex.quote(str(ENTRY))} stdio"
    env = {k: v for k, v in os.environ.items() if k != "MCPSYNC_CONFIG"}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")
    started = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "mcpsync", "--timeout", "2", "call", server,
                          TOOL, "topic=cli"], capture_output=True, text=True, timeout=60,
                         cwd=tmp_path, env=env)
    took = time.monotonic() - started
    assert res.returncode == 5, (res.stdout, res.stderr)   # the exit code of a timeout
    assert "task_timeout=2.0" in res.stderr and "tasks/cancel was sent" in res.stderr
    assert took < 3.9 + 2.0   # well before the task's own four seconds plus start-up
    done = subprocess.run([sys.executable, "-m", "mcpsync", "call", server, TOOL,
                           "topic=cli"], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert "# Research Report: cli" in done.stdout
