"""A finished HTTP reply that does not answer its request fails that call at once.

Against the real fault server on loopback: a ``200 application/json`` reply whose body is
empty, not JSON, an array, or the response to another id cannot answer the call any more,
so the call fails with a ``ProtocolError`` naming what the server sent, long before its
timeout; and a reply carrying another pending call's id is never handed to that call, on a
JSON body or on the POST's own event stream alike.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from typing import Any

import pytest
from http_peers.fault_server import FaultServer, RecordedRequest, Scripted

import mcpsync
from mcpsync.errors import ConnectionLost, ProtocolError, TransportError
from mcpsync.transport.http import _legacy as http_transport

pytestmark = pytest.mark.timeout(30)


def _reply_for_other_id(req: RecordedRequest) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 999999, "result": {"content": []}}).encode()


BODIES: dict[str, tuple[Any, str]] = {
    "empty": (b"", "an empty body"),
    "not-json": (b"<html>oops</html>", "a body that is not JSON (it starts '<html>oops"),
    "array": (b'[{"jsonrpc": "2.0", "id": 1, "result": {}}]',
              "a body that is not one JSON-RPC message (invalid request: batches are only"),
    "other-id": (_reply_for_other_id, "the response to another request (id 999999, not "),
    "notification": (b'{"jsonrpc": "2.0", "method": "notifications/message", "params": '
                     b'{"level": "info", "data": "hi"}}',
                     "a 'notifications/message' message instead of the response"),
}


@pytest.mark.parametrize("era", ["legacy", "modern"])
@pytest.mark.parametrize("case", sorted(BODIES))
def test_a_json_reply_that_answers_nothing_fails_the_call_at_once(
        fault_server: FaultServer, era: str, case: str) -> None:
    fault_server.faults.era = era  # type: ignore[assignment]
    body, said = BODIES[case]
    with mcpsync.connect(fault_server.url, timeout=math.inf) as client:
        assert client.era == era
        fault_server.faults.script.append(
            Scripted(200, [], body, "application/json", match="tools/call"))
        start = time.monotonic()
        with pytest.raises(ProtocolError) as caught:
            client.call_tool("echo", {"text": "hi"})
        elapsed = time.monotonic() - start
        # The client stays usable: the next call is answered normally.
        assert client.call_tool("echo", {"text": "again"}).text == "again"
    message = str(caught.value)
    assert message.startswith(f"calling tool 'echo' on server '{client.name}': "), message
    assert "JSON reply does not answer this request: it sent " + said in message, message
    assert elapsed < 2.0, f"the call took {elapsed:.2f} s to fail"


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_a_crossed_answer_reaches_neither_call(fault_server: FaultServer, era: str) -> None:
    """Call A is running; the reply to call B carries A's id. B fails at once, and A gets
    its own answer, not B's."""
    fault_server.faults.era = era  # type: ignore[assignment]
    with mcpsync.connect(fault_server.url, timeout=20) as client:
        slow = client.submit_tool("slow", {"seconds": 1.0})
        first, = fault_server.wait_for_requests(
            lambda r: r.rpc_method == "tools/call" and (r.json or {}).get("params", {})
            .get("name") == "slow")
        slow_id = first.rpc_id

        def crossed(req: RecordedRequest) -> bytes:
            return json.dumps({"jsonrpc": "2.0", "id": slow_id, "result": {
                "content": [{"type": "text", "text": "meant for echo"}]}}).encode()
        fault_server.faults.script.append(
            Scripted(200, [], crossed, "application/json", match="tools/call"))
        start = time.monotonic()
        with pytest.raises(ProtocolError, match=rf"the response to another request \(id "
                                                rf"{slow_id}, not"):
            client.call_tool("echo", {"text": "hi"})
        echo_failed = time.monotonic() - start
        result = slow.result(timeout=10)
    assert "meant for echo" not in result.text
    assert result.text == "slept 1.0", result.text
    assert echo_failed < 0.9, f"the crossed reply took {echo_failed:.2f} s to fail its call"


