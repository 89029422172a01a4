"""Registration: the order, the DCR request and answer, auth-method choice,
CIMD documents and the masked repr, against a real loopback registration endpoint."""

from __future__ import annotations

import dataclasses
import json
import pickle
from typing import Any

import pytest
import requests
import responses

from mcpauth._http import HttpPolicy
from mcpauth.discovery import ServerMetadata
from mcpauth.errors import AuthError, InsecureURL, RegistrationError, TokenStoreError
from mcpauth.registration import (
    DEVICE_GRANT_TYPES,
    GRANT_DEVICE_CODE,
    ClientRegistration,
    application_type_for,
    choose_registration,
    client_metadata_document,
    dcr_auth_method,
    preregistered_auth_method,
    register,
)

from ._servers import Reply, ScriptedServer

POLICY = HttpPolicy()
REDIRECT = "http://127.0.0.1:4567/callback"
CIMD_URL = "https://conformance-test.local/client-metadata.json"





def make_meta(issuer: str = "https://as.example", **changes: Any) -> ServerMetadata:
    base = ServerMetadata(
        issuer=issuer, authorization_endpoint=issuer + "/authorize",
        token_endpoint=issuer + "/token", registration_endpoint=issuer + "/register",
        device_authorization_endpoint=None, scopes_supported=None, grant_types_supported=None,
        token_endpoint_auth_methods_supported=None, code_challenge_methods_supported=("S256",),
        dpop_signing_alg_values_supported=None,
        authorization_response_iss_parameter_supported=False,
        client_id_metadata_document_supported=False, fallback=False, raw={})
    return dataclasses.replace(base, **changes)


# --- auth-method choice -----------------------------------------------------------------------

@pytest.mark.parametrize(("methods", "secret", "key", "expected"), [
    (None, True, False, "client_secret_basic"),          # RFC 8414 default
    (("client_secret_basic",), True, False, "client_secret_basic"),
    (("client_secret_post", "client_secret_basic"), True, False, "client_secret_basic"),
    (("client_secret_post",), True, False, "client_secret_post"),
    (("none", "private_key_jwt"), True, False, "client_secret_post"),
    (None, False, True, "private_key_jwt"),
    (("private_key_jwt",), False, True, "private_key_jwt"),
    (None, False, False, "none"),
    (("client_secret_basic",), False, False, "none"),
])
def test_preregistered_auth_method(methods: tuple[str, ...] | None, secret: bool, key: bool,
                                   expected: str) -> None:
    meta = make_meta(token_endpoint_auth_methods_supported=methods)
    assert preregistered_auth_method(meta, has_secret=secret, has_key=key) == expected


@pytest.mark.parametrize(("methods", "expected"), [
    (None, "none"),
    (("client_secret_basic", "none"), "none"),
    (("client_secret_basic",), "client_secret_basic"),
    (("client_secret_post",), "client_secret_post"),
    (("private_key_jwt", "client_secret_post", "client_secret_basic"), "client_secret_post"),
    (("private_key_jwt",), "client_secret_basic"),
])
def test_dcr_auth_method(methods: tuple[str, ...] | None, expected: str) -> None:
    assert dcr_auth_method(make_meta(token_endpoint_auth_methods_supported=methods)) == expected


@pytest.mark.parametrize(("uri", "kind"), [
    ("http://127.0.0.1:3000/callback", "native"), ("http://localhost:3000/callback", "native"),
    ("http://[::1]/cb", "native"), ("https://app.example/callback", "web"),
    ("https://localhost/cb", "native"), ("com.example.app:/cb", "native"),
])
def test_application_type_for(uri: str, kind: str) -> None:
    assert application_type_for(uri) == kind


# --- ClientRegistration -----------------------------------------------------------------------

def test_repr_masks_secret_and_key() -> None:
    reg = ClientRegistration("cid", "client_secret_basic", client_secret="s3cret-value",
                             private_key="-----BEGIN PRIVATE KEY-----abc")
    text = repr(reg)
    assert "s3cret-value" not in text and "BEGIN PRIVATE" not in text
    assert "client_secret=***" in text and "private_key=***" in text
    assert "cid" in text
    assert "s3cret" not in str(reg)
    assert "client_secret=None" in repr(ClientRegistration("cid", "none"))


def test_round_trip_through_json() -> None:
    reg = ClientRegistration("cid", "client_secret_post", client_secret="s",
                             redirect_uris=(REDIRECT,), client_secret_expires_at=2e9,
                             issuer="https://as.example", source="dynamic",
                             grant_types=DEVICE_GRANT_TYPES)
    back = ClientRegistration.from_dict(json.loads(json.dumps(reg.to_dict())))
    assert back == reg
    assert pickle.loads(pickle.dumps(reg)) == reg


