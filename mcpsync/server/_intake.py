"""The bounded hand-off between the server's reader and its workers (back-pressure).

A client that pipelines requests faster than the handlers answer them must not grow the server
without bound: parsed requests cost many times their size in memory. So what the reader holds
is bounded twice:

- the *queue*: parsed, tracked requests waiting for a worker, at most ``max_queued`` of them
  and ``max_queued_bytes`` of their lines (one is always accepted, however large);
- the *look-ahead*: lines read while the queue is full, kept undecoded, at most
  ``max_queued_bytes`` more. When it is full too, the reader stops reading, the pipe fills,
  and the client's writes wait: the flood is pushed back to where it comes from.

The look-ahead is what keeps cancellation working under a full queue. Each line read into it
that is a small ``notifications/cancelled`` naming a request already tracked (running, or in
the queue) is applied at once, so a running handler sees its cancellation even while the queue
is full and it is the one everybody waits for. A cancellation naming a request that is still in
the look-ahead stays in its place and is applied in order. Only a cancellation (or a response,
below) that arrives when the look-ahead is full waits for room, since the reader has stopped
reading; by then ``max_queued_bytes`` of work lies before it.

A response from the client (an answer to a request a handler sent it) is never queued at all:
it goes to ``dispatcher.deliver_response`` as soon as it is read, because the handler waiting
for it holds a worker and the requests queued behind it may be waiting for that worker. That
holds in the look-ahead too: a line there that does not plainly start like a request (a
top-level ``"method":`` member before any nested value) is decoded on arrival, and delivered
at once if it is a response. An answer inside a batch is delivered when its batch is decoded.

Workers move look-ahead lines into the queue (decoding and tracking them, in order) as they
take work, so no line ever waits for the reader to come back from a blocking read.

Locking. Everything here shares the serve loop's one lock, so the common case keeps its work
outside it: while nothing waits in the look-ahead and the queue has room, the reader decodes,
tracks and (for a cancellation) applies a line before taking the lock, and then only appends
it. That is safe because only the reader makes the queue fuller or adds look-ahead lines, so
room it saw without the lock is still there when it takes it. Look-ahead lines are decoded
under the lock, by the worker that moves them, because their order in the stream must hold
among several workers; that happens only under a flood. Cancelling never waits for anything
(see ``_server_context``), so doing it under the lock cannot deadlock. Each queued frame wakes
one idle worker and each frame taken wakes the reader only, not every thread that waits.

``busy`` counts frames taken and not yet :meth:`Intake.finished`, so the serve loop can tell
that nothing is queued and no handler runs (:meth:`Intake.idle`): then the reader may answer
a request itself (:meth:`Intake.claim`) instead of waking a worker for it.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import Any

from mcpsync.jsonrpc import Batch, Message, ParseError, parse
from mcpsync.server._context import _Call
from mcpsync.server._router import Dispatcher

__all__ = ["DEFAULT_MAX_QUEUED_BYTES", "Intake", "Item"]

DEFAULT_MAX_QUEUED_BYTES = 4 * 1024 * 1024
#: Look-ahead lines up to this size are decoded on arrival to spot a cancellation.
_PEEK_BYTES = 4096
_CANCEL = b"notifications/cancelled"
_METHOD_KEY = b'"method":'

Item = tuple[Message | Batch | ParseError, list[_Call | None]]


class Intake:
    """Queue and look-ahead, under ``lock`` (the serve loop's shared lock).

    ``on_work(delta)`` is called under ``lock`` as frames that need an answer enter (+1) and
    as lines that turn out to need none leave (-1), so that the supervisor's count of
    unanswered frames includes both halves.
    """

    def __init__(self, dispatcher: Dispatcher, lock: threading.Lock, *, max_queued: int,
                 max_queued_bytes: int, on_work: Callable[[int], None]) -> None:
        self._dispatcher = dispatcher
        self._lock = lock
        self._ready = threading.Condition(lock)  # workers wait here for a frame
        self._room = threading.Condition(lock)  # the reader waits here for look-ahead room
        self._max_queued = max_queued
        self._max_bytes = max_queued_bytes
        self._on_work = on_work
        self._queue: collections.deque[tuple[Item, int]] = collections.deque()
        self._queued_bytes = 0
        self._ahead: collections.deque[bytes] = collections.deque()
        self._ahead_bytes = 0
        self.busy = 0  # frames taken (or claimed) and not yet finished

    # -- the reader ----------------------------------------------------------------------

    def offer(self, line: bytes, stopping: threading.Event, poll: float) -> None:
        """Reader: take one line; wait (in ``poll`` slices, until ``stopping``) while the
        look-ahead is full."""
        # Read without the lock: only this thread makes the queue fuller or the look-ahead
        # longer, so if there is room now there is still room once the lock is taken.
        if not self._ahead and self._has_room(len(line)):
            item = self._decode(line)
            if item is not None:
                with self._lock:
                    self._enqueue(item, len(line))
            return
        if not _plainly_a_call(line) and self._deliver_early(line):
            return
        with self._lock:
            if len(line) <= _PEEK_BYTES and _CANCEL in line and self._cancel_early(line):
                return
            self._on_work(1)
            self._ahead.append(line)
            self._ahead_bytes += len(line)
            while self._ahead_bytes >= self._max_bytes and not stopping.is_set():
                self._room.wait(poll)

    def claim(self, line: bytes) -> Item | None:
        """Reader, when :meth:`idle`: decode ``line`` for the reader to answer itself.

        Returns the frame to answer (counted as taken: call :meth:`begin` under the lock, then
        :meth:`finished`), or ``None`` when the line needed no answer (a cancellation, a
        response, another notification), which has then been applied.
        """
        return self._decode(line)

    def begin(self) -> None:
        """Under the lock: a frame from :meth:`claim` is being answered."""
        self.busy += 1
        self._on_work(1)

    def idle(self) -> bool:
        """Nothing queued, nothing read ahead, no frame being answered. Exact when called by
        the reader without the lock: only the reader adds work."""
        return self.busy == 0 and not self._queue and not self._ahead

    def finished(self) -> None:
        """Under the lock: a frame taken or claimed has been answered."""
        self.busy -= 1
        self._on_work(-1)

    def wake_idle(self) -> None:
        """Under the lock: wake one worker waiting in :meth:`take` (it returns ``None``)."""
        self._ready.notify()

    def wake_all(self) -> None:
        """Under the lock: wake every worker waiting in :meth:`take` (``serve()`` ends)."""
        self._ready.notify_all()

    def _deliver_early(self, line: bytes) -> bool:
        """Deliver a look-ahead line at once if it is a response; True when it was one."""
        try:
            message = parse(line)
        except ParseError:
            return False
        if not (isinstance(message, Message) and message.method is None
                and message.id is not None):
            return False
        self._dispatcher.deliver_response(message)
        return True

    def _cancel_early(self, line: bytes) -> bool:
        """Apply a cancellation read into the look-ahead now, if it names a tracked request."""
        try:
            message = parse(line)
        except ParseError:
            return False
        if not (isinstance(message, Message) and message.is_notification
                and message.method == "notifications/cancelled"):
            return False
        return self._dispatcher.cancel_notice(message.params)

    # -- the workers ---------------------------------------------------------------------

    def take(self, timeout: float) -> Item | None:
        """Worker: the next frame to answer, or ``None`` after ``timeout`` with none."""
        with self._lock:
            if not self._queue and not self._ahead:
                self._ready.wait(timeout)
            self._refill()
            if not self._queue:
                return None
            item, size = self._queue.popleft()
            self._queued_bytes -= size
            self.busy += 1
            self._refill()
            self._room.notify()  # the reader may be waiting for room
            return item

    def _refill(self) -> None:
        ahead = self._ahead
        while ahead and self._has_room(len(ahead[0])):
            line = ahead.popleft()
            self._ahead_bytes -= len(line)
            self._on_work(-1)
            item = self._decode(line)
            if item is not None:
                self._enqueue(item, len(line))

    # -- shared --------------------------------------------------------------------------

    def _has_room(self, size: int) -> bool:
        queue = self._queue
        return not queue or (len(queue) < self._max_queued
                             and self._queued_bytes + size <= self._max_bytes)

    def _decode(self, line: bytes) -> Item | None:
        """Decode one line, in stream order: a cancel is applied, a request is tracked, and
        the frame to queue is returned; ``None`` for anything that needs no answer."""
        dispatcher = self._dispatcher
        try:
            frame = parse(line, allow_batch=True)
        except ParseError as exc:
            return (exc, [])
        if isinstance(frame, Batch):
            calls: list[_Call | None] = []
            for element in frame:
                if isinstance(element, Message) and _is_cancel(element):
                    dispatcher.cancel_notice(element.params)
                    calls.append(None)
                elif isinstance(element, Message) and _is_answer(element):
                    dispatcher.deliver_response(element)
                    calls.append(None)
                elif isinstance(element, Message):
                    calls.append(dispatcher.track(element))
                else:
                    calls.append(None)
            return (frame, calls)
        if _is_cancel(frame):
            dispatcher.cancel_notice(frame.params)
            return None
        if frame.is_request:
            return (frame, [dispatcher.track(frame)])
        if _is_answer(frame):
            dispatcher.deliver_response(frame)
        return None  # other notifications need no answer

    def _enqueue(self, item: Item, size: int) -> None:
        """Under the lock: queue a decoded frame and wake one idle worker for it."""
        self._on_work(1)
        self._queue.append((item, size))
        self._queued_bytes += size
        self._ready.notify()


def _is_cancel(message: Any) -> bool:
    return bool(message.is_notification and message.method == "notifications/cancelled")


def _is_answer(message: Message) -> bool:
    """A response to one of our requests: no method, and an id to correlate it by (an error
    with ``"id": null`` answers nothing we could find, and is dropped with the strays)."""
    return message.method is None and message.id is not None


def _plainly_a_call(line: bytes) -> bool:
    """Whether ``line`` visibly is a request or notification, without decoding it: its first
    ``"method":`` comes before any nested object or array, so it is a top-level key (a quote
    inside a string is escaped, so ``d":`` ends a key there; only a key such as ``"a\\"method"``
    would fool it, and such a response merely waits its turn). A line that fails this cheap
    test is decoded to see whether it is a response; a call spelled unusually (spaces,
    escapes) only costs that decode."""
    at = line.find(_METHOD_KEY)
    if at <= 0 or line[0] != 0x7B:
        return False
    head = line[1:at]
    return b"{" not in head and b"[" not in head
