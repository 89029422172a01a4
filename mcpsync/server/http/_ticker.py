"""One thread per HTTP app for what must happen while nobody else is awake to do it.

A handler answered on its WSGI thread owns that thread: while it is quiet (waiting on a
database, say) nothing writes to its event stream, so a client that left is noticed only at
the handler's next write, possibly never. Legacy sessions whose client just stopped coming
would likewise stay forever. The :class:`Ticker` does both jobs: it keeps a few *watched*
objects, each saying when it next needs attention (:meth:`Watched.due`), sleeps until the
earliest of those moments and then calls :meth:`Watched.tick` on the ones due. It never
polls at a fixed interval, and it is started only when something first needs it.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

from mcpsync._threads import new_thread

__all__ = ["Ticker", "Watched"]

_log = logging.getLogger("mcpsync.server.http")


class Watched(Protocol):
    def due(self) -> float | None:
        """The ``time.monotonic()`` moment of the next tick; ``None``: nothing to do now."""

    def tick(self, now: float) -> None:
        """Do what is due; must not block for long (the other watched objects wait)."""


class Ticker:
    """A lazily started daemon thread ``mcpsync-http-keepalive-<name>`` ticking watched
    objects at their own deadlines; :meth:`close` stops and joins it."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._cond = threading.Condition()
        self._watched: set[Watched] = set()
        self._poked = False
        self._closed = False
        self._thread: threading.Thread | None = None

    @property
    def thread(self) -> threading.Thread | None:
        return self._thread

    def watch(self, item: Watched) -> None:
        """Tick ``item`` from now on (starting the thread the first time)."""
        with self._cond:
            if self._closed:
                return
            self._watched.add(item)
            if self._thread is None:
                self._thread = new_thread(f"mcpsync-http-keepalive-{self._name}", self._run)
                self._thread.start()
            self._poked = True
            self._cond.notify()

    def unwatch(self, item: Watched) -> None:
        with self._cond:
            self._watched.discard(item)

    def poke(self) -> None:
        """A deadline moved earlier: look at them again (no-op before the thread starts)."""
        with self._cond:
            self._poked = True
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._watched.clear()
            self._cond.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(5)

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._closed:
                    return
                items = list(self._watched)
                self._poked = False
            # Deadlines are read without the ticker's lock: a watched object may take its
            # own locks, and those may be held by a thread that is about to call watch().
            now = time.monotonic()
            earliest: float | None = None
            for item in items:
                when = item.due()
                if when is None:
                    continue
                if when <= now:
                    try:
                        item.tick(now)
                    except Exception:   # one broken stream must not stop the others' ticks
                        _log.exception("HTTP app %r: a keep-alive or expiry tick failed",
                                       self._name)
                        self.unwatch(item)
                        continue
                    when = item.due()
                    if when is None or when <= now:
                        continue
                earliest = when if earliest is None else min(earliest, when)
            with self._cond:
                if self._closed:
                    return
                if not self._poked:
                    self._cond.wait(None if earliest is None
                                    else max(0.0, earliest - time.monotonic()))
