"""The wake-up pipe of a thread that polls many descriptors for others: the stderr hub
(``_stderr``) and the idle watch (``_idle_watch``). Other threads write a byte to ``wake_w``
to make its ``poll()`` return; ``wake_r`` sits in that poll.
"""

from __future__ import annotations

import contextlib
import itertools
import os

__all__ = ["WakePipe"]

_pipe2 = getattr(os, "pipe2", None)


class WakePipe:
    """``wake_r`` and ``wake_w`` (-1 until :meth:`open_wake_pipe`, and once closed)."""

    wake_r: int
    wake_w: int

    def open_wake_pipe(self) -> None:
        """Make the pipe, non-blocking and close-on-exec. Both numbers are stored by the
        loop, with no call returning in between (where a Ctrl-C is raised): a close finds
        either both or neither."""
        if _pipe2 is not None:  # one system call instead of five
            for self.wake_r, self.wake_w in itertools.starmap(
                    _pipe2, ((os.O_NONBLOCK | os.O_CLOEXEC,),)):
                break
        else:  # pragma: no cover - no pipe2() (macOS)
            for self.wake_r, self.wake_w in itertools.starmap(os.pipe, ((),)):
                break
            os.set_blocking(self.wake_r, False)
            os.set_blocking(self.wake_w, False)

    def close_wake_pipe(self, *, after_fork: bool = False) -> None:
        """Close both ends that are open. Each number is forgotten before it is closed, by a
        store rather than a call (so that no Ctrl-C lands between the two, and a number is
        never closed twice: by then it may be another file's). ``after_fork``: a forked
        child's copies, whose close errors are of no interest."""
        for attr in ("wake_r", "wake_w"):
            fd = getattr(self, attr)
            if fd >= 0:
                vars(self)[attr] = -1
                if after_fork:
                    with contextlib.suppress(OSError):
                        os.close(fd)
                else:
                    os.close(fd)
