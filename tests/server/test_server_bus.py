"""The notification bus: changes published by the registry, heard by every connection.

In process: the default bus keeps today's behaviour; a bus of one's own sees every change;
two servers on one ``UnixSocketBus`` directory (as two worker processes would be) hear each
other's changes through real Unix datagram sockets. The cross-process run under two real
gunicorn workers is in ``test_server_gunicorn``.
"""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import pytest

import mcpsync
from mcpsync.server import Change, LocalBus, NotificationBus, UnixSocketBus
from server.peers_http.pid_server import build


class RecordingBus(LocalBus):
    def __init__(self) -> None:
        super().__init__()
        self.published: list[Change] = []

    def publish(self, change: Change) -> None:
        self.published.append(change)
        super().publish(change)


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_a_bus_of_ones_own_carries_every_change(era: str) -> None:
    server = build()
    bus = RecordingBus()
    assert isinstance(bus, NotificationBus)
    server.use_notification_bus(bus)
    heard = threading.Event()
    lists = threading.Event()
    with mcpsync.connect(server, era=era) as client:
        client.subscribe("memo://board", lambda uri: heard.set())
        client.on_list_changed("tools", lambda kind: lists.set())
        server.notify_resource_updated("memo://board")
        server.add_tool({"name": "late"}, lambda arguments, ctx: "late")
        assert heard.wait(5) and lists.wait(5)
    assert bus.published == [Change("resource", "memo://board"), Change("list", "tools")]


def test_a_bus_without_publish_is_refused() -> None:
    with pytest.raises(TypeError, match="publish\\(\\) and subscribe\\(\\)"):
        build().use_notification_bus(object())  # type: ignore[arg-type]


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_two_servers_on_one_socket_directory_hear_each_other(tmp_path: Path, era: str) -> None:
    here, there = build(), build()
    here_bus, there_bus = UnixSocketBus(tmp_path / "bus"), UnixSocketBus(tmp_path / "bus")
    here.use_notification_bus(here_bus)
    there.use_notification_bus(there_bus)
    heard: list[str] = []
    got = threading.Event()
    try:
        with mcpsync.connect(here, era=era) as client:
            client.subscribe("memo://board", lambda uri: (heard.append(uri), got.set()))
            there.notify_resource_updated("memo://board")   # the other "worker"
            assert got.wait(5), "the change did not cross the bus"
    finally:
        here_bus.close()
        there_bus.close()
    assert heard == ["memo://board"]
    assert list((tmp_path / "bus").iterdir()) == []   # each removed its socket


def test_a_dead_peers_socket_is_removed_and_skipped(tmp_path: Path) -> None:
    directory = tmp_path / "bus"
    bus = UnixSocketBus(directory)
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    dead.bind(str(directory / "999999-dead.sock"))
    dead.close()   # the file stays, nobody reads it: a worker that died
    try:
        bus.publish(Change("list", "tools"))
        assert not (directory / "999999-dead.sock").exists()
    finally:
        bus.close()


def test_a_directory_others_may_write_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "open"
    directory.mkdir()
    os.chmod(directory, 0o777)
    with pytest.raises(ValueError, match="writable by nobody else"):
        UnixSocketBus(directory)
    assert (tmp_path / "new").exists() is False
    UnixSocketBus(tmp_path / "new").close()
    assert (tmp_path / "new").stat().st_mode & 0o777 == 0o700
