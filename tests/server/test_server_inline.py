"""``serve()`` with ``concurrency=1`` answers a lone request on the thread that read it.

That saves the two thread switches of a hand-over per call; the loop's other promises must
hold regardless: a long handler's cancellation is still read while it runs (the idle worker
takes the reading role over), a handler that sends the client a request gives the role away
at once so the answer is read, and names follow roles.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

import pytest

from mcpsync.jsonrpc import Batch, Message, ParseError, request, result
from mcpsync.server import Context, Server, _loop

from .helpers import PipeServer


def test_a_lone_request_is_answered_on_the_reader(monkeypatch: pytest.MonkeyPatch,
                                                 no_leaks: None) -> None:
    # No take-over here (the first tools/call imports the schema checker, which can take
    # longer than two looks): this test is about where a call starts.
    monkeypatch.setattr(_loop, "WATCH_SECONDS", 30.0)
    seen: list[str] = []
    server = Server("t", "1")

    @server.tool()
    def where() -> str:
        seen.append(threading.current_thread().name)
        return "ok"

    with PipeServer(server) as ps:
        ps.initialize()
        for rid in range(1, 6):
            assert ps.call(rid, "where")["result"]["content"][0]["text"] == "ok"
    assert seen == ["mcpsync-server-reader"] * 5


def test_with_concurrency_the_reader_never_answers(no_leaks: None) -> None:
    seen: list[str] = []
    server = Server("t", "1", concurrency=2)

    @server.tool()
    def where() -> str:
        seen.append(threading.current_thread().name)
        return "ok"

    with PipeServer(server) as ps:
        ps.initialize()
        for rid in range(1, 4):
            ps.call(rid, "where")
    assert seen and all(name.startswith("mcpsync-server-worker-") for name in seen)


def test_a_long_handler_on_the_reader_still_sees_its_cancellation(no_leaks: None) -> None:
    started = threading.Event()
    outcome: dict[str, Any] = {}
    server = Server("t", "1")

    @server.tool()
    def slow(ctx: Context) -> str:
        started.set()
        begun = time.monotonic()
        outcome["cancelled"] = ctx.cancelled.wait(10)
        outcome["after"] = time.monotonic() - begun
        outcome["name"] = threading.current_thread().name
        return "too late"

    @server.tool()
    def where() -> str:
        return threading.current_thread().name

    with PipeServer(server) as ps:
        ps.initialize()
        ps.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "slow"}})
        assert started.wait(5)
        ps.notify("notifications/cancelled", {"requestId": 1})
        # The next request is answered once the cancelled handler returned; the cancelled
        # one never is.
        reply = ps.call(2, "where")
        assert [m for m in ps.seen if isinstance(m, dict) and m.get("id") == 1] == []
    assert outcome["cancelled"] is True
    assert outcome["after"] < 5.0
    # The worker took the reading role over, names and all: the handler's thread is the
    # worker now. (Which thread answered request 2 depends on whether the cancelled handler
    # had returned when it was read.)
    assert outcome["name"] == "mcpsync-server-worker-1"
    assert reply["result"]["content"][0]["text"].startswith("mcpsync-server-")


class _Asking:
    """A dispatcher whose one request, ``ask``, sends the client a request and waits for the
    answer: the shape of a handler asking for input, which must not wait on itself."""

    def __init__(self, send: Any, send_batch: Any) -> None:
        self._send = send
        self.answer: Message | None = None
        self.answered = threading.Event()
        self.handler_thread = ""
        self.handler_ident = 0
        self.delivering_ident = 0

    def track(self, message: Message) -> None:
        return None

    def cancel_notice(self, params: Any) -> bool:
        return False

    def cancel_all(self) -> None:
        self.answered.set()

    def deliver_response(self, message: Message) -> None:
        self.answer = message
        self.delivering_ident = threading.get_ident()
        self.answered.set()

    def handle(self, item: Message | Batch | ParseError, calls: list[Any]) -> None:
        assert isinstance(item, Message) and item.id is not None
        self.handler_thread = threading.current_thread().name
        self.handler_ident = threading.get_ident()
        self._send(request("s1", "elicitation/create", {"message": "sure?"}))
        self.answered.wait(10)
        self._send(result(item.id, {"got": self.answer.result if self.answer else None}))


def test_a_handler_that_asks_the_client_gives_the_reading_role_away_at_once(
        monkeypatch: pytest.MonkeyPatch, no_leaks: None) -> None:
    # With the worker looking only every 30 s, only the immediate hand-over can read the
    # answer in time.
    monkeypatch.setattr(_loop, "WATCH_SECONDS", 30.0)
    made: list[_Asking] = []

    def make(send: Any, send_batch: Any) -> Any:
        made.append(_Asking(send, send_batch))
        return made[0]

    c2s_r, c2s_w = os.pipe()
    s2c_r, s2c_w = os.pipe()
    stdin = open(c2s_r, "rb", buffering=0)  # noqa: SIM115
    stdout = open(s2c_w, "wb", buffering=0)  # noqa: SIM115
    serving = threading.Thread(target=_loop.run, args=(make,), kwargs=dict(
        stdin=stdin, stdout=stdout, stop=None, concurrency=1, max_frame_bytes=1 << 20,
        max_queued=2, max_queued_bytes=1 << 20), name="test-serve", daemon=True)
    serving.start()
    replies = open(s2c_r, "rb")  # noqa: SIM115
    try:
        os.write(c2s_w, b'{"jsonrpc":"2.0","id":1,"method":"ask"}\n')
        asked = json.loads(replies.readline())
        assert asked["method"] == "elicitation/create"
        begun = time.monotonic()
        os.write(c2s_w, b'{"jsonrpc":"2.0","id":"s1","result":{"action":"accept"}}\n')
        final = json.loads(replies.readline())
        waited = time.monotonic() - begun
    finally:
        os.close(c2s_w)
        serving.join(10)
        stdin.close()
        stdout.close()
        replies.close()
    assert final == {"jsonrpc": "2.0", "id": 1, "result": {"got": {"action": "accept"}}}
    assert waited < 10.0
    assert made[0].handler_thread == "mcpsync-server-reader"
    # The other thread read the answer while the handler waited for it.
    assert made[0].delivering_ident not in (0, made[0].handler_ident)
    assert not serving.is_alive()


def test_a_cancel_read_in_the_same_chunk_as_its_request_still_reaches_the_handler(
        no_leaks: None) -> None:
    # The request and its cancellation arrive in one write: the reader has both in its
    # buffer when it starts the handler, so only the take-over can apply the cancel.
    started = threading.Event()
    outcome: dict[str, Any] = {}
    server = Server("t", "1")

    @server.tool()
    def slow(ctx: Context) -> str:
        started.set()
        outcome["cancelled"] = ctx.cancelled.wait(10)
        return "too late"

    with PipeServer(server) as ps:
        ps.initialize()
        ps.send_raw(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                "params": {"name": "slow"}}).encode() + b"\n"
                    + json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled",
                                  "params": {"requestId": 1}}).encode() + b"\n")
        assert started.wait(5)
        reply = ps.request(2, "ping")
        assert reply["result"] == {}
        assert [m for m in ps.seen if isinstance(m, dict) and m.get("id") == 1] == []
    assert outcome["cancelled"] is True
