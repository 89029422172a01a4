"""``Manager.close()``'s second phase: wait for every server and tear each one down.

By now every server was told to stop (``begin_close_entry``: a stdio server's stdin is
closed). What is left per server is to wait for its exit (signalling it if it lingers) and
then join its threads and close its descriptors. A thread per server did that before; on a
small machine those threads cost more CPU than the close itself (each started, woken, and
joined beside fifty exiting servers). Now:

- the stdio servers whose stdin was closed are waited for together, by the calling thread
  polling all their pidfds at once (``transport.stdio._reaper``), and each is torn down on
  that thread the moment it exits (its ``close()`` then waits for nothing), while the others
  are still exiting; one thread, ``mcpsync-close-wait``, takes each server's SIGTERM and
  SIGKILL steps on that server's own schedule;
- every other server (HTTP, a tool-list watch open, stdin held by a write, no pidfd) is
  closed on a thread of its own, ``mcpsync-close-<n>``, as before.

A teardown can still block: a user callback that does not return keeps its thread from
being joined (a second at most per thread). The signals do not wait for it (they are sent
by the other thread), and so that it does not hold the others' teardowns up either, every
later teardown gets a thread of its own once one took longer than ``SLOW_TEARDOWN``. Past
the deadline, or on Ctrl-C, whatever was not yet torn down is closed on threads, which
finish its shutdown (the Manager names it as still stopping).
"""

from __future__ import annotations

import logging
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
        self._slow = False
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

    def tear_down(self, index: int) -> None:
        """Tear one exited entry down on this thread, or on a thread of its own once a
        teardown here was slow (so that one stuck teardown holds no other up)."""
        if self._slow:
            self.on_thread(index)
            return
        began = time.monotonic()
        self.close_one(index)
        self._slow = time.monotonic() - began > SLOW_TEARDOWN

    def on_thread(self, index: int) -> None:
        """Close one entry on a thread of its own (here, should the system refuse one)."""
        try:
            self.threads.append(spawn(f"mcpsync-close-{index}", self.close_one, index))
        except RuntimeError:   # "can't start new thread"
            self.close_one(index)

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
    try:
        wait_for_exits(claimed, lambda transport: closer.tear_down(index_of[id(transport)]),
                       lambda transport: closer.on_thread(index_of[id(transport)]), deadline)
    except Exception as exc:   # no thread or pipe for the wait: each closes on its own
        _log.warning("Manager.close(): cannot wait for the servers together (%s); each is "
                     "closed on its own", exc)
    join_all(closer.threads, deadline)
    return closer.unfinished()
