"""``RequestFuture``: the ``concurrent.futures.Future`` that :meth:`Session.submit` returns.

Two departures from a plain ``Future``, both so that it behaves like an MCP request:

- ``cancel()`` cancels *on the wire* (``notifications/cancelled`` on stdio). It returns
  ``True`` while no response has arrived and ``False`` once one has; afterwards ``result()``
  raises :class:`mcpsync.Cancelled` (a ``concurrent.futures.CancelledError``) naming the call.
- A ``KeyboardInterrupt`` while ``result()`` or ``exception()`` waits cancels the request on
  the wire, like Ctrl-C during a blocking call, and is re-raised.
- Done-callbacks never run on the reader thread, which must not block: they are posted to the
  session's dispatcher thread. (A callback added after completion runs at once, in the thread
  that adds it, as with any ``Future``.)
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable
from typing import Any

from mcpsync.errors import Cancelled

__all__ = ["RequestFuture"]

_INTERRUPTED = "interrupted by the user (KeyboardInterrupt)"
#: On the main thread a wait is cut into slices this long: a simulated Ctrl-C (a notebook's
#: "interrupt kernel", ``_thread.interrupt_main``) interrupts no blocking wait, so it is only
#: seen between slices. A real SIGINT interrupts the wait at once.
_MAIN_THREAD_SLICE = 0.1


def _wait_interruptibly(future: concurrent.futures.Future[Any],
                        timeout: float | None) -> float | None:
    """On the main thread, wait for ``future`` in short slices (up to ``timeout``), so that a
    simulated Ctrl-C is noticed; elsewhere do nothing (the caller's own wait is exact).
    Returns what is left of ``timeout`` for the caller's final wait."""
    if future.done() or threading.current_thread() is not threading.main_thread():
        return timeout
    deadline = None if timeout is None else time.monotonic() + timeout
    condition = future._condition  # Future's own monitor
    while not future.done():
        left = _MAIN_THREAD_SLICE if deadline is None else min(
            _MAIN_THREAD_SLICE, deadline - time.monotonic())
        if left <= 0:
            break
        with condition:
            if not future.done():
                condition.wait(left)
    return None if deadline is None else max(0.0, deadline - time.monotonic())


class _WireFuture(concurrent.futures.Future[Any]):
    """What both futures share: ``cancel()`` cancels on the wire, a Ctrl-C while waiting
    cancels too, and a cancelled future raises our :class:`Cancelled` (which is also a
    ``concurrent.futures.CancelledError``) carrying what was being done."""

    _cancel_error: Cancelled | None = None

    def _cancel(self, reason: str) -> bool:
        raise NotImplementedError

    def cancel(self) -> bool:
        """Cancel on the wire: ``True`` if the answer had not arrived, else ``False``."""
        return self._cancel("cancelled by the caller")

    def result(self, timeout: float | None = None) -> Any:
        return self._wait(super().result, timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        error: BaseException | None = self._wait(super().exception, timeout)
        return error

    def _wait(self, get: Callable[[float | None], Any], timeout: float | None) -> Any:
        """Wait through ``Future.result``/``exception``: a Ctrl-C cancels on the wire, and a
        cancelled future raises our :class:`Cancelled` rather than the bare stdlib one."""
        try:
            return get(_wait_interruptibly(self, timeout))
        except KeyboardInterrupt:
            self._cancel(_INTERRUPTED)
            raise
        except concurrent.futures.CancelledError:
            if self._cancel_error is not None and self.cancelled():
                raise self._cancel_error from None
            raise

class RequestFuture(_WireFuture):
    """The pending result of one request. Safe to wait on and cancel from any thread."""

    def __init__(self, cancel: Callable[[str], Cancelled | None],
                 post: Callable[[Callable[[], object]], None], request_id: int) -> None:
        super().__init__()
        self._cancel_on_wire = cancel
        self._post = post
        self._cancel_error: Cancelled | None = None
        self.request_id = request_id
        """The JSON-RPC id of the request on the wire (an ``int``), e.g. to match a
        ``subscriptions/listen`` acknowledgement that names it."""

    def _cancel(self, reason: str) -> bool:
        if self.cancelled():
            return True
        if self.done():
            return False
        error = self._cancel_on_wire(reason)
        if error is None:  # the response (or a timeout, or connection loss) won the race
            return False
        self._cancel_error = error
        return concurrent.futures.Future.cancel(self)


    def add_done_callback(self, fn: Callable[[concurrent.futures.Future[Any]], object]) -> None:
        """Like ``Future.add_done_callback``, but a callback fired by the session's reader runs
        on the dispatcher thread instead."""
        if self.done():
            fn(self)
            return
        post = self._post

        def relay(future: concurrent.futures.Future[Any]) -> None:
            post(lambda: fn(future))

        super().add_done_callback(relay)
