"""Where the server's change announcements travel: one process, or every worker on a host.

A change (``add_tool``, ``remove_prompt``, ``notify_resource_updated``, ...) is published on
the server's :class:`NotificationBus`, and the registry, subscribed to that bus, tells every
connection of this process, which announces it to its clients in its own era. The default,
:class:`LocalBus`, delivers at once on the publishing thread: one process, as before.

Under a server with several worker processes a client listening in worker A (a 2026-07-28
``subscriptions/listen``, or a legacy session's GET stream) would never hear of a change made
in worker B. :class:`UnixSocketBus` carries changes between the processes of one host: each
process binds a Unix datagram socket in a private directory they share and, on publishing,
sends the change to every other socket found there; a thread of its own,
``mcpsync-bus-<n>``, receives them. Datagrams are dropped rather than waited for when a
receiver is slow (an announcement is a hint to re-read, and connections coalesce them
anyway), and the socket of a process that died is removed by the next publisher.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import secrets
import socket
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

from mcpsync._threads import new_thread
from mcpsync.server._context import _stderr

__all__ = ["Change", "LocalBus", "NotificationBus", "UnixSocketBus"]

_numbers = itertools.count(1)
_MAX_DATAGRAM = 60_000


@dataclass(frozen=True)
class Change:
    """One announcement: a list changed (``what="list"``, ``value`` the kind: ``"tools"``,
    ``"resources"`` or ``"prompts"``), or a resource was updated (``"resource"``, its URI)."""

    what: Literal["list", "resource"]
    value: str


Deliver = Callable[[Change], None]


@runtime_checkable
class NotificationBus(Protocol):
    """Carries changes to every subscriber, in this process and, for a shared bus, in the
    other processes serving the same clients. ``publish`` must deliver to this process's
    subscribers too; ``subscribe`` returns the function that ends the subscription."""

    def publish(self, change: Change) -> None: ...

    def subscribe(self, deliver: Deliver) -> Callable[[], None]: ...


class LocalBus:
    """The default bus: subscribers of this process only, called on the publishing thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscribers: dict[int, Deliver] = {}
        self._ids = itertools.count()

    def __repr__(self) -> str:
        return f"<LocalBus {len(self._subscribers)} subscriber(s)>"

    def publish(self, change: Change) -> None:
        for deliver in list(self._subscribers.values()):
            try:
                deliver(change)
            except Exception as exc:  # one subscriber failing must not starve the others
                _stderr(f"delivering {change} failed: {type(exc).__name__}: {exc}")

    def subscribe(self, deliver: Deliver) -> Callable[[], None]:
        key = next(self._ids)
        with self._lock:
            self._subscribers = {**self._subscribers, key: deliver}

        def unsubscribe() -> None:
            with self._lock:
                self._subscribers = {k: v for k, v in self._subscribers.items() if k != key}

        return unsubscribe


class UnixSocketBus(LocalBus):
    """A bus shared by the processes of one host through Unix datagram sockets in
    ``directory`` (created 0700 when missing; refused when others may write to it, since
    whoever can would announce changes to every client).

    Make one in each worker process (build the app in the worker, not before gunicorn
    forks: no ``--preload``), on the same directory; ``close()`` it at shutdown.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        super().__init__()
        self.directory = Path(directory)
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = self.directory.stat()
        if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise ValueError(f"notification bus directory {str(self.directory)!r} must belong "
                             "to this user and be writable by nobody else (chmod 700 it)")
        self._path = self.directory / f"{os.getpid()}-{secrets.token_hex(4)}.sock"
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.bind(str(self._path))
        self._closed = False
        self._thread = new_thread(f"mcpsync-bus-{next(_numbers)}", self._receive)
        self._thread.start()

    def __repr__(self) -> str:
        return f"<UnixSocketBus {str(self.directory)!r}>"

    def publish(self, change: Change) -> None:
        super().publish(change)
        data = json.dumps({"what": change.what, "value": change.value}).encode()
        if len(data) > _MAX_DATAGRAM or self._closed:
            return
        for peer in self.directory.glob("*.sock"):
            if peer == self._path:
                continue
            try:
                self._sock.sendto(data, socket.MSG_DONTWAIT, str(peer))
            except (ConnectionRefusedError, FileNotFoundError):   # its process is gone
                with contextlib.suppress(OSError):
                    peer.unlink()
            except OSError:   # a full receiver: the change is dropped for it
                pass

    def close(self) -> None:
        """Stop receiving, remove this process's socket and join the thread."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(OSError):   # wake the receiver
            self._sock.sendto(b"", str(self._path))
        self._thread.join(2.0)
        self._sock.close()
        with contextlib.suppress(OSError):
            self._path.unlink()

    def _receive(self) -> None:
        while not self._closed:
            try:
                data = self._sock.recv(_MAX_DATAGRAM + 1)
            except OSError:
                return
            change = _decode(data)
            if change is not None and not self._closed:
                super().publish(change)


def _decode(data: bytes) -> Change | None:
    try:
        item = json.loads(data)
    except ValueError:
        return None
    if not isinstance(item, dict) or not isinstance(item.get("value"), str):
        return None
    what = item.get("what")
    if what == "list":
        return Change("list", item["value"])
    if what == "resource":
        return Change("resource", item["value"])
    return None
