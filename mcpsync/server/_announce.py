"""Announcing registry changes to one connection without making the changer wait.

``server.add_tool()`` (and every other change, and ``notify_resource_updated``) may run on any
thread of the application, and the connection's client may not be reading: a stdio pipe that
is full blocks its writer. So a change only records what to announce, and one thread per
connection, ``mcpsync-server-announce-<name>``, started on the first change, writes the
announcements. They are coalesced: a kind of list that changed ten times before the thread
got to it is announced once, and so is a URI updated ten times; what is pending is bounded by
the kinds and the URIs, never by the number of changes. The thread is a daemon and is joined
when the connection ends (a second at most: one stuck on a client that never reads is left
behind, and writes nothing once the connection's write gate is closed).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from mcpsync._threads import new_thread
from mcpsync.server._context import _stderr

__all__ = ["Announcer"]

JOIN_SECONDS = 1.0


class Announcer:
    """Pending announcements of one connection, and the thread that sends them."""

    def __init__(self, name: str, list_changed: Callable[[str], None],
                 resource_updated: Callable[[str], None]) -> None:
        self._name = name
        self._list_changed = list_changed
        self._resource_updated = resource_updated
        self._cond = threading.Condition(threading.Lock())
        self._kinds: dict[str, None] = {}   # ordered sets
        self._uris: dict[str, None] = {}
        self._thread: threading.Thread | None = None
        self._closed = False

    def kind(self, kind: str) -> None:
        with self._cond:
            if self._closed:
                return
            self._kinds[kind] = None
            self._wake()

    def uri(self, uri: str) -> None:
        with self._cond:
            if self._closed:
                return
            self._uris[uri] = None
            self._wake()

    def _wake(self) -> None:
        """Under the lock: start the thread on first use, else wake it."""
        if self._thread is None:
            self._thread = new_thread(f"mcpsync-server-announce-{self._name}", self._run)
            self._thread.start()
        else:
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._kinds.clear()
            self._uris.clear()
            self._cond.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(JOIN_SECONDS)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not (self._kinds or self._uris or self._closed):
                    self._cond.wait()
                if self._closed:
                    return
                kinds, self._kinds = list(self._kinds), {}
                uris, self._uris = list(self._uris), {}
            for kind in kinds:
                self._send(self._list_changed, kind)
            for uri in uris:
                self._send(self._resource_updated, uri)

    @staticmethod
    def _send(deliver: Callable[[str], None], what: str) -> None:
        try:
            deliver(what)
        except Exception as exc:  # one announcement failing must not end the others
            _stderr(f"announcing {what!r} failed: {type(exc).__name__}: {exc}")
