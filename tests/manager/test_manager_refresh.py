"""Manager: the discovered tool list follows ``notifications/tools/list_changed``.

``mcpsync.Server`` freezes its tools when ``serve()`` starts and cannot send
``list_changed``, so the server here is a small raw legacy stdio server (written to a
temporary file). Its tool ``add_tool`` registers a tool and sends ``list_changed``; ``burst``
sends ``count`` of them; it logs every request's method to a file, so a test counts the
``tools/list`` requests it really received. Its mode (``argv[1]``) shapes re-discoveries:
``gate`` holds every ``tools/list`` after the first until the tool ``release`` is called,
``fail-relist`` answers the second ``tools/list`` with an error, ``fail-first`` the first.

A modern (2026-07-28) server sends ``list_changed`` only on a ``subscriptions/listen``
stream, which the Manager opens for it; those tests use the official ``mcp`` SDK peers
(stdio and Streamable HTTP), whose tool ``add_tool`` registers a tool and announces it.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import PEERS, require_peer
from http_peers.fixtures import OfficialServer

from mcpsync.client import Client
from mcpsync.config import ServerConfig
from mcpsync.errors import RemoteError
from mcpsync.manager import Manager, Notification
from mcpsync.types import Tool

from .test_manager import config, wait_for

LIVE = r'''
import json, sys

mode, log_path = sys.argv[1], sys.argv[2]
log = open(log_path, "a", encoding="utf-8")
names = ["add_tool", "burst", "release", "hello"]
state = {"open": mode != "gate", "lists": 0}
waiting = []


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def answer(rid, result):
    send({"jsonrpc": "2.0", "id": rid, "result": result})


def tool_list():
    return {"tools": [{"name": n, "inputSchema": {"type": "object"}} for n in names]}


def changed():
    send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})


for line in sys.stdin:
    msg = json.loads(line)
    method, rid = msg.get("method"), msg.get("id")
    if rid is None:
        continue
    log.write(method + "\n")
    log.flush()
    if method == "initialize":
        answer(rid, {"protocolVersion": msg["params"]["protocolVersion"],
                     "serverInfo": {"name": "live", "version": "1"},
                     "capabilities": {"tools": {"listChanged": True}}})
    elif method == "tools/list":
        state["lists"] += 1
        if (state["lists"] == 2 and mode == "fail-relist") or \
                (state["lists"] == 1 and mode == "fail-first"):
            send({"jsonrpc": "2.0", "id": rid,
                  "error": {"code": -32603, "message": "relist broke"}})
        elif state["lists"] > 1 and not state["open"]:
            waiting.append(rid)
        else:
            answer(rid, tool_list())
    elif method == "tools/call":
        name = msg["params"]["name"]
        args = msg["params"].get("arguments") or {}
        if name == "add_tool":
            names.append(args["name"])
            changed()
        elif name == "burst":
            for _ in range(args.get("count", 20)):
                changed()
        elif name == "release":
            state["open"] = True
            for held in waiting:
                answer(held, tool_list())
            waiting.clear()
        answer(rid, {"content": [{"type": "text", "text": "called " + name}]})
    elif method == "ping":
        answer(rid, {})
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "not found"}})
'''


class Live:
    """The raw server's argv for a mode, and how many ``tools/list`` it received."""

    def __init__(self, directory: Path) -> None:
        self.script = directory / "live_server.py"
        self.script.write_text(LIVE, encoding="utf-8")
        self.log = directory / "requests.log"
        self.log.touch()

    def argv(self, mode: str = "open") -> list[str]:
        return [sys.executable, str(self.script), mode, str(self.log)]

    def lists(self) -> int:
        return self.log.read_text(encoding="utf-8").splitlines().count("tools/list")


@pytest.fixture
def live(tmp_path: Path) -> Live:
    return Live(tmp_path)


@pytest.fixture
def manager() -> Iterator[Manager]:
    m = Manager()
    yield m
    m.close()


def names(manager: Manager) -> list[str]:
    return [t.name for t in manager.tools()]


def discovering(server_id: str) -> bool:
    return any(t.name == f"mcpsync-discover-{server_id}" and t.is_alive()
               for t in threading.enumerate())


INITIAL = ["add_tool", "burst", "release", "hello"]


