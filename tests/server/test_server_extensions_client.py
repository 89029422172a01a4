"""Our client against our server for both extensions, over stdio and Streamable HTTP.

The server (``peers_http/extensions_server.py``) serves a task tool that asks a question and
one that only runs as a task, and a skill directory; the client (2026-07-28, which declares
the Tasks extension when the server does) calls the tools as a plain call and gets the
task's result, answers the task's question through its elicitation callback, and loads and
verifies the skill, reading one more file only when asked.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import mcpsync

PEER = Path(__file__).with_name("peers_http") / "extensions_server.py"


def _skills(root: Path) -> Path:
    skill = root / "skills" / "pdf-processing"
    (skill / "references").mkdir(parents=True)
    (skill / "SKILL.md").write_text(
        "---\nname: pdf-processing\ndescription: Extract and fill PDF forms\n---\n"
        "# PDF processing\nSee references/FORMS.md.\n", encoding="utf-8")
    (skill / "references" / "FORMS.md").write_text("# Forms\nFill them in.\n",
                                                    encoding="utf-8")
    return root / "skills"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(params=["stdio", "http"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    skills = _skills(tmp_path)
    if request.param == "stdio":
        yield [sys.executable, str(PEER), str(skills)]
        return
    port = _free_port()
    proc = subprocess.Popen([sys.executable, str(PEER), str(skills), "--http",
                             f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                assert time.monotonic() < deadline, "the HTTP server did not start"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stderr is not None:
            proc.stderr.close()


def test_tasks_run_to_their_result_with_questions_answered(target: Any) -> None:
    asked: list[str] = []

    def elicit(request: Any) -> dict[str, Any]:
        asked.append(request.message)
        return {"action": "accept", "content": {"format": "pdf"}}

    with mcpsync.connect(target, era="modern", elicitation=elicit) as client:
        tools = {t.name: t for t in client.list_tools()}
        assert tools["build_report"].task_support == "optional"
        assert tools["slow_sum"].task_support == "required"
        assert client.call_tool("slow_sum", {"a": 2, "b": 3}).text == "5"
        future = client.submit_tool("build_report", {"pages": 3})
        result = future.result(30)
        assert result.text == "3 pages as pdf"
        assert asked == ["Which format?"]
        assert future.task is not None and future.task.status == "completed"


def test_a_task_cancelled_by_its_timeout_is_cancelled_on_the_server(target: Any) -> None:
    with mcpsync.connect(target, era="modern") as client:
        client.list_tools()
        future = client.submit_tool("slow_sum", {"a": 1, "b": 1, "seconds": 30},
                                    task_timeout=1.0)
        with pytest.raises(mcpsync.RequestTimeout):
            future.result(30)
        assert future.task is not None
        with pytest.raises(mcpsync.Cancelled):      # the server settled it cancelled
            client.resume_task(future.task.task_id)
        # The connection goes on: another task runs to its end.
        assert client.call_tool("slow_sum", {"a": 1, "b": 1}).text == "2"


def test_a_skill_is_listed_loaded_and_verified(target: Any) -> None:
    with mcpsync.connect(target, era="modern") as client:
        skills = client.list_skills()
        assert [s.name for s in skills] == ["pdf-processing"]
        loaded = client.get_skill(skills[0].uri)
        assert "# PDF processing" in loaded.text
        forms = [f.uri for f in skills[0].files if f.uri.endswith("FORMS.md")]
        assert loaded.read_text(forms[0]) == "# Forms\nFill them in.\n"


def test_a_watched_task_announces_its_completion(target: Any) -> None:
    seen: list[dict[str, Any]] = []
    done = threading.Event()

    def on_status(task: dict[str, Any]) -> None:
        seen.append(task)
        if task["status"] == "completed":
            done.set()

    with mcpsync.connect(target, era="modern") as client:
        client.list_tools()
        future = client.submit_tool("slow_sum", {"a": 4, "b": 5, "seconds": 1.0})
        deadline = time.monotonic() + 10
        while future.task is None:          # set once the server has created the task
            assert time.monotonic() < deadline, "the task was not created"
            time.sleep(0.01)
        task_id = future.task.task_id
        watch = client.watch_task(task_id, on_status)
        assert repr(watch) == f"<Subscription task_id={task_id!r}>"
        assert done.wait(10), f"no completed status heard; saw {seen}"
        assert all(t["taskId"] == task_id and "_meta" not in t for t in seen)
        assert seen[-1]["status"] == "completed"
        watch.close()
        assert watch.closed
        assert future.result(10).text == "9"    # the call itself still got its result
        with pytest.raises(mcpsync.CapabilityNotSupported, match="did not acknowledge"):
            client.watch_task("no-such-task", on_status)


def test_watching_a_task_needs_the_2026_protocol(target: Any) -> None:
    with mcpsync.connect(target, era="legacy") as client, pytest.raises(
            mcpsync.UnsupportedInThisEra,
            match=f"on server {client.name!r}: task status notifications"):
        client.watch_task("any", lambda task: None)