@pytest.mark.parametrize("broken", [
    {}, {"client_id": 5}, {"client_id": "c", "token_endpoint_auth_method": "magic"},
    {"client_id": "c", "redirect_uris": "x"}, {"client_id": "c", "client_secret": 1},
    {"client_id": "c", "client_secret_expires_at": "soon"}, {"client_id": "c", "issuer": 3},
    {"client_id": "c", "grant_types": "authorization_code"}, {"client_id": "c", "grant_types": [1]},
])
def test_from_dict_refuses_malformed_entries(broken: dict[str, Any]) -> None:
    with pytest.raises(TokenStoreError) as info:
        ClientRegistration.from_dict(broken)
    assert info.value.step == "store"


@pytest.mark.parametrize(("expires", "now", "expired"), [
    (None, 1e12, False), (0, 1e12, False), (100.0, 99.0, False), (100.0, 100.0, True),
    (100.0, 101.0, True),
])
def test_expired(expires: float | None, now: float, expired: bool) -> None:
    reg = ClientRegistration("c", "client_secret_basic", client_secret="s",
                             client_secret_expires_at=expires)
    assert reg.expired(now) is expired


# --- client ID metadata documents --------------------------------------------------------------

def test_client_metadata_document() -> None:
    doc = client_metadata_document(CIMD_URL, redirect_uris=["http://localhost:3000/callback"])
    assert doc == {
        "client_id": CIMD_URL, "client_name": "mcpsync",
        "redirect_uris": ["http://localhost:3000/callback"],
        "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
        "token_endpoint_auth_method": "none"}
    custom = client_metadata_document(CIMD_URL, client_name="app", redirect_uris=[],
                                      grant_types=["authorization_code"],
                                      client_uri="https://app.example")
    assert custom["client_name"] == "app"
    assert custom["grant_types"] == ["authorization_code"]
    assert custom["client_uri"] == "https://app.example"


@pytest.mark.parametrize("url", ["http://app.example/cimd.json", "https://app.example",
                                 "https://app.example/", "http://localhost/cimd.json",
                                 "app.example/cimd.json"])
def test_client_metadata_url_must_be_https_with_a_path(url: str) -> None:
    with pytest.raises(InsecureURL):
        client_metadata_document(url, redirect_uris=[REDIRECT])


# --- dynamic registration against a loopback server ------------------------------------------

def test_dcr_request_body(server: ScriptedServer, session: requests.Session) -> None:
    server.routes["/register"] = Reply(201, {"client_id": "dyn-1",
                                             "token_endpoint_auth_method": "none"})
    meta = make_meta(server.base)
    reg = register(meta, redirect_uris=[REDIRECT], client_name="mcpsync",
                   application_type="native", session=session, policy=POLICY)
    sent = server.requests[0]
    assert sent.method == "POST"
    assert sent.headers["Content-Type"] == "application/json"
    assert sent.json() == {
        "client_name": "mcpsync", "redirect_uris": [REDIRECT], "response_types": ["code"],
        "grant_types": ["authorization_code", "refresh_token"],
        "token_endpoint_auth_method": "none", "application_type": "native"}
    assert reg == ClientRegistration("dyn-1", "none", redirect_uris=(REDIRECT,),
                                     issuer=server.base, source="dynamic",
                                     grant_types=("authorization_code", "refresh_token"))


def test_dcr_request_body_for_the_device_code(server: ScriptedServer,
                                              session: requests.Session) -> None:
    """RFC 7591 §2: the device login registers for the device-code grant it will use (not the
    browser grants), with no redirect URI and no response type (RFC 7591 §2.1)."""
    server.routes["/register"] = Reply(201, {"client_id": "dev-1",
                                             "token_endpoint_auth_method": "none"})
    reg = register(make_meta(server.base), redirect_uris=[], client_name="mcpsync",
                   application_type="native", session=session, policy=POLICY,
                   grant_types=DEVICE_GRANT_TYPES)
    assert server.requests[0].json() == {
        "client_name": "mcpsync", "response_types": [],
        "grant_types": [GRANT_DEVICE_CODE, "refresh_token"],
        "token_endpoint_auth_method": "none", "application_type": "native"}
    assert reg.grant_types == (GRANT_DEVICE_CODE, "refresh_token")
    assert reg.redirect_uris == ()
    assert reg.covers(DEVICE_GRANT_TYPES) and not reg.covers(["authorization_code"])


