"""The transport contract: what every transport gives the session, and what crosses between them.

Lives below the session and beside no particular transport, so that the session and each
transport can use these without importing one another's private modules.

:class:`Transport` is the contract. A transport is a *pull* transport: the session asks it
for what arrived (``receive``) rather than being called back, because the thread that reads
is chosen by the session (a caller waiting for its only answer reads it itself; otherwise the
background reader does). Its thread rules:

- ``receive`` is called by one thread at a time (whoever holds the session's reader role),
  never concurrently with itself; it may be called from different threads in turn.
- ``wake`` may be called from any thread at any time, also while another thread is inside
  ``receive``: it makes that ``receive`` (or the next one) return soon, with what it has or
  an empty list. A spurious wake-up is harmless.
- ``send`` and ``send_bytes`` may be called from many threads at once; each frame goes out
  whole (frames never interleave). They raise :class:`TransportClosed` (a
  ``ConnectionLost``) once the connection is gone.
- ``close`` is idempotent and may be called from any thread, also while another thread is
  inside ``receive`` or ``send``; after it, ``receive`` returns ``None`` (end of input).
- ``returncode``/``wait_exit``/``stderr_tail``/``stderr_excerpt`` say how a server process
  ended and what it said on stderr; a transport without a process takes them from
  :class:`NoProcess`.

Optional extras, looked for by the session: ``send_bytes_until(frame, deadline)`` (a write
bounded by a deadline, raising :class:`WriteTimedOut`; stdio has it, because a server that
stops reading its stdin can block a write forever), marked by :func:`takes_lines` when
it also takes ``send_bytes_until(line, deadline, True)``, a frame that already ends with its
newline (stdio: the session serialises a tool call's line so, which saves a copy of the
line per call; a transport without it is handed the frame without the newline), and
``hurry()`` (shorten the shutdown grace of a program that never answered).

``CallFailed``: how a push transport fails one pending call with a specific error.

A pull transport returns decoded messages from ``receive()``; an HTTP exchange can also end
in an error no JSON-RPC message expresses (a 5xx, an expired session, a refused redirect, an
auth hook that raised). The transport returns a :class:`CallFailed` item among the messages,
and the session fails the call with that id by raising ``error`` (with the usual
"calling tool 'x' on server 'y'" context added when the error's message lacks it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from mcpsync._names import safe
from mcpsync.errors import ConnectionLost
from mcpsync.jsonrpc import Batch, Message, ParseError, RequestId, StreamError

__all__ = ["CallFailed", "NoProcess", "Transport", "TransportClosed",
           "WriteTimedOut", "safe_name", "takes_lines"]

#: The thread- and logger-safe form of a display name; public here since the stdio transport
#: exported it first.
safe_name = safe

_Fn = TypeVar("_Fn", bound=Callable[..., Any])


def takes_lines(send_bytes_until: _Fn) -> _Fn:
    """Mark a ``send_bytes_until`` that also takes ``(line, deadline, True)``, a frame that
    already ends with its newline. The mark is on the function, not the class: a subclass
    or a wrapper whose own ``send_bytes_until`` takes frames only is not marked, so the
    session hands it frames without their newline (a mark on the class would be inherited
    by a subclass whose override takes two arguments, and its tool calls would fail)."""
    send_bytes_until.send_takes_lines = True  # type: ignore[attr-defined]
    return send_bytes_until


def fuses(send_bytes_until: Callable[..., Any], receive: Callable[..., Any]
          ) -> Callable[[_Fn], _Fn]:
    """Mark a transport's ``exchange`` as doing exactly what ``send_bytes_until`` and then
    ``receive`` (these two functions) do. The session takes the exchange only when the
    transport's own ``send_bytes_until`` and ``receive`` are these functions and its class
    defines the exchange: a subclass that overrides either, or a wrapper that forwards
    attributes to a transport inside it, keeps the two calls, so that what it added to them
    still runs. Decided once, when the session is made."""
    def mark(exchange: _Fn) -> _Fn:
        exchange.fuses = (send_bytes_until, receive)  # type: ignore[attr-defined]
        return exchange
    return mark


class ReadBroke(Exception):
    """Internal: a transport's ``exchange`` wrote the request, and then its read failed with
    an error that is not a :class:`~mcpsync.jsonrpc.StreamError` (a bug). Raised from that
    error, so that the session loses the connection as it does when ``receive`` fails so,
    rather than treating the call as one whose sending was interrupted."""


class TransportClosed(ConnectionLost):
    """The pipe to the server is gone (it exited, or the transport was closed).

    Internal: the session turns it into ``ServerExited`` or ``ConnectionLost`` with context.
    ``reason`` is set when the transport closed the pipe itself because the stream broke (a
    frame the server would not read): then that is why the connection ended, not an exit.
    """

    reason: StreamError | None = None


class CallFailed:
    """Fail the pending request ``id`` with ``error`` (an exception instance)."""

    __slots__ = ("error", "id")

    def __init__(self, id: RequestId, error: BaseException) -> None:
        self.id = id
        self.error = error

    def __repr__(self) -> str:
        return f"CallFailed({self.id.raw}, {self.error!r})"


class WriteTimedOut(Exception):
    """Internal: the deadline passed before a frame was written.

    ``written`` is how many bytes of it went out: 0 means the server saw nothing of this
    request; more means a :class:`FrameFinisher` is writing the rest.
    """

    def __init__(self, written: int, size: int) -> None:
        super().__init__(f"{written} of {size} bytes written")
        self.written = written
        self.size = size


class Transport(Protocol):
    """What the session needs from a transport; the thread rules are in the module docstring.

    ``kind`` names the transport in thread names (``mcpsync-<kind>-reader-<server>``):
    ``"stdio"``, ``"http"``, ``"memory"``. ``allow_batch`` says whether a JSON array is
    accepted as a frame (2025-03-26 only); the client sets it after the handshake.
    ``receive(timeout)`` returns the decoded items in arrival order (with ``CallFailed``
    from a transport that can fail one call without a reply, such as HTTP), ``[]`` when
    woken or timed out with nothing, and ``None`` at end of input (the server is gone).
    """

    kind: str
    allow_batch: bool

    def send(self, message: Message) -> None: ...
    def send_bytes(self, frame: bytes) -> None: ...
    def receive(self, timeout: float | None
                ) -> Sequence[Message | Batch | ParseError | CallFailed] | None: ...
    def wake(self) -> None: ...
    def close(self) -> None: ...
    def returncode(self) -> int | None: ...
    def wait_exit(self, timeout: float) -> int | None: ...
    def stderr_tail(self) -> str: ...
    def stderr_excerpt(self) -> str: ...


class NoProcess:
    """Mixin for a transport with no server process: no exit status and no stderr.

    The session's messages then read "server 'x' closed its output" with no stderr excerpt.
    """

    def returncode(self) -> int | None:
        """Always ``None``: there is no process to have exited."""
        return None

    def wait_exit(self, timeout: float) -> int | None:
        """Returns ``None`` at once: there is no process to wait for."""
        return None

    def stderr_tail(self) -> str:
        """Always empty: there is no stderr."""
        return ""

    def stderr_excerpt(self) -> str:
        """Always empty: there is no stderr."""
        return ""
