"""mcpauth end to end against a real authlib authorization server guarding the MCP test server.

Two parts. First the peer itself (``auth_peers.authlib_server``) is proven with plain
``requests`` and authlib's client: each grant works, and it refuses what a strict server must
refuse (no PKCE, a spent rotating refresh token, a wrong secret, another resource). Only then
do its answers mean something when mcpauth talks to it. Second, ``mcpsync.connect(url,
auth=mcpauth.OAuthProvider(...))`` against the fault server acting as a protected resource of
that authorization server: discovery, dynamic registration, the code flow with PKCE and
``resource``, refresh with rotation, a refused refresh token falling back to a login, a file
store reused by a second provider and shared by two processes that refresh once, client
credentials, authorization-server migration, the non-interactive error, and 50 threads meeting
an expired (or server-side revoked) token with one refresh at the authorization server, and
the device authorization grant (RFC 8628): approved (then refreshed) and denied.
"""

from __future__ import annotations

import base64
import hashlib
import os
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from auth_peers.authlib_server import DEVICE_GRANT, AuthlibServer, new_pkce_pair
from auth_peers.fixtures import ProtectedMCP, protect
from authlib.integrations.requests_client import OAuth2Session, OAuthError

import mcpauth
import mcpsync

REDIRECT = "http://127.0.0.1:8765/callback"
RESOURCE = "http://127.0.0.1:9/mcp"


# ---- helpers ---------------------------------------------------------------------------


def _register(server: AuthlibServer, **metadata: Any) -> requests.Response:
    body: dict[str, Any] = {"redirect_uris": [REDIRECT], "client_name": "e2e",
                            "grant_types": ["authorization_code", "refresh_token"],
                            "response_types": ["code"], "token_endpoint_auth_method": "none",
                            "application_type": "native"}
    body.update(metadata)
    return requests.post(f"{server.issuer}/register", json=body, timeout=5)


def _public_client(server: AuthlibServer) -> str:
    response = _register(server)
    assert response.status_code == 201, response.text
    client_id: str = response.json()["client_id"]
    return client_id


def _authorize(server: AuthlibServer, **params: str) -> dict[str, list[str]]:
    """GET /authorize without following the redirect; the callback's query parameters."""
    response = requests.get(f"{server.issuer}/authorize", params=params,
                            allow_redirects=False, timeout=5)
    assert response.status_code == 302, response.text
    location = response.headers["Location"]
    assert location.startswith(REDIRECT + "?")
    return parse_qs(urlsplit(location).query)


def _code_flow(server: AuthlibServer, client_id: str,
               scope: str = "mcp:tools offline_access") -> dict[str, Any]:
    """The whole code flow with authlib's client (S256); the token response."""
    session = OAuth2Session(client_id, token_endpoint_auth_method="none", scope=scope,
                            redirect_uri=REDIRECT, code_challenge_method="S256")
    verifier = new_pkce_pair()[0]
    url, state = session.create_authorization_url(f"{server.issuer}/authorize",
                                                  code_verifier=verifier, resource=RESOURCE)
    response = requests.get(url, allow_redirects=False, timeout=5)
    assert response.status_code == 302
    token: dict[str, Any] = session.fetch_token(
        f"{server.issuer}/token", authorization_response=response.headers["Location"],
        code_verifier=verifier, resource=RESOURCE, state=state)
    return token


def _refresh(server: AuthlibServer, client_id: str, refresh_token: str) -> requests.Response:
    return requests.post(f"{server.issuer}/token", timeout=5, data={
        "grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": client_id,
        "resource": RESOURCE})


# ---- the authorization server itself -------------------------------------------------------


def test_metadata_advertises_what_mcp_clients_need(authlib_server: AuthlibServer) -> None:
    meta = requests.get(f"{authlib_server.issuer}/.well-known/oauth-authorization-server",
                        timeout=5).json()
    assert meta["issuer"] == authlib_server.issuer
    assert meta["code_challenge_methods_supported"] == ["S256"]
    assert meta["registration_endpoint"] == f"{authlib_server.issuer}/register"
    assert set(meta["grant_types_supported"]) == {
        "authorization_code", "refresh_token", "client_credentials", DEVICE_GRANT}
    assert meta["device_authorization_endpoint"] == (
        f"{authlib_server.issuer}/device_authorization")
    assert "none" in meta["token_endpoint_auth_methods_supported"]
    assert "offline_access" in meta["scopes_supported"]
    assert meta["authorization_response_iss_parameter_supported"] is True