def test_dcr_for_the_device_code_drops_refresh_token_when_not_supported(
        server: ScriptedServer, session: requests.Session) -> None:
    server.routes["/register"] = Reply(201, {"client_id": "dev-1"})
    meta = make_meta(server.base, grant_types_supported=("authorization_code", GRANT_DEVICE_CODE))
    register(meta, redirect_uris=[], client_name="x", application_type="native",
             session=session, policy=POLICY, grant_types=DEVICE_GRANT_TYPES)
    assert server.requests[0].json()["grant_types"] == [GRANT_DEVICE_CODE]


def test_dcr_records_the_grant_types_the_server_registered(server: ScriptedServer,
                                                           session: requests.Session) -> None:
    """The answer is the registered metadata (RFC 7591 §3.2.1): it wins over what we asked."""
    server.routes["/register"] = Reply(201, {"client_id": "c",
                                             "grant_types": ["authorization_code"]})
    reg = register(make_meta(server.base), redirect_uris=[REDIRECT], client_name="x",
                   application_type="native", session=session, policy=POLICY)
    assert reg.grant_types == ("authorization_code",)


def test_dcr_for_authorization_code_needs_a_redirect_uri(session: requests.Session) -> None:
    with pytest.raises(ValueError, match="redirect_uris"):
        register(make_meta(), redirect_uris=[], client_name="x", application_type="native",
                 session=session, policy=POLICY)


@pytest.mark.parametrize(("registered", "wanted", "covered"), [
    ((), ["authorization_code", "refresh_token"], True),      # RFC 7591 default
    ((), DEVICE_GRANT_TYPES, False),
    (("authorization_code", "refresh_token"), DEVICE_GRANT_TYPES, False),
    ((GRANT_DEVICE_CODE,), DEVICE_GRANT_TYPES, True),         # refresh_token was declined
    (DEVICE_GRANT_TYPES, ["authorization_code", "refresh_token"], False),
])
def test_covers(registered: tuple[str, ...], wanted: list[str], covered: bool) -> None:
    reg = ClientRegistration("c", "none", grant_types=registered)
    assert reg.covers(wanted) is covered


def test_dcr_drops_refresh_token_when_not_supported(server: ScriptedServer,
                                                    session: requests.Session) -> None:
    server.routes["/register"] = Reply(200, {"client_id": "c", "client_secret": "s"})
    meta = make_meta(server.base, grant_types_supported=("authorization_code",),
                     token_endpoint_auth_methods_supported=("client_secret_post",))
    register(meta, redirect_uris=["https://app.example/cb"], client_name="x",
             application_type="web", session=session, policy=POLICY)
    body = server.requests[0].json()
    assert body["grant_types"] == ["authorization_code"]
    assert body["token_endpoint_auth_method"] == "client_secret_post"
    assert body["application_type"] == "web"


def test_dcr_keeps_refresh_token_when_listed(server: ScriptedServer,
                                             session: requests.Session) -> None:
    server.routes["/register"] = Reply(200, {"client_id": "c"})
    meta = make_meta(server.base, grant_types_supported=("authorization_code", "refresh_token"))
    register(meta, redirect_uris=[REDIRECT], client_name="x", application_type="native",
             session=session, policy=POLICY)
    assert server.requests[0].json()["grant_types"] == ["authorization_code", "refresh_token"]


def test_dcr_response_auth_method_is_authoritative(server: ScriptedServer,
                                                   session: requests.Session) -> None:
    server.routes["/register"] = Reply(201, {
        "client_id": "c", "client_secret": "s3cret", "client_secret_expires_at": 4e9,
        "token_endpoint_auth_method": "client_secret_post"})
    reg = register(make_meta(server.base), redirect_uris=[REDIRECT], client_name="x",
                   application_type="native", session=session, policy=POLICY)
    assert server.requests[0].json()["token_endpoint_auth_method"] == "none"
    assert reg.token_endpoint_auth_method == "client_secret_post"
    assert reg.client_secret == "s3cret"
    assert reg.client_secret_expires_at == 4e9
    assert "s3cret" not in repr(reg)


def test_dcr_secret_without_method_keeps_the_requested_one(server: ScriptedServer,
                                                           session: requests.Session) -> None:
    server.routes["/register"] = Reply(201, {"client_id": "c", "client_secret": "s",
                                             "client_secret_expires_at": 0})
    meta = make_meta(server.base, token_endpoint_auth_methods_supported=("client_secret_basic",))
    reg = register(meta, redirect_uris=[REDIRECT], client_name="x", application_type="native",
                   session=session, policy=POLICY)
    assert reg.token_endpoint_auth_method == "client_secret_basic"
    assert reg.client_secret_expires_at is None


