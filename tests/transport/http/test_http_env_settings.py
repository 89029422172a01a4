"""Our own HTTP session keeps the environment's proxy settings for ENV_TTL seconds (a CPU
saving: requests scans all of os.environ per request) but still honours them, and picks up a
change once the TTL has passed. Real requests through two tiny recording "proxies"."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from mcpsync.transport.http import _conn as _http_conn

pytestmark = pytest.mark.timeout(20)


class _Proxy(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.seen: list[str] = []
        self.url = f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        server = self.server
        assert isinstance(server, _Proxy)
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        server.seen.append(self.path)
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture()
def proxies() -> Iterator[tuple[_Proxy, _Proxy]]:
    pair = (_Proxy(), _Proxy())
    threads = [threading.Thread(target=p.serve_forever, name="mcpsync-test-proxy", daemon=True)
               for p in pair]
    for thread in threads:
        thread.start()
    yield pair
    for proxy, thread in zip(pair, threads, strict=True):
        proxy.shutdown()
        proxy.server_close()
        thread.join(5)


def _clear_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "no_proxy",
                 "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)


def test_env_proxy_is_used_and_a_change_is_seen_after_the_ttl(
        proxies: tuple[_Proxy, _Proxy], monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = proxies
    _clear_proxy_env(monkeypatch)
    monkeypatch.setenv("HTTP_PROXY", first.url)
    session = _http_conn.new_session()
    try:
        url = "http://mcp.example.invalid/mcp"
        assert session.post(url, data=b"{}", timeout=5).json() == {"ok": True}
        monkeypatch.setenv("HTTP_PROXY", second.url)
        # Within the TTL the cached settings still apply...
        monkeypatch.setattr(_http_conn, "ENV_TTL", 3600.0)
        session.post(url, data=b"{}", timeout=5)
        assert first.seen == [url, url] and second.seen == []
        # ...and once it has passed, the environment is read again.
        monkeypatch.setattr(_http_conn, "ENV_TTL", -1.0)
        session.post(url, data=b"{}", timeout=5)
        assert second.seen == [url]
    finally:
        session.close()


def test_explicit_proxies_bypass_the_cache(proxies: tuple[_Proxy, _Proxy],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = proxies
    _clear_proxy_env(monkeypatch)
    monkeypatch.setenv("HTTP_PROXY", first.url)
    session = _http_conn.new_session()
    try:
        url = "http://mcp.example.invalid/mcp"
        session.post(url, data=b"{}", timeout=5)
        session.post(url, data=b"{}", timeout=5, proxies={"http": second.url})
        assert first.seen == [url] and second.seen == [url]
    finally:
        session.close()