def test_dynamic_registration_of_public_and_confidential_clients(
        authlib_server: AuthlibServer) -> None:
    public = _register(authlib_server)
    assert public.status_code == 201
    body = public.json()
    assert body["token_endpoint_auth_method"] == "none"
    assert "client_secret" not in body
    assert body["redirect_uris"] == [REDIRECT]

    confidential = _register(authlib_server, token_endpoint_auth_method="client_secret_basic")
    assert confidential.status_code == 201
    assert confidential.json()["client_secret"]

    bad = _register(authlib_server, grant_types=["password"])  # not in grant_types_supported
    assert bad.status_code == 400
    assert bad.json()["error"] == "invalid_client_metadata"
    assert [c.client_id for c in authlib_server.registrations] == [
        body["client_id"], confidential.json()["client_id"]]


def test_code_flow_with_pkce_issues_a_token_for_the_resource(
        authlib_server: AuthlibServer) -> None:
    client_id = _public_client(authlib_server)
    token = _code_flow(authlib_server, client_id)
    assert token["token_type"].lower() == "bearer"
    assert token["refresh_token"]
    assert set(token["scope"].split()) == {"mcp:tools", "offline_access"}

    record = authlib_server.token(token["access_token"])
    assert record is not None and record.resource == RESOURCE
    [request] = authlib_server.requests_of("authorization_code")
    assert request.status == 200 and request.value("code_verifier")
    check = authlib_server.resource_validator(RESOURCE)
    assert check(f"Bearer {token['access_token']}")
    assert not authlib_server.resource_validator("http://127.0.0.1:9/other")(
        f"Bearer {token['access_token']}")


def test_authorize_redirect_carries_state_and_iss(
        authlib_server_factory: Callable[..., AuthlibServer]) -> None:
    for send_iss in (True, False):
        server = authlib_server_factory(send_iss=send_iss)
        client_id = _public_client(server)
        _, challenge = new_pkce_pair()
        query = _authorize(server, response_type="code", client_id=client_id,
                           redirect_uri=REDIRECT, state="st-1", code_challenge=challenge,
                           code_challenge_method="S256")
        assert query["state"] == ["st-1"] and query["code"]
        assert query.get("iss") == ([server.issuer] if send_iss else None)
        assert server.metadata["authorization_response_iss_parameter_supported"] is send_iss


def test_authorize_denial_and_unknown_redirect_uri(
        authlib_server_factory: Callable[..., AuthlibServer]) -> None:
    server = authlib_server_factory(approve=False)
    client_id = _public_client(server)
    _, challenge = new_pkce_pair()
    params = {"response_type": "code", "client_id": client_id, "redirect_uri": REDIRECT,
              "state": "st-2", "code_challenge": challenge, "code_challenge_method": "S256"}
    query = _authorize(server, **params)
    assert query["error"] == ["access_denied"] and query["state"] == ["st-2"]
    assert query["iss"] == [server.issuer] and "code" not in query
    # A redirect URI the client did not register is never redirected to.
    response = requests.get(f"{server.issuer}/authorize", allow_redirects=False, timeout=5,
                            params={**params, "redirect_uri": "http://127.0.0.1:1/evil"})
    assert response.status_code == 400 and "Location" not in response.headers


@pytest.mark.parametrize("pkce", [{}, {"code_challenge_method": "plain"},
                                  {"code_challenge_method": "S256"}])
def test_authorize_refuses_a_request_without_s256_pkce(authlib_server: AuthlibServer,
                                                       pkce: dict[str, str]) -> None:
    client_id = _public_client(authlib_server)
    params = {"response_type": "code", "client_id": client_id, "redirect_uri": REDIRECT,
              "state": "s", **pkce}
    if pkce.get("code_challenge_method") == "plain":
        params["code_challenge"] = "x" * 43
    query = _authorize(authlib_server, **params)
    assert query["error"] == ["invalid_request"] and "code" not in query


def test_code_exchange_needs_the_right_verifier_and_works_once(
        authlib_server: AuthlibServer) -> None:
    client_id = _public_client(authlib_server)
    verifier, challenge = new_pkce_pair()
    query = _authorize(authlib_server, response_type="code", client_id=client_id,
                       redirect_uri=REDIRECT, state="s", code_challenge=challenge,
                       code_challenge_method="S256")
    form = {"grant_type": "authorization_code", "code": query["code"][0],
            "redirect_uri": REDIRECT, "client_id": client_id}
    token_url = f"{authlib_server.issuer}/token"
    wrong = requests.post(token_url, data={**form, "code_verifier": new_pkce_pair()[0]},
                          timeout=5)
    assert wrong.status_code == 400 and wrong.json()["error"] == "invalid_grant"
    missing = requests.post(token_url, data=form, timeout=5)
    assert missing.status_code == 400 and missing.json()["error"] == "invalid_request"
    right = requests.post(token_url, data={**form, "code_verifier": verifier}, timeout=5)
    assert right.status_code == 200, right.text
    again = requests.post(token_url, data={**form, "code_verifier": verifier}, timeout=5)
    assert again.status_code == 400 and again.json()["error"] == "invalid_grant"
    assert authlib_server.token_requests["authorization_code"] == 4


