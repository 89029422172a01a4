"""Our own HTTP session prepares a request exactly as ``requests.Session.prepare_request``
does (its faster header merge, its ``None`` for no query parameters and its ``~/.netrc``
lookup kept for ENV_TTL seconds change the CPU, not the result): the same session object is
prepared both ways, over the inputs the transport sends and those it never sends. (One
deliberate difference: a ``.netrc`` entry never replaces an ``Authorization`` header already
there; tests near the end.) Likewise
our adapter's pool key (kept for ENV_TTL seconds) is ``requests``' own. The last tests keep
the caches warm (ENV_TTL large) over several hosts, ``verify`` and ``cert`` values, so that
a cache key missing a part hands one request's answer to another; and 1,000 URLs stay
within CACHE_MAX entries per cache."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from requests.auth import HTTPBasicAuth

from mcpsync.transport.http import _conn as _http_conn
from mcpsync.transport.http._conn import new_session

URL = "http://127.0.0.1:8123/mcp"


def _both(session: requests.Session, request: requests.Request) -> tuple[Any, Any]:
    """Prepared ours and requests' way (or the type of what either raised)."""
    out: list[Any] = []
    for prepare in (session.prepare_request,
                    lambda r: requests.Session.prepare_request(session, r)):
        try:
            out.append(_described(prepare(request)))
        except Exception as exc:
            out.append(type(exc))
    return out[0], out[1]


def _described(prepared: requests.PreparedRequest) -> tuple[Any, ...]:
    jar: Any = getattr(prepared, "_cookies", None)   # the jar a redirect would carry on
    cookies = sorted((c.name, c.value, c.domain, c.path) for c in jar or [])
    hooks = {k: list(v) for k, v in prepared.hooks.items()}
    return (prepared.method, prepared.url, list(prepared.headers.items()), prepared.body,
            cookies, hooks, type(jar).__name__)


@pytest.fixture()
def no_netrc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A home without a ``.netrc``, and NETRC pointing nowhere."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("NETRC", raising=False)
    monkeypatch.setattr(_http_conn, "ENV_TTL", -1.0)   # every request looks again
    yield tmp_path


def _hook(response: requests.Response, *args: Any, **kwargs: Any) -> None:
    return None


CASES: list[dict[str, Any]] = [
    # What the transport sends: a dict of headers and a bytes body.
    {"headers": {"Accept": "application/json, text/event-stream",
                 "Content-Type": "application/json", "Mcp-Session-Id": "abc",
                 "MCP-Protocol-Version": "2025-06-18"}, "data": b'{"jsonrpc":"2.0"}'},
    {"method": "get", "headers": {"Accept": "text/event-stream", "Last-Event-ID": "7"}},
    {"method": "DELETE", "headers": {}},
    # A header set to None drops the session's default; case-insensitive overrides.
    {"headers": {"User-Agent": None, "accept": "x/y", "X-Extra": b"bytes"}, "data": b"{}"},
    # Everything the transport never sends still goes requests' way.
    {"params": {"a": "1", "b": ["2", "3"]}, "data": {"form": "field"}},
    {"params": [("q", "x y")], "json": {"k": [1, 2]}},
    {"params": "raw=1", "headers": {"X-Raw": "1"}},
    {"headers": [("X-Pairs", "1")]},   # not a mapping: requests fails, and so do we
    {"auth": ("user", "secret"), "cookies": {"c": "1"}, "hooks": {"response": [_hook]}},
    {"auth": HTTPBasicAuth("u", "p"), "files": {"f": ("a.txt", b"body")}},
    {"url": "http://user:pw@127.0.0.1:8123/mcp?x=1#frag", "data": b"{}"},
    {"url": "http://127.0.0.1:8123/a path/é?q=ü", "data": b"{}"},
]


