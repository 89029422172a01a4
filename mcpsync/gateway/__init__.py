"""The MCP gateway: one stdio front for an MCP host, configured servers behind it, with a
redacted traffic log.

See ``docs/gateway.md``. The library face is :class:`Gateway`; the command is
``mcpsync gateway --config FILE``.
"""

from __future__ import annotations

from mcpsync.gateway._gateway import FrameObserver as FrameObserver, Gateway as Gateway
from mcpsync.gateway._guard._approval import (
    ApprovalDesk as ApprovalDesk,
    HeldCall as HeldCall,
    Verdict as Verdict,
    approver_from_config as approver_from_config,
    call_digest as call_digest,
)

__all__ = ["ApprovalDesk", "FrameObserver", "Gateway", "HeldCall", "Verdict",
           "approver_from_config", "call_digest"]
