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
from collections.abc import Callable
from typing import Any

from mcpsync.errors import Cancelled

__all__ = ["RequestFuture"]

_INTERRUPTED = "interrupted by the user (KeyboardInterrupt)"


class RequestFuture(concurrent.futures.Future[Any]):
    """The pending result of one request. Safe to wait on and cancel from any thread."""

    def __init__(self, cancel: Callable[[str], Cancelled | None],
                 post: Callable[[Callable[[], object]], None]) -> None:
        super().__init__()
        self._cancel_on_wire = cancel
        self._post = post
        self._cancel_error: Cancelled | None = None

    def cancel(self) -> bool:
        """Cancel the request on the wire: ``True`` if no response had arrived, else ``False``."""
        return self._cancel("cancelled by the caller")

    def _cancel(self, reason: str) -> bool:
        if self.cancelled():
            return True
        if self.done():
            return False
        error = self._cancel_on_wire(reason)
        if error is None:  # the response (or a timeout, or connection loss) won the race
            return False
        self._cancel_error = error
        return super().cancel()

    def result(self, timeout: float | None = None) -> Any:
        try:
            return super().result(timeout)
        except KeyboardInterrupt:
            self._cancel(_INTERRUPTED)
            raise
        except concurrent.futures.CancelledError:
            if self._cancel_error is not None and self.cancelled():
                raise self._cancel_error from None
            raise

    def exception(self, timeout: float | None = None) -> BaseException | None:
        try:
            return super().exception(timeout)
        except KeyboardInterrupt:
            self._cancel(_INTERRUPTED)
            raise
        except concurrent.futures.CancelledError:
            if self._cancel_error is not None and self.cancelled():
                raise self._cancel_error from None
            raise

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
