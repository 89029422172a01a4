"""The gateway's HTTP front: our client (both eras) and the official SDK's client as hosts,
our demo server and the feature server (stdio) and the official SDK's server (HTTP) as
upstreams; one gateway core per legacy host session, the process bound, session end and
expiry, and 2026-07-28 hosts sharing upstreams without getting each other's answers."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from helpers import require_peer
from server.helpers import MODERN, initialize_params, modern_meta

import mcpsync
from gateway.front_http_helpers import (
    DEMO,
    FEATURES,
    Command,
    Front,
    post,
    wait_for,
    write_config,
)
from mcpsync.gateway._front._caller import Caller, caller_of

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def demo_front(tmp_path: Path) -> Any:
    with Front(write_config(tmp_path, {"demo": DEMO})) as front:
        yield front


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_our_client_in_both_eras_through_the_front(demo_front: Front, era: str) -> None:
    logs: list[str] = []
    with mcpsync.connect(demo_front.url, era=era,
                         on_log=lambda level, logger, data: logs.append(str(data))) as client:
        assert client.era == era
        assert {t.name for t in client.list_tools()} == {"echo", "add", "slow", "fail"}
        client.set_log_level("info")
        steps: list[float] = []
        done = client.call_tool("slow", {"seconds": 0.3, "steps": 3},
                                progress=lambda d, total, message: steps.append(d))
        assert done.text == "done: 3 steps in 0.3 s"
        assert steps == [1, 2, 3]    # each on the call's own event stream
        assert logs == [f"slow: step {i}/3" for i in (1, 2, 3)]
        assert client.call_tool("add", {"a": 2, "b": 3}).structured == {"sum": 5}
        assert client.call_tool("fail").is_error


def test_a_server_to_client_request_goes_on_the_calls_stream(tmp_path: Path) -> None:
    asked: list[str] = []

    def elicit(request: Any) -> dict[str, Any]:
        asked.append(request.message)
        return {"action": "accept", "content": {"name": "Ada"}}

    with Front(write_config(tmp_path, {"features": FEATURES})) as front, \
            mcpsync.connect(front.url, era="legacy", elicitation=elicit) as client:
        assert client.call_tool("ask_name").text == "hello Ada"
    assert asked == ["Your name?"]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_the_official_client_through_the_front(demo_front: Front, mode: str) -> None:
    anyio = require_peer("anyio")
    require_peer("mcp")
    from mcp import Client

    async def scenario() -> None:
        async with Client(demo_front.url, mode=mode, read_timeout_seconds=20) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert names == {"echo", "add", "slow", "fail"}
            for a in range(3):
                added = await client.call_tool("add", {"a": a, "b": 1})
                assert added.structured_content == {"sum": a + 1}
            echoed = await client.call_tool("echo", {"text": "über"})
            assert echoed.content[0].text == "über"

    anyio.run(scenario)


@pytest.mark.parametrize("era", ["legacy", "modern"])
@pytest.mark.parametrize("official_http_server", ["sse-stateful"], indirect=True)
def test_an_http_upstream_behind_the_front(tmp_path: Path, official_http_server: Any,
                                           era: str) -> None:
    config = write_config(tmp_path, {"remote": {"url": official_http_server.url}})
    with Front(config) as front, mcpsync.connect(front.url, era=era) as client:
        assert {"add", "echo"} <= {t.name for t in client.list_tools()}
        assert client.call_tool("add", {"a": 1, "b": 2}).structured == {"sum": 3.0}
        assert client.call_tool("echo", {"text": "via two hops"}).text == "via two hops"


def test_two_legacy_sessions_get_their_own_processes_and_delete_stops_them(
        demo_front: Front) -> None:
    assert demo_front.app.session_processes() == []
    with mcpsync.connect(demo_front.url, era="legacy") as one:
        one.list_tools()
        with mcpsync.connect(demo_front.url, era="legacy") as two:
            two.list_tools()
            sessions = demo_front.app.session_processes()
            assert len(sessions) == 2 and all(len(pids) == 1 for pids in sessions)
            (a,), (b,) = sessions
            assert a != b
            assert demo_front.app.upstream_processes == 2
        # The client's close sent DELETE: that session's process is gone, the other's is not.
        assert wait_for(lambda: len(demo_front.app.session_processes()) == 1)
        (left,), = demo_front.app.session_processes()
        assert left in (a, b)
        gone = b if left == a else a
        assert wait_for(lambda: not Path(f"/proc/{gone}").exists()
                        or "Z" in Path(f"/proc/{gone}/stat").read_text().split()[2])
        assert one.call_tool("echo", {"text": "still here"}).text == "still here"
    assert wait_for(lambda: demo_front.app.upstream_processes == 0)


def test_the_process_bound_refuses_a_session_readably_and_frees_on_end(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"demo": DEMO})
    with Front(config, max_upstream_processes=1) as front:
        with mcpsync.connect(front.url, era="legacy") as first:
            first.list_tools()
            status, _, reply = post(front.port, {"jsonrpc": "2.0", "id": 1,
                                                 "method": "initialize",
                                                 "params": initialize_params()})
            assert status == 400
            text = reply["error"]["message"]
            assert "max_upstream_processes" in text and "bound of 1" in text
            assert "Mcp-Session-Id" not in text
        assert wait_for(lambda: front.app.upstream_processes == 0)
        with mcpsync.connect(front.url, era="legacy") as again:   # room again
            assert again.call_tool("echo", {"text": "ok"}).text == "ok"


def test_an_idle_session_expires_and_its_process_stops(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"demo": DEMO})
    # 2 s idle: time enough, even on a loaded machine, to see the session's process
    # counted between the initialize answer and the expiry (0.5 s was once too short under load).
    with Front(config, session_idle_timeout=2.0) as front:
        status, headers, reply = post(front.port, {"jsonrpc": "2.0", "id": 1,
                                                   "method": "initialize",
                                                   "params": initialize_params()})
        assert status == 200 and reply["result"]["serverInfo"]["name"] == "mcpsync-demo"
        sid = headers["Mcp-Session-Id"]
        assert front.app.upstream_processes == 1
        assert wait_for(lambda: front.app.upstream_processes == 0, timeout=15)
        status, _, reply = post(front.port, {"jsonrpc": "2.0", "id": 2, "method": "ping"},
                                {"Mcp-Session-Id": sid})
        assert status == 404


def test_modern_hosts_share_upstreams_and_never_get_each_others_answers(
        demo_front: Front) -> None:
    """Forty 2026-07-28 POSTs at once, all with id 1 and progress token "p": each gets its
    own text back, under its own id and token."""
    def call(n: int) -> tuple[int, Any]:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "echo", "arguments": {"text": f"host {n}"},
            "_meta": modern_meta(progressToken="p")}}
        status, _, reply = post(demo_front.port, body, {
            "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": "echo"})
        return status, reply

    with ThreadPoolExecutor(max_workers=20, thread_name_prefix="test-modern") as pool:
        results = list(pool.map(call, range(40)))
    for n, (status, reply) in enumerate(results):
        assert status == 200, reply
        assert reply["id"] == 1
        assert reply["result"]["content"][0]["text"] == f"host {n}"
    assert demo_front.app.session_processes() == []   # no legacy session: one shared core
    assert demo_front.app.upstream_processes == 1


def test_the_command_serves_http_and_sigterm_stops_the_upstreams(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"demo": DEMO})
    with Command(config, "--max-upstream-processes", "2", log=tmp_path / "gw.log") as served:
        with mcpsync.connect(served.url, era="legacy") as a, \
                mcpsync.connect(served.url, era="legacy") as b:
            assert a.call_tool("echo", {"text": "a"}).text == "a"
            assert b.call_tool("echo", {"text": "b"}).text == "b"
            children = _children(served.proc.pid)
            assert len(children) == 2
            with pytest.raises(mcpsync.MCPError, match="max_upstream_processes"):
                mcpsync.connect(served.url, era="legacy")
        assert wait_for(lambda: _children(served.proc.pid) == [])
        with mcpsync.connect(served.url, era="modern") as modern:
            assert modern.call_tool("add", {"a": 1, "b": 1}).structured == {"sum": 2}
        assert served.close() == 0
    assert all(not Path(f"/proc/{pid}").exists() for pid in children)


def test_the_command_refuses_a_bad_address(tmp_path: Path) -> None:
    import subprocess
    import sys

    config = write_config(tmp_path, {"demo": DEMO})
    done = subprocess.run([sys.executable, "-m", "mcpsync", "gateway", "--config", config,
                           "--http", "localhost"], capture_output=True, text=True, timeout=30)
    assert done.returncode != 0
    assert "HOST:PORT" in done.stderr and "'localhost'" in done.stderr


def test_the_budget_key_of_each_kind_of_host() -> None:
    assert caller_of({"HTTP_MCP_SESSION_ID": "abc", "REMOTE_ADDR": "10.0.0.1"},
                     legacy=True) == Caller("abc", "session")
    # A 2026-07-28 request: the session header (if any) is not its key; no token: address.
    assert caller_of({"HTTP_MCP_SESSION_ID": "abc", "REMOTE_ADDR": "10.0.0.1"},
                     legacy=False) == Caller("10.0.0.1", "address")


def test_the_session_core_knows_its_session_as_caller(demo_front: Front) -> None:
    status, headers, _ = post(demo_front.port, {"jsonrpc": "2.0", "id": 1,
                                                "method": "initialize",
                                                "params": initialize_params()})
    assert status == 200
    sid = headers["Mcp-Session-Id"]
    status, _, reply = post(demo_front.port, {"jsonrpc": "2.0", "id": 2, "method": "ping"},
                            {"Mcp-Session-Id": sid})
    assert status == 200 and reply == {"jsonrpc": "2.0", "id": 2, "result": {}}
    relays = list(demo_front.app._live)
    assert len(relays) == 1 and relays[0].core is not None
    assert relays[0].core.caller == Caller(sid, "session")


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(p) for p in (task / "children").read_text().split()]
    return out


def test_json_of_an_unknown_session_is_404(demo_front: Front) -> None:
    status, _, reply = post(demo_front.port, {"jsonrpc": "2.0", "id": 2, "method": "ping"},
                            {"Mcp-Session-Id": "nope"})
    assert status == 404 and "unknown or ended session" in json.dumps(reply)


def test_with_a_token_verifier_a_modern_hosts_key_is_its_principal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Behind OAuth (the server side's ProtectedApp), a request without a token is 401, and
    the caller the core is handed for a 2026-07-28 request is the token's subject; for a
    legacy one it is still the session."""
    from mcpsync.gateway import Gateway
    from mcpsync.server.http import AccessToken

    seen: list[Caller] = []
    real_feed = Gateway.feed

    def feed(self: Gateway, frame: bytes, caller: Caller | None = None) -> None:
        if caller is not None and b'"tools/call"' in frame:
            seen.append(caller)
        real_feed(self, frame, caller)

    monkeypatch.setattr(Gateway, "feed", feed)
    where: list[str] = []

    def verify(token: str) -> AccessToken | None:
        if token != "alice-token":
            return None
        return AccessToken(client_id="host-app", subject="alice", audience=(where[0],))

    with Front(write_config(tmp_path, {"demo": DEMO}), token_verifier=verify) as front:
        where.append(front.url)
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "echo", "arguments": {"text": "hi"}, "_meta": modern_meta()}}
        headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call",
                   "Mcp-Name": "echo"}
        status, _, _ = post(front.port, body, headers)
        assert status == 401
        status, _, reply = post(front.port, body,
                                {**headers, "Authorization": "Bearer alice-token"})
        assert status == 200 and reply["result"]["content"][0]["text"] == "hi"
        with mcpsync.connect(front.url, era="legacy", auth="alice-token") as client:
            assert client.call_tool("echo", {"text": "legacy"}).text == "legacy"
    assert seen[0] == Caller("alice", "principal")
    assert seen[1].kind == "session" and len(seen[1].key) > 20


