"""Resumable legacy streams over real loopback HTTP: event ids, priming events, polling
(``ctx.close_stream``), GET + ``Last-Event-ID``, the store's bounds, and what a client that
goes away mid-call means in each era.

Raw ``http.client`` exchanges make ids, priming events and ``retry`` fields visible; our own
client shows a resumption end to end.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import mcpsync
from mcpsync.server import Context, Server
from mcpsync.server.http._events import EventStore, Lookup

from .helpers import MODERN, initialize_params, modern_meta
from .test_server_http_app import Served

SSE_ACCEPT = "application/json, text/event-stream"


def build() -> tuple[Server, dict[str, Any]]:
    server = Server("resume-test", "1.0")
    seen: dict[str, Any] = {"gate": threading.Event(), "finished": threading.Event(),
                            "waiting": threading.Event(),
                            "cancelled": threading.Event()}

    @server.tool(polling=True)
    def poll(ctx: Context, count: int = 0) -> str:
        """Closes its connection, then sends ``count`` progress events, then answers."""
        seen["closed"] = ctx.close_stream(retry_ms=250)
        for i in range(count):
            ctx.progress(i + 1, count, "x" * 40)
        return f"polled {count}"

    @server.tool(polling=True)
    def waiter(ctx: Context) -> str:
        """Closes its connection, then waits to be cancelled."""
        ctx.close_stream(retry_ms=100)
        seen["waiting"].set()
        ctx.cancelled.wait(10)
        return "not cancelled"

    @server.tool()
    def plain(ctx: Context) -> str:
        """Not registered with polling=True: cannot close its stream, runs where it arrived."""
        seen["plain"] = (ctx.close_stream(retry_ms=250), threading.current_thread().name)
        return "plain"

    @server.tool()
    def steps(ctx: Context) -> str:
        """One progress event, then waits for the test, then three more, then answers."""
        ctx.progress(1, 4)
        seen["gate"].wait(10)
        for i in range(2, 5):
            time.sleep(0.05)
            ctx.progress(i, 4)
        seen["finished"].set()
        seen["was_cancelled"] = ctx.cancelled.is_set()
        return "all steps"

    @server.tool()
    def endless(ctx: Context) -> str:
        """Progress every 50 ms until cancelled."""
        i = 0
        while not ctx.cancelled.wait(0.05):
            i += 1
            ctx.progress(i)
        seen["cancelled"].set()
        return "stopped"

    return server, seen


@pytest.fixture
def served() -> Iterator[tuple[Served, dict[str, Any]]]:
    server, seen = build()
    s = Served(server)
    yield s, seen
    s.close()


class Sse:
    """An SSE response read event by event: each a dict of its fields."""

    def __init__(self, conn: http.client.HTTPConnection,
                 response: http.client.HTTPResponse) -> None:
        self.conn = conn
        self.response = response

    def next(self) -> dict[str, str] | None:
        fields: dict[str, str] = {}
        while True:
            line = self.response.readline()
            if not line:
                return fields or None
            text = line.decode().rstrip("\n")
            if not text:
                if fields:
                    return fields
                continue
            if text.startswith(":"):
                fields.setdefault("comment", text)
                continue
            name, _, value = text.partition(":")
            fields[name] = value[1:] if value.startswith(" ") else value

    def rest(self) -> list[dict[str, str]]:
        out = []
        while (e := self.next()) is not None:
            out.append(e)
        return out

    def close(self) -> None:
        self.conn.close()


def open_request(s: Served, method: str, body: Any = None,
                 headers: dict[str, str] | None = None) -> tuple[int, Sse]:
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=10)
    all_headers = {"Content-Type": "application/json", "Accept": SSE_ACCEPT, **(headers or {})}
    conn.request(method, "/mcp", None if body is None else json.dumps(body), all_headers)
    response = conn.getresponse()
    return response.status, Sse(conn, response)


def session(s: Served, version: str = "2025-11-25") -> dict[str, str]:
    status, headers, _ = s.post({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                 "params": initialize_params(version)})
    assert status == 200
    sid = headers["Mcp-Session-Id"]
    s.post({"jsonrpc": "2.0", "method": "notifications/initialized"},
           {"Mcp-Session-Id": sid})
    return {"Mcp-Session-Id": sid, "MCP-Protocol-Version": version}


def call(name: str, rid: int = 1, **arguments: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": name, "arguments": arguments, "_meta": {"progressToken": rid}}}


def frames(events: list[dict[str, str]]) -> list[dict[str, Any]]:
    return [json.loads(e["data"]) for e in events if e.get("data")]


def resume(s: Served, hdrs: dict[str, str], last: str) -> tuple[int, Sse]:
    return open_request(s, "GET", headers={**hdrs, "Accept": "text/event-stream",
                                           "Last-Event-ID": last})


def test_polling_primes_closes_and_resumes_with_the_result(served: Any) -> None:
    s, seen = served
    hdrs = session(s)
    status, sse = open_request(s, "POST", call("poll", count=2), hdrs)
    assert status == 200 and sse.response.getheader("Content-Type") == "text/event-stream"
    events = sse.rest()     # the server ended the connection before the result
    sse.close()
    assert seen["closed"] is True
    primer = events[0]
    # Closed before anything else was sent: the priming event carries the handler's retry.
    assert primer["data"] == "" and primer["retry"] == "250" and "-" in primer["id"]
    assert not frames(events)
    status, sse = resume(s, hdrs, primer["id"])
    assert status == 200
    replay = [e for e in sse.rest() if "comment" not in e]   # a keep-alive opens it
    sse.close()
    got = frames(replay)
    assert [f.get("method") for f in got] == ["notifications/progress"] * 2 + [None]
    assert got[-1]["result"]["content"][0]["text"] == "polled 2"
    stream = primer["id"].split("-")[0]
    assert all(e["id"].split("-")[0] == stream for e in replay)
    seqs = [int(e["id"].split("-")[1]) for e in replay]
    assert seqs == sorted(seqs) and seqs[0] > int(primer["id"].split("-")[1])


def test_a_tool_not_registered_for_polling_cannot_close_and_runs_where_it_arrived(
        served: Any) -> None:
    s, seen = served
    hdrs = session(s)
    status, _, body = s.post(call("plain"), hdrs)
    assert status == 200 and json.loads(body)["result"]["content"][0]["text"] == "plain"
    closed, thread = seen["plain"]
    assert closed is False
    assert thread.startswith("mcpsync-") and not thread.startswith("mcpsync-http-call-")


def test_older_sessions_get_ids_but_no_empty_events_and_no_polling(served: Any) -> None:
    s, seen = served
    hdrs = session(s, "2025-06-18")
    status, sse = open_request(s, "POST", call("poll", count=2), hdrs)
    events = sse.rest()
    sse.close()
    assert status == 200 and seen["closed"] is False   # no polling before 2025-11-25
    assert all(e.get("data") for e in events) and all("id" in e for e in events)
    assert frames(events)[-1]["result"]["content"][0]["text"] == "polled 2"


def test_the_store_is_bounded_and_a_dropped_id_is_refused(served: Any) -> None:
    s, _ = served
    hdrs = session(s)
    _, sse = open_request(s, "POST", call("poll", count=1100), hdrs)
    primer = sse.rest()[0]
    sse.close()
    stream, seq = (int(x) for x in primer["id"].split("-"))
    deadline = time.monotonic() + 10
    while True:   # the handler is done once its result id answers
        status, sse = resume(s, hdrs, f"{stream}-{seq + 1100}")
        got = frames(sse.rest())
        sse.close()
        if status == 200 and got:
            break
        assert time.monotonic() < deadline
    assert got[-1]["result"]["content"][0]["text"] == "polled 1100"
    status, sse = resume(s, hdrs, primer["id"])   # 1,102 events later: long gone
    body = json.loads(sse.response.read())
    sse.close()
    assert status == 410 and "no longer kept" in body["error"]["message"]
    # 1,102 events (priming, progress, result) up to seq + 1101: the last 1,000 are kept.
    status, sse = resume(s, hdrs, f"{stream}-{seq + 101}")
    sse.response.read()
    sse.close()
    assert status == 410
    status, sse = resume(s, hdrs, f"{stream}-{seq + 102}")   # the oldest one kept
    got = frames(sse.rest())
    sse.close()
    assert status == 200 and len(got) == 999


def test_the_store_holds_at_most_its_bytes() -> None:
    store = EventStore()
    frame = b"y" * (1024 * 1024)
    stream = store.open_stream()
    first = store.record(stream, frame)
    for _ in range(20):
        store.record(stream, frame)
    count, size = store.stats()
    assert size <= 8 * 1024 * 1024 and count == 8
    assert store.find(first.id) == Lookup.DROPPED


def test_a_resume_never_gets_another_streams_events(served: Any) -> None:
    s, _ = served
    hdrs = session(s)
    ids = []
    for rid in (1, 2):
        _, sse = open_request(s, "POST", call("poll", rid, count=3), hdrs)
        ids.append(sse.rest()[0]["id"])
        sse.close()
    time.sleep(0.2)
    _, sse = resume(s, hdrs, ids[0])
    got = frames(sse.rest())
    sse.close()
    assert got[-1]["id"] == 1 and all(f.get("params", {}).get("progressToken", 1) == 1
                                      for f in got)
    # The first stream's number with a seq of the second stream: not an id of that stream.
    forged = f"{ids[0].split('-')[0]}-{ids[1].split('-')[1]}"
    status, sse = resume(s, hdrs, forged)
    body = json.loads(sse.response.read())
    sse.close()
    assert status == 400 and "names no event of this session" in body["error"]["message"]
    status, sse = resume(s, session(s), ids[0])   # another session
    sse.response.read()
    sse.close()
    assert status == 400


def test_a_legacy_disconnect_is_not_a_cancellation(served: Any) -> None:
    s, seen = served
    hdrs = session(s)
    _, sse = open_request(s, "POST", call("steps"), hdrs)
    first = sse.next()
    assert first is not None and first["data"] == ""      # the priming event
    progress = sse.next()
    assert progress is not None and json.loads(progress["data"])["params"]["progress"] == 1
    sse.close()                                             # the client goes away
    seen["gate"].set()
    assert seen["finished"].wait(10)
    assert seen["was_cancelled"] is False
    status, resumed = resume(s, hdrs, progress["id"])
    got = frames(resumed.rest())
    resumed.close()
    assert status == 200 and got[-1]["result"]["content"][0]["text"] == "all steps"


def test_a_modern_disconnect_cancels(served: Any) -> None:
    s, seen = served
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "endless", "arguments": {},
                       "_meta": {**modern_meta(), "progressToken": 1}}}
    _, sse = open_request(s, "POST", body, {"MCP-Protocol-Version": MODERN,
                                            "Mcp-Method": "tools/call", "Mcp-Name": "endless"})
    e = sse.next()
    assert e is not None and "id" not in e     # no resumption in 2026-07-28
    sse.close()
    assert seen["cancelled"].wait(10)


def test_our_client_resumes_a_polled_call(served: Any) -> None:
    s, seen = served
    with mcpsync.connect(s.url, era="legacy", timeout=20) as client:
        result = client.call_tool("poll", {"count": 3})
    assert result.content[0].text == "polled 3" and seen["closed"] is True


def test_a_polled_call_cancelled_before_answering_ends_its_resumed_stream(served: Any) -> None:
    s, seen = served
    hdrs = session(s)
    status, sse = open_request(s, "POST", call("waiter", rid=7), hdrs)
    events = sse.rest()     # closed by the handler at once
    sse.close()
    assert status == 200 and events and events[0]["data"] == ""
    assert seen["waiting"].wait(10)
    s.post({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": 7, "reason": "test"}}, hdrs)
    started = time.monotonic()
    status, sse = resume(s, hdrs, events[0]["id"])
    rest = sse.rest()       # must end: the call ended without an answer
    sse.close()
    assert status == 200 and time.monotonic() - started < 8
    assert not frames(rest)
