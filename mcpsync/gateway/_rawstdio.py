"""A stdio transport that hands out stdout lines as bytes, undecoded.

The gateway must give the host the upstream's frames byte for byte, which the client's stdio
transport cannot: its decoder turns each line into a :class:`~mcpsync.jsonrpc.Message`. Rather
than add a mode flag to that transport's hot read path (which every client call runs), this
is a thin subclass that swaps the decoder for a line splitter with the same interface. All the
rest is inherited unchanged: the spawner thread, the filtered environment, the stderr drain,
non-blocking writes with deadlines, exit detection and the bounded shutdown sequence.
"""

from __future__ import annotations

from typing import cast

from mcpsync.jsonrpc import MAX_FRAME_BYTES, FrameDecoder
from mcpsync.transport.stdio import StdioTransport

__all__ = ["RawLines", "RawStdioTransport"]


class RawLines(FrameDecoder):
    """The frame decoder's line splitting (LF-terminated, blank lines skipped, one line at
    most ``max_frame_bytes``), returning each line's bytes instead of decoding it."""

    __slots__ = ()

    def feed(self, data: bytes | bytearray) -> list[bytes]:  # type: ignore[override]
        lines: list[bytes] = []
        self._split(data, lines.append)
        return lines

    def finish(self) -> list[bytes]:  # type: ignore[override]
        return self._finish_lines()


class RawStdioTransport(StdioTransport):
    """:class:`StdioTransport` whose :meth:`receive_lines` gives raw stdout lines."""

    def __init__(self, *args: object, max_frame_bytes: int = MAX_FRAME_BYTES,
                 **kwargs: object) -> None:
        super().__init__(*args, max_frame_bytes=max_frame_bytes, **kwargs)  # type: ignore[arg-type]
        self._decoder = RawLines(max_frame_bytes=max_frame_bytes)

    @property
    def ended(self) -> bool:
        """Closed, or the reader has seen the server's output end or the process exit: a
        flag read, where ``returncode()`` is a system call (this is asked per frame). A
        server that exited unseen yet fails the write instead (a broken pipe), or its
        reader reports the exit and fails the calls in flight."""
        return self._closed or self._rx_done

    def receive_lines(self, timeout: float | None) -> list[bytes] | None:
        """Like ``receive()``: ``[]`` on timeout, ``None`` at EOF; raises ``StreamError``."""
        return cast("list[bytes] | None", self.receive(timeout))