@pytest.mark.parametrize(("status", "answer", "error", "description"), [
    (400, {"error": "invalid_redirect_uri", "error_description": "loopback not allowed"},
     "invalid_redirect_uri", "loopback not allowed"),
    (400, {"error": "invalid_client_metadata"}, "invalid_client_metadata", ""),
    (500, "<html>oops</html>", "", ""),
    (403, {"error": 5}, "", ""),
])
def test_dcr_refusal_quotes_the_server(server: ScriptedServer, session: requests.Session,
                                       status: int, answer: Any, error: str,
                                       description: str) -> None:
    server.routes["/register"] = Reply(status, answer)
    with pytest.raises(RegistrationError) as info:
        register(make_meta(server.base), redirect_uris=[REDIRECT], client_name="x",
                 application_type="native", session=session, policy=POLICY)
    exc = info.value
    assert (exc.error, exc.error_description) == (error, description)
    assert f"HTTP {status}" in str(exc)
    assert error in str(exc) and description in str(exc)
    assert exc.step == "registration"
    assert exc.url == server.base + "/register"


@pytest.mark.parametrize("answer", [
    {"client_secret": "x"}, {"client_id": ""}, {"client_id": 7},
    {"client_id": "c", "token_endpoint_auth_method": "tls_client_auth"},
    {"client_id": "c", "token_endpoint_auth_method": "client_secret_basic"},  # no secret
])
def test_dcr_unusable_answers(server: ScriptedServer, session: requests.Session,
                              answer: dict[str, Any]) -> None:
    server.routes["/register"] = Reply(201, answer)
    with pytest.raises(RegistrationError):
        register(make_meta(server.base), redirect_uris=[REDIRECT], client_name="x",
                 application_type="native", session=session, policy=POLICY)


def test_dcr_without_endpoint(session: requests.Session) -> None:
    with pytest.raises(RegistrationError, match="no registration endpoint"):
        register(make_meta(registration_endpoint=None), redirect_uris=[REDIRECT],
                 client_name="x", application_type="native", session=session, policy=POLICY)


@responses.activate
def test_dcr_redirect_is_an_error() -> None:
    responses.post("https://as.example/register", status=307,
                   headers={"Location": "https://other.example/register"})
    with requests.Session() as s, pytest.raises(AuthError, match="never follows redirects"):
        register(make_meta(), redirect_uris=[REDIRECT], client_name="x",
                 application_type="native", session=s, policy=POLICY)
    assert len(responses.calls) == 1


@responses.activate
def test_dcr_oversize_answer_is_an_error() -> None:
    responses.post("https://as.example/register",
                   json={"client_id": "c", "pad": "x" * (1 << 20)})
    with requests.Session() as s, pytest.raises(AuthError, match="larger than"):
        register(make_meta(), redirect_uris=[REDIRECT], client_name="x",
                 application_type="native", session=s, policy=POLICY)


@responses.activate
def test_dcr_network_error() -> None:
    responses.post("https://as.example/register", body=requests.ConnectionError("down"))
    with requests.Session() as s, pytest.raises(AuthError) as info:
        register(make_meta(), redirect_uris=[REDIRECT], client_name="x",
                 application_type="native", session=s, policy=POLICY)
    assert info.value.step == "registration"


def test_dcr_to_non_loopback_http_is_refused(session: requests.Session) -> None:
    meta = make_meta(registration_endpoint="http://as.example/register")
    with pytest.raises(InsecureURL):
        register(meta, redirect_uris=[REDIRECT], client_name="x", application_type="native",
                 session=session, policy=POLICY)


# --- the order ------------------------------------------------------------------------------

def choose(meta: ServerMetadata, session: requests.Session, **kw: Any) -> ClientRegistration:
    args: dict[str, Any] = {"preregistered": None, "client_metadata_url": None, "stored": None,
                            "redirect_uri": REDIRECT, "client_name": "mcpsync",
                            "application_type": "native"}
    args.update(kw)
    return choose_registration(meta, session=session, policy=POLICY, **args)


def test_preregistered_comes_first(server: ScriptedServer, session: requests.Session) -> None:
    pre = ClientRegistration("mine", "client_secret_basic", client_secret="s")
    meta = make_meta(server.base, client_id_metadata_document_supported=True)
    reg = choose(meta, session, preregistered=pre, client_metadata_url=CIMD_URL)
    assert reg.client_id == "mine"
    assert reg.issuer == server.base
    assert reg.source == "preregistered"
    assert server.requests == []