def _events(response: Any) -> Any:
    """``(id, data)`` of each server-sent event of ``response``, as they come."""
    event_id, data = None, []
    while True:
        line = response.readline()
        if not line:
            return
        text = line.decode().rstrip("\r\n")
        if not text:
            if data:
                yield event_id, json.loads("\n".join(data))
            event_id, data = None, []
        elif text.startswith("id:"):
            event_id = text[3:].strip()
        elif text.startswith("data:") and text[5:].strip():
            data.append(text[5:].strip())


def test_a_legacy_host_resumes_a_call_stream_with_last_event_id(demo_front: Front) -> None:
    """The host drops the connection after the first progress event; a GET with that
    event's id gets the rest of the call's events and its answer."""
    import http.client

    status, headers, _ = post(demo_front.port, {"jsonrpc": "2.0", "id": 1,
                                                "method": "initialize",
                                                "params": initialize_params("2025-06-18")})
    assert status == 200
    sid = headers["Mcp-Session-Id"]
    session = {"Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-06-18",
               "Content-Type": "application/json",
               "Accept": "application/json, text/event-stream"}
    post(demo_front.port, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
    conn = http.client.HTTPConnection("127.0.0.1", demo_front.port, timeout=30)
    conn.request("POST", "/mcp", json.dumps({
        "jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
            "name": "slow", "arguments": {"seconds": 1.2, "steps": 4},
            "_meta": {"progressToken": "tok"}}}), session)
    response = conn.getresponse()
    assert response.getheader("Content-Type") == "text/event-stream"
    first_id, first = next(_events(response))
    assert first["params"]["progress"] == 1 and first_id
    conn.close()   # the host loses the connection mid-call

    conn = http.client.HTTPConnection("127.0.0.1", demo_front.port, timeout=30)
    conn.request("GET", "/mcp", headers={**session, "Accept": "text/event-stream",
                                         "Last-Event-ID": first_id})
    resumed = conn.getresponse()
    assert resumed.status == 200
    rest = [data for _, data in _events(resumed)]
    conn.close()
    progress = [m["params"]["progress"] for m in rest
                if m.get("method") == "notifications/progress"]
    assert progress == [2, 3, 4]
    assert rest[-1] == {"jsonrpc": "2.0", "id": 7, "result": {
        "content": [{"type": "text", "text": "done: 4 steps in 1.2 s"}]}}


