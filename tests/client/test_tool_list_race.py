"""A ``tools/list_changed`` handled after the list it arrived before: the task decision of a
2025-11-25 call must not lose the list to it.

The client reads a request's answer on the calling thread, while notifications are handled
in arrival order on the dispatcher thread, so a ``list_changed`` that arrived before the
``tools/list`` answer can drop the cached list just after ``list_tools`` stored it. The call
that listed the tools to learn whether its tool runs only as a task then found no list, took
that for "no task needed" and sent a plain ``tools/call``, which the server refused.
``peers/relisting_server.py`` sends the notification right before each list's answer, and
the test holds the dispatcher until the list is stored, then lets the notification through
before the call goes on: the race, without timing luck.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import mcpsync
from mcpsync.types import Tool

PEER = Path(__file__).with_name("peers") / "relisting_server.py"


class _Race:
    """Holds the dispatcher at the peer's "hold" log message until a list is stored, then
    waits (in ``remember``, on the calling thread) until the ``list_changed`` behind that
    message has been handled: its subscriber runs after the cache was dropped."""

    def __init__(self) -> None:
        self.stored = threading.Event()
        self.changed = threading.Event()
        self.lists = 0

    def on_log(self, level: str, logger: str | None, data: Any) -> None:
        if data == "hold":
            assert self.stored.wait(10)
            self.stored.clear()

    def hook(self, client: mcpsync.Client) -> None:
        client.on_list_changed("tools", lambda kind: self.changed.set())
        remember = client._toolset.remember

        def remember_then_drop(tools: list[Tool]) -> None:
            remember(tools)
            self.lists += 1
            self.stored.set()
            assert self.changed.wait(10)      # the notification dropped the list just stored
            self.changed.clear()

        client._toolset.remember = remember_then_drop   # type: ignore[method-assign]


@pytest.fixture
def raced() -> Iterator[tuple[mcpsync.Client, _Race]]:
    race = _Race()
    with mcpsync.connect([sys.executable, str(PEER)], on_log=race.on_log) as client:
        race.hook(client)
        yield client, race


def test_the_first_call_runs_as_a_task_when_list_changed_drops_its_list(
        raced: tuple[mcpsync.Client, _Race]) -> None:
    client, race = raced
    result = client.call_tool("research", {"topic": "tides"}, raise_on_error=True)
    assert result.text == "researched: tides"
    assert race.lists == 1
    # The notification may tell of a change after the list was made: the list stays dropped,
    # and the next call lists again (and runs as a task again).
    assert client._toolset.listed() is None
    assert client.call_tool("research", {"topic": "reefs"}).text == "researched: reefs"
    assert race.lists == 2


def test_submit_tool_runs_as_a_task_when_list_changed_drops_its_list(
        raced: tuple[mcpsync.Client, _Race]) -> None:
    client, race = raced
    future = client.submit_tool("research", {"topic": "winds"}, raise_on_error=True)
    assert future.result(10).text == "researched: winds"
    assert race.lists == 2   # submit_tool decides, and the call_tool it runs decides again


def test_without_the_race_the_cached_list_decides() -> None:
    """The peer with nobody holding the dispatcher: whichever way the notification falls,
    the call runs as a task."""
    with mcpsync.connect([sys.executable, str(PEER)]) as client:
        for topic in ("a", "b", "c"):
            assert client.call_tool("research", {"topic": topic}).text == f"researched: {topic}"