def test_code_exchange_for_another_resource_is_invalid_target(
        authlib_server: AuthlibServer) -> None:
    client_id = _public_client(authlib_server)
    verifier, challenge = new_pkce_pair()
    query = _authorize(authlib_server, response_type="code", client_id=client_id,
                       redirect_uri=REDIRECT, state="s", code_challenge=challenge,
                       code_challenge_method="S256", resource=RESOURCE)
    response = requests.post(f"{authlib_server.issuer}/token", timeout=5, data={
        "grant_type": "authorization_code", "code": query["code"][0], "redirect_uri": REDIRECT,
        "client_id": client_id, "code_verifier": verifier,
        "resource": "http://127.0.0.1:9/elsewhere"})
    assert response.status_code == 400 and response.json()["error"] == "invalid_target"


def test_refresh_rotates_and_the_old_refresh_token_is_rejected(
        authlib_server: AuthlibServer) -> None:
    client_id = _public_client(authlib_server)
    first = _code_flow(authlib_server, client_id)
    refreshed = _refresh(authlib_server, client_id, first["refresh_token"])
    assert refreshed.status_code == 200, refreshed.text
    second = refreshed.json()
    assert second["refresh_token"] != first["refresh_token"]
    assert second["access_token"] != first["access_token"]

    reused = _refresh(authlib_server, client_id, first["refresh_token"])
    assert reused.status_code == 400 and reused.json()["error"] == "invalid_grant"
    assert authlib_server.refresh_reuse == 1
    assert _refresh(authlib_server, client_id, second["refresh_token"]).status_code == 200
    record = authlib_server.token(second["access_token"])
    assert record is not None and record.resource == RESOURCE
    assert authlib_server.token_requests["refresh_token"] == 3


def test_without_rotation_the_refresh_token_stays_valid(
        authlib_server_factory: Callable[..., AuthlibServer]) -> None:
    server = authlib_server_factory(rotate_refresh_tokens=False)
    client_id = _public_client(server)
    first = _code_flow(server, client_id)
    for _ in range(2):
        response = _refresh(server, client_id, first["refresh_token"])
        assert response.status_code == 200
        assert "refresh_token" not in response.json()


@pytest.mark.parametrize("method", ["client_secret_basic", "client_secret_post"])
def test_client_credentials_with_a_preregistered_secret(authlib_server: AuthlibServer,
                                                        method: str) -> None:
    client = authlib_server.register_client(
        client_id="svc", client_secret="s3cret", grant_types=["client_credentials"],
        token_endpoint_auth_method=method)
    session = OAuth2Session(client.client_id, "s3cret", token_endpoint_auth_method=method,
                            scope="mcp:tools")
    token = session.fetch_token(f"{authlib_server.issuer}/token",
                                grant_type="client_credentials", resource=RESOURCE)
    assert "refresh_token" not in token
    [request] = authlib_server.requests_of("client_credentials")
    assert request.basic_auth is (method == "client_secret_basic")
    assert request.value("resource") == RESOURCE
    assert authlib_server.resource_validator(RESOURCE)(f"Bearer {token['access_token']}")

    wrong = OAuth2Session(client.client_id, "wrong", token_endpoint_auth_method=method)
    with pytest.raises(OAuthError) as info:
        wrong.fetch_token(f"{authlib_server.issuer}/token", grant_type="client_credentials")
    assert info.value.error == "invalid_client"


def test_resource_validator_refuses_bad_tokens(authlib_server: AuthlibServer) -> None:
    client_id = _public_client(authlib_server)
    token = _code_flow(authlib_server, client_id, scope="offline_access")  # no mcp:tools
    check = authlib_server.resource_validator(RESOURCE)
    assert not check(f"Bearer {token['access_token']}")  # insufficient scope
    assert authlib_server.resource_validator(RESOURCE, ["offline_access"])(
        f"Bearer {token['access_token']}")
    assert not check(None) and not check("Bearer") and not check("Bearer unknown")
    assert not check(f"Basic {token['access_token']}")

    good = _code_flow(authlib_server, client_id)
    record = authlib_server.token(good["access_token"])
    assert record is not None and check(f"Bearer {good['access_token']}")
    record.issued_at -= record.expires_in  # now expired
    assert not check(f"Bearer {good['access_token']}")
    record.issued_at += record.expires_in
    authlib_server.revoke_access_tokens()
    assert not check(f"Bearer {good['access_token']}")


def _device_client(server: AuthlibServer, *grant_types: str) -> str:
    response = _register(server, grant_types=list(grant_types or (DEVICE_GRANT,)),
                         response_types=[], redirect_uris=[])
    assert response.status_code == 201, response.text
    client_id: str = response.json()["client_id"]
    return client_id


