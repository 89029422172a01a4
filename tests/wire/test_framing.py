"""Tests of line framing: FrameDecoder, FrameReader and FrameWriter.

Real pipes and a real child process are used where the behaviour depends on how an OS
stream delivers bytes; small in-memory streams script the faults no real stream produces on
demand (short writes, an OSError mid-read).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
from typing import Any

import pytest

from mcpsync import jsonrpc
from mcpsync.jsonrpc import (
    Batch,
    FrameDecoder,
    FrameReader,
    FrameWriter,
    Message,
    ParseError,
    StreamError,
    notification,
    parse,
    request,
    result,
)

PING = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
NOTE = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'


class CountingStream(io.BytesIO):
    """A BytesIO that records how far it has been read."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.reads = 0

    def read1(self, size: int | None = -1, /) -> bytes:
        self.reads += 1
        return super().read1(size)


class TrickleStream:
    """A stream that hands out ``step`` bytes per read, like a slow pipe."""

    def __init__(self, data: bytes, step: int = 1) -> None:
        self._data = data
        self._pos = 0
        self._step = step

    def read1(self, size: int = -1, /) -> bytes:
        n = min(self._step, size if size > 0 else self._step)
        chunk = self._data[self._pos:self._pos + n]
        self._pos += len(chunk)
        return chunk


class FailingStream:
    """Yields ``data`` first, then raises ``exc`` on every read."""

    def __init__(self, data: bytes, exc: BaseException) -> None:
        self._data = data
        self._exc = exc
        self.calls = 0

    def read1(self, size: int = -1, /) -> bytes:
        self.calls += 1
        if self._data:
            chunk, self._data = self._data, b""
            return chunk
        raise self._exc


def read_all(reader: FrameReader) -> list[Any]:
    """Every outcome of a reader until end of input: messages and ParseErrors."""
    out: list[Any] = []
    while True:
        try:
            item = reader.read()
        except ParseError as exc:
            out.append(exc)
            continue
        if item is None:
            return out
        out.append(item)


# --- reader -----------------------------------------------------------------------------------


def test_reader_returns_messages_then_none() -> None:
    reader = FrameReader(io.BytesIO(PING + b"\n" + NOTE + b"\n"))
    first = reader.read()
    assert isinstance(first, Message) and first.method == "ping"
    second = reader.read()
    assert isinstance(second, Message) and second.is_notification
    assert reader.read() is None
    assert reader.read() is None  # end of input stays the end


def test_reader_is_iterable() -> None:
    reader = FrameReader(io.BytesIO(PING + b"\n" + NOTE + b"\n"))
    assert [m.method for m in reader if isinstance(m, Message)] == [
        "ping", "notifications/initialized"]


def test_iteration_resumes_after_a_parse_error() -> None:
    reader = FrameReader(io.BytesIO(b"oops\n" + PING + b"\n"))
    with pytest.raises(ParseError):
        list(reader)
    assert [m for m in reader] == [parse(PING)]


def test_crlf_is_tolerated_and_lone_cr_ends_nothing() -> None:
    reader = FrameReader(io.BytesIO(PING + b"\r\n" + NOTE + b"\r" + NOTE + b"\n"))
    assert reader.read() == parse(PING)
    with pytest.raises(ParseError) as info:  # two objects on one line: CR is not an end
        reader.read()
    assert info.value.code == jsonrpc.PARSE_ERROR
    assert reader.read() is None


def test_whitespace_only_lines_are_skipped() -> None:
    data = b"\n \n\t\r\n" + PING + b"\n\n   \r\n" + NOTE + b"\n \t"
    assert read_all(FrameReader(io.BytesIO(data))) == [parse(PING), parse(NOTE)]


def test_vertical_tab_line_is_not_whitespace() -> None:
    outcomes = read_all(FrameReader(io.BytesIO(b"\x0b\n" + PING)))
    assert isinstance(outcomes[0], ParseError) and outcomes[1:] == [parse(PING)]


def test_last_line_without_newline_is_parsed() -> None:
    assert read_all(FrameReader(io.BytesIO(PING + b"\n" + NOTE))) == [parse(PING), parse(NOTE)]
    bad = read_all(FrameReader(io.BytesIO(PING + b"\n{broken")))
    assert bad[0] == parse(PING) and isinstance(bad[1], ParseError) and len(bad) == 2


