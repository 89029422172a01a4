"""The HTTP transport against the fault-injecting server: headers, expiry, drops, errors.

Every test talks to a real loopback server (``tests/http_peers/fault_server.py``) and asserts
what went over the wire from the server's record of each request.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

import pytest
from http_peers.fault_server import (
    FaultServer,
    RecordedRequest,
    Scripted,
    redirect,
    result,
    rpc_error,
)

import mcpsync
from mcpsync.auth_hooks import HttpChallenge
from mcpsync.errors import (
    ConnectionLost,
    HeaderMismatch,
    ProtocolError,
    RemoteError,
    RequestTimeout,
    SessionExpired,
    TransportError,
)
from mcpsync.transport.http import _legacy as _legacy_mod

pytestmark = pytest.mark.timeout(30)

JSON_TYPES = ("application/json", "application/json, text/event-stream")


def _posts(server: FaultServer, method: str) -> list[RecordedRequest]:
    return [r for r in server.requests if r.method == "POST" and r.rpc_method == method]


def _legacy(server: FaultServer, **faults: Any) -> FaultServer:
    server.faults.era = "legacy"
    for key, value in faults.items():
        setattr(server.faults, key, value)
    return server


def _modern(server: FaultServer, **faults: Any) -> FaultServer:
    server.faults.era = "modern"
    for key, value in faults.items():
        setattr(server.faults, key, value)
    return server


# ---------------------------------------------------------------- headers on the wire

@pytest.mark.parametrize("reply", ["json", "sse"])
def test_legacy_headers_session_and_delete(fault_server: FaultServer, reply: str) -> None:
    server = _legacy(fault_server, reply=reply)
    with mcpsync.connect(server.url, timeout=5) as client:
        assert client.era == "legacy"
        assert client.call_tool("echo", {"text": "hi"}).text == "hi"
        sid = server.sessions[0]
        server.wait_for_requests(lambda r: r.method == "GET")
    probe, = _posts(server, "server/discover")
    assert probe.header("MCP-Protocol-Version") == "2026-07-28"
    assert probe.header("Mcp-Method") == "server/discover"
    init, = _posts(server, "initialize")
    assert init.header("Mcp-Session-Id") is None
    assert init.header("MCP-Protocol-Version") is None
    for req in server.requests:
        if req.method == "POST":
            assert req.header("Accept") == "application/json, text/event-stream"
            assert req.header("Content-Type") == "application/json"
    later = [r for r in server.requests if r.rpc_method not in ("server/discover", "initialize")]
    assert later and all(r.header("Mcp-Session-Id") == sid for r in later)
    assert all(r.header("MCP-Protocol-Version") == "2025-11-25" for r in later)
    get = next(r for r in server.requests if r.method == "GET")
    assert get.header("Accept") == "text/event-stream"
    assert get.header("Accept-Encoding") == "identity"
    server.wait_for_requests(lambda r: r.method == "DELETE")
    delete = next(r for r in server.requests if r.method == "DELETE")
    assert delete.header("Mcp-Session-Id") == sid


@pytest.mark.parametrize("reply", ["json", "sse"])
def test_modern_headers_and_no_session(fault_server: FaultServer, reply: str) -> None:
    server = _modern(fault_server, reply=reply)
    with mcpsync.connect(server.url, timeout=5) as client:
        assert client.era == "modern"
        assert client.call_tool("lookup", {"region": "eu", "query": "q"}).text == "eu:q"
    call = _posts(server, "tools/call")[-1]
    assert call.header("MCP-Protocol-Version") == "2026-07-28"
    assert call.header("Mcp-Method") == "tools/call"
    assert call.header("Mcp-Name") == "lookup"
    assert call.header("Mcp-Param-Region") == "eu"
    assert call.json["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] == \
        "2026-07-28"
    assert not [r for r in server.requests if r.method in ("GET", "DELETE")]
    assert all(r.header("Mcp-Session-Id") is None for r in server.requests)


def test_static_headers_and_bearer_on_every_request(fault_server: FaultServer) -> None:
    server = _legacy(fault_server, require_authorization="Bearer t0k")
    with mcpsync.connect(server.url, auth="t0k", headers={"X-Team": "a"}, timeout=5) as c:
        c.call_tool("echo", {"text": "x"})
        server.wait_for_requests(lambda r: r.method == "GET")
    server.wait_for_requests(lambda r: r.method == "DELETE")
    for req in server.requests:
        assert req.header("Authorization") == "Bearer t0k", req.method
        assert req.header("X-Team") == "a"


def test_401_calls_the_hook_once_and_retries(fault_server: FaultServer) -> None:
    server = _legacy(fault_server, require_authorization="Bearer fresh")

    class Hooks:
        token = "stale"
        calls: list[HttpChallenge] = []

        def headers(self, method: str, url: str) -> Mapping[str, str]:
            return {"Authorization": f"Bearer {self.token}"}

        def on_unauthorized(self, challenge: HttpChallenge) -> None:
            self.calls.append(challenge)
            self.token = "fresh"

    hooks = Hooks()
    with mcpsync.connect(server.url, auth=hooks, timeout=5) as client:
        assert client.call_tool("echo", {"text": "ok"}).text == "ok"
    assert len(hooks.calls) == 1 and hooks.calls[0].status == 401


# ---------------------------------------------------------------- legacy session expiry

def test_404_recreates_the_session_restores_state_and_retries(
        fault_server: FaultServer) -> None:
    server = _legacy(fault_server)
    with mcpsync.connect(server.url, era="legacy", timeout=5) as client:
        client.set_log_level("warning")
        old = server.sessions[0]
        server.expire_sessions()
        assert client.call_tool("echo", {"text": "again"}).text == "again"
        new = server.sessions[0]
        assert new != old
    assert len(_posts(server, "initialize")) == 2
    levels = _posts(server, "logging/setLevel")
    assert [r.json["params"]["level"] for r in levels] == ["warning", "warning"]
    assert levels[-1].header("Mcp-Session-Id") == new
    calls = _posts(server, "tools/call")
    assert [r.header("Mcp-Session-Id") for r in calls] == [old, new]
    assert calls[0].rpc_id == calls[1].rpc_id      # the same request, retried transparently


def test_second_404_raises_session_expired(fault_server: FaultServer) -> None:
    server = _legacy(fault_server, expire_method="tools/call", expire_times=2)
    with mcpsync.connect(server.url, era="legacy", timeout=5) as client:
        with pytest.raises(SessionExpired) as info:
            client.call_tool("echo", {"text": "x"})
        assert isinstance(info.value, ConnectionLost)
        assert "echo" in str(info.value)
        server.faults.expire_method = None
        assert client.call_tool("echo", {"text": "later"}).text == "later"


def test_concurrent_404s_share_one_initialize(fault_server: FaultServer) -> None:
    server = _legacy(fault_server)
    with mcpsync.connect(server.url, era="legacy", timeout=5) as client:
        server.expire_sessions()
        out: list[str] = []
        errors: list[BaseException] = []

        def call(i: int) -> None:
            try:
                out.append(client.call_tool("echo", {"text": str(i)}).text)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)
        threads = [threading.Thread(target=call, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
    assert not errors
    assert sorted(out) == [str(i) for i in range(6)]
    assert len(_posts(server, "initialize")) == 2


# ---------------------------------------------------------------- drops and resumption

def test_legacy_drop_after_id_resumes_after_exactly_the_retry(fault_server: FaultServer) -> None:
    server = _legacy(fault_server, drop="after_id", retry_ms=300)
    with mcpsync.connect(server.url, era="legacy", timeout=10) as client:
        assert client.call_tool("echo", {"text": "back"}).text == "back"
    resumed = [r for r in server.requests if r.method == "GET" and r.header("Last-Event-ID")]
    assert resumed
    waited = resumed[0].time - server.drops[0]
    assert waited >= 0.3


def test_legacy_drop_before_any_id_fails_at_once(fault_server: FaultServer) -> None:
    server = _legacy(fault_server, drop="before_id")
    with mcpsync.connect(server.url, era="legacy", timeout=10) as client:
        with pytest.raises(ConnectionLost) as info:
            client.call_tool("echo", {"text": "x"})
        assert info.value.maybe_executed
        assert client.call_tool("echo", {"text": "y"}).text == "y"   # still usable


def test_modern_drop_reissues_a_read_only_tool_with_a_new_id(fault_server: FaultServer) -> None:
    server = _modern(fault_server, drop="before_id")
    with mcpsync.connect(server.url, timeout=5) as client:
        assert client.call_tool("echo", {"text": "x"}).text == "x"
    first, second = _posts(server, "tools/call")
    assert first.rpc_id != second.rpc_id


def test_modern_drop_of_an_unsafe_tool_is_not_repeated(fault_server: FaultServer) -> None:
    server = _modern(fault_server, drop="before_id")
    with mcpsync.connect(server.url, timeout=5) as client:
        with pytest.raises(ConnectionLost) as info:
            client.call_tool("slow", {"seconds": 0})
        assert info.value.maybe_executed
        assert len(_posts(server, "tools/call")) == 1
        server.faults.drop_times = 1
        assert client.call_tool("slow", {"seconds": 0}, retry_on_drop=True).text


# ---------------------------------------------------------------- statuses and bodies

def test_wrong_content_type_is_a_transport_error(fault_server: FaultServer) -> None:
    server = _legacy(fault_server)
    with mcpsync.connect(server.url, era="legacy", timeout=5) as client:
        server.faults.script.append(Scripted(200, [], b"hello", "text/plain", "tools/call"))
        with pytest.raises(TransportError, match="text/plain"):
            client.call_tool("echo", {"text": "x"})
        server.faults.script.append(Scripted(200, [], lambda r: json.dumps(
            {"jsonrpc": "2.0", "id": r.rpc_id, "result": {"content": []}}).encode(),
            "Application/JSON; charset=utf-8", "tools/call"))
        assert client.call_tool("echo", {"text": "x"}).content == []


def test_oversized_body_is_a_transport_error(fault_server: FaultServer) -> None:
    server = _legacy(fault_server)
    with mcpsync.connect(server.url, era="legacy", timeout=5, max_frame_bytes=4096) as client:
        server.faults.script.append(Scripted(match="tools/call", oversize=100_000))
        with pytest.raises(TransportError, match="limit"):
            client.call_tool("echo", {"text": "x"})
        assert client.call_tool("echo", {"text": "ok"}).text == "ok"


def test_error_statuses(fault_server: FaultServer) -> None:
    server = _modern(fault_server)
    with mcpsync.connect(server.url, timeout=5) as client:
        server.faults.script.append(Scripted(500, [], b"boom", "text/plain", "tools/call"))
        with pytest.raises(TransportError, match="500"):
            client.call_tool("echo", {"text": "x"})
        server.faults.script.append(rpc_error(404, -32601, "no such method",
                                              match="tools/call"))
        with pytest.raises(RemoteError) as info:
            client.call_tool("echo", {"text": "x"})
        assert info.value.code == -32601
        server.faults.script.append(rpc_error(400, -32602, "bad", match="tools/call",
                                              with_id=False))
        with pytest.raises(RemoteError) as info:
            client.call_tool("echo", {"text": "x"})
        assert info.value.code == -32602
        server.faults.script.append(Scripted(404, [], b"", None, "tools/call"))
        with pytest.raises(TransportError, match="404"):
            client.call_tool("echo", {"text": "x"})


def test_invalid_session_id_is_a_protocol_error(fault_server: FaultServer) -> None:
    server = _legacy(fault_server)
    init = {"protocolVersion": "2025-11-25", "capabilities": {},
            "serverInfo": {"name": "x", "version": "1"}}
    server.faults.script.append(Scripted(200, [("Mcp-Session-Id", "bad id")], lambda r: (
        json.dumps({"jsonrpc": "2.0", "id": r.rpc_id, "result": init}).encode()),
        "application/json", "initialize"))
    with pytest.raises(ProtocolError, match="visible ASCII"):
        mcpsync.connect(server.url, era="legacy", timeout=5)


def test_202_to_a_request_waits_for_the_get_stream(fault_server: FaultServer) -> None:
    server = _legacy(fault_server)
    with mcpsync.connect(server.url, era="legacy", timeout=5) as client:
        server.wait_for_requests(lambda r: r.method == "GET")
        server.faults.script.append(Scripted(202, [], b"", None, "tools/call"))
        future = client.submit_tool("echo", {"text": "x"})
        req, = server.wait_for_requests(lambda r: r.rpc_method == "tools/call")
        server.push({"jsonrpc": "2.0", "id": req.rpc_id,
                     "result": {"content": [{"type": "text", "text": "late"}]}})
        assert future.result(5).text == "late"


def test_get_405_is_never_retried(fault_server: FaultServer) -> None:
    server = _legacy(fault_server, get_stream=False)
    with mcpsync.connect(server.url, era="legacy", timeout=5) as client:
        server.wait_for_requests(lambda r: r.method == "GET")
        for _ in range(3):
            client.call_tool("echo", {"text": "x"})
    assert len([r for r in server.requests if r.method == "GET"]) == 1


def _gets(server: FaultServer) -> list[RecordedRequest]:
    return [r for r in server.requests if r.method == "GET"]


def test_get_501_is_never_retried(fault_server: FaultServer,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # A server that implements no GET at all (a stdlib handler without do_GET) answers 501
    # and closes the connection: asking again would only open a connection per attempt.
    monkeypatch.setattr(_legacy_mod, "RESUME_DEFAULT", 0.05)   # the first back-off
    server = _legacy(fault_server)
    server.faults.script.append(Scripted(501, [("Connection", "close")], b"", None, "GET"))
    with mcpsync.connect(server.url, era="legacy", timeout=5) as client:
        server.wait_for_requests(lambda r: r.method == "GET")
        for _ in range(3):
            assert client.call_tool("echo", {"text": "x"}).text == "x"
        time.sleep(0.5)   # ten first back-offs: a retry would have come by now
        assert len(_gets(server)) == 1


def test_get_503_is_asked_again_until_the_stream_opens(
        fault_server: FaultServer, monkeypatch: pytest.MonkeyPatch) -> None:
    # A temporary refusal does not give the stream up: the server does offer it.
    monkeypatch.setattr(_legacy_mod, "RESUME_DEFAULT", 0.05)
    server = _legacy(fault_server)
    server.faults.script.append(Scripted(503, [], b"", None, "GET"))
    with mcpsync.connect(server.url, era="legacy", timeout=5) as client:
        server.wait_for_requests(lambda r: r.method == "GET", count=2)
        assert server.push_written({"jsonrpc": "2.0", "method": "notifications/message",
                                    "params": {"level": "info", "data": "on the stream"}})
        assert client.call_tool("echo", {"text": "x"}).text == "x"
    assert len(_gets(server)) == 2


def test_redirects(fault_server: FaultServer,
                   fault_server_factory: Callable[[], FaultServer]) -> None:
    server = _legacy(fault_server)
    other = fault_server_factory()
    with mcpsync.connect(server.url, era="legacy", timeout=5) as client:
        server.faults.script.append(redirect(307, server.url + "?moved=1", "tools/call"))
        assert client.call_tool("echo", {"text": "x"}).text == "x"
        assert _posts(server, "tools/call")[-1].path.endswith("?moved=1")
        server.faults.script.append(redirect(302, server.url, "tools/call"))
        with pytest.raises(TransportError, match="302"):
            client.call_tool("echo", {"text": "x"})
        server.faults.script.append(redirect(307, other.url, "tools/call"))
        with pytest.raises(TransportError):
            client.call_tool("echo", {"text": "x"})
    assert not other.requests


# ---------------------------------------------------------------- modern tool headers

BAD_TOOL = {"name": "bad", "inputSchema": {"type": "object", "properties": {
    "x": {"type": "number", "x-mcp-header": "X"}}}}


def test_tools_with_invalid_header_annotations_are_dropped(
        fault_server: FaultServer, caplog: pytest.LogCaptureFixture) -> None:
    server = _modern(fault_server)
    good = {"name": "lookup", "inputSchema": {"type": "object", "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"}}}}
    with mcpsync.connect(server.url, timeout=5) as client:
        server.faults.script.append(result({"tools": [BAD_TOOL, good]}, "tools/list"))
        with caplog.at_level(logging.WARNING, logger="mcpsync"):
            names = [t.name for t in client.list_tools()]
    assert names == ["lookup"]
    assert any("'bad'" in r.getMessage() for r in caplog.records
               if r.levelno == logging.WARNING)


def test_header_mismatch_refetches_tools_and_retries_once(fault_server: FaultServer) -> None:
    server = _modern(fault_server)
    with mcpsync.connect(server.url, timeout=5) as client:
        client.list_tools()
        lists = len(_posts(server, "tools/list"))
        server.faults.script.append(rpc_error(400, -32020, "header mismatch",
                                              match="tools/call"))
        assert client.call_tool("lookup", {"region": "eu"}).text.startswith("eu")
        assert len(_posts(server, "tools/list")) == lists + 1
        for _ in range(2):
            server.faults.script.append(rpc_error(400, -32020, "header mismatch",
                                                  match="tools/call"))
        with pytest.raises(HeaderMismatch, match="header mismatch"):
            client.call_tool("lookup", {"region": "eu"})


def test_integer_header_beyond_2_53_is_refused_before_sending(fault_server: FaultServer) -> None:
    server = _modern(fault_server)
    tool = {"name": "num", "inputSchema": {"type": "object", "properties": {
        "n": {"type": "integer", "x-mcp-header": "N"}}}}
    with mcpsync.connect(server.url, timeout=5) as client:
        server.faults.script.append(result({"tools": [tool]}, "tools/list"))
        client.list_tools()
        with pytest.raises(ValueError):
            client.call_tool("num", {"n": 2**60})
    assert not _posts(server, "tools/call")


# ---------------------------------------------------------------- cancellation

@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_timeout_before_headers_closes_the_connection(fault_server: FaultServer,
                                                      era: Literal["legacy", "modern"]) -> None:
    server = fault_server
    server.faults.era = era
    with mcpsync.connect(server.url, era=era, timeout=5) as client:
        server.faults.header_delay = 10.0
        server.faults.delay_method = "tools/call"
        started = time.monotonic()
        with pytest.raises(RequestTimeout):
            client.call_tool("echo", {"text": "x"}, timeout=0.3)
        deadline = time.monotonic() + 5
        while not server.disconnected and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [r.rpc_method for r in server.disconnected] == ["tools/call"]
        assert time.monotonic() - started < 5     # not the server's 10 s
        server.faults.header_delay = 0.0
        assert client.call_tool("echo", {"text": "y"}).text == "y"
    cancels = _posts(server, "notifications/cancelled")
    if era == "legacy":
        assert len(cancels) == 1
    else:
        assert not cancels


def test_close_leaves_no_threads(fault_server: FaultServer, no_leaks: None) -> None:
    server = _legacy(fault_server, reply="sse")
    client = mcpsync.connect(server.url, era="legacy", timeout=5)
    client.call_tool("echo", {"text": "x"})
    server.wait_for_requests(lambda r: r.method == "GET")
    client.close()
    client.close()


# ---------------------------------------------------------------- 2024-11-05 HTTP+SSE

def test_falls_back_to_http_sse_2024(fault_server: FaultServer, no_leaks: None) -> None:
    server = fault_server
    server.faults.era = "sse2024"
    with mcpsync.connect(server.url, timeout=5) as client:
        assert client.era == "legacy"
        assert client.call_tool("echo", {"text": "old"}).text == "old"
        client.set_log_level("info")
    kinds = [(r.method, r.rpc_method) for r in server.requests]
    assert kinds[:3] == [("POST", "server/discover"), ("POST", "initialize"), ("GET", None)]
    endpoint_posts = [r for r in server.requests if "/messages" in r.path]
    assert [r.rpc_method for r in endpoint_posts][:3] == [
        "initialize", "notifications/initialized", "tools/call"]
    for req in endpoint_posts:
        assert req.header("Mcp-Session-Id") is None
        assert req.header("MCP-Protocol-Version") is None


def test_http_sse_endpoint_on_another_origin_is_refused(
        fault_server: FaultServer, fault_server_factory: Callable[[], FaultServer]) -> None:
    other = fault_server_factory()
    server = fault_server
    server.faults.era = "sse2024"
    server.faults.endpoint = other.url + "?session_id=x"
    with pytest.raises(TransportError, match="another origin"):
        mcpsync.connect(server.url, timeout=5)
    assert not other.requests


def test_neither_transport_is_a_transport_error(fault_server: FaultServer) -> None:
    server = fault_server
    server.faults.script.extend([
        Scripted(405, [], b"", None, "server/discover"),
        Scripted(404, [], b"", None, "initialize"),
        Scripted(404, [], b"not here", "text/plain", "GET"),
    ])
    with pytest.raises(TransportError, match="neither"):
        mcpsync.connect(server.url, timeout=5)


# ---------------------------------------------------------------- retries and batches

def test_connection_error_on_discover_is_retried_once_after_half_a_second() -> None:
    import socket

    with socket.socket() as sock:            # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    started = time.monotonic()
    with pytest.raises(ConnectionLost):
        mcpsync.connect(url, era="modern", timeout=5)
    assert time.monotonic() - started >= 0.5


def test_a_2025_03_26_json_array_reply_is_accepted(fault_server: FaultServer) -> None:
    server = _legacy(fault_server)
    logs: list[Any] = []
    with mcpsync.connect(server.url, protocol_version="2025-03-26", timeout=5,
                         on_log=lambda level, _l, data: logs.append(data)) as client:
        assert client.protocol_version == "2025-03-26"
        server.faults.script.append(Scripted(200, [], lambda r: json.dumps([
            {"jsonrpc": "2.0", "method": "notifications/message",
             "params": {"level": "info", "data": "batched"}},
            {"jsonrpc": "2.0", "id": r.rpc_id,
             "result": {"content": [{"type": "text", "text": "both"}]}}]).encode(),
            "application/json", "tools/call"))
        assert client.call_tool("echo", {"text": "x"}).text == "both"
    assert logs == ["batched"]


def test_modern_cancel_closes_the_stream_and_sends_nothing(fault_server: FaultServer) -> None:
    server = _modern(fault_server, reply="sse")
    with mcpsync.connect(server.url, timeout=5) as client:
        steps: list[float] = []
        future = client.submit_tool("slow", {"seconds": 3, "steps": 30},
                                    progress=lambda p, _t, _m: steps.append(p))
        req, = server.wait_for_requests(lambda r: r.rpc_method == "tools/call")
        deadline = time.monotonic() + 5
        while not steps and time.monotonic() < deadline:   # the stream is open and flowing
            time.sleep(0.01)
        assert future.cancel()
        deadline = time.monotonic() + 5
        while not server.cancelled and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.cancelled == [req.rpc_id]
        assert client.call_tool("echo", {"text": "after"}).text == "after"
    assert not _posts(server, "notifications/cancelled")


def test_dropped_get_stream_resumes_with_last_event_id(fault_server: FaultServer) -> None:
    server = _legacy(fault_server, drop_get_after=1, retry_ms=100)
    seen: list[Any] = []
    with mcpsync.connect(server.url, era="legacy", timeout=5,
                         on_notification=lambda method, params: seen.append(params)) as c:
        server.wait_for_requests(lambda r: r.method == "GET")
        server.push({"jsonrpc": "2.0", "method": "notifications/custom", "params": {"n": 1}})
        resumed = server.wait_for_requests(
            lambda r: r.method == "GET" and r.header("Last-Event-ID") is not None)
        assert resumed[0].header("Accept-Encoding") == "identity"
        server.push({"jsonrpc": "2.0", "method": "notifications/custom", "params": {"n": 2}})
        deadline = time.monotonic() + 5
        while len(seen) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert c.call_tool("echo", {"text": "x"}).text == "x"
    assert seen == [{"n": 1}, {"n": 2}]


def test_the_era_is_remembered_per_url(fault_server: FaultServer) -> None:
    from mcpsync.client._handshake import forget_era

    server = _legacy(fault_server)
    forget_era(("url", server.url))
    for _ in range(2):
        with mcpsync.connect(server.url, timeout=5) as client:
            assert client.era == "legacy"
    assert len(_posts(server, "server/discover")) == 1     # the second connect skips it
    assert len(_posts(server, "initialize")) == 2
    forget_era(("url", server.url))


def test_401_on_the_probe_never_decides_the_era(fault_server: FaultServer) -> None:
    server = _modern(fault_server, require_authorization="Bearer right")
    with pytest.raises(mcpsync.Unauthorized):
        mcpsync.connect(server.url, timeout=5)
    assert not _posts(server, "initialize")
    with mcpsync.connect(server.url, auth="right", timeout=5) as client:
        assert client.era == "modern"