@pytest.mark.timeout(30)
def test_tool_list_follows_list_changed(no_leaks: None, manager: Manager, live: Live) -> None:
    got: list[Notification] = []
    manager.set_notification_handler(got.append)
    manager.start_server(config("live", live.argv()))
    assert wait_for(lambda: manager.server_ready("live"))
    assert names(manager) == INITIAL

    manager.call_tool("live", "add_tool", {"name": "fresh"})
    assert wait_for(lambda: "fresh" in names(manager))
    assert names(manager) == [*INITIAL, "fresh"]
    assert "live__fresh" in [t.name for t in manager.tools(prefixed=True)]
    assert [t.name for t in manager.list_tools("live")] == [*INITIAL, "fresh"]
    assert manager.server_ready("live") and manager.server_ready_error("live") is None
    # The user's handler still receives the notification itself.
    assert wait_for(lambda: any(n.method == "notifications/tools/list_changed"
                                and n.server_id == "live" for n in got))
    assert wait_for(lambda: not discovering("live"))
    assert live.lists() == 2


@pytest.mark.timeout(30)
def test_thread_server_tool_list_follows_too(no_leaks: None, manager: Manager,
                                             live: Live) -> None:
    manager.start_thread_server("live", "t1", config("", live.argv()))
    sid = manager.thread_server_id("live", "t1")
    assert wait_for(lambda: manager.server_ready(sid))
    manager.call_tool(sid, "add_tool", {"name": "late"})
    assert wait_for(lambda: "late" in [t.name for t in manager.thread_tools("t1")])
    assert manager.tools() == []          # a thread server's tools stay in its thread


@pytest.mark.timeout(30)
def test_old_list_is_served_until_the_new_one_arrives(no_leaks: None, manager: Manager,
                                                      live: Live) -> None:
    manager.start_server(config("live", live.argv("gate")))
    assert wait_for(lambda: manager.server_ready("live"))
    manager.call_tool("live", "add_tool", {"name": "fresh"})
    assert wait_for(lambda: live.lists() == 2)      # the re-discovery is held at the server
    assert discovering("live")
    assert names(manager) == INITIAL
    assert manager.server_ready("live")
    assert manager.server_ready_error("live") is None
    assert [t.name for t in manager.list_tools("live")] == INITIAL

    manager.call_tool("live", "release")
    assert wait_for(lambda: "fresh" in names(manager))
    assert manager.server_ready("live")


@pytest.mark.timeout(30)
def test_a_burst_of_list_changed_costs_at_most_two_rediscoveries(
        no_leaks: None, manager: Manager, live: Live) -> None:
    got: list[Notification] = []
    manager.set_notification_handler(got.append)
    manager.start_server(config("live", live.argv("gate")))
    assert wait_for(lambda: manager.server_ready("live"))
    assert wait_for(lambda: not discovering("live"))
    assert live.lists() == 1

    manager.call_tool("live", "burst", {"count": 20})
    assert wait_for(lambda: live.lists() == 2)      # the first re-discovery, held
    # Notifications are dispatched in arrival order, so once this answer is back all 20
    # have been seen while that re-discovery was still running.
    manager.call_tool("live", "hello")
    changed = [n for n in got if n.method == "notifications/tools/list_changed"]
    assert len(changed) == 20
    manager.call_tool("live", "release")
    assert wait_for(lambda: not discovering("live"))
    rediscoveries = live.lists() - 1
    assert 1 <= rediscoveries <= 2, rediscoveries
    assert names(manager) == INITIAL and manager.server_ready("live")


@pytest.mark.timeout(30)
def test_failed_rediscovery_keeps_the_old_list_and_is_reported(
        no_leaks: None, manager: Manager, live: Live, caplog: pytest.LogCaptureFixture) -> None:
    manager.start_server(config("live", live.argv("fail-relist")))
    assert wait_for(lambda: manager.server_ready("live"))
    with caplog.at_level(logging.WARNING, logger="mcpsync.manager"):
        manager.call_tool("live", "add_tool", {"name": "one"})
        assert wait_for(lambda: manager.server_ready_error("live") is not None)
        assert wait_for(lambda: any("re-discovery on server 'live' failed" in r.getMessage()
                                    for r in caplog.records))
    error = manager.server_ready_error("live")
    assert isinstance(error, RemoteError) and "relist broke" in str(error)
    assert names(manager) == INITIAL                  # the old list, still served
    assert manager.server_ready("live") and manager.server_started("live")

    # The next list_changed lists again; its success clears the error.
    manager.call_tool("live", "add_tool", {"name": "two"})
    assert wait_for(lambda: "two" in names(manager))
    assert names(manager) == [*INITIAL, "one", "two"]
    assert manager.server_ready_error("live") is None


@pytest.mark.timeout(30)
def test_stop_during_a_rediscovery_leaves_no_thread(no_leaks: None, manager: Manager,
                                                    live: Live) -> None:
    manager.start_server(config("live", live.argv("gate")))
    manager.start_server(config("other", live.argv("gate")))
    assert wait_for(lambda: manager.server_ready("live") and manager.server_ready("other"))
    manager.call_tool("live", "add_tool", {"name": "fresh"})
    manager.call_tool("other", "add_tool", {"name": "fresh"})
    assert wait_for(lambda: live.lists() == 4)      # both re-discoveries held
    assert discovering("live") and discovering("other")
    assert manager.stop_server("live") is True
    assert not discovering("live")                  # joined by stop_server
    assert not manager.server_ready("live") and manager.server_ready_error("live") is None
    manager.close()                                  # the other one, joined by close()
    assert not discovering("other")


