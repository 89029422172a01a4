"""Policy hooks on ``Manager.call_tool``: allow, budgets, approve, and the gateway codes.

A host that lets a model call tools needs a place to say "not this tool", "not more than N
times" and "ask a human first". :class:`Policy` holds those three rules; the Manager runs
them on the caller's thread, in a fixed order (allow, budget, approve), before anything is
sent, so a refusal is a local exception that can never be mistaken for a server's answer.

Gateway servers (``ServerConfig.gateway=True``) apply such rules themselves and answer with
the gateway codes -32010…-32012; :func:`gateway_refusal` turns those answers into the
same exception classes, with ``local=False``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mcpsync.errors import (
    ApprovalRejected,
    BudgetExceeded,
    PolicyDenied,
    PolicyRefused,
    RemoteError,
)

__all__ = ["Policy", "check_call", "gateway_refusal"]

Rule = Callable[[str, str, Mapping[str, Any]], bool]
"""``rule(server_id, tool, args) -> bool``: True lets the call through."""

_GATEWAY_CLASSES: dict[int, type[PolicyRefused]] = {
    cls.gateway_code: cls for cls in (PolicyDenied, ApprovalRejected, BudgetExceeded)
}


@dataclass(frozen=True)
class Policy:
    """The rules the Manager checks before every ``call_tool``.

    - ``allow(server_id, tool, args) -> bool``: False refuses with
      :class:`~mcpsync.errors.PolicyDenied`.
    - ``budgets``: ``{"server_id": n, "server_id/tool": n}``, the number of calls allowed
      since the Manager was made (or ``reset_budgets()``); a spent budget refuses with
      :class:`~mcpsync.errors.BudgetExceeded`. Both keys apply when both are given.
    - ``approve(server_id, tool, args) -> bool``: called last, on the caller's thread, so it
      may block while a human decides; False refuses with
      :class:`~mcpsync.errors.ApprovalRejected`.
    """

    allow: Rule | None = None
    approve: Rule | None = None
    budgets: Mapping[str, int] | None = None

    def __post_init__(self) -> None:
        for name in ("allow", "approve"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise TypeError(f"Policy.{name} must be callable, got {type(value).__name__}")
        if self.budgets is not None:
            if not isinstance(self.budgets, Mapping):
                raise TypeError("Policy.budgets must be a mapping of 'server' or "
                                "'server/tool' to a number of calls")
            for key, limit in self.budgets.items():
                if not isinstance(key, str) or not key:
                    raise ValueError(f"Policy.budgets: invalid key {key!r}")
                if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
                    raise ValueError(f"Policy.budgets[{key!r}] must be an int >= 0, "
                                     f"got {limit!r}")
            # A private copy: the caller's dict may change after the Policy was built.
            object.__setattr__(self, "budgets", dict(self.budgets))


class BudgetCounter:
    """Calls counted per budget key since creation or :meth:`reset`; thread-safe.

    A check reserves the call at once (so twenty threads racing for the last call cannot all
    win); the reservation is released if ``approve`` then says no, because only a call that
    is sent counts.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()

    def count(self, key: str) -> int:
        with self._lock:
            return self._counts.get(key, 0)

    def reserve(self, keys: list[tuple[str, int]]) -> tuple[str, int] | None:
        """Count one call against every ``(key, limit)``; return the spent one instead."""
        with self._lock:
            for key, limit in keys:
                if self._counts.get(key, 0) >= limit:
                    return key, limit
            for key, _ in keys:
                self._counts[key] = self._counts.get(key, 0) + 1
            return None

    def release(self, keys: list[tuple[str, int]]) -> None:
        with self._lock:
            for key, _ in keys:
                self._counts[key] = max(0, self._counts.get(key, 0) - 1)


def _refusal(cls: type[PolicyRefused], server_id: str, tool: str, rule: str,
             why: str) -> PolicyRefused:
    # Arguments are never quoted: they may hold secrets or personal data.
    return cls(f"calling tool {tool!r} on server {server_id!r}: {why} (rule: {rule})",
               tool=tool, rule=rule, local=True, server=server_id, method="tools/call")


def check_call(policy: Policy | None, counter: BudgetCounter, server_id: str, tool: str,
               args: Mapping[str, Any]) -> None:
    """Run allow, then the budgets, then approve; count the call when all agree.

    Raises :class:`PolicyDenied`, :class:`BudgetExceeded` or :class:`ApprovalRejected`
    (``local=True``). On return the call is counted, and the caller sends it.
    """
    if policy is None:
        return
    if policy.allow is not None and not policy.allow(server_id, tool, args):
        raise _refusal(PolicyDenied, server_id, tool, "allow",
                       "the policy's allow rule refused it")
    budgets = policy.budgets or {}
    keys = [(key, budgets[key]) for key in (server_id, f"{server_id}/{tool}") if key in budgets]
    if keys:
        spent = counter.reserve(keys)
        if spent is not None:
            key, limit = spent
            raise _refusal(BudgetExceeded, server_id, tool, f"budgets[{key!r}]",
                           f"the budget of {limit} call{'s' if limit != 1 else ''} for "
                           f"{key!r} is spent")
    if policy.approve is not None:
        try:
            approved = policy.approve(server_id, tool, args)
        except BaseException:
            counter.release(keys)
            raise
        if not approved:
            counter.release(keys)
            raise _refusal(ApprovalRejected, server_id, tool, "approve",
                           "the approve callback rejected it")


def gateway_refusal(exc: RemoteError, server_id: str, tool: str) -> PolicyRefused | None:
    """The refusal a gateway server meant by ``exc`` (codes -32010…-32012), else ``None``.

    Only for servers configured with ``gateway=True``: from any other server these codes
    mean nothing in particular.
    """
    cls = _GATEWAY_CLASSES.get(exc.code)
    if cls is None:
        return None
    rule = exc.remote_message or "gateway"
    refusal = cls(f"calling tool {tool!r} on server {server_id!r}: the gateway refused it "
                  f"(code {exc.code}: {exc.remote_message})", tool=tool, rule=rule,
                  local=False, server=server_id, method="tools/call")
    refusal.__cause__ = exc
    return refusal
