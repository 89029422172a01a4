"""OAuthProvider against a small real loopback server.

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
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests

import mcpauth
from mcpauth import (
    AuthorizationServerChanged,
    LoginRequired,
    MemoryTokenStore,
    OAuthProvider,
    TokenRequestError,
)
from mcpauth.tokens import credential_key, registration_key

from ._servers import (
    FakeAuthServer,
    FakeChallenge,
    challenge,
    follow_once,
    make_provider,
    requested_scopes,
    seed_token,
)


@pytest.fixture
def server() -> Iterator[FakeAuthServer]:
    fake = FakeAuthServer(("as1", "as2", "idp"))
    yield fake
    fake.close()


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
    # The authorization request carried PKCE S256 and the resource (RFC 8707).
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


# --- scopes ---------------------------------------------------------------------------

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


# --- on_unauthorized -----------------------------------------------------------------

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


@pytest.mark.timeout(20)
def test_headers_only_for_urls_inside_the_tokens_resource(server: FakeAuthServer) -> None:
    """Defence in depth: whoever asks, the token goes only to the resource it was issued for
    (same origin, a path-segment prefix); anything else gets no Authorization at all."""
    store = MemoryTokenStore()
    seed_token(server, store, left=3600)
    provider = make_provider(server, store=store, client_id="pre")
    mcp = server.mcp_url                                  # http://127.0.0.1:<port>/mcp
    parts = urlsplit(mcp)
    origin = f"{parts.scheme}://{parts.netloc}"
    bearer = {"Authorization": "Bearer seed-at"}
    for inside in (mcp, mcp + "/", mcp + "/messages?session=1",
                   f"{parts.scheme}://{parts.netloc.upper()}/mcp"):
        assert provider.headers("POST", inside) == bearer, inside
    other_port = f"{parts.scheme}://127.0.0.1:{(parts.port or 80) + 1}/mcp"
    for outside in (other_port, f"{origin}/mcpx", f"{origin}/other/mcp", f"{origin}/",
                    f"https://{parts.netloc}/mcp", f"http://localhost:{parts.port}/mcp"):
        assert provider.headers("POST", outside) == {}, outside
    # The refusal was not cached as the answer for the resource itself.
    assert provider.headers("GET", mcp) == bearer
    assert server.issuers["as1"].token_requests == []


# --- renewal from headers() ----------------------------------------------------------------

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


# --- audit additions ----------------------------------

@pytest.mark.timeout(20)
def test_an_expired_dynamic_client_secret_registers_anew_instead_of_refreshing(
        server: FakeAuthServer) -> None:
    """A past client_secret_expires_at means registering again. The refresh token was
    issued to that client, so it is not spent with the dead secret: a full login follows."""
    store = MemoryTokenStore()
    redirect = "http://127.0.0.1:3000/callback"
    store.put(registration_key(server.issuer_url("as1")), {
        "client_id": "old-dyn", "client_secret": "old-secret",
        "token_endpoint_auth_method": "client_secret_basic", "redirect_uris": [redirect],
        "client_secret_expires_at": time.time() - 60, "issuer": server.issuer_url("as1"),
        "source": "dynamic"})
    seed_token(server, store, left=1000, client_id="old-dyn")
    provider = make_provider(server, store=store, redirect_uri=redirect)
    assert provider.headers("POST", server.mcp_url) == {"Authorization": "Bearer seed-at"}
    provider.on_unauthorized(challenge(server, authorization="Bearer seed-at"))
    as1 = server.issuers["as1"]
    assert as1.grants("refresh_token") == [], "the expired client does not refresh"
    assert len(as1.registrations) == 1 and as1.authorizations[0]["client_id"] == "as1-client-1"
    token = provider.token
    assert token is not None and token.client_id == "as1-client-1"
    stored = store.get(registration_key(server.issuer_url("as1")))
    assert stored is not None and stored["client_id"] == "as1-client-1"


@pytest.mark.timeout(20)
def test_choose_authorization_server_picks_from_the_list(server: FakeAuthServer) -> None:
    """The first entry of authorization_servers, unless the caller chooses."""
    server.prm_servers = [server.issuer_url("as1"), server.issuer_url("as2")]
    offered: list[list[str]] = []

    def choose(servers: list[str]) -> str:
        offered.append(list(servers))
        return servers[1]

    make_provider(server, choose_authorization_server=choose).login()
    assert offered == [server.prm_servers]
    assert server.issuers["as1"].authorizations == []
    assert len(server.issuers["as2"].authorizations) == 1
    make_provider(server).login()
    assert len(server.issuers["as1"].authorizations) == 1, "default: the first entry"


@pytest.mark.timeout(20)
def test_metadata_is_cached_per_provider_but_resource_metadata_is_fetched_per_401(
        server: FakeAuthServer) -> None:
    provider = make_provider(server)
    provider.on_unauthorized(challenge(server))
    assert server.metadata_requests == ["as1"] and server.prm_requests == 1
    provider.on_unauthorized(challenge(server, authorization="Bearer as1-at-1"))
    provider.on_unauthorized(challenge(server, authorization="Bearer as1-at-2"))
    assert server.prm_requests == 3, "resource metadata again on every 401"
    assert server.metadata_requests == ["as1"], "authorization-server metadata is cached"
    make_provider(server).login()
    assert server.metadata_requests == ["as1", "as1"], "the cache is per provider"


@pytest.mark.timeout(20)
def test_client_credentials_step_up_requests_the_union_of_scopes(
        server: FakeAuthServer) -> None:
    """Client-credentials clients step up the same way as a person's login."""
    provider = make_provider(server, grant="client_credentials", client_id="svc",
                             client_secret="svc-secret", interactive=False)
    provider.on_unauthorized(challenge(server, scope="jobs:read"))
    provider.on_unauthorized(challenge(server, status=403, scope="jobs:write",
                                       error="insufficient_scope",
                                       authorization="Bearer as1-at-1"))
    grants = server.issuers["as1"].grants("client_credentials")
    assert [g["scope"] for g in grants] == ["jobs:read", "jobs:read jobs:write"]
    assert server.issuers["as1"].grants("refresh_token") == [], "a step-up never refreshes"
    assert provider.headers("POST", server.mcp_url) == {"Authorization": "Bearer as1-at-2"}


