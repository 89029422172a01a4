"""OAuthProvider against a small real loopback server (rules/auth.md §6, §10).

``FakeAuthServer`` is one ``ThreadingHTTPServer`` on 127.0.0.1 that plays both the protected
resource's metadata and one or more authorization servers (issuers ``<base>/as1``,
``<base>/as2``): discovery, dynamic registration, an ``/authorize`` that redirects at once (as
the conformance mock does) and a token endpoint. It records every request, so the tests assert
on what actually went over the wire. The provider is driven the way mcpsync drives it:
``headers()`` before a request, ``on_unauthorized(challenge)`` on a 401/403.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
import requests

from mcpauth import (
    AuthorizationServerChanged,
    LoginRequired,
    MemoryTokenStore,
    OAuthProvider,
    Token,
    TokenRequestError,
    TokenStore,
)
from mcpauth.tokens import credential_key, resource_index_key


@dataclass
class Issuer:
    """One authorization server's behaviour and what it saw."""

    name: str
    scopes_supported: list[str] | None = None
    expires_in: int = 3600
    refresh_delay: threading.Event | None = None   # the refresh waits for this when set
    refresh_started: threading.Event = field(default_factory=threading.Event)
    refuse_refresh: bool = False                   # answer refreshes with invalid_grant
    dpop: bool = False                             # advertise DPoP, bind tokens to proofs
    pending_polls: int = 1                         # device-code polls answered "pending"
    dpop_proofs: list[str] = field(default_factory=list)
    registrations: list[dict[str, Any]] = field(default_factory=list)
    authorizations: list[dict[str, str]] = field(default_factory=list)
    token_requests: list[dict[str, str]] = field(default_factory=list)
    counter: int = 0

    def grants(self, grant_type: str) -> list[dict[str, str]]:
        return [r for r in self.token_requests if r.get("grant_type") == grant_type]


