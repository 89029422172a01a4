"""The Streamable HTTP transport (and the 2024-11-05 HTTP+SSE fallback).

The public face of the room; the transport is in ``_transport``, and its connection,
auth, headers, redirects, watchdog and HTTP+SSE pieces in their own private modules.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcpsync.transport.http._transport import HttpTransport as HttpTransport

__all__ = [
    "HttpTransport",
]


def __getattr__(name: str) -> Any:
    """Load the transport (and ``requests``) on first use, so that importing one of this
    package's light helpers (headers, auth, redirects) stays cheap (PEP 562)."""
    if name == "HttpTransport":
        return importlib.import_module("mcpsync.transport.http._transport").HttpTransport
    raise AttributeError(f"module 'mcpsync.transport.http' has no attribute {name!r}")
