"""``serve_http(token_verifier=...)``: the MCP server as an OAuth protected resource.

Real peers only: the authlib authorization server of ``tests/auth_peers`` issues tokens bound
to a resource (RFC 8707) and answers RFC 7662 introspection; our server runs on
``serve_http`` in a thread with :class:`IntrospectionVerifier` asking that server. Clients are
mcpauth (discovering everything from the 401), raw ``requests`` for the statuses and headers,
and the official SDK with a static bearer header. A few "careless" verifiers (plain functions
returning what a buggy verifier would) prove the app's own audience and expiry checks.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests
from auth_peers.authlib_server import AuthlibServer
from helpers import require_peer

import mcpauth
import mcpsync
from mcpsync.server import (
    AccessToken,
    Context,
    IntrospectionVerifier,
    Server,
    TokenVerifier,
    current_access_token,
)
from mcpsync.server.http import IntrospectionError

from .helpers import MODERN, modern_meta

SCOPES = ["mcp:tools"]


def build_server(**options: Any) -> Server:
    server = Server("guarded", "1.0", **options)

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def whoami() -> str:
        """Who the verified token says is calling."""
        token = current_access_token()
        assert token is not None
        return f"{token.client_id}/{token.subject}/{sorted(token.scopes)}"

    @server.resource("memo://note")
    def note() -> str:
        return "a note"

    return server


class Guarded:
    """An authorization server and our server protected by it, on ``serve_http``."""

    def __init__(self, auth: AuthlibServer, *, verifier: TokenVerifier | None = None,
                 server: Server | None = None, **options: Any) -> None:
        self.auth = auth
        self.introspector = auth.register_introspector(client_id="rs", client_secret="rs-pw")
        auth.register_client(client_id="svc", client_secret="svc-pw",
                             grant_types=["client_credentials"])
        self.introspection = IntrospectionVerifier(f"{auth.issuer}/introspect",
                                                   client_id="rs", client_secret="rs-pw")
        self.server = server or build_server()
        self._stop = threading.Event()
        ready = threading.Event()
        self.url = ""

        def on_ready(url: str) -> None:
            self.url = url
            ready.set()

        protection: dict[str, Any] = {
            "token_verifier": verifier or self.introspection,
            "authorization_servers": [auth.issuer], "scopes": SCOPES, **options}
        self._thread = threading.Thread(target=self.server.serve_http, kwargs={
            "port": 0, "stop": self._stop, "ready": on_ready, **protection},
            name="test-serve-http-auth", daemon=True)
        self._thread.start()
        assert ready.wait(10), "serve_http did not start"
        self.origin = self.url.rsplit("/", 1)[0]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.introspection.close()
        assert not self._thread.is_alive(), "serve_http did not return after stop"

    def token(self, *, resource: str | None = None, scope: str = "mcp:tools") -> str:
        """An access token from the client-credentials grant, for ``resource`` (ours)."""
        response = requests.post(f"{self.auth.issuer}/token", auth=("svc", "svc-pw"), data={
            "grant_type": "client_credentials", "scope": scope,
            "resource": resource or self.url}, timeout=5)
        assert response.status_code == 200, response.text
        token: str = response.json()["access_token"]
        return token

    def post(self, body: Any, token: str | None = None,
             headers: dict[str, str] | None = None) -> requests.Response:
        all_headers = {"Accept": "application/json, text/event-stream", **(headers or {})}
        if token is not None:
            all_headers["Authorization"] = f"Bearer {token}"
        return requests.post(self.url, json=body, headers=all_headers, timeout=10)

    def modern(self, method: str, params: dict[str, Any] | None = None,
               token: str | None = None, name: str | None = None) -> requests.Response:
        headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method}
        if name is not None:
            headers["Mcp-Name"] = name
        body = {"jsonrpc": "2.0", "id": 1, "method": method,
                "params": {**(params or {}), "_meta": modern_meta()}}
        return self.post(body, token, headers)


@pytest.fixture
def guarded_factory(authlib_server_factory: Callable[..., AuthlibServer]
                    ) -> Iterator[Callable[..., Guarded]]:
    made: list[Guarded] = []

    def make(*, auth_options: dict[str, Any] | None = None, **options: Any) -> Guarded:
        guarded = Guarded(authlib_server_factory(**(auth_options or {})), **options)
        made.append(guarded)
        return guarded

    yield make
    for guarded in made:
        guarded.close()


@pytest.fixture
def guarded(guarded_factory: Callable[..., Guarded]) -> Guarded:
    return guarded_factory()


def _challenge(response: requests.Response) -> str:
    header: str = response.headers["WWW-Authenticate"]
    assert header.startswith("Bearer ")
    return header


# -- discovery and a real OAuth client ---------------------------------------------------------

@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_mcpauth_discovers_the_server_from_the_401_and_calls_a_tool(guarded: Guarded,
                                                                    era: str) -> None:
    provider = mcpauth.OAuthProvider(guarded.url, grant="client_credentials",
                                     client_id="svc", client_secret="svc-pw")
    with mcpsync.connect(guarded.url, auth=provider, era=era, timeout=10) as client:
        assert getattr(client.call_tool("add", {"a": 2, "b": 3}).content[0], "text", None) == "5"
        who = client.call_tool("whoami", {}).content[0]
        assert getattr(who, "text", None) == "svc/None/['mcp:tools']"
    [request] = guarded.auth.requests_of("client_credentials")
    assert request.status == 200
    assert request.value("resource") == guarded.url       # RFC 8707: bound to us
    assert "mcp:tools" in (request.value("scope") or "").split()
    # One introspection for the one token: the cache answered the later requests.
    assert guarded.introspection.requests == 1
    assert guarded.auth.introspections == 1


def test_no_token_is_401_with_the_resource_metadata_challenge(guarded: Guarded) -> None:
    response = guarded.modern("tools/list")
    assert response.status_code == 401
    header = _challenge(response)
    assert f'resource_metadata="{guarded.origin}/.well-known/oauth-protected-resource/mcp"' \
        in header
    assert 'scope="mcp:tools"' in header
    assert "error=" not in header   # RFC 6750 §3.1: no error code without credentials
    assert response.json()["error"] == "unauthorized"
    assert "guarded" in response.json()["error_description"]
    # Other schemes are no bearer token either; a broken Bearer header is a 400.
    basic = guarded.post({}, headers={"Authorization": "Basic c3ZjOnN2Yy1wdw=="})
    assert basic.status_code == 401 and "error=" not in _challenge(basic)
    broken = guarded.post({}, headers={"Authorization": "Bearer two words"})
    assert broken.status_code == 400 and 'error="invalid_request"' in _challenge(broken)
    assert guarded.auth.introspections == 0


def test_an_unknown_token_is_401_invalid_token(guarded: Guarded) -> None:
    response = guarded.modern("tools/list", token="not-a-token-this-server-issued")
    assert response.status_code == 401
    assert 'error="invalid_token"' in _challenge(response)
    assert guarded.auth.introspections == 1


def test_the_metadata_document(guarded: Guarded) -> None:
    for path in ("/.well-known/oauth-protected-resource/mcp",
                 "/.well-known/oauth-protected-resource"):
        response = requests.get(guarded.origin + path, timeout=5)   # no token needed
        assert response.status_code == 200
        assert response.headers["Content-Type"] == "application/json"
        assert response.json() == {
            "resource": guarded.url, "authorization_servers": [guarded.auth.issuer],
            "scopes_supported": ["mcp:tools"], "bearer_methods_supported": ["header"]}
        refused = requests.post(guarded.origin + path, timeout=5)
        assert refused.status_code == 405 and refused.headers["Allow"] == "GET"
    assert requests.get(guarded.origin + "/.well-known/other", timeout=5).status_code == 404


def test_an_explicit_resource_is_what_the_metadata_and_audience_use(
        guarded_factory: Callable[..., Guarded]) -> None:
    public = "https://mcp.example.com/mcp"
    guarded = guarded_factory(resource=public)
    doc = requests.get(f"{guarded.origin}/.well-known/oauth-protected-resource/mcp",
                       timeout=5).json()
    assert doc["resource"] == public
    challenge = _challenge(guarded.modern("tools/list"))
    assert 'resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource' \
        '/mcp"' in challenge
    # A token for the loopback URL is now for another resource; one for the public name fits.
    assert guarded.modern("tools/list", token=guarded.token()).status_code == 401
    ok = guarded.modern("tools/list", token=guarded.token(resource=public))
    assert ok.status_code == 200 and ok.json()["result"]["tools"]


# -- what the app refuses whatever the verifier says -------------------------------------------

def test_a_token_issued_for_another_resource_is_401(guarded: Guarded) -> None:
    other = guarded.token(resource="http://127.0.0.1:9/mcp")
    record = guarded.auth.token(other)
    assert record is not None and record.resource == "http://127.0.0.1:9/mcp"
    response = guarded.modern("tools/list", token=other)
    assert response.status_code == 401
    assert 'error="invalid_token"' in _challenge(response)
    assert "not issued for" in response.json()["error_description"]
    # The authorization server said "active": the refusal is the audience check's.
    assert guarded.auth.introspections == 1
    assert guarded.modern("tools/list", token=guarded.token()).status_code == 200


def test_an_expired_token_is_401(guarded_factory: Callable[..., Guarded]) -> None:
    guarded = guarded_factory(auth_options={"access_token_lifetime": 1})
    token = guarded.token()
    assert guarded.modern("tools/list", token=token).status_code == 200
    time.sleep(1.3)
    response = guarded.modern("tools/list", token=token)
    assert response.status_code == 401 and 'error="invalid_token"' in _challenge(response)


def test_a_careless_verifier_cannot_let_a_foreign_or_expired_token_in(
        guarded_factory: Callable[..., Guarded]) -> None:
    answers: dict[str, AccessToken] = {}

    def careless(token: str) -> AccessToken | None:   # believes whatever it is told
        return answers.get(token)

    guarded = guarded_factory(verifier=careless)
    scopes = frozenset(SCOPES)
    answers["foreign"] = AccessToken("c", scopes, time.time() + 60,
                                     audience=("http://127.0.0.1:9/mcp",))
    answers["no-audience"] = AccessToken("c", scopes, time.time() + 60)
    answers["expired"] = AccessToken("c", scopes, time.time() - 1, audience=(guarded.url,))
    answers["good"] = AccessToken("c", scopes, time.time() + 60,
                                  audience=(guarded.url.upper().replace("/MCP", "/mcp/"),))
    for name in ("foreign", "no-audience", "expired"):
        response = guarded.modern("tools/list", token=name)
        assert response.status_code == 401, name
    # Host case and a trailing slash do not make another resource.
    assert guarded.modern("tools/list", token="good").status_code == 200


def test_a_token_without_the_scope_is_403_insufficient_scope(guarded: Guarded) -> None:
    token = guarded.token(scope="offline_access")
    response = guarded.modern("tools/list", token=token)
    assert response.status_code == 403
    header = _challenge(response)
    assert 'error="insufficient_scope"' in header and 'scope="mcp:tools"' in header
    assert response.json()["error"] == "insufficient_scope"


def test_a_failing_verifier_is_503_not_401(guarded_factory: Callable[..., Guarded],
                                            caplog: pytest.LogCaptureFixture) -> None:
    def broken(token: str) -> AccessToken | None:
        raise ConnectionError(f"cannot reach the AS while checking {token}")

    guarded = guarded_factory(verifier=broken)
    with caplog.at_level(logging.DEBUG):
        response = guarded.modern("tools/list", token="secret-token-value")
    assert response.status_code == 503 and response.headers["Retry-After"]
    assert "secret-token-value" not in response.text
    assert "secret-token-value" not in caplog.text
    assert "ConnectionError" in caplog.text and "[token]" in caplog.text


# -- the token goes nowhere --------------------------------------------------------------------

def test_the_token_is_in_no_log_repr_or_error_body(guarded: Guarded,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    token = guarded.token()
    foreign = guarded.token(resource="http://127.0.0.1:9/mcp")
    seen: list[AccessToken | None] = []
    guarded.server.add_tool(lambda: seen.append(current_access_token()) or "ok",
                            name="peek")
    bodies: list[str] = []
    with caplog.at_level(logging.DEBUG):
        for t in (token, foreign):
            bodies.append(guarded.modern("tools/list", token=t).text)
            bodies.append(guarded.modern("tools/call", {"name": "nope", "arguments": {}},
                                         token=t, name="nope").text)
        peek = guarded.modern("tools/call", {"name": "peek", "arguments": {}}, token=token,
                              name="peek")
        assert peek.status_code == 200, peek.text
        bodies.append(peek.text)
        logging.getLogger("test").debug("reprs: %r %r", seen, guarded.introspection)
    assert seen and seen[0] is not None and seen[0].audience == (guarded.url,)
    assert seen[0].subject is None and seen[0].client_id == "svc"
    assert current_access_token() is None   # only on the thread handling the request
    texts = [caplog.text, repr(seen), repr(guarded.introspection), *bodies]
    assert caplog.records   # something was logged at DEBUG, so the check means something
    for text in texts:
        assert token not in text and foreign not in text


# -- cache hints -------------------------------------------------------------------------------

def _scope_of(guarded: Guarded, token: str | None) -> Any:
    response = guarded.modern("tools/list", token=token)
    assert response.status_code == 200, response.text
    return response.json()["result"]["cacheScope"]


def test_cache_hints_are_private_behind_a_verifier(guarded: Guarded) -> None:
    token = guarded.token()
    assert _scope_of(guarded, token) == "private"
    read = guarded.modern("resources/read", {"uri": "memo://note"}, token=token,
                          name="memo://note")
    assert read.json()["result"]["cacheScope"] == "private"


def test_an_explicit_cache_scope_wins(guarded_factory: Callable[..., Guarded]) -> None:
    guarded = guarded_factory(server=build_server(cache_scope="public"))
    assert _scope_of(guarded, guarded.token()) == "public"


def test_cache_hints_are_public_without_a_verifier() -> None:
    server = build_server()
    app = server.wsgi_app()
    try:
        from mcpsync.server.http import WsgiServer

        with WsgiServer(app, "127.0.0.1", 0) as http:
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list",
                    "params": {"_meta": modern_meta()}}
            response = requests.post(http.url + "/mcp", json=body, timeout=10, headers={
                "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/list",
                "Accept": "application/json, text/event-stream"})
            assert response.json()["result"]["cacheScope"] == "public"
    finally:
        app.close()


# -- wiring mistakes ---------------------------------------------------------------------------

def test_wiring_mistakes_are_clear_errors() -> None:
    server = build_server()

    def verifier(token: str) -> AccessToken | None:
        return None

    with pytest.raises(ValueError, match="resource="):
        server.wsgi_app(token_verifier=verifier, allowed_hosts=["*"])
    with pytest.raises(ValueError, match="token_verifier"):
        server.wsgi_app(scopes=["x"])
    with pytest.raises(ValueError, match="http"):
        server.wsgi_app(token_verifier=verifier, resource="mcp.example.com/mcp")
    with pytest.raises(ValueError, match="https"):
        IntrospectionVerifier("http://as.example.com/introspect", client_id="a",
                              client_secret="b")
    app = server.wsgi_app(token_verifier=verifier, resource="https://mcp.example.com/mcp")
    assert (app.path, app.name) == ("/mcp", "guarded")
    app.close()


# -- the official SDK --------------------------------------------------------------------------

def test_the_official_client_with_a_static_bearer_header(guarded: Guarded) -> None:
    anyio = require_peer("anyio")
    require_peer("mcp")
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    token = guarded.token()

    async def scenario() -> str:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                                      timeout=20) as http, \
                Client(streamable_http_client(guarded.url, http_client=http),
                       read_timeout_seconds=20) as client:
            result = await client.call_tool("whoami", {})
            text: str = result.content[0].text  # type: ignore[union-attr]
            return text

    assert anyio.run(scenario) == "svc/None/['mcp:tools']"
    assert guarded.auth.introspections == 1


# -- the introspection verifier itself ---------------------------------------------------------

def test_introspection_caches_by_hash_and_an_unreachable_server_is_503(
        guarded: Guarded) -> None:
    token = guarded.token()
    verifier = guarded.introspection
    first = verifier(token)
    assert first is not None and first.audience == (guarded.url,)
    assert first.scopes == frozenset(SCOPES) and first.client_id == "svc"
    assert first.expires_at is not None and first.expires_at > time.time()
    assert verifier(token) == first and verifier.requests == 1   # cached
    assert verifier("unknown") is None and verifier.requests == 2   # inactive: not cached
    held = json.dumps([repr(k) for k in verifier._cache]) + repr(verifier._cache)
    assert token not in held                                        # keyed by a digest
    wrong = IntrospectionVerifier(verifier.url, client_id="rs", client_secret="wrong")
    try:
        with pytest.raises(IntrospectionError, match="HTTP 401"):
            wrong(token)
    finally:
        wrong.close()
    fresh = guarded.token()
    guarded.auth.stop()   # the authorization server goes away: "cannot tell", not "refused"
    assert guarded.modern("tools/list", token=token).status_code == 200   # still cached
    response = guarded.modern("tools/list", token=fresh)
    assert response.status_code == 503 and "guarded" in response.json()["error_description"]


def test_event_streams_pass_through_the_protection(guarded_factory: Callable[..., Guarded]
                                                   ) -> None:
    server = build_server()

    @server.tool()
    def count(steps: int, ctx: Context) -> str:
        for step in range(1, steps + 1):
            ctx.progress(step, steps)
        return f"counted {steps}"

    guarded = guarded_factory(server=server)
    token = guarded.token()
    for era in ("legacy", "modern"):
        seen: list[float] = []
        with mcpsync.connect(guarded.url, auth=token, era=era, timeout=10) as client:
            result = client.call_tool("count", {"steps": 3},
                                      progress=lambda done, total, message, seen=seen:
                                      seen.append(done))
        assert getattr(result.content[0], "text", None) == "counted 3"
        assert seen == [1, 2, 3], era


def test_a_legacy_session_belongs_to_the_token_that_opened_it(guarded: Guarded) -> None:
    guarded.auth.register_client(client_id="other", client_secret="other-pw",
                                 grant_types=["client_credentials"])
    mine = guarded.token()
    response = requests.post(guarded.auth.issuer + "/token", auth=("other", "other-pw"), data={
        "grant_type": "client_credentials", "scope": "mcp:tools", "resource": guarded.url},
        timeout=5)
    theirs = response.json()["access_token"]
    opened = guarded.post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"}}}, mine)
    assert opened.status_code == 200
    sid = opened.headers["Mcp-Session-Id"]
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    session = {"Mcp-Session-Id": sid}
    assert guarded.post(listing, mine, session).status_code == 200
    stolen = guarded.post(listing, theirs, session)
    assert stolen.status_code == 404 and sid not in stolen.text
    assert guarded.post(listing, mine, session).status_code == 200


# --- what the endpoint answers is what is guarded -----------------------------------------

def _refuse_all(token: str) -> AccessToken | None:
    return None


def test_no_spelling_of_the_path_reaches_the_endpoint_without_a_token(
        guarded_factory: Callable[..., Guarded]) -> None:
    g = guarded_factory(verifier=_refuse_all)
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "add", "arguments": {"a": 1, "b": 2},
                       "_meta": modern_meta()}}
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": MODERN,
               "Mcp-Method": "tools/call", "Mcp-Name": "add"}
    for url in (g.url, g.url + "/"):
        response = requests.post(url, json=call, headers=headers, timeout=10)
        assert response.status_code == 401, (url, response.status_code, response.text)
        assert '"result"' not in response.text


def test_a_protected_app_mounted_in_flask_guards_the_mount(
        authlib_server_factory: Callable[..., AuthlibServer]) -> None:
    from werkzeug.middleware.dispatcher import DispatcherMiddleware
    from werkzeug.test import Client as WsgiClient

    flask = pytest.importorskip("flask")
    site = flask.Flask("site")
    app = build_server().wsgi_app(path="/mcp", token_verifier=_refuse_all,
                                  resource="http://localhost/mcp")
    try:
        site.wsgi_app = DispatcherMiddleware(site.wsgi_app, {"/mcp": app})  # type: ignore[method-assign]
        client = WsgiClient(site)
        body = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"}}})
        for path in ("/mcp", "/mcp/"):
            response = client.post(path, data=body, headers={
                "Content-Type": "application/json", "Host": "localhost",
                "Accept": "application/json, text/event-stream"})
            assert response.status_code == 401, (path, response.status_code)
            assert "Mcp-Session-Id" not in response.headers
    finally:
        app.close()


def test_a_host_naming_another_port_cannot_choose_the_audience(
        guarded_factory: Callable[..., Guarded]) -> None:
    g = guarded_factory()
    port = g.url.split(":")[2].split("/")[0]
    other = f"http://localhost:{int(port) + 1}/mcp"     # another server on this machine
    token = g.token(resource=other)
    response = g.post({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                       "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                                  "clientInfo": {"name": "t", "version": "0"}}},
                      token, {"Host": f"localhost:{int(port) + 1}"})
    assert response.status_code == 400, response.text
    assert "resource=" in response.json()["error_description"]
    assert token not in response.text


def test_a_session_id_nobody_opened_here_is_refused_with_a_good_token(
        guarded_factory: Callable[..., Guarded]) -> None:
    g = guarded_factory()
    token = g.token()
    response = g.post({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}, token,
                      {"Mcp-Session-Id": "made-up", "MCP-Protocol-Version": "2025-11-25"})
    assert response.status_code == 404


def test_a_bad_origin_is_refused_before_authentication_naming_allowed_hosts(
        guarded_factory: Callable[..., Guarded]) -> None:
    g = guarded_factory()
    response = g.post({"jsonrpc": "2.0", "id": 1, "method": "ping"}, None,
                      {"Origin": "http://evil.example"})
    assert response.status_code == 403
    assert "allowed_hosts=" in response.json()["error"]["message"]
