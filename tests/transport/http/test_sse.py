"""The SSE parser, line by line, as h11 tests its readers: every case is fed whole, byte by
byte, and with a trailing partial event that must never come out. Then properties
(hypothesis), the size cap, and a real loopback server that keeps the stream open."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest
import requests
from hypothesis import given, settings, strategies as st

from mcpsync.errors import TransportError
from mcpsync.transport.sse import SSEDecoder, SSEEvent, iter_chunks, iter_sse

E = SSEEvent


def _feed_all(chunks: list[bytes]) -> tuple[list[SSEEvent], SSEDecoder]:
    dec = SSEDecoder()
    out: list[SSEEvent] = []
    for chunk in chunks:
        out.extend(dec.feed(chunk))
    dec.close()
    return out, dec


def tr(data: bytes, expected: list[SSEEvent], last_id: str | None = None) -> None:
    """Whole input; byte by byte; then with trailing partial data (discarded at close)."""
    whole, dec = _feed_all([data])
    assert whole == expected
    assert dec.last_event_id == last_id
    bytewise, dec = _feed_all([data[i:i + 1] for i in range(len(data))])
    assert bytewise == expected
    assert dec.last_event_id == last_id
    for i in range(len(data) + 1):
        split, _ = _feed_all([data[:i], data[i:]])
        assert split == expected, i
    trailing, dec = _feed_all([data + b"event: x\ndata: never dispatched\nid: zz"])
    assert trailing == expected
    assert dec.last_event_id == last_id


CASES: list[tuple[str, bytes, list[SSEEvent], str | None]] = [
    ("simple", b"data: hello\n\n", [E("message", "hello")], None),
    ("two events", b"data: a\n\ndata: b\n\n", [E("message", "a"), E("message", "b")], None),
    ("multi-line data", b"data: a\ndata: b\ndata\n\n", [E("message", "a\nb\n")], None),
    ("one trailing newline removed", b"data: a\ndata:\n\n", [E("message", "a\n")], None),
    ("empty data line dispatches empty", b"data:\n\n", [E("message", "")], None),
    ("event type", b"event: endpoint\ndata: /msg\n\n", [E("endpoint", "/msg")], None),
    ("type resets after dispatch", b"event: x\ndata: 1\n\ndata: 2\n\n",
     [E("x", "1"), E("message", "2")], None),
    ("empty event name is message", b"event:\ndata: 1\n\n", [E("message", "1")], None),
    ("only one space dropped", b"data:  two\n\n", [E("message", " two")], None),
    ("no space", b"data:x\n\n", [E("message", "x")], None),
    ("colon in value kept", b"data: a: b\n\n", [E("message", "a: b")], None),
    ("comment ignored", b": keep-alive\ndata: x\n:\n\n", [E("message", "x")], None),
    ("comment alone dispatches nothing", b": ping\n\n", [], None),
    ("blank lines alone", b"\n\n\n", [], None),
    ("unknown field ignored", b"foo: bar\ndata: x\n\n", [E("message", "x")], None),
    ("field name case-sensitive", b"Data: x\n\n", [], None),
    ("id", b"id: 7\ndata: x\n\n", [E("message", "x", "7")], "7"),
    ("id inherited", b"id: 7\ndata: x\n\ndata: y\n\n",
     [E("message", "x", "7"), E("message", "y", "7")], "7"),
    ("priming event", b"id: p1\ndata:\n\n", [E("message", "", "p1")], "p1"),
    ("id-only priming event", b"id: p1\n\n", [E("message", "", "p1")], "p1"),
    ("id with NUL ignored", b"id: 1\n\nid: a\x00b\ndata: x\n\n",
     [E("message", "", "1"), E("message", "x", "1")], "1"),
    ("empty id resets", b"id: 1\n\nid\ndata: x\n\n",
     [E("message", "", "1"), E("message", "x", "")], ""),
    ("retry", b"retry: 500\ndata: x\n\n", [E("message", "x", None, 500)], None),
    ("retry alone is reported", b"retry: 1500\n\n", [E("message", "", None, 1500)], None),
    ("retry non-digits ignored", b"retry: 5s\ndata: x\n\nretry: -1\ndata: y\n\n",
     [E("message", "x"), E("message", "y")], None),
    ("retry non-ascii digits ignored", "retry: \u0661\u0662\ndata: x\n\n".encode(),
     [E("message", "x")], None),
    ("retry empty ignored", b"retry:\ndata: x\n\n", [E("message", "x")], None),
    ("CRLF", b"data: a\r\ndata: b\r\n\r\n", [E("message", "a\nb")], None),
    ("CR", b"data: a\rdata: b\r\r", [E("message", "a\nb")], None),
    ("mixed endings", b"data: a\r\n\rdata: b\n\r\n", [E("message", "a"), E("message", "b")],
     None),
    ("CR then LF is one ending", b"data: a\r\n\r\ndata: b\r\r\n",
     [E("message", "a"), E("message", "b")], None),
    ("BOM dropped", b"\xef\xbb\xbfdata: x\n\n", [E("message", "x")], None),
    ("only one BOM dropped", b"\xef\xbb\xbf\xef\xbb\xbfdata: x\n\ndata: y\n\n",
     [E("message", "y")], None),
    ("utf-8", "data: h\u00e9llo \u2603 \U0001f600\n\n".encode(),
     [E("message", "h\u00e9llo \u2603 \U0001f600")], None),
    ("invalid utf-8 replaced", b"data: a\xffb\n\n", [E("message", "a\ufffdb")], None),
    ("json", b'event: message\nid: s1-2\ndata: {"jsonrpc":"2.0","id":1,"result":{}}\n\n',
     [E("message", '{"jsonrpc":"2.0","id":1,"result":{}}', "s1-2")], "s1-2"),
]


@pytest.mark.parametrize(("data", "expected", "last_id"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_reader(data: bytes, expected: list[SSEEvent], last_id: str | None) -> None:
    tr(data, expected, last_id)


def test_unfinished_event_discarded_and_its_id_not_counted() -> None:
    dec = SSEDecoder()
    assert dec.feed(b"id: 1\ndata: a\n\nid: 2\ndata: b\n") == [E("message", "a", "1")]
    assert dec.buffered > 0
    dec.close()
    assert dec.last_event_id == "1"
    assert dec.buffered == 0
    # After close the decoder is a fresh stream (a BOM is dropped again).
    assert dec.feed(b"\xef\xbb\xbfdata: c\n\n") == [E("message", "c", "1")]


def test_event_available_as_soon_as_its_blank_line_arrives() -> None:
    dec = SSEDecoder()
    assert dec.feed(b"data: a\n") == []
    assert dec.feed(b"\n") == [E("message", "a")]
    # A CR at the end of a chunk ends the line at once; the LF that follows is not a blank line.
    assert dec.feed(b"data: b\r\r") == [E("message", "b")]
    assert dec.feed(b"\ndata: c\n\n") == [E("message", "c")]


def test_comments_are_counted_for_the_watchdog() -> None:
    dec = SSEDecoder()
    dec.feed(b": ping\n\n:\n\ndata: x\n\n: pi")
    assert dec.comments == 2
    dec.feed(b"ng\n")
    assert dec.comments == 3


def test_retry_ms_persists_across_events() -> None:
    dec = SSEDecoder()
    dec.feed(b"retry: 500\nid: 1\ndata:\n\ndata: x\n\n")
    assert dec.retry_ms == 500
    assert dec.feed(b"retry: x\n\n") == []
    assert dec.retry_ms == 500


def test_event_over_the_cap_raises_and_stays_failed() -> None:
    dec = SSEDecoder(max_event_bytes=100)
    assert dec.feed(b"data: " + b"x" * 50 + b"\n\n") == [E("message", "x" * 50)]
    dec.feed(b"data: " + b"y" * 60 + b"\n")
    with pytest.raises(TransportError, match="max_frame_bytes"):
        dec.feed(b"data: " + b"y" * 60 + b"\n")
    with pytest.raises(TransportError):
        dec.feed(b"\n")


def test_partial_line_over_the_cap_raises() -> None:
    dec = SSEDecoder(max_event_bytes=1000)
    for _ in range(9):
        dec.feed(b"y" * 100)
    with pytest.raises(TransportError):
        dec.feed(b"y" * 200)


def test_cap_counts_utf8_bytes_not_characters() -> None:
    dec = SSEDecoder(max_event_bytes=100)
    with pytest.raises(TransportError):
        dec.feed(("data: " + "\u00e9" * 60 + "\n").encode())


def test_iter_sse_yields_and_discards_at_end() -> None:
    dec = SSEDecoder()
    chunks = [b"id: 9\nda", b"ta: x\n", b"\n", b"data: unfinished"]
    assert list(iter_sse(chunks, dec)) == [E("message", "x", "9")]
    assert dec.buffered == 0


# ---- properties --------------------------------------------------------------------------

_text = st.text(alphabet=st.characters(blacklist_categories=["Cs"],
                                       blacklist_characters="\r\n\x00"), max_size=20)
_event = st.tuples(st.lists(_text, min_size=1, max_size=4),
                   st.one_of(st.none(), st.from_regex(r"[a-z]{1,8}", fullmatch=True)),
                   st.one_of(st.none(), st.from_regex(r"[A-Za-z0-9-]{1,8}", fullmatch=True)))


@settings(max_examples=150, deadline=None)
@given(events=st.lists(_event, max_size=6), ending=st.sampled_from(["\n", "\r", "\r\n"]),
       cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8),
       comments=st.booleans())
def test_serialised_events_round_trip_however_chunked(
        events: list[tuple[list[str], str | None, str | None]], ending: str, cuts: list[int],
        comments: bool) -> None:
    text = ""
    expected: list[SSEEvent] = []
    last: str | None = None
    for lines, etype, eid in events:
        if comments:
            text += ": keep-alive" + ending
        if etype is not None:
            text += f"event: {etype}{ending}"
        if eid is not None:
            text += f"id: {eid}{ending}"
            last = eid
        for line in lines:
            text += f"data: {line}{ending}"
        text += ending
        expected.append(E(etype or "message", "\n".join(lines), last))
    data = text.encode()
    points = sorted({min(c, len(data)) for c in cuts})
    chunks = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    got, _ = _feed_all(chunks)
    assert got == expected


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200), st.lists(st.integers(min_value=0, max_value=200), max_size=6))
def test_arbitrary_bytes_parse_the_same_however_chunked(data: bytes, cuts: list[int]) -> None:
    whole, _ = _feed_all([data])
    points = sorted({min(c, len(data)) for c in cuts})
    chunks = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    split, _ = _feed_all(chunks)
    assert split == whole


# ---- a real server that keeps the stream open -------------------------------------------

class _Server:
    """A loopback HTTP server that sends one event and then holds the stream open until
    released, in either framing (chunked, or delimited by connection close)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        release = self.release

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                body = b": hello\n\nid: e1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"x\"}\n\n"
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                if self.path == "/chunked":
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(body), body))
                    self.wfile.flush()
                    release.wait(10)
                    self.wfile.write(b"0\r\n\r\n")
                else:
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.write(body)
                    self.wfile.flush()
                    release.wait(10)
                    self.close_connection = True

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,),
                                       name="mcpsync-test-sse", daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


