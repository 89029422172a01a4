"""Time limits on the requests a gateway with several upstreams merges from all of them.

``initialize``, ``server/discover``, every ``*/list`` and the acknowledgement of a
``subscriptions/listen`` are answered to the host only once each upstream has given its
part. Without a limit, one upstream that answers ``initialize`` and then nothing holds the
host's ``tools/list`` forever, and with it every tool of the healthy upstreams. So each
merged request gets a deadline (:data:`DEFAULT_MERGE_TIMEOUT`, well under the 30 seconds a
host commonly waits for a request, and under the 8 to 10 some give a list); when it passes,
the host is answered from the upstreams that did answer, the late ones are named in a
warning, and their answers, if they come, are dropped.

``server/discover`` is held to at most :data:`DISCOVER_TIMEOUT`: a host that supports both
eras sends it first as a probe and gives up after a few seconds (mcpsync's client after 5),
falling back to the legacy handshake, so a discover answered later than that is a session
in the wrong era, not a better answer. ``initialize`` has the full limit: a host waits for
it as for any request, and an upstream starting cold is slowest there.

All deadlines share one thread, ``mcpsync-gateway-deadlines``, started on the first merged
request and joined on close: a thread per request would cost more than the requests.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from mcpsync._threads import join_all, new_thread

__all__ = ["DEFAULT_MERGE_TIMEOUT", "DISCOVER_TIMEOUT", "Deadlines", "Gather",
           "check_merge_timeout", "merge_limit"]

#: Seconds each upstream has to give its part of a merged request.
DEFAULT_MERGE_TIMEOUT: Final = 5.0
#: The most a merged ``server/discover`` waits, whatever the limit (a host's era probe).
DISCOVER_TIMEOUT: Final = 3.0

_log = logging.getLogger("mcpsync.gateway")


def check_merge_timeout(value: object) -> float:
    """``value`` as a number of seconds above 0, or a ``ValueError`` saying what to pass."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 \
            or value != value or value == float("inf"):
        raise ValueError(f"merge_timeout must be a number of seconds above 0 (for example "
                         f"{DEFAULT_MERGE_TIMEOUT:g}), not {value!r}")
    return float(value)


def merge_limit(method: str, merge_timeout: float) -> float:
    """The time limit of a merged request of ``method``."""
    return min(merge_timeout, DISCOVER_TIMEOUT) if method == "server/discover" \
        else merge_timeout


@dataclass
class Gather:
    """The parts of one merged request: who is still owed, what came back, and its timer."""

    method: str
    host_id: str
    waiting: set[str]
    results: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    timer: Deadlines.Entry | None = None
    limit: float = DEFAULT_MERGE_TIMEOUT


class Deadlines:
    """Callbacks run at their time on one lazily started thread ``mcpsync-gateway-deadlines``.

    :meth:`add` schedules, :meth:`Entry.cancel` unschedules (the entry stays in the heap
    until its time, doing nothing), :meth:`close` stops and returns the thread if it did not
    end by the deadline. A callback that raises is logged and the thread carries on.
    """

    @dataclass(order=True)
    class Entry:
        when: float
        seq: int
        fn: Callable[[], object] | None = field(compare=False)

        def cancel(self) -> None:
            """Do not run this entry's callback (a no-op once it has run)."""
            self.fn = None

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[Deadlines.Entry] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._closed = False

    def add(self, delay: float, fn: Callable[[], object]) -> Deadlines.Entry | None:
        """Run ``fn()`` in ``delay`` seconds; ``None`` once closed (nothing is scheduled)."""
        entry = Deadlines.Entry(time.monotonic() + delay, next(self._seq), fn)
        with self._cond:
            if self._closed:
                return None
            heapq.heappush(self._heap, entry)
            if self._thread is None:
                self._thread = new_thread("mcpsync-gateway-deadlines", self._run)
                self._thread.start()
            elif self._heap[0] is entry:
                self._cond.notify()
        return entry

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed:
                    if self._heap:
                        wait = self._heap[0].when - time.monotonic()
                        if wait <= 0:
                            break
                        self._cond.wait(wait)
                    else:
                        self._cond.wait()
                if self._closed:
                    return
                fn = heapq.heappop(self._heap).fn
            if fn is None:
                continue
            try:
                fn()
            except Exception:
                _log.warning("a merge deadline failed", exc_info=True)

    def close(self, deadline: float | None) -> list[threading.Thread]:
        """Drop what is scheduled, stop the thread; the threads still alive at ``deadline``."""
        with self._cond:
            self._closed = True
            self._heap.clear()
            self._cond.notify()
            thread = self._thread
        return join_all([thread], deadline)
