"""Deadlines and cancellations: a call that timed out, was interrupted or was cancelled
through its future is settled here, and ``notifications/cancelled`` is written without
ever making a caller wait past its own deadline.
"""

from __future__ import annotations

import math
import time

from mcpsync.errors import (
    Cancelled,
    ConnectionLost,
    RequestTimeout,
)
from mcpsync.jsonrpc import Message, notification as notification_message, serialize
from mcpsync.session._base import (
    SessionBase,
    logger,
)
from mcpsync.session._call import Call
from mcpsync.transport.base import WriteTimedOut

__all__ = ["Cancelling"]


class Cancelling(SessionBase):
    """Timeouts, abandonment and the cancellations they write."""

    def _expire(self, call: Call) -> None:
        """The deadline passed: cancel on the wire (if allowed) and fail with RequestTimeout."""
        self._release_role(call)
        if self._pending.pop(call.key, None) is None:
            return  # settled meanwhile
        self._unattended.discard(call)
        if call.cancellable:
            self._send_cancel(call, f"timed out after {call.timeout:g} s")
            note = "the request was cancelled"
        else:
            note = "this request is not cancelled"
        if self._watching:
            note += "; " + self._not_mcp_note()
        call.finish(None, RequestTimeout(
            f"{self._describe(call)}: no answer within {call.timeout:g} s; {note}",
            timeout=call.timeout, server=self.name, method=call.method))

    def _write_timed_out(self, call: Call, exc: WriteTimedOut) -> None:
        """The deadline passed while the request was being written (the server does not read
        its input). Nothing written: the server never saw it, so there is nothing to cancel.
        Partly written: the transport finishes the frame on its own thread, and the
        cancellation is queued behind it on the callback pool."""
        if self._pending.pop(call.key, None) is None:
            return
        self._unattended.discard(call)
        if not exc.written:
            note = "nothing of it was sent"
        elif call.cancellable:
            note = (f"{exc.written} of its {exc.size} bytes were sent; the rest is being sent, "
                    "followed by its cancellation")
            self._cancel_later(call)
        else:
            note = (f"{exc.written} of its {exc.size} bytes were sent; the rest is being sent; "
                    "this request is not cancelled")
        call.finish(None, RequestTimeout(
            f"{self._describe(call)}: could not be sent within {call.timeout:g} s because "
            f"server {self.name!r} is not reading its input; {note}",
            timeout=call.timeout, server=self.name, method=call.method))

    def _abandon(self, call: Call, reason: str) -> None:
        """Ctrl-C (or another exception) while waiting or sending: cancel ``call`` and
        settle it."""
        self._release_role(call)
        if self._pending.pop(call.key, None) is None:
            return
        self._unattended.discard(call)
        if call.cancellable:
            self._send_cancel(call, reason)
        call.finish(None, Cancelled(f"{self._describe(call)}: {reason}", server=self.name,
                                    method=call.method))

    def _interrupted_send(self, call: Call, exc: BaseException) -> None:
        """An exception (Ctrl-C above all) came out of registering or sending ``call``: it
        may have reached the server (the write ends the frame it began; the interrupt can
        land after it), so a cancellable call is cancelled on the wire, as an interrupted
        wait cancels it. The call cannot tell whether any of it went out, so the
        cancellation may name a request the server never saw, which receivers ignore. It is
        never left pending (its answer would go nowhere, a listen would stay open on the
        server) nor holding the reader role.

        The role is given back (in ``_abandon``) before ``sending`` is cleared, and only
        this call's ``sending`` is: another caller may be the one writing (this call waited
        for the write lock), and a second Ctrl-C between the two steps then leaves a mark
        the background reader can still act on rather than a holder it would never relieve."""
        self._abandon(call, "interrupted by the user (KeyboardInterrupt)"
                      if isinstance(exc, KeyboardInterrupt) else
                      f"abandoned after {type(exc).__name__}")
        with self._lock:  # the role's fields change under the session's lock
            if self._role.sending is call:
                self._role.sending = None

    def _cancel_future(self, call: Call, reason: str) -> Cancelled | None:
        """``RequestFuture.cancel()``: cancel on the wire unless already settled."""
        if self._pending.pop(call.key, None) is None:
            return None
        self._unattended.discard(call)
        if call.cancellable:
            self._send_cancel(call, reason)
        error = Cancelled(f"{self._describe(call)}: {reason}", server=self.name,
                          method=call.method)
        call.finish(None, error, deliver=False)
        return error

    def _send_notice(self, message: Message, bound: float) -> None:
        """Write a frame that is not a request, waiting at most ``bound`` s for a server that
        does not read its stdin (``WriteTimedOut`` then; a partly written frame is finished,
        or the connection torn down, by the transport). Transports without deadlines (HTTP)
        never block on the server's reading and send as they always did."""
        send_until = getattr(self._transport, "send_bytes_until", None)
        if send_until is None:
            self._transport.send(message)
        else:
            send_until(serialize(message), time.monotonic() + bound)

    def _send_cancel(self, call: Call, reason: str, *, wait: bool = False) -> None:
        """Write ``notifications/cancelled`` for ``call``. On a caller's thread (``wait``
        false) only if the pipe takes it now: otherwise it is handed to the callback pool,
        which waits for the write up to the notice bound, so the caller keeps its deadline."""
        message = notification_message("notifications/cancelled",
                                        {"requestId": call.id, "reason": reason})
        try:
            self._send_notice(message, self._notice_bound if wait else 0.0)
        except WriteTimedOut as exc:
            if exc.written:
                return  # the transport finishes the frame (or tears the connection down)
            if not wait:
                self._pool.submit(lambda: self._send_cancel(call, reason, wait=True))
                return
            logger.warning("server %r: the cancellation of request %d was not sent: the "
                           "server has not read its input for %g s", self.name, call.id,
                           self._notice_bound)
        except ConnectionLost:
            logger.debug("server %r: could not send the cancellation of request %d (the "
                         "connection is gone)", self.name, call.id)

    def _expire_unattended(self, now: float) -> float:
        """Time out submitted calls past their deadline (nobody waits on them); return the
        earliest deadline left. Their cancellations are written from the pool, never here."""
        earliest = math.inf
        for call in list(self._unattended):
            if call.deadline <= now:
                if self._pending.pop(call.key, None) is None:
                    self._unattended.discard(call)
                    continue
                self._unattended.discard(call)
                call.finish(None, RequestTimeout(
                    f"{self._describe(call)}: no answer within {call.timeout:g} s"
                    + ("; the request was cancelled" if call.cancellable else ""),
                    timeout=call.timeout, server=self.name, method=call.method))
                if call.cancellable:
                    self._cancel_later(call)
            elif call.deadline < earliest:
                earliest = call.deadline
        return earliest

    def _cancel_later(self, call: Call) -> None:
        reason = f"timed out after {call.timeout:g} s"
        self._pool.submit(lambda: self._send_cancel(call, reason, wait=True))
