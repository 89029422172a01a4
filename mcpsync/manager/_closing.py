"""``Manager.close()``'s second phase: wait for every server and tear each one down.

By now every server was told to stop (``begin_close_entry``: a stdio server's stdin is
closed). What is left per server is to wait for its exit (signalling it if it lingers) and
then join its threads and close its descriptors. A thread per server did that before; on a
small machine those threads cost more CPU than the close itself (each started, woken, and
joined beside fifty exiting servers). Now:

- the stdio servers whose stdin was closed are waited for together by one thread,
  ``mcpsync-close-wait``, polling all their pidfds at once and taking each server's
  SIGTERM/SIGKILL steps on that server's own schedule (``transport.stdio._reaper``);
- the calling thread tears each server down as its exit is reported (its ``close()`` then
  waits for nothing): in the order they exit, while the others are still exiting;
- every other server (HTTP, a tool-list watch open, stdin held by a write, no pidfd) is
  closed on a thread of its own, ``mcpsync-close-<n>``, as before.

A teardown can still block: a user callback that does not return keeps its thread from
being joined (a second at most per thread). So that one such server does not hold the
others' teardowns up, the calling thread hands every later teardown to a thread of its own
once one of them took longer than ``SLOW_TEARDOWN``. The signals never wait for a teardown:
they are sent by the waiting thread.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Sequence

from mcpsync._threads import join_all, spawn
from mcpsync.manager._lifecycle import close_entry
from mcpsync.manager._types import ServerEntry
from mcpsync.transport.stdio import StdioTransport
from mcpsync.transport.stdio._reaper import wait_for_exits

__all__ = ["close_entries"]

_log = logging.getLogger("mcpsync.manager")

#: A teardown on the calling thread taking longer than this (seconds) sends every later one
#: to a thread of its own.
SLOW_TEARDOWN = 0.1


class _Closer:
    """The state of one ``close_entries`` run: which entries are done, the threads started."""

    def __init__(self, entries: Sequence[ServerEntry]) -> None:
        self.entries = entries
        self.done = [False] * len(entries)
        self.threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def close_one(self, index: int) -> None:
        """Close one entry; a failure is logged with its server, never raised."""
        entry = self.entries[index]
        try:
            close_entry(entry)
        except Exception as exc:
            _log.warning("server %r: closing it failed: %s", entry.server_id, exc)
        finally:
            with self._lock:
                self.done[index] = True

    def on_thread(self, index: int) -> None:
        self.threads.append(spawn(f"mcpsync-close-{index}", self.close_one, index))

    def unfinished(self) -> list[int]:
        with self._lock:
            return [i for i, finished in enumerate(self.done) if not finished]


def _transport_of(entry: ServerEntry) -> StdioTransport | None:
    transport = getattr(entry.client, "_transport", None)
    return transport if isinstance(transport, StdioTransport) else None


def close_entries(entries: Sequence[ServerEntry], timeout: float) -> list[int]:
    """Wait for and tear down every entry (after ``begin_close_entry`` on each), within
    ``timeout`` seconds in all; return the indexes of the entries still closing then."""
    deadline = time.monotonic() + timeout
    closer = _Closer(entries)
    claimed: list[tuple[int, StdioTransport]] = []
    index_of: dict[int, int] = {}   # id(transport) -> index of its entry
    for index, entry in enumerate(entries):
        transport = _transport_of(entry)
        pidfd = transport.claim_exit_wait() if transport is not None else -1
        if transport is not None and pidfd >= 0:
            claimed.append((pidfd, transport))
            index_of[id(transport)] = index
        else:
            closer.on_thread(index)
    exited: queue.SimpleQueue[int] = queue.SimpleQueue()
    taken: set[int] = set()   # claimed entries the teardown loop has taken from the queue
    waiter: threading.Thread | None = None
    if claimed:
        try:
            waiter = spawn("mcpsync-close-wait", wait_for_exits, claimed,
                           lambda transport: exited.put(index_of[id(transport)]), deadline)
        except BaseException as exc:
            # No thread for the wait: release every claim, so that each close() runs its
            # own shutdown; here, one after another, when the system refused a thread.
            for _, transport in claimed:
                transport.release_exit_wait()
            if not isinstance(exc, Exception):
                raise
            _log.warning("Manager.close(): no thread to wait for the servers (%s); "
                         "closing them one after another", exc)
            for index in index_of.values():
                closer.close_one(index)
            index_of.clear()
            claimed.clear()
    try:
        _tear_down(closer, exited, taken, len(claimed), deadline)
    finally:
        # Interrupted (Ctrl-C), or the deadline passed first: what the loop did not take
        # is torn down on threads (their close() waits for the waiter's release, then
        # finds the exit or resumes the steps), so no server is left unreaped.
        for index in index_of.values():
            if index not in taken:
                closer.on_thread(index)
    join_all([waiter, *closer.threads], deadline)
    return closer.unfinished()


def _tear_down(closer: _Closer, exited: queue.SimpleQueue[int], taken: set[int],
               count: int, deadline: float) -> None:
    """Tear down the ``count`` claimed entries as the waiter reports them, on this thread
    until one teardown is slow, then each on a thread of its own."""
    slow = False
    for _ in range(count):
        left = deadline - time.monotonic()
        if left <= 0:
            return
        try:
            index = exited.get(timeout=left)
        except queue.Empty:
            return
        taken.add(index)
        if slow:
            closer.on_thread(index)
            continue
        began = time.monotonic()
        closer.close_one(index)
        slow = time.monotonic() - began > SLOW_TEARDOWN
