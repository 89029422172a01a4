"""Many stdio servers' exits waited for together: :class:`ExitWatch`.

Only the Manager's close of many servers uses it (after ``ProcessLifecycle.claim_close``), so
it is not part of ``_lifecycle``, which every connection loads. ``_lifecycle`` still exports
both names. The grace periods are read from ``_lifecycle`` when used (``_lifecycle.TERM_GRACE``
and the others), so that a test patching them there reaches this code too.
"""

from __future__ import annotations

import select
import time
from typing import Any

from mcpsync.transport.stdio import _lifecycle
from mcpsync.transport.stdio._lifecycle import ProcessLifecycle

__all__ = ["ExitWatch"]


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
    """The exits of many servers whose close was claimed (:meth:`ProcessLifecycle.claim_close`),
    waited for together by one thread.

    Each server keeps the sequence of :meth:`ProcessLifecycle.close`: SIGTERM to its process
    group once the stdin grace has run (counted from the moment its stdin was closed),
    SIGKILL after the TERM grace, given up ``KILL_WAIT`` later, all within ``CLOSE_BOUND`` of
    the claim. One ``poll()`` on every pidfd replaces a waiting thread per server, which is
    what closing many servers costs most. The watch only waits and signals: it never reaps a
    server (the pid, and so the group id, stays ours until the finish) and never closes a
    descriptor; :meth:`ProcessLifecycle.finish_claimed_close` does the rest, on whichever
    thread the owner chooses, so that a slow finish never delays another server's signal.
    """

    def __init__(self) -> None:
        self._poller: Any = None      # made by the first add(): no poll() on Windows
        self._watched: dict[int, _Watched] = {}   # by pidfd

    def __len__(self) -> int:
        return len(self._watched)

    def add(self, transport: ProcessLifecycle, key: object) -> None:
        """Watch a server whose close ``claim_close()`` just took over; ``key`` names it in
        what :meth:`step` returns."""
        start = transport._claimed_at
        grace = max(0.0, transport._stdin_grace - (start - transport._stdin_closed_at))
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
