"""The Streamable HTTP transport (and the 2024-11-05 HTTP+SSE fallback).

The public face of the room; the transport is in ``_transport``, and its connection,
auth, headers, redirects, watchdog and HTTP+SSE pieces in their own private modules.
"""
from __future__ import annotations

from mcpsync.transport.http._transport import (
    HttpTransport as HttpTransport,
)

__all__ = [
    "HttpTransport",
]
