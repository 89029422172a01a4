"""A stdio transport that hands out stdout lines as bytes, undecoded.

The gateway must give the host the upstream's frames byte for byte, which the client's stdio
transport cannot: its decoder turns each line into a :class:`~mcpsync.jsonrpc.Message`. Rather
than add a mode flag to that transport's hot read path (which every client call runs), this
is a thin subclass that swaps the decoder for a line splitter with the same interface. All the
rest is inherited unchanged: the spawner thread, the filtered environment, the stderr drain,
non-blocking writes with deadlines, exit detection and the bounded shutdown sequence.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import cast

from mcpsync.jsonrpc import MAX_FRAME_BYTES, FrameDecoder
from mcpsync.transport.stdio import StdioTransport

__all__ = ["RawLines", "RawStdioTransport"]


class RawLines(FrameDecoder):
    """The frame decoder's line splitting (LF-terminated, blank lines skipped, one line at
    most ``max_frame_bytes``), returning each line's bytes instead of decoding it."""

    __slots__ = ()

    def feed(self, data: bytes | bytearray) -> list[bytes]:  # type: ignore[override]
        if not self._buf and self._error is None:
            # The usual read: one whole object line, nothing held from the read before.
            last = len(data) - 1
            if 0 < last <= self._max and data[0] == 0x7B and data.find(b"\n") == last:
                return [bytes(data[:last])]
        lines: list[bytes] = []
        self._split(data, lines.append)
        return lines

    def whole_lines(self, data: bytes) -> list[bytes] | None:
        """The lines of ``data`` when it is whole lines that start a frame each (``{``), none
        over the limit, and nothing is held from the read before: then it can be passed on
        as it is. ``None`` otherwise; :meth:`feed` then takes ``data`` (nothing was taken)."""
        if self._buf or self._error is not None or data[-1:] != b"\n":
            return None
        last = len(data) - 1
        if data.find(b"\n") == last:
            return [data[:last]] if data[0] == 0x7B and last <= self._max else None
        lines = data.split(b"\n")
        lines.pop()
        limit = self._max
        for line in lines:
            if not line or line[0] != 0x7B or len(line) > limit:
                return None
        return lines

    def finish(self) -> list[bytes]:  # type: ignore[override]
        return self._finish_lines()


class RawStdioTransport(StdioTransport):
    """:class:`StdioTransport` whose :meth:`receive_lines` gives raw stdout lines."""

    def __init__(self, *args: object, max_frame_bytes: int = MAX_FRAME_BYTES,
                 **kwargs: object) -> None:
        super().__init__(*args, max_frame_bytes=max_frame_bytes, **kwargs)  # type: ignore[arg-type]
        self._decoder = RawLines(max_frame_bytes=max_frame_bytes)
        # Never a blocking read (its wake-up bytes are taken out by the transport's own
        # reads, not by the gateway's loop, which reads stdout itself).
        self._aside.blocking_tried = True

    @property
    def ended(self) -> bool:
        """Closed, or the reader has seen the server's output end or the process exit: a
        flag read, where ``returncode()`` is a system call (this is asked per frame). A
        server that exited unseen yet fails the write instead (a broken pipe), or its
        reader reports the exit and fails the calls in flight."""
        return self._closed or self._rx_done

    def write_now(self, data: bytes) -> bool:
        """Write ``data`` (whole frames, each with its newline) in one ``os.write`` if that
        can be done at once: ``False`` (nothing written) when another thread is writing,
        the pipe is full, or the connection has ended. For the gateway's pass-through,
        which sends a read of the host's frames as it came; ``data`` must fit in
        ``PIPE_BUF``, so the kernel takes it whole or not at all."""
        if self._closed or self._rx_done:
            return False
        lock = self._write_lock
        ok = False
        try:
            for ok in self._try_write_lock:  # noqa: B007 - Ctrl-C safe: see send_bytes_until
                break
            if not ok:
                return False
            fd = self._stdin_fd
            if fd < 0 or self._closing:
                return False
            try:
                return os.write(fd, data) == len(data)
            except OSError:   # full (BlockingIOError) or broken: the writer thread's turn
                return False
        finally:
            if ok:
                lock.release()

    #: Like ``receive()``: ``[]`` on timeout, ``None`` at EOF; raises ``StreamError``. The
    #: same method (its decoder is :class:`RawLines`), not a wrapper: one call less per read.
    receive_lines = cast("Callable[[RawStdioTransport, float | None], list[bytes] | None]",
                         StdioTransport.receive)
