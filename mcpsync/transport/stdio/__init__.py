"""The stdio transport: a server process spoken to over its stdin and stdout.

The public face of the room; the transport's I/O paths are in ``_transport``, its process
life (start, exit watching, shutdown) in ``_lifecycle`` (without a pidfd that reads the exit
status, ``_by_pid``), process start in ``_spawner`` and ``_env``, and the pipe threads in
``_pump``, ``_writer`` and ``_stderr``.
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
    """``_pump`` (the stdout pump of pipes that cannot be ``poll()``-ed, Windows only) and
    ``_by_pid`` (the exit read and reaped by pid, for Linux without a pidfd that reads it)
    on first attribute access (PEP 562): ``_pump`` for the annotations that name it through
    this package; ``_by_pid``, which no annotation names, so that it too reads as an
    attribute of the package before it is loaded (as each of this package's modules did
    before these two were taken out of its import). No call reads this package's
    attributes, so this slows no call down."""
    if name in ("_pump", "_by_pid"):
        return importlib.import_module(f"mcpsync.transport.stdio.{name}")
    raise AttributeError(f"module 'mcpsync.transport.stdio' has no attribute {name!r}")