@pytest.mark.timeout(30)
def test_list_changed_retries_a_failed_first_discovery(no_leaks: None, manager: Manager,
                                                       live: Live) -> None:
    manager.start_server(config("live", live.argv("fail-first")))
    assert wait_for(lambda: manager.server_ready_error("live") is not None)
    assert not manager.server_ready("live") and manager.tools() == []
    manager.call_tool("live", "add_tool", {"name": "fresh"})
    assert wait_for(lambda: manager.server_ready("live"))
    assert manager.server_ready_error("live") is None
    assert names(manager) == [*INITIAL, "fresh"]


# -- modern servers: list_changed arrives on the Manager's subscriptions/listen stream -----

OFFICIAL = [sys.executable, str(PEERS / "official_stdio_server.py")]


def listening() -> list[str]:
    return [t.name for t in threading.enumerate()
            if t.name.startswith("mcpsync-") and "listen" in t.name and t.is_alive()]


def count_lists(client: Client) -> list[int]:
    """Count the ``tools/list`` calls the Manager's discovery makes through ``client``."""
    calls = [0]
    real = client.list_tools

    def counted() -> list[Tool]:
        calls[0] += 1
        return real()

    client.list_tools = counted  # type: ignore[method-assign]
    return calls


@pytest.mark.timeout(30)
@pytest.mark.parametrize("era", ["auto", "legacy"])
def test_official_peer_tool_list_follows_list_changed_once_per_change(
        no_leaks: None, era: str) -> None:
    require_peer("mcp")
    got: list[Notification] = []
    with Manager(connect_options={"era": era, "timeout": 10}) as manager:
        manager.set_notification_handler(got.append)
        manager.start_server(config("peer", OFFICIAL))
        client = manager.client("peer")
        assert client.era == ("modern" if era == "auto" else "legacy")
        # Only the modern session needs (and gets) a listen stream; legacy uses the observer.
        assert bool(listening()) == (era == "auto")
        assert wait_for(lambda: manager.server_ready("peer"))
        assert wait_for(lambda: not discovering("peer"))
        assert "fresh" not in names(manager)
        lists = count_lists(client)

        assert manager.call_tool("peer", "add_tool", {"name": "fresh"}).text == "added fresh"
        assert wait_for(lambda: "fresh" in names(manager))
        assert manager.call_tool("peer", "fresh", {"text": "hi"}).text == "hi"
        assert wait_for(lambda: not discovering("peer"))
        # One change, one tools/list: the watch and the observer never both trigger.
        assert lists[0] == 1
        assert [n.server_id for n in got
                if n.method == "notifications/tools/list_changed"] == ["peer"]
        assert manager.server_ready("peer") and manager.server_ready_error("peer") is None

        assert manager.stop_server("peer") is True
        assert listening() == []                   # the listen thread is joined on stop


@pytest.mark.timeout(30)
def test_modern_thread_server_follows_and_close_ends_every_listen(no_leaks: None) -> None:
    require_peer("mcp")
    manager = Manager(connect_options={"timeout": 10})
    try:
        manager.start_server(config("peer", OFFICIAL))
        manager.start_thread_server("peer", "t1", config("", OFFICIAL))
        sid = manager.thread_server_id("peer", "t1")
        assert manager.client(sid).era == "modern"
        assert len(listening()) == 2
        assert wait_for(lambda: manager.server_ready(sid) and manager.server_ready("peer"))
        manager.call_tool(sid, "add_tool", {"name": "late"})
        assert wait_for(lambda: "late" in [t.name for t in manager.thread_tools("t1")])
        assert "late" not in names(manager)      # the project server did not change
    finally:
        manager.close()
    assert listening() == []


@pytest.mark.timeout(30)
def test_modern_http_server_tool_list_follows_list_changed(
        no_leaks: None, official_http_server_factory: Callable[[str], OfficialServer]) -> None:
    server = official_http_server_factory("sse-stateless")
    with Manager(connect_options={"timeout": 10}) as manager:
        manager.start_server(ServerConfig(id="web", url=server.url))
        assert manager.client("web").era == "modern"
        assert wait_for(lambda: manager.server_ready("web"))
        assert "fresh" not in names(manager)
        manager.call_tool("web", "add_tool", {"name": "fresh"})
        assert wait_for(lambda: "fresh" in names(manager))
        assert manager.call_tool("web", "fresh", {"text": "hi"}).text == "hi"
    assert listening() == []
