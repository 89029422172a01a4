"""The session engine: correlation, timeouts, cancellation and server->client requests.

The public face of the room; the engine itself is in ``_engine``, a call's waiter in
``_call``, ordered delivery and the callback pool in ``_delivery``, futures in ``_future``.
"""
from __future__ import annotations

from mcpsync.session._engine import (
    DEFAULT_MAX_TIMEOUT as DEFAULT_MAX_TIMEOUT,
    RequestFuture as RequestFuture,
    Session as Session,
    SessionTransport as SessionTransport,
)

__all__ = [
    "DEFAULT_MAX_TIMEOUT",
    "RequestFuture",
    "Session",
    "SessionTransport",
]
