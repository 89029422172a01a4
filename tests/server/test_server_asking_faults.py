"""Asking the client when the client does not cooperate (legacy era, where the handler waits).

A handler blocked in ``ctx.elicit()`` must end: when the client never answers (``ask_timeout``),
when the client cancels the request that asked, when the client answers with an error, and when
input ends. And the client's answer must reach it even while the queue is full of other work.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from mcpsync.server import Context, Server
from server.helpers import PipeServer


def asking_server(**options: Any) -> Server:
    server = Server("asker", "1", **options)

    @server.tool()
    def ask(ctx: Context) -> str:
        try:
            answer = ctx.elicit("Name?", {"type": "object",
                                          "properties": {"n": {"type": "string"}}})
        except Exception as exc:
            return f"failed: {type(exc).__name__}: {exc}"
        return f"got {answer.action} {answer.content}"

    @server.tool()
    def echo(text: str) -> str:
        return text

    return server


ELICIT_CAPS = {"elicitation": {}}


def start(ps: PipeServer, n: int = 1) -> dict[str, Any]:
    ps.request("init", "initialize", {"protocolVersion": "2025-11-25",
                                      "capabilities": ELICIT_CAPS,
                                      "clientInfo": {"name": "t", "version": "0"}})
    ps.notify("notifications/initialized")
    ps.send({"jsonrpc": "2.0", "id": n, "method": "tools/call",
             "params": {"name": "ask", "arguments": {}}})
    asked = ps.recv()
    assert asked["method"] == "elicitation/create"
    assert asked["params"]["message"] == "Name?"
    return dict(asked)


def test_an_answer_reaches_the_waiting_handler() -> None:
    with PipeServer(asking_server()) as ps:
        asked = start(ps)
        ps.send({"jsonrpc": "2.0", "id": asked["id"],
                 "result": {"action": "accept", "content": {"n": "Ann"}}})
        reply = ps.response_to(1)
        assert reply["result"]["content"][0]["text"] == "got accept {'n': 'Ann'}"


@pytest.mark.timeout(20)
def test_a_client_that_never_answers_ends_the_ask_at_ask_timeout() -> None:
    with PipeServer(asking_server(ask_timeout=0.5)) as ps:
        asked = start(ps)
        began = time.monotonic()
        reply = ps.response_to(1)
        assert time.monotonic() - began < 0.5 + 1.5
        text = reply["result"]["content"][0]["text"]
        assert text.startswith("failed: RequestTimeout:") and "0.5 s" in text
        # We told the client we stopped waiting.
        cancels = [m for m in ps.seen if m.get("method") == "notifications/cancelled"]
        assert [c["params"]["requestId"] for c in cancels] == [asked["id"]]
        # A late answer is dropped, and the server goes on.
        ps.send({"jsonrpc": "2.0", "id": asked["id"], "result": {"action": "cancel"}})
        assert ps.call(2, "echo", {"text": "alive"})["result"]["content"][0]["text"] == "alive"


@pytest.mark.timeout(20)
def test_cancelling_the_request_that_asked_ends_the_wait_without_a_response() -> None:
    with PipeServer(asking_server()) as ps:
        asked = start(ps)
        ps.notify("notifications/cancelled", {"requestId": 1, "reason": "user gave up"})
        reply = ps.call(2, "echo", {"text": "next"})
        assert reply["result"]["content"][0]["text"] == "next"
        assert not any(m.get("id") == 1 for m in ps.seen)   # no response for the cancelled call
        assert any(m.get("method") == "notifications/cancelled"
                   and m["params"]["requestId"] == asked["id"] for m in ps.seen)


def test_an_error_answer_reaches_the_handler_as_an_exception() -> None:
    with PipeServer(asking_server()) as ps:
        asked = start(ps)
        ps.send({"jsonrpc": "2.0", "id": asked["id"],
                 "error": {"code": -1, "message": "user rejected"}})
        text = ps.response_to(1)["result"]["content"][0]["text"]
        assert text.startswith("failed: RemoteError:") and "user rejected" in text


@pytest.mark.timeout(20)
def test_end_of_input_while_a_handler_waits_ends_serve() -> None:
    ps = PipeServer(asking_server())
    try:
        start(ps)
        began = time.monotonic()
        ps.eof()
        assert ps.wait(6), "serve() did not return while a handler waited for the client"
        assert time.monotonic() - began < 5
        assert ps.error is None
    finally:
        ps.close()


@pytest.mark.timeout(20)
def test_the_answer_overtakes_a_full_queue() -> None:
    with PipeServer(asking_server(max_queued=2)) as ps:
        asked = start(ps)
        for n in range(10, 16):   # more than the queue holds, all behind the waiting handler
            ps.send({"jsonrpc": "2.0", "id": n, "method": "tools/call",
                     "params": {"name": "echo", "arguments": {"text": str(n)}}})
        ps.send({"jsonrpc": "2.0", "id": asked["id"],
                 "result": {"action": "decline"}})
        assert ps.response_to(1)["result"]["content"][0]["text"] == "got decline None"
        for n in range(10, 16):
            got = ps.response_to(n)
            assert got["result"]["content"][0]["text"] == str(n)


def test_a_client_without_the_capability_is_never_asked() -> None:
    with PipeServer(asking_server()) as ps:
        ps.initialize()   # declares no capabilities
        reply = ps.call(1, "ask")
        text = reply["result"]["content"][0]["text"]
        assert text.startswith("failed: CapabilityNotSupported:")
        assert "elicitation" in text
        assert not any(m.get("method") == "elicitation/create" for m in ps.seen)