def test_bad_line_raises_and_reader_stays_usable() -> None:
    data = b"not json\n" + b'{"jsonrpc":"2.0","id":5}\n' + PING + b"\n"
    reader = FrameReader(io.BytesIO(data))
    with pytest.raises(ParseError) as first:
        reader.read()
    assert first.value.code == jsonrpc.PARSE_ERROR and first.value.id is None
    with pytest.raises(ParseError) as second:
        reader.read()
    assert second.value.code == jsonrpc.INVALID_REQUEST and second.value.id is not None
    assert second.value.id.value == 5
    assert reader.read() == parse(PING)
    assert reader.read() is None


def test_many_bad_lines_in_one_read_lose_nothing() -> None:
    data = b"".join(b"bad %d\n" % i for i in range(5)) + PING + b"\n"
    stream = CountingStream(data)
    outcomes = read_all(FrameReader(stream))
    assert [type(o) for o in outcomes] == [ParseError] * 5 + [Message]
    assert [o.excerpt for o in outcomes[:5]] == [f"bad {i}" for i in range(5)]


def test_line_at_exactly_the_limit_is_accepted() -> None:
    filler = b" " * (100 - len(PING))
    line = PING + filler
    assert len(line) == 100
    reader = FrameReader(io.BytesIO(line + b"\n" + line), max_frame_bytes=100)
    assert read_all(reader) == [parse(PING), parse(PING)]


def test_over_long_line_is_a_sticky_stream_error_and_is_not_read_further() -> None:
    limit = 100
    data = PING + b"\n" + b"x" * 10_000 + b"\n" + PING + b"\n"
    stream = CountingStream(data)
    reader = FrameReader(stream, max_frame_bytes=limit)
    assert reader.read() == parse(PING)
    with pytest.raises(StreamError) as info:
        reader.read()
    assert "100" in str(info.value)
    # Never more than limit + 1 bytes of the long line were taken from the stream.
    assert stream.tell() <= len(PING) + 1 + limit + 1
    position = stream.tell()
    with pytest.raises(StreamError) as again:
        reader.read()
    assert again.value is info.value
    assert stream.tell() == position


def test_over_long_line_with_no_newline_at_all() -> None:
    reader = FrameReader(TrickleStream(b"{" + b"1" * 500, step=7), max_frame_bytes=64)
    with pytest.raises(StreamError):
        reader.read()


def test_lines_before_an_over_long_line_in_the_same_read_are_delivered() -> None:
    data = PING + b"\n" + NOTE + b"\n" + b"y" * 300 + b"\n"
    reader = FrameReader(io.BytesIO(data), max_frame_bytes=120)
    assert reader.read() == parse(PING)
    assert reader.read() == parse(NOTE)
    with pytest.raises(StreamError):
        reader.read()


def test_os_error_during_read_is_a_chained_sticky_stream_error() -> None:
    cause = OSError(5, "Input/output error")
    stream = FailingStream(PING + b"\n", cause)
    reader = FrameReader(stream)
    assert reader.read() == parse(PING)
    with pytest.raises(StreamError) as info:
        reader.read()
    assert info.value.__cause__ is cause
    calls = stream.calls
    with pytest.raises(StreamError) as again:
        reader.read()
    assert again.value is info.value and stream.calls == calls


def test_closed_stream_is_a_stream_error() -> None:
    stream = io.BytesIO(PING + b"\n")
    stream.close()
    reader = FrameReader(stream)
    with pytest.raises(StreamError) as info:
        reader.read()
    assert isinstance(info.value.__cause__, ValueError)


def test_reader_over_a_stream_without_read1() -> None:
    read_fd, write_fd = os.pipe()
    os.write(write_fd, PING + b"\n" + NOTE)
    os.close(write_fd)
    with open(read_fd, "rb", buffering=0) as raw:  # FileIO: read() returns what is there
        assert not hasattr(raw, "read1")
        assert read_all(FrameReader(raw)) == [parse(PING), parse(NOTE)]


def test_batches_only_when_allowed_and_switchable() -> None:
    batch_line = b'[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"n"}]\n'
    reader = FrameReader(io.BytesIO(batch_line * 2 + b"[]\n"))
    assert reader.allow_batch is False
    with pytest.raises(ParseError) as info:
        reader.read()
    assert info.value.code == jsonrpc.INVALID_REQUEST
    assert "batches are only allowed under 2025-03-26" in str(info.value)
    reader.allow_batch = True  # 2025-03-26 was negotiated
    batch = reader.read()
    assert isinstance(batch, Batch) and [m.method for m in batch] == ["ping", "n"]
    with pytest.raises(ParseError) as empty:
        reader.read()
    assert empty.value.code == jsonrpc.INVALID_REQUEST
    assert reader.read() is None


