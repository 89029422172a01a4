"""``CallFailed``: how a push transport fails one pending call with a specific error.

A pull transport returns decoded messages from ``receive()``; an HTTP exchange can also end
in an error no JSON-RPC message expresses (a 5xx, an expired session, a refused redirect, an
auth hook that raised). The transport returns a :class:`CallFailed` item among the messages,
and the session fails the call with that id by raising ``error`` (with the usual
"calling tool 'x' on server 'y'" context added when the error's message lacks it).
"""

from __future__ import annotations

from mcpsync.jsonrpc import RequestId

__all__ = ["CallFailed"]


class CallFailed:
    """Fail the pending request ``id`` with ``error`` (an exception instance)."""

    __slots__ = ("error", "id")

    def __init__(self, id: RequestId, error: BaseException) -> None:
        self.id = id
        self.error = error

    def __repr__(self) -> str:
        return f"CallFailed({self.id.raw}, {self.error!r})"
