"""``Server.serve_http()``: MCP Streamable HTTP in both eras, over real loopback sockets.

Our own client (``mcpsync.connect(url)``) drives ``tests/peers/feature_server.py`` served by
``serve_http`` on a free port, through the same assertions as the stdio and in-process runs
in ``test_server_features``; raw ``http.client`` exchanges check statuses and header rules
that a well-behaved client never breaks; the official SDK's HTTP client checks interop.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import require_peer
from peers import feature_server

import mcpsync
from mcpsync.server import Context, Server

from . import test_server_features as features
from .helpers import MODERN, initialize_params, modern_meta


class Served:
    """A server on ``serve_http`` in a thread: its URL, and a clean stop."""

    def __init__(self, server: Server, **options: Any) -> None:
        self.server = server
        self._stop = threading.Event()
        self._ready = threading.Event()
        self.url = ""
        self._thread = threading.Thread(target=server.serve_http, name="test-serve-http",
                                        kwargs={"host": "127.0.0.1", "port": 0,
                                                "stop": self._stop, "ready": self._on_ready,
                                                **options}, daemon=True)
        self._thread.start()
        assert self._ready.wait(10), "serve_http did not start"
        self.port = int(self.url.split(":")[2].split("/")[0])

    def _on_ready(self, url: str) -> None:
        self.url = url
        self._ready.set()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        assert not self._thread.is_alive(), "serve_http did not return after stop"

    def post(self, body: Any, headers: dict[str, str] | None = None,
             host: str | None = None) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            all_headers = {"Content-Type": "application/json",
                           "Accept": "application/json, text/event-stream", **(headers or {})}
            if host is not None:
                conn.putrequest("POST", "/mcp", skip_host=True)
                conn.putheader("Host", host)
                data = json.dumps(body).encode()
                for name, value in {**all_headers, "Content-Length": str(len(data))}.items():
                    conn.putheader(name, value)
                conn.endheaders(data)
            else:
                conn.request("POST", "/mcp", json.dumps(body), all_headers)
            response = conn.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            conn.close()

    def request(self, method: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request(method, "/mcp", headers=headers or {})
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()


@pytest.fixture
def served() -> Iterator[Served]:
    s = Served(feature_server.build())
    yield s
    s.close()


@pytest.fixture(params=features.ERAS)
def client(request: pytest.FixtureRequest, served: Served) -> Iterator[mcpsync.Client]:
    with mcpsync.connect(served.url, era=request.param, elicitation=features.elicit,
                         sampling=features.sample, roots=["file:///work", "file:///data"],
                         timeout=20) as c:
        yield c


# -- every feature, both eras, our client ---------------------------------------------------

def test_tools_structured_and_refusals(client: mcpsync.Client) -> None:
    features.test_tools_list_and_results(client)
    features.test_a_refusal_is_a_json_rpc_error_with_the_handlers_code(client)


def test_resources_prompts_and_completion(client: mcpsync.Client) -> None:
    features.test_resources_read_text_blob_and_templates(client)
    features.test_a_missing_resource_is_not_found_in_each_eras_code(
        client, "modern" if client.era == "modern" else "legacy")
    features.test_prompts_with_arguments_resources_and_images(client)
    features.test_completion_of_prompt_arguments_and_template_variables(client)


def test_asking_the_client(client: mcpsync.Client) -> None:
    # Legacy: each ask is a request on the POST's event stream, answered by a second POST.
    # 2026-07-28: input_required rounds, each a new POST.
    features.test_elicitation_sampling_and_roots_through_one_api(client)
    features.test_several_asks_at_once(client)
    features.test_a_resource_handler_can_ask_for_input(client)


def test_progress_arrives_on_the_event_stream(client: mcpsync.Client) -> None:
    seen: list[tuple[float, float | None, str | None]] = []
    result = client.call_tool("count_up", {"steps": 3},
                              progress=lambda p, t, m: seen.append((p, t, m)))
    assert result.content[0].text == "counted to 3"
    assert seen == [(1, 3, "step 1/3"), (2, 3, "step 2/3"), (3, 3, "step 3/3")]


@pytest.mark.parametrize("era", features.ERAS)
def test_logging_arrives_on_the_event_stream(served: Served, era: str) -> None:
    logs: list[tuple[str, Any]] = []
    with mcpsync.connect(served.url, era=era, timeout=20,
                         on_log=lambda level, logger, data: logs.append((level, data))) as c:
        c.set_log_level("info")
        assert c.call_tool("log_some").content[0].text == "logged"
    assert logs == [("info", "a info message"), ("error", "a error message")]


def test_changes_are_announced(client: mcpsync.Client) -> None:
    # Legacy: on the session's GET stream. 2026-07-28: on a subscriptions/listen stream.
    features.test_tools_added_and_removed_live_are_announced(client)
    features.test_resource_subscriptions_get_updates(client)


# -- statuses and headers, raw ---------------------------------------------------------------

def _modern_call(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 7, "method": method,
            "params": {**(params or {}), "_meta": modern_meta()}}


def _modern_headers(method: str, name: str | None = None, **extra: str) -> dict[str, str]:
    headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method, **extra}
    if name is not None:
        headers["Mcp-Name"] = name
    return headers


def test_modern_statuses(served: Served) -> None:
    status, headers, body = served.post(_modern_call("tools/list"), _modern_headers("tools/list"))
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert "Mcp-Session-Id" not in headers
    assert {t["name"] for t in json.loads(body)["result"]["tools"]} >= {"greet", "add"}
    status, _, body = served.post(_modern_call("no/such"), _modern_headers("no/such"))
    assert status == 404 and json.loads(body)["error"]["code"] == -32601
    bad_version = {"jsonrpc": "2.0", "id": 1, "method": "tools/list",
                   "params": {"_meta": modern_meta("2099-01-01")}}
    status, _, body = served.post(bad_version, _modern_headers("tools/list",
                                                               **{"MCP-Protocol-Version":
                                                                  "2099-01-01"}))
    assert status == 400 and json.loads(body)["error"]["code"] == -32022
    no_caps = _modern_call("tools/list")
    del no_caps["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]
    status, _, body = served.post(no_caps, _modern_headers("tools/list"))
    assert status == 400 and json.loads(body)["error"]["code"] == -32602
    call = _modern_call("tools/call", {"name": "ask_name", "arguments": {}})
    status, _, body = served.post(call, _modern_headers("tools/call", "ask_name"))
    assert status == 400 and json.loads(body)["error"]["code"] == -32021
    for method in ("GET", "DELETE", "PUT"):
        assert served.request(method)[0] == 405
    status, _, _ = served.post({"jsonrpc": "2.0", "method": "notifications/x",
                                "params": {"_meta": modern_meta()}},
                               _modern_headers("notifications/x"))
    assert status == 202


@pytest.mark.parametrize(("headers", "what"), [
    ({"Mcp-Method": "tools/call", "Mcp-Name": "greet"}, "MCP-Protocol-Version"),
    (_modern_headers("tools/call", "greet", **{"MCP-Protocol-Version": "2025-11-25"}),
     "differs"),
    (_modern_headers("tools/list", "greet"), "Mcp-Method"),
    (_modern_headers("tools/call"), "Mcp-Name"),
    (_modern_headers("tools/call", "add"), "Mcp-Name"),
    (_modern_headers("tools/call", "=?base64?!!?="), "base64"),
])
def test_header_mismatches_are_400_header_mismatch(served: Served, headers: dict[str, str],
                                                    what: str) -> None:
    call = _modern_call("tools/call", {"name": "greet", "arguments": {"name": "x"}})
    status, _, body = served.post(call, headers)
    assert status == 400
    reply = json.loads(body)
    assert reply["id"] == 7 and reply["error"]["code"] == -32020
    assert what in reply["error"]["message"]


def test_mcp_param_headers_must_repeat_marked_arguments() -> None:
    server = Server("regions", "1")
    server.register_tool({"name": "where", "inputSchema": {
        "type": "object", "properties": {"region": {"type": "string",
                                                    "x-mcp-header": "Region"}}}},
        lambda arguments, ctx: f"in {arguments.get('region')}")
    s = Served(server)
    try:
        def call(region: str | None, **headers: str) -> tuple[int, dict[str, Any]]:
            arguments = {} if region is None else {"region": region}
            status, _, body = s.post(_modern_call("tools/call", {"name": "where",
                                                                 "arguments": arguments}),
                                     _modern_headers("tools/call", "where", **headers))
            return status, json.loads(body)

        status, reply = call("eu", **{"Mcp-Param-Region": "eu"})
        assert status == 200 and reply["result"]["content"][0]["text"] == "in eu"
        encoded = "=?base64?" + base64.b64encode("Zürich".encode()).decode() + "?="
        assert call("Zürich", **{"Mcp-Param-Region": encoded})[0] == 200
        assert call(None)[0] == 200    # no value, no header
        for headers in ({}, {"Mcp-Param-Region": "us"}, {"Mcp-Param-Region": "=?base64?ZXU?="},
                        {"Mcp-Param-Region": "=?base64?e*u=?="}):
            status, reply = call("eu", **headers)
            assert status == 400 and reply["error"]["code"] == -32020, headers
            assert "Mcp-Param-Region" in reply["error"]["message"]
    finally:
        s.close()


def test_mcp_name_may_be_base64_encoded(served: Served) -> None:
    read = _modern_call("resources/read", {"uri": "memo://notes/café"})
    encoded = "=?base64?" + base64.b64encode("memo://notes/café".encode()).decode() + "?="
    status, _, body = served.post(read, _modern_headers("resources/read", encoded))
    assert status == 200, body
    assert "café" in json.loads(body)["result"]["contents"][0]["text"]


def test_legacy_sessions(served: Served) -> None:
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": initialize_params()}
    status, headers, body = served.post(init)
    assert status == 200 and json.loads(body)["result"]["protocolVersion"] == "2025-11-25"
    sid = headers["Mcp-Session-Id"]
    assert len(sid) >= 32 and all(0x21 <= ord(c) <= 0x7E for c in sid)
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    assert served.post(ping, {"Mcp-Session-Id": sid})[0] == 200
    assert served.post(ping, {"Mcp-Session-Id": "nope"})[0] == 404
    assert served.post({"jsonrpc": "2.0", "method": "notifications/initialized"})[0] == 400
    assert served.post(ping, {"Mcp-Session-Id": sid,
                              "MCP-Protocol-Version": "1999-01-01"})[0] == 400
    assert served.post({"jsonrpc": "2.0", "method": "notifications/initialized"},
                       {"Mcp-Session-Id": sid})[0] == 202
    assert served.request("DELETE", {"Mcp-Session-Id": sid})[0] == 204
    assert served.post(ping, {"Mcp-Session-Id": sid})[0] == 404
    assert served.request("DELETE", {"Mcp-Session-Id": sid})[0] == 404


def test_sessions_are_bounded_and_a_closed_app_answers_503() -> None:
    s = Served(feature_server.build(), max_sessions=1)
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": initialize_params()}
    try:
        status, headers, _ = s.post(init)
        assert status == 200
        status, busy, body = s.post(init)
        assert status == 503 and busy.get("Retry-After") == "1" and b"DELETE" in body
        s.request("DELETE", {"Mcp-Session-Id": headers["Mcp-Session-Id"]})
        assert s.post(init)[0] == 200     # a slot again
    finally:
        s.close()
    app = Server("x", "1").wsgi_app()
    app.close()
    replies: list[str] = []
    body_out = app({"PATH_INFO": "/mcp", "HTTP_HOST": "localhost", "REQUEST_METHOD": "POST"},
                   lambda status, headers: replies.append(status))
    assert replies == ["503 Service Unavailable"] and b"shutting down" in b"".join(body_out)


@pytest.mark.parametrize("host", ["evil.example", "evil.example:80", "localhost.evil.example",
                                  "[::1]x", "[::1]:80x"])
def test_a_foreign_host_is_refused_403(served: Served, host: str) -> None:
    status, _, body = served.post(_modern_call("tools/list"), _modern_headers("tools/list"),
                                  host=host)
    assert status == 403 and b"allowed_hosts=" in body


def test_a_foreign_origin_is_refused_403_and_a_local_one_served(served: Served) -> None:
    status, _, body = served.post(_modern_call("tools/list"), _modern_headers(
        "tools/list", Origin="https://evil.example"))
    assert status == 403 and b"allowed_hosts=" in body
    status, _, _ = served.post(_modern_call("tools/list"), _modern_headers(
        "tools/list", Origin=f"http://localhost:{served.port}"))
    assert status == 200


def test_allowed_hosts_widen_the_check() -> None:
    s = Served(feature_server.build(), allowed_hosts=["mcp.example.com"])
    try:
        status, _, _ = s.post(_modern_call("tools/list"), _modern_headers("tools/list"),
                              host="mcp.example.com")
        assert status == 200
        status, _, _ = s.post(_modern_call("tools/list"), _modern_headers("tools/list"))
        assert status == 403   # the list replaces the loopback default
    finally:
        s.close()


# -- disconnection ---------------------------------------------------------------------------

def test_closing_a_modern_event_stream_cancels_the_request() -> None:
    server = Server("slow", "1")
    started = threading.Event()
    cancelled = threading.Event()

    @server.tool()
    def tick(ctx: Context) -> str:
        started.set()
        for i in range(200):
            ctx.progress(i)
            if ctx.cancelled.wait(0.05):
                cancelled.set()
                return "cancelled"
        return "done"

    s = Served(server)
    try:
        sock = socket.create_connection(("127.0.0.1", s.port), timeout=10)
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "tick", "arguments": {}, "_meta": {**modern_meta(),
                                                        "progressToken": "p"}}}).encode()
        head = (f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{s.port}\r\nContent-Type: "
                "application/json\r\nAccept: application/json, text/event-stream\r\n"
                f"MCP-Protocol-Version: {MODERN}\r\nMcp-Method: tools/call\r\n"
                f"Mcp-Name: tick\r\nContent-Length: {len(body)}\r\n\r\n").encode()
        sock.sendall(head + body)
        first = sock.recv(65536)
        assert b"text/event-stream" in first
        assert started.wait(5)
        sock.close()
        assert cancelled.wait(5), "closing the stream did not cancel the request"
    finally:
        s.close()


def test_a_listen_stays_open_until_the_client_goes() -> None:
    server = feature_server.build()
    s = Served(server)
    try:
        with mcpsync.connect(s.url, era="modern", timeout=10) as c:
            got = threading.Event()
            with c.on_list_changed("prompts", lambda kind: got.set()):
                time.sleep(0.2)
                server.add_prompt(lambda: "hi", name="late")
                assert got.wait(5), "no prompts/list_changed on the listen stream"
    finally:
        s.close()


# -- the official SDK's HTTP client ------------------------------------------------------------

@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_the_official_client_over_http(served: Served, mode: str) -> None:
    anyio = require_peer("anyio")
    require_peer("mcp")
    import mcp_types as types
    from mcp import Client

    asked: list[str] = []
    progress: list[float] = []
    got: list[Any] = []

    async def on_message(message: Any) -> None:
        got.append(message)

    async def on_elicit(context: Any, params: Any) -> Any:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    async def scenario() -> None:
        async with Client(served.url, mode=mode, elicitation_callback=on_elicit,
                          message_handler=on_message, read_timeout_seconds=20) as client:
            assert client.protocol_version == {"auto": MODERN, "legacy": "2025-11-25"}[mode]
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert {"greet", "add", "ask_name"} <= names
            assert (await client.call_tool("greet", {"name": "x"})).content[0].text == "hello x"
            added = await client.call_tool("add", {"a": 2, "b": 3})
            assert added.structured_content == {"sum": 5}
            read = await client.read_resource("memo://greeting")
            assert read.contents[0].text == "hi there"
            prompt = await client.get_prompt("summarize", {"text": "abc"})
            assert prompt.messages
            asked_result = await client.call_tool("ask_name")
            assert asked_result.content[0].text == "hello Ada"
            counted = await client.call_tool("count_up", {"steps": 2},
                                             progress_callback=on_progress)
            assert counted.content[0].text == "counted to 2"
            if mode == "auto":   # a subscriptions/listen stream
                from mcp.client.subscriptions import ToolsListChanged

                async with client.listen(tools_list_changed=True) as sub:
                    await client.call_tool("add_extra", {"name": "extra"})
                    with anyio.fail_after(5):
                        assert await sub.__anext__() == ToolsListChanged()
            else:                # the session's GET stream
                await client.call_tool("add_extra", {"name": "extra"})
                with anyio.fail_after(5):
                    while not any(isinstance(m, types.ToolListChangedNotification)
                                  for m in got):
                        await anyio.sleep(0.01)

    anyio.run(scenario)
    assert asked == ["Your name?"]
    assert progress == [1, 2]


def test_stopping_the_server_cancels_a_running_modern_request() -> None:
    server = Server("quiet", "1")
    started = threading.Event()
    cancelled = threading.Event()

    @server.tool()
    def wait(ctx: Context) -> str:   # sends nothing: only the app can tell it to stop
        started.set()
        if ctx.cancelled.wait(20):
            cancelled.set()
        return "over"

    s = Served(server)
    replies: list[int] = []

    def call() -> None:
        try:
            replies.append(s.post(_modern_call("tools/call", {"name": "wait"}),
                                  _modern_headers("tools/call", "wait"))[0])
        except OSError:
            replies.append(0)   # the connection was cut: also an acceptable end

    caller = threading.Thread(target=call, name="test-caller", daemon=True)
    caller.start()
    assert started.wait(5)
    began = time.monotonic()
    s.close()
    assert cancelled.wait(1), "closing the server did not cancel the handler"
    assert time.monotonic() - began < 5
    caller.join(10)
    assert replies and replies[0] in (0, 200)


def test_a_listen_ends_when_its_client_goes() -> None:
    from mcpsync.server.http import McpApp, WsgiServer

    server = feature_server.build()
    app = McpApp(server._dispatcher_factory(), keep_alive=0.05)   # noticed within 50 ms
    with WsgiServer(app) as http_server:
        try:
            sock = socket.create_connection(("127.0.0.1", http_server.port), timeout=10)
            body = json.dumps(_modern_call("subscriptions/listen", {
                "notifications": {"toolsListChanged": True}})).encode()
            head = (f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{http_server.port}\r\n"
                    "Content-Type: application/json\r\n"
                    "Accept: application/json, text/event-stream\r\n"
                    f"MCP-Protocol-Version: {MODERN}\r\nMcp-Method: subscriptions/listen\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n").encode()
            sock.sendall(head + body)
            seen = b""
            while b"acknowledged" not in seen:
                seen += sock.recv(65536)
            router = app._shared
            assert router is not None and len(router._listens._open) == 1
            sock.close()
            deadline = time.monotonic() + 5
            while router._listens._open and time.monotonic() < deadline:
                time.sleep(0.02)
            assert not router._listens._open, "the listen outlived its client"
        finally:
            app.close()


def test_a_2025_03_26_session_answers_a_batch(served: Served) -> None:
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": initialize_params("2025-03-26")}
    status, headers, _ = served.post(init)
    sid = headers["Mcp-Session-Id"]
    batch = [{"jsonrpc": "2.0", "id": 2, "method": "ping"},
             {"jsonrpc": "2.0", "method": "notifications/initialized"},
             {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
              "params": {"name": "greet", "arguments": {"name": "b"}}}]
    status, _, body = served.post(batch, {"Mcp-Session-Id": sid})
    assert status == 200
    replies = {r["id"]: r for r in json.loads(body)}
    assert replies[2]["result"] == {}
    assert replies[3]["result"]["content"][0]["text"] == "hello b"


def test_a_legacy_cancel_notice_reaches_the_running_request() -> None:
    server = Server("quiet", "1")
    started = threading.Event()
    cancelled = threading.Event()

    @server.tool()
    def wait(ctx: Context) -> str:
        started.set()
        if ctx.cancelled.wait(20):
            cancelled.set()
        return "over"

    s = Served(server)
    try:
        _, headers, _ = s.post({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                "params": initialize_params()})
        session = {"Mcp-Session-Id": headers["Mcp-Session-Id"],
                   "MCP-Protocol-Version": "2025-11-25"}
        replies: list[tuple[int, bytes]] = []
        caller = threading.Thread(target=lambda: replies.append(s.post(
            {"jsonrpc": "2.0", "id": 9, "method": "tools/call",
             "params": {"name": "wait", "arguments": {}}}, session)[::2]),
            name="test-caller", daemon=True)
        caller.start()
        assert started.wait(5)
        status, _, _ = s.post({"jsonrpc": "2.0", "method": "notifications/cancelled",
                               "params": {"requestId": 9}}, session)
        assert status == 202
        assert cancelled.wait(5), "the cancel notice did not reach the handler"
        caller.join(10)
        assert replies and replies[0][0] == 200
        assert b'"id":9' not in replies[0][1]   # a cancelled request is not answered
    finally:
        s.close()


# -- Accept and Content-Type ----------------------------------------------------------------

@pytest.mark.parametrize(("headers", "status"), [
    ({"Content-Type": "text/plain"}, 415),
    ({"Content-Type": "application/x-www-form-urlencoded"}, 415),   # curl -d's default
    ({"Content-Type": "application/json; charset=utf-8"}, 200),
    ({"Accept": "text/html"}, 406),
    ({"Accept": "application/json;q=0, text/event-stream;q=0"}, 406),
    ({"Accept": "*/*"}, 200),                                      # requests' and curl's
    ({"Accept": "application/*"}, 200),
    ({"Accept": "text/event-stream"}, 200),
])
def test_post_content_type_and_accept(served: Served, headers: dict[str, str],
                                      status: int) -> None:
    got, _, body = served.post({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                "params": initialize_params()}, headers)
    assert got == status
    if status != 200:
        message = json.loads(body)["error"]["message"]
        assert ("Content-Type" if status == 415 else "Accept") in message


def test_a_get_must_accept_an_event_stream(served: Served) -> None:
    _, headers, _ = served.post({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                 "params": initialize_params()})
    sid = headers["Mcp-Session-Id"]
    status, body = served.request("GET", {"Mcp-Session-Id": sid, "Accept": "application/json"})
    assert status == 406 and b"text/event-stream" in body


def test_the_body_limit_holds_on_a_wsgi_server_that_sets_none() -> None:
    """wsgiref (like gunicorn and werkzeug) reads whatever a client sends: the app's own
    limit answers 413 for a declared length over it, and reads no more than it otherwise."""
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    server = Server("limited", "1.0")
    app = server.wsgi_app()
    app._max_body = 1024
    httpd = make_server("127.0.0.1", 0, app, handler_class=Quiet)
    thread = threading.Thread(target=httpd.serve_forever, name="test-wsgiref", daemon=True)
    thread.start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", httpd.server_port, timeout=10)
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping",
                           "params": {"pad": "x" * 4096}})
        conn.request("POST", "/mcp", body, {"Content-Type": "application/json",
                                           "Accept": "application/json, text/event-stream",
                                           "Host": "localhost"})
        response = conn.getresponse()
        assert response.status == 413 and b"max_body_bytes" in response.read()
        conn.close()
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)
        app.close()


def test_a_get_or_delete_saying_2026_07_28_is_405_whatever_session_it_names(
        served: Served) -> None:
    for method in ("GET", "DELETE"):
        conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=10)
        conn.request(method, "/mcp", headers={"Accept": "text/event-stream",
                                               "MCP-Protocol-Version": MODERN,
                                               "Mcp-Session-Id": "made-up"})
        response = conn.getresponse()
        assert response.status == 405, (method, response.status)
        response.read()
        conn.close()
