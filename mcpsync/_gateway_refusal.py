"""What a gateway's refusal codes mean: :func:`gateway_refusal`.

Its own small module so that a :class:`~mcpsync.Client`, which needs only this to turn a
``gateway=True`` server's error into :class:`~mcpsync.PolicyRefused`, does not load the whole
policy engine (``mcpsync.policy``, which re-exports it) on ``import mcpsync.client``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from mcpsync.errors import (
    ApprovalRejected,
    BudgetExceeded,
    PolicyDenied,
    PolicyRefused,
    RemoteError,
)

__all__ = ["gateway_refusal"]

_GATEWAY_CLASSES: dict[int, type[PolicyRefused]] = {
    cls.gateway_code: cls for cls in (PolicyDenied, ApprovalRejected, BudgetExceeded)
}


def gateway_refusal(exc: RemoteError, server_id: str, tool: str) -> PolicyRefused | None:
    """The refusal a gateway server meant by ``exc`` (codes -32010…-32012), else ``None``.

    Only for servers configured with ``gateway=True``: from any other server these codes
    mean nothing in particular. The refusal's ``rule`` is ``error.data.rule`` (else the
    error's message), its message carries ``error.data.reason``, and a budget's
    ``retry_after`` is ``error.data.retry_after`` (None when absent).
    """
    cls = _GATEWAY_CLASSES.get(exc.code)
    if cls is None:
        return None
    data = exc.data if isinstance(exc.data, Mapping) else {}
    rule = data.get("rule")
    if not isinstance(rule, str) or not rule:
        rule = exc.remote_message or "gateway"
    reason = data.get("reason")
    why = reason if isinstance(reason, str) and reason else exc.remote_message
    extra: dict[str, Any] = {}
    if cls is BudgetExceeded:
        retry = data.get("retry_after")
        extra["retry_after"] = float(retry) if isinstance(retry, (int, float)) \
            and not isinstance(retry, bool) and math.isfinite(retry) and retry >= 0 else None
    refusal = cls(f"calling tool {tool!r} on server {server_id!r}: the gateway refused it: "
                  f"{why} (code {exc.code}, rule: {rule})", tool=tool, rule=rule,
                  local=False, server=server_id, method="tools/call", **extra)
    refusal.__cause__ = exc
    return refusal
