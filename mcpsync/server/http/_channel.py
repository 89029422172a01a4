"""Frames waiting for the thread that owns an HTTP response, and server-sent-event framing.

Only the WSGI thread of a response writes to it. Frames produced elsewhere (a change
announced by the registry's announcer thread, a notification for a legacy session's GET
stream) wait here until that thread takes them, so a slow client never blocks the producer.
"""

from __future__ import annotations

import threading
from collections import deque

__all__ = ["KEEP_ALIVE", "Channel", "event", "priming", "retry"]

#: What a quiet stream sends so that a client that went away is noticed by a failed write.
KEEP_ALIVE = b": keep-alive\n\n"


def event(frame: bytes, event_id: str | None = None) -> bytes:
    """One JSON-RPC frame as a server-sent event (a frame never holds a raw line break);
    ``event_id``: its ``id:`` field, for resumption (legacy sessions)."""
    head = b"" if event_id is None else b"id: " + event_id.encode("ascii") + b"\n"
    return head + b"event: message\ndata: " + frame + b"\n\n"


def priming(event_id: str, retry_ms: int) -> bytes:
    """The event that opens a 2025-11-25 stream: an id to resume from, no data, and how long
    the client waits before reconnecting."""
    return (b"id: " + event_id.encode("ascii") + b"\nretry: " + str(retry_ms).encode()
            + b"\ndata: \n\n")


def retry(retry_ms: int) -> bytes:
    """A ``retry:`` field alone (no event): the reconnection delay, sent before a close."""
    return b"retry: " + str(retry_ms).encode() + b"\n\n"


class Channel:
    """A bounded queue of frames with a close flag; the oldest frame goes when it is full
    (a client that does not read its stream cannot make the server hold everything)."""

    def __init__(self, bound: int = 1024) -> None:
        self._cond = threading.Condition()
        self._frames: deque[bytes] = deque(maxlen=bound)
        self._closed = False
        self._woken = False

    def put(self, frame: bytes) -> None:
        with self._cond:
            if not self._closed:
                self._frames.append(frame)
                self._cond.notify_all()

    def take(self, timeout: float) -> list[bytes] | None:
        """Every waiting frame, ``[]`` after ``timeout`` without any, ``None`` once closed."""
        with self._cond:
            if not self._frames and not self._closed and not self._woken:
                self._cond.wait(timeout)
            if self._closed:
                return None
            frames = list(self._frames)
            self._frames.clear()
            return frames

    def wake(self) -> None:
        """From now on :meth:`take` does not wait (its reader has something else to do)."""
        with self._cond:
            self._woken = True
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed
