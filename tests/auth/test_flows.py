"""The authorization-code grant and the token endpoint, DPoP on token requests included.

URL building and the callback checks are pure; every token request goes to
:class:`ScriptedServer`, a real HTTP server on loopback that records what it receives and
answers from a script, so the assertions are about bytes on the wire: the form, the Basic
header, the signed client assertion (verified with the public key) and the DPoP proofs.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

import pytest
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from joserfc import jwt
from joserfc.jwk import ECKey, RSAKey

from mcpauth._http import HttpPolicy
from mcpauth.discovery import ServerMetadata
from mcpauth.dpop import DPoPKey, DPoPProver
from mcpauth.errors import (
    AuthError,
    AuthorizationDenied,
    DPoPError,
    InsecureURL,
    IssMismatch,
    StateMismatch,
    TokenRequestError,
)
from mcpauth.flows import (
    ASSERTION_LIFETIME,
    VERIFIER_LENGTH,
    PendingAuthorization,
    TokenEndpoint,
    authorization_url,
    client_credentials,
    device_authorization,
    exchange_code,
    new_pending,
    parse_callback,
    refresh,
)
from mcpauth.registration import ClientRegistration

from ._servers import Recorded, Reply, ScriptedServer

ISSUER = "https://as.example.com/tenant"
RESOURCE = "https://mcp.example.com/mcp"
REDIRECT = "http://127.0.0.1:8765/callback"
POLICY = HttpPolicy()
JWT_BEARER_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
TOKEN = {"access_token": "at-1", "token_type": "Bearer"}




def make_meta(token_endpoint: str = "https://as.example.com/token", *, issuer: str = ISSUER,
              iss_supported: bool = False,
              authorization_endpoint: str | None = "https://as.example.com/authorize",
              device_endpoint: str | None = None) -> ServerMetadata:
    return ServerMetadata(
        issuer=issuer, authorization_endpoint=authorization_endpoint,
        token_endpoint=token_endpoint, registration_endpoint=None,
        device_authorization_endpoint=device_endpoint, scopes_supported=None,
        grant_types_supported=None, token_endpoint_auth_methods_supported=None,
        code_challenge_methods_supported=("S256",), dpop_signing_alg_values_supported=("ES256",),
        authorization_response_iss_parameter_supported=iss_supported,
        client_id_metadata_document_supported=False, fallback=False, raw={})


PUBLIC = ClientRegistration(client_id="client-1", token_endpoint_auth_method="none")


def pending(**overrides: Any) -> PendingAuthorization:
    values: dict[str, Any] = {"issuer": ISSUER, "code_verifier": "v" * 64, "state": "st-123",
                              "redirect_uri": REDIRECT, "resource": RESOURCE,
                              "scopes": ("mcp:read",)}
    values.update(overrides)
    return PendingAuthorization(**values)


def unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


# ---- PKCE, state and the authorization URL ------------------------------------------------


def test_verifier_and_state_have_the_required_shape() -> None:
    seen: set[str] = set()
    for _ in range(20):
        p = new_pending(make_meta(), PUBLIC, redirect_uri=REDIRECT, resource=RESOURCE,
                        scopes=["a"])
        assert len(p.code_verifier) == VERIFIER_LENGTH == 64
        assert re.fullmatch(r"[A-Za-z0-9\-._~]{64}", p.code_verifier)
        assert re.fullmatch(r"[A-Za-z0-9_-]+", p.state)  # base64url, no padding
        assert len(unb64(p.state)) == 32
        seen.add(p.code_verifier)
        seen.add(p.state)
    assert len(seen) == 40  # nothing repeats


def test_pending_records_what_the_callback_and_exchange_need() -> None:
    p = new_pending(make_meta(), PUBLIC, redirect_uri=REDIRECT, resource=RESOURCE,
                    scopes=["a", "b"])
    assert (p.issuer, p.redirect_uri, p.resource, p.scopes) == (ISSUER, REDIRECT, RESOURCE,
                                                                ("a", "b"))
    text = repr(p)
    assert p.code_verifier not in text and p.state not in text
    assert "***" in text and ISSUER in text


def test_authorization_url_carries_every_parameter() -> None:
    p = new_pending(make_meta(), PUBLIC, redirect_uri=REDIRECT, resource=RESOURCE,
                    scopes=["mcp:read", "mcp:write"])
    url = authorization_url(make_meta(), PUBLIC, p)
    parts = urlsplit(url)
    assert f"{parts.scheme}://{parts.netloc}{parts.path}" == "https://as.example.com/authorize"
    q = parse_qs(parts.query)
    assert all(len(v) == 1 for v in q.values())
    params = {k: v[0] for k, v in q.items()}
    expected_challenge = base64.urlsafe_b64encode(
        hashlib.sha256(p.code_verifier.encode()).digest()).rstrip(b"=").decode()
    assert params == {
        "response_type": "code", "client_id": "client-1", "redirect_uri": REDIRECT,
        "state": p.state, "scope": "mcp:read mcp:write", "code_challenge": expected_challenge,
        "code_challenge_method": "S256", "resource": RESOURCE,
    }
    assert p.code_verifier not in url


def test_authorization_url_omits_scope_when_there_is_none_and_keeps_endpoint_query() -> None:
    meta = make_meta(authorization_endpoint="https://as.example.com/authorize?tenant=t1")
    url = authorization_url(meta, PUBLIC, pending(scopes=()))
    q = parse_qs(urlsplit(url).query)
    assert "scope" not in q
    assert q["tenant"] == ["t1"]
    assert q["resource"] == [RESOURCE]


def test_authorization_url_needs_an_authorization_endpoint() -> None:
    with pytest.raises(AuthError) as info:
        authorization_url(make_meta(authorization_endpoint=None), PUBLIC, pending())
    assert info.value.step == "authorization"


# ---- the callback: state, RFC 9207 iss, error ---------------------------------------------


def callback(**params: str) -> str:
    return f"{REDIRECT}?{urlencode(params)}"


# Every row of the RFC 9207 iss table, plus the no-normalisation cases.
ISS_CASES = [
    # (advertised, iss in the callback or None, accepted)
    pytest.param(True, ISSUER, True, id="advertised-present-equal"),
    pytest.param(True, None, False, id="advertised-absent"),
    pytest.param(True, "https://evil.example.com", False, id="advertised-present-wrong"),
    pytest.param(False, ISSUER, True, id="not-advertised-present-equal"),
    pytest.param(False, "https://evil.example.com", False, id="not-advertised-present-wrong"),
    pytest.param(False, None, True, id="not-advertised-absent"),
    pytest.param(True, ISSUER + "/", False, id="trailing-slash"),
    pytest.param(True, ISSUER.upper(), False, id="case"),
    pytest.param(True, "https://as.example.com:443/tenant", False, id="default-port"),
    pytest.param(True, "https://as.example.com/%74enant", False, id="percent-encoding"),
]


@pytest.mark.parametrize(("advertised", "iss", "accepted"), ISS_CASES)
def test_iss_table(advertised: bool, iss: str | None, accepted: bool) -> None:
    params = {"code": "the-code", "state": "st-123"}
    if iss is not None:
        params["iss"] = iss
    meta = make_meta(iss_supported=advertised)
    if accepted:
        assert parse_callback(callback(**params), pending(), meta) == "the-code"
    else:
        with pytest.raises(IssMismatch) as info:
            parse_callback(callback(**params), pending(), meta)
        assert info.value.step == "authorization"
        assert "the-code" not in str(info.value)


def test_iss_is_compared_after_form_decoding() -> None:
    # The issuer's characters percent-encoded on the wire decode to the identical string.
    url = f"{REDIRECT}?code=c&state=st-123&iss={quote(ISSUER, safe='')}"
    assert parse_callback(url, pending(), make_meta(iss_supported=True)) == "c"


@pytest.mark.parametrize("url", [
    callback(code="c", state="other"),
    callback(code="c"),
    f"{REDIRECT}?code=c&state=st-123&state=st-123",
    callback(code="c", state="st-12"),
], ids=["wrong", "missing", "duplicated", "prefix"])
def test_state_mismatch_discards_the_code(url: str) -> None:
    with pytest.raises(StateMismatch) as info:
        parse_callback(url, pending(), make_meta())
    assert "c" not in re.findall(r"\b\w\b", str(info.value))


def test_state_is_checked_before_iss_and_iss_before_error() -> None:
    meta = make_meta(iss_supported=True)
    with pytest.raises(StateMismatch):
        parse_callback(callback(state="bad", iss="https://evil.example.com", error="x"),
                       pending(), meta)
    with pytest.raises(IssMismatch) as info:
        parse_callback(callback(state="st-123", iss="https://evil.example.com",
                                error="access_denied", error_description="PHISHING TEXT",
                                error_uri="https://evil.example.com/help"), pending(), meta)
    assert "PHISHING" not in str(info.value) and "access_denied" not in str(info.value)
    with pytest.raises(IssMismatch):  # advertised but absent: the error is not believed
        parse_callback(callback(state="st-123", error="access_denied"), pending(), meta)


def test_error_raises_authorization_denied() -> None:
    with pytest.raises(AuthorizationDenied) as info:
        parse_callback(callback(state="st-123", iss=ISSUER, error="access_denied",
                                error_description="the user said no"), pending(),
                       make_meta(iss_supported=True))
    assert info.value.error == "access_denied"
    assert info.value.error_description == "the user said no"
    assert ISSUER in str(info.value)


def test_callback_without_code_is_refused() -> None:
    with pytest.raises(AuthorizationDenied):
        parse_callback(callback(state="st-123"), pending(), make_meta())


# ---- the code exchange with each client authentication method -----------------------------


def ec_pem() -> tuple[str, ec.EllipticCurvePublicKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    return pem, key.public_key()


def endpoint_for(server: ScriptedServer, session: requests.Session,
                 registration: ClientRegistration, *,
                 dpop: DPoPProver | None = None) -> TokenEndpoint:
    return TokenEndpoint(make_meta(f"{server.base}/token"), registration, session=session,
                         policy=POLICY, dpop=dpop)


def exchange(server: ScriptedServer, session: requests.Session,
             registration: ClientRegistration) -> Recorded:
    server.script.append(Reply(body=TOKEN))
    answer = exchange_code(endpoint_for(server, session, registration), pending(), "code-xyz")
    assert answer == {"access_token": "at-1", "token_type": "Bearer"}
    (rec,) = server.requests
    assert (rec.method, rec.path) == ("POST", "/token")
    assert rec.header("Content-Type") == "application/x-www-form-urlencoded"
    form = rec.form
    for name, value in {"grant_type": "authorization_code", "code": "code-xyz",
                        "redirect_uri": REDIRECT, "code_verifier": "v" * 64,
                        "client_id": registration.client_id, "resource": RESOURCE}.items():
        assert form[name] == value, name
    assert "scope" not in form
    assert rec.header("DPoP") is None
    return rec


def test_exchange_with_none(server: ScriptedServer, session: requests.Session) -> None:
    rec = exchange(server, session, PUBLIC)
    assert rec.header("Authorization") is None
    assert "client_secret" not in rec.form and "client_assertion" not in rec.form


def test_exchange_with_client_secret_basic(server: ScriptedServer,
                                           session: requests.Session) -> None:
    reg = ClientRegistration(client_id="id:1", client_secret="s3cr:et/+%",
                             token_endpoint_auth_method="client_secret_basic")
    rec = exchange(server, session, reg)
    scheme, _, encoded = (rec.header("Authorization") or "").partition(" ")
    assert scheme == "Basic"
    user, _, password = base64.b64decode(encoded).decode().partition(":")
    # RFC 6749 §2.3.1: each part form-urlencoded, so a ':' in the id cannot split it.
    assert (unquote(user), unquote(password)) == ("id:1", "s3cr:et/+%")
    assert ":" not in user
    assert "client_secret" not in rec.form


def test_exchange_with_client_secret_post(server: ScriptedServer,
                                          session: requests.Session) -> None:
    reg = ClientRegistration(client_id="client-2", client_secret="post-secret",
                             token_endpoint_auth_method="client_secret_post")
    rec = exchange(server, session, reg)
    assert rec.header("Authorization") is None
    assert rec.form["client_secret"] == "post-secret"


def verify_assertion(assertion: str, public_key: Any, alg: str) -> dict[str, Any]:
    key = ECKey.import_key(public_key) if alg.startswith("ES") else RSAKey.import_key(public_key)
    token = jwt.decode(assertion, key, algorithms=[alg])
    assert token.header["alg"] == alg
    return dict(token.claims)


def test_exchange_with_private_key_jwt(server: ScriptedServer,
                                       session: requests.Session) -> None:
    pem, public = ec_pem()
    reg = ClientRegistration(client_id="jwt-client", private_key=pem,
                             token_endpoint_auth_method="private_key_jwt")
    rec = exchange(server, session, reg)
    assert rec.header("Authorization") is None
    form = rec.form
    assert form["client_assertion_type"] == JWT_BEARER_TYPE
    claims = verify_assertion(form["client_assertion"], public, "ES256")
    assert claims["iss"] == claims["sub"] == "jwt-client"
    assert claims["aud"] == ISSUER
    assert claims["exp"] - claims["iat"] == ASSERTION_LIFETIME == 300
    assert isinstance(claims["jti"], str) and len(claims["jti"]) >= 16
    # A second request signs a new assertion with a new jti.
    server.requests.clear()
    rec2 = exchange(server, session, reg)
    claims2 = verify_assertion(rec2.form["client_assertion"], public, "ES256")
    assert claims2["jti"] != claims["jti"]


def test_private_key_jwt_with_rs256(server: ScriptedServer, session: requests.Session) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    reg = ClientRegistration(client_id="rsa-client", private_key=pem, signing_alg="RS256",
                             token_endpoint_auth_method="private_key_jwt")
    server.script.append(Reply(body=TOKEN))
    client_credentials(endpoint_for(server, session, reg), scopes=[], resource=RESOURCE)
    claims = verify_assertion(server.requests[0].form["client_assertion"], key.public_key(),
                              "RS256")
    assert claims["iss"] == "rsa-client" and claims["aud"] == ISSUER


def test_secret_method_without_secret_is_an_error(server: ScriptedServer,
                                                  session: requests.Session) -> None:
    reg = ClientRegistration(client_id="c", token_endpoint_auth_method="client_secret_basic")
    with pytest.raises(AuthError):
        exchange_code(endpoint_for(server, session, reg), pending(), "code")
    assert server.requests == []


# ---- refresh, client credentials, errors --------------------------------------------------


def test_refresh_form_has_no_scope_and_keeps_resource(server: ScriptedServer,
                                                      session: requests.Session) -> None:
    server.script.append(Reply(body={"access_token": "at-2", "token_type": "Bearer",
                                     "refresh_token": "rt-2"}))
    answer = refresh(endpoint_for(server, session, PUBLIC), "rt-1", resource=RESOURCE)
    assert answer["refresh_token"] == "rt-2"
    assert server.requests[0].form == {"grant_type": "refresh_token", "refresh_token": "rt-1",
                                       "resource": RESOURCE, "client_id": "client-1"}


def test_client_credentials_form(server: ScriptedServer, session: requests.Session) -> None:
    reg = ClientRegistration(client_id="svc", client_secret="sec",
                             token_endpoint_auth_method="client_secret_post")
    server.script.append(Reply(body=TOKEN))
    client_credentials(endpoint_for(server, session, reg), scopes=["a", "b"], resource=RESOURCE)
    assert server.requests[0].form == {"grant_type": "client_credentials", "scope": "a b",
                                       "resource": RESOURCE, "client_id": "svc",
                                       "client_secret": "sec"}


def test_token_error_is_parsed_without_echoing_secrets(server: ScriptedServer,
                                                       session: requests.Session) -> None:
    server.script.append(Reply(400, {"error": "invalid_grant",
                                     "error_description": "refresh token rt-secret-1 revoked"}))
    with pytest.raises(TokenRequestError) as info:
        refresh(endpoint_for(server, session, PUBLIC), "rt-secret-1", resource=RESOURCE)
    exc = info.value
    assert (exc.error, exc.status, exc.step) == ("invalid_grant", 400, "refresh")
    assert "rt-secret-1" not in str(exc) and "rt-secret-1" not in exc.error_description
    assert "invalid_grant" in str(exc) and "revoked" in str(exc)
    assert server.base in str(exc)


def test_token_error_never_echoes_the_basic_secret_or_the_proof(
        server: ScriptedServer, session: requests.Session) -> None:
    """A server quoting back what it received (the Basic credentials and the DPoP proof
    travel in headers, not the form) cannot make an error show them."""
    secret = "s3cret/with+chars"

    def echo(rec: Recorded) -> Reply:
        return Reply(400, {"error": "invalid_client", "error_description":
                           f"got {rec.header('Authorization')} {unquote(secret)} "
                           f"{quote(secret, safe='')} proof {rec.header('DPoP')}"})

    server.script.append(echo)
    reg = ClientRegistration(client_id="cid", client_secret=secret,
                             token_endpoint_auth_method="client_secret_basic")
    with pytest.raises(TokenRequestError) as info:
        refresh(endpoint_for(server, session, reg, dpop=DPoPProver(DPoPKey.generate())),
                "rt-x", resource=RESOURCE)
    (rec,) = server.requests
    proof = rec.header("DPoP")
    basic = (rec.header("Authorization") or "").removeprefix("Basic ")
    assert proof and basic
    for text in (str(info.value), repr(info.value), info.value.error_description):
        for leaked in (secret, quote(secret, safe=""), proof, basic):
            assert leaked not in text
    assert "invalid_client" in str(info.value) and "***" in info.value.error_description


@pytest.mark.parametrize("where", ["token", "device"])
def test_an_answer_over_one_mebibyte_is_an_error(server: ScriptedServer,
                                                 session: requests.Session,
                                                 where: str) -> None:
    """The 1 MiB cap holds for token and device endpoints as for metadata."""
    huge = {"access_token": "a" * (1 << 20), "token_type": "Bearer"}
    server.routes["/token"] = Reply(body=huge, chunked=True)
    server.routes["/device"] = Reply(body={"device_code": "d" * (1 << 20)}, chunked=True)
    meta = make_meta(f"{server.base}/token", device_endpoint=f"{server.base}/device")
    endpoint = TokenEndpoint(meta, PUBLIC, session=session, policy=POLICY)
    with pytest.raises(AuthError, match="larger than 1048576 bytes") as info:
        if where == "token":
            client_credentials(endpoint, scopes=(), resource=RESOURCE)
        else:
            device_authorization(meta, PUBLIC, scopes=(), resource=RESOURCE, session=session,
                                 policy=POLICY, handler=None, endpoint=endpoint)
    assert info.value.step in ("token request", "authorization")
    assert f"{server.base}/{where}" in str(info.value)


def test_a_device_endpoint_redirect_is_not_followed(server: ScriptedServer,
                                                    session: requests.Session) -> None:
    server.routes["/device"] = Reply(307, {}, {"Location": f"{server.base}/elsewhere"})
    meta = make_meta(f"{server.base}/token", device_endpoint=f"{server.base}/device")
    endpoint = TokenEndpoint(meta, PUBLIC, session=session, policy=POLICY)
    with pytest.raises(AuthError, match="never follows redirects"):
        device_authorization(meta, PUBLIC, scopes=(), resource=RESOURCE, session=session,
                             policy=POLICY, handler=None, endpoint=endpoint)
    assert [r.path for r in server.requests] == ["/device"]


def test_non_json_error_and_non_json_success(server: ScriptedServer,
                                             session: requests.Session) -> None:
    endpoint = endpoint_for(server, session, PUBLIC)
    server.script.append(Reply(502, b"<html>bad gateway</html>"))
    with pytest.raises(TokenRequestError) as info:
        exchange_code(endpoint, pending(), "c")
    assert (info.value.status, info.value.error) == (502, "")
    server.script.append(Reply(200, b"not json"))
    with pytest.raises(TokenRequestError) as info:
        exchange_code(endpoint, pending(), "c")
    assert info.value.error == "invalid_response"


def test_post_redirect_is_not_followed(server: ScriptedServer,
                                       session: requests.Session) -> None:
    server.script.append(Reply(307, {}, {"Location": f"{server.base}/elsewhere"}))
    with pytest.raises(AuthError):
        exchange_code(endpoint_for(server, session, PUBLIC), pending(), "c")
    assert [r.path for r in server.requests] == ["/token"]


def test_plain_http_token_endpoint_is_refused(session: requests.Session) -> None:
    endpoint = TokenEndpoint(make_meta("http://as.example.com/token"), PUBLIC, session=session,
                             policy=POLICY)
    with pytest.raises(InsecureURL):
        exchange_code(endpoint, pending(), "c")


# ---- DPoP on token requests ---------------------------------------------------------------


def proof_parts(proof: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Verify a DPoP proof with the key in its own header (joserfc, not mcpauth)."""
    header = json.loads(unb64(proof.split(".")[0]))
    token = jwt.decode(proof, ECKey.import_key(header["jwk"]), algorithms=["ES256"])
    return dict(token.header), dict(token.claims)


def dpop_reply(**extra: Any) -> Reply:
    return Reply(body={"access_token": "at-d", "token_type": "DPoP", **extra})


def test_token_requests_carry_a_dpop_proof_without_ath(server: ScriptedServer,
                                                       session: requests.Session) -> None:
    prover = DPoPProver(DPoPKey.generate())
    server.script.append(dpop_reply())
    exchange_code(endpoint_for(server, session, PUBLIC, dpop=prover), pending(), "c")
    (rec,) = server.requests
    header, claims = proof_parts(rec.header("DPoP") or "")
    assert header["typ"] == "dpop+jwt" and header["jwk"] == prover.key.public_jwk()
    assert claims["htm"] == "POST" and claims["htu"] == f"{server.base}/token"
    assert "ath" not in claims and "nonce" not in claims


def test_use_dpop_nonce_is_retried_once_with_the_nonce(server: ScriptedServer,
                                                       session: requests.Session) -> None:
    prover = DPoPProver(DPoPKey.generate())
    pem, _ = ec_pem()
    reg = ClientRegistration(client_id="jwt-client", private_key=pem,
                             token_endpoint_auth_method="private_key_jwt")
    server.script += [Reply(400, {"error": "use_dpop_nonce"}, {"DPoP-Nonce": "n-1"}),
                      dpop_reply()]
    answer = refresh(endpoint_for(server, session, reg, dpop=prover), "rt", resource=RESOURCE)
    assert answer["token_type"] == "DPoP"
    first, second = server.requests
    _, c1 = proof_parts(first.header("DPoP") or "")
    _, c2 = proof_parts(second.header("DPoP") or "")
    assert "nonce" not in c1 and c2["nonce"] == "n-1"
    assert c1["jti"] != c2["jti"]
    assert first.form["client_assertion"] != second.form["client_assertion"]
    assert prover.nonce_for(server.base) == "n-1"