def _device_code(server: AuthlibServer, client_id: str) -> requests.Response:
    return requests.post(f"{server.issuer}/device_authorization", timeout=5, data={
        "client_id": client_id, "scope": "mcp:tools", "resource": RESOURCE})


def _device_poll(server: AuthlibServer, client_id: str, device_code: str,
                 resource: str = RESOURCE) -> requests.Response:
    return requests.post(f"{server.issuer}/token", timeout=5, data={
        "grant_type": DEVICE_GRANT, "device_code": device_code, "client_id": client_id,
        "resource": resource})


def test_device_grant_is_pending_until_approved_and_then_used_once(
        authlib_server_factory: Callable[..., AuthlibServer]) -> None:
    server = authlib_server_factory(device_interval=30)  # every poll below is "too fast" ...
    client_id = _device_client(server, DEVICE_GRANT, "refresh_token")
    issued = _device_code(server, client_id)
    assert issued.status_code == 200, issued.text
    body = issued.json()
    assert body["interval"] == 30 and body["expires_in"] > 0
    assert body["verification_uri"] == f"{server.issuer}/device"
    assert body["verification_uri_complete"].endswith(f"?user_code={body['user_code']}")
    assert server.wait_for_user_code(1) == body["user_code"]
    [record] = server.device_authorizations
    assert record.resources == (RESOURCE,) and record.client_id == client_id

    first = _device_poll(server, client_id, body["device_code"])
    assert first.status_code == 400 and first.json()["error"] == "authorization_pending"
    second = _device_poll(server, client_id, body["device_code"])  # ... but the first
    assert second.status_code == 400 and second.json()["error"] == "slow_down"
    server.approve_device(body["user_code"])
    other = _device_poll(server, client_id, body["device_code"], "http://127.0.0.1:9/other")
    assert other.status_code == 400 and other.json()["error"] == "invalid_target"
    granted = _device_poll(server, client_id, body["device_code"])
    assert granted.status_code == 200, granted.text
    token = granted.json()
    assert token["refresh_token"] and token["scope"] == "mcp:tools"
    issued_token = server.token(token["access_token"])
    assert issued_token is not None and issued_token.resource == RESOURCE
    assert issued_token.grant_type == DEVICE_GRANT
    again = _device_poll(server, client_id, body["device_code"])
    assert again.status_code == 400  # the device code concluded its session
    assert server.token_requests == {DEVICE_GRANT: 5}
    assert [r.error for r in server.requests_of(DEVICE_GRANT)] == [
        "authorization_pending", "slow_down", "invalid_target", None, "invalid_request"]
    refreshed = _refresh(server, client_id, token["refresh_token"])
    assert refreshed.status_code == 200, refreshed.text


def test_device_grant_denied_and_unregistered_clients_refused(
        authlib_server: AuthlibServer) -> None:
    client_id = _device_client(authlib_server)
    body = _device_code(authlib_server, client_id).json()
    authlib_server.deny_device(body["user_code"])
    denied = _device_poll(authlib_server, client_id, body["device_code"])
    assert denied.status_code == 400 and denied.json()["error"] == "access_denied"
    # A client registered for the code flow only may neither start nor poll a device login.
    code_client = _public_client(authlib_server)
    refused = _device_code(authlib_server, code_client)
    assert refused.status_code == 400 and refused.json()["error"] == "unauthorized_client"
    stolen = _device_poll(authlib_server, code_client, body["device_code"])
    assert stolen.status_code == 400 and stolen.json()["error"] == "unauthorized_client"
    assert len(authlib_server.device_authorizations) == 1
    assert not authlib_server.tokens


def test_device_auto_approve_grants_at_the_nth_poll(
        authlib_server_factory: Callable[..., AuthlibServer]) -> None:
    server = authlib_server_factory(device_auto_approve=2)
    client_id = _device_client(server)
    body = _device_code(server, client_id).json()
    first = _device_poll(server, client_id, body["device_code"])
    assert first.json()["error"] == "authorization_pending"
    second = _device_poll(server, client_id, body["device_code"])
    assert second.status_code == 200, second.text
    assert "refresh_token" not in second.json()  # not registered for refresh_token
    assert server.device_authorizations[0].decision is True


def test_stop_joins_threads_even_with_keep_alive_connections() -> None:
    server = AuthlibServer()
    session = requests.Session()  # keeps its connection open after the request
    assert session.get(f"{server.issuer}/.well-known/oauth-authorization-server",
                       timeout=5).status_code == 200
    server.stop()
    server.stop()  # idempotent
    assert not [t for t in threading.enumerate()
                if t.name.startswith(f"test-authlib-server-{server.port}") and t.is_alive()]
    session.close()