@pytest.mark.parametrize("case", CASES, ids=range(len(CASES)))
def test_prepared_as_requests_does(case: dict[str, Any], no_netrc: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import urllib3.filepost
    monkeypatch.setattr(urllib3.filepost, "choose_boundary", lambda: "b0undary")  # files
    session = new_session()
    try:
        kwargs = dict(case)
        request = requests.Request(kwargs.pop("method", "POST"), kwargs.pop("url", URL),
                                   **kwargs)
        ours, theirs = _both(session, request)
        assert ours == theirs
    finally:
        session.close()


def test_session_settings_merged_as_requests_does(no_netrc: Path) -> None:
    """Session-level headers (one set to None), params, cookies, auth and hooks."""
    session = new_session()
    try:
        session.headers["X-Session"] = "s"
        session.headers["Accept-Encoding"] = None  # type: ignore[assignment]
        session.cookies.set("sid", "42", domain="127.0.0.1", path="/")
        request = requests.Request("POST", URL, headers={"X-Session": "mine"}, data=b"{}")
        assert _both(session, request)[0] == _both(session, request)[1]
        session.params = {"p": "1"}
        session.auth = ("su", "sp")
        session.hooks["response"].append(_hook)
        ours, theirs = _both(session, request)
        assert ours == theirs
        assert "p=1" in ours[1]
        assert ("Authorization", "Basic c3U6c3A=") in ours[2]
    finally:
        session.close()


def test_netrc_credentials_applied(no_netrc: Path) -> None:
    """``~/.netrc`` (and NETRC) credentials are sent as requests sends them; the trust_env
    switch turns them off."""
    (no_netrc / ".netrc").write_text("machine 127.0.0.1 login nu password np\n")
    (no_netrc / ".netrc").chmod(0o600)
    session = new_session()
    try:
        request = requests.Request("POST", URL, data=b"{}")
        ours, theirs = _both(session, request)
        assert ours == theirs
        assert ("Authorization", "Basic bnU6bnA=") in ours[2]
        session.trust_env = False
        ours, theirs = _both(session, request)
        assert ours == theirs
        assert all(name != "Authorization" for name, _ in ours[2])
    finally:
        session.close()


def test_netrc_kept_for_env_ttl(no_netrc: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lookup is kept ENV_TTL seconds per URL: a new ``.netrc`` is seen after it."""
    session = new_session()
    request = requests.Request("POST", URL, data=b"{}")
    try:
        monkeypatch.setattr(_http_conn, "ENV_TTL", 3600.0)
        assert "Authorization" not in session.prepare_request(request).headers
        (no_netrc / ".netrc").write_text("machine 127.0.0.1 login nu password np\n")
        (no_netrc / ".netrc").chmod(0o600)
        assert "Authorization" not in session.prepare_request(request).headers   # kept
        monkeypatch.setattr(_http_conn, "ENV_TTL", -1.0)
        assert session.prepare_request(request).headers["Authorization"] == "Basic bnU6bnA="
    finally:
        session.close()


def test_real_request_carries_the_same_headers(no_netrc: Path) -> None:
    """End to end through a server that echoes what it got: our session and a plain one
    send the same request line, headers and body."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen: list[tuple[str, list[tuple[str, str]], bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            seen.append((self.path, list(self.headers.items()), body))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="mcpsync-test-echo",
                              daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/mcp"
    headers = {"Accept": "application/json, text/event-stream",
               "Content-Type": "application/json", "Mcp-Session-Id": "abc"}
    try:
        for session in (new_session(), requests.Session()):
            with session:
                session.post(url, data=b'{"x":1}', headers=headers, timeout=5).close()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    assert len(seen) == 2
    assert seen[0] == seen[1]


@pytest.mark.parametrize("url", [URL, "https://127.0.0.1/mcp", "https://example.org:8443/x",
                                 "HTTP://LOCALHOST:80/"])
@pytest.mark.parametrize("cert", [None, "/tmp/client.pem", ("/tmp/c.pem", "/tmp/k.pem")])
def test_pool_key_as_requests_makes_it(url: str, cert: Any, tmp_path: Path) -> None:
    bundle = tmp_path / "ca.pem"
    bundle.write_text("")
    session = new_session()
    try:
        adapter: Any = session.get_adapter(url)
        request = requests.Request("POST", url, data=b"{}").prepare()
        for verify in (True, False, str(bundle), str(tmp_path)):
            for _ in range(2):   # the second one is the kept answer
                ours = adapter.build_connection_pool_key_attributes(request, verify, cert)
                theirs = requests.adapters.HTTPAdapter.build_connection_pool_key_attributes(
                    adapter, request, verify, cert)
                assert ours == theirs
                ours[1]["changed"] = True   # a copy: the kept answer stays as it was
    finally:
        session.close()


def test_pool_key_kept_for_env_ttl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CA path that becomes a directory is seen once ENV_TTL has passed; an unhashable
    cert is never kept."""
    path = tmp_path / "ca"
    path.write_text("")
    session = new_session()
    try:
        adapter: Any = session.get_adapter(URL)
        request = requests.Request("POST", URL, data=b"{}").prepare()
        monkeypatch.setattr(_http_conn, "ENV_TTL", 3600.0)
        assert "ca_certs" in adapter.build_connection_pool_key_attributes(request, str(path))[1]
        path.unlink()
        path.mkdir()
        assert "ca_certs" in adapter.build_connection_pool_key_attributes(request, str(path))[1]
        monkeypatch.setattr(_http_conn, "ENV_TTL", -1.0)
        assert adapter.build_connection_pool_key_attributes(request, str(path))[1][
            "ca_cert_dir"] == str(path)
        listed: Any = ["/tmp/c.pem", "/tmp/k.pem"]
        assert adapter.build_connection_pool_key_attributes(request, True, listed)[1][
            "cert_file"] == listed
    finally:
        session.close()


# The caches warm: ENV_TTL large, so that every answer after the first comes from a cache,
# and several URLs, verify and cert values share one cache. A key missing a part (a
# constant, no URL, no cert) hands one request's answer to another here.

WARM_TTL = 3600.0


def _write_netrc(home: Path, host: str) -> None:
    (home / ".netrc").write_text(f"machine {host} login nu password np\n")
    (home / ".netrc").chmod(0o600)


@pytest.mark.parametrize("first", ["a", "b"])
def test_netrc_entry_for_one_host_only(first: str, no_netrc: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """With a ``.netrc`` entry for a.example only, a warm session sends its credentials to
    a.example and none to b.example, in either order, as ``requests`` does."""
    _write_netrc(no_netrc, "a.example")
    monkeypatch.setattr(_http_conn, "ENV_TTL", WARM_TTL)
    urls = {"a": "http://a.example/mcp", "b": "http://b.example/mcp"}
    order = [first, "b" if first == "a" else "a"]
    session = new_session()
    try:
        for _ in range(2):   # the second pass: every lookup is a kept answer
            for name in order:
                request = requests.Request("POST", urls[name], data=b"{}")
                ours, theirs = _both(session, request)
                assert ours == theirs
                authorization = [v for k, v in ours[2] if k.lower() == "authorization"]
                assert authorization == (["Basic bnU6bnA="] if name == "a" else [])
    finally:
        session.close()


def test_pool_keys_of_many_requests_on_one_warm_adapter(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One adapter, every URL x verify x cert: after all of them were asked once (the cache
    warm), each answer is still ``requests``' own for that very request."""
    bundle = tmp_path / "ca.pem"
    bundle.write_text("")
    urls = [URL, "http://127.0.0.1:8124/mcp", "https://127.0.0.1/mcp",
            "https://example.org:8443/x"]
    verifies: list[Any] = [True, False, str(bundle), str(tmp_path)]
    certs: list[Any] = [None, str(tmp_path / "client.pem"),
                        (str(tmp_path / "c.pem"), str(tmp_path / "k.pem"))]
    combos = [(u, v, c) for u in urls for v in verifies for c in certs]
    assert len(combos) <= _http_conn.CACHE_MAX   # all of them stay in the cache
    monkeypatch.setattr(_http_conn, "ENV_TTL", WARM_TTL)
    session = new_session()
    try:
        adapter: Any = session.get_adapter(URL)
        assert session.get_adapter("https://127.0.0.1/mcp") is adapter
        prepared = {u: requests.Request("POST", u, data=b"{}").prepare() for u in urls}
        for url, verify, cert in combos:   # warm
            adapter.build_connection_pool_key_attributes(prepared[url], verify, cert)
        assert len(adapter._key_cache) == len(combos)
        for url, verify, cert in reversed(combos):
            ours = adapter.build_connection_pool_key_attributes(prepared[url], verify, cert)
            theirs = requests.adapters.HTTPAdapter.build_connection_pool_key_attributes(
                adapter, prepared[url], verify, cert)
            assert ours == theirs, (url, verify, cert)
    finally:
        session.close()


def _netrc_cache(session: Any) -> dict[Any, Any]:
    for i in range(1000):
        session.prepare_request(requests.Request("POST", f"http://h{i}.example/mcp"))
        assert len(session._netrc_cache) <= _http_conn.CACHE_MAX
    return session._netrc_cache


def _env_cache(session: Any) -> dict[Any, Any]:
    for i in range(1000):
        session.merge_environment_settings(f"http://h{i}.example/mcp", {}, False, None, None)
        assert len(session._env_cache) <= _http_conn.CACHE_MAX
    return session._env_cache


def _key_cache(session: Any) -> dict[Any, Any]:
    adapter: Any = session.get_adapter(URL)
    for i in range(1000):
        request = requests.Request("POST", f"http://h{i}.example/mcp").prepare()
        adapter.build_connection_pool_key_attributes(request, True, None)
        assert len(adapter._key_cache) <= _http_conn.CACHE_MAX
    return adapter._key_cache


@pytest.mark.parametrize("fill", [_netrc_cache, _env_cache, _key_cache],
                         ids=["netrc", "environment", "pool key"])
def test_caches_stay_within_their_bound(fill: Any, no_netrc: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """1,000 distinct URLs on one warm session: each per-URL cache holds at most CACHE_MAX
    entries, and the newest URL is among them."""
    monkeypatch.setattr(_http_conn, "ENV_TTL", WARM_TTL)
    session = new_session()
    try:
        cache = fill(session)
        assert 0 < len(cache) <= _http_conn.CACHE_MAX
        assert any("h999.example" in str(key) for key in cache)
    finally:
        session.close()


@pytest.mark.parametrize("where, headers", [
    ("request", {"Authorization": "Bearer mine"}),
    ("request", {"authorization": "Bearer mine"}),
    ("request", {b"AUTHORIZATION": b"Bearer mine"}),
    ("session", {"Authorization": "Bearer mine"}),
])
def test_netrc_never_replaces_an_authorization_header(
        where: str, headers: dict[Any, Any], no_netrc: Path) -> None:
    """The one deliberate difference from ``requests``: an ``Authorization`` header already
    there (any case, from the request or the session) is sent, not the ``.netrc`` entry's
    Basic credentials, which ``requests`` puts in its place."""
    _write_netrc(no_netrc, "127.0.0.1")
    session = new_session()
    try:
        request = requests.Request("POST", URL, data=b"{}")
        (request.headers if where == "request" else session.headers).update(headers)
        ours, theirs = _both(session, request)
        assert ("Authorization", "Basic bnU6bnA=") in theirs[2]   # requests' own rule
        name, value = next(iter(headers.items()))
        name = name.decode() if isinstance(name, bytes) else name   # requests makes it str
        assert [(k, v) for k, v in ours[2] if k.lower() == "authorization"] == [(name, value)]
    finally:
        session.close()


def test_netrc_applies_when_the_authorization_header_is_dropped(no_netrc: Path) -> None:
    """A request that drops the session's ``Authorization`` (None) has none: the ``.netrc``
    entry applies, as with ``requests``."""
    _write_netrc(no_netrc, "127.0.0.1")
    session = new_session()
    try:
        session.headers["Authorization"] = "Bearer session"
        request = requests.Request("POST", URL, headers={"Authorization": None}, data=b"{}")
        ours, theirs = _both(session, request)
        assert ours == theirs
        assert ("Authorization", "Basic bnU6bnA=") in ours[2]
    finally:
        session.close()


def test_an_unpickled_session_starts_with_empty_caches(no_netrc: Path) -> None:
    """``requests`` pickles only its own attributes: our caches come back empty, and the
    unpickled session prepares and sends as the original does."""
    import pickle

    _write_netrc(no_netrc, "127.0.0.1")
    session = new_session()
    try:
        request = requests.Request("POST", URL, data=b"{}")
        session.prepare_request(request)
        session.merge_environment_settings(URL, {}, False, None, None)
        copy: Any = pickle.loads(pickle.dumps(session))
        try:
            assert copy._netrc_cache == {} and copy._env_cache == {}
            assert _described(copy.prepare_request(request)) == \
                _described(session.prepare_request(request))
            assert copy.merge_environment_settings(URL, {}, False, None, None) == \
                session.merge_environment_settings(URL, {}, False, None, None)
            assert copy.get_adapter(URL)._key_cache == {}
        finally:
            copy.close()
    finally:
        session.close()
