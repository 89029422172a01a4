"""The HTTP test peers behave as documented, driven with plain ``requests``.

The transport's tests trust these servers to produce each fault exactly, so every mode gets a
short test here that would fail if the server produced something else.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal

import pytest
import requests
from http_peers.fault_server import (
    MODERN_VERSION,
    FaultServer,
    Scripted,
    dpop_nonce_challenge,
    insufficient_scope,
    iter_sse,
    redirect,
    result,
    rpc_error,
    unauthorized,
)
from http_peers.fixtures import OfficialServer

pytestmark = pytest.mark.timeout(30)

ACCEPT = "application/json, text/event-stream"
LEGACY = "2025-11-25"


def _meta(**extra: Any) -> dict[str, Any]:
    return {"io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}, **extra}


def _modern(method: str, params: dict[str, Any] | None = None, rid: int = 1,
            **meta: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """A modern request body and the headers that must go with it."""
    params = dict(params or {})
    params["_meta"] = _meta(**meta)
    headers = {"MCP-Protocol-Version": MODERN_VERSION, "Mcp-Method": method}
    if method in ("tools/call", "prompts/get"):
        headers["Mcp-Name"] = params["name"]
    if method == "resources/read":
        headers["Mcp-Name"] = params["uri"]
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}, headers


def _post(url: str, body: Any, headers: dict[str, str] | None = None,
          session: requests.Session | None = None, **kw: Any) -> requests.Response:
    sender = session or requests
    kw.setdefault("timeout", 10)
    return sender.post(url, data=json.dumps(body), allow_redirects=False,
                       headers={"Accept": ACCEPT, "Content-Type": "application/json",
                                **(headers or {})}, **kw)


def _init_body(rid: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": "initialize",
            "params": {"protocolVersion": LEGACY, "capabilities": {"elicitation": {},
                                                                   "sampling": {}},
                       "clientInfo": {"name": "t", "version": "1"}}}


def _initialize(url: str) -> tuple[str | None, dict[str, str]]:
    """Legacy handshake; returns the session id and the headers later requests need."""
    resp = _post(url, _init_body())
    assert resp.status_code == 200, resp.text
    sid = resp.headers.get("Mcp-Session-Id")
    headers = {"MCP-Protocol-Version": LEGACY}
    if sid:
        headers["Mcp-Session-Id"] = sid
    note = _post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, headers)
    assert note.status_code == 202
    return sid, headers


def _call(name: str, arguments: dict[str, Any], rid: int = 2,
          **meta: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if meta:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}


def _messages(resp: requests.Response) -> list[dict[str, Any]]:
    """Every JSON-RPC message of a reply, whether JSON or SSE."""
    if resp.headers["Content-Type"].startswith("application/json"):
        body = resp.json()
        return body if isinstance(body, list) else [body]
    return [json.loads(e["data"]) for e in iter_sse(resp.content) if e.get("data")]


def _live_events(resp: requests.Response) -> Iterator[dict[str, str]]:
    """SSE events as they arrive on an open stream (no buffering)."""
    buf = b""
    for chunk in resp.iter_content(chunk_size=None):
        buf += chunk.replace(b"\r\n", b"\n")
        while b"\n\n" in buf:
            block, buf = buf.split(b"\n\n", 1)
            yield from iter_sse(block + b"\n\n")


def _jwt(claims: dict[str, Any]) -> str:
    def part(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()
    return f"{part({'alg': 'ES256', 'typ': 'dpop+jwt'})}.{part(claims)}.c2ln"


# ---- the official SDK server ---------------------------------------------------------------


@pytest.mark.parametrize("official_http_server", ["json-stateless", "sse-stateful"],
                         indirect=True)
def test_official_serves_both_eras(official_http_server: OfficialServer) -> None:
    url = official_http_server.url
    body, headers = _modern("server/discover")
    discover = _post(url, body, headers)
    assert discover.status_code == 200
    assert _messages(discover)[-1]["result"]["supportedVersions"] == [MODERN_VERSION]
    body, headers = _modern("tools/call", {"name": "add", "arguments": {"a": 2, "b": 3}})
    add = _messages(_post(url, body, headers))[-1]["result"]
    assert add["structuredContent"] == {"sum": 5}
    sid, legacy = _initialize(url)
    assert (sid is None) == ("stateless" in official_http_server.mode)
    listed = _messages(_post(url, {"jsonrpc": "2.0", "id": 3, "method": "tools/list"}, legacy))
    names = {t["name"] for t in listed[-1]["result"]["tools"]}
    assert {"echo", "add", "slow", "chatty", "greet", "think", "drop_stream"} <= names


def test_official_resource_and_prompt(official_http_server: OfficialServer) -> None:
    url = official_http_server.url
    body, headers = _modern("resources/read", {"uri": "memo://hello"})
    read = _post(url, body, headers).json()["result"]
    assert read["contents"][0]["text"] == "hello resource"
    body, headers = _modern("prompts/get", {"name": "review", "arguments": {"code": "x=1"}})
    prompt = _post(url, body, headers).json()["result"]
    assert "Please review: x=1" in json.dumps(prompt)


@pytest.mark.parametrize("official_http_server", ["sse-stateless"], indirect=True)
def test_official_modern_sse_progress(official_http_server: OfficialServer) -> None:
    body, headers = _modern("tools/call", {"name": "slow",
                                           "arguments": {"seconds": 0.2, "steps": 2}},
                            progressToken="p1")
    resp = _post(official_http_server.url, body, headers)
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    msgs = _messages(resp)
    progress = [m for m in msgs if m.get("method") == "notifications/progress"]
    assert [p["params"]["progress"] for p in progress] == [1, 2]
    assert msgs[-1]["result"]["content"][0]["text"] == "slept 0.2"


@pytest.mark.parametrize("official_http_server", ["sse-stateful"], indirect=True)
def test_official_legacy_logging_and_progress(official_http_server: OfficialServer) -> None:
    url = official_http_server.url
    _, headers = _initialize(url)
    msgs = _messages(_post(url, _call("chatty", {"text": "hi"}), headers))
    logs = [m["params"]["data"] for m in msgs if m.get("method") == "notifications/message"]
    assert logs == ["info: hi", "warning: hi"]
    msgs = _messages(_post(url, _call("slow", {"seconds": 0.1, "steps": 2}, rid=3,
                                      progressToken=7), headers))
    assert [m["params"]["progress"] for m in msgs if "method" in m] == [1, 2]


@pytest.mark.parametrize("official_http_server", ["sse-stateful"], indirect=True)
@pytest.mark.parametrize(("tool", "method", "answer", "expected"), [
    ("greet", "elicitation/create", {"action": "accept", "content": {"name": "Ada"}},
     "hello Ada (42)"),
    ("think", "sampling/createMessage", {"role": "assistant", "model": "m",
                                         "content": {"type": "text", "text": "4"}},
     "model said: 4"),
])
def test_official_legacy_server_requests(official_http_server: OfficialServer, tool: str,
                                         method: str, answer: dict[str, Any],
                                         expected: str) -> None:
    url = official_http_server.url
    _, headers = _initialize(url)
    with _post(url, _call(tool, {}), headers, stream=True) as resp:
        events = _live_events(resp)
        for event in events:
            msg = json.loads(event["data"]) if event.get("data") else {}
            if msg.get("method") == method:
                reply = {"jsonrpc": "2.0", "id": msg["id"], "result": answer}
                assert _post(url, reply, headers).status_code == 202
            elif "result" in msg:
                assert msg["result"]["content"][0]["text"] == expected
                break
        else:
            pytest.fail("no result on the stream")


@pytest.mark.parametrize("official_http_server", ["sse-stateful"], indirect=True)
def test_official_restart_on_same_port_ends_the_session(
        official_http_server: OfficialServer) -> None:
    url = official_http_server.url
    _, headers = _initialize(url)
    official_http_server.restart()
    assert official_http_server.url == url
    listed = _post(url, {"jsonrpc": "2.0", "id": 3, "method": "tools/list"}, headers)
    assert listed.status_code == 404
    sid, _ = _initialize(url)
    assert sid and sid != headers["Mcp-Session-Id"]


@pytest.mark.parametrize("official_http_server", ["sse-stateful-resumable-retry200"],
                         indirect=True)
def test_official_resumable_stream(official_http_server: OfficialServer) -> None:
    url = official_http_server.url
    _, headers = _initialize(url)
    resp = _post(url, _call("drop_stream", {}), headers)
    events = list(iter_sse(resp.content))
    assert events[0].get("retry") == "200" and events[0]["id"]
    assert not any("result" in e.get("data", "") for e in events)
    last = [e["id"] for e in events if "id" in e][-1]
    resumed = requests.get(url, headers={"Accept": "text/event-stream", **headers,
                                         "Last-Event-ID": last}, stream=True, timeout=10)
    with resumed:
        for event in _live_events(resumed):
            if event.get("data") and "result" in event["data"]:
                assert json.loads(event["data"])["result"]["content"][0]["text"] == "resumed"
                break


# ---- the fault server: plumbing, recording, legacy sessions --------------------------------


def test_records_requests_and_keeps_alive(fault_server: FaultServer) -> None:
    host, port = fault_server.origin.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    for rid in (1, 2):
        conn.request("POST", "/mcp", json.dumps(_init_body(rid)),
                     {"Content-Type": "application/json", "Accept": ACCEPT, "X-Test": "yes"})
        resp = conn.getresponse()
        assert resp.status == 200 and json.loads(resp.read())["id"] == rid
    conn.close()
    first, second = fault_server.requests
    assert (first.method, first.path, first.rpc_method) == ("POST", "/mcp", "initialize")
    assert first.header("x-test") == "yes" and first.headers["ACCEPT"] == ACCEPT
    assert second.rpc_id == 2
    assert fault_server.connections == 1, "both requests should have shared one connection"


def test_fifty_concurrent_requests(fault_server: FaultServer) -> None:
    fault_server.faults.require_authorization = "Bearer t"
    statuses: list[int] = []

    def one() -> None:
        statuses.append(_post(fault_server.url, _init_body(), {"Authorization": "Bearer t"})
                        .status_code)

    threads = [threading.Thread(target=one) for _ in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert statuses == [200] * 50
    assert fault_server.connections == 50


def test_legacy_session_lifecycle(fault_server: FaultServer) -> None:
    url = fault_server.url
    sid, headers = _initialize(url)
    assert sid and sid in fault_server.sessions
    listed = _post(url, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers)
    assert {t["name"] for t in listed.json()["result"]["tools"]} >= {"echo", "add", "slow"}
    missing = _post(url, {"jsonrpc": "2.0", "id": 3, "method": "tools/list"})
    assert missing.status_code == 400 and missing.json()["id"] is None
    assert requests.delete(url, headers=headers, timeout=5).status_code == 200
    gone = _post(url, {"jsonrpc": "2.0", "id": 4, "method": "tools/list"}, headers)
    assert gone.status_code == 404


def test_stateless_legacy_answers_discover_with_method_not_found(
        fault_server: FaultServer) -> None:
    fault_server.faults.era = "legacy"
    fault_server.faults.stateful = False
    body, headers = _modern("server/discover")
    resp = _post(fault_server.url, body, headers)
    assert resp.status_code == 200 and resp.json()["error"]["code"] == -32601
    fault_server.faults.stateful = True
    stateful = _post(fault_server.url, body, headers)
    assert stateful.status_code == 400 and stateful.json()["id"] is None


@pytest.mark.parametrize("times", [1, 2])
def test_session_expires_on_method(fault_server: FaultServer, times: int) -> None:
    fault_server.faults.expire_method = "tools/call"
    fault_server.faults.expire_times = times
    url = fault_server.url
    _, headers = _initialize(url)
    assert _post(url, _call("echo", {"text": "a"}), headers).status_code == 404
    _, headers2 = _initialize(url)
    retry = _post(url, _call("echo", {"text": "a"}), headers2)
    assert retry.status_code == (404 if times == 2 else 200)
    if times == 1:
        assert retry.json()["result"]["content"][0]["text"] == "a"


def test_session_expires_after_n_requests(fault_server: FaultServer) -> None:
    fault_server.faults.expire_session_after = 2
    url = fault_server.url
    _, headers = _initialize(url)  # notifications/initialized is request 1
    assert _post(url, _call("echo", {"text": "a"}), headers).status_code == 200
    assert _post(url, _call("echo", {"text": "a"}), headers).status_code == 404
    _, headers = _initialize(url)
    for _ in range(3):  # expire_times (1) is used up: the new session lives on
        assert _post(url, _call("echo", {"text": "a"}), headers).status_code == 200


def test_batch_under_2025_03_26(fault_server: FaultServer) -> None:
    _, headers = _initialize(fault_server.url)
    batch = [_call("echo", {"text": "x"}, rid=5), _call("add", {"a": 1, "b": 1}, rid=6)]
    replies = _post(fault_server.url, batch, headers).json()
    assert [r["id"] for r in replies] == [5, 6]


# ---- the fault server: SSE, drops and resumption ------------------------------------------


def test_sse_reply_with_priming_and_progress(fault_server: FaultServer) -> None:
    fault_server.faults.reply = "sse"
    fault_server.faults.retry_ms = 250
    _, headers = _initialize(fault_server.url)
    resp = _post(fault_server.url, _call("slow", {"seconds": 0.1, "steps": 2},
                                         progressToken="t"), headers)
    assert resp.headers["Content-Type"] == "text/event-stream"
    events = list(iter_sse(resp.content))
    assert events[0] == {"id": events[0]["id"], "retry": "250", "data": ""}
    msgs = [json.loads(e["data"]) for e in events[1:]]
    assert [m["params"]["progress"] for m in msgs[:-1]] == [1, 2]
    assert msgs[-1]["result"]["content"][0]["text"] == "slept 0.1"
    assert all("id" in e for e in events)


@pytest.mark.parametrize("style", ["abort", "eof"])
def test_drop_after_priming_then_resume(fault_server: FaultServer,
                                        style: Literal["abort", "eof"]) -> None:
    faults = fault_server.faults
    faults.drop, faults.drop_style, faults.retry_ms = "after_id", style, 300
    _, headers = _initialize(fault_server.url)
    seen: list[dict[str, str]] = []
    resp = _post(fault_server.url, _call("echo", {"text": "back"}), headers, stream=True)
    try:
        seen.extend(_live_events(resp))
        dropped_cleanly = True
    except requests.exceptions.ChunkedEncodingError:
        dropped_cleanly = False
    assert dropped_cleanly == (style == "eof")
    assert len(seen) == 1 and seen[0]["retry"] == "300" and seen[0]["data"] == ""
    # the next call is not dropped (drop_times was 1)
    assert _post(fault_server.url, _call("echo", {"text": "ok"}, rid=9), headers).ok
    resumed = requests.get(fault_server.url, timeout=5, headers={
        "Accept": "text/event-stream", "Last-Event-ID": seen[0]["id"], **headers})
    msgs = [json.loads(e["data"]) for e in iter_sse(resumed.content) if e.get("data")]
    assert msgs[-1]["id"] == 2 and msgs[-1]["result"]["content"][0]["text"] == "back"


def test_resumed_get_waits_for_a_slow_response(fault_server: FaultServer) -> None:
    faults = fault_server.faults
    faults.drop, faults.resume_fail_times = "after_id", 1
    _, headers = _initialize(fault_server.url)
    with pytest.raises(requests.exceptions.ChunkedEncodingError):
        resp = _post(fault_server.url, _call("slow", {"seconds": 0.3, "steps": 3},
                                             progressToken=1), headers, stream=True)
        list(resp.iter_content(chunk_size=None))
    first_id = f"{fault_server.requests[-1].rpc_id}"  # the recorded tools/call
    assert first_id == "2"
    get_headers = {"Accept": "text/event-stream", "Last-Event-ID": "s1-0", **headers}
    assert requests.get(fault_server.url, headers=get_headers, timeout=5).status_code == 503
    resumed = requests.get(fault_server.url, headers=get_headers, timeout=5)
    msgs = [json.loads(e["data"]) for e in iter_sse(resumed.content) if e.get("data")]
    assert [m.get("method") for m in msgs] == ["notifications/progress"] * 3 + [None]
    assert msgs[-1]["result"]["content"][0]["text"] == "slept 0.3"


def test_server_request_on_the_post_stream(fault_server: FaultServer) -> None:
    fault_server.faults.reply = "sse"
    ask = {"jsonrpc": "2.0", "id": "srv-1", "method": "elicitation/create",
           "params": {"message": "name?", "requestedSchema": {"type": "object"}}}
    fault_server.faults.stream_messages = [ask]
    _, headers = _initialize(fault_server.url)
    msgs = _messages(_post(fault_server.url, _call("echo", {"text": "x"}), headers))
    assert msgs[0] == ask and msgs[-1]["result"]["content"][0]["text"] == "x"
    answer = {"jsonrpc": "2.0", "id": "srv-1", "result": {"action": "decline"}}
    assert _post(fault_server.url, answer, headers).status_code == 202
    assert fault_server.requests[-1].json == answer


def test_drop_before_any_event_id(fault_server: FaultServer) -> None:
    fault_server.faults.drop = "before_id"
    _, headers = _initialize(fault_server.url)
    seen: list[dict[str, str]] = []
    with pytest.raises(requests.exceptions.ChunkedEncodingError):
        resp = _post(fault_server.url, _call("echo", {"text": "x"}), headers, stream=True)
        seen.extend(_live_events(resp))
    assert len(seen) == 1 and "id" not in seen[0]


def test_get_stream_delivers_pushed_messages(fault_server: FaultServer) -> None:
    fault_server.faults.keepalive_interval = 0.05
    _, headers = _initialize(fault_server.url)
    with requests.get(fault_server.url, headers={"Accept": "text/event-stream", **headers},
                      stream=True, timeout=5) as resp:
        assert resp.headers["Content-Type"] == "text/event-stream"
        events = _live_events(resp)
        assert next(events)["data"] == ""  # the priming event
        fault_server.push({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        event = next(events)
        assert json.loads(event["data"])["method"] == "notifications/tools/list_changed"
        raw = b""
        for chunk in resp.iter_content(chunk_size=None):
            raw += chunk
            if b": keep-alive" in raw:
                break


def test_get_stream_drop_and_resume(fault_server: FaultServer) -> None:
    fault_server.faults.drop_get_after = 1
    fault_server.faults.retry_ms = 100
    _, headers = _initialize(fault_server.url)
    get_headers = {"Accept": "text/event-stream", **headers}
    seen: list[dict[str, str]] = []
    resp = requests.get(fault_server.url, headers=get_headers, stream=True, timeout=5)
    fault_server.push({"jsonrpc": "2.0", "method": "notifications/message",
                       "params": {"level": "info", "data": 1}})
    with pytest.raises(requests.exceptions.ChunkedEncodingError):
        seen.extend(_live_events(resp))
    assert [e.get("retry") for e in seen] == ["100", None] and len(fault_server.drops) == 1
    with requests.get(fault_server.url, stream=True, timeout=5,
                      headers={**get_headers, "Last-Event-ID": seen[0]["id"]}) as resumed:
        events = _live_events(resumed)
        assert next(events)["id"] == seen[1]["id"]  # the missed message is replayed
        fault_server.push({"jsonrpc": "2.0", "method": "notifications/message",
                           "params": {"level": "info", "data": 2}})
        assert json.loads(next(events)["data"])["params"]["data"] == 2


def test_get_405_when_no_stream_offered(fault_server: FaultServer) -> None:
    fault_server.faults.get_stream = False
    _, headers = _initialize(fault_server.url)
    assert requests.get(fault_server.url, headers=headers, timeout=5).status_code == 405
    fault_server.faults.delete_status = 405
    assert requests.delete(fault_server.url, headers=headers, timeout=5).status_code == 405


# ---- the fault server: auth ------------------------------------------------------------


def test_401_until_the_new_token(fault_server: FaultServer) -> None:
    fault_server.faults.require_authorization = "Bearer new"
    old = _post(fault_server.url, _init_body(), {"Authorization": "Bearer old"})
    assert old.status_code == 401 and "resource_metadata" in old.headers["WWW-Authenticate"]
    new = _post(fault_server.url, _init_body(), {"Authorization": "Bearer new"})
    assert new.status_code == 200
    assert [r.header("Authorization") for r in fault_server.requests] == ["Bearer old",
                                                                          "Bearer new"]


def test_scripted_401_twice_with_repeated_challenges(fault_server: FaultServer) -> None:
    fault_server.faults.script.extend([unauthorized('Bearer realm="a"', 'DPoP algs="ES256"'),
                                       unauthorized()])
    first = _post(fault_server.url, _init_body())
    assert first.status_code == 401
    assert first.raw.headers.getlist("WWW-Authenticate") == ['Bearer realm="a"',
                                                             'DPoP algs="ES256"']
    assert _post(fault_server.url, _init_body()).status_code == 401
    assert _post(fault_server.url, _init_body()).status_code == 200


def test_dpop_nonce(fault_server: FaultServer) -> None:
    fault_server.faults.dpop_nonce = "n-1"
    fault_server.faults.response_headers = {"DPoP-Nonce": "n-1"}
    bare = _post(fault_server.url, _init_body(), {"DPoP": _jwt({"htm": "POST"})})
    assert bare.status_code == 401
    assert 'error="use_dpop_nonce"' in bare.headers["WWW-Authenticate"]
    assert bare.headers["DPoP-Nonce"] == "n-1"
    good = _post(fault_server.url, _init_body(), {"DPoP": _jwt({"nonce": "n-1"})})
    assert good.status_code == 200 and good.headers["DPoP-Nonce"] == "n-1"
    fault_server.faults.dpop_nonce = None
    fault_server.faults.script.append(dpop_nonce_challenge("n-2"))
    scripted = _post(fault_server.url, _init_body())
    assert scripted.status_code == 401 and scripted.headers["DPoP-Nonce"] == "n-2"


def test_403_insufficient_scope(fault_server: FaultServer) -> None:
    fault_server.faults.script.append(insufficient_scope("files:write"))
    resp = _post(fault_server.url, _init_body())
    assert resp.status_code == 403
    challenge = resp.headers["WWW-Authenticate"]
    assert 'error="insufficient_scope"' in challenge and 'scope="files:write"' in challenge


# ---- the fault server: redirects, content types, sizes, delays ---------------------------


@pytest.mark.parametrize("status", [307, 308, 302])
def test_same_origin_redirect(fault_server: FaultServer, status: int) -> None:
    fault_server.faults.script.append(redirect(status, "/other"))
    first = _post(fault_server.url, _init_body())
    assert first.status_code == status and first.headers["Location"] == "/other"
    followed = _post(fault_server.origin + first.headers["Location"], _init_body())
    assert followed.status_code == 200
    assert [r.path for r in fault_server.requests] == ["/mcp", "/other"]


def test_cross_origin_redirect(fault_server_factory: Callable[[], FaultServer]) -> None:
    here, there = fault_server_factory(), fault_server_factory()
    assert here.origin != there.origin
    here.faults.script.append(redirect(307, there.url))
    resp = _post(here.url, _init_body(), {"Authorization": "Bearer secret"})
    assert resp.status_code == 307 and resp.headers["Location"] == there.url
    assert there.requests == []
    assert _post(resp.headers["Location"], _init_body()).status_code == 200
    assert there.requests[0].header("Authorization") is None


def test_scripted_raw_sse_events(fault_server: FaultServer) -> None:
    fault_server.faults.script.append(Scripted(sse_events=[
        "\ufeffid: 1\r\ndata: \r\n\r\n", ": comment\r", "\rdata: {\"jsonrpc\":\"2.0\",",
        "\"id\":1,\"result\":{}}\n\n"]))
    resp = _post(fault_server.url, _init_body())
    assert resp.headers["Content-Type"] == "text/event-stream"
    assert resp.content.decode("utf-8-sig") == (
        'id: 1\r\ndata: \r\n\r\n: comment\r\rdata: {"jsonrpc":"2.0","id":1,"result":{}}\n\n')


def test_bad_content_type_and_empty_404(fault_server: FaultServer) -> None:
    fault_server.faults.script.extend([
        Scripted(200, [], b"<html>hi</html>", "text/html"),
        Scripted(404),
    ])
    html = _post(fault_server.url, _init_body())
    assert html.status_code == 200 and html.headers["Content-Type"] == "text/html"
    empty = _post(fault_server.url, _init_body())
    assert empty.status_code == 404 and empty.content == b""
    assert "Content-Type" not in empty.headers


def test_scripted_hangup_and_legacy_resources(fault_server: FaultServer) -> None:
    fault_server.faults.script.append(Scripted(hangup=True, match="initialize"))
    with pytest.raises(requests.ConnectionError):
        _post(fault_server.url, _init_body())
    init = _post(fault_server.url, _init_body())
    assert init.json()["result"]["capabilities"]["resources"] == {"subscribe": True}
    sid = {"Mcp-Session-Id": init.headers["Mcp-Session-Id"]}
    sub = _post(fault_server.url, {"jsonrpc": "2.0", "id": 2, "method": "resources/subscribe",
                                   "params": {"uri": "memo://hello"}}, sid)
    assert sub.json()["result"] == {}
    read = _post(fault_server.url, {"jsonrpc": "2.0", "id": 3, "method": "resources/read",
                                    "params": {"uri": "memo://hello"}}, sid)
    assert read.json()["result"]["contents"][0]["text"] == "hello"


@pytest.mark.parametrize("content_type", ["application/json", "text/event-stream"])
def test_oversized_body(fault_server: FaultServer, content_type: str) -> None:
    size = 33 * 1024 * 1024
    fault_server.faults.script.append(Scripted(oversize=size, content_type=content_type))
    resp = _post(fault_server.url, _init_body(7))
    assert len(resp.content) > size
    if content_type == "application/json":
        assert resp.json()["id"] == 7
    else:
        event = next(iter_sse(resp.content))
        assert len(event["data"]) > size


def test_oversized_body_tolerates_an_early_close(fault_server: FaultServer) -> None:
    fault_server.faults.script.append(Scripted(oversize=64 * 1024 * 1024))
    with _post(fault_server.url, _init_body(), stream=True) as resp:
        assert len(next(resp.iter_content(chunk_size=65536))) > 0
    assert _post(fault_server.url, _init_body()).status_code == 200


def test_headers_delayed_and_disconnect_seen(fault_server: FaultServer) -> None:
    fault_server.faults.header_delay = 5.0
    fault_server.faults.delay_method = "tools/call"
    assert _post(fault_server.url, _init_body()).status_code == 200  # not delayed
    host, port = fault_server.origin.removeprefix("http://").split(":")
    body = json.dumps(_call("slow", {"seconds": 0})).encode()
    sock = socket.create_connection((host, int(port)), timeout=5)
    sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    fault_server.wait_for_requests(lambda r: r.rpc_method == "tools/call")
    sock.settimeout(0.3)
    with pytest.raises(TimeoutError):
        sock.recv(1)  # no status line yet
    start = time.monotonic()
    sock.close()
    while not fault_server.disconnected and time.monotonic() - start < 3:
        time.sleep(0.01)
    assert [r.rpc_method for r in fault_server.disconnected] == ["tools/call"]


def test_scripted_delay_applies_to_matching_method(fault_server: FaultServer) -> None:
    fault_server.faults.script.append(Scripted(204, delay=0.2, match="tools/list"))
    _, headers = _initialize(fault_server.url)  # not matched, so not consumed
    with pytest.raises(requests.exceptions.ReadTimeout):
        _post(fault_server.url, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers,
              timeout=0.05)
    assert not fault_server.faults.script


# ---- the fault server: modern ----------------------------------------------------------------


@pytest.mark.parametrize("reply", ["json", "sse"])
def test_modern_discover_and_call(fault_server: FaultServer,
                                  reply: Literal["json", "sse"]) -> None:
    fault_server.faults.reply = reply
    body, headers = _modern("server/discover")
    discover = _post(fault_server.url, body, headers).json()["result"]
    assert discover["supportedVersions"] == [MODERN_VERSION]
    body, headers = _modern("tools/call", {"name": "slow", "arguments": {"seconds": 0.05,
                                                                         "steps": 2}},
                            progressToken="p")
    resp = _post(fault_server.url, body, headers)
    msgs = _messages(resp)
    assert msgs[-1]["result"]["resultType"] == "complete"
    assert len(msgs) == (3 if reply == "sse" else 1)
    assert fault_server.sessions == []


@pytest.mark.parametrize(("mutate", "status", "code"), [
    (lambda b, h: b["params"]["_meta"].update(
        {"io.modelcontextprotocol/protocolVersion": "2099-01-01"}), 400, -32022),
    (lambda b, h: h.update({"Mcp-Method": "tools/list"}), 400, -32020),
    (lambda b, h: h.update({"Mcp-Param-Region": "us"}), 400, -32020),
    (lambda b, h: b["params"]["_meta"].pop("io.modelcontextprotocol/clientCapabilities"),
     400, -32602),
    (lambda b, h: b.update(method="nope/nope") or h.update({"Mcp-Method": "nope/nope"}),
     404, -32601),
])
def test_modern_errors(fault_server: FaultServer,
                       mutate: Callable[[dict[str, Any], dict[str, str]], None],
                       status: int, code: int) -> None:
    body, headers = _modern("tools/call", {"name": "lookup",
                                           "arguments": {"region": "eu", "query": "q"}})
    headers["Mcp-Param-Region"] = "eu"
    assert _post(fault_server.url, body, headers).json()["result"]["content"][0]["text"] == \
        "eu:q"
    mutate(body, headers)
    resp = _post(fault_server.url, body, headers)
    assert resp.status_code == status
    assert resp.json()["error"]["code"] == code and resp.json()["id"] == 1
    if code == -32022:
        assert resp.json()["error"]["data"] == {"supported": [MODERN_VERSION],
                                                "requested": "2099-01-01"}


def test_modern_base64_param_and_missing_capability(fault_server: FaultServer) -> None:
    body, headers = _modern("tools/call", {"name": "lookup", "arguments": {"region": " é"}})
    headers["Mcp-Param-Region"] = "=?base64?" + base64.b64encode(" é".encode()).decode() + "?="
    assert _post(fault_server.url, body, headers).status_code == 200
    fault_server.faults.required_capability = "elicitation"
    resp = _post(fault_server.url, body, headers)
    assert resp.status_code == 400 and resp.json()["error"]["code"] == -32021
    assert resp.json()["error"]["data"]["requiredCapabilities"] == {"elicitation": {}}


def test_modern_only_server(fault_server: FaultServer) -> None:
    fault_server.faults.era = "modern"
    init = _post(fault_server.url, _init_body())
    assert init.status_code == 400 and init.json()["error"]["code"] == -32022
    assert requests.get(fault_server.url, timeout=5).status_code == 405
    assert requests.delete(fault_server.url, timeout=5).status_code == 405
    note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
    assert _post(fault_server.url, note, {"MCP-Protocol-Version": MODERN_VERSION}).status_code \
        == 202


def test_scripted_modern_errors_and_mock_discover(fault_server: FaultServer) -> None:
    fault_server.faults.script.extend([
        rpc_error(400, -32022, "unsupported", {"supported": ["2026-07-28"]}),
        rpc_error(404, -32601, "no such method", with_id=False),
        result({}, match="server/discover"),
    ])
    body, headers = _modern("server/discover", rid=11)
    first = _post(fault_server.url, body, headers)
    assert first.status_code == 400 and first.json()["id"] == 11
    second = _post(fault_server.url, body, headers)
    assert second.status_code == 404 and second.json()["id"] is None
    assert _post(fault_server.url, body, headers).json() == {"jsonrpc": "2.0", "id": 11,
                                                             "result": {}}


def test_modern_stream_close_cancels(fault_server: FaultServer) -> None:
    fault_server.faults.reply = "sse"
    body, headers = _modern("tools/call", {"name": "slow", "arguments": {"seconds": 3,
                                                                         "steps": 30}},
                            rid=42, progressToken="p")
    with _post(fault_server.url, body, headers, stream=True) as resp:
        assert json.loads(next(_live_events(resp))["data"])["method"] == \
            "notifications/progress"
    deadline = time.monotonic() + 3
    while not fault_server.cancelled and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fault_server.cancelled == [42]


def test_modern_drop_before_response(fault_server: FaultServer) -> None:
    fault_server.faults.drop = "before_id"
    body, headers = _modern("tools/call", {"name": "echo", "arguments": {"text": "x"}})
    with pytest.raises(requests.exceptions.ChunkedEncodingError):
        list(_live_events(_post(fault_server.url, body, headers, stream=True)))
    assert _post(fault_server.url, body, headers).json()["result"]["content"][0]["text"] == "x"


# ---- the fault server: 2024-11-05 HTTP+SSE -------------------------------------------------


def test_http_sse_2024(fault_server: FaultServer) -> None:
    fault_server.faults.era = "sse2024"
    assert _post(fault_server.url, _init_body()).status_code == 405
    with requests.get(fault_server.url, headers={"Accept": "text/event-stream"}, stream=True,
                      timeout=5) as stream:
        events = _live_events(stream)
        endpoint = next(events)
        assert endpoint["event"] == "endpoint"
        assert endpoint["data"].startswith("/messages?session_id=")
        post = _post(fault_server.origin + endpoint["data"], _init_body(5))
        assert post.status_code == 202 and post.content == b""
        message = next(events)
        assert message["event"] == "message"
        reply = json.loads(message["data"])
        assert reply["id"] == 5 and reply["result"]["protocolVersion"] == LEGACY
        assert "Mcp-Session-Id" not in post.headers


def test_http_sse_2024_endpoint_override(fault_server: FaultServer) -> None:
    fault_server.faults.era = "sse2024"
    fault_server.faults.endpoint = "http://elsewhere.invalid/messages"
    with requests.get(fault_server.url, stream=True, timeout=5) as stream:
        assert next(_live_events(stream))["data"] == "http://elsewhere.invalid/messages"
