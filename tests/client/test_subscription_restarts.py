"""Subscriptions when the server dies: a change that restarts it must not wait on itself.

Subscribing (``subscribe``, ``on_list_changed``, ``watch_task``) and closing one of several
handles open a new ``subscriptions/listen``; on a modern client whose server was killed,
sending it restarts the server, and the restart re-opens the subscriptions. That happens on
the thread already making the change, which must finish its change on the new server, leave
exactly one listen open with the union of the handles, and not hang. Each server here is a
real process killed with SIGKILL; each test has a timeout so that a hang fails.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import PEERS

import mcpsync

pytestmark = pytest.mark.timeout(30)

FEATURES = [sys.executable, str(PEERS / "feature_server.py")]
EXTENSIONS = Path(__file__).parents[1] / "server" / "peers_http" / "extensions_server.py"


def _kill(client: mcpsync.Client) -> int:
    """SIGKILL the server and wait until the client noticed, so the next change meets a
    dead session (and restarts it) rather than racing the death."""
    pid = client.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while client._session.lost is None:
        assert time.monotonic() < deadline, "the client never noticed its server died"
        time.sleep(0.01)
    return pid


def _one_listen(client: mcpsync.Client, wanted: dict[str, Any]) -> None:
    """Exactly one listen is left (the dead server's listen is forgotten once its end is
    seen), and it is the current one, asking for ``wanted``."""
    subs = client._subs
    deadline = time.monotonic() + 10
    while len(subs._listens) != 1:
        assert time.monotonic() < deadline, f"listens left open: {subs._listens}"
        time.sleep(0.01)
    assert subs._listen is subs._listens[0]
    assert subs._listen.filter == wanted
    assert not subs._listen.future.done()


def _touched(client: mcpsync.Client, uri: str, heard: threading.Event) -> None:
    heard.clear()
    assert client.call_tool("touch", {"uri": uri}).text == "touched"
    assert heard.wait(10), f"no notification for {uri} from the restarted server"


def test_subscribe_on_a_killed_modern_server_restarts_it(no_leaks: None) -> None:
    greeting, logo = threading.Event(), threading.Event()
    with mcpsync.connect(FEATURES) as client:
        assert client.era == "modern"
        client.subscribe("memo://greeting", lambda uri: greeting.set())
        first = _kill(client)
        client.subscribe("memo://logo", lambda uri: logo.set())
        assert client.pid != first
        _one_listen(client, {"resourceSubscriptions": ["memo://greeting", "memo://logo"]})
        _touched(client, "memo://greeting", greeting)
        _touched(client, "memo://logo", logo)
        assert len(client._restarts) == 1


def test_on_list_changed_on_a_killed_modern_server_restarts_it(no_leaks: None) -> None:
    greeting, tools = threading.Event(), threading.Event()
    with mcpsync.connect(FEATURES) as client:
        client.subscribe("memo://greeting", lambda uri: greeting.set())
        first = _kill(client)
        client.on_list_changed("tools", lambda kind: tools.set())
        assert client.pid != first
        _one_listen(client, {"toolsListChanged": True,
                             "resourceSubscriptions": ["memo://greeting"]})
        client.call_tool("add_extra", {"name": "extra"})
        assert tools.wait(10)
        _touched(client, "memo://greeting", greeting)


def test_closing_one_of_two_handles_on_a_killed_modern_server(no_leaks: None) -> None:
    greeting = threading.Event()
    with mcpsync.connect(FEATURES) as client:
        client.subscribe("memo://greeting", lambda uri: greeting.set())
        logo = client.subscribe("memo://logo", lambda uri: None)
        first = _kill(client)
        logo.close()
        assert logo.closed and client.pid != first
        _one_listen(client, {"resourceSubscriptions": ["memo://greeting"]})
        _touched(client, "memo://greeting", greeting)


def test_watch_task_on_a_killed_modern_server(tmp_path: Path, no_leaks: None) -> None:
    (tmp_path / "skills").mkdir()
    done = threading.Event()
    with mcpsync.connect([sys.executable, str(EXTENSIONS), str(tmp_path / "skills")],
                         era="modern") as client:
        client.list_tools()
        client.on_list_changed("tools", lambda kind: None)
        first = _kill(client)
        # The new server never heard of the old task: the watch fails, and says why, but
        # the list-changed watch is open again on the new server all the same.
        with pytest.raises(mcpsync.CapabilityNotSupported, match="did not acknowledge"):
            client.watch_task("a-task-of-the-dead-server", lambda task: None)
        assert client.pid != first
        _one_listen(client, {"toolsListChanged": True})
        future = client.submit_tool("slow_sum", {"a": 1, "b": 2, "seconds": 1.0})
        deadline = time.monotonic() + 10
        while future.task is None:
            assert time.monotonic() < deadline, "the task was not created"
            time.sleep(0.01)
        task_id = future.task.task_id
        client.watch_task(task_id, lambda task: task["status"] == "completed" and done.set())
        assert done.wait(10)
        assert future.result(10).text == "3"


def test_a_restart_by_another_thread_during_a_change(no_leaks: None) -> None:
    """One thread subscribes while another finds the server dead and restarts it: whichever
    order they meet in, one listen with both URIs is left, and the old handle still hears."""
    greeting = threading.Event()
    with mcpsync.connect(FEATURES) as client:
        client.subscribe("memo://greeting", lambda uri: greeting.set())
        first = _kill(client)
        errors: list[BaseException] = []

        def call() -> None:
            try:
                client.call_tool("greet", {"name": "x"})
            except BaseException as exc:
                errors.append(exc)

        caller = threading.Thread(target=call)
        caller.start()
        client.subscribe("memo://logo", lambda uri: None)
        caller.join()
        assert not errors and client.pid != first
        assert len(client._restarts) == 1
        _one_listen(client, {"resourceSubscriptions": ["memo://greeting", "memo://logo"]})
        _touched(client, "memo://greeting", greeting)


def test_legacy_subscribe_on_a_killed_server_fails_at_once(no_leaks: None) -> None:
    """A legacy server is not restarted: the change fails (it does not hang), and closing
    the old handle afterwards needs no server."""
    with mcpsync.connect(FEATURES, era="legacy") as client:
        assert client.era == "legacy"
        old = client.subscribe("memo://greeting", lambda uri: None)
        _kill(client)
        with pytest.raises(mcpsync.ServerExited, match="exited earlier"):
            client.subscribe("memo://logo", lambda uri: None)
        client.on_list_changed("tools", lambda kind: None).close()   # nothing to send
        old.close()
        assert old.closed and not client._subs._by_uri
