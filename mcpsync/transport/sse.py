"""A Server-Sent Events (``text/event-stream``) parser, written by hand to the WHATWG rules.

Why by hand: ``sseclient-py`` drops id-only events, which MCP servers send as *priming* events
(an ``id`` with empty data, so the client can resume), and ``requests-sse`` reconnects with the
original method. Both buffer in ways that would hold an event back.

The parser is incremental and unbuffered: :meth:`SSEDecoder.feed` takes whatever bytes arrived
(read them with :func:`iter_chunks`, or ``response.iter_content(chunk_size=None)`` for a
chunked response; never ``iter_lines``, which buffers and mishandles CR) and returns every
event whose terminating blank line was in them. It has no I/O, no threads and no clock, and it
parses every SSE reply, so the hot path is plain string operations: one ``split`` per chunk
and a handful of comparisons per line.

Rules (https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation):

- bytes are decoded as UTF-8 with replacement; one BOM at the very start is dropped;
- lines end at CRLF, LF or CR. A CR ends its line at once; if it is the last character of a
  chunk, an LF at the start of the next chunk is taken as part of the same line ending. That is
  the same result as waiting for the next chunk, without holding the line back;
- ``:`` starts a comment (a keep-alive), counted in :attr:`SSEDecoder.comments`;
- ``field:value`` drops one leading space of the value; a line without a colon is a field with
  an empty value; ``data``, ``event``, ``id`` (ignored when it contains NUL) and ``retry``
  (ASCII digits only) are known, other fields ignored;
- a blank line dispatches: the last event id is updated even when there is no data; the data
  lines are joined with ``\\n``; the type defaults to ``message``;
- at end of stream an unfinished event is discarded (:meth:`SSEDecoder.close`).
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from mcpsync.errors import TransportError

__all__ = ["MAX_EVENT_BYTES", "SSEDecoder", "SSEEvent", "iter_chunks", "iter_sse"]

MAX_EVENT_BYTES = 32 * 1024 * 1024
"""The largest event (its data plus a partial line) accepted; the same cap as one JSON body."""


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched event.

    ``id`` is the stream's last event id at dispatch time (as the browser's ``lastEventId``):
    an event without an ``id`` field carries the previous one, ``None`` before any. ``retry``
    is the reconnection delay in ms set by a ``retry`` field inside this event, else ``None``.

    A *priming* event (an ``id`` or ``retry`` field but no ``data`` line) is returned with
    ``data == ""`` so the caller sees the id arrive; callers skip events whose data is empty.
    """

    type: str
    data: str
    id: str | None = None
    retry: int | None = None


