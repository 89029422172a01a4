"""The guard's decisions: a :class:`~mcpsync.policy.Policy` applied per caller.

The rules themselves (globs, argument rules, budgets) live in :mod:`mcpsync.policy`, so the
Manager and the gateway refuse the same calls for the same reasons; this module turns the
policy's :class:`~mcpsync.policy.Decision` into what a gateway needs: a :class:`Refusal` to
answer with, a :class:`Hold` to pass to the approval desk, or None to send the call.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mcpsync._budget_ledger import BudgetLedger, Charge
from mcpsync._codes import APPROVAL_REJECTED, BUDGET_EXCEEDED, DENIED_BY_POLICY
from mcpsync.policy import Policy, decide

__all__ = ["PROCESS", "Caller", "Guard", "Hold", "Refusal"]

_CODES = {"denied": DENIED_BY_POLICY, "budget": BUDGET_EXCEEDED, "approval": APPROVAL_REJECTED}


@dataclass(frozen=True)
class Caller:
    """Whose budget a call counts against.

    ``key``: ``"process"`` on the stdio front (one host per gateway process); on an HTTP
    front the session id, the authenticated principal or the remote address. ``kind`` says
    which of those it is (``"process"``, ``"session"``, ``"principal"``, ``"address"``).
    """

    key: str
    kind: str

    @property
    def label(self) -> str:
        """How an approver's summary names this caller. A legacy session id is what lets a
        host speak in its session, so only a short digest of it is shown."""
        if self.kind == "process":
            return self.key
        if self.kind == "session":
            return f"session {self.session_tag}"
        return f"{self.kind} {self.key}"

    @property
    def session_tag(self) -> str | None:
        """A legacy session's name for logs and summaries: 12 hex digits of the sha256 of its
        id, never the id (``None`` for other callers)."""
        if self.kind != "session":
            return None
        return hashlib.sha256(self.key.encode()).hexdigest()[:12]


#: The one caller of the stdio front.
PROCESS = Caller("process", "process")


@dataclass(frozen=True)
class Refusal:
    """A call the gateway answers itself with ``code`` (-32010, -32011 or -32012)."""

    code: int
    reason: str
    rule: str
    upstream: str
    tool: str
    retry_after: float | None = None
    left: Mapping[str, float] | None = None

    @property
    def message(self) -> str:
        """The error's message: what was refused, why and by which rule (no arguments: they
        may hold secrets)."""
        return (f"the gateway refused tool {self.tool!r} of upstream {self.upstream!r}: "
                f"{self.reason} (rule: {self.rule})")

    def data(self) -> dict[str, Any]:
        """``error.data``: ``reason``, ``rule``, ``upstream``, ``tool``; for budgets
        ``retry_after`` (when the budget resets by itself) and ``left``."""
        data: dict[str, Any] = {"reason": self.reason, "rule": self.rule,
                                "upstream": self.upstream, "tool": self.tool}
        if self.code == BUDGET_EXCEEDED:
            if self.retry_after is not None:
                data["retry_after"] = round(self.retry_after, 3)
            data["left"] = dict(self.left or {})
        return data


@dataclass(frozen=True)
class Hold:
    """A call that may go only once approved: ``rule`` names the rule that holds it.

    It is already counted against its budgets; :meth:`Guard.release` gives that back when
    the approval does not come."""

    rule: str
    caller: Caller
    upstream: str
    tool: str
    arguments: Mapping[str, Any]
    charge: Charge | None = field(default=None, repr=False)


class Guard:
    """Policy + budgets + approval for one gateway (shared by all its host sessions)."""

    def __init__(self, policy: Policy, *, ledger: BudgetLedger | None = None) -> None:
        self.policy = policy
        self.ledger = ledger if ledger is not None else BudgetLedger()

    def check_call(self, caller: Caller, upstream: str, tool: str,
                   arguments: Mapping[str, Any]) -> Refusal | Hold | None:
        """What to do with a call: refuse it, hold it for approval, or (None) send it.

        A call that is held or sent is counted against its budgets now; its wall time is
        added by :meth:`finished`."""
        decision = decide(self.policy, self.ledger, caller.key, upstream, tool, arguments)
        if decision.refused:
            return Refusal(_CODES[decision.kind], decision.reason, decision.rule, upstream,
                           tool, decision.retry_after, decision.left)
        if decision.kind == "hold":
            return Hold(decision.rule, caller, upstream, tool, arguments, decision.charge)
        return None

    def visible(self, caller: Caller, upstream: str, tool: str) -> bool:
        """Whether ``tools/list`` shows the tool to this caller (denied tools are hidden)."""
        return self.policy.visible(upstream, tool)

    def finished(self, caller: Caller, upstream: str, tool: str, seconds: float) -> None:
        """A sent call was answered after ``seconds``: count its wall time."""
        keys = self.policy._budget_keys(upstream, tool)
        if keys:
            started = time.monotonic() - seconds
            self.ledger.finish(Charge(caller.key, tuple(keys), 0.0, started), seconds)

    def release(self, hold: Hold) -> None:
        """A held call that was not approved: it does not count."""
        if hold.charge is not None:
            self.ledger.release(hold.charge)

    def refuse_hold(self, hold: Hold, reason: str, rule: str | None = None) -> Refusal:
        """The -32011 answer for a held call that was not approved."""
        self.release(hold)
        return Refusal(APPROVAL_REJECTED, reason, rule or hold.rule, hold.upstream, hold.tool)
