"""The MCP endpoint mounted inside a Flask application beside its ordinary routes.

werkzeug's ``DispatcherMiddleware`` hands the MCP app requests under its mount prefix with the
prefix moved into ``SCRIPT_NAME`` (``PATH_INFO`` is then empty or the rest of the path); the
app matches ``SCRIPT_NAME + PATH_INFO`` against its path. Served by the built-in server on a
real socket, called by mcpsync's client in both eras and by plain HTTP for Flask's routes.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from werkzeug.middleware.dispatcher import DispatcherMiddleware

import mcpsync
from mcpsync.server.http import McpApp, WsgiServer
from server.peers_http.pid_server import build


def _flask_with_mcp(mounts: dict[str, McpApp]) -> Flask:
    web = Flask("shop")

    @web.get("/")
    def home() -> str:
        return "the shop's home page"

    web.wsgi_app = DispatcherMiddleware(web.wsgi_app, mounts)  # type: ignore[method-assign]
    return web


@pytest.fixture
def served(request: pytest.FixtureRequest) -> Iterator[tuple[str, McpApp]]:
    prefix, path = request.param
    mcp_app = build().wsgi_app(path=path)
    web = _flask_with_mcp({prefix: mcp_app})
    server = WsgiServer(web, "127.0.0.1", 0, name="flask-test")
    server.start()
    try:
        yield server.url, mcp_app
    finally:
        mcp_app.close()
        server.close()


def _get(url: str, path: str) -> tuple[int, bytes]:
    host, port = url.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


MOUNTS = [("/mcp", "/mcp"), ("/api", "/api/mcp")]


@pytest.mark.parametrize("served", MOUNTS, indirect=True, ids=["at-/mcp", "under-/api"])
@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_mounted_in_flask_beside_its_routes(served: tuple[str, McpApp], era: str) -> None:
    base, mcp_app = served
    steps: list[float] = []
    with mcpsync.connect(base + mcp_app.path, era=era) as client:
        result = client.call_tool("add", {"a": 2, "b": 3},
                                  progress=lambda done, total, message: steps.append(done))
        assert result.content[0].text.split()[0] == "5"
        assert steps == [1]           # an event-stream reply through the middleware
        if era == "legacy":            # the session's GET stream is mounted too
            heard = threading.Event()
            client.subscribe("memo://board", lambda uri: heard.set())
            client.call_tool("touch", {"uri": "memo://board"})
            assert heard.wait(5)
    assert _get(base, "/") == (200, b"the shop's home page")   # Flask still answers its own


@pytest.mark.parametrize("served", [("/mcp", "/mcp")], indirect=True)
def test_a_trailing_slash_is_the_same_endpoint_and_elsewhere_is_flask(
        served: tuple[str, McpApp]) -> None:
    base, _ = served
    assert _get(base, "/mcp/")[0] == 405   # the MCP app: GET without a session
    assert _get(base, "/mcp")[0] == 405
    status, body = _get(base, "/mcp/other")
    assert status == 404 and b"this server answers at /mcp" in body
    assert _get(base, "/nothing")[0] == 404   # Flask's own 404


def test_served_directly_the_path_is_path_info() -> None:
    mcp_app = build().wsgi_app(path="/mcp")
    seen: list[Any] = []

    def start_response(status: str, headers: list[tuple[str, str]]) -> Any:
        seen.append(status)
        return lambda data: None

    for script_name, path_info in [("", "/mcp"), ("/mcp", ""), ("/mcp", "/"), ("", "/other"),
                                   ("/other", "/mcp")]:
        mcp_app({"REQUEST_METHOD": "GET", "SCRIPT_NAME": script_name,
                 "PATH_INFO": path_info, "HTTP_HOST": "127.0.0.1"}, start_response)
    mcp_app.close()
    assert seen == ["405 Method Not Allowed"] * 3 + ["404 Not Found"] * 2
