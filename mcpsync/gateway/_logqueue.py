"""The inspector's hand-off: traffic threads queue frames, one log thread writes them.

Building a log record (decoding the frame, its shape, redaction, JSON encoding) and writing
it costs microseconds (about 7 for a ``tools/call`` or its answer, measured alone), about as
much as the gateway's whole forwarding work for the frame. Done on the thread that forwards,
it lands on every call's latency. So the gateway's threads only append ``(frame, its legs,
when)`` to a bounded queue, which is well under a microsecond, and the
``mcpsync-gateway-log`` thread builds and writes the records, many lines per write when
traffic is heavy.

Waking a thread costs more than queueing (measured: waking the log thread for each frame,
even one that then did nothing, added about 40 us per frame to the gateway's latency: the
wake-up and the interpreter lock it takes while the frame is still being forwarded). So the
log thread is not woken per frame: while traffic flows it takes what has queued every
:data:`BATCH_WAIT` seconds, and only when it found nothing does it sleep until the next
:meth:`LogQueue.put` wakes it. An idle gateway's log thread sleeps; a busy one's wakes a
hundred times a second whatever the traffic.

The queue never blocks the traffic: past :data:`QUEUE_ITEMS` waiting frames a frame is not
queued but counted, and the log thread writes the count as a ``dropped`` record when it
catches up. :meth:`LogQueue.close` writes everything still queued before it returns.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from mcpsync._threads import join_all, new_thread

__all__ = ["BATCH_WAIT", "QUEUE_ITEMS", "LogQueue"]

_log = logging.getLogger("mcpsync.gateway")

#: Frames waiting for the log thread; past this they are counted as dropped.
QUEUE_ITEMS: Final = 16384
#: While traffic flows, how long the log thread lets frames gather between two batches.
BATCH_WAIT: Final = 0.01
#: How long :meth:`LogQueue.close` waits for the log thread to write what is queued.
CLOSE_BUDGET: Final = 5.0

#: ``drain(items, dropped)``: write ``items`` (in queue order) and, when ``dropped`` > 0,
#: say that many frames were not queued. Runs on the log thread only.
Drain = Callable[[list[Any], int], None]


class LogQueue:
    """A bounded queue with one consumer thread, started on the first :meth:`put`."""

    def __init__(self, drain: Drain, *, limit: int = QUEUE_ITEMS) -> None:
        self._drain = drain
        self._limit = limit
        self._items: collections.deque[Any] = collections.deque()
        self._cond = threading.Condition(threading.Lock())
        self._asleep = False     # the log thread found nothing: put() wakes it
        self._closing = False
        self._dropped = 0
        self._thread: threading.Thread | None = None

    def put(self, item: Any) -> bool:
        """Queue ``item`` (see :meth:`kick`); ``False`` when it was dropped (the queue is
        full, or closed)."""
        items = self._items
        if len(items) >= self._limit or self._closing:
            with self._cond:
                self._dropped += 1
            return False
        items.append(item)   # deque.append is atomic: no lock on the common path
        if self._asleep or self._thread is None:
            with self._cond:
                if self._thread is None and not self._closing:
                    self._thread = new_thread("mcpsync-gateway-log", self._run)
                    self._thread.start()
                self._asleep = False
                self._cond.notify()
        return True

    def _run(self) -> None:
        items = self._items
        while True:
            with self._cond:
                # Asleep before looking: a put() after the look sees it and wakes us.
                self._asleep = True
                while not items and not self._dropped and not self._closing:
                    self._cond.wait()
                self._asleep = False
                dropped, self._dropped = self._dropped, 0
                closing = self._closing
            batch = [items.popleft() for _ in range(len(items))]
            if batch or dropped:
                try:
                    self._drain(batch, dropped)
                except Exception:   # the log thread must outlive a bad record
                    _log.warning("inspector: could not write %d record(s)", len(batch),
                                 exc_info=True)
            if closing and not items:
                return
            with self._cond:   # let the next frames gather (close() cuts this short)
                if not self._closing:
                    self._cond.wait(BATCH_WAIT)

    def close(self) -> bool:
        """Write what is queued, then stop the log thread (waits at most
        :data:`CLOSE_BUDGET`). Later :meth:`put` calls drop their item. Idempotent.
        ``False`` when the log thread is still running after the wait."""
        with self._cond:
            self._closing = True
            self._cond.notify()
            thread = self._thread
        return not join_all([thread], time.monotonic() + CLOSE_BUDGET)
