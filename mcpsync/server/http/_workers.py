"""Refusing to start several worker processes that could not resume each other's rounds.

A 2026-07-28 handler that asks the client for input answers ``input_required`` with its state
sealed in ``requestState``; the client's retry may reach any worker, which must open that
state. Without ``MCPSYNC_STATE_KEY`` (or ``Server(state_keys=...)``) each process seals under a
key of its own, so under a pre-forking server with several workers about half the retries
would fail, long after startup and far from the cause. ``check_workers`` turns that into an
error when the app is built.

How many workers gunicorn runs is read from gunicorn itself: the app is built while gunicorn
loads it, so one of the frames calling us belongs to a gunicorn object (the application, the
worker or the arbiter) holding the parsed configuration, ``cfg.workers``, whatever set it:
command line, ``GUNICORN_CMD_ARGS``, ``WEB_CONCURRENCY`` or a config file. Outside gunicorn
nothing is found and nothing is checked.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["check_workers", "gunicorn_workers"]


def gunicorn_workers() -> int | None:
    """How many workers the gunicorn loading this app runs; ``None``: not under gunicorn."""
    if "gunicorn" not in sys.modules:
        return None
    frame = sys._getframe(1)
    while frame is not None:
        owner = frame.f_locals.get("self")
        if type(owner).__module__.startswith("gunicorn."):
            workers = _workers_of(owner)
            if workers is not None:
                return workers
        frame = frame.f_back   # type: ignore[assignment]
    return None


def _workers_of(owner: Any) -> int | None:
    try:
        workers = owner.cfg.workers
    except Exception:   # not a configured gunicorn object; keep looking
        return None
    return workers if isinstance(workers, int) and not isinstance(workers, bool) else None


def check_workers(name: str, *, keys_shared: bool) -> None:
    """Raise ``RuntimeError`` when gunicorn runs several workers and the state key is not
    shared between them."""
    if keys_shared:
        return
    workers = gunicorn_workers()
    if workers is None or workers <= 1:
        return
    raise RuntimeError(
        f"MCP server {name!r}: gunicorn runs {workers} workers but no shared state key is "
        "set, so a 2026-07-28 input_required round sealed by one worker could not be resumed "
        "by another; set MCPSYNC_STATE_KEY to the same secret in every worker (or pass "
        "Server(state_keys=[...])), or run a single worker (--workers 1)")