@pytest.fixture
def sse_server() -> Iterator[_Server]:
    server = _Server()
    try:
        yield server
    finally:
        server.close()


def _first_event_while_open(server: _Server, path: str, use_iter_content: bool) -> SSEEvent:
    with requests.get(server.url + path, stream=True, timeout=(5, 5)) as response:
        chunks = (response.iter_content(chunk_size=None) if use_iter_content
                  else iter_chunks(response))
        for event in iter_sse(chunks):
            # The server still holds the stream: the event came before any EOF.
            assert not server.release.is_set()
            server.release.set()
            return event
    raise AssertionError("no event")


@pytest.mark.timeout(20)
def test_event_delivered_while_chunked_stream_stays_open_iter_content(
        sse_server: _Server) -> None:
    event = _first_event_while_open(sse_server, "/chunked", use_iter_content=True)
    assert event == E("message", '{"jsonrpc":"2.0","method":"x"}', "e1")


@pytest.mark.timeout(20)
@pytest.mark.parametrize("path", ["/chunked", "/close"])
def test_event_delivered_while_stream_stays_open_iter_chunks(sse_server: _Server,
                                                             path: str) -> None:
    # iter_content(chunk_size=None) would wait for EOF on the close-delimited body; the read
    # timeout (5 s) is shorter than the server's hold (10 s), so buffering would fail here.
    event = _first_event_while_open(sse_server, path, use_iter_content=False)
    assert event == E("message", '{"jsonrpc":"2.0","method":"x"}', "e1")