def test_protected_mcp_serves_resource_metadata_and_checks_tokens(
        protected_mcp: ProtectedMCP) -> None:
    meta = requests.get(protected_mcp.resource_metadata_url, timeout=5).json()
    assert meta["resource"] == protected_mcp.url
    assert meta["authorization_servers"] == [protected_mcp.auth.issuer]
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}}
    headers = {"Accept": "application/json, text/event-stream"}
    refused = requests.post(protected_mcp.url, json=init, headers=headers, timeout=5)
    assert refused.status_code == 401
    assert protected_mcp.resource_metadata_url in refused.headers["WWW-Authenticate"]

    client = protected_mcp.auth.register_client(
        client_id="svc", client_secret="s3cret", grant_types=["client_credentials"])
    session = OAuth2Session(client.client_id, "s3cret", scope="mcp:tools")
    token = session.fetch_token(f"{protected_mcp.auth.issuer}/token",
                                grant_type="client_credentials", resource=protected_mcp.url)
    accepted = requests.post(protected_mcp.url, json=init, timeout=5, headers={
        **headers, "Authorization": f"Bearer {token['access_token']}"})
    assert accepted.status_code == 200
    assert accepted.json()["result"]["serverInfo"]["name"] == "fault-server"


# ---- mcpsync + mcpauth through the real server ------------------------------------------

@pytest.fixture(name="no_auth_threads")
def no_auth_threads_fixture(no_leaks: None) -> Iterator[None]:
    """``no_leaks`` for mcpsync, plus: no ``mcpauth-…`` thread (the callback listener) left."""
    before = set(_mcpauth_threads())
    yield
    deadline = time.monotonic() + 5
    while [t for t in _mcpauth_threads() if t not in before] and time.monotonic() < deadline:
        time.sleep(0.01)
    left = [t.name for t in _mcpauth_threads() if t not in before]
    assert not left, f"mcpauth threads left running: {left}"


def _mcpauth_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("mcpauth-") and t.is_alive()]


def _follow_authorize(url: str) -> str:
    """The headless authorization handler: the AS auto-approves; return where it redirects."""
    response = requests.get(url, allow_redirects=False, timeout=5)
    assert response.status_code in (302, 303), response.text
    return response.headers["Location"]


def _provider(url: str, **options: Any) -> Any:
    options.setdefault("authorization_handler", _follow_authorize)
    return mcpauth.OAuthProvider(url, **options)


def _s256(verifier: str) -> str:
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


@pytest.mark.parametrize("options", [{}, {"send_iss": False, "require_resource": True}],
                         ids=["iss", "no-iss-resource-required"])
def test_connect_registers_logs_in_with_pkce_and_calls_tools(
        protected_mcp_factory: Callable[..., ProtectedMCP], options: dict[str, Any],
        no_auth_threads: None) -> None:
    protected_mcp = protected_mcp_factory(**options)
    auth = protected_mcp.auth
    provider = _provider(protected_mcp.url)
    with mcpsync.connect(protected_mcp.url, auth=provider, timeout=10) as client:
        assert {t.name for t in client.list_tools()} >= {"echo", "add"}
        assert client.call_tool("echo", {"text": "hi"}).text == "hi"

    [registered] = auth.registrations
    assert registered.token_endpoint_auth_method == "none"
    assert registered.metadata.get("application_type") == "native"
    [authorization] = auth.authorizations
    assert authorization["code_challenge_method"] == ["S256"]
    assert authorization["resource"] == [protected_mcp.url]
    assert set(authorization["scope"][0].split()) == {"mcp:tools", "offline_access"}
    [exchange] = auth.requests_of("authorization_code")
    assert exchange.status == 200
    verifier = exchange.value("code_verifier")
    assert verifier and _s256(verifier) == authorization["code_challenge"][0]
    assert exchange.value("resource") == protected_mcp.url
    assert exchange.value("client_id") == registered.client_id
    assert auth.token_requests == {"authorization_code": 1}
    # Every MCP request after the first 401 carried the token the AS issued.
    token = provider.token
    assert token is not None and auth.token(token.access_token) is not None
    assert auth.resource_checks[True] >= 2


def test_expired_token_is_refreshed_once_and_rotated(
        protected_mcp_factory: Callable[..., ProtectedMCP], no_auth_threads: None) -> None:
    protected = protected_mcp_factory(access_token_lifetime=2)
    auth = protected.auth
    provider = _provider(protected.url)
    with mcpsync.connect(protected.url, auth=provider, timeout=10) as client:
        assert client.call_tool("echo", {"text": "one"}).text == "one"
        first = provider.token
        assert first is not None and first.refresh_token
        auth.access_token_lifetime = 3600  # the refreshed token must not come due as well
        _wait_until_expired(first)
        assert client.call_tool("echo", {"text": "two"}).text == "two"
        second = provider.token
    assert auth.token_requests == {"authorization_code": 1, "refresh_token": 1}
    [refresh] = auth.requests_of("refresh_token")
    assert refresh.status == 200
    assert refresh.value("refresh_token") == first.refresh_token
    assert refresh.value("resource") == protected.url
    assert refresh.value("scope") is None
    assert second is not None and second.access_token != first.access_token
    assert second.refresh_token and second.refresh_token != first.refresh_token
    # The old refresh token is spent: the AS refuses it now.
    reused = _refresh_raw(auth, refresh.value("client_id") or "", first.refresh_token)
    assert reused.status_code == 400 and reused.json()["error"] == "invalid_grant"


