"""What the server sends besides answers: failures of one call, requests and
notifications (progress included), and lines that are not JSON-RPC. Server->client requests
are answered on the callback pool, never on a thread that reads.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from mcpsync.errors import (
    ConnectionLost,
    ProtocolError,
    Rejected,
    RemoteError,
)
from mcpsync.jsonrpc import (
    INTERNAL_ERROR,
    METHOD_NOT_FOUND,
    MISSING,
    Message,
    ParseError,
    error as error_response,
    result as result_response,
    serialize,
)
from mcpsync.protocol import remote_error
from mcpsync.session._base import (
    _PROGRESS,
    _USER_REJECTED,
    GARBAGE_WARNINGS,
    HANDSHAKE_GARBAGE,
    SessionBase,
    logger,
)
from mcpsync.session._call import Call
from mcpsync.transport.base import CallFailed, WriteTimedOut

__all__ = ["Incoming"]


class Incoming(SessionBase):
    """Routing of server-sent frames other than plain answers."""

    def _call_failed(self, item: CallFailed) -> None:
        """The transport could not complete a call (an HTTP status, an expired session, an
        auth failure): fail it with the transport's error."""
        value = item.id.value  # only an integer id can be ours (see Session.__init__)
        call = self._pending.pop(value, None) if type(value) is int else None
        if call is None:
            logger.debug("server %r: dropped a failure of unknown or cancelled request %s: %s",
                         self.name, item.id.raw, item.error)
            return
        if call.attended is False:
            self._unattended.discard(call)
        if call.ordered:
            self._settle_later(call, None, item.error)
        else:
            call.finish(None, item.error)

    def _remote_error(self, call: Call, error: dict[str, Any]) -> RemoteError:
        return remote_error(error.get("code"), error.get("message"), error.get("data"),
                            server=self.name, method=call.method, prefix=self._describe(call))

    def _incoming(self, message: Message) -> None:
        """A request or notification from the server."""
        if message.id is not None:
            if not self._pool.submit(lambda: self._answer(message)):
                logger.debug("server %r: request %r arrived while closing; not answered",
                             self.name, message.method)
            return
        if message.method == _PROGRESS:
            self._progress(message.params)
            if not self._aside.observe_progress:
                return
        handler = self._on_notification
        if handler is not None:
            self._dispatcher.post(lambda: handler(message))

    def _progress(self, params: Any) -> None:
        if not isinstance(params, dict):
            return
        token = params.get("progressToken")
        if type(token) is not int:
            logger.debug("server %r: progress for unknown token %r", self.name, token)
            return
        call = self._pending.get(token)
        if call is None:
            logger.debug("server %r: progress for a finished or unknown request %r",
                         self.name, token)
            return
        call.progressed(time.monotonic())
        callback = call.progress
        if callback is None:
            return
        progress = params.get("progress")
        if isinstance(progress, bool) or not isinstance(progress, (int, float)):
            logger.debug("server %r: progress without a number: %r", self.name, params)
            return
        total = params.get("total")
        message = params.get("message")
        self._dispatcher.post(lambda: callback(progress, total, message))

    def _uncorrelated(self, message: Message) -> None:
        logger.warning("server %r answered an error that names no request: %r", self.name,
                       message.error)

    def _garbage_line(self, error: ParseError) -> None:
        self._aside.garbage += 1
        level = logging.WARNING if self._aside.garbage <= GARBAGE_WARNINGS else logging.DEBUG
        logger.log(level, "server %r wrote a line that is not JSON-RPC; skipped: %s",
                   self.name, error)
        rid = error.id
        if rid is None:
            if self._watching:
                if self._aside.first_garbage is None:
                    self._aside.first_garbage = error.excerpt
                if self._aside.garbage >= HANDSHAKE_GARBAGE:
                    self._not_an_mcp_server()
            return
        value = rid.value  # only an integer id can be ours (see Session.__init__)
        call = self._pending.pop(value, None) if type(value) is int else None
        if call is None:
            return
        self._unattended.discard(call)
        failure = ProtocolError(f"{self._describe(call)}: the server answered with an invalid "
                                f"message: {error}", server=self.name, method=call.method)
        failure.__cause__ = error
        call.finish(None, failure)

    def _answer(self, message: Message) -> None:
        """Pool thread: run ``on_request`` and write its answer."""
        method = message.method or ""
        rid = message.id
        assert rid is not None
        handler = self._on_request
        reply: Message
        try:
            if handler is None:
                if method != "ping":
                    raise RemoteError("method not found", code=METHOD_NOT_FOUND,
                                      remote_message=f"method not found: {method}")
                result: Any = {}
            else:
                result = handler(message)
            reply = result_response(rid, result)
        except RemoteError as exc:
            if method == "ping" and exc.code == METHOD_NOT_FOUND:
                reply = result_response(rid, {})
            else:
                data = exc.data if exc.data is not None else MISSING
                reply = error_response(rid, exc.code, exc.remote_message or exc.message, data)
        except Rejected:
            reply = error_response(rid, _USER_REJECTED, "rejected by user")
        except Exception as exc:
            logger.warning("server %r: the callback for %r raised", self.name, method,
                           exc_info=True)
            reply = error_response(rid, INTERNAL_ERROR, str(exc) or type(exc).__name__)
        try:
            frame = serialize(reply)
        except (ValueError, TypeError) as exc:
            frame = serialize(error_response(
                rid, INTERNAL_ERROR, f"the client's answer cannot be encoded: {exc}"))
        try:
            self._send_until(frame, time.monotonic() + self._notice_bound)
        except WriteTimedOut as exc:
            if not exc.written:
                logger.warning("server %r: the answer to %r was not sent: the server has not "
                               "read its input for %g s", self.name, method,
                               self._notice_bound)
        except ConnectionLost:
            logger.debug("server %r: could not answer %r (the connection is gone)",
                         self.name, method)
