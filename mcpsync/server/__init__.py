"""A minimal MCP server with a tool registry, serving both protocol eras.

The public face of the room; ``_server`` holds the registry, ``_router`` dispatches
requests, ``_loop`` reads and writes the pipes, and the rest validate and shape results.
"""
from __future__ import annotations

from mcpsync.server._server import (
    Context as Context,
    Server as Server,
    ToolHandler as ToolHandler,
)

__all__ = [
    "Context",
    "Server",
    "ToolHandler",
]
