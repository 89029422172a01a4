"""Reading a client's socket through one buffer, against deadlines.

A connection reads its socket only through :class:`Reader`: one ``recv`` of up to 64 KiB at a
time into one buffer, from which the request head, the body and the next pipelined request
are all taken. Reading byte by byte (what ``makefile().readline()`` amounts to for the head)
costs a system call per byte; reading blocks and searching the buffer costs one per packet.

Every read carries a deadline (a ``time.monotonic()`` instant), not a per-call timeout: a
client that sends one byte every nine seconds would never trip a 10 s timeout per ``recv``,
but it does trip a deadline for the whole head. That is what stops slowloris clients from
holding a connection thread.

:class:`Input` is ``wsgi.input``: exactly the request body and then end of file, so an
application that reads "everything" never reads into the next request. Its failures are
remembered (``failure``) so the connection can answer 408 for a body that stopped arriving
rather than 500 for an application that merely passed the error on.
"""

from __future__ import annotations

import re
import socket
import time
from typing import Final

__all__ = ["MAX_HEAD_BYTES", "ClientGone", "HttpError", "Input", "Reader", "read_chunked"]

#: The largest request head (request line and headers) accepted.
MAX_HEAD_BYTES: Final = 64 * 1024
_RECV: Final = 64 * 1024
_MAX_CHUNK_LINE: Final = 4096
_HEX: Final = re.compile(rb"[0-9A-Fa-f]{1,16}")


class HttpError(Exception):
    """A request the server answers itself (``status`` like ``"400 Bad Request"``), after
    which it closes the connection. ``detail`` is the one line of the response body: it
    names what was wrong, never echoes what the client sent."""

    def __init__(self, status: str, detail: str) -> None:
        super().__init__(f"{status}: {detail}")
        self.status = status
        self.detail = detail


class ClientGone(Exception):
    """The client closed or reset the connection, or stopped reading, mid-exchange."""


