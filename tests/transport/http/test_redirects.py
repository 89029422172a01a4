"""Manual redirect following (docs/http.md, "Redirects") against real loopback servers.

Two servers on different ports are two origins, so "nothing reaches another origin" is checked
by what the second server saw. ``responses`` covers the https→http downgrade, which needs TLS.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable, Iterator

import pytest
import requests
import responses

from mcpsync._origin import connection_origin
from mcpsync.errors import TransportError
from mcpsync.transport.http._auth import AuthFlow
from mcpsync.transport.http._redirects import follow

Seen = tuple[str, str, dict[str, str], bytes]
Route = Callable[[str], tuple[int, dict[str, str]]]


class _Server:
    def __init__(self) -> None:
        self.seen: list[Seen] = []
        self.route: Route = lambda path: (200, {})
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                outer.seen.append((self.command, self.path, dict(self.headers.items()), body))
                status, headers = outer.route(self.path)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            do_POST = do_GET = do_DELETE = _handle

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,),
                                       daemon=True, name="mcpsync-test-redirect-server")
        self.thread.start()
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


@pytest.fixture(scope="module")
def _servers() -> Iterator[tuple[_Server, _Server]]:
    a, b = _Server(), _Server()
    try:
        yield a, b
    finally:
        a.close()
        b.close()


@pytest.fixture
def servers(_servers: tuple[_Server, _Server]) -> tuple[_Server, _Server]:
    for server in _servers:
        server.seen = []
        server.route = lambda path: (200, {})
    return _servers


BODY = b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'
HEADERS = {"Authorization": "Bearer t", "Mcp-Session-Id": "s1", "X-Custom": "c"}


def sender(method: str = "POST") -> Callable[[str], requests.Response]:
    def send_once(url: str) -> requests.Response:
        return requests.request(method, url, headers=HEADERS, data=BODY if method == "POST"
                                else None, allow_redirects=False, timeout=10)
    return send_once


def chain(hops: int, status: int = 307) -> Route:
    """/hop0 → /hop1 → ... → /hop{hops} (200)."""
    def route(path: str) -> tuple[int, dict[str, str]]:
        n = int(path.removeprefix("/hop"))
        if n < hops:
            return status, {"Location": f"/hop{n + 1}"}
        return 200, {}
    return route


@pytest.mark.parametrize("status", [307, 308])
def test_same_origin_307_308_followed_keeping_method_body_and_headers(
        servers: tuple[_Server, _Server], status: int) -> None:
    a, _ = servers
    a.route = chain(2, status)
    response = follow(sender(), a.base + "/hop0")
    assert response.status_code == 200
    assert [(m, p, body) for m, p, _, body in a.seen] == [
        ("POST", "/hop0", BODY), ("POST", "/hop1", BODY), ("POST", "/hop2", BODY)]
    assert all(h["Authorization"] == "Bearer t" and h["X-Custom"] == "c" for _, _, h, _ in a.seen)


def test_five_hops_followed_six_refused(servers: tuple[_Server, _Server]) -> None:
    a, _ = servers
    a.route = chain(5)
    assert follow(sender(), a.base + "/hop0").status_code == 200
    a.seen.clear()
    a.route = chain(6)
    with pytest.raises(TransportError, match="more than 5 redirects"):
        follow(sender(), a.base + "/hop0")
    assert len(a.seen) == 6  # /hop0 ... /hop5; /hop6 never requested


@pytest.mark.parametrize("status", [301, 302, 303])
def test_301_302_303_raise_naming_both_urls(servers: tuple[_Server, _Server],
                                            status: int) -> None:
    a, _ = servers
    a.route = chain(1, status)
    with pytest.raises(TransportError) as info:
        follow(sender(), a.base + "/hop0", server="demo", method="tools/list")
    message = str(info.value)
    assert f"{a.base}/hop0" in message and f"{a.base}/hop1" in message
    assert info.value.__dict__["status"] == status
    assert info.value.server == "demo" and info.value.method == "tools/list"
    assert [p for _, p, _, _ in a.seen] == ["/hop0"]


@pytest.mark.parametrize("method", ["POST", "GET", "DELETE"])
def test_cross_origin_refused_and_nothing_reaches_it(servers: tuple[_Server, _Server],
                                                     method: str) -> None:
    a, b = servers
    a.route = lambda path: (307, {"Location": b.base + "/mcp"})
    with pytest.raises(TransportError) as info:
        follow(sender(method), a.base + "/mcp")
    assert a.base in str(info.value) and b.base in str(info.value)
    assert "another origin" in str(info.value)
    assert b.seen == []


def test_same_host_other_name_is_another_origin(servers: tuple[_Server, _Server]) -> None:
    a, _ = servers
    port = a.base.rsplit(":", 1)[1]
    a.route = lambda path: (308, {"Location": f"http://localhost:{port}/x"}) if path == "/" \
        else (200, {})
    with pytest.raises(TransportError):
        follow(sender(), a.base + "/")
    assert [p for _, p, _, _ in a.seen] == ["/"]


def test_same_origin_redirect_inside_the_auth_flow_keeps_auth(
        servers: tuple[_Server, _Server]) -> None:
    a, _ = servers
    a.route = chain(1, 308)

    class Hook:
        def headers(self, method: str, url: str) -> dict[str, str]:
            return {"Authorization": "Bearer hooked"}

        def on_unauthorized(self, challenge: object) -> None:
            raise AssertionError("no 401 here")

    flow = AuthFlow(Hook(), {"X-Static": "1"})
    url = a.base + "/hop0"

    def do_send(headers: dict[str, str]) -> requests.Response:
        return follow(lambda u: requests.post(u, headers=headers, data=BODY,
                                              allow_redirects=False, timeout=10), url)

    assert flow.send("POST", url, do_send).status_code == 200
    assert [(p, h["Authorization"], h["X-Static"]) for _, p, h, _ in a.seen] == [
        ("/hop0", "Bearer hooked", "1"), ("/hop1", "Bearer hooked", "1")]


def test_redirect_without_location_is_returned(servers: tuple[_Server, _Server]) -> None:
    a, _ = servers
    a.route = lambda path: (307, {})
    assert follow(sender(), a.base + "/").status_code == 307


def test_non_redirect_statuses_are_returned(servers: tuple[_Server, _Server]) -> None:
    a, _ = servers
    for status in (200, 202, 304, 404):
        a.route = lambda path, s=status: (s, {"Location": "/elsewhere"})  # type: ignore[misc]
        assert follow(sender(), a.base + "/").status_code == status
    assert all(p == "/" for _, p, _, _ in a.seen)


@responses.activate
def test_https_to_http_downgrade_refused() -> None:
    responses.add(responses.POST, "https://mcp.example/mcp", status=307,
                  headers={"Location": "http://mcp.example/mcp"})
    responses.add(responses.POST, "http://mcp.example/mcp", status=200)
    with pytest.raises(TransportError, match="https to http"):
        follow(sender(), "https://mcp.example/mcp")
    assert len(responses.calls) == 1


@responses.activate
def test_https_same_origin_with_explicit_default_port_followed() -> None:
    responses.add(responses.POST, "https://mcp.example/mcp", status=308,
                  headers={"Location": "https://MCP.example:443/v2"})
    responses.add(responses.POST, "https://mcp.example:443/v2", status=200)
    assert follow(sender(), "https://mcp.example/mcp").status_code == 200
    assert len(responses.calls) == 2


@responses.activate
def test_userinfo_not_shown_in_the_error() -> None:
    responses.add(responses.POST, "https://mcp.example/mcp", status=302,
                  headers={"Location": "https://pw-user:hunter2@other.example/mcp"})
    with pytest.raises(TransportError) as info:
        follow(sender(), "https://mcp.example/mcp")
    assert "hunter2" not in str(info.value)
    assert "other.example/mcp" in str(info.value)


@pytest.mark.parametrize(("a", "b", "same"), [
    ("http://h/x", "http://h:80/y", True),
    ("https://H.example/x", "https://h.EXAMPLE:443/", True),
    ("http://h/x", "https://h/x", False),
    ("http://h:8080/", "http://h:8081/", False),
    ("http://h/", "http://h.example/", False),
    ("http://127.0.0.1:5/", "http://localhost:5/", False),
    ("http://[::1]:5/", "http://[::1]:5/a", True),
])
def test_same_origin(a: str, b: str, same: bool) -> None:
    assert (connection_origin(a) == connection_origin(b)) is same


def test_origin_fills_default_ports() -> None:
    assert connection_origin("HTTPS://Example.COM/p?q") == ("https", "example.com", 443)
    assert connection_origin("http://example.com:8080") == ("http", "example.com", 8080)
