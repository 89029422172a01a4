"""Waiting for many servers' exits on one thread: one ``poll()`` over all their pidfds.

Closing fifty servers used to take a thread per server, each blocked in a ``poll()`` of its
own pidfd and each sending its own server's signals. On a small machine those fifty threads
cost more CPU than the close itself (their start, their wake-ups, their joins), beside fifty
exiting servers that need the same cores. Here one thread polls every pidfd at once and takes
each server's shutdown steps when they fall due (SIGTERM after its stdin grace, SIGKILL after
its TERM grace: see :meth:`ProcessLifecycle.exit_step`), so that each server keeps its own
schedule and one that lingers never delays another's signals or the report of its exit.

Only servers claimed with :meth:`ProcessLifecycle.claim_exit_wait` take part; their
``close()`` afterwards finds them exited (or resumes where the wait stopped) and tears down
their threads and descriptors as before.
"""

from __future__ import annotations

import math
import select
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from ._lifecycle import ProcessLifecycle, _poll_ms

__all__ = ["wait_for_exits"]

T = TypeVar("T", bound=ProcessLifecycle)


def wait_for_exits(claimed: Sequence[tuple[int, T]], done: Callable[[T], object],
                   deadline: float) -> None:
    """Wait for every ``(pidfd, transport)`` claimed with ``claim_exit_wait``, taking each
    one's shutdown steps when due; call ``done(transport)`` as each exits, or its wait is
    over (SIGKILL sent and its wait passed), or ``deadline`` (a ``time.monotonic()``
    instant) comes. Each claim is released just before its ``done``, and every claim is
    released and reported even when this raises (``done`` is then called for the rest)."""
    pending = dict(claimed)
    poller = select.poll()
    for fd in pending:
        poller.register(fd, select.POLLIN)
    due = dict.fromkeys(pending, 0.0)   # 0: look at once (the stdin grace may be over)

    def finish(fd: int) -> None:
        poller.unregister(fd)
        transport = pending.pop(fd)
        del due[fd]
        transport.release_exit_wait()
        done(transport)

    try:
        while pending:
            now = time.monotonic()
            if now >= deadline:
                break
            soonest = math.inf
            for fd, at in list(due.items()):
                if at <= now:
                    at = due[fd] = pending[fd].exit_step(now)
                    if at == math.inf:
                        finish(fd)
                        continue
                soonest = min(soonest, at)
            if not pending:
                break
            for fd, _ in poller.poll(_poll_ms(min(soonest, deadline) - now)):
                if fd in pending:   # POLLIN: the process exited (it is not reaped yet)
                    finish(fd)
    finally:
        while pending:
            finish(next(iter(pending)))
