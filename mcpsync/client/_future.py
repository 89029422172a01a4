"""``CallFuture``: the future of a client call, which may span several wire requests.

It rides on the session's :class:`RequestFuture` machinery (cancel on the wire, interruptible
waits, done-callbacks off the reader thread) and follows one call through its rounds.
"""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Any

from mcpsync.errors import Cancelled
from mcpsync.session._future import RequestFuture, _WireFuture

__all__ = ["CallFuture"]


class CallFuture(_WireFuture):
    """The future of a client call (``Client.submit``/``submit_tool``): it follows the call's
    wire requests - one, or several through a protocol-version retry or input-required
    rounds - and resolves to the call's final value (a ``CallToolResult`` for a tool).

    ``cancel()`` cancels the current wire request: ``True`` if its response had not arrived
    (or the call is between two rounds, so the next round is never sent), ``False`` once the
    call's final answer is in. ``request_id`` is the JSON-RPC id of the current round.
    ``task`` is the ``TaskHandle`` of a tool call that runs as a task (``None`` until the
    server created it, and for other calls); ``cancel()`` then also sends ``tasks/cancel``.
    """

    def __init__(self, describe: str, server: str, method: str) -> None:
        super().__init__()
        self._describe = describe
        self._server = server
        self._method = method
        self._guard = threading.RLock()  # a done-callback may call cancel() again
        self._wire: RequestFuture | None = None
        self._cancel_error: Cancelled | None = None
        # The task behind a tool call that runs as one (a TaskHandle), once it exists.
        self.task: Any = None

    @property
    def request_id(self) -> int | None:
        """The id of the wire request in flight (``None`` between two rounds)."""
        wire = self._wire
        return wire.request_id if wire is not None else None

    def _attach(self, wire: RequestFuture) -> bool:
        """Make ``wire`` the round in flight; ``False`` (and ``wire`` cancelled) if this
        future was cancelled meanwhile."""
        with self._guard:
            if not self.cancelled():
                self._wire = wire
                return True
        wire.cancel()
        return False

    def _between_rounds(self) -> None:
        """The current round was answered and another one follows."""
        with self._guard:
            self._wire = None

    def _resolve(self, value: Any) -> None:
        with self._guard:
            if not self.done():
                self.set_result(value)

    def _fail(self, error: BaseException) -> None:
        with self._guard:
            if not self.done():
                self.set_exception(error)

    def _cancel(self, reason: str) -> bool:
        with self._guard:
            if self.done():
                return self.cancelled()
            if self.task is not None:
                # tasks/cancel, under the guard: the call waiting on the task stops, and its
                # Cancelled must not settle this future before it is marked cancelled.
                self.task.cancel()
            wire = self._wire
            if wire is not None:
                if not wire._cancel(reason):  # its answer is in: the call is settling
                    return False
                self._cancel_error = wire._cancel_error
            if self._cancel_error is None:
                self._cancel_error = Cancelled(f"{self._describe}: {reason}",
                                               server=self._server, method=self._method)
            return concurrent.futures.Future.cancel(self)