def _utf8_size(text: str) -> int:
    """Bytes of ``text`` in UTF-8; cheap for ASCII, which nearly all JSON is."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


class SSEDecoder:
    """Incremental event-stream parser for one stream (one HTTP response).

    Not thread-safe: one reader thread feeds it. ``last_event_id`` (set when an event is
    dispatched, as in the browser) and ``retry_ms`` keep their values across events (they are
    what a reconnect needs); ``comments`` counts comment lines
    so a watchdog can see keep-alives.
    """

    __slots__ = (
        "_data",
        "_data_bytes",
        "_decoder",
        "_event_type",
        "_failed",
        "_id_buffer",
        "_partial",
        "_partial_bytes",
        "_saw_id_or_retry",
        "_skip_lf",
        "_started",
        "_this_retry",
        "comments",
        "last_event_id",
        "max_event_bytes",
        "retry_ms",
    )

    def __init__(self, *, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self.max_event_bytes = max_event_bytes
        self.last_event_id: str | None = None
        self._id_buffer: str | None = None
        self.retry_ms: int | None = None
        self.comments = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._started = False
        self._skip_lf = False
        self._failed: TransportError | None = None
        self._partial: list[str] = []
        self._partial_bytes = 0
        self._reset_event()

    def _reset_event(self) -> None:
        self._data: list[str] = []
        self._data_bytes = 0
        self._event_type = ""
        self._saw_id_or_retry = False
        self._this_retry: int | None = None

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Parse ``chunk`` and return the events completed by it, in order.

        Raises :class:`~mcpsync.errors.TransportError` when one event grows past
        ``max_event_bytes``; the decoder then stays failed (the caller closes the connection).
        """
        if self._failed is not None:
            raise self._failed
        text = self._decoder.decode(chunk)
        if not text:
            return []
        if not self._started:
            self._started = True
            if text[0] == "\ufeff":
                text = text[1:]
                if not text:
                    return []
        if self._skip_lf:
            self._skip_lf = False
            if text[0] == "\n":
                text = text[1:]
                if not text:
                    return []
        if "\r" in text:
            self._skip_lf = text[-1] == "\r"
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        lines = text.split("\n")
        tail = lines.pop()
        events: list[SSEEvent] = []
        if lines:
            if self._partial:
                self._partial.append(lines[0])
                lines[0] = "".join(self._partial)
                self._partial = []
                self._partial_bytes = 0
            for line in lines:
                self._line(line, events)
        if tail:
            self._partial.append(tail)
            self._partial_bytes += _utf8_size(tail)
        if self._data_bytes + self._partial_bytes > self.max_event_bytes:
            self._failed = TransportError(
                f"an SSE event exceeds max_frame_bytes ({self.max_event_bytes} bytes); "
                "the stream was abandoned"
            )
            raise self._failed
        return events

    def _line(self, line: str, events: list[SSEEvent]) -> None:
        """Interpret one complete line (without its line ending)."""
        if not line:
            self._dispatch(events)
            return
        if line[0] == ":":
            self.comments += 1
            return
        colon = line.find(":")
        if colon < 0:
            field, value = line, ""
        else:
            field = line[:colon]
            value = line[colon + 1:]
            if value[:1] == " ":
                value = value[1:]
        if field == "data":
            self._data.append(value)
            self._data_bytes += _utf8_size(value) + 1
        elif field == "event":
            self._event_type = value
        elif field == "id":
            if "\0" not in value:
                self._id_buffer = value
                self._saw_id_or_retry = True
        elif field == "retry" and value.isascii() and value.isdigit():
            self.retry_ms = self._this_retry = int(value)
            self._saw_id_or_retry = True

    def _dispatch(self, events: list[SSEEvent]) -> None:
        """The blank-line step: emit the buffered event (or a priming event) and reset."""
        self.last_event_id = self._id_buffer
        if self._data:
            events.append(SSEEvent(self._event_type or "message", "\n".join(self._data),
                                   self.last_event_id, self._this_retry))
        elif self._saw_id_or_retry:
            events.append(SSEEvent(self._event_type or "message", "", self.last_event_id,
                                   self._this_retry))
        self._reset_event()

    @property
    def buffered(self) -> int:
        """Bytes held for an event not yet dispatched (data lines plus a partial line)."""
        return self._data_bytes + self._partial_bytes

    def close(self) -> None:
        """End of stream: discard an unfinished event (it had no blank line) and a partial line.

        ``last_event_id`` keeps the id of the last dispatched event and ``retry_ms`` the last
        valid ``retry`` line, since a reconnect needs them. The decoder may be fed again
        afterwards as a fresh stream.
        """
        self._decoder.reset()
        self._id_buffer = self.last_event_id
        self._partial = []
        self._partial_bytes = 0
        self._started = False
        self._skip_lf = False
        self._reset_event()


def iter_sse(chunks: Iterable[bytes], decoder: SSEDecoder | None = None) -> Iterator[SSEEvent]:
    """Yield each event as soon as the chunk holding its blank line arrives.

    ``chunks`` is typically ``response.iter_content(chunk_size=None)``. Pass your own
    ``decoder`` to read ``last_event_id`` and ``retry_ms`` afterwards (for resumption).
    """
    dec = decoder if decoder is not None else SSEDecoder()
    try:
        for chunk in chunks:
            if chunk:
                yield from dec.feed(chunk)
    finally:
        dec.close()


def iter_chunks(response: Any) -> Iterator[bytes]:
    """The body of a streamed ``requests`` response, chunk by chunk, as the bytes arrive.

    Why not just ``iter_content(chunk_size=None)``: that is unbuffered only for a chunked
    body. For a body delimited by connection close (an HTTP/1.0 server, ``Connection: close``
    without chunking) urllib3 then reads until EOF, so an SSE stream that stays open would
    deliver nothing. ``raw.read1()`` returns whatever one receive produced, in both framings,
    decoded (gzip) as ``iter_content`` would. urllib3 errors are re-raised as the requests
    exceptions ``iter_content`` raises, so callers catch one family. Anything that is not a
    urllib3 response (a test double) falls back to ``iter_content(chunk_size=None)``.
    """
    raw = getattr(response, "raw", None)
    read1 = getattr(raw, "read1", None)
    if read1 is None or not hasattr(raw, "stream"):
        yield from response.iter_content(chunk_size=None)
        return
    import requests.exceptions as rex
    from urllib3.exceptions import DecodeError, ProtocolError, ReadTimeoutError, SSLError

    try:
        while True:
            chunk = read1()
            if not chunk:
                return
            yield chunk
    except ProtocolError as exc:
        raise rex.ChunkedEncodingError(exc) from exc
    except DecodeError as exc:
        raise rex.ContentDecodingError(exc) from exc
    except ReadTimeoutError as exc:
        raise rex.ConnectionError(exc) from exc
    except SSLError as exc:
        raise rex.SSLError(exc) from exc
    finally:
        response._content_consumed = True