def test_cimd_when_configured_and_supported(server: ScriptedServer,
                                            session: requests.Session) -> None:
    meta = make_meta(server.base, client_id_metadata_document_supported=True)
    reg = choose(meta, session, client_metadata_url=CIMD_URL)
    assert reg == ClientRegistration(CIMD_URL, "none", redirect_uris=(REDIRECT,),
                                     issuer=server.base, source="cimd")
    assert server.requests == []


def test_cimd_not_supported_falls_to_dcr(server: ScriptedServer,
                                         session: requests.Session) -> None:
    server.routes["/register"] = Reply(201, {"client_id": "dyn"})
    reg = choose(make_meta(server.base), session, client_metadata_url=CIMD_URL)
    assert reg.client_id == "dyn" and reg.source == "dynamic"


def test_cimd_url_must_be_https(session: requests.Session) -> None:
    meta = make_meta(client_id_metadata_document_supported=True)
    with pytest.raises(InsecureURL):
        choose(meta, session, client_metadata_url="http://localhost/cimd.json")


def test_dcr_when_nothing_else(server: ScriptedServer, session: requests.Session) -> None:
    server.routes["/register"] = Reply(201, {"client_id": "dyn"})
    reg = choose(make_meta(server.base), session, application_type="native")
    assert reg.client_id == "dyn"
    assert server.requests[0].json()["redirect_uris"] == [REDIRECT]


def test_stored_dynamic_registration_is_reused(server: ScriptedServer,
                                               session: requests.Session) -> None:
    stored = ClientRegistration("old", "none", redirect_uris=(REDIRECT,), issuer=server.base,
                                source="dynamic")
    assert choose(make_meta(server.base), session, stored=stored) is stored
    assert server.requests == []


@pytest.mark.parametrize("change", [
    {"redirect_uris": ("http://127.0.0.1:9999/callback",)},
    {"issuer": "https://other.example"},
    {"client_secret": "s", "client_secret_expires_at": 1.0,
     "token_endpoint_auth_method": "client_secret_basic"},
    {"source": "preregistered"},
])
def test_stored_registration_not_reused(server: ScriptedServer, session: requests.Session,
                                        change: dict[str, Any]) -> None:
    server.routes["/register"] = Reply(201, {"client_id": "new"})
    stored = dataclasses.replace(
        ClientRegistration("old", "none", redirect_uris=(REDIRECT,), issuer=server.base,
                           source="dynamic"), **change)
    assert choose(make_meta(server.base), session, stored=stored).client_id == "new"
    assert len(server.requests) == 1


@pytest.mark.parametrize("grants", [(), ("authorization_code", "refresh_token")])
def test_stored_authorization_code_registration_not_reused_for_the_device_code(
        server: ScriptedServer, session: requests.Session, grants: tuple[str, ...]) -> None:
    server.routes["/register"] = Reply(201, {"client_id": "dev"})
    stored = ClientRegistration("old", "none", redirect_uris=(REDIRECT,), issuer=server.base,
                                source="dynamic", grant_types=grants)
    reg = choose(make_meta(server.base), session, stored=stored, redirect_uri=None,
                 grant_types=DEVICE_GRANT_TYPES)
    assert reg.client_id == "dev" and reg.grant_types == DEVICE_GRANT_TYPES
    [sent] = server.requests
    assert sent.json()["grant_types"] == list(DEVICE_GRANT_TYPES)
    assert "redirect_uris" not in sent.json()


def test_stored_device_registration_is_reused_for_the_device_code_only(
        server: ScriptedServer, session: requests.Session) -> None:
    server.routes["/register"] = Reply(201, {"client_id": "browser"})
    stored = ClientRegistration("dev", "none", issuer=server.base, source="dynamic",
                                grant_types=DEVICE_GRANT_TYPES)
    meta = make_meta(server.base)
    assert choose(meta, session, stored=stored, redirect_uri=None,
                  grant_types=DEVICE_GRANT_TYPES) is stored
    assert server.requests == []
    assert choose(meta, session, stored=stored).client_id == "browser"
    assert server.requests[0].json()["grant_types"] == ["authorization_code", "refresh_token"]


def test_nothing_possible_asks_for_a_client_id(session: requests.Session) -> None:
    meta = make_meta(registration_endpoint=None)
    with pytest.raises(RegistrationError, match=r"configure a client_id for https://as\.example"):
        choose(meta, session, client_metadata_url=CIMD_URL)
