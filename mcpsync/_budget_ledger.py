"""The use of each budget, per caller: calls, wall time and cost, in fixed windows.

A :class:`~mcpsync.policy.Policy` says what a budget allows; this ledger remembers what was
used. It is shared by every thread that calls (the Manager's callers, the gateway's host
sessions), so every read-and-count happens under one lock: twenty threads racing for the
last call cannot all win. A call is counted when it is checked (reserved) and released if it
is then not sent (an approval said no); its wall time is added when it finishes.

A budget with a ``window`` starts its window at the first call counted after a reset; once
the window is over, the next check starts a fresh one with nothing used. Without a window,
use only goes back to zero on :meth:`BudgetLedger.reset`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mcpsync.policy import Budget

__all__ = ["BudgetLedger", "Charge", "Spent"]


@dataclass
class _Use:
    start: float
    calls: int = 0
    seconds: float = 0.0
    cost: float = 0.0


@dataclass(frozen=True)
class Charge:
    """What one call reserved: the caller, the budgets counted, its cost."""

    caller: str
    keys: tuple[tuple[str, Budget], ...]
    cost: float = 0.0
    started: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class Spent:
    """A budget that refuses the call: which, what ran out, what is left, when it resets."""

    key: str
    budget: Budget
    what: str                       # "calls" | "seconds" | "cost"
    left: dict[str, float]
    retry_after: float | None       # seconds until the window resets; None: no window


class BudgetLedger:
    """Budget use per ``(caller, budget key)``; thread-safe. ``clock`` is for tests."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._use: dict[tuple[str, str], _Use] = {}

    def reset(self) -> None:
        """Forget all use (every caller, every budget)."""
        with self._lock:
            self._use.clear()

    def forget(self, caller: str) -> None:
        """Forget all use of ``caller``: a legacy host session that ended, whose id is never
        counted again, so a gateway serving many sessions does not keep each one's use."""
        with self._lock:
            for each in [k for k in self._use if k[0] == caller]:
                del self._use[each]

    def callers(self) -> int:
        """How many callers have use remembered (what :meth:`forget` frees)."""
        with self._lock:
            return len({k[0] for k in self._use})

    def count(self, key: str, caller: str = "process") -> int:
        """Calls counted against ``key`` for ``caller`` in its current window."""
        with self._lock:
            use = self._use.get((caller, key))
            return 0 if use is None else use.calls

    def _current(self, caller: str, key: str, budget: Budget, now: float) -> _Use:
        use = self._use.get((caller, key))
        if use is None or (budget.window is not None and now >= use.start + budget.window):
            use = _Use(start=now)
            self._use[(caller, key)] = use
        return use

    def reserve(self, caller: str, keys: Sequence[tuple[str, Budget]],
                cost: float = 0.0) -> Charge | Spent:
        """Count one call (and its ``cost``) against every budget, or return the spent one
        (then nothing is counted)."""
        now = self._clock()
        with self._lock:
            uses = [(key, budget, self._current(caller, key, budget, now))
                    for key, budget in keys]
            for key, budget, use in uses:
                what = _spent(budget, use, cost)
                if what is not None:
                    retry = None if budget.window is None else \
                        max(0.0, use.start + budget.window - now)
                    return Spent(key, budget, what, _left(budget, use), retry)
            for _, _, use in uses:
                use.calls += 1
                use.cost += cost
            return Charge(caller, tuple(keys), cost, now)

    def release(self, charge: Charge) -> None:
        """Give back a reserved call that was not sent."""
        with self._lock:
            for key, _ in charge.keys:
                use = self._use.get((charge.caller, key))
                if use is not None and use.start <= charge.started:
                    use.calls = max(0, use.calls - 1)
                    use.cost = max(0.0, use.cost - charge.cost)

    def finish(self, charge: Charge, seconds: float) -> None:
        """Add a finished call's wall time to the budgets it was counted against."""
        with self._lock:
            for key, _ in charge.keys:
                use = self._use.get((charge.caller, key))
                if use is not None and use.start <= charge.started:
                    use.seconds += max(0.0, seconds)


def _spent(budget: Budget, use: _Use, cost: float) -> str | None:
    if budget.calls is not None and use.calls >= budget.calls:
        return "calls"
    if budget.seconds is not None and use.seconds >= budget.seconds:
        return "seconds"
    if budget.cost is not None and use.cost + cost > budget.cost:
        return "cost"
    return None


def _left(budget: Budget, use: _Use) -> dict[str, float]:
    left: dict[str, float] = {}
    if budget.calls is not None:
        left["calls"] = max(0, budget.calls - use.calls)
    if budget.seconds is not None:
        left["seconds"] = round(max(0.0, budget.seconds - use.seconds), 3)
    if budget.cost is not None:
        left["cost"] = max(0.0, budget.cost - use.cost)
    return left
