"""One in-flight request and the small lock its caller sleeps on.

Each :class:`Call` is completed exactly once. The session guarantees it without a lock of its
own: a call is completed only by the thread that *popped* it from the session's pending table
(``dict.pop`` is atomic), whether that thread saw its response, its timeout, a cancel or the
connection's death. Whoever loses the race finds nothing to pop and does nothing.

The waiter itself is a plain ``threading.Lock`` created locked: the caller blocks in
``acquire(timeout)`` and the completer ``release()``\\ s it. That is the cheapest blocking
primitive CPython has (no ``Condition``, no per-wait allocation), and a timed ``acquire`` is
interrupted by a real SIGINT, so Ctrl-C works while a call waits.

The lock is made only when the caller is about to sleep (:meth:`Call.waiter`): a caller that
reads its own answer (the sequential case) never sleeps, and would pay for allocating and
acquiring a lock it never uses. Why no wake-up is lost: the waiter first publishes the lock,
then tests the conditions it waits for (``done``; the reader role granted); the completer
first sets ``done`` (the granter sets the role's holder), then reads ``lock``. Under the GIL
these plain attribute stores and loads happen in one order, so either the completer sees the
lock and releases it, or the waiter sees ``done`` (or the grant) and does not sleep.
"""

from __future__ import annotations

import concurrent.futures
import math
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcpsync.session._future import RequestFuture

ProgressCallback = Callable[[float, "float | None", "str | None"], None]

__all__ = ["Call", "ProgressCallback"]

_allocate_lock = threading.Lock


class Call:
    """A request we sent and have not settled yet.

    ``deadline`` is a ``time.monotonic()`` value (``math.inf``: no limit); progress may move it
    forward (``reset_timeout_on_progress``) but never past ``limit``, ``max_timeout`` after
    sending. ``future`` is set for :meth:`Session.submit` calls; ``attended`` is false for them,
    because no thread sleeps on the lock and the reader must enforce the deadline itself.

    ``ordered`` calls (those with a progress callback) are not settled by the thread that reads
    their response: it marks them ``answered`` and queues the settling on the dispatcher,
    behind every progress callback queued before, so the caller never sees its result before
    the progress that preceded it. Nothing else changes for them: a call that is ``answered``
    is out of the pending table, so no timeout, cancel or loss can settle it a second time.

    A ``Call`` may be reused: the session's usual path gives a call's object back to one
    spare (on its ``Role``) and its next call takes it instead of making a new one. The
    rule (``Session._request``): only a call of that path whose own caller popped it with
    its answer, that never made its lock, that gave the reader role back and returned
    normally goes back; any other (a timeout, an error, a Ctrl-C, an answer another thread
    read) is left to whoever holds it, and never reused. So nothing may keep a reference
    to a ``Call`` that outlives its call unless that path cannot give it back: code that
    logs, queues or remembers a call must keep it from that rule (make its lock, or settle
    it with an error), or copy what it needs (its ``id``, ``method``). Whoever compares
    calls across time compares their ``id`` too (the background reader does).
    """

    __slots__ = (
        "answered", "attended", "cancellable", "deadline", "done", "error", "future", "id",
        "key", "limit", "lock", "method", "ordered", "params", "progress", "reset", "result",
        "timeout",
    )

    def __init__(self, rid: int, method: str, params: Any, timeout: float,
                 progress: ProgressCallback | None, reset: bool, cancellable: bool,
                 now: float, max_timeout: float, attended: bool = True,
                 ordered: bool = False) -> None:
        self.id = rid
        self.key = rid   # the session's in-flight table is keyed by the integer id itself
        self.method = method
        self.params = params
        self.timeout = timeout
        self.progress = progress
        self.reset = reset and not math.isinf(timeout)
        self.cancellable = cancellable
        self.attended = attended
        self.ordered = ordered
        self.answered = False
        self.deadline = now + timeout
        self.limit = now + max_timeout
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None
        self.future: RequestFuture | None = None
        self.lock: threading.Lock | None = None   # made by waiter(), on the first sleep

    def waiter(self) -> threading.Lock:
        """The lock the caller sleeps on, made (locked) on first use. Only the call's own
        caller calls this, and only before it tests what it waits for (see the module
        docstring: that order is what makes a lazily made lock safe)."""
        lock = self.lock
        if lock is None:
            lock = _allocate_lock()
            lock.acquire()
            self.lock = lock
        return lock

    def finish(self, result: Any, error: BaseException | None, *, deliver: bool = True) -> None:
        """Settle the call. Only the thread that popped it from the pending table calls this."""
        self.result = result
        self.error = error
        self.done = True   # before reading self.lock: see the module docstring
        lock = self.lock
        if lock is not None:  # self.signal(), inlined: this runs once per call
            try:  # noqa: SIM105 - try/except is free on the hot path, contextlib.suppress is not
                lock.release()
            except RuntimeError:  # already released: a wake-up is pending anyway
                pass
        future = self.future
        if future is not None and deliver:
            try:
                if error is None:
                    future.set_result(result)
                else:
                    future.set_exception(error)
            except concurrent.futures.InvalidStateError:  # cancelled meanwhile: nothing to do
                pass

    def signal(self) -> None:
        """Wake the thread sleeping on this call (completion, or the reader role granted).
        The caller has set what the sleeper tests (``done``, the role's holder) before this:
        a sleeper that has not made its lock yet sees that instead."""
        lock = self.lock
        if lock is None:
            return
        try:  # noqa: SIM105 - try/except is free on the hot path, contextlib.suppress is not
            lock.release()
        except RuntimeError:  # already released: a wake-up is pending anyway
            pass

    def progressed(self, now: float) -> None:
        """A progress notification arrived: restart the clock, never beyond ``limit``."""
        if self.reset:
            deadline = now + self.timeout
            self.deadline = deadline if deadline < self.limit else self.limit

    def __repr__(self) -> str:
        state = "done" if self.done else "pending"
        return f"<Call {self.id} {self.method!r} {state}>"