def _event(message: dict[str, Any]) -> str:
    return "data: " + json.dumps(message) + "\n\n"


def _text_result(rid: Any, text: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid,
            "result": {"content": [{"type": "text", "text": text}], "isError": False}}


def _start_slow_call(fault_server: FaultServer, client: mcpsync.Client) -> tuple[Any, Any]:
    """A pending ``slow`` call (1 s) and the id the server saw for it."""
    slow = client.submit_tool("slow", {"seconds": 1.0})
    first, = fault_server.wait_for_requests(
        lambda r: r.rpc_method == "tools/call" and (r.json or {}).get("params", {})
        .get("name") == "slow")
    return slow, first.rpc_id


def _strays(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "mcpsync.transport.http"
            and "response to another request" in r.getMessage()]


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_a_crossed_answer_on_an_sse_reply_reaches_neither_call(
        fault_server: FaultServer, era: str, caplog: pytest.LogCaptureFixture) -> None:
    """Call A is running; the event stream answering call B first carries a response with A's
    id (and one with an id nobody asked), then B's own. A gets its own answer, B gets its
    own, and the strays are reported once, at WARNING."""
    fault_server.faults.era = era  # type: ignore[assignment]
    caplog.set_level(logging.DEBUG, logger="mcpsync.transport.http")
    with mcpsync.connect(fault_server.url, timeout=20) as client:
        slow, slow_id = _start_slow_call(fault_server, client)

        def events(req: RecordedRequest) -> list[str]:
            return [_event(_text_result(slow_id, "meant for echo")),
                    _event(_text_result(424242, "meant for nobody")),
                    _event(_text_result(req.rpc_id, "echo's own"))]
        fault_server.faults.script.append(Scripted(
            200, [], None, "text/event-stream", match="tools/call", sse_events=events))
        echo = client.call_tool("echo", {"text": "hi"}, timeout=5)
        result = slow.result(timeout=10)
    assert echo.text == "echo's own"
    assert result.text == "slept 1.0", result.text
    warnings = [r for r in _strays(caplog) if r.levelno == logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in _strays(caplog)]
    said = warnings[0].getMessage()
    assert f"the response to another request (id {slow_id}, not " in said, said
    assert "calling tool 'echo'" in said and "meant for" not in said, said


def test_an_sse_reply_that_ends_with_only_a_crossed_answer_fails_its_call_at_once(
        fault_server: FaultServer, caplog: pytest.LogCaptureFixture) -> None:
    """The stream answering B carries only A's response and ends: B fails at once (a legacy
    stream without an event id cannot be resumed), and A still gets its own answer."""
    fault_server.faults.era = "legacy"
    with mcpsync.connect(fault_server.url, timeout=20) as client:
        slow, slow_id = _start_slow_call(fault_server, client)
        fault_server.faults.script.append(Scripted(
            200, [], None, "text/event-stream", match="tools/call",
            sse_events=[_event(_text_result(slow_id, "meant for echo"))]))
        start = time.monotonic()
        with pytest.raises(ConnectionLost, match="event stream ended before the response"):
            client.call_tool("echo", {"text": "hi"}, timeout=5)
        echo_failed = time.monotonic() - start
        result = slow.result(timeout=10)
    assert result.text == "slept 1.0", result.text
    assert echo_failed < 0.9, f"the call took {echo_failed:.2f} s to fail"
    assert len(_strays(caplog)) == 1


def test_a_broken_reply_to_the_probe_reads_as_legacy(fault_server: FaultServer) -> None:
    """A legacy server answering server/discover with junk is not an error: the client
    falls back to initialize at once instead of waiting out the probe."""
    fault_server.faults.era = "legacy"
    fault_server.faults.script.append(
        Scripted(200, [], b"", "application/json", match="server/discover"))
    start = time.monotonic()
    with mcpsync.connect(fault_server.url, timeout=10, probe_timeout=5) as client:
        elapsed = time.monotonic() - start
        assert client.era == "legacy"
    assert elapsed < 2.0, f"connect took {elapsed:.2f} s"


