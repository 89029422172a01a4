"""The stream watchdog (docs/http.md, "Long-lived streams"): end an SSE stream that has gone silent.

SSE reads have no read timeout (a tool may legitimately run for minutes), so a stream whose
server vanished without closing the TCP connection would hang forever. The watchdog ends a
stream silent for SILENCE seconds (300). Once the stream has delivered two keep-alive
comments, the limit becomes twice the longest gap seen between them, never below FLOOR
(10 s): a server that pings every 15 s is declared gone after 30 s of silence. A stream the
watchdog ends counts as dropped, so resumption (legacy) or re-issue (modern) applies.

One daemon thread per client, ``mcpsync-http-watchdog-<name>``, started with the first
watched stream and joined on close; it sleeps until the earliest deadline (at most CHECK).
"""

from __future__ import annotations

import threading
import time
from typing import Final

from mcpsync._threads import new_thread
from mcpsync.transport.http._conn import Abortable

__all__ = ["StreamWatch", "Watchdog"]

SILENCE: Final = 300.0
FLOOR: Final = 10.0
CHECK: Final = 5.0


def _clock() -> float:
    """The watchdog's clock (a function, so a test can replace it)."""
    return time.monotonic()


class StreamWatch:
    """The activity of one stream: the last byte and the keep-alive rhythm."""

    __slots__ = ("comments", "ended", "last", "last_comment", "max_gap", "target")

    def __init__(self, target: Abortable) -> None:
        self.target = target
        self.last = _clock()
        self.comments = 0
        self.last_comment: float | None = None
        self.max_gap = 0.0
        self.ended = False            # set when the watchdog ended this stream

    def seen(self, comments: int) -> None:
        """Bytes arrived; ``comments`` is the decoder's running count of ``:`` lines."""
        now = _clock()
        self.last = now
        if comments != self.comments:
            if self.last_comment is not None:
                self.max_gap = max(self.max_gap, now - self.last_comment)
            self.last_comment = now
            self.comments = comments

    def limit(self) -> float:
        if self.comments >= 2:
            return max(FLOOR, 2 * self.max_gap)
        return SILENCE


class Watchdog:
    """Watches every open SSE stream of one client."""

    def __init__(self, safe: str) -> None:
        self._safe = safe
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._watches: set[StreamWatch] = set()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def watch(self, target: Abortable) -> StreamWatch:
        watch = StreamWatch(target)
        with self._lock:
            self._watches.add(watch)
            if self._thread is None and not self._stopped:
                self._thread = new_thread(f"mcpsync-http-watchdog-{self._safe}", self._run)
                self._thread.start()
        return watch

    def unwatch(self, watch: StreamWatch) -> None:
        with self._lock:
            self._watches.discard(watch)

    def _run(self) -> None:
        while True:
            now = _clock()
            wait = CHECK
            with self._lock:
                if self._stopped:
                    return
                expired = []
                for watch in self._watches:
                    left = watch.last + watch.limit() - now
                    if left <= 0:
                        expired.append(watch)
                    else:
                        wait = min(wait, left)
                for watch in expired:
                    self._watches.discard(watch)
            for watch in expired:
                watch.ended = True
                watch.target.shutdown()
            self._wake.wait(max(wait, 0.01))
            self._wake.clear()

    def stop(self, timeout: float) -> None:
        with self._lock:
            self._stopped = True
            thread = self._thread
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