def test_use_dpop_nonce_twice_is_an_error(server: ScriptedServer,
                                          session: requests.Session) -> None:
    prover = DPoPProver(DPoPKey.generate())
    server.script += [Reply(400, {"error": "use_dpop_nonce"}, {"DPoP-Nonce": "n-1"}),
                      Reply(400, {"error": "use_dpop_nonce"}, {"DPoP-Nonce": "n-2"})]
    with pytest.raises(TokenRequestError) as info:
        exchange_code(endpoint_for(server, session, PUBLIC, dpop=prover), pending(), "c")
    assert info.value.error == "use_dpop_nonce"
    assert len(server.requests) == 2
    assert prover.nonce_for(server.base) == "n-2"


def test_nonce_from_any_response_is_used_next_time(server: ScriptedServer,
                                                   session: requests.Session) -> None:
    prover = DPoPProver(DPoPKey.generate())
    endpoint = endpoint_for(server, session, PUBLIC, dpop=prover)
    server.script += [dpop_reply(), dpop_reply()]
    server.script[0].headers["DPoP-Nonce"] = "n-ok"  # type: ignore[union-attr]
    exchange_code(endpoint, pending(), "c")
    refresh(endpoint, "rt", resource=RESOURCE)
    _, claims = proof_parts(server.requests[1].header("DPoP") or "")
    assert claims["nonce"] == "n-ok"
    assert len(server.requests) == 2


def test_no_retry_without_dpop(server: ScriptedServer, session: requests.Session) -> None:
    server.script.append(Reply(400, {"error": "use_dpop_nonce"}, {"DPoP-Nonce": "n-1"}))
    with pytest.raises(TokenRequestError):
        exchange_code(endpoint_for(server, session, PUBLIC), pending(), "c")
    assert len(server.requests) == 1


def test_bearer_answer_to_a_dpop_request_is_a_dpop_error(server: ScriptedServer,
                                                         session: requests.Session) -> None:
    server.script.append(Reply(body=TOKEN))  # token_type Bearer
    with pytest.raises(DPoPError):
        exchange_code(endpoint_for(server, session, PUBLIC, dpop=DPoPProver(DPoPKey.generate())),
                      pending(), "c")
