"""The MCP gateway: one stdio front for an MCP host, configured servers behind it, with a
redacted traffic log.

See ``docs/gateway.md``. The library face is :class:`Gateway`; the command is
``mcpsync gateway --config FILE``.
"""

from __future__ import annotations

from mcpsync.gateway._gateway import FrameObserver as FrameObserver, Gateway as Gateway

__all__ = ["FrameObserver", "Gateway"]
