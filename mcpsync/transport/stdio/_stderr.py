"""The stderr drain of a stdio server: a ring of the newest bytes and a line splitter.

A server that writes to a full stderr pipe blocks, so stderr is always drained, however much
arrives, into a bounded ring (newest bytes kept). Lines are logged at DEBUG and handed to the
user's ``on_stderr``. Stderr is never an error signal: it only feeds error messages.

The thread waits with ``poll()`` on the pipe *and* a stop descriptor, so it ends on request
even when an escaped grandchild keeps the pipe open forever.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
import time
from collections.abc import Callable

from mcpsync._threads import new_thread

__all__ = ["EXCERPT_BYTES", "EXCERPT_LINES", "StderrDrain", "excerpt"]

EXCERPT_LINES = 20
EXCERPT_BYTES = 4096
_READ_SIZE = 65536
_readv = getattr(os, "readv", None)
_FINAL_READS = 16  # at stop, read at most this many more chunks (1 MiB)


def excerpt(text: str, *, lines: int = EXCERPT_LINES, max_bytes: int = EXCERPT_BYTES) -> str:
    """The last ``lines`` lines of ``text``, cut to at most ``max_bytes`` UTF-8 bytes (the
    newest end is kept)."""
    tail = "\n".join(text.rstrip("\n").split("\n")[-lines:])
    raw = tail.encode("utf-8", "replace")
    if len(raw) > max_bytes:
        tail = raw[-max_bytes:].decode("utf-8", "ignore")
    return tail


class StderrDrain:
    """Drains one stderr pipe on thread ``mcpsync-stdio-stderr-<name>``.

    ``stop()`` ends the thread after a last non-blocking drain and joins it; the pipe is
    closed through ``closer`` once the thread can no longer touch it.
    """

    def __init__(self, fd: int, *, name: str, logger: logging.Logger, ring_bytes: int = 65536,
                 on_stderr: Callable[[str], None] | None = None, use_poll: bool = True,
                 closer: Callable[[], None] | None = None) -> None:
        self._fd = fd
        self._ring = bytearray()
        self._ring_bytes = max(1, ring_bytes)
        self._partial = bytearray()
        self._lock = threading.Lock()
        self._io_lock = threading.Lock()
        self._done = threading.Event()
        self._backlog: list[bytes] = []
        # Reads go into this one buffer (under _io_lock) and only the bytes read are copied
        # out: os.read(fd, 64 KiB) would allocate 64 KiB per chunk and shrink it again.
        self._buf = bytearray(_READ_SIZE)
        self._view = memoryview(self._buf)
        self._bufs = [self._buf]
        # Without poll() (Windows pipes) the thread does plain blocking reads: stop() can then
        # only join with a timeout, and settle() cannot read ahead. Best-effort.
        self._use_poll = use_poll
        if use_poll:
            # Non-blocking, because settle() may empty the pipe between our poll() and read().
            os.set_blocking(fd, False)
        self._logger = logger
        self._on_stderr = on_stderr
        self._stop_r, self._stop_w = os.pipe()
        self._stopped = False
        self._closer = closer
        self._exit_lock = threading.Lock()
        self._exited = False
        self._close_at_exit = False
        self._thread = new_thread(f"mcpsync-stdio-stderr-{name}", self._run)

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    def start(self) -> None:
        self._thread.start()

    def tail(self) -> str:
        """The whole ring, decoded with replacement."""
        with self._lock:
            data = bytes(self._ring)
        return data.decode("utf-8", "replace")

    def stop(self, timeout: float = 1.0) -> None:
        """Ask the thread to finish (it drains what is readable now) and join it.

        The descriptors (the stop pipe, and the stderr pipe through ``closer``) are closed as
        soon as the thread has ended: here when the join succeeds, otherwise by the thread
        itself on its way out (when ``stop()`` is called from ``on_stderr``, or when an
        escaped grandchild keeps a blocking read going). A descriptor is never closed while
        the thread may still use it, since its number could be reused by then.
        """
        with self._exit_lock:
            if self._stopped:
                return
            self._stopped = True
        with contextlib.suppress(OSError):  # the pipe is ours and empty
            os.write(self._stop_w, b"x")
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        with self._exit_lock:
            if not self._exited and self._thread.ident is not None:
                self._close_at_exit = True
                return
        self._close_fds()

    def _close_fds(self) -> None:
        for fd in (self._stop_r, self._stop_w):
            if fd >= 0:
                os.close(fd)
        self._stop_r = self._stop_w = -1
        closer, self._closer = self._closer, None
        if closer is not None:
            with self._io_lock:  # never under a settle() that is polling the pipe
                closer()

    def _exit(self) -> None:
        """Last thing the thread does: close the descriptors if stop() left that to us."""
        with self._exit_lock:
            self._exited = True
            close = self._close_at_exit
        if close:
            self._close_fds()

    def abandon(self) -> None:
        """In a forked child (where this thread does not exist): close our copies of the
        stop pipe, and nothing else."""
        self._stopped = True
        for fd in (self._stop_r, self._stop_w):
            if fd >= 0:
                os.close(fd)
        self._stop_r = self._stop_w = -1

    def _run(self) -> None:
        if not self._use_poll:
            try:
                while self._read_once():
                    pass
            finally:
                self._done.set()
                self._flush_partial()
                self._exit()
            return
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        poller.register(self._stop_r, select.POLLIN)
        try:
            while True:
                ready = poller.poll()
                if any(fd == self._stop_r for fd, _ in ready):
                    self._drain_now()
                    return
                if not self._read_once():
                    return
        finally:
            with self._io_lock:
                backlog = self._take_backlog()
                self._done.set()
            for chunk in backlog:
                self._lines(chunk)
            self._flush_partial()
            self._exit()

    def _drain_now(self) -> None:
        """On stop: take what is already in the pipe, without waiting for more. Bounded, so
        that an escaped grandchild flooding the pipe cannot keep the thread alive."""
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        for _ in range(_FINAL_READS):
            if not poller.poll(0) or not self._read_once():
                return

    def _read_once(self) -> bool:
        """Read one chunk into the ring, then split it into lines. False at EOF."""
        # The read and the ring update happen under one lock, shared with settle(), so the
        # ring always holds the pipe's bytes in order.
        with self._io_lock:
            backlog = self._take_backlog()
            try:
                data = self._read_chunk()
            except BlockingIOError:  # settle() took it first
                data = None
            except OSError:
                data = b""
            if data:
                self._store(data)
        for chunk in backlog:
            self._lines(chunk)
        if data:
            self._lines(data)
        return data != b""

    def _read_chunk(self) -> bytes:
        """One read of the pipe (``b""`` at EOF), under ``_io_lock``: into the buffer where
        ``os.readv`` exists, a plain ``os.read`` elsewhere (Windows)."""
        if _readv is None:  # pragma: no cover - no os.readv (Windows)
            return os.read(self._fd, _READ_SIZE)
        return self._view[:_readv(self._fd, self._bufs)].tobytes()

    def _take_backlog(self) -> list[bytes]:
        if not self._backlog:
            return []
        chunks = list(self._backlog)
        self._backlog.clear()
        return chunks

    def _store(self, data: bytes) -> None:
        with self._lock:
            ring = self._ring
            ring += data
            if len(ring) > self._ring_bytes:
                del ring[: len(ring) - self._ring_bytes]

    def settle(self, timeout: float) -> None:
        """Make sure what the server already wrote is in the ring (at most ``timeout`` s).

        Called once the server has exited, so that an error message quotes its last words
        even though the drain thread may be busy in ``on_stderr``. Whatever is still in the
        pipe is read here into the ring; its lines are left to the drain thread, in order.
        """
        if self._stopped or self._done.is_set() or not self._use_poll:
            return
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        deadline = time.monotonic() + timeout
        while time.monotonic() <= deadline:
            with self._io_lock:
                if self._done.is_set() or self._stopped or not poller.poll(0):
                    return
                try:
                    data = self._read_chunk()
                except OSError:
                    return
                if not data:
                    return
                self._store(data)
                self._backlog.append(data)

    def _lines(self, data: bytes) -> None:
        if self._on_stderr is None and not self._logger.isEnabledFor(logging.DEBUG):
            self._partial.clear()  # nobody wants lines: keep only the ring
            return
        part = self._partial
        part += data
        if b"\n" not in data:
            if len(part) > self._ring_bytes:
                self._emit(bytes(part[: self._ring_bytes]))
                part.clear()
            return
        *lines, rest = bytes(part).split(b"\n")
        part.clear()
        part += rest
        for line in lines:
            self._emit(line)

    def _flush_partial(self) -> None:
        if self._partial:
            self._emit(bytes(self._partial))
            self._partial.clear()

    def _emit(self, raw: bytes) -> None:
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        line = raw[: self._ring_bytes].decode("utf-8", "replace")
        self._logger.debug("%s", line)
        callback = self._on_stderr
        if callback is None:
            return
        try:
            callback(line)
        except Exception:
            self._logger.warning("on_stderr callback raised; stderr draining goes on",
                                 exc_info=True)