class Reader:
    """One client socket read through one buffer; ``buf`` holds what arrived but was not
    taken yet (a pipelined request, the start of a body)."""

    __slots__ = ("buf", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()

    def fill(self, deadline: float) -> bool:
        """Append one ``recv`` to ``buf``; ``False`` at end of file. Raises ``TimeoutError``
        once ``deadline`` passed and ``OSError`` when the socket fails."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("deadline passed")
        self.sock.settimeout(left)
        data = self.sock.recv(_RECV)
        if not data:
            return False
        self.buf += data
        return True

    def read_head(self, deadline: float) -> bytes | None:
        """The next request head without its blank line, or ``None`` when the client closed
        the connection or sent nothing before ``deadline`` (an idle keep-alive connection,
        closed without a word: a 408 there would be read as the answer to the client's next
        request). A head cut short by the deadline is 408, one over ``MAX_HEAD_BYTES`` 431,
        one cut short by end of file :class:`ClientGone`."""
        buf = self.buf
        scanned = 0
        while True:
            # Blank lines before a request line are allowed (some clients send a stray CRLF
            # after a body); dropping them keeps the search below simple.
            while buf[:2] == b"\r\n" or buf[:1] == b"\n":
                del buf[: 2 if buf[:1] == b"\r" else 1]
            end, skip = buf.find(b"\r\n\r\n", scanned), 4
            bare = buf.find(b"\n\n", scanned)   # bare LF line ends, as RFC 9112 tolerates
            if bare >= 0 and (end < 0 or bare < end):
                end, skip = bare, 2
            if end > MAX_HEAD_BYTES or (end < 0 and len(buf) > MAX_HEAD_BYTES):
                raise HttpError("431 Request Header Fields Too Large",
                                f"the request head is larger than {MAX_HEAD_BYTES} bytes")
            if end >= 0:
                head = bytes(buf[:end])
                del buf[: end + skip]
                return head
            scanned = max(0, len(buf) - 3)
            started = bool(buf)
            try:
                more = self.fill(deadline)
            except TimeoutError:
                if started:
                    raise HttpError("408 Request Timeout",
                                    "the request head did not arrive in time") from None
                return None
            if not more:
                if buf:
                    raise ClientGone("the client closed the connection mid-head")
                return None

    def take(self, limit: int, deadline: float) -> bytes:
        """Up to ``limit`` (> 0) bytes, waiting for at least one; raises :class:`ClientGone`
        at end of file and ``TimeoutError`` after ``deadline``."""
        buf = self.buf
        if not buf and not self.fill(deadline):
            raise ClientGone("the client closed the connection mid-body")
        if len(buf) <= limit:
            data = bytes(buf)
            buf.clear()
        else:
            data = bytes(buf[:limit])
            del buf[:limit]
        return data

    def line(self, limit: int, deadline: float) -> bytes:
        """One line (with its LF) of at most ``limit`` bytes, for chunk sizes and trailers."""
        buf = self.buf
        start = 0
        while True:
            end = buf.find(b"\n", start)
            if end >= 0:
                data = bytes(buf[: end + 1])
                del buf[: end + 1]
                return data
            if len(buf) > limit:
                raise HttpError("400 Bad Request", "a chunk-size line is too long")
            start = len(buf)
            if not self.fill(deadline):
                raise ClientGone("the client closed the connection mid-body")


def read_chunked(reader: Reader, limit: int, timeout: float) -> bytes:
    """A whole chunked request body, decoded, read before the application runs.

    Read up front because its size is unknown until its last chunk: reading it whole (never
    more than ``limit`` bytes, else 413) lets the application see an ordinary body with a
    ``CONTENT_LENGTH``, and lets the server answer 413 before the application has started.
    """
    deadline = time.monotonic() + timeout
    body = bytearray()
    try:
        while True:
            size_line = reader.line(_MAX_CHUNK_LINE, deadline).split(b";", 1)[0].strip()
            if not _HEX.fullmatch(size_line):   # int(.., 16) would also take "0x1f", "1_0"
                raise HttpError("400 Bad Request", "a chunk size is not hexadecimal")
            size = int(size_line, 16)
            if size == 0:
                break
            if len(body) + size > limit:
                raise HttpError("413 Content Too Large",
                                f"the request body is larger than {limit} bytes")
            while size:
                data = reader.take(size, deadline)
                body += data
                size -= len(data)
            if reader.line(_MAX_CHUNK_LINE, deadline).strip(b"\r\n"):
                raise HttpError("400 Bad Request", "a chunk does not end with CRLF")
        trailers = 0
        while True:   # trailer fields are read and dropped, up to the head's size limit
            line = reader.line(_MAX_CHUNK_LINE, deadline)
            trailers += len(line)
            if trailers > MAX_HEAD_BYTES:
                raise HttpError("431 Request Header Fields Too Large", "the trailers are too large")
            if not line.strip(b"\r\n"):
                return bytes(body)
    except TimeoutError:
        raise HttpError("408 Request Timeout", "the request body did not arrive in time") from None


class Input:
    """``wsgi.input`` for a body of known length: exactly ``length`` bytes, then ``b""``.

    The ``timeout`` runs from the first read to the body's last byte (an application that
    never reads its body is not timed; the drain after its response is). ``failure`` is set
    to ``"timeout"`` or ``"gone"`` when a read failed, and that read raises ``OSError``
    (``TimeoutError`` or ``ConnectionResetError``) so careless applications still stop.
    """

    __slots__ = ("_deadline", "_reader", "_timeout", "failure", "left")

    def __init__(self, reader: Reader, length: int, timeout: float) -> None:
        self._reader = reader
        self._timeout = timeout
        self._deadline = 0.0
        self.left = length
        self.failure = ""

    def _fill(self) -> None:
        """Wait for more of the body in the reader's buffer, translating failures."""
        if not self._deadline:
            self._deadline = time.monotonic() + self._timeout
        try:
            more = self._reader.fill(self._deadline)
        except TimeoutError:
            self.failure = "timeout"
            raise TimeoutError("the request body did not arrive in time") from None
        except OSError:
            more = False
        if not more:
            self.failure = "gone"
            raise ConnectionResetError("the client went away mid-body")

    def _take(self, limit: int) -> bytes:
        buf = self._reader.buf
        if not buf:
            self._fill()
        if len(buf) <= limit:
            data = bytes(buf)
            buf.clear()
        else:
            data = bytes(buf[:limit])
            del buf[:limit]
        self.left -= len(data)
        return data

    def read(self, size: int | None = -1) -> bytes:
        """Up to ``size`` bytes of the body (all that is left when ``size`` is negative)."""
        if size is None or size < 0:
            size = self.left
        parts = []
        while size > 0 and self.left > 0:
            data = self._take(min(size, self.left))
            parts.append(data)
            size -= len(data)
        return b"".join(parts)

    def readline(self, size: int | None = -1) -> bytes:
        """One line of the body (with its LF), at most ``size`` bytes when given."""
        limit = self.left if size is None or size < 0 else min(size, self.left)
        parts = []
        while limit > 0:
            buf = self._reader.buf
            if not buf:
                self._fill()
            end = buf.find(b"\n", 0, limit)
            data = self._take(end + 1 if end >= 0 else min(limit, len(buf)))
            parts.append(data)
            limit -= len(data)
            if end >= 0:
                break
        return b"".join(parts)

    def readlines(self, hint: int = -1) -> list[bytes]:
        """The remaining lines (stopping once ``hint`` bytes were read, when given)."""
        lines = []
        total = 0
        while line := self.readline():
            lines.append(line)
            total += len(line)
            if 0 < hint <= total:
                break
        return lines

    def __iter__(self) -> Input:
        return self

    def __next__(self) -> bytes:
        line = self.readline()
        if not line:
            raise StopIteration
        return line
