"""The MCP server as a Django view, in a real Django project on a real socket.

``server.peers_http.django_site`` is a Django project (settings configured in code, its own
URL patterns, the CSRF middleware on) whose ``/mcp`` is ``server.django_view()``; Django's
WSGI application is served by the built-in server. mcpsync's client calls it in both eras:
a tool with progress (an event stream through ``StreamingHttpResponse``), an ask, a
subscription (a legacy GET stream, a 2026-07-28 listen). A client that goes away mid-stream
cancels its call, and every ``mcpsync-django-<n>`` thread is joined (the leak check).
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import mcpsync
from mcpsync.server.http import WsgiServer
from server.helpers import MODERN, modern_meta

django_site = pytest.importorskip("server.peers_http.django_site")
from server.peers_http import pid_server  # noqa: E402


@pytest.fixture
def site() -> Iterator[WsgiServer]:
    view = pid_server.build().django_view()
    # An idle listen notices its client left at its next keep-alive comment: 50 ms here.
    view.app._keep_alive = 0.05
    django_site.mount(view)
    server = WsgiServer(django_site.application, "127.0.0.1", 0, name="django-test")
    server.start()
    try:
        yield server
    finally:
        view.close()
        server.close()


def _elicit(request: Any) -> dict[str, Any]:
    return {"action": "accept", "content": {"name": "Django"}}


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_both_eras_through_a_django_view(site: WsgiServer, era: str) -> None:
    steps: list[float] = []
    heard = threading.Event()
    with mcpsync.connect(site.url + "/mcp", era=era, elicitation=_elicit) as client:
        assert client.era == era
        result = client.call_tool("add", {"a": 20, "b": 22},
                                  progress=lambda done, total, message: steps.append(done))
        assert result.content[0].text.split()[0] == "42"
        assert steps == [1]   # streamed: progress, then the result, as events
        asked = client.call_tool("ask_name")
        assert asked.content[0].text.startswith("hello Django (answered by ")
        # legacy: resources/subscribe and the session's GET stream; modern: a listen
        client.subscribe("memo://board", lambda uri: heard.set())
        client.call_tool("touch", {"uri": "memo://board"})
        assert heard.wait(5), "the update did not arrive through Django"
    conn = http.client.HTTPConnection("127.0.0.1", site.port, timeout=10)
    try:
        conn.request("GET", "/")
        assert conn.getresponse().read() == b"the site's home page"
    finally:
        conn.close()


def test_a_client_that_goes_away_cancels_its_call(site: WsgiServer) -> None:
    pid_server.CANCELLED.clear()
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "slow", "arguments": {}, "_meta": modern_meta(progressToken="p")}})
    conn = http.client.HTTPConnection("127.0.0.1", site.port, timeout=10)
    try:
        conn.request("POST", "/mcp", body, {
            "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": "slow"})
        response = conn.getresponse()
        assert response.status == 200
        assert response.getheader("Content-Type") == "text/event-stream"
        seen = b""
        while b"notifications/progress" not in seen:   # the stream is flowing
            chunk = response.read1(4096)
            assert chunk, seen
            seen += chunk
    finally:
        conn.close()   # mid-stream
    assert pid_server.CANCELLED.wait(5), "the handler was not cancelled"


def test_json_replies_and_refusals_keep_their_status(site: WsgiServer) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", site.port, timeout=10)
    try:
        conn.request("GET", "/mcp")   # no session: 405, through Django unchanged
        response = conn.getresponse()
        assert response.status == 405 and response.getheader("Allow") == "GET, POST, DELETE"
        response.read()
        conn.request("POST", "/mcp", json.dumps({"jsonrpc": "2.0", "id": 3,
                                                 "method": "tools/list",
                                                 "params": {"_meta": modern_meta()}}),
                     {"Content-Type": "application/json", "MCP-Protocol-Version": MODERN,
                      "Mcp-Method": "tools/list",
                      "Accept": "application/json, text/event-stream"})
        response = conn.getresponse()
        assert response.status == 200   # no CSRF token needed: the view is exempt
        assert response.getheader("Content-Type") == "application/json"
        names = {tool["name"] for tool in json.loads(response.read())["result"]["tools"]}
        assert {"add", "ask_name", "slow"} <= names
    finally:
        conn.close()
