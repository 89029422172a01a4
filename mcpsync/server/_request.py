"""What one request is answered with: its facts (:class:`Request`) and :class:`Refusal`.

A request is decided per message, never per connection (a modern request carries its own
version and capabilities), so every feature handler receives one :class:`Request` holding what
the router learned: the era, the revision, the client's capabilities *for this request*, the
log threshold, and the in-flight record through which every write for it goes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mcpsync.jsonrpc import RequestId
from mcpsync.server._context import _Call

__all__ = ["DEFERRED", "Refusal", "Request"]


class Refusal(Exception):
    """Raise in a handler to answer the request with a JSON-RPC error of your choice.

    ``Refusal(code, message, data=None)``: the client receives ``{"code": code, "message":
    message, "data": data}`` instead of a result. For a tool that is different from raising
    any other exception, which becomes an ``isError`` result the model reads: a refusal is for
    the caller (a policy said no, a budget ran out), not for the model. The gateway's codes
    -32010, -32011 and -32012 are refusals, as are the server's own -32602 and -32002 answers.
    """

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        if not isinstance(code, int) or isinstance(code, bool):
            raise TypeError(f"a refusal's code must be an int, got {code!r}")
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def __repr__(self) -> str:
        return f"Refusal({self.code}, {self.message!r})"


class _Deferred:
    """The answer comes later (a ``subscriptions/listen`` stream stays open)."""

    def __repr__(self) -> str:
        return "DEFERRED"


DEFERRED: Any = _Deferred()


@dataclass(slots=True)
class Request:
    """One request as the router understood it.

    ``modern``: served under 2026-07-28 rules. ``capabilities``: the client's capabilities that
    apply to this request (modern: its ``_meta``; legacy: what ``initialize`` declared).
    ``threshold()`` is the lowest log level the client asked for, ``None`` for no logs.
    """

    id: RequestId
    method: str
    params: dict[str, Any]
    version: str
    modern: bool
    meta: dict[str, Any]
    capabilities: dict[str, Any]
    call: _Call
    threshold: Callable[[], str | None]
