"""What every transport shares with the session: the items and errors that cross between them.

Lives below the session and beside no particular transport, so that the session and each
transport can use these without importing one another's private modules.

``CallFailed``: how a push transport fails one pending call with a specific error.

A pull transport returns decoded messages from ``receive()``; an HTTP exchange can also end
in an error no JSON-RPC message expresses (a 5xx, an expired session, a refused redirect, an
auth hook that raised). The transport returns a :class:`CallFailed` item among the messages,
and the session fails the call with that id by raising ``error`` (with the usual
"calling tool 'x' on server 'y'" context added when the error's message lacks it).
"""

from __future__ import annotations

from mcpsync._names import safe
from mcpsync.errors import ConnectionLost
from mcpsync.jsonrpc import RequestId

__all__ = ["CallFailed", "TransportClosed", "WriteTimedOut", "safe_name"]

#: The thread- and logger-safe form of a display name; public here since the stdio transport
#: exported it first.
safe_name = safe


class TransportClosed(ConnectionLost):
    """The pipe to the server is gone (it exited, or the transport was closed).

    Internal: the session turns it into ``ServerExited`` or ``ConnectionLost`` with context.
    """


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
