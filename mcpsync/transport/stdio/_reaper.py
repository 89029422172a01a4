"""Waiting for many servers' exits at once: one ``poll()`` over all their pidfds.

Closing fifty servers used to take a thread per server, each blocked in a ``poll()`` of its
own pidfd and each sending its own server's signals. On a small machine those fifty threads
cost more CPU than the close itself (their start, their wake-ups, their joins), beside fifty
exiting servers that need the same cores. Here the closing thread itself polls every pidfd
and hands each server to ``done`` the moment it exits (no thread hop between the exit and
its teardown), while one thread, ``mcpsync-close-wait``, sleeps until the next shutdown
step falls due and takes it (SIGTERM after that server's stdin grace, SIGKILL after its TERM
grace: see :meth:`ProcessLifecycle.exit_step`). The signals live on their own thread so
that a ``done`` that blocks (a teardown joining a thread stuck in a user callback) never
delays another server's SIGTERM; each server keeps its own schedule.

Only servers claimed with :meth:`ProcessLifecycle.claim_exit_wait` take part. One lock
covers the set of servers still waited for: a server leaves it (and its claim is released)
under that lock before ``done`` runs, and the signalling thread signals only servers still
in it, so a signal never races the reaping in their ``close()``.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import threading
import time
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from mcpsync._threads import spawn

from ._lifecycle import ProcessLifecycle, _poll_ms

__all__ = ["wait_for_exits"]

T = TypeVar("T", bound=ProcessLifecycle)


class _Waits(Generic[T]):
    """What the closing thread and the signalling thread share, under ``lock``."""

    def __init__(self, claimed: Sequence[tuple[int, T]]) -> None:
        self.lock = threading.Lock()
        self.pending = dict(claimed)
        self.due = dict.fromkeys(self.pending, 0.0)   # 0: look at once
        self.over: list[tuple[int, T]] = []   # SIGKILLed and its wait passed: given up
        self.stop = threading.Event()
        self.wake_r, self.wake_w = os.pipe()

    def take(self, fd: int) -> T | None:
        """Under the lock: remove a server from the wait and release its claim."""
        transport = self.pending.pop(fd, None)
        if transport is not None:
            del self.due[fd]
            transport.release_exit_wait()
        return transport

    def signal_steps(self) -> None:
        """Thread ``mcpsync-close-wait``: take each server's shutdown steps when due."""
        while True:
            with self.lock:
                if not self.pending:
                    return
                now = time.monotonic()
                soonest = math.inf
                for fd, at in list(self.due.items()):
                    if at <= now:
                        at = self.due[fd] = self.pending[fd].exit_step(now)
                    if at == math.inf:
                        transport = self.take(fd)
                        assert transport is not None
                        self.over.append((fd, transport))
                        with contextlib.suppress(OSError):
                            os.write(self.wake_w, b"\0")
                    else:
                        soonest = min(soonest, at)
            if soonest == math.inf or self.stop.wait(max(0.0, soonest - time.monotonic())):
                return


def wait_for_exits(claimed: Sequence[tuple[int, T]], done: Callable[[T], object],
                   leftover: Callable[[T], object], deadline: float) -> None:
    """Wait for every ``(pidfd, transport)`` claimed with ``claim_exit_wait``; call
    ``done(transport)`` on this thread as each exits or its wait is over (SIGKILL sent and
    its wait passed). The shutdown steps are taken meanwhile on thread
    ``mcpsync-close-wait``. Whatever is still waited for when ``deadline`` (a
    ``time.monotonic()`` instant) comes, or when this raises, goes to ``leftover`` instead
    (its ``close()`` then runs the rest of its own shutdown). Every claim is released
    before its ``done`` or ``leftover``."""
    if not claimed:
        return
    try:
        waits = _Waits(claimed)
    except BaseException:   # no pipe (out of descriptors): nothing was waited for
        for _, transport in claimed:
            transport.release_exit_wait()
        for _, transport in claimed:
            leftover(transport)
        raise
    signaller: threading.Thread | None = None
    try:
        poller = select.poll()
        registered = set(waits.pending)

        def drop(fd: int) -> None:
            # Before done(): its close() closes the pidfd, which must not stay polled.
            if fd in registered:
                registered.discard(fd)
                poller.unregister(fd)

        for fd in registered:
            poller.register(fd, select.POLLIN)
        poller.register(waits.wake_r, select.POLLIN)
        signaller = spawn("mcpsync-close-wait", waits.signal_steps)
        while True:
            with waits.lock:
                if not waits.pending and not waits.over:
                    break
                over, waits.over = waits.over, []
            for fd, transport in over:
                drop(fd)
                done(transport)
            now = time.monotonic()
            if now >= deadline:
                break
            for fd, _ in poller.poll(_poll_ms(deadline - now)):
                if fd == waits.wake_r:
                    with contextlib.suppress(OSError):
                        os.read(fd, 4096)
                    continue
                with waits.lock:   # POLLIN: the process exited (it is not reaped yet)
                    exited = waits.take(fd)
                # Not pending: given up by the signaller, and reported through `over` (its
                # descriptor may be closed by now): never poll it again.
                drop(fd)
                if exited is not None:
                    done(exited)
    finally:
        waits.stop.set()
        with waits.lock:
            left = [t for t in (waits.take(fd) for fd in list(waits.pending)) if t is not None]
            left += [transport for _, transport in waits.over]
            waits.over = []
        if signaller is not None:
            signaller.join()   # it has nothing left to signal: it returns at once
        os.close(waits.wake_r)
        os.close(waits.wake_w)
        for transport in left:
            leftover(transport)
