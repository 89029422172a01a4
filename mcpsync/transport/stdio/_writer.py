"""Writing a frame to a server's stdin that may have stopped reading it.

A server that stops reading its stdin (a synchronous server inside a long call, or a stuck
one) fills the pipe, and a blocking ``os.write`` of a frame larger than what is left would
then hold the write lock for as long as the server does not read: every other caller queues
behind it, whatever its timeout. So stdin is non-blocking and a write has a deadline:

- the common case (the pipe has room) is one ``os.write``, as before;
- when the pipe is full the writer waits for room with ``poll`` until its deadline;
- a caller waiting for the write lock gives up at its deadline with nothing written;
- a frame partly written at the deadline cannot be abandoned (the rest of the stream would be
  garbage to the server), so a :class:`FrameFinisher` thread takes the lock over and writes
  the rest, while the caller fails at once with :class:`WriteTimedOut`. The finisher gives up
  ``FINISH_GRACE`` seconds after the deadline: then the connection is torn down.

The policy for the caller (a ``RequestTimeout``, a cancellation queued behind the frame) is
the session's; this module only moves bytes.
"""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Callable

from mcpsync._threads import new_thread
from mcpsync.transport.base import WriteTimedOut

__all__ = ["FINISH_GRACE", "WRITE_SLICE", "FrameFinisher", "WriteTimedOut", "poll_ms"]

#: How long after the caller's deadline the rest of a partly written frame may take before
#: the connection is torn down.
FINISH_GRACE = 5.0
#: Longest single wait for room in the pipe: bounds how late ``close()`` (or a simulated
#: Ctrl-C) is noticed by a waiting writer.
WRITE_SLICE = 0.1

_MAX_POLL_MS = 2**31 - 1


def poll_ms(timeout: float) -> int:
    """Seconds to poll() milliseconds, rounded up (so a wait never ends early), clamped."""
    if timeout >= _MAX_POLL_MS / 1000:
        return _MAX_POLL_MS
    return max(0, int(timeout * 1000 + 0.999))


def pour(fd: int, view: memoryview, written: int, until: float,
         stop: Callable[[], bool]) -> int:
    """Write ``view[written:]`` to the non-blocking ``fd`` until it is all out, ``until``
    (a ``time.monotonic()`` value) passes or ``stop()`` says so; return the bytes written
    so far. ``OSError`` (EPIPE above all) propagates."""
    total = len(view)
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    monotonic = time.monotonic
    while written < total:
        remaining = until - monotonic()
        if remaining <= 0 or stop():
            break
        poller.poll(poll_ms(min(remaining, WRITE_SLICE)))
        try:
            written += os.write(fd, view[written:])
        except BlockingIOError:
            continue
    return written


class FrameFinisher:
    """Thread ``mcpsync-stdio-writer-<name>``: writes the rest of one partly written frame.

    It is handed the transport's write lock, already held, and releases it when the frame is
    out. ``on_stuck`` runs (lock still held) when the frame is not finished by ``until`` or the
    pipe broke; ``stop()`` true ends the wait early (the transport is closing).
    """

    def __init__(self, *, name: str, fd: int, view: memoryview, written: int, until: float,
                 lock: threading.Lock, stop: Callable[[], bool],
                 on_stuck: Callable[[str], None]) -> None:
        self._fd = fd
        self._view = view
        self._written = written
        self._until = until
        self._lock = lock
        self._stop = stop
        self._on_stuck = on_stuck
        self.thread = new_thread(f"mcpsync-stdio-writer-{name}", self._run)

    def start(self) -> None:
        self.thread.start()

    def join(self, timeout: float) -> None:
        if self.thread is not threading.current_thread():
            self.thread.join(timeout)

    def _run(self) -> None:
        try:
            try:
                written = pour(self._fd, self._view, self._written, self._until, self._stop)
            except OSError as exc:
                if not self._stop():
                    self._on_stuck(f"the pipe broke ({exc})")
                return
            total = len(self._view)
            if written < total and not self._stop():
                self._on_stuck(f"{total - written} of its {total} bytes were still unwritten "
                               f"{FINISH_GRACE:g} s after its deadline")
        finally:
            self._view = memoryview(b"")
            self._lock.release()
