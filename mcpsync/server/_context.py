"""The per-request state of the server: the in-flight record and the handler's ``Context``.

One rule drives this module: once a request is cancelled, or once its response is written,
nothing more is written for it (no response, no progress, no log). Every write for a request
therefore goes through :meth:`_Call.emit` or :meth:`_Call.finish`, which check ``done`` under
the request's own lock, and hand the frame to the write gate together with the request's
cancellation event; the gate checks that event again under its own lock, immediately before
the first byte goes out. So a frame whose write has not begun when the cancel is set is never
written, while a frame already being written is finished (a half-written line would corrupt
the stream).

Setting the cancellation takes no lock at all. It is done by the reader and by the supervisor
while they hold the serve loop's shared condition, and a write can block for as long as the
client does not read its stdout: waiting there for a lock the writer holds would deadlock the
server as soon as that write failed and had to report it under the same condition.
"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from mcpsync.jsonrpc import INTERNAL_ERROR, Message, RequestId, error, notification
from mcpsync.protocol import LOG_LEVELS

__all__ = ["Context"]



class _Send(Protocol):
    """Writes one frame, unless ``cancelled`` is set by the time its write would begin."""

    def __call__(self, message: Message, cancelled: threading.Event | None = None, /) -> None:
        ...


def _stderr(text: str) -> None:
    """One line to the server's stderr, its log channel (stdout belongs to the protocol)."""
    try:
        sys.stderr.write(f"mcpsync.server: {text}\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # stderr closed: nowhere left to report to
        pass


class _Call:
    """One in-flight request: its cancellation event and the gate for every write."""

    __slots__ = ("cancelled", "done", "id", "lock", "method")

    def __init__(self, request_id: RequestId, method: str) -> None:
        self.id = request_id
        self.method = method
        self.cancelled = threading.Event()
        self.lock = threading.Lock()
        self.done = False

    def cancel(self) -> None:
        """Mark cancelled; after this returns no write for the request can begin.

        Lock-free on purpose (see the module docstring): a frame already being written is
        finished, every later one is dropped by the write gate's own check.
        """
        self.cancelled.set()

    def emit(self, message: Message, send: _Send) -> bool:
        """Write a notification for this request unless it is cancelled or answered."""
        with self.lock:
            if self.done or self.cancelled.is_set():
                return False
            send(message, self.cancelled)
            return True

    def finish(self, message: Message | None, send: _Send) -> bool:
        """Write the response (``None``: none) unless cancelled; nothing is written afterwards.

        A result that cannot be serialised (``ValueError`` from the writer, before any byte
        went out) is answered with -32603 instead, because it is our side's failure.
        """
        with self.lock:
            already = self.done or self.cancelled.is_set()
            self.done = True
            if already or message is None:
                return False
            try:
                send(message, self.cancelled)
            except (TypeError, ValueError) as exc:
                _stderr(f"the result of {self.method!r} could not be serialised: {exc}")
                send(error(self.id, INTERNAL_ERROR,
                           f"internal error: the result of {self.method!r} is not valid JSON"),
                     self.cancelled)
            return True


class Context:
    """What a tool handler can do besides returning: notice cancellation, report progress, log.

    A handler receives it through a parameter annotated ``Context`` or named ``ctx``.

    - ``cancelled`` is a ``threading.Event`` set by the client's ``notifications/cancelled``
      and when ``serve()`` stops; a long handler should wait on it (``ctx.cancelled.wait(t)``)
      instead of ``time.sleep(t)``. Whatever the handler returns after a cancel is discarded.
    - ``request_id``, ``protocol_version`` (the revision this request is served under) and
      ``meta`` (the request's ``params._meta``, or ``{}``).
    """

    def __init__(self, call: _Call, *, protocol_version: str, meta: Mapping[str, Any],
                 send: _Send, log_threshold: Callable[[], str | None]) -> None:
        self._call = call
        self._send = send
        self._log_threshold = log_threshold
        self._last_progress: float | None = None
        self.cancelled: threading.Event = call.cancelled
        self.request_id: RequestId = call.id
        self.protocol_version = protocol_version
        self.meta: dict[str, Any] = dict(meta)

    def progress(self, progress: float, total: float | None = None,
                 message: str | None = None) -> None:
        """Send ``notifications/progress`` when the request asked for it (``progressToken``).

        Progress must increase every time (spec): a value not greater than the last one sent
        is dropped and reported on stderr. ``message`` does not exist under 2024-11-05 and is
        left out there. Nothing is sent once the request is answered or cancelled.
        """
        token = self.meta.get("progressToken")
        if token is None or isinstance(token, bool) or not isinstance(token, (int, str)):
            return
        value = float(progress)
        if math.isnan(value) or math.isinf(value):
            raise ValueError(f"progress must be a finite number, got {progress!r}")
        if self._last_progress is not None and value <= self._last_progress:
            _stderr(f"progress {progress!r} for request {self.request_id.raw} dropped: "
                    f"not greater than the last value sent ({self._last_progress!r})")
            return
        params: dict[str, Any] = {"progressToken": token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None and self.protocol_version != "2024-11-05":
            params["message"] = message
        if self._call.emit(notification("notifications/progress", params), self._send):
            self._last_progress = value

    def log(self, level: str, data: Any, logger: str | None = None) -> None:
        """Send ``notifications/message`` when the client asked for this level or a lower one.

        Legacy: the threshold is the session's (``logging/setLevel``, default ``info``).
        Modern: only requests whose ``_meta`` carries ``io.modelcontextprotocol/logLevel`` get
        messages, at or above that level. ``level`` is an RFC 5424 name; an unknown one raises
        ``ValueError`` because it is the handler's bug.
        """
        if level not in LOG_LEVELS:
            raise ValueError(f"unknown log level {level!r}; use one of {', '.join(LOG_LEVELS)}")
        threshold = self._log_threshold()
        if threshold is None or LOG_LEVELS.index(level) < LOG_LEVELS.index(threshold):
            return
        params: dict[str, Any] = {"level": level}
        if logger is not None:
            params["logger"] = logger
        params["data"] = data
        self._call.emit(notification("notifications/message", params), self._send)