def test_batch_elements_that_are_invalid_become_parse_errors() -> None:
    reader = FrameReader(io.BytesIO(b'[1,{"jsonrpc":"2.0","id":2,"result":3}]\n'),
                         allow_batch=True)
    batch = reader.read()
    assert isinstance(batch, Batch)
    assert isinstance(batch[0], ParseError) and batch[0].code == jsonrpc.INVALID_REQUEST
    assert batch[1] == result(2, 3)


def test_reader_over_a_real_child_process() -> None:
    # The child writes lines in pieces, with flushes in the middle of a line, so the
    # reader sees partial lines the way a real pipe delivers them.
    script = r"""
import sys, time
out = sys.stdout.buffer
for i in range(20):
    line = b'{"jsonrpc":"2.0","id":%d,"result":{"text":"%s"}}\n' % (i, b"z" * (i * 500))
    half = len(line) // 2
    out.write(line[:half]); out.flush()
    if i % 5 == 0:
        time.sleep(0.01)
    out.write(line[half:]); out.flush()
out.write(b"garbage\n")
out.write(b'{"jsonrpc":"2.0","method":"last"}')
out.flush()
"""
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        outcomes = read_all(FrameReader(proc.stdout))
    finally:
        if proc.stdout is not None:
            proc.stdout.close()
        proc.wait(timeout=10)
    assert [o.id.value for o in outcomes[:20]] == list(range(20))
    assert outcomes[19].result == {"text": "z" * 9500}
    assert isinstance(outcomes[20], ParseError)
    assert outcomes[21] == notification("last")
    assert len(outcomes) == 22


# --- decoder ----------------------------------------------------------------------------------


def test_decoder_returns_parse_errors_in_the_list() -> None:
    decoder = FrameDecoder()
    items = decoder.feed(b"bad\n" + PING + b"\n[1]\n" + NOTE[:10])
    assert isinstance(items[0], ParseError) and items[0].code == jsonrpc.PARSE_ERROR
    assert items[1] == parse(PING)
    assert isinstance(items[2], ParseError) and items[2].code == jsonrpc.INVALID_REQUEST
    assert len(items) == 3
    assert decoder.buffered == 10
    assert decoder.feed(NOTE[10:]) == []
    assert decoder.finish() == [parse(NOTE)]
    assert decoder.finish() == []


def test_decoder_holds_at_most_the_limit_of_a_partial_line() -> None:
    decoder = FrameDecoder(max_frame_bytes=50)
    assert decoder.feed(b"{" * 30) == []
    assert decoder.feed(b" " * 20) == []
    assert decoder.buffered == 50
    with pytest.raises(StreamError) as info:
        decoder.feed(b" ")
    assert decoder.buffered == 0
    with pytest.raises(StreamError) as again:
        decoder.feed(PING + b"\n")
    assert again.value is info.value
    with pytest.raises(StreamError):
        decoder.finish()


def test_decoder_complete_over_long_line_in_one_chunk() -> None:
    decoder = FrameDecoder(max_frame_bytes=50)
    with pytest.raises(StreamError):
        decoder.feed(PING + b"\n" + b" " * 51 + b"\n")


def test_decoder_allow_batch_is_settable() -> None:
    decoder = FrameDecoder()
    line = b"[" + PING + b"]\n"
    assert isinstance(decoder.feed(line)[0], ParseError)
    decoder.allow_batch = True
    assert decoder.feed(line) == [Batch([request(1, "ping")])]


def test_decoder_rejects_a_non_positive_limit() -> None:
    with pytest.raises(ValueError):
        FrameDecoder(max_frame_bytes=0)


# --- writer -----------------------------------------------------------------------------------


class RecordingStream:
    """Records every write call and flush; accepts at most ``accept`` bytes per write."""

    def __init__(self, accept: int | None = None) -> None:
        self.writes: list[bytes] = []
        self.flushes = 0
        self._accept = accept
        self.data = bytearray()

    def write(self, data: bytes) -> int:
        chunk = bytes(data) if self._accept is None else bytes(data[:self._accept])
        self.writes.append(chunk)
        self.data += chunk
        return len(chunk)

    def flush(self) -> None:
        self.flushes += 1


