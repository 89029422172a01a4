"""The gateway's guard: the policy, budgets and approval holds for every host call.

One :class:`Guard` serves one gateway and all its host sessions; the fronts hand it a
:class:`Caller` (the budget key), and the gateway core asks it about each ``tools/call``
(:meth:`Guard.check_call`) and each listed tool (:meth:`Guard.visible`). Refusals become
the gateway codes -32010…-32012 with ``error.data`` saying why (see ``_frames``); the
config file's ``mcpsync`` key is read by ``_schema``; ``_hooks`` is the glue the gateway's
routing calls.
"""

from __future__ import annotations

from mcpsync.gateway._guard._core import Caller, Guard, Hold, Refusal
from mcpsync.gateway._guard._schema import GuardSettings, read_guard_settings

__all__ = ["Caller", "Guard", "GuardSettings", "Hold", "Refusal", "read_guard_settings"]