def _refresh_raw(auth: AuthlibServer, client_id: str, refresh_token: str) -> requests.Response:
    return requests.post(f"{auth.issuer}/token", timeout=5, data={
        "grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": client_id})


def _wait_until_expired(token: Any) -> None:
    """Setup, not a timing assertion: wait out a 2 s token lifetime."""
    assert token.expires_at is not None
    while time.time() < token.expires_at + 0.05:
        time.sleep(0.05)


def test_file_store_persists_and_a_second_provider_reuses_the_login(
        protected_mcp: ProtectedMCP, tmp_path: Path, no_auth_threads: None) -> None:
    path = tmp_path / "mcpauth" / "tokens.json"
    with mcpsync.connect(protected_mcp.url, timeout=10, auth=_provider(
            protected_mcp.url, store=mcpauth.FileTokenStore(path))) as client:
        assert client.call_tool("echo", {"text": "a"}).text == "a"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    first_token = protected_mcp.auth.tokens[0].access_token
    seen = len(protected_mcp.mcp_requests())

    def no_login(url: str) -> str:
        raise AssertionError("the second provider must not log in again")

    second = _provider(protected_mcp.url, store=mcpauth.FileTokenStore(path),
                       authorization_handler=no_login, interactive=False)
    with mcpsync.connect(protected_mcp.url, auth=second, timeout=10) as client:
        assert client.call_tool("echo", {"text": "b"}).text == "b"
    assert len(protected_mcp.auth.authorizations) == 1
    assert len(protected_mcp.auth.registrations) == 1
    assert protected_mcp.auth.token_requests == {"authorization_code": 1}
    # The stored token was sent from the very first MCP request of the second client.
    second_client_requests = protected_mcp.mcp_requests()[seen:]
    assert second_client_requests
    assert all(r.header("Authorization") == f"Bearer {first_token}"
               for r in second_client_requests)


def test_client_credentials_with_a_preregistered_secret_e2e(
        protected_mcp: ProtectedMCP, no_auth_threads: None) -> None:
    auth = protected_mcp.auth
    auth.register_client(client_id="svc", client_secret="s3cret",
                         grant_types=["client_credentials"])
    provider = mcpauth.OAuthProvider(protected_mcp.url, grant="client_credentials",
                                     client_id="svc", client_secret="s3cret")
    with mcpsync.connect(protected_mcp.url, auth=provider, timeout=10) as client:
        assert client.call_tool("add", {"a": 1, "b": 2}).structured == {"sum": 3}
    [request] = auth.requests_of("client_credentials")
    assert request.status == 200 and request.basic_auth  # client_secret_basic: the default
    assert request.value("client_secret") is None
    assert request.value("resource") == protected_mcp.url
    assert "mcp:tools" in (request.value("scope") or "").split()
    assert not auth.registrations and not auth.authorizations


def test_non_interactive_without_a_token_raises_login_required(
        protected_mcp: ProtectedMCP, no_auth_threads: None) -> None:
    provider = _provider(protected_mcp.url, interactive=False)
    with pytest.raises(mcpsync.AuthHookError) as info:
        mcpsync.connect(protected_mcp.url, auth=provider, timeout=10)
    assert isinstance(info.value.__cause__, mcpauth.LoginRequired)
    assert not protected_mcp.auth.authorizations
    assert not protected_mcp.auth.token_log


