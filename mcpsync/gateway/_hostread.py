"""Reading the host's input: a read first, a ``poll`` only when the read would block.

The host's reader must also wake for :meth:`Gateway.close`, so it cannot just block in
``read``: it waits with ``poll`` on the input and a wake-up pipe. Doing that before every
read costs a system call per frame; when frames come faster than they are handled (several
calls in flight), the next one is usually there already and a read alone gets it.

The input descriptor is the host's (a terminal, a pipe another process also holds), so its
file status flags are left alone: the try is a ``preadv`` with ``RWF_NOWAIT`` (Linux), which
fails with ``EAGAIN`` instead of waiting without making the descriptor non-blocking for
everyone who shares it. Where that is not supported (other systems, old kernels, sockets) the
first try says so and every read polls first, as before. When tries keep finding nothing (one
call at a time: the host waits for each answer), they are skipped for a growing number of
reads, so a miss costs at most one failed read every :data:`MAX_SKIP` frames.

Every read goes into one buffer allocated once, and only the bytes read are copied out.
``os.read(fd, 256 KiB)`` allocates its result at the size asked for: past the allocator's
mmap threshold that is an ``mmap``, an ``mremap`` to shrink it and a ``munmap`` per read,
with the page faults and, in a process with several threads, the TLB shootdowns they bring
(``strace`` showed all three per call, and the host's thread spent about 40 us more CPU
per call than the upstream's reader, which reads into a buffer).
"""

from __future__ import annotations

import os
import select
from typing import Final

__all__ = ["MAX_SKIP", "HostReader"]

#: At most this many reads poll first, without a try, after tries that found nothing.
MAX_SKIP: Final = 16
_NOWAIT: Final = getattr(os, "RWF_NOWAIT", 0)


class HostReader:
    """Reads ``fd`` in chunks of ``size``; :meth:`read` returns ``None`` once ``wake_fd``
    is readable (the gateway is closing)."""

    def __init__(self, fd: int, wake_fd: int, size: int) -> None:
        self._fd = fd
        self._wake = wake_fd
        self._buf = bytearray(size)
        self._view = memoryview(self._buf)
        self._poller = select.poll()
        self._poller.register(fd, select.POLLIN)
        self._poller.register(wake_fd, select.POLLIN)
        self._try = bool(_NOWAIT) and hasattr(os, "preadv")
        self._misses = 0
        self._skip = 0

    def read(self) -> bytes | None:
        """The next bytes (``b""`` at EOF), or ``None`` when woken to close. Raises
        ``OSError`` when the input fails."""
        if self._try:
            if self._skip:
                self._skip -= 1
            else:
                try:
                    n = os.preadv(self._fd, [self._buf], -1, _NOWAIT)
                except BlockingIOError:
                    self._misses = min(self._misses * 2 + 1, MAX_SKIP)
                    self._skip = self._misses
                except OSError:   # not supported for this descriptor: poll first always
                    self._try = False
                else:
                    self._misses = 0
                    return self._view[:n].tobytes()
        ready = self._poller.poll()
        # Usually just the input; else the wake-up pipe (or both).
        if (len(ready) != 1 or ready[0][0] != self._fd) and any(
                r_fd == self._wake for r_fd, _ in ready):
            return None
        return self._view[:os.readv(self._fd, [self._buf])].tobytes()
