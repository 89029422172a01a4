"""Era re-detection for submitted calls and for resource subscriptions.

A server whose replies contradict the detected era is detected again once per client, and the
call is sent again in the new era: a future from ``submit()`` / ``submit_tool()`` gets the same
one re-detection and retry as a blocking call, run on a ``mcpsync-input-<name>`` worker rather
than in the caller's thread. After a re-detection that lands on a legacy session, the
resource subscriptions of the old session are sent again with ``resources/subscribe``.
Everything runs against the real loopback fault server.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from helpers import DOCS
from http_peers.fault_server import (
    MODERN_VERSION,
    SERVER_INFO,
    SERVER_INFO_KEY,
    FaultServer,
    RecordedRequest,
    Scripted,
    result,
    rpc_error,
)

import mcpsync
from mcpsync.client._submit import FutureFlow
from mcpsync.errors import RemoteError

pytestmark = pytest.mark.timeout(30)

_LEGACY_VERSION = "2025-11-25"


def _posts(server: FaultServer, method: str) -> list[RecordedRequest]:
    return [r for r in server.requests if r.method == "POST" and r.rpc_method == method]


def _unsupported_version(match: str = "tools/call") -> Scripted:
    """What a modern server answers to a legacy request: -32022 (a modern-only code)."""
    return rpc_error(400, -32022, "Unsupported protocol version",
                     {"supported": [MODERN_VERSION], "requested": _LEGACY_VERSION}, match=match)


def _watch_redetections(client: mcpsync.Client) -> list[str]:
    """Record the name of each thread that runs a re-detection."""
    names: list[str] = []
    original: Callable[..., None] = client._redetect

    def recording(used: Any, exc: RemoteError) -> None:
        names.append(threading.current_thread().name)
        original(used, exc)

    client._redetect = recording  # type: ignore[method-assign]
    return names


def _wait_for(predicate: Callable[[], bool], seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_submit_tool_redetects_legacy_to_modern_on_a_worker(fault_server: FaultServer,
                                                            no_leaks: None) -> None:
    server = fault_server
    server.faults.era = "legacy"
    with mcpsync.connect(server.url, timeout=5) as client:
        assert client.era == "legacy"
        names = _watch_redetections(client)
        server.faults.era = "modern"        # the server was upgraded behind our back
        server.faults.script.append(_unsupported_version())
        future = client.submit_tool("echo", {"text": "now"})
        assert future.result(10).text == "now"
        assert client.era == "modern"
        assert len(names) == 1
        assert names[0].startswith("mcpsync-input-")
        assert names[0] != threading.current_thread().name
    assert len(_posts(server, "server/discover")) == 2
    calls = _posts(server, "tools/call")
    assert [r.header("MCP-Protocol-Version") for r in calls] == [_LEGACY_VERSION,
                                                                 MODERN_VERSION]
    # The retry is a modern request: its params carry the modern _meta, rebuilt for the era.
    assert "_meta" not in calls[0].json["params"]
    assert calls[1].json["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] == \
        MODERN_VERSION
    assert calls[1].json["params"]["arguments"] == {"text": "now"}


def test_submit_redetects_modern_to_legacy(fault_server: FaultServer) -> None:
    server = fault_server
    server.faults.era = "modern"
    with mcpsync.connect(server.url, timeout=5) as client:
        assert client.era == "modern"
        server.faults.era = "legacy"
        server.faults.script.append(rpc_error(404, -32601, "Method not found",
                                              match="tools/list"))
        page = client.submit("tools/list").result(10)
        assert "echo" in [t["name"] for t in page["tools"]]
        assert client.era == "legacy"
        assert client.call_tool("echo", {"text": "x"}).text == "x"
    listed = _posts(server, "tools/list")
    assert len(listed) == 2
    assert "_meta" in listed[0].json["params"]
    assert "_meta" not in (listed[1].json.get("params") or {})
    assert len(_posts(server, "initialize")) == 1
    assert len(_posts(server, "server/discover")) == 2


def test_a_future_redetects_only_once_per_client(fault_server: FaultServer) -> None:
    server = fault_server
    server.faults.era = "legacy"
    with mcpsync.connect(server.url, timeout=5) as client:
        server.faults.era = "modern"
        server.faults.script.append(_unsupported_version())
        assert client.submit_tool("echo", {"text": "a"}).result(10).text == "a"
        assert client.era == "modern"
        # A second contradiction, through a future too, is an ordinary error.
        server.faults.script.append(rpc_error(404, -32601, "Method not found",
                                              match="tools/list"))
        with pytest.raises(RemoteError) as info:
            client.submit("tools/list").result(10)
        assert info.value.code == -32601
        assert client.era == "modern"
    assert len(_posts(server, "server/discover")) == 2


def test_an_error_of_the_retry_fails_the_future(fault_server: FaultServer) -> None:
    server = fault_server
    server.faults.era = "legacy"
    with mcpsync.connect(server.url, timeout=5) as client:
        server.faults.era = "modern"
        # -32021 contradicts the legacy era; on the re-detected modern session it is an
        # ordinary error of the retried call.
        server.faults.script.extend([
            rpc_error(400, -32021, "Missing capability", match="tools/call"),
            rpc_error(400, -32021, "Missing capability", match="tools/call")])
        with pytest.raises(RemoteError) as info:
            client.submit_tool("echo", {"text": "a"}).result(10)
        assert info.value.code == -32021
        assert client.era == "modern"
    assert len(_posts(server, "tools/call")) == 2
    assert len(_posts(server, "server/discover")) == 2


def test_a_pinned_era_future_is_never_redetected(fault_server: FaultServer) -> None:
    server = fault_server
    server.faults.era = "legacy"
    with mcpsync.connect(server.url, era="legacy", timeout=5) as client:
        server.faults.script.append(rpc_error(400, -32021, "Missing capability",
                                              match="tools/call"))
        with pytest.raises(RemoteError) as info:
            client.submit_tool("echo", {"text": "x"}).result(10)
        assert info.value.code == -32021
        assert client.era == "legacy"
    assert not _posts(server, "server/discover")
    assert len(_posts(server, "tools/call")) == 1


@pytest.mark.parametrize("second_seen", ["before", "after"])
def test_futures_contradicted_together_share_one_detection(fault_server: FaultServer,
                                                           second_seen: str,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           no_leaks: None) -> None:
    """Two futures meet the contradiction on the same session. The second one's answer is
    handled before the first one's re-detection began, or after it (the flag is set): either
    way it is sent again on the new session, and the era is detected once."""
    server = fault_server
    server.faults.era = "legacy"
    entered = threading.Event()
    gate = threading.Event()

    def on_log(level: str, logger: str | None, data: Any) -> None:
        if data == "hold":       # hold the dispatcher, so both answers queue behind it
            entered.set()
            gate.wait(10)

    with mcpsync.connect(server.url, timeout=5, on_log=on_log) as client:
        server.push({"jsonrpc": "2.0", "method": "notifications/message",
                     "params": {"level": "info", "data": "hold"}})
        assert entered.wait(10)
        server.faults.era = "modern"
        server.faults.script.extend([_unsupported_version(), _unsupported_version()])
        if second_seen == "after":
            answered = FutureFlow.answered
            handled: list[Any] = []

            def late(flow: FutureFlow, wire: Any) -> None:
                # The answers may arrive in either order: hold the one handled second on
                # the dispatcher until the other's re-detection has set the flag.
                handled.append(flow)
                if len(handled) == 2:
                    assert _wait_for(lambda: client._aside.redetected_from is not None)
                answered(flow, wire)

            monkeypatch.setattr(FutureFlow, "answered", late)
        first = client.submit_tool("echo", {"text": "one"})
        second = client.submit_tool("echo", {"text": "two"})
        # Both contradictions arrived and wait for the dispatcher; the first one's
        # re-detection then replaces the session while the second is still being handled.
        assert _wait_for(lambda: all(f._wire is not None and f._wire.done()
                                     for f in (first, second)))
        gate.set()
        assert first.result(10).text == "one"
        assert second.result(10).text == "two"
        assert client.era == "modern"
    assert len(_posts(server, "server/discover")) == 2
    calls = _posts(server, "tools/call")
    assert sorted(r.header("MCP-Protocol-Version") or "" for r in calls) == sorted(
        [_LEGACY_VERSION, _LEGACY_VERSION, MODERN_VERSION, MODERN_VERSION])


# ---------------------------------------------------------------- subscriptions (b)

def _modern_with_subscriptions(server: FaultServer) -> None:
    """A modern fault server that offers resource subscriptions and acknowledges a listen
    (the listen's stream then ends, which is all the client needs to subscribe)."""
    server.faults.era = "modern"
    server.faults.script.append(result({
        "resultType": "complete", "supportedVersions": [MODERN_VERSION],
        "capabilities": {"tools": {"listChanged": False}, "resources": {"subscribe": True}},
        "ttlMs": 0, "cacheScope": "private", "_meta": {SERVER_INFO_KEY: SERVER_INFO}},
        match="server/discover"))


def _listen_acknowledged(uri: str) -> Scripted:
    ack = ('data: {"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged",'
           '"params":{"notifications":{"resourceSubscriptions":["' + uri + '"]}}}\n\n')
    return Scripted(200, [], None, "text/event-stream", "subscriptions/listen",
                    sse_events=[ack])


@pytest.mark.parametrize("via", ["blocking", "future"])
def test_subscriptions_are_sent_again_on_a_redetected_legacy_session(
        fault_server: FaultServer, via: str) -> None:
    server = fault_server
    _modern_with_subscriptions(server)
    seen: list[str] = []
    updated = threading.Event()

    def changed(uri: str) -> None:
        seen.append(uri)
        updated.set()

    with mcpsync.connect(server.url, timeout=5) as client:
        assert client.era == "modern"
        server.faults.script.append(_listen_acknowledged("memo://hello"))
        handle = client.subscribe("memo://hello", changed)
        assert _posts(server, "subscriptions/listen")
        assert not _posts(server, "resources/subscribe")
        server.faults.era = "legacy"
        server.faults.script.append(rpc_error(404, -32601, "Method not found",
                                              match="tools/list"))
        if via == "blocking":
            client.list_tools()
        else:
            client.submit("tools/list").result(10)
        assert client.era == "legacy"
        subs = _posts(server, "resources/subscribe")
        assert [r.json["params"]["uri"] for r in subs] == ["memo://hello"]
        session_id = server.sessions[0]
        assert subs[0].header("Mcp-Session-Id") == session_id
        inits = _posts(server, "initialize")
        assert len(inits) == 1 and inits[0].time < subs[0].time
        server.wait_for_requests(
            lambda r: r.method == "GET" and r.header("Mcp-Session-Id") == session_id, 1)
        for _ in range(25):     # the GET stream may open just after our request is seen
            server.push({"jsonrpc": "2.0", "method": "notifications/resources/updated",
                         "params": {"uri": "memo://hello"}})
            if updated.wait(0.2):
                break
        assert updated.is_set()
        handle.close()          # the last handle on a legacy session unsubscribes
    assert set(seen) == {"memo://hello"}
    assert [r.json["params"]["uri"] for r in _posts(server, "resources/unsubscribe")] == [
        "memo://hello"]


def test_a_legacy_redetection_without_subscriptions_sends_none(
        fault_server: FaultServer) -> None:
    server = fault_server
    _modern_with_subscriptions(server)
    with mcpsync.connect(server.url, timeout=5) as client:
        server.faults.script.append(_listen_acknowledged("memo://hello"))
        client.subscribe("memo://hello", lambda uri: None).close()
        server.faults.era = "legacy"
        server.faults.script.append(rpc_error(404, -32601, "Method not found",
                                              match="tools/list"))
        client.list_tools()
        assert client.era == "legacy"
    assert not _posts(server, "resources/subscribe")


def test_the_docs_example_runs(fault_server: FaultServer) -> None:
    text = (DOCS / "http.md").read_text()
    code = next(block for block in re.findall(r"^```python\n(.*?)^```", text,
                                              re.DOTALL | re.MULTILINE) if "def watch" in block)
    namespace: dict[str, Any] = {}
    exec(compile(code, "docs/http.md", "exec"), namespace)
    server = fault_server
    _modern_with_subscriptions(server)
    with mcpsync.connect(server.url, timeout=5) as client:
        server.faults.script.append(_listen_acknowledged("memo://hello"))
        server.faults.era = "legacy"       # contradicts the modern era from now on
        server.faults.script.append(rpc_error(404, -32601, "Method not found",
                                              match="tools/list"))
        assert "echo" in namespace["watch"](client)
        assert client.era == "legacy"
    assert [r.json["params"]["uri"] for r in _posts(server, "resources/subscribe")] == [
        "memo://hello"]
