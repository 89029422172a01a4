"""The blocking frame reader and writer of :mod:`mcpsync.jsonrpc`: JSON-RPC messages, one per
line, read from and written to a binary stream.

In the package only the stdio server's loop uses them (the gateway's stdio side reads through
a ``FrameDecoder`` subclass); a client connection feeds its reads to ``FrameDecoder`` and
writes frames itself. So they are defined here and re-exported by
``mcpsync.jsonrpc`` on first access (its module ``__getattr__``), and ``import mcpsync.client``
neither compiles nor builds them. Their ``__module__`` is this module, where their source is,
so that ``inspect.getsource`` finds it. Import them from ``mcpsync.jsonrpc``, never from here.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Final, Protocol

from mcpsync.jsonrpc import (
    MAX_FRAME_BYTES,
    Batch,
    FrameDecoder,
    Message,
    StreamError,
    parse,
    serialize,
)

__all__ = ["FrameReader", "FrameWriter"]

_READ_CHUNK: Final = 65536


def _serialize_batch(messages: Iterable[Message]) -> bytes:
    frames = [serialize(m) for m in messages]
    if not frames:
        raise ValueError("a batch holds at least one message")
    return b"[" + b",".join(frames) + b"]"


class _Readable(Protocol):
    def read(self, size: int = ..., /) -> bytes: ...


class _Readable1(Protocol):
    def read1(self, size: int = ..., /) -> bytes: ...


class FrameReader:
    """Reads JSON-RPC messages, one per line, from a blocking binary stream.

    ``read()`` returns the next :class:`Message` (or :class:`Batch`), or ``None`` at end of
    input. A bad line raises :class:`ParseError` from that ``read()`` and the reader stays
    usable. An over-long line, an ``OSError`` or a closed stream raise :class:`StreamError`,
    and every later ``read()`` raises it again. At most ``max_frame_bytes + 1`` bytes of any
    one line are ever read from the stream. Iterating yields messages until end of input.

    One thread reads; ``allow_batch`` may be switched on once 2025-03-26 is negotiated.
    """

    def __init__(self, stream: _Readable | _Readable1, *, max_frame_bytes: int = MAX_FRAME_BYTES,
                 allow_batch: bool = False) -> None:
        self._decoder = FrameDecoder(max_frame_bytes=max_frame_bytes, allow_batch=allow_batch)
        # read1 returns what is available; a buffered stream's read(n) would block for n bytes.
        read1 = getattr(stream, "read1", None)
        self._read: Callable[[int], bytes] = (
            read1 if callable(read1) else stream.read)  # type: ignore[union-attr]
        # Undecoded lines: they are parsed when handed out, so that switching allow_batch on
        # applies to every line not yet returned, even one already read from the stream.
        self._pending: deque[bytes] = deque()
        self._error: StreamError | None = None
        self._eof = False

    @property
    def allow_batch(self) -> bool:
        """Whether an array line is a batch (2025-03-26) or a -32600 error."""
        return self._decoder.allow_batch

    @allow_batch.setter
    def allow_batch(self, value: bool) -> None:
        self._decoder.allow_batch = value

    @property
    def max_frame_bytes(self) -> int:
        return self._decoder.max_frame_bytes

    @property
    def buffered_lines(self) -> int:
        """Complete lines already read from the stream and not yet handed out: a reader that
        answers a line itself checks that nothing is waiting behind it first."""
        return len(self._pending)

    def read(self) -> Message | Batch | None:
        """The next message or batch, ``None`` at end of input."""
        line = self.read_line()
        return None if line is None else parse(line, allow_batch=self._decoder.allow_batch)

    def read_line(self) -> bytes | None:
        """The next line, undecoded (``parse`` it later), or ``None`` at end of input: for a
        reader that holds lines before decoding them. Raises like :meth:`read`, except that a
        bad line is returned (it is ``parse`` that raises :class:`ParseError`)."""
        pending = self._pending
        decoder = self._decoder
        while not pending:
            if self._error is not None:
                raise self._error
            if self._eof:
                return None
            # Never ask for more of a line than could still fit under the limit, plus the one
            # byte that proves it too long: the rest of an over-long line is never read.
            want = min(_READ_CHUNK, decoder.max_frame_bytes + 1 - decoder.buffered)
            try:
                chunk = self._read(want)
            except (OSError, ValueError) as exc:
                self._error = StreamError(f"reading the stream failed: {exc}")
                raise self._error from exc
            if not chunk:
                self._eof = True
                pending.extend(decoder._finish_lines())
                continue
            try:
                decoder._split(chunk, pending.append)
            except StreamError as exc:
                self._error = exc
        return pending.popleft()

    def __iter__(self) -> Iterator[Message | Batch]:
        return self

    def __next__(self) -> Message | Batch:
        item = self.read()
        if item is None:
            raise StopIteration
        return item


class _Writable(Protocol):
    def write(self, data: bytes, /) -> int | None: ...

    def flush(self) -> None: ...


class FrameWriter:
    """Writes JSON-RPC messages, one per line, to a binary stream; safe from many threads.

    Serialisation happens outside the lock (so a bad value raises ``ValueError`` before the
    stream is touched, and threads do not queue behind each other's encoding). Under the lock,
    each frame plus its newline goes to the stream in one ``write`` call, any short write is
    finished before the lock is released, and the stream is flushed, so frames never
    interleave. An ``OSError`` (or a closed stream) raises :class:`StreamError`, which is
    sticky. A stream whose ``write`` returns ``None`` is taken to have accepted everything,
    as buffered streams always do.
    """

    def __init__(self, stream: _Writable) -> None:
        self._stream = stream
        self._lock = threading.Lock()
        self._error: StreamError | None = None

    def write(self, message: Message) -> None:
        """Write one message as one line."""
        self._write(serialize(message) + b"\n")

    def write_batch(self, messages: Iterable[Message]) -> None:
        """Write one line holding a JSON array of the messages (2025-03-26 only)."""
        self._write(_serialize_batch(messages) + b"\n")

    def write_frame(self, frame: bytes) -> None:
        """Write one pre-serialised message (without its newline) as one line."""
        if b"\n" in frame:
            raise ValueError("a frame cannot hold a newline")
        self._write(bytes(frame) + b"\n")

    def _write(self, data: bytes) -> None:
        with self._lock:
            if self._error is not None:
                raise self._error
            stream = self._stream
            try:
                written = stream.write(data)
                if written is not None and written < len(data):
                    view = memoryview(data)
                    while written < len(data):
                        more = stream.write(view[written:])  # type: ignore[arg-type]
                        if not more:
                            raise OSError("the stream stopped accepting bytes")
                        written += more
                stream.flush()
            except (OSError, ValueError) as exc:
                self._error = StreamError(f"writing to the stream failed: {exc}")
                raise self._error from exc