class FakeAuthServer:
    """Resource metadata plus authorization servers on one loopback port."""

    def __init__(self, issuers: tuple[str, ...] = ("as1",)) -> None:
        self.issuers = {name: Issuer(name) for name in issuers}
        self.current = issuers[0]           # what the resource metadata names
        self.prm_scopes: list[str] | None = None
        self.prm_requests = 0
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:   # quiet
                pass

            def do_GET(self) -> None:
                fake._get(self)

            def do_POST(self) -> None:
                fake._post(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,),
                                       name="mcpsync-test-fake-as", daemon=True)
        self.thread.start()

    @property
    def mcp_url(self) -> str:
        return f"{self.base}/mcp"

    @property
    def prm_url(self) -> str:
        return f"{self.base}/.well-known/oauth-protected-resource/mcp"

    def issuer_url(self, name: str) -> str:
        return f"{self.base}/{name}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)

    # --- handlers ---------------------------------------------------------------------

    @staticmethod
    def _json(handler: BaseHTTPRequestHandler, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _get(self, h: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(h.path)
        path = parts.path
        if path == "/.well-known/oauth-protected-resource/mcp":
            with self.lock:
                self.prm_requests += 1
            doc: dict[str, Any] = {"resource": self.mcp_url,
                                   "authorization_servers": [self.issuer_url(self.current)]}
            if self.prm_scopes is not None:
                doc["scopes_supported"] = self.prm_scopes
            return self._json(h, 200, doc)
        prefix = "/.well-known/oauth-authorization-server/"
        if path.startswith(prefix) and path[len(prefix):] in self.issuers:
            issuer = self.issuers[path[len(prefix):]]
            base = self.issuer_url(issuer.name)
            meta: dict[str, Any] = {
                "issuer": base,
                "authorization_endpoint": f"{base}/authorize",
                "token_endpoint": f"{base}/token",
                "registration_endpoint": f"{base}/register",
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported": ["none"],
                "grant_types_supported": ["authorization_code", "refresh_token",
                                          "client_credentials"],
                "device_authorization_endpoint": f"{base}/device",
            }
            if issuer.dpop:
                meta["dpop_signing_alg_values_supported"] = ["ES256"]
            if issuer.scopes_supported is not None:
                meta["scopes_supported"] = issuer.scopes_supported
            return self._json(h, 200, meta)
        name, _, rest = path.strip("/").partition("/")
        if rest == "authorize" and name in self.issuers:
            query = {k: v[0] for k, v in parse_qs(parts.query).items()}
            with self.lock:
                self.issuers[name].authorizations.append(query)
            target = query["redirect_uri"] + "?" + urlencode(
                {"code": f"code-{name}", "state": query.get("state", "")})
            h.send_response(302)
            h.send_header("Location", target)
            h.send_header("Content-Length", "0")
            h.end_headers()
            return None
        return self._json(h, 404, {"error": "not_found"})

    def _post(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length).decode()
        name, _, rest = urlsplit(h.path).path.strip("/").partition("/")
        issuer = self.issuers.get(name)
        if issuer is None:
            return self._json(h, 404, {"error": "not_found"})
        if rest == "register":
            body = json.loads(raw)
            with self.lock:
                issuer.registrations.append(body)
                client_id = f"{name}-client-{len(issuer.registrations)}"
            return self._json(h, 201, {"client_id": client_id,
                                       "token_endpoint_auth_method": "none",
                                       "redirect_uris": body.get("redirect_uris", [])})
        if rest == "device":
            return self._json(h, 200, {"device_code": "dev-code", "user_code": "WXYZ-1234",
                                       "verification_uri": f"{self.issuer_url(name)}/verify",
                                       "expires_in": 30, "interval": 0.01})
        if rest == "token":
            form = {k: v[0] for k, v in parse_qs(raw).items()}
            proof = h.headers.get("DPoP")
            with self.lock:
                issuer.token_requests.append(form)
                if proof:
                    issuer.dpop_proofs.append(proof)
                if form.get("grant_type", "").endswith("device_code") and issuer.pending_polls:
                    issuer.pending_polls -= 1
                    pending = True
                else:
                    pending = False
                    issuer.counter += 1
                n = issuer.counter
            if pending:
                return self._json(h, 400, {"error": "authorization_pending"})
            if form.get("assertion") == "refused-jwt":
                return self._json(h, 400, {"error": "invalid_grant",
                                           "error_description": "untrusted workload"})
            if form.get("grant_type") == "refresh_token":
                issuer.refresh_started.set()
                if issuer.refresh_delay is not None:
                    issuer.refresh_delay.wait(10)
                if issuer.refuse_refresh:
                    return self._json(h, 400, {"error": "invalid_grant"})
            token_type = "DPoP" if issuer.dpop and proof else "Bearer"
            answer: dict[str, Any] = {"access_token": f"{name}-at-{n}", "token_type": token_type,
                                      "expires_in": issuer.expires_in,
                                      "refresh_token": f"{name}-rt-{n}"}
            if "scope" in form:
                answer["scope"] = form["scope"]
            return self._json(h, 200, answer)
        return self._json(h, 404, {"error": "not_found"})


@pytest.fixture
def server() -> Iterator[FakeAuthServer]:
    fake = FakeAuthServer(("as1", "as2"))
    yield fake
    fake.close()


@dataclass(frozen=True)
class FakeChallenge:
    """Shaped like mcpsync's HttpChallenge (the provider reads it by duck typing)."""

    status: int
    www_authenticate: tuple[str, ...]
    headers: dict[str, str] = field(default_factory=dict)
    method: str = "POST"
    url: str = ""
    authorization: str | None = None


def follow_once(url: str) -> str:
    """The authorization handler of the conformance client: no redirect following."""
    response = requests.get(url, allow_redirects=False, timeout=10)
    return str(response.headers["Location"])


def make_provider(server: FakeAuthServer, **options: Any) -> OAuthProvider:
    options.setdefault("authorization_handler", follow_once)
    options.setdefault("redirect_uri", "http://127.0.0.1:3000/callback")
    return OAuthProvider(server.mcp_url, **options)


def challenge(server: FakeAuthServer, *, status: int = 401, scope: str | None = None,
              error: str | None = None, authorization: str | None = None) -> FakeChallenge:
    params = [f'resource_metadata="{server.prm_url}"']
    if scope is not None:
        params.append(f'scope="{scope}"')
    if error is not None:
        params.append(f'error="{error}"')
    return FakeChallenge(status, ("Bearer " + ", ".join(params),), url=server.mcp_url,
                         authorization=authorization)


def requested_scopes(issuer: Issuer, index: int = -1) -> list[str] | None:
    scope = issuer.authorizations[index].get("scope")
    return None if scope is None else scope.split(" ")


# --- headers() ----------------------------------------------------------------------------

@pytest.mark.timeout(20)
def test_headers_empty_until_a_401_then_bearer(server: FakeAuthServer) -> None:
    provider = make_provider(server)
    assert provider.headers("POST", server.mcp_url) == {}
    assert provider.token is None
    provider.on_unauthorized(challenge(server))
    as1 = server.issuers["as1"]
    assert len(as1.registrations) == 1 and len(as1.authorizations) == 1
    assert as1.grants("authorization_code")[0]["code"] == "code-as1"
    assert provider.headers("POST", server.mcp_url) == {"Authorization": "Bearer as1-at-1"}
    token = provider.token
    assert token is not None and token.issuer == server.issuer_url("as1")
    assert token.resource == server.mcp_url
    # The authorization request carried PKCE S256 and the resource (§7).
    auth = as1.authorizations[0]
    assert auth["code_challenge_method"] == "S256" and auth["resource"] == server.mcp_url


@pytest.mark.timeout(20)
def test_a_stored_token_is_sent_from_the_first_request(server: FakeAuthServer) -> None:
    store = MemoryTokenStore()
    first = make_provider(server, store=store)
    first.on_unauthorized(challenge(server))
    before = (server.prm_requests, len(server.issuers["as1"].token_requests))
    second = make_provider(server, store=store)
    assert second.headers("GET", server.mcp_url) == {"Authorization": "Bearer as1-at-1"}
    # No network was needed for that: the token came from the store.
    assert (server.prm_requests, len(server.issuers["as1"].token_requests)) == before


@pytest.mark.timeout(20)
def test_logout_forgets_the_token(server: FakeAuthServer) -> None:
    store = MemoryTokenStore()
    provider = make_provider(server, store=store)
    provider.login()
    assert provider.token is not None
    provider.logout()
    assert provider.token is None and provider.headers("POST", server.mcp_url) == {}
    assert make_provider(server, store=store).token is None


# --- scopes (§6) ---------------------------------------------------------------------------

@pytest.mark.timeout(20)
def test_challenge_scope_wins_over_scopes_supported(server: FakeAuthServer) -> None:
    server.prm_scopes = ["x", "y"]
    make_provider(server).on_unauthorized(challenge(server, scope="b a"))
    assert requested_scopes(server.issuers["as1"]) == ["b", "a"]


@pytest.mark.timeout(20)
def test_scopes_supported_used_in_order_without_challenge_scope(
        server: FakeAuthServer) -> None:
    server.prm_scopes = ["mcp:read", "mcp:write", "mcp:basic"]
    make_provider(server).on_unauthorized(challenge(server))
    assert requested_scopes(server.issuers["as1"]) == ["mcp:read", "mcp:write", "mcp:basic"]


@pytest.mark.timeout(20)
def test_scope_omitted_when_nothing_defines_one(server: FakeAuthServer) -> None:
    make_provider(server).on_unauthorized(challenge(server))
    assert requested_scopes(server.issuers["as1"]) is None
    assert "scope" not in server.issuers["as1"].grants("authorization_code")[0]


@pytest.mark.timeout(20)
def test_offline_access_added_only_when_the_authorization_server_lists_it(
        server: FakeAuthServer) -> None:
    server.issuers["as1"].scopes_supported = ["mcp", "offline_access"]
    make_provider(server).on_unauthorized(challenge(server, scope="mcp"))
    assert requested_scopes(server.issuers["as1"]) == ["mcp", "offline_access"]


@pytest.mark.timeout(20)
def test_offline_access_never_because_the_resource_or_challenge_says_so(
        server: FakeAuthServer) -> None:
    server.issuers["as1"].scopes_supported = ["mcp"]
    server.prm_scopes = ["mcp", "offline_access"]
    provider = make_provider(server)
    provider.on_unauthorized(challenge(server))
    assert requested_scopes(server.issuers["as1"]) == ["mcp"]
    provider.on_unauthorized(challenge(server, scope="mcp offline_access",
                                       authorization="Bearer as1-at-1"))
    assert "offline_access" not in (requested_scopes(server.issuers["as1"]) or [])


@pytest.mark.timeout(20)
def test_step_up_requests_the_union_of_scopes(server: FakeAuthServer) -> None:
    provider = make_provider(server)
    provider.on_unauthorized(challenge(server, scope="mcp:basic"))
    assert provider.headers("POST", server.mcp_url) == {"Authorization": "Bearer as1-at-1"}
    provider.on_unauthorized(challenge(server, status=403, scope="mcp:write",
                                       error="insufficient_scope",
                                       authorization="Bearer as1-at-1"))
    as1 = server.issuers["as1"]
    assert len(as1.authorizations) == 2, "a step-up re-authorizes (no refresh)"
    assert requested_scopes(as1) == ["mcp:basic", "mcp:write"]
    assert provider.headers("POST", server.mcp_url) == {"Authorization": "Bearer as1-at-2"}
    # A second step-up keeps accumulating.
    provider.on_unauthorized(challenge(server, status=403, scope="mcp:admin",
                                       error="insufficient_scope",
                                       authorization="Bearer as1-at-2"))
    assert requested_scopes(as1) == ["mcp:basic", "mcp:write", "mcp:admin"]


# --- on_unauthorized (§10) -----------------------------------------------------------------

@pytest.mark.timeout(20)
def test_a_challenge_for_a_replaced_token_does_nothing(server: FakeAuthServer) -> None:
    provider = make_provider(server)
    provider.on_unauthorized(challenge(server))
    seen = (server.prm_requests, len(server.issuers["as1"].token_requests),
            len(server.issuers["as1"].authorizations))
    provider.on_unauthorized(challenge(server, authorization="Bearer some-older-token"))
    assert (server.prm_requests, len(server.issuers["as1"].token_requests),
            len(server.issuers["as1"].authorizations)) == seen
    assert provider.headers("POST", server.mcp_url) == {"Authorization": "Bearer as1-at-1"}


@pytest.mark.timeout(20)
def test_a_401_for_the_current_token_refreshes_after_refetching_metadata(
        server: FakeAuthServer) -> None:
    provider = make_provider(server)
    provider.on_unauthorized(challenge(server))
    prm_before = server.prm_requests
    provider.on_unauthorized(challenge(server, authorization="Bearer as1-at-1"))
    as1 = server.issuers["as1"]
    assert server.prm_requests == prm_before + 1, "resource metadata is fetched on every 401"
    refreshes = as1.grants("refresh_token")
    assert len(refreshes) == 1 and refreshes[0]["refresh_token"] == "as1-rt-1"
    assert refreshes[0]["resource"] == server.mcp_url and "scope" not in refreshes[0]
    assert len(as1.authorizations) == 1, "refresh, not a new login"
    assert provider.headers("POST", server.mcp_url) == {"Authorization": "Bearer as1-at-2"}


@pytest.mark.timeout(20)
def test_migration_registers_anew_and_never_reuses_old_credentials(
        server: FakeAuthServer) -> None:
    store = MemoryTokenStore()
    provider = make_provider(server, store=store)
    provider.on_unauthorized(challenge(server))
    assert provider.token is not None
    assert provider.token.client_id == "as1-client-1"
    server.current = "as2"
    provider.on_unauthorized(challenge(server, authorization="Bearer as1-at-1"))
    as2 = server.issuers["as2"]
    assert len(as2.registrations) == 1, "registered with the new authorization server"
    assert all(a["client_id"] != "as1-client-1" for a in as2.authorizations)
    assert all(t.get("client_id") != "as1-client-1" for t in as2.token_requests)
    assert not as2.grants("refresh_token"), "the old refresh token is not spent at as2"
    assert server.issuers["as1"].grants("refresh_token") == []
    token = provider.token
    assert token is not None and token.issuer == server.issuer_url("as2")
    assert provider.headers("POST", server.mcp_url) == {"Authorization": "Bearer as2-at-1"}


@pytest.mark.timeout(20)
def test_migration_with_preregistered_credentials_raises(server: FakeAuthServer) -> None:
    provider = make_provider(server, client_id="fixed-client")
    provider.on_unauthorized(challenge(server))
    assert server.issuers["as1"].authorizations[0]["client_id"] == "fixed-client"
    server.current = "as2"
    with pytest.raises(AuthorizationServerChanged) as info:
        provider.on_unauthorized(challenge(server, authorization="Bearer as1-at-1"))
    assert info.value.old_issuer == server.issuer_url("as1")
    assert info.value.new_issuer == server.issuer_url("as2")
    assert not server.issuers["as2"].authorizations


@pytest.mark.timeout(20)
def test_migration_raises_for_a_stored_preregistered_login(server: FakeAuthServer) -> None:
    """The pre-registered client_id belongs to the issuer of the stored token, even in a
    new process that has not seen that issuer yet."""
    store = MemoryTokenStore()
    make_provider(server, store=store, client_id="fixed-client").login()
    server.current = "as2"
    later = make_provider(server, store=store, client_id="fixed-client")
    assert later.headers("POST", server.mcp_url) == {"Authorization": "Bearer as1-at-1"}
    with pytest.raises(AuthorizationServerChanged):
        later.on_unauthorized(challenge(server, authorization="Bearer as1-at-1"))
    assert not server.issuers["as2"].authorizations
    assert not server.issuers["as2"].token_requests


@pytest.mark.timeout(20)
def test_migration_with_credentials_for_both_issuers_proceeds(server: FakeAuthServer) -> None:
    ids = {server.issuer_url("as1"): "id-for-as1", server.issuer_url("as2"): "id-for-as2"}
    provider = make_provider(server, client_id=ids)
    provider.on_unauthorized(challenge(server))
    server.current = "as2"
    provider.on_unauthorized(challenge(server, authorization="Bearer as1-at-1"))
    assert server.issuers["as2"].authorizations[0]["client_id"] == "id-for-as2"
    assert not server.issuers["as2"].registrations


@pytest.mark.timeout(20)
def test_interactive_false_raises_login_required(server: FakeAuthServer) -> None:
    provider = make_provider(server, interactive=False)
    with pytest.raises(LoginRequired) as info:
        provider.on_unauthorized(challenge(server))
    assert info.value.step == "authorization"
    assert server.issuers["as1"].authorizations == []


@pytest.mark.timeout(20)
def test_interactive_false_still_refreshes(server: FakeAuthServer) -> None:
    store = MemoryTokenStore()
    make_provider(server, store=store).on_unauthorized(challenge(server))
    quiet = make_provider(server, store=store, interactive=False)
    quiet.on_unauthorized(challenge(server, authorization="Bearer as1-at-1"))
    assert quiet.headers("POST", server.mcp_url) == {"Authorization": "Bearer as1-at-2"}
    assert len(server.issuers["as1"].authorizations) == 1


@pytest.mark.timeout(20)
def test_client_credentials_grant(server: FakeAuthServer) -> None:
    provider = make_provider(server, grant="client_credentials", client_id="svc",
                             client_secret="svc-secret", interactive=False)
    provider.on_unauthorized(challenge(server, scope="jobs"))
    grant = server.issuers["as1"].grants("client_credentials")
    assert len(grant) == 1 and grant[0]["scope"] == "jobs"
    assert grant[0]["resource"] == server.mcp_url
    assert provider.headers("POST", server.mcp_url) == {"Authorization": "Bearer as1-at-1"}


# --- renewal from headers() ----------------------------------------------------------------

def seed_token(server: FakeAuthServer, store: TokenStore, *, left: float,
               lifetime: float = 100.0, client_id: str = "pre",
               refresh_token: str | None = "seed-rt") -> Token:
    """Put a token for the fake server in ``store`` with ``left`` seconds to live."""
    now = time.time()
    token = Token(access_token="seed-at", refresh_token=refresh_token, expires_at=now + left,
                  issued_at=now + left - lifetime, issuer=server.issuer_url("as1"),
                  client_id=client_id, resource=server.mcp_url)
    store.put(credential_key(token.issuer, token.client_id, token.resource), token.to_dict())
    store.put(resource_index_key(server.mcp_url),
              {"issuer": token.issuer, "client_id": token.client_id,
               "resource": token.resource})
    return token


@pytest.mark.timeout(20)
def test_headers_refreshes_inside_the_margin(server: FakeAuthServer) -> None:
    store = MemoryTokenStore()
    seed_token(server, store, left=20)          # margin min(60, 50) = 50 s: due
    provider = make_provider(server, store=store, client_id="pre")
    assert provider.headers("POST", server.mcp_url) == {"Authorization": "Bearer as1-at-1"}
    refreshes = server.issuers["as1"].grants("refresh_token")
    assert len(refreshes) == 1 and refreshes[0]["refresh_token"] == "seed-rt"
    stored = store.get(credential_key(server.issuer_url("as1"), "pre", server.mcp_url))
    assert stored is not None and stored["access_token"] == "as1-at-1"
    assert stored["refresh_token"] == "as1-rt-1", "rotation: the new refresh token is kept"


@pytest.mark.timeout(20)
def test_headers_does_not_refresh_outside_the_margin(server: FakeAuthServer) -> None:
    store = MemoryTokenStore()
    seed_token(server, store, left=90)
    provider = make_provider(server, store=store, client_id="pre")
    assert provider.headers("POST", server.mcp_url) == {"Authorization": "Bearer seed-at"}
    assert server.issuers["as1"].token_requests == []


# --- other grants, DPoP, secrets -----------------------------------------------------------

@pytest.mark.timeout(20)
def test_a_refused_refresh_token_falls_back_to_a_full_authorization(
        server: FakeAuthServer) -> None:
    provider = make_provider(server)
    provider.on_unauthorized(challenge(server))
    server.issuers["as1"].refuse_refresh = True
    provider.on_unauthorized(challenge(server, authorization="Bearer as1-at-1"))
    as1 = server.issuers["as1"]
    assert len(as1.grants("refresh_token")) == 1
    assert len(as1.authorizations) == 2
    # Token number 2 went to the refused refresh; number 3 is the new login's.
    assert provider.headers("POST", server.mcp_url) == {"Authorization": "Bearer as1-at-3"}
    token = provider.token
    assert token is not None and token.refresh_token == "as1-rt-3"


@pytest.mark.timeout(20)
def test_device_code_grant(server: FakeAuthServer) -> None:
    shown: list[Any] = []
    provider = OAuthProvider(server.mcp_url, grant="device_code",
                             device_code_handler=shown.append)
    token = provider.login()
    assert [info.user_code for info in shown] == ["WXYZ-1234"]
    polls = server.issuers["as1"].grants("urn:ietf:params:oauth:grant-type:device_code")
    assert len(polls) == 2, "one authorization_pending, then the token"
    assert polls[-1]["resource"] == server.mcp_url
    assert token.access_token == "as1-at-1" and provider.token == token


@pytest.mark.timeout(20)
def test_device_code_is_interactive(server: FakeAuthServer) -> None:
    provider = OAuthProvider(server.mcp_url, grant="device_code", interactive=False,
                             device_code_handler=lambda info: None)
    with pytest.raises(LoginRequired):
        provider.login()
    assert server.issuers["as1"].token_requests == []


@pytest.mark.timeout(20)
def test_an_expired_enterprise_id_token_raises_login_required(server: FakeAuthServer) -> None:
    def b64(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    expired = f"{b64({'alg': 'none'})}.{b64({'exp': int(time.time()) - 60})}.sig"
    provider = OAuthProvider(server.mcp_url, grant="id_jag", client_id="c",
                             client_secret="s", id_token=expired, idp_client_id="idp-c",
                             idp_token_endpoint=f"{server.base}/idp/token",
                             interactive=False)
    with pytest.raises(LoginRequired):
        provider.login()
    assert server.issuers["as1"].token_requests == []


def _claims(jwt: str) -> dict[str, Any]:
    part = jwt.split(".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))))


@pytest.mark.timeout(20)
def test_dpop_challenge_binds_the_token_and_nonces_are_followed(
        server: FakeAuthServer) -> None:
    as1 = server.issuers["as1"]
    as1.dpop = True
    provider = make_provider(server)
    provider.on_unauthorized(FakeChallenge(
        401, (f'DPoP algs="ES256", resource_metadata="{server.prm_url}"',), url=server.mcp_url))
    assert len(as1.dpop_proofs) == 1 and "ath" not in _claims(as1.dpop_proofs[0])
    first = provider.headers("POST", server.mcp_url)
    assert first["Authorization"] == "DPoP as1-at-1"
    proof = _claims(first["DPoP"])
    assert proof["htm"] == "POST" and proof["htu"] == server.mcp_url and "nonce" not in proof
    token = provider.token
    assert token is not None and token.dpop_jwk is not None
    # A use_dpop_nonce 401 only records the nonce: nothing goes over the wire.
    seen = (server.prm_requests, len(as1.token_requests))
    provider.on_unauthorized(FakeChallenge(
        401, ('DPoP error="use_dpop_nonce", error_description="nonce"',),
        headers={"DPoP-Nonce": "n-1"}, url=server.mcp_url,
        authorization=first["Authorization"]))
    assert (server.prm_requests, len(as1.token_requests)) == seen
    second = provider.headers("POST", server.mcp_url)
    assert _claims(second["DPoP"])["nonce"] == "n-1"
    assert _claims(second["DPoP"])["jti"] != proof["jti"], "a fresh proof every request"
    provider.on_response({"DPoP-Nonce": "n-2"})
    assert _claims(provider.headers("GET", server.mcp_url)["DPoP"])["nonce"] == "n-2"


def test_repr_shows_no_secret() -> None:
    provider = OAuthProvider("https://mcp.example.com/mcp", client_id="cid",
                             client_secret="TOP-SECRET-VALUE", grant="client_credentials")
    assert "TOP-SECRET-VALUE" not in repr(provider)
    provider.close()


def test_grant_options_are_checked() -> None:
    with pytest.raises(ValueError, match="grant must be one of"):
        OAuthProvider("https://mcp.example.com/mcp", grant="password")
    with pytest.raises(ValueError, match="assertion_provider"):
        OAuthProvider("https://mcp.example.com/mcp", grant="jwt_bearer")
    with pytest.raises(ValueError, match="id_token"):
        OAuthProvider("https://mcp.example.com/mcp", grant="id_jag")


@pytest.mark.timeout(20)
def test_fills_mcpsyncs_auth_hooks_and_reads_its_challenge(server: FakeAuthServer) -> None:
    """Structural fit with mcpsync (tests may import it; mcpauth itself never does)."""
    import mcpsync

    provider = make_provider(server)
    assert isinstance(provider, mcpsync.AuthHooks)
    provider.on_unauthorized(mcpsync.HttpChallenge(
        401, (f'Bearer scope="a", resource_metadata="{server.prm_url}"',),
        headers={"Content-Type": "application/json"}, method="POST", url=server.mcp_url))
    assert requested_scopes(server.issuers["as1"]) == ["a"]
    assert provider.headers("POST", server.mcp_url) == {"Authorization": "Bearer as1-at-1"}


@pytest.mark.timeout(20)
def test_a_stored_registration_is_reused_on_its_port_and_replaced_when_taken(
        server: FakeAuthServer) -> None:
    import socket

    store = MemoryTokenStore()
    as1 = server.issuers["as1"]

    def login() -> int:
        OAuthProvider(server.mcp_url, store=store, authorization_handler=follow_once).login()
        port = urlsplit(as1.authorizations[-1]["redirect_uri"]).port
        assert port is not None
        return port

    first = login()
    assert len(as1.registrations) == 1
    assert as1.registrations[0]["redirect_uris"] == [f"http://127.0.0.1:{first}/callback"]
    assert login() == first and len(as1.registrations) == 1, "same port, same registration"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", first))
        taken.listen()
        third = login()
    assert third != first and len(as1.registrations) == 2, "port taken: registered anew"


@pytest.mark.timeout(20)
def test_workload_identity_asks_for_a_fresh_jwt_and_never_retries_a_refusal(
        server: FakeAuthServer) -> None:
    jwts = iter(["jwt-1", "jwt-2", "refused-jwt"])
    calls: list[str] = []

    def assertion() -> str:
        calls.append(next(jwts))
        return calls[-1]

    provider = make_provider(server, grant="jwt_bearer", client_id="workload",
                             assertion_provider=assertion, interactive=False)
    provider.on_unauthorized(challenge(server))
    provider.on_unauthorized(challenge(server, authorization="Bearer as1-at-1"))
    as1 = server.issuers["as1"]
    grants = as1.grants("urn:ietf:params:oauth:grant-type:jwt-bearer")
    assert [g["assertion"] for g in grants] == ["jwt-1"], "the refresh token came first"
    assert grants[0]["client_id"] == "workload" and grants[0]["resource"] == server.mcp_url
    # A refused refresh token falls back to the grant itself, with a fresh JWT.
    as1.refuse_refresh = True
    provider.on_unauthorized(challenge(server, authorization="Bearer as1-at-2"))
    grants = as1.grants("urn:ietf:params:oauth:grant-type:jwt-bearer")
    assert [g["assertion"] for g in grants] == ["jwt-1", "jwt-2"]
    # A refused JWT is final: one request, no retry, no other grant.
    before = len(as1.token_requests)
    with pytest.raises(TokenRequestError) as refused:
        provider.login()
    assert refused.value.error == "invalid_grant"
    assert len(as1.token_requests) == before + 1
    assert as1.token_requests[-1]["assertion"] == "refused-jwt"
    assert calls == ["jwt-1", "jwt-2", "refused-jwt"]


@pytest.mark.timeout(20)
def test_an_expired_client_credentials_token_is_fetched_again_from_headers(
        server: FakeAuthServer) -> None:
    store = MemoryTokenStore()
    seed_token(server, store, left=-5, client_id="svc", refresh_token=None)
    provider = make_provider(server, store=store, grant="client_credentials", client_id="svc",
                             client_secret="svc-secret", interactive=False)
    assert provider.headers("POST", server.mcp_url) == {"Authorization": "Bearer as1-at-1"}
    assert len(server.issuers["as1"].grants("client_credentials")) == 1


@pytest.mark.timeout(20)
def test_an_expired_login_without_refresh_token_waits_for_the_401(
        server: FakeAuthServer) -> None:
    """headers() never starts an interactive login: the expired token goes out, and its 401
    brings on_unauthorized."""
    store = MemoryTokenStore()
    seed_token(server, store, left=-5, refresh_token=None)
    provider = make_provider(server, store=store, client_id="pre")
    assert provider.headers("POST", server.mcp_url) == {"Authorization": "Bearer seed-at"}
    assert server.issuers["as1"].token_requests == [] and server.prm_requests == 0
    provider.on_unauthorized(challenge(server, authorization="Bearer seed-at"))
    assert len(server.issuers["as1"].authorizations) == 1
    assert provider.headers("POST", server.mcp_url) == {"Authorization": "Bearer as1-at-1"}
