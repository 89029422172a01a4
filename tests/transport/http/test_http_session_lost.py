"""A lost legacy session reported as HTTP 400 (not the spec's 404) is re-created too.

Against a real ``@modelcontextprotocol/server-everything`` restarted mid-run on the same
port (it answers the old session id with 400 and -32000 "Bad Request: No valid session ID
provided"), and against the fault server for the exact bodies, including 400s that must
*not* be read as session loss.
"""

from __future__ import annotations

import json
import time

import pytest
from http_peers.everything import EverythingServer
from http_peers.fault_server import FaultServer, rpc_error

import mcpsync
from mcpsync.errors import RemoteError, SessionExpired
from mcpsync.transport.http._session_lost import says_session_lost

pytestmark = pytest.mark.timeout(90)

EVERYTHING_LOST = (400, -32000, "Bad Request: No valid session ID provided")


def test_server_everything_restarted_mid_run(everything_server: EverythingServer) -> None:
    with mcpsync.connect(everything_server.url, timeout=20) as client:
        assert client.era == "legacy"
        first = client.call_tool("echo", {"message": "before"})
        assert first.text == "Echo: before"
        everything_server.restart()
        start = time.monotonic()
        after = client.call_tool("echo", {"message": "after"})
        recovered = time.monotonic() - start
        assert after.text == "Echo: after"
        assert client.call_tool("echo", {"message": "again"}).text == "Echo: again"
    assert everything_server.starts == 2
    assert recovered < 10, f"recovery took {recovered:.2f} s"


def test_a_400_saying_the_session_is_unknown_recreates_it(fault_server: FaultServer) -> None:
    fault_server.faults.era = "legacy"
    fault_server.faults.lost_session_reply = EVERYTHING_LOST
    with mcpsync.connect(fault_server.url, era="legacy", timeout=10) as client:
        client.set_log_level("warning")
        assert client.call_tool("echo", {"text": "one"}).text == "one"
        old = fault_server.sessions[0]
        fault_server.expire_sessions()
        assert client.call_tool("echo", {"text": "two"}).text == "two"
        new = [s for s in fault_server.sessions if s != old]
    assert len(new) == 1
    inits = [r for r in fault_server.requests if r.rpc_method == "initialize"]
    assert len(inits) == 2
    refused = [r for r in fault_server.requests if r.header("Mcp-Session-Id") == old
               and r.rpc_method == "tools/call"]
    assert len(refused) == 2   # "one", then "two" refused with 400 before the retry
    restored = [r for r in fault_server.requests if r.rpc_method == "logging/setLevel"
                and r.header("Mcp-Session-Id") == new[0]]
    assert restored and restored[0].json["params"] == {"level": "warning"}


def test_a_second_400_right_after_recreating_raises_session_expired(
        fault_server: FaultServer) -> None:
    fault_server.faults.era = "legacy"
    fault_server.faults.lost_session_reply = EVERYTHING_LOST
    fault_server.faults.expire_method = "tools/call"
    fault_server.faults.expire_times = 2
    with mcpsync.connect(fault_server.url, era="legacy", timeout=10) as client:
        with pytest.raises(SessionExpired, match="No valid session ID provided") as caught:
            client.call_tool("echo", {"text": "x"})
        assert caught.value.maybe_executed is False
        assert "HTTP 400" in str(caught.value)


@pytest.mark.parametrize("code, message", [
    (-32602, "Invalid params: no valid session ID provided"),  # not a session code
    (-32000, "Bad Request: missing field 'name'"),             # not about the session
])
def test_other_400s_are_ordinary_errors(fault_server: FaultServer, code: int,
                                        message: str) -> None:
    fault_server.faults.era = "legacy"
    with mcpsync.connect(fault_server.url, era="legacy", timeout=10) as client:
        fault_server.faults.script.append(rpc_error(400, code, message, match="tools/call"))
        with pytest.raises(RemoteError) as caught:
            client.call_tool("echo", {"text": "x"})
        assert caught.value.code == code
    assert len([r for r in fault_server.requests if r.rpc_method == "initialize"]) == 1


@pytest.mark.parametrize(("status", "error", "lost"), [
    (400, {"code": -32000, "message": "Bad Request: No valid session ID provided"}, True),
    (400, {"code": -32001, "message": "Session not found"}, True),
    (400, {"code": -32000, "message": "Bad Request: Server not initialized"}, True),
    (400, {"code": -32600, "message": "Invalid or expired session"}, True),
    (400, {"code": -32000, "message": "Bad Request: Mcp-Session-Id header is required"},
     False),
    (400, {"code": -32602, "message": "Session not found"}, False),
    (500, {"code": -32000, "message": "No valid session ID provided"}, False),
    (400, "No valid session ID provided", False),
])
def test_what_reads_as_session_loss(status: int, error: object, lost: bool) -> None:
    assert says_session_lost(status, error) is lost, json.dumps(error)