def test_fifty_threads_with_an_expired_token_cause_one_refresh(
        protected_mcp_factory: Callable[..., ProtectedMCP], no_auth_threads: None) -> None:
    protected = protected_mcp_factory(access_token_lifetime=2)
    auth = protected.auth
    provider = _provider(protected.url)
    with mcpsync.connect(protected.url, auth=provider, timeout=20) as client:
        assert client.call_tool("echo", {"text": "warm"}).text == "warm"
        token = provider.token
        auth.access_token_lifetime = 3600  # the refreshed token must not come due as well
        _wait_until_expired(token)
        start = threading.Barrier(50)
        results: list[str] = []
        errors: list[BaseException] = []
        lock = threading.Lock()

        def call(i: int) -> None:
            try:
                start.wait(10)
                text = client.call_tool("echo", {"text": str(i)}).text
                with lock:
                    results.append(text)
            except BaseException as exc:
                with lock:
                    errors.append(exc)

        threads = [threading.Thread(target=call, args=(i,), name=f"test-caller-{i}")
                   for i in range(50)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    assert not errors, errors[:3]
    assert sorted(results, key=int) == [str(i) for i in range(50)]
    assert auth.token_requests == {"authorization_code": 1, "refresh_token": 1}
    assert auth.refresh_reuse == 0
    # The expired token was never sent: headers() refreshed first (only the login's 401).
    assert auth.resource_checks[False] == 1


def test_fifty_threads_meeting_a_revoked_token_cause_one_refresh(
        protected_mcp: ProtectedMCP, no_auth_threads: None) -> None:
    """The server-side variant: the client still thinks its token is good, every thread gets
    a 401, and the refresh-and-retry must still reach the AS once."""
    auth = protected_mcp.auth
    provider = _provider(protected_mcp.url)
    with mcpsync.connect(protected_mcp.url, auth=provider, timeout=20) as client:
        assert client.call_tool("echo", {"text": "warm"}).text == "warm"
        auth.revoke_access_tokens()
        errors: list[BaseException] = []
        start = threading.Barrier(50)

        def call(i: int) -> None:
            try:
                start.wait(10)
                assert client.call_tool("echo", {"text": str(i)}).text == str(i)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=call, args=(i,), name=f"test-caller-{i}")
                   for i in range(50)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    assert not errors, errors[:3]
    assert auth.token_requests == {"authorization_code": 1, "refresh_token": 1}
    assert auth.resource_checks[False] >= 2  # the first 401, and at least one stale token


def test_a_refused_refresh_token_falls_back_to_a_full_login(
        protected_mcp: ProtectedMCP, no_auth_threads: None) -> None:
    auth = protected_mcp.auth
    provider = _provider(protected_mcp.url)
    with mcpsync.connect(protected_mcp.url, auth=provider, timeout=10) as client:
        assert client.call_tool("echo", {"text": "one"}).text == "one"
        auth.revoke_access_tokens()
        auth.revoke_refresh_tokens()
        assert client.call_tool("echo", {"text": "two"}).text == "two"
    assert auth.token_requests == {"authorization_code": 2, "refresh_token": 1}
    assert auth.requests_of("refresh_token")[0].error == "invalid_grant"
    assert len(auth.registrations) == 1  # the stored registration was reused
    assert len(auth.authorizations) == 2


def test_authorization_server_migration_registers_and_logs_in_at_the_new_one(
        protected_mcp: ProtectedMCP, authlib_server: AuthlibServer,
        no_auth_threads: None) -> None:
    old, new = protected_mcp.auth, authlib_server
    provider = _provider(protected_mcp.url)
    with mcpsync.connect(protected_mcp.url, auth=provider, timeout=10) as client:
        assert client.call_tool("echo", {"text": "old"}).text == "old"
        protect(protected_mcp.mcp, new)  # the resource now trusts only the new server
        assert client.call_tool("echo", {"text": "new"}).text == "new"
    assert old.token_requests == {"authorization_code": 1}  # no refresh at the old issuer
    assert len(new.registrations) == 1
    assert new.token_requests == {"authorization_code": 1}
    token = provider.token
    assert token is not None and token.issuer == new.issuer
    assert new.token(token.access_token) is not None


_CHILD = """
import sys, mcpauth, mcpsync
url, path = sys.argv[1], sys.argv[2]
provider = mcpauth.OAuthProvider(url, store=mcpauth.FileTokenStore(path), interactive=False)
with mcpsync.connect(url, auth=provider, timeout=20) as client:
    print(client.call_tool("echo", {"text": "child"}).text)
"""


