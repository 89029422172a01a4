"""The stdio transport: a server process spoken to over its stdin and stdout.

The public face of the room; the transport's I/O paths are in ``_transport``, its process
life (start, exit watching, shutdown) in ``_lifecycle`` (without a pidfd that reads the exit
status, ``_by_pid``), process start in ``_spawner`` and ``_env``, the pipe threads in
``_pump``, ``_writer`` and ``_stderr``, and a sole caller's blocking read in ``_blocking_read``.
"""
from __future__ import annotations

import importlib
from typing import Any

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


def __getattr__(name: str) -> Any:
    """``_pump`` (the stdout pump of pipes that cannot be ``poll()``-ed, Windows only),
    ``_blocking_read`` (a sole caller's blocking first read, loaded by the first tool call)
    and ``_by_pid`` (the exit read and reaped by pid, for Linux without a pidfd that reads
    it) on first attribute access (PEP 562): ``_pump`` and ``_blocking_read`` for the
    annotations that name them through this package; ``_by_pid``, which no annotation
    names, so that it too reads as an attribute of the package before it is loaded (as each
    of this package's modules did before these were taken out of its import). No call reads
    this package's attributes, so this slows no call down."""
    if name in ("_pump", "_blocking_read", "_by_pid"):
        return importlib.import_module(f"mcpsync.transport.stdio.{name}")
    raise AttributeError(f"module 'mcpsync.transport.stdio' has no attribute {name!r}")