@pytest.mark.timeout(20)
def test_enterprise_id_jag_exchanges_at_the_idp_then_presents_the_id_jag(
        server: FakeAuthServer) -> None:
    """ID-JAG: token exchange at the IdP for the MCP authorization server's issuer, then
    the JWT-bearer grant with the ID-JAG; an ID token provider is asked each time."""
    def b64(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    id_token = f"{b64({'alg': 'none'})}.{b64({'exp': int(time.time()) + 600})}.sig"
    asked: list[int] = []

    def fresh_id_token() -> str:
        asked.append(1)
        return id_token

    provider = make_provider(server, grant="id_jag", client_id="ent", client_secret="ent-s",
                             id_token=fresh_id_token, idp_client_id="idp-client",
                             idp_issuer=server.issuer_url("idp"), interactive=False)
    provider.on_unauthorized(challenge(server, scope="mcp"))
    [exchange] = server.issuers["idp"].token_requests
    assert exchange == {
        "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
        "requested_token_type": "urn:ietf:params:oauth:token-type:id-jag",
        "subject_token": id_token,
        "subject_token_type": "urn:ietf:params:oauth:token-type:id_token",
        "audience": server.issuer_url("as1"), "resource": server.mcp_url, "scope": "mcp",
        "client_id": "idp-client"}
    [bearer] = server.issuers["as1"].token_requests
    assert bearer["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer"
    assert bearer["assertion"] == "idp-id-jag-1" and bearer["resource"] == server.mcp_url
    assert provider.headers("POST", server.mcp_url) == {"Authorization": "Bearer as1-at-1"}
    assert asked == [1]


@pytest.mark.timeout(20)
def test_an_expired_id_jag_token_repeats_both_steps(server: FakeAuthServer) -> None:
    """ID-JAG: on expiry (no refresh token) the ID token is exchanged again, then presented."""
    def b64(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    id_tokens = iter(f"{b64({'alg': 'none'})}.{b64({'exp': int(time.time()) + 600, 'n': n})}.s"
                     for n in range(2))
    as1 = server.issuers["as1"]
    as1.refresh_tokens = False
    as1.expires_in = 0                      # expired on arrival
    provider = make_provider(server, grant="id_jag", client_id="ent", client_secret="ent-s",
                             id_token=lambda: next(id_tokens), idp_client_id="idp-client",
                             idp_token_endpoint=server.issuer_url("idp") + "/token",
                             interactive=False)
    assert provider.login().access_token == "as1-at-1"
    as1.expires_in = 3600
    assert provider.headers("POST", server.mcp_url) == {"Authorization": "Bearer as1-at-2"}
    exchanges = server.issuers["idp"].token_requests
    assert len(exchanges) == 2 and exchanges[0]["subject_token"] != exchanges[1]["subject_token"]
    assert [g["assertion"] for g in as1.grants(
        "urn:ietf:params:oauth:grant-type:jwt-bearer")] == ["idp-id-jag-1", "idp-id-jag-2"]


class RecordingSession(requests.Session):
    """A real session that notes the options of every request mcpauth makes."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, str, Any, Any, Any]] = []

    def request(self, method: Any, url: Any, *args: Any,
                **kwargs: Any) -> requests.Response:
        self.calls.append((str(method), urlsplit(str(url)).path, kwargs.get("timeout"),
                           kwargs.get("allow_redirects"), kwargs.get("stream")))
        return super().request(method, url, *args, **kwargs)


@pytest.mark.timeout(20)
def test_every_request_has_the_timeouts_the_cap_and_no_redirects(
        server: FakeAuthServer) -> None:
    """10 s to connect, 30 s to read, streamed (so the 1 MiB cap applies) and never
    redirected by requests itself, on every request: metadata, registration, token, device
    and IdP endpoints alike."""
    session = RecordingSession()
    provider = make_provider(server, session=session)
    provider.on_unauthorized(challenge(server))
    provider.on_unauthorized(challenge(server, authorization="Bearer as1-at-1"))   # refresh
    OAuthProvider(server.mcp_url, grant="device_code", session=session,
                  device_code_handler=lambda info: None).login()
    make_provider(server, grant="client_credentials", client_id="svc", client_secret="s",
                  session=session).login()
    make_provider(server, grant="id_jag", client_id="ent", client_secret="ent-s",
                  id_token="a.b.c", idp_client_id="idp-client",
                  idp_token_endpoint=server.issuer_url("idp") + "/token",
                  session=session).login()
    paths = {path for _, path, *_ in session.calls}
    assert paths >= {"/.well-known/oauth-protected-resource/mcp",
                     "/.well-known/oauth-authorization-server/as1", "/as1/register",
                     "/as1/token", "/as1/device", "/idp/token"}
    assert {(timeout, redirects, stream) for *_, timeout, redirects, stream
            in session.calls} == {((10.0, 30.0), False, True)}
    session.close()


@pytest.mark.timeout(20)
def test_default_login_opens_the_browser_and_waits_on_the_loopback_listener(
        server: FakeAuthServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """With no handler: the http(s) authorization URL goes to webbrowser.open, and the
    browser's redirect lands on 127.0.0.1/callback, served by the mcpauth-callback thread."""
    import threading
    import webbrowser

    opened: list[str] = []
    browsers: list[threading.Thread] = []

    def browser(url: str, *args: Any, **kwargs: Any) -> bool:
        opened.append(url)
        # What a browser does: follow the authorization server's redirect to the listener.
        browsers.append(threading.Thread(target=requests.get, args=(url,),
                                         kwargs={"timeout": 10},
                                         name="mcpsync-test-browser", daemon=True))
        browsers[-1].start()
        return True

    monkeypatch.setattr(webbrowser, "open", browser)
    monkeypatch.setattr(webbrowser, "get", lambda *a, **k: object())
    provider = OAuthProvider(server.mcp_url)
    token = provider.login()
    for thread in browsers:
        thread.join(10)
    assert token.access_token == "as1-at-1"
    [url] = opened
    assert urlsplit(url).scheme in ("http", "https")
    redirect = server.issuers["as1"].authorizations[0]["redirect_uri"]
    assert redirect.startswith("http://127.0.0.1:") and redirect.endswith("/callback")
    assert not [t for t in threading.enumerate() if t.name == "mcpauth-callback"]


@pytest.mark.timeout(20)
def test_without_browser_or_handler_the_device_flow_is_used(
        server: FakeAuthServer, monkeypatch: pytest.MonkeyPatch) -> None:
    import webbrowser

    def no_browser(*args: Any, **kwargs: Any) -> Any:
        raise webbrowser.Error("could not locate runnable browser")

    def must_not_open(*args: Any, **kwargs: Any) -> bool:
        raise AssertionError("no browser exists")

    monkeypatch.setattr(webbrowser, "get", no_browser)
    monkeypatch.setattr(webbrowser, "open", must_not_open)
    shown: list[Any] = []
    token = OAuthProvider(server.mcp_url, device_code_handler=shown.append).login()
    assert [info.user_code for info in shown] == ["WXYZ-1234"]
    assert token.access_token == "as1-at-1"
    assert server.issuers["as1"].authorizations == []
    [registered] = server.issuers["as1"].registrations
    assert registered["grant_types"] == ["urn:ietf:params:oauth:grant-type:device_code",
                                         "refresh_token"]


@pytest.mark.timeout(20)
@pytest.mark.parametrize(("setting", "prm_requires", "scheme", "bound"), [
    (None, True, "Bearer", True),      # the resource metadata requires DPoP
    (None, False, "DPoP", True),       # the resource's challenge asks for it
    (True, False, "Bearer", True),     # the caller asks for it
    (False, False, "DPoP", False),     # the caller refuses it
    (None, False, "Bearer", False),    # nobody asks
])
def test_when_dpop_is_used(server: FakeAuthServer, setting: bool | None, prm_requires: bool,
                           scheme: str, bound: bool) -> None:
    """DPoP when the resource asks (challenge or metadata) or the caller sets dpop=True;
    dpop=False never."""
    as1 = server.issuers["as1"]
    as1.dpop = True
    if prm_requires:
        server.prm_extra = {"dpop_bound_access_tokens_required": True}
    provider = make_provider(server, dpop=setting)
    provider.on_unauthorized(FakeChallenge(
        401, (f'{scheme} resource_metadata="{server.prm_url}"',), url=server.mcp_url))
    headers = provider.headers("POST", server.mcp_url)
    assert headers["Authorization"] == ("DPoP as1-at-1" if bound else "Bearer as1-at-1")
    assert ("DPoP" in headers) is bound
    assert len(as1.dpop_proofs) == (1 if bound else 0)
    token = provider.token
    assert token is not None and (token.dpop_jwk is not None) is bound


@pytest.mark.timeout(20)
def test_dpop_without_es256_at_the_authorization_server_is_a_dpop_error(
        server: FakeAuthServer) -> None:
    from mcpauth import DPoPError

    provider = make_provider(server, dpop=True)
    with pytest.raises(DPoPError, match="dpop_signing_alg_values_supported: absent") as info:
        provider.on_unauthorized(challenge(server))
    assert info.value.url == server.issuer_url("as1")
    assert server.issuers["as1"].token_requests == []


@pytest.mark.timeout(20)
@pytest.mark.parametrize(("redirect", "kind"), [
    ("http://127.0.0.1:3000/callback", "native"),
    ("http://localhost:3000/callback", "native"),
    ("https://app.example.com/oauth/callback", "web"),
])
def test_dynamic_registration_application_type(server: FakeAuthServer, redirect: str,
                                               kind: str) -> None:
    """Native for a loopback redirect (or CLI use), web for a non-loopback https one."""
    make_provider(server, redirect_uri=redirect).login()
    [registered] = server.issuers["as1"].registrations
    assert registered["application_type"] == kind
    assert registered["redirect_uris"] == [redirect]


# --- registration grant types (RFC 7591 §2; a departure from auth.md §5) --------------------

DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"


@pytest.mark.timeout(20)
def test_the_fake_refuses_a_grant_the_client_did_not_register(server: FakeAuthServer) -> None:
    """The strict fake really bites: the device-code grant of a client registered for
    authorization_code only is refused, as authlib's server refuses it."""
    as1 = server.issuers["as1"]
    as1.enforce_grant_types = True
    base = server.issuer_url("as1")
    client = requests.post(f"{base}/register", timeout=5, json={
        "redirect_uris": ["http://127.0.0.1:3000/callback"],
        "grant_types": ["authorization_code", "refresh_token"]}).json()["client_id"]
    as1.pending_polls = 0
    answer = requests.post(f"{base}/token", timeout=5, data={
        "grant_type": DEVICE_GRANT, "device_code": "dev-code", "client_id": client})
    assert answer.status_code == 400 and answer.json()["error"] == "unauthorized_client"


@pytest.mark.timeout(20)
def test_device_login_after_dcr_at_a_server_enforcing_registered_grants(
        server: FakeAuthServer) -> None:
    as1 = server.issuers["as1"]
    as1.enforce_grant_types = True
    provider = OAuthProvider(server.mcp_url, grant="device_code",
                             device_code_handler=lambda info: None)
    token = provider.login()
    [registered] = as1.registrations
    assert registered["grant_types"] == [DEVICE_GRANT, "refresh_token"]
    assert "redirect_uris" not in registered and registered["response_types"] == []
    assert registered["application_type"] == "native"
    assert token.access_token == "as1-at-1" and token.client_id == "as1-client-1"
    assert [r["client_id"] for r in as1.grants(DEVICE_GRANT)] == ["as1-client-1"] * 2
    # A 401 refreshes, which the strict server allows: refresh_token was registered too.
    provider.on_unauthorized(challenge(server, authorization="Bearer as1-at-1"))
    assert [r["client_id"] for r in as1.grants("refresh_token")] == ["as1-client-1"]
    assert provider.token is not None and provider.token.access_token == "as1-at-2"


@pytest.mark.timeout(20)
def test_a_stored_browser_registration_is_not_reused_for_a_device_login(
        server: FakeAuthServer) -> None:
    """A browser login registers for authorization_code; a device login with the same store
    then registers anew for the device code, which the strict server accepts."""
    as1 = server.issuers["as1"]
    as1.enforce_grant_types = True
    store = MemoryTokenStore()
    make_provider(server, store=store).login()
    assert as1.registrations[0]["grant_types"] == ["authorization_code", "refresh_token"]
    device = OAuthProvider(server.mcp_url, grant="device_code", store=store,
                           device_code_handler=lambda info: None)
    token = device.login()
    assert len(as1.registrations) == 2
    assert as1.registrations[1]["grant_types"] == [DEVICE_GRANT, "refresh_token"]
    assert token.client_id == "as1-client-2"
    stored = store.get(registration_key(server.issuer_url("as1")))
    assert stored is not None and stored["client_id"] == "as1-client-2"
    # A second device login reuses the device registration.
    OAuthProvider(server.mcp_url, grant="device_code", store=store,
                  device_code_handler=lambda info: None).login()
    assert len(as1.registrations) == 2


@pytest.mark.timeout(20)
def test_a_stored_registration_without_grant_types_is_not_reused_for_a_device_login(
        server: FakeAuthServer) -> None:
    """An entry stored before grant types were recorded was made for authorization_code."""
    store = MemoryTokenStore()
    store.put(registration_key(server.issuer_url("as1")), {
        "client_id": "old-browser-client", "token_endpoint_auth_method": "none",
        "redirect_uris": ["http://127.0.0.1:3000/callback"],
        "issuer": server.issuer_url("as1"), "source": "dynamic"})
    token = OAuthProvider(server.mcp_url, grant="device_code", store=store,
                          device_code_handler=lambda info: None).login()
    assert token.client_id == "as1-client-1"
    assert server.issuers["as1"].registrations[0]["grant_types"] == [DEVICE_GRANT,
                                                                     "refresh_token"]


@pytest.mark.parametrize("url", ["http://mcp.example.com/mcp", "ftp://mcp.example.com/mcp",
                                 "mcp.example.com/mcp"])
def test_an_insecure_server_url_is_refused_when_the_provider_is_built(url: str) -> None:
    with pytest.raises(mcpauth.InsecureURL, match="MCP server URL") as info:
        mcpauth.OAuthProvider(url)
    assert info.value.step == "discovery"
    if url.startswith("http:"):
        assert "allow_insecure_http" in str(info.value)
        mcpauth.OAuthProvider(url, allow_insecure_http=True).close()   # the way out
    mcpauth.OAuthProvider("http://127.0.0.1:9/mcp").close()             # loopback is fine


@pytest.mark.parametrize("port", [-1, 65536, True, "8765"])
def test_a_bad_redirect_port_is_refused(port: object) -> None:
    with pytest.raises(ValueError, match="redirect_port"):
        mcpauth.OAuthProvider("https://mcp.example.com/mcp", redirect_port=port)  # type: ignore[arg-type]