def test_two_processes_sharing_a_token_file_refresh_once(
        protected_mcp_factory: Callable[..., ProtectedMCP], tmp_path: Path,
        no_auth_threads: None) -> None:
    protected = protected_mcp_factory(access_token_lifetime=2)
    path = tmp_path / "tokens.json"
    provider = _provider(protected.url, store=mcpauth.FileTokenStore(path))
    with mcpsync.connect(protected.url, auth=provider, timeout=10) as client:
        assert client.call_tool("echo", {"text": "login"}).text == "login"
    _wait_until_expired(provider.token)
    # The refreshed token lives long: a child that starts late must find it still valid, so
    # one refresh is the only right count however the two processes interleave.
    protected.auth.access_token_lifetime = 3600
    children = [subprocess.Popen([sys.executable, "-c", _CHILD, protected.url, str(path)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for _ in range(2)]
    outputs = [child.communicate(timeout=60) for child in children]
    assert [child.returncode for child in children] == [0, 0], outputs
    assert [out.strip() for out, _ in outputs] == ["child", "child"]
    auth = protected.auth
    assert auth.token_requests == {"authorization_code": 1, "refresh_token": 1}
    assert auth.refresh_reuse == 0


# ---- the device authorization grant (RFC 8628) through mcpsync ---------------------------


class _DeviceUser:
    """The person at the other device: captures the ``DeviceCode`` mcpauth shows and, on a
    thread of its own, approves (or denies) it at the authorization server once the client
    has polled ``after_polls`` times, so the client is seen waiting first."""

    def __init__(self, auth: AuthlibServer, *, approve: bool = True, after_polls: int = 1):
        self.auth = auth
        self.approve = approve
        self.after_polls = after_polls
        self.shown: list[mcpauth.DeviceCode] = []
        self.threads: list[threading.Thread] = []

    def __call__(self, info: mcpauth.DeviceCode) -> None:
        self.shown.append(info)
        thread = threading.Thread(target=self._act, args=(info.user_code,), daemon=True,
                                  name=f"test-device-user-{len(self.shown)}")
        self.threads.append(thread)
        thread.start()

    def _act(self, user_code: str) -> None:
        [record] = [r for r in self.auth.device_authorizations if r.user_code == user_code]
        deadline = time.monotonic() + 10
        while record.polls < self.after_polls and time.monotonic() < deadline:
            time.sleep(0.01)
        (self.auth.approve_device if self.approve else self.auth.deny_device)(user_code)

    def join(self) -> None:
        for thread in self.threads:
            thread.join(10)
            assert not thread.is_alive()


@pytest.mark.timeout(30)
def test_device_login_calls_tools_and_refreshes(
        protected_mcp_factory: Callable[..., ProtectedMCP], no_auth_threads: None) -> None:
    protected = protected_mcp_factory(access_token_lifetime=2)
    auth, url = protected.auth, protected.url
    user = _DeviceUser(auth)
    provider = mcpauth.OAuthProvider(url, grant="device_code", device_code_handler=user)
    with mcpsync.connect(url, auth=provider, timeout=10) as client:
        assert {t.name for t in client.list_tools()} >= {"echo", "add"}
        assert client.call_tool("echo", {"text": "device"}).text == "device"
        first = provider.token
        assert first is not None and first.refresh_token
        auth.access_token_lifetime = 3600  # the refreshed token must not come due as well
        _wait_until_expired(first)
        assert client.call_tool("echo", {"text": "refreshed"}).text == "refreshed"
        second = provider.token
    user.join()

    # One dynamic registration for the device grant, without any redirect URI.
    [registered] = auth.registrations
    assert registered.grant_types == [DEVICE_GRANT, "refresh_token"]
    assert registered.redirect_uris == [] and "redirect_uris" not in registered.metadata
    assert registered.response_types == []
    # One device authorization request, for this resource; the user saw its user code.
    [device] = auth.device_authorizations
    assert device.form["client_id"] == (registered.client_id,)
    assert device.resources == (url,)
    assert "mcp:tools" in device.scope.split()
    [shown] = user.shown
    assert shown.user_code == device.user_code
    assert shown.verification_uri == f"{auth.issuer}/device"
    assert shown.interval == auth.device_interval
    assert not auth.authorizations  # no browser login
    # Polls: pending at least once, never too fast (no slow_down), then the token.
    polls = auth.requests_of(DEVICE_GRANT)
    assert len(polls) >= 2
    assert {p.error for p in polls[:-1]} == {"authorization_pending"}
    assert polls[-1].status == 200
    assert all(p.value("resource") == url and p.value("client_id") == registered.client_id
               and p.value("device_code") == device.device_code for p in polls)
    # Then exactly one refresh, rotating the refresh token.
    assert auth.token_requests == {DEVICE_GRANT: len(polls), "refresh_token": 1}
    [refresh] = auth.requests_of("refresh_token")
    assert refresh.status == 200 and refresh.value("refresh_token") == first.refresh_token
    assert refresh.value("resource") == url
    assert second is not None and second.access_token != first.access_token
    issued = auth.token(first.access_token)
    assert issued is not None and issued.grant_type == DEVICE_GRANT and issued.resource == url
    assert auth.refresh_reuse == 0


@pytest.mark.timeout(30)
def test_denied_device_login_raises_authorization_denied(
        protected_mcp: ProtectedMCP, no_auth_threads: None) -> None:
    auth = protected_mcp.auth
    user = _DeviceUser(auth, approve=False)
    provider = mcpauth.OAuthProvider(protected_mcp.url, grant="device_code",
                                     device_code_handler=user)
    with pytest.raises(mcpsync.AuthHookError) as info:
        mcpsync.connect(protected_mcp.url, auth=provider, timeout=10)
    user.join()
    assert isinstance(info.value.__cause__, mcpauth.AuthorizationDenied)
    polls = auth.requests_of(DEVICE_GRANT)
    assert [p.error for p in polls][-1] == "access_denied"
    assert "authorization_pending" in {p.error for p in polls}
    assert not auth.tokens and provider.token is None
    assert all(r.header("Authorization") is None for r in protected_mcp.mcp_requests())
