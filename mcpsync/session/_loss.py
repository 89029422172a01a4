"""Connection loss: failing every pending call at once, with an error that says how the
server ended (exit status, stderr, or that it is probably not an MCP server), and tearing
the transport down afterwards.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

from mcpsync.errors import (
    ConnectionLost,
    ProtocolError,
    ServerExited,
)
from mcpsync.session._base import (
    EXIT_WAIT,
    JOIN_TIMEOUT,
    Phase,
    SessionBase,
    logger,
)
from mcpsync.session._call import Call

__all__ = ["LossHandling"]


def _exit_text(code: int | None) -> str:
    if code is None:
        return "closed its output"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


class LossHandling(SessionBase):
    """How a session dies, and the errors that tell of it."""

    def _teardown_after_loss(self) -> None:
        """After a connection loss (not a close): tear the transport down, then ``on_lost``."""
        with self._lock:
            if not Phase.LOSING <= self._phase <= Phase.LOST:
                return   # alive, already torn down, or closed (close() tears down itself)
            self._phase = Phase.TORN_DOWN
        self._aside.loss_settled.wait(EXIT_WAIT + JOIN_TIMEOUT)   # the error on_lost receives
        lost = self._lost
        if lost is None:
            return
        if self._watching:
            hurry = getattr(self._transport, "hurry", None)
            if hurry is not None:
                hurry()
        try:
            self._transport.close()
        except Exception:
            logger.warning("server %r: closing the transport after the connection was lost "
                           "failed", self.name, exc_info=True)
        on_lost = self._aside.on_lost
        if on_lost is not None:
            try:
                on_lost(lost)
            except Exception:
                logger.warning("server %r: the on_lost callback raised", self.name,
                               exc_info=True)

    def _lose_on_write(self, exc: ConnectionLost) -> None:
        """A write found the pipe closed. Usually the server exited; but when the transport
        closed it on purpose (a frame the server would not read) its reason is the loss."""
        reason = getattr(exc, "reason", None)
        if reason is not None:
            self._lose(reason)
        else:
            self._lose(exc, exited=True)

    def _on_eof(self) -> None:
        if self._phase >= Phase.CLOSING:
            return
        self._lose(None, exited=True)

    def _lose(self, cause: BaseException | None, *, exited: bool = False) -> None:
        """The connection is dead: fail every pending call at once, then let the background
        reader tear the transport down.

        ``exited``: stdout reached EOF or a write found the pipe broken, so the server is
        (about to be) gone: the calls fail with :class:`ServerExited` carrying its exit
        status (waited for, event-driven, up to EXIT_WAIT) and stderr. Otherwise (a
        ``StreamError`` such as an oversized frame) they fail with :class:`ConnectionLost`
        chained to ``cause``.
        """
        with self._lock:
            if self._phase > Phase.OPEN:
                return   # another loss is being handled, or the session is closing
            self._phase = Phase.LOSING   # new calls wait for the error built below
        code: int | None = None
        if exited:
            code = self._transport.wait_exit(EXIT_WAIT)
        self._aside.lost_cause = cause
        lost: ConnectionLost
        if exited:
            lost = self._exited_error(f"server {self.name!r}", code, None)
        else:
            lost = ConnectionLost(f"the connection to server {self.name!r} was lost: "
                                  f"{cause}", server=self.name)
        lost.__cause__ = cause
        with self._lock:
            self._lost = lost
            if self._phase is Phase.LOSING:
                self._phase = Phase.LOST
        self._aside.loss_settled.set()
        self._fail_all(lambda call: self._loss_error(call, code, cause, exited))
        with self._lock:
            self._role.want = None
            self._unpark()
        self._transport.wake()

    def _not_mcp_note(self, subject: str | None = None) -> str:
        """Why the program may not be an MCP server, quoting its stdout (and stderr)."""
        first = self._aside.first_garbage
        if first is None:
            seen = "it wrote nothing on stdout"
        else:
            garbage = self._aside.garbage
            count = f" (and {garbage - 1} more such lines)" if garbage > 1 else ""
            seen = f"its first line on stdout was {first!r}{count}, which is not JSON-RPC"
        if subject is None:
            subject = f"server {self.name!r}"
        note = (f"{subject} may not be an MCP server: {seen}; check that the command starts "
                "an MCP server that speaks JSON-RPC on stdin/stdout")
        excerpt = self._transport.stderr_excerpt()
        return note + ("; its stderr ends with:\n" + excerpt if excerpt
                       else " (it wrote nothing to stderr)")

    def _not_an_mcp_server(self) -> None:
        """The handshake got only lines that are not JSON-RPC: fail every pending call with
        ``ProtocolError`` now (the background reader then tears the connection down)."""
        with self._lock:
            if self._phase > Phase.OPEN:
                return
            note = self._not_mcp_note()
            self._lost = ConnectionLost(note, server=self.name)
            self._phase = Phase.LOST
        self._aside.loss_settled.set()
        self._fail_all(lambda call: ProtocolError(
            f"{self._describe(call)}: {note}", server=self.name, method=call.method))
        with self._lock:
            self._role.want = None
            self._unpark()
        self._transport.wake()

    def _exited_error(self, prefix: str, code: int | None, method: str | None,
                      maybe_executed: bool = False) -> ServerExited:
        if self._watching:   # it never answered: say what it did write
            text = (f"{prefix}: server {self.name!r} {_exit_text(code)} before answering, "
                    + self._not_mcp_note("so it"))
            return ServerExited(text, exit_code=code, stderr_tail=self._transport.stderr_tail(),
                                maybe_executed=maybe_executed, server=self.name, method=method)
        excerpt = self._transport.stderr_excerpt()
        text = f"{prefix}: server {self.name!r} {_exit_text(code)}"
        if excerpt:
            text += "; its stderr ends with:\n" + excerpt
        else:
            text += " (it wrote nothing to stderr)"
        return ServerExited(text, exit_code=code, stderr_tail=self._transport.stderr_tail(),
                            maybe_executed=maybe_executed, server=self.name, method=method)

    def _loss_error(self, call: Call, code: int | None, cause: BaseException | None,
                    exited: bool) -> ConnectionLost:
        prefix = self._describe(call)
        error: ConnectionLost
        if exited:
            error = self._exited_error(prefix, code, call.method, maybe_executed=True)
        else:
            error = ConnectionLost(f"{prefix}: the connection was lost: {cause}",
                                   maybe_executed=True, server=self.name, method=call.method)
        error.__cause__ = cause
        return error

    def _after_loss(self, method: str | None, params: Any) -> ConnectionLost:
        """The error for a call made after the connection died."""
        # Another thread may still be building the error (it waits up to EXIT_WAIT for the
        # exit status): wait for it.
        self._aside.loss_settled.wait(EXIT_WAIT + JOIN_TIMEOUT)
        lost = self._lost
        prefix = self._what(method, params)
        error: ConnectionLost
        if lost is None:   # still being built after that wait: say what is known
            error = ConnectionLost(f"{prefix}: the connection to server {self.name!r} was "
                                   "lost", server=self.name, method=method)
        elif isinstance(lost, ServerExited):
            error = self._exited_error(prefix, lost.exit_code, method)
        else:
            error = ConnectionLost(f"{prefix}: {lost}", server=self.name, method=method)
        error.__cause__ = self._aside.lost_cause
        return error

    def _fail_all(self, make: Callable[[Call], BaseException]) -> None:
        pending = self._pending
        for key in list(pending):
            call = pending.pop(key, None)
            if call is not None:
                self._unattended.discard(call)
                call.finish(None, make(call))
