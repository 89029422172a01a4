"""A legacy session's bounded event store: what makes its SSE streams resumable.

Every event the server sends on a session's streams (the standalone GET stream is stream 0,
each POST reply that became a stream gets the next number) is recorded here before it is
written, under an id ``<stream>-<seq>``: ``seq`` counts every event of the session, so ids
are unique across the session's streams and say which stream they belong to. A client that
lost its connection GETs with ``Last-Event-ID`` and is given the events of *that* stream after
that id, then the stream's live events until it ends.

The store is bounded (a number of events and a number of bytes, oldest dropped first), so a
client that never comes back cannot make the server hold more than that per session. Since
every seq is recorded, the retained events are contiguous and an id is found by arithmetic.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

__all__ = ["Event", "EventStore", "Lookup", "parse_event_id"]


@dataclass(frozen=True, slots=True)
class Event:
    seq: int
    stream: int
    data: bytes          # one JSON-RPC frame; empty for a priming event (nothing to replay)

    @property
    def id(self) -> str:
        return f"{self.stream}-{self.seq}"


def parse_event_id(text: str) -> tuple[int, int] | None:
    """``(stream, seq)`` of an id this store issued; ``None`` when it cannot be one."""
    stream, sep, seq = text.strip().partition("-")
    if not sep or not stream.isdigit() or not seq.isdigit():
        return None
    return int(stream), int(seq)


class Lookup:
    """Why a ``Last-Event-ID`` cannot be resumed (``None`` from :meth:`EventStore.find`
    means it can)."""

    MALFORMED = "malformed"
    UNKNOWN = "unknown"
    DROPPED = "dropped"


class EventStore:
    """The events of one session, at most ``max_events`` of them and ``max_bytes`` of data."""

    def __init__(self, max_events: int = 1000, max_bytes: int = 8 * 1024 * 1024) -> None:
        if max_events < 1 or max_bytes < 1:
            raise ValueError("the event store needs room for at least one event and one byte")
        self._max_events = max_events
        self._max_bytes = max_bytes
        self._cond = threading.Condition()
        self._events: deque[Event] = deque()
        self._bytes = 0
        self._next_seq = 1
        self._next_stream = 1
        self._open: set[int] = {0}     # streams whose last event has not been recorded yet
        self._delivered0 = 0           # the standalone stream: last seq handed to a reader
        self._closed = False

    # -- writing -----------------------------------------------------------------------------

    def open_stream(self) -> int:
        """A new stream number (a POST reply becoming a stream)."""
        with self._cond:
            stream = self._next_stream
            self._next_stream += 1
            self._open.add(stream)
            return stream

    def record(self, stream: int, data: bytes, *, last: bool = False) -> Event:
        """Keep one event of ``stream`` (``last``: the stream ends with it) and return it."""
        with self._cond:
            event = Event(self._next_seq, stream, data)
            self._next_seq += 1
            self._events.append(event)
            self._bytes += len(data)
            while len(self._events) > self._max_events or (
                    self._bytes > self._max_bytes and len(self._events) > 1):
                self._bytes -= len(self._events.popleft().data)
            if last:
                self._open.discard(stream)
            self._cond.notify_all()
            return event

    def end(self, stream: int) -> None:
        """``stream`` will carry nothing more (its followers finish what is stored)."""
        with self._cond:
            self._open.discard(stream)
            self._cond.notify_all()

    def close(self) -> None:
        """The session ended: every follower stops."""
        with self._cond:
            self._closed = True
            self._events.clear()
            self._bytes = 0
            self._cond.notify_all()

    # -- reading -----------------------------------------------------------------------------

    def find(self, last_event_id: str) -> tuple[int, int] | str:
        """``(stream, seq)`` to resume after, or why not (a :class:`Lookup` value)."""
        parsed = parse_event_id(last_event_id)
        if parsed is None:
            return Lookup.MALFORMED
        stream, seq = parsed
        with self._cond:
            if seq >= self._next_seq or stream >= self._next_stream:
                return Lookup.UNKNOWN
            first = self._events[0].seq if self._events else self._next_seq
            if seq < first:
                return Lookup.DROPPED
            if self._events[seq - first].stream != stream:
                return Lookup.UNKNOWN
            return stream, seq

    def take(self, stream: int, after: int | None, timeout: float) -> tuple[list[Event], bool]:
        """The events of ``stream`` after seq ``after`` (``None``: the standalone stream's
        undelivered ones), waiting up to ``timeout`` for one; and whether the stream goes on
        after them. Priming events (empty ``data``) are among them: the reader skips them but
        moves past them."""
        with self._cond:
            while True:
                cursor = self._delivered0 if after is None else after
                events = [e for e in self._events if e.stream == stream and e.seq > cursor]
                going_on = not self._closed and stream in self._open
                if events or not going_on or timeout <= 0:
                    break
                if not self._cond.wait(timeout):
                    timeout = 0
            if stream == 0 and events:
                self._delivered0 = max(self._delivered0, events[-1].seq)
            return events, going_on

    def stats(self) -> tuple[int, int]:
        """``(events, bytes)`` held now."""
        with self._cond:
            return len(self._events), self._bytes