def test_no_thread_is_left_behind(fault_server: FaultServer) -> None:
    before = set(threading.enumerate())
    fault_server.faults.era = "legacy"
    with mcpsync.connect(fault_server.url, timeout=5) as client:
        fault_server.faults.script.append(
            Scripted(200, [], b"[]", "application/json", match="tools/call"))
        with pytest.raises(ProtocolError):
            client.call_tool("echo", {"text": "x"})
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        left = [t.name for t in threading.enumerate()
                if t not in before and t.name.startswith("mcpsync-")]
        if not left:
            break
        time.sleep(0.02)
    assert not left, left


def test_a_202_without_a_get_stream_fails_at_once(fault_server: FaultServer) -> None:
    fault_server.faults.era = "legacy"
    fault_server.faults.get_stream = False
    with mcpsync.connect(fault_server.url, era="legacy", timeout=math.inf) as client:
        fault_server.wait_for_requests(lambda r: r.method == "GET")
        fault_server.faults.script.append(Scripted(202, [], b"", None, "tools/call"))
        start = time.monotonic()
        with pytest.raises(TransportError, match="no GET stream the response could come on"):
            client.call_tool("echo", {"text": "x"})
        elapsed = time.monotonic() - start
    assert elapsed < 2.0, f"the call took {elapsed:.2f} s to fail"


def test_a_202_never_answered_on_the_get_stream_is_bounded(
        fault_server: FaultServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Even with ``timeout=math.inf``: the bound (30 s, shortened here) ends the wait."""
    monkeypatch.setattr(http_transport, "ACCEPTED_WAIT", 0.5)
    fault_server.faults.era = "legacy"
    with mcpsync.connect(fault_server.url, era="legacy", timeout=math.inf) as client:
        fault_server.wait_for_requests(lambda r: r.method == "GET")
        fault_server.faults.script.append(Scripted(202, [], b"", None, "tools/call"))
        start = time.monotonic()
        with pytest.raises(TransportError, match=r"did not come on its GET stream within "
                                                 r"0\.5 s") as caught:
            client.call_tool("echo", {"text": "x"})
        elapsed = time.monotonic() - start
        assert caught.value.status == 202
        assert client.call_tool("echo", {"text": "still usable"}).text == "still usable"
    assert 0.4 < elapsed < 2.0, f"the call took {elapsed:.2f} s to fail"


def test_an_answer_on_the_get_stream_before_the_202_completes_the_call(
        fault_server: FaultServer, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """The server writes the answer on its GET stream, and only then answers the POST 202.
    The call is answered, and the wait after the 202 ends at once: no failure of the
    already answered call is posted when the 202 bound (shortened to 1 s here) runs out."""
    monkeypatch.setattr(http_transport, "ACCEPTED_WAIT", 1.0)
    caplog.set_level(logging.DEBUG, logger="mcpsync")
    fault_server.faults.era = "legacy"
    with mcpsync.connect(fault_server.url, era="legacy", timeout=math.inf) as client:
        fault_server.wait_for_requests(lambda r: r.method == "GET")
        fault_server.faults.answer_on_get_first = "tools/call"
        start = time.monotonic()
        assert client.call_tool("echo", {"text": "early"}, timeout=10).text == "early"
        elapsed = time.monotonic() - start
        fault_server.faults.answer_on_get_first = None
        posts = fault_server.rpc_requests("tools/call")
        time.sleep(1.5)   # past the bound: a worker still waiting would now fail the call
        assert client.call_tool("echo", {"text": "later"}).text == "later"
    stale = [r.getMessage() for r in caplog.records
             if "did not come on its GET stream" in r.getMessage()]
    assert not stale, stale
    assert len(posts) == 1, "the early-answered call was sent once"
    assert elapsed < 0.9 + 0.3, f"the call took {elapsed:.2f} s"