def test_a_2025_03_26_batch_gets_one_reply_with_every_answer(demo_front: Front) -> None:
    import http.client

    status, headers, _ = post(demo_front.port, {"jsonrpc": "2.0", "id": 1,
                                                "method": "initialize",
                                                "params": initialize_params("2025-03-26")})
    assert status == 200
    session = {"Mcp-Session-Id": headers["Mcp-Session-Id"],
               "MCP-Protocol-Version": "2025-03-26", "Content-Type": "application/json",
               "Accept": "application/json, text/event-stream"}
    batch = [{"jsonrpc": "2.0", "method": "notifications/initialized"},
             {"jsonrpc": "2.0", "id": "a", "method": "tools/call",
              "params": {"name": "echo", "arguments": {"text": "first"}}},
             {"jsonrpc": "2.0", "id": "b", "method": "tools/call",
              "params": {"name": "add", "arguments": {"a": 1, "b": 2}}}]
    conn = http.client.HTTPConnection("127.0.0.1", demo_front.port, timeout=30)
    try:
        conn.request("POST", "/mcp", json.dumps(batch), session)
        response = conn.getresponse()
        assert response.status == 200
        replies = json.loads(response.read())
    finally:
        conn.close()
    assert [r["id"] for r in replies] == ["a", "b"]
    assert replies[0]["result"]["content"][0]["text"] == "first"
    # 2025-03-26 has no structured content: the sum comes back as text
    assert "structuredContent" not in replies[1]["result"]
    assert json.loads(replies[1]["result"]["content"][0]["text"]) == {"sum": 3}


def test_the_command_logs_every_sessions_traffic_with_log(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"demo": DEMO})
    log = tmp_path / "traffic.log"
    with Command(config, "--log", str(log), log=tmp_path / "gw.log") as served:
        for era, text in (("legacy", "from a session"), ("modern", "stateless")):
            with mcpsync.connect(served.url, era=era) as client:
                assert client.call_tool("echo", {"text": text}).text == text
        assert served.close() == 0
    records = [json.loads(line) for line in log.read_text().splitlines()]
    calls = [r for r in records if r.get("dir") == "gateway->upstream"
             and r.get("method") == "tools/call"]
    assert len(calls) == 2 and {r["upstream"] for r in calls} == {"demo"}
    assert oct(log.stat().st_mode & 0o777) == "0o600"
