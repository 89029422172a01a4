"""Connecting over HTTP: the GET stream is answered before the first request, the era probe
reads -32021/-32020 as modern, and the reader thread is named after the transport.

Against the real loopback fault server (``tests/http_peers/fault_server.py``), whose record of
each request (with its arrival time) shows the order on the wire.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from http_peers.fault_server import FaultServer, RecordedRequest, Scripted, result, rpc_error

import mcpsync
from mcpsync.client._handshake import HandshakeParams, _discover
from mcpsync.errors import HeaderMismatch, MissingCapability, RemoteError
from mcpsync.transport.http._transport import GET_OPEN_WAIT

pytestmark = pytest.mark.timeout(30)

GET_DELAY = 0.4   # the scripted GET holds its status line back this long


def _legacy(server: FaultServer) -> FaultServer:
    server.faults.era = "legacy"
    return server


def _gets(server: FaultServer) -> list[RecordedRequest]:
    return [r for r in server.requests if r.method == "GET"]


def _calls(server: FaultServer) -> list[RecordedRequest]:
    return [r for r in server.requests if r.method == "POST" and r.rpc_method == "tools/call"]


def _slow_get(status: int) -> Scripted:
    """A GET answered only after GET_DELAY: an open SSE stream (a comment, then it ends) or a
    refusal."""
    if status == 200:
        return Scripted(200, [], None, "text/event-stream", "GET", delay=GET_DELAY,
                        sse_events=[": opened late\n\n"])
    return Scripted(status, [("Allow", "POST, DELETE")], b"", None, "GET", delay=GET_DELAY)


# ---------------------------------------------------------------- the GET stream first

@pytest.mark.parametrize("status", [200, 405])
def test_connect_returns_only_after_the_get_stream_is_answered(
        fault_server: FaultServer, status: int) -> None:
    # The elicitation-sep1034 flake: a server without an event store drops what it sends on a
    # GET stream that is not open yet, so the first request must not beat the GET's answer.
    server = _legacy(fault_server)
    server.faults.script.append(_slow_get(status))
    with mcpsync.connect(server.url, era="legacy", timeout=5) as client:
        assert client.call_tool("echo", {"text": "x"}).text == "x"
    get = _gets(server)[0]
    call = _calls(server)[0]
    assert get.header("Mcp-Session-Id") == call.header("Mcp-Session-Id") is not None
    assert call.time >= get.time + GET_DELAY, (
        f"tools/call was POSTed {call.time - get.time:.3f} s after the GET arrived, before "
        f"its answer ({GET_DELAY} s later)")


def test_connect_waits_for_a_silent_get_stream_only_briefly(fault_server: FaultServer) -> None:
    server = _legacy(fault_server)
    server.faults.script.append(Scripted(200, [], None, "text/event-stream", "GET", delay=20,
                                         sse_events=[]))
    started = time.monotonic()
    with mcpsync.connect(server.url, era="legacy", timeout=5) as client:
        connected = time.monotonic() - started
        assert client.call_tool("echo", {"text": "x"}).text == "x"
    # Bounded by GET_OPEN_WAIT (plus the handshake), far below the GET's 20 s.
    assert connected < GET_OPEN_WAIT + 3
    assert _calls(server)[0].time >= _gets(server)[0].time


def test_after_a_404_the_restored_get_stream_is_answered_before_the_retry(
        fault_server: FaultServer) -> None:
    server = _legacy(fault_server)
    with mcpsync.connect(server.url, era="legacy", timeout=5) as client:
        server.wait_for_requests(lambda r: r.method == "GET")
        old = server.sessions[0]
        server.expire_sessions()
        server.faults.script.append(_slow_get(200))
        assert client.call_tool("echo", {"text": "again"}).text == "again"
        new = server.sessions[0]
    assert new != old
    first, retried = _calls(server)
    assert (first.header("Mcp-Session-Id"), retried.header("Mcp-Session-Id")) == (old, new)
    restored = next(r for r in _gets(server) if r.header("Mcp-Session-Id") == new)
    assert restored.header("Last-Event-ID") is None      # a new session: a fresh stream
    assert retried.time >= restored.time + GET_DELAY, (
        f"the retried tools/call went out {retried.time - restored.time:.3f} s after the new "
        f"GET arrived, before its answer ({GET_DELAY} s later)")
    # The old GET was ended and reopened at once, not after the 1 s resumption back-off.
    initialized = [r for r in server.requests
                   if r.rpc_method == "notifications/initialized"][-1]
    assert restored.time - initialized.time < 0.9


# ---------------------------------------------------------------- the era probe

@pytest.mark.parametrize(("status", "code", "error", "with_id"), [
    (400, -32021, MissingCapability, True),
    (400, -32021, MissingCapability, False),     # an id-less error in a 4xx body
    (200, -32021, MissingCapability, True),
    (400, -32020, HeaderMismatch, True),
    (200, -32020, HeaderMismatch, True),
])
def test_probe_answered_with_a_modern_error_means_a_modern_server(
        fault_server: FaultServer, status: int, code: int, error: type[RemoteError],
        with_id: bool) -> None:
    server = fault_server   # era "both": it would happily take initialize
    server.faults.script.append(rpc_error(
        status, code, "refused", {"requiredCapabilities": {"elicitation": {}}},
        match="server/discover", with_id=with_id))
    with pytest.raises(error) as info:
        mcpsync.connect(server.url, timeout=5)
    assert info.value.code == code
    assert "server/discover" in str(info.value)
    assert [r.rpc_method for r in server.requests if r.method == "POST"] == ["server/discover"]


def test_probe_answered_with_32022_still_retries_and_other_errors_still_mean_legacy(
        fault_server_factory: Any) -> None:
    modern = fault_server_factory()
    modern.faults.script.append(rpc_error(400, -32022, "unsupported",
                                          {"supported": ["2026-07-28"]},
                                          match="server/discover"))
    with mcpsync.connect(modern.url, timeout=5) as client:
        assert client.era == "modern"
    assert len([r for r in modern.requests if r.rpc_method == "server/discover"]) == 2
    legacy = fault_server_factory()
    legacy.faults.script.append(rpc_error(400, -32602, "bad params", match="server/discover"))
    with mcpsync.connect(legacy.url, timeout=5) as client:
        assert client.era == "legacy"
    mock = fault_server_factory()
    mock.faults.script.append(result({}, match="server/discover"))  # the conformance mocks
    with mcpsync.connect(mock.url, timeout=5) as client:
        assert client.era == "legacy"


class _Refusing:
    """The part of ``Session`` ``_discover`` uses, answering the probe with one error."""

    allow_batch = False

    def __init__(self, code: int) -> None:
        self.code = code

    def request(self, method: str, params: dict[str, Any] | None = None, *,
                timeout: float | None = None, cancellable: bool = True) -> Any:
        raise RemoteError("refused", code=self.code, remote_message="refused", data=None)

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        raise AssertionError("not used")

    def close(self, reason: str = "") -> None:
        raise AssertionError("not used")


@pytest.mark.parametrize("code", [-32021, -32020])
def test_on_stdio_only_32022_counts(code: int) -> None:
    def params(http: bool) -> HandshakeParams:
        return HandshakeParams(name="s", timeout=1, probe_timeout=1, legacy_capabilities={},
                               client_info={}, modern_meta=lambda v: {}, http=http)
    assert _discover(_Refusing(code), params(http=False), 1) is None     # legacy
    with pytest.raises(RemoteError):
        _discover(_Refusing(code), params(http=True), 1)


# ---------------------------------------------------------------- thread names

def test_the_reader_thread_is_named_after_the_http_transport(fault_server: FaultServer) -> None:
    server = _legacy(fault_server)
    with mcpsync.connect(server.url, era="legacy", name="web", timeout=5) as client:
        client.call_tool("echo", {"text": "x"})
        names = {t.name for t in threading.enumerate()}
        assert "mcpsync-http-reader-web" in names
        assert not [n for n in names if n.startswith("mcpsync-stdio-reader-")]
