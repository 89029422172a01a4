"""Why a call after the server died gets the error it gets, and how often a modern server is
restarted for the next call (at most 3 times within 60 s; legacy servers never are).

A call made after the connection was lost sent nothing: it gets a fresh error that says the
loss happened earlier and what to do, rather than the error pending calls failed with.
"""

from __future__ import annotations

import collections
import time

from mcpsync.errors import ConnectionLost, ServerExited

__all__ = ["RESTART_LIMIT", "RESTART_WINDOW", "RestartBudget", "dead_error"]

RESTART_LIMIT = 3          # modern stdio restarts ...
RESTART_WINDOW = 60.0      # ... within this many seconds


class RestartBudget:
    """The restarts of the last ``RESTART_WINDOW`` seconds (the caller holds its lock)."""

    def __init__(self) -> None:
        self._times: collections.deque[float] = collections.deque()

    def __len__(self) -> int:
        """How many restarts were counted (the window is applied when one is taken)."""
        return len(self._times)

    def take(self) -> bool:
        """Count one restart now; ``False`` (nothing counted) when the budget is spent."""
        now = time.monotonic()
        while self._times and now - self._times[0] > RESTART_WINDOW:
            self._times.popleft()
        if len(self._times) >= RESTART_LIMIT:
            return False
        self._times.append(now)
        return True


def dead_error(lost: ConnectionLost, server: str, suffix: str = "") -> ConnectionLost:
    """A fresh error for a call made after the server died (nothing was sent)."""
    if isinstance(lost, ServerExited):
        return ServerExited(
            f"server {server!r} exited earlier (exit code {lost.exit_code}){suffix}; "
            f"connect again to start it anew", exit_code=lost.exit_code,
            stderr_tail=lost.stderr_tail, server=server)
    return ConnectionLost(f"the connection to server {server!r} was lost earlier "
                          f"({lost}){suffix}; connect again", server=server)