def test_writer_writes_frame_and_newline_in_one_call_and_flushes() -> None:
    stream = RecordingStream()
    writer = FrameWriter(stream)
    msg = request(1, "tools/call", {"name": "echo", "arguments": {"text": "a\nb"}})
    writer.write(msg)
    assert stream.writes == [jsonrpc.serialize(msg) + b"\n"]
    assert stream.flushes == 1


def test_writer_finishes_short_writes() -> None:
    stream = RecordingStream(accept=3)
    writer = FrameWriter(stream)
    writer.write(notification("n", {"k": "v"}))
    assert bytes(stream.data) == jsonrpc.serialize(notification("n", {"k": "v"})) + b"\n"
    assert len(stream.writes) > 1 and stream.flushes == 1


def test_writer_short_writes_never_interleave_between_threads() -> None:
    stream = RecordingStream(accept=7)
    writer = FrameWriter(stream)
    errors: list[BaseException] = []

    def hammer(k: int) -> None:
        try:
            for i in range(50):
                writer.write(request(f"{k}-{i}", "m", {"payload": "p" * (k * 13 + i)}))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=hammer, args=(k,), name=f"mcpsync-test-writer-{k}",
                                daemon=True) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors
    lines = bytes(stream.data).split(b"\n")
    assert lines[-1] == b""
    seen = {parse(line).id.value for line in lines[:-1]}  # type: ignore[union-attr]
    assert len(seen) == 8 * 50


