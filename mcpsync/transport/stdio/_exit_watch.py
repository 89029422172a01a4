"""Many stdio servers' exits waited for together: :func:`claim_close`, :class:`ExitWatch`
and :func:`finish_claimed_close`.

Only the Manager's close of many servers uses them, so they are not part of ``_lifecycle``,
which every client import compiles (the two functions were methods of ``ProcessLifecycle``
before, and cost about 1.4 M instructions of an uncached import there). The Manager's module
imports this one at its own top: nothing is imported on a close, a death, a timeout or a
Ctrl-C. ``_lifecycle`` still exports ``ExitWatch`` and ``_Watched``. The grace periods are
read from ``_lifecycle`` when used (``_lifecycle.TERM_GRACE`` and the others), so that a test
patching them there reaches this code too.
"""

from __future__ import annotations

import select
import time
from typing import Any

from mcpsync.transport.stdio import _lifecycle
from mcpsync.transport.stdio._lifecycle import ProcessLifecycle

__all__ = ["ExitWatch", "claim_close", "finish_claimed_close"]


def claim_close(t: ProcessLifecycle) -> bool:
    """Take the close of ``t`` (a stdio transport) over for an :class:`ExitWatch`; True when
    the caller now owns it and must end it with :func:`finish_claimed_close`.

    Only a server whose stdin ``close_input()`` already closed, and whose exit a pidfd
    reports, can be watched that way; otherwise (or when another thread is closing it)
    this returns False and the caller closes it with ``close()``. The close lock is held
    from here to the finish, so a ``close()`` from any other thread meanwhile waits for the
    whole shutdown and then returns, as it does when two threads close. Never waits.
    """
    if (t._proc is None or t._pidfd < 0 or not t._aside.stdin_closed_at
            or t._stdin_fd >= 0 or t.forked()):
        return False
    if not t._aside.close_lock.acquire(blocking=False):
        return False
    if t._closed or t._closing or t._pidfd < 0:
        t._aside.close_lock.release()
        return False
    t._closing = True
    t._rx_done = True
    t._aside.claimed_at = time.monotonic()
    return True


def finish_claimed_close(t: ProcessLifecycle, exited: bool | None) -> None:
    """End a close that :func:`claim_close` took over, on any thread.

    ``exited`` is what the watch found: True, the server exited; False, it was given up
    after SIGKILL; ``None``, the watch did not run its sequence, so the whole shutdown
    (waits and signals included) runs here, as in ``close()``.
    """
    try:
        if exited is None:
            t._shutdown()
        else:
            # A receive() (under the read lock) or an exchange()'s read (which says so by
            # the count _exchanging, its 1 added before it looks at _rx_done, which
            # claim_close() stored before this look) may still wait: wake it now, so that
            # it returns while the rest of the finish runs. Only an earlier wake-up: what
            # keeps the descriptors from being closed under an exchange is _release's own
            # wake-up and wait for the count to be 0.
            if t._rx_lock.locked() or t._exchanging:
                t.wake()
            t._release(t._aside.claimed_at + _lifecycle.CLOSE_BOUND, exited=exited,
                       stdin_closed=True)
    finally:
        t._closed = True
        t._aside.close_lock.release()


class _Watched:
    """One server in an :class:`ExitWatch`: where it is in the shutdown sequence."""

    __slots__ = ("bound", "due", "key", "stage", "transport")

    def __init__(self, transport: ProcessLifecycle, key: object, due: float,
                 bound: float) -> None:
        self.transport = transport
        self.key = key
        self.stage = 0        # 0: stdin closed; 1: SIGTERM sent; 2: SIGKILL sent
        self.due = due        # when the next step is due if the server has not exited
        self.bound = bound    # CLOSE_BOUND after the claim


class ExitWatch:
    """The exits of many servers whose close was claimed (:func:`claim_close`), waited for
    together by one thread.

    Each server keeps the sequence of :meth:`ProcessLifecycle.close`: SIGTERM to its process
    group once the stdin grace has run (counted from the moment its stdin was closed),
    SIGKILL after the TERM grace, given up ``KILL_WAIT`` later, all within ``CLOSE_BOUND`` of
    the claim. One ``poll()`` on every pidfd replaces a waiting thread per server, which is
    what closing many servers costs most. The watch only waits and signals: it never reaps a
    server (the pid, and so the group id, stays ours until the finish) and never closes a
    descriptor; :func:`finish_claimed_close` does the rest, on whichever
    thread the owner chooses, so that a slow finish never delays another server's signal.
    """

    def __init__(self) -> None:
        self._poller: Any = None      # made by the first add(): no poll() on Windows
        self._watched: dict[int, _Watched] = {}   # by pidfd

    def __len__(self) -> int:
        return len(self._watched)

    def add(self, transport: ProcessLifecycle, key: object) -> None:
        """Watch a server whose close :func:`claim_close` just took over; ``key`` names it in
        what :meth:`step` returns."""
        aside = transport._aside
        start = aside.claimed_at
        grace = max(0.0, aside.stdin_grace - (start - aside.stdin_closed_at))
        limit = _lifecycle.CLOSE_BOUND
        bound = start + limit
        if self._poller is None:
            self._poller = select.poll()
        self._watched[transport._pidfd] = _Watched(transport, key,
                                                   start + min(grace, limit), bound)
        self._poller.register(transport._pidfd, select.POLLIN)

    def step(self, timeout: float | None) -> list[tuple[object, bool]]:
        """Wait up to ``timeout`` seconds (``None``: until something happens) for exits,
        never past the next signal due; send the signals due. Returns ``(key, exited)`` for
        every server settled meanwhile: exited (True), or given up after SIGKILL (False)."""
        watched = self._watched
        if not watched:
            return []
        due = min(w.due for w in watched.values())
        wait = max(0.0, due - time.monotonic())
        if timeout is not None:
            wait = min(wait, timeout)
        settled: list[tuple[object, bool]] = []
        for fd, _ in self._poller.poll(_lifecycle._poll_ms(wait)):
            self._poller.unregister(fd)
            settled.append((watched.pop(fd).key, True))
        now = time.monotonic()
        for fd, w in list(watched.items()):
            if w.due <= now:
                self._advance(fd, w, settled)
        return settled

    def _advance(self, fd: int, w: _Watched, settled: list[tuple[object, bool]]) -> None:
        """The next step of a server that has not exited by its due time: as in ``close()``,
        SIGTERM after the stdin grace, SIGKILL after the TERM grace, then give it up."""
        if w.stage == 2:
            self._poller.unregister(fd)
            del self._watched[fd]
            settled.append((w.key, False))
            return
        w.transport._signal_group(kill=w.stage == 1)
        now = time.monotonic()
        left = max(0.0, w.bound - now)
        if w.stage == 0:
            w.stage, w.due = 1, now + min(_lifecycle.TERM_GRACE, left)
        else:
            w.stage, w.due = 2, now + max(min(_lifecycle.KILL_WAIT, left), 0.05)
