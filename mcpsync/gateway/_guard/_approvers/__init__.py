"""The built-in approvers of approval holds: a terminal, a web page, a command hook.

Each is an :class:`~mcpsync.gateway._guard._approval.ApproverBase`; a library user may pass
any callable ``approve(call) -> bool`` instead.
"""

from __future__ import annotations

from mcpsync.gateway._guard._approvers._command import CommandApprover as CommandApprover
from mcpsync.gateway._guard._approvers._tty import TtyApprover as TtyApprover
from mcpsync.gateway._guard._approvers._web import WebApprover as WebApprover

__all__ = ["CommandApprover", "TtyApprover", "WebApprover"]
