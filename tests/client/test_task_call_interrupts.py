"""A Ctrl-C at any point after the server answered a ``tools/call`` with a task sends
``tasks/cancel`` for it, once.

Before, two windows lost the task: on a 2026-07-28 server, a Ctrl-C between
``call_tool`` receiving the ``CreateTaskResult`` and ``Client._task_call``'s ``try`` (as the
answer's ``resultType`` was read, or as ``_task_call`` or ``task_call`` began), and on a
2025-11-25 server one as the task was taken out of the answer (``.get("task")``). The server
then ran a task whose id nobody held. The tests raise a real KeyboardInterrupt at every C
call's return made directly by the task path (a profile hook), and at the entry of its
functions (where a real signal is also handled), against real peers: this repository's
2026-07-28 tasks server and ``@modelcontextprotocol/server-everything`` (2025-11-25).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import pytest
from helpers import interrupt_at_return

import mcpsync
from mcpsync.client import _client, _client_more

TASKS_PEER = Path(__file__).with_name("peers") / "tasks_server.py"
pytestmark = pytest.mark.timeout(120)

# The task path's own functions: the profile hook sees the C calls they make directly.
PATH = {_client.Client.call_tool.__code__, _client.Client._task_call.__code__,
        _client_more.task_call.__code__}


@contextmanager
def interrupt_at_entry(code: CodeType, seen: list[str]) -> Iterator[None]:
    """Raise KeyboardInterrupt as a call of ``code`` begins (where a signal that arrived
    just before is handled), once."""
    def hook(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code is code and not seen:
            seen.append(code.co_name)
            raise KeyboardInterrupt

    sys.setprofile(hook)
    try:
        yield
    finally:
        sys.setprofile(None)


def _entries(log: Path) -> list[dict[str, object]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


@pytest.fixture
def tasks_client(tmp_path: Path, no_leaks: None) -> Iterator[tuple[mcpsync.Client, Path]]:
    log = tmp_path / "requests.jsonl"
    with mcpsync.connect([sys.executable, str(TASKS_PEER), "stdio"],
                         env={"TASKS_LOG": str(log)}) as client:
        client.call_tool("slow", {"polls": 1})   # the task code is loaded from here on
        yield client, log


def _check(client: mcpsync.Client, log: Path, start: int, interrupted: bool,
           where: object) -> None:
    """Since entry ``start`` of the log: one tasks/cancel per task the call created when it
    was interrupted, none when it ran to its end; the client still works."""
    entries = _entries(log)[start:]
    calls = [e for e in entries if e["method"] == "tools/call"]
    cancels = [e for e in entries if e["method"] == "tasks/cancel"]
    if interrupted:
        assert len(cancels) == len(calls), (where, entries)
    else:
        assert not cancels, (where, entries)


def test_ctrl_c_at_any_return_on_the_2026_task_path_cancels_the_created_task(
        tasks_client: tuple[mcpsync.Client, Path]) -> None:
    client, log = tasks_client
    interrupted: list[str] = []
    for nth in range(40):
        start = len(_entries(log))
        seen: list[str] = []
        try:
            with interrupt_at_return(PATH, nth, seen, qualified=True):
                result = client.call_tool("slow", {"polls": 3})
        except KeyboardInterrupt:
            assert seen
        _check(client, log, start, bool(seen), (nth, seen))
        if not seen:
            assert result.text == "done"
            break
        interrupted += seen
    else:
        pytest.fail("the sweep never ran out of C calls to interrupt")
    # the resultType read (before: lost the task) and a call in task_call (cancelled before)
    assert "call_tool: get" in interrupted and "task_call: getattr" in interrupted, \
        interrupted
    assert client.call_tool("slow", {"polls": 1}).text == "done"


@pytest.mark.parametrize("function", ["_task_call", "task_call", "wait", "result"])
def test_ctrl_c_as_a_task_function_begins_cancels_the_created_task(
        tasks_client: tuple[mcpsync.Client, Path], function: str) -> None:
    """At the entry of _task_call and task_call (before their ``try``), of the run's wait,
    and of the result's parsing after the task ended (nothing to cancel then: the task is
    over, and no handler further out may send tasks/cancel for it)."""
    from mcpsync.client import _tasks, _tools

    client, log = tasks_client
    code = {"_task_call": _client.Client._task_call.__code__,
            "task_call": _client_more.task_call.__code__,
            "wait": _tasks.TaskRun.wait.__code__,
            "result": _tools.ToolSchemas.result.__code__}[function]
    start = len(_entries(log))
    seen: list[str] = []
    with pytest.raises(KeyboardInterrupt), interrupt_at_entry(code, seen):
        client.call_tool("slow", {"polls": 3})
    assert seen
    entries = _entries(log)[start:]
    cancels = [e for e in entries if e["method"] == "tasks/cancel"]
    assert len(cancels) == (0 if function == "result" else 1), entries
    assert client.call_tool("slow", {"polls": 1}).text == "done"


def test_claims_name_their_task() -> None:
    """A Ctrl-C raised while an earlier one (claimed for another task) was handled is not
    taken for claimed: its own task is cancelled."""
    first, second = KeyboardInterrupt(), KeyboardInterrupt()
    task_a, task_b = {"taskId": "a"}, {"taskId": "b"}
    assert _client.claim_task_cancel(first, task_a)
    assert not _client.claim_task_cancel(first, task_a)
    second.__context__ = first
    assert not _client.claim_task_cancel(second, task_a)   # a Ctrl-C during a's cancel
    assert _client.claim_task_cancel(second, task_b)
    assert _client.claim_task_cancel(KeyboardInterrupt(), None)   # a 2025 task not yet seen


# -- 2025-11-25: server-everything --------------------------------------------------------

EVERYTHING_TOOL = "simulate-research-query"


def test_ctrl_c_at_any_return_on_the_2025_task_path_cancels_the_task() -> None:
    from http_peers.everything import ENTRY, NODE

    if not (NODE.exists() and ENTRY.exists()):  # pragma: no cover - environment
        why = f"server-everything is not installed at {ENTRY}"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(why)
        pytest.skip(why)
    interrupted: list[str] = []
    with mcpsync.connect([str(NODE), str(ENTRY), "stdio"]) as client:
        for nth in range(20):
            seen: list[str] = []
            try:
                with interrupt_at_return({_client_more.task_call.__code__}, nth, seen,
                                         qualified=True):
                    client.call_tool(EVERYTHING_TOOL, {"topic": "tides"})
            except KeyboardInterrupt:
                assert seen
            listed = client.submit("tasks/list").result(10)
            statuses = [t["status"] for t in listed["tasks"]]
            assert "working" not in statuses, (nth, seen, statuses)
            if not seen:
                break
            interrupted += seen
        else:
            pytest.fail("the sweep never ran out of C calls to interrupt")
    assert "task_call: get" in interrupted, interrupted


def test_ctrl_c_as_a_2025_tasks_result_is_parsed_sends_no_cancel() -> None:
    """A 2025-11-25 task that asked for input (``input_required``) and then answered
    ``tasks/result``: its handle's status is still the last polled, not terminal, yet the
    task is over. A Ctrl-C as the result's parsing begins sends no ``tasks/cancel``."""
    from http_peers.everything import ENTRY, NODE

    from mcpsync.client import _tools

    if not (NODE.exists() and ENTRY.exists()):  # pragma: no cover - environment
        why = f"server-everything is not installed at {ENTRY}"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(why)
        pytest.skip(why)

    def elicit(request: object) -> dict[str, object]:
        return {"action": "accept", "content": {"interpretation": "technical"}}

    arguments = {"topic": "tides", "ambiguous": True}
    with mcpsync.connect([str(NODE), str(ENTRY), "stdio"], elicitation=elicit) as client:
        client.call_tool(EVERYTHING_TOOL, arguments)   # the task code is loaded from here on
        sent: list[str] = []
        real = client._task_request

        def task_request(method: str, params: Any, timeout: float | None) -> dict[str, Any]:
            sent.append(method)
            return real(method, params, timeout)

        client._task_request = task_request   # type: ignore[method-assign]
        seen: list[str] = []
        with pytest.raises(KeyboardInterrupt), \
                interrupt_at_entry(_tools.ToolSchemas.result.__code__, seen):
            client.call_tool(EVERYTHING_TOOL, arguments)
        assert seen
        assert "tasks/result" in sent and "tasks/cancel" not in sent, sent
        listed = client.submit("tasks/list").result(10)
        assert [t["status"] for t in listed["tasks"]][-1] == "completed"


