"""The stdio transport: a server process spoken to over its stdin and stdout.

The public face of the room; the transport's I/O paths are in ``_transport``, its process
life (start, exit watching, shutdown) in ``_lifecycle``, process start in ``_spawner`` and
``_env``, and the pipe threads in ``_pump``, ``_writer`` and ``_stderr``.
"""
from __future__ import annotations

from mcpsync.transport.stdio._transport import (
    StdioTransport as StdioTransport,
    TransportClosed as TransportClosed,
    WriteTimedOut as WriteTimedOut,
    safe_name as safe_name,
)

__all__ = [
    "StdioTransport",
    "TransportClosed",
    "WriteTimedOut",
    "safe_name",
]