@pytest.mark.timeout(30)
def test_writer_from_many_threads_over_a_real_pipe() -> None:
    read_fd, write_fd = os.pipe()
    reader_file = open(read_fd, "rb")  # noqa: SIM115 - closed below
    writer_file = open(write_fd, "wb")  # noqa: SIM115 - closed below
    writer = FrameWriter(writer_file)
    received: list[Any] = []

    def drain() -> None:
        received.extend(read_all(FrameReader(reader_file)))

    drainer = threading.Thread(target=drain, name="mcpsync-test-drain", daemon=True)
    drainer.start()
    big = "b" * 100_000  # larger than the pipe buffer, so writes really are partial

    def send(k: int) -> None:
        for i in range(20):
            writer.write(result(k * 100 + i, {"blob": big if i % 5 == 0 else "s"}))

    threads = [threading.Thread(target=send, args=(k,), name=f"mcpsync-test-send-{k}",
                                daemon=True) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    writer_file.close()
    drainer.join(timeout=20)
    reader_file.close()
    assert all(isinstance(m, Message) for m in received)
    assert sorted(m.id.value for m in received) == sorted(
        k * 100 + i for k in range(6) for i in range(20))


@pytest.mark.timeout(30)
def test_writer_serialises_outside_its_lock() -> None:
    entered = threading.Event()
    release = threading.Event()

    class BlockingStream(RecordingStream):
        def write(self, data: bytes) -> int:
            entered.set()
            release.wait(20)
            return super().write(data)

    stream = BlockingStream()
    writer = FrameWriter(stream)
    holder = threading.Thread(target=writer.write, args=(notification("first"),),
                              name="mcpsync-test-holder", daemon=True)
    holder.start()
    assert entered.wait(10)  # the holder is inside write(), holding the lock
    outcome: list[BaseException] = []

    def bad_write() -> None:
        try:
            writer.write(request(2, "m", {"v": float("nan")}))
        except ValueError as exc:
            outcome.append(exc)

    other = threading.Thread(target=bad_write, name="mcpsync-test-bad", daemon=True)
    other.start()
    other.join(10)
    # The bad value failed while the lock was still held: it was serialised outside it.
    assert not release.is_set() and len(outcome) == 1
    release.set()
    holder.join(10)
    assert bytes(stream.data) == jsonrpc.serialize(notification("first")) + b"\n"


def test_writer_value_error_before_anything_is_written() -> None:
    stream = RecordingStream()
    writer = FrameWriter(stream)
    with pytest.raises(ValueError):
        writer.write(request(1, "m", {"v": float("nan")}))
    with pytest.raises(ValueError):
        writer.write(request(1, "m", {"v": "\ud800"}))
    assert stream.writes == [] and stream.flushes == 0
    writer.write(notification("still fine"))  # the caller's bug does not break the writer
    assert len(stream.writes) == 1


class BrokenStream:
    def __init__(self) -> None:
        self.calls = 0

    def write(self, data: bytes) -> int:
        self.calls += 1
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        pass


def test_writer_os_error_is_a_chained_sticky_stream_error() -> None:
    stream = BrokenStream()
    writer = FrameWriter(stream)
    with pytest.raises(StreamError) as info:
        writer.write(notification("n"))
    assert isinstance(info.value.__cause__, BrokenPipeError)
    with pytest.raises(StreamError) as again:
        writer.write(notification("n"))
    assert again.value is info.value and stream.calls == 1


def test_writer_over_a_closed_real_pipe() -> None:
    read_fd, write_fd = os.pipe()
    os.close(read_fd)
    with open(write_fd, "wb") as out:
        writer = FrameWriter(out)
        with pytest.raises(StreamError) as info:
            writer.write(notification("n"))
        assert isinstance(info.value.__cause__, BrokenPipeError)
        with pytest.raises(StreamError):
            writer.write(notification("n"))
        with pytest.raises(OSError):
            out.close()  # the buffered data cannot be flushed either


def test_writer_closed_stream_is_a_stream_error() -> None:
    stream = io.BytesIO()
    stream.close()
    with pytest.raises(StreamError):
        FrameWriter(stream).write(notification("n"))


def test_writer_stream_that_stops_accepting_bytes() -> None:
    class Stuck(RecordingStream):
        def write(self, data: bytes) -> int:
            return 0

    with pytest.raises(StreamError):
        FrameWriter(Stuck()).write(notification("n"))


def test_write_batch_writes_one_array_line() -> None:
    stream = io.BytesIO()
    writer = FrameWriter(stream)
    writer.write_batch([result(1, {}), jsonrpc.error(2, -32601, "nope")])
    line = stream.getvalue()
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == [
        {"jsonrpc": "2.0", "id": 1, "result": {}},
        {"jsonrpc": "2.0", "id": 2, "error": {"code": -32601, "message": "nope"}}]
    batch = parse(line[:-1], allow_batch=True)
    assert isinstance(batch, Batch) and len(batch) == 2
    with pytest.raises(ValueError):
        writer.write_batch([])


def test_write_frame_takes_pre_serialised_bytes() -> None:
    stream = io.BytesIO()
    writer = FrameWriter(stream)
    writer.write_frame(PING)
    assert stream.getvalue() == PING + b"\n"
    with pytest.raises(ValueError):
        writer.write_frame(PING + b"\n" + PING)


def test_answer_sink_takes_a_plain_result_read_alone() -> None:
    taken: list[tuple[int, Any]] = []
    decoder = FrameDecoder()
    decoder.answer = lambda rid, result: taken.append((rid, result)) or rid == 7
    # Taken: the read decodes to no frame.
    assert decoder.feed(b'{"jsonrpc":"2.0","id":7,"result":{"ok":1}}\n') == []
    # Declined (nobody waits for 8): the same line comes back as a frame.
    [declined] = decoder.feed(b'{"jsonrpc":"2.0","id":8,"result":{"ok":2}}\n')
    assert isinstance(declined, Message) and declined.id is not None
    assert (declined.id.raw, declined.result) == ("8", {"ok": 2})
    assert taken == [(7, {"ok": 1}), (8, {"ok": 2})]


@pytest.mark.parametrize("data", [
    b'{"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"no"}}\n',  # an error
    b'{"jsonrpc":"2.0","id":"7","result":{}}\n',                           # a string id
    b'{"jsonrpc":"2.0","id":7,"result":{},"x":1}\n',                       # an extra member
    b'{"jsonrpc":"2.0","method":"notifications/progress","params":{}}\n',  # a notification
    b'{"jsonrpc":"2.0","id":7,"result":{"t":"\\u00e9"}}\n',                # an escape
    b'{"jsonrpc":"2.0","id":7,"result":{}}\n{"jsonrpc":"2.0","id":8,"result":{}}\n',  # two
])
def test_answer_sink_sees_only_the_plain_case(data: bytes) -> None:
    taken: list[int] = []
    decoder = FrameDecoder()
    decoder.answer = lambda rid, result: taken.append(rid) is None
    expected = FrameDecoder().feed(data)
    got = decoder.feed(data)
    assert taken == []
    assert [repr(f) for f in got] == [repr(f) for f in expected] and got
