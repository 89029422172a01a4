"""A reader thread for platforms where pipes cannot be ``poll()``-ed (Windows).

On POSIX the session's reader waits on stdout with ``poll()`` and reads it directly. Windows
pipes support neither ``poll()`` nor non-blocking reads, so there one thread,
``mcpsync-stdio-pump-<name>``, makes the blocking reads and queues the chunks; ``receive()``
then waits on the queue, which also carries wake-ups. Best-effort: the thread ends only at EOF,
so a grandchild that keeps stdout open keeps it alive (it is a daemon and is not joined then).
"""

from __future__ import annotations

import os
from queue import Empty, SimpleQueue

from mcpsync._threads import new_thread

__all__ = ["StdoutPump"]

_WAKE = b"<wake>"  # compared by identity, never by value


class StdoutPump:
    """Blocking reads of one pipe into a queue: ``bytes`` chunks, ``b""`` at EOF, or the
    ``OSError`` that ended reading."""

    def __init__(self, fd: int, *, name: str, read_size: int) -> None:
        self._fd = fd
        self._read_size = read_size
        self._queue: SimpleQueue[bytes | OSError] = SimpleQueue()
        self.thread = new_thread(f"mcpsync-stdio-pump-{name}", self._run)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        put = self._queue.put
        try:
            while True:
                data = os.read(self._fd, self._read_size)
                put(data)
                if not data:
                    return
        except OSError as exc:
            put(exc)

    def get(self, timeout: float | None) -> bytes | OSError | None:
        """The next chunk; ``None`` on timeout or wake-up."""
        try:
            item = self._queue.get(timeout=timeout)
        except Empty:
            return None
        return None if item is _WAKE else item

    def wake(self) -> None:
        self._queue.put(_WAKE)

    def join(self, timeout: float) -> bool:
        """Wait for the thread to end (at EOF); True if it did."""
        if self.thread.is_alive():
            self.thread.join(timeout)
        return not self.thread.is_alive()