def _twice(client: mcpsync.Client, log: Path, nth: int) -> tuple[list[str], list[Any]]:
    """One task call with a Ctrl-C in the run's wait (at its first ``isinf``), and another
    at the ``nth`` C call's return in a claim after the wait's ``tasks/cancel`` went out.
    Returns where they were placed and the call's log entries."""
    from mcpsync.client import _tasks

    follow, claim = _tasks.TaskRun._follow.__code__, _client.claim_task_cancel.__code__
    start = len(_entries(log))
    placed: list[str] = []
    after_cancel = 0

    def hook(frame: FrameType, event: str, arg: object) -> None:
        nonlocal after_cancel
        if event != "c_return":
            return
        name = f"{frame.f_code.co_name}: {getattr(arg, '__name__', arg)}"
        if not placed and frame.f_code is follow and name == "_follow: isinf":
            placed.append(name)
            raise KeyboardInterrupt
        if len(placed) == 1 and frame.f_code is claim and any(
                e["method"] == "tasks/cancel" for e in _entries(log)[start:]):
            after_cancel += 1
            if after_cancel == nth + 1:
                placed.append(name)
                raise KeyboardInterrupt

    def rearm(frame: FrameType, event: str, arg: object) -> Any:
        # A profile hook that raises is removed: put it back for the next interrupt.
        if sys.getprofile() is None and len(placed) < 2:
            sys.setprofile(hook)
        return rearm

    sys.settrace(rearm)
    sys.setprofile(hook)
    try:
        with pytest.raises(KeyboardInterrupt):
            client.call_tool("slow", {"polls": 3})
    finally:
        sys.settrace(None)
        sys.setprofile(None)
    return placed, _entries(log)[start:]


def test_a_second_ctrl_c_after_the_waits_cancel_sends_no_other(
        tasks_client: tuple[mcpsync.Client, Path]) -> None:
    """A Ctrl-C in the run's wait sends ``tasks/cancel``; a second one, at any C call's
    return in the claims of the handlers further out, sends no second one (the wait's
    handler claims the cancel before it sends it)."""
    client, log = tasks_client
    placed_all: list[list[str]] = []
    for nth in range(20):
        placed, entries = _twice(client, log, nth)
        cancels = [e for e in entries if e["method"] == "tasks/cancel"]
        assert len(cancels) == 1, (nth, placed, entries)
        if len(placed) < 2:
            break
        placed_all.append(placed)
    else:
        pytest.fail("the sweep never ran out of C calls to interrupt")
    assert placed_all, "no second Ctrl-C was placed"
    assert client.call_tool("slow", {"polls": 1}).text == "done"
