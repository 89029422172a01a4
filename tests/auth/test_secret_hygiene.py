"""No secret in a log, a repr or an exception, proven on whole flows.

Every grant runs against real loopback servers with every logger at DEBUG (mcpauth's, and
urllib3's and requests' below it). Afterwards every secret that crossed the wire (access and
refresh tokens, codes, PKCE verifiers, client secrets, client assertions, JWT-bearer
assertions, ID tokens, device codes, DPoP proofs and keys) is collected from what the
servers received and issued, and none may appear in the captured log text, in the str or
repr of any error raised along the way (causes included) or in the repr of the objects a
user may print. The last test does the same through ``mcpsync.connect`` against the authlib
authorization server.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest
from auth_peers.fixtures import ProtectedMCP
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

import mcpsync
from mcpauth import (
    AuthError,
    LoginRequired,
    MemoryTokenStore,
    OAuthProvider,
    TokenRequestError,
)
from mcpauth.tokens import registration_key

from ._servers import FakeAuthServer, FakeChallenge, challenge, follow_once, make_provider

# Form fields and headers whose values are secrets (what a server receives).
_SECRET_FIELDS = ("code", "code_verifier", "refresh_token", "client_secret",
                  "client_assertion", "assertion", "subject_token", "device_code")
# Loggers of the authorization-server peer running in this process: what a server logs
# about the requests it receives is not the client's doing.
_SERVER_LOGGERS = ("werkzeug", "auth_peers", "flask", "authlib.oauth2.rfc6749",
                   "authlib.oauth2.rfc7591", "authlib.oauth2.rfc6750", "authlib.oauth2.rfc9207",
                   "authlib.oauth2.rfc7636", "authlib.integrations.flask_oauth2")


class Evidence:
    """What may not leak (``secrets``) and where it must not appear (``texts``)."""

    def __init__(self) -> None:
        self.secrets: set[str] = set()
        self.texts: list[str] = []

    def error(self, exc: BaseException) -> None:
        """An error a caller would see: its str and repr, and those of its causes."""
        seen: BaseException | None = exc
        while seen is not None:
            self.texts += [str(seen), repr(seen)]
            seen = seen.__cause__ or seen.__context__

    def expect_error(self, kind: type[AuthError], call: Callable[[], object]) -> AuthError:
        with pytest.raises(kind) as info:
            call()
        self.error(info.value)
        # The message names the step, the URL or issuer, and the reason.
        err = info.value
        assert err.step and str(err).startswith(f"{err.step}: "), str(err)
        assert err.url and err.url in str(err), str(err)
        assert len(str(err)) > len(f"{err.step}: {err.url}") + 10
        return err

    def reprs(self, *objects: object) -> None:
        self.texts += [repr(o) for o in objects] + [str(o) for o in objects]

    def fake_server(self, server: FakeAuthServer) -> None:
        """Every secret the fake authorization servers received or issued."""
        for issuer in server.issuers.values():
            for form in issuer.token_requests:
                self.secrets.update(form[k] for k in _SECRET_FIELDS if form.get(k))
            for headers in issuer.token_headers:
                auth = headers.get("Authorization", "")
                if auth.startswith("Basic "):
                    self.secrets.add(auth[len("Basic "):])
                    self.secrets.update(
                        base64.b64decode(auth[len("Basic "):]).decode().split(":"))
            self.secrets.update(issuer.dpop_proofs)
            for n in range(1, issuer.counter + 1):
                self.secrets.update({f"{issuer.name}-at-{n}", f"{issuer.name}-rt-{n}",
                                     f"{issuer.name}-id-jag-{n}"})
            self.secrets.add(f"code-{issuer.name}")

    def check(self, caplog: pytest.LogCaptureFixture) -> None:
        records = [r for r in caplog.get_records("call") if not r.name.startswith(_SERVER_LOGGERS)]
        assert records, "DEBUG logging was captured (the check would be empty otherwise)"
        handler = logging.Formatter("%(name)s %(levelname)s %(message)s")
        texts = self.texts + [handler.format(r) for r in records]
        secrets = {s for s in self.secrets if s and s != "client-id"}
        assert len(secrets) >= 5
        for secret in secrets:
            for text in texts:
                assert secret not in text, f"a secret ({secret[:6]}...) leaked into: {text!r}"


@pytest.fixture
def evidence(caplog: pytest.LogCaptureFixture) -> Iterator[Evidence]:
    caplog.set_level(logging.DEBUG)
    found = Evidence()
    yield found
    found.check(caplog)


@pytest.fixture
def server() -> Iterator[FakeAuthServer]:
    fake = FakeAuthServer(("as1", "idp"))
    yield fake
    fake.close()


def _pem() -> tuple[str, str]:
    """A fresh EC private key as PEM, and its private scalar in base64url (also secret)."""
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    d = key.private_numbers().private_value.to_bytes(32, "big")
    return pem, base64.urlsafe_b64encode(d).rstrip(b"=").decode()


def _jwt(claims: dict[str, Any]) -> str:
    def b64(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()
    return f"{b64({'alg': 'none'})}.{b64(claims)}.c2lnbmF0dXJlLXNlY3JldA"


@pytest.mark.timeout(30)
def test_code_flow_dpop_refresh_and_fallback_log_no_secret(server: FakeAuthServer,
                                                           evidence: Evidence) -> None:
    as1 = server.issuers["as1"]
    as1.dpop = True
    store = MemoryTokenStore()
    provider = make_provider(server, store=store)
    provider.on_unauthorized(FakeChallenge(
        401, (f'DPoP algs="ES256", resource_metadata="{server.prm_url}"',), url=server.mcp_url))
    first = provider.headers("POST", server.mcp_url)
    evidence.secrets.add(first["DPoP"])
    token = provider.token
    assert token is not None and token.dpop_jwk is not None
    evidence.secrets.add(str(token.dpop_jwk["d"]))
    # A 401 for the current token refreshes; a refused refresh falls back to a login.
    provider.on_unauthorized(FakeChallenge(
        401, (f'DPoP resource_metadata="{server.prm_url}"',), url=server.mcp_url,
        authorization=first["Authorization"]))
    as1.refuse_refresh = True
    second = provider.headers("GET", server.mcp_url)
    evidence.secrets.add(second["DPoP"])
    provider.on_unauthorized(FakeChallenge(
        401, (f'DPoP resource_metadata="{server.prm_url}"',), url=server.mcp_url,
        authorization=second["Authorization"]))
    assert len(as1.authorizations) == 2 and len(as1.grants("refresh_token")) == 2
    # Non-interactive with a dead refresh token: LoginRequired.
    quiet = make_provider(server, store=store, interactive=False)
    current = quiet.headers("POST", server.mcp_url)
    evidence.secrets.add(current["DPoP"])
    evidence.expect_error(LoginRequired, lambda: quiet.on_unauthorized(FakeChallenge(
        401, (f'DPoP resource_metadata="{server.prm_url}"',), url=server.mcp_url,
        authorization=current["Authorization"])))
    evidence.reprs(provider, quiet, provider.token, store,
                   store.get(registration_key(server.issuer_url("as1"))))
    evidence.fake_server(server)
    assert len(as1.dpop_proofs) >= 4


@pytest.mark.timeout(30)
def test_service_grants_and_device_code_log_no_secret(server: FakeAuthServer,
                                                      evidence: Evidence) -> None:
    # client_credentials with a secret, then with private_key_jwt.
    with_secret = make_provider(server, grant="client_credentials", client_id="svc",
                                client_secret="svc-secret-value-1234", interactive=False)
    with_secret.on_unauthorized(challenge(server, scope="jobs"))
    evidence.secrets.add("svc-secret-value-1234")
    pem, scalar = _pem()
    with_key = make_provider(server, grant="client_credentials", client_id="svc-key",
                             private_key=pem, interactive=False)
    with_key.login()
    evidence.secrets.update({pem, scalar, pem.splitlines()[1]})
    assert "client_assertion" in server.issuers["as1"].grants("client_credentials")[-1]
    # Workload identity: accepted, then refused (an error a user sees).
    jwts = iter(["workload-jwt-accepted", "refused-jwt"])
    workload = make_provider(server, grant="jwt_bearer", client_id="wl",
                             assertion_provider=lambda: next(jwts), interactive=False)
    workload.login()
    evidence.expect_error(TokenRequestError, workload.login)
    # Enterprise (ID-JAG) with a valid ID token, then an expired one.
    id_token = _jwt({"exp": int(time.time()) + 600, "sub": "alice"})
    enterprise = make_provider(server, grant="id_jag", client_id="ent",
                               client_secret="ent-secret-5678", id_token=id_token,
                               idp_client_id="idp-client", idp_client_secret="idp-secret-9012",
                               idp_token_endpoint=server.issuer_url("idp") + "/token",
                               interactive=False)
    enterprise.login()
    expired = _jwt({"exp": int(time.time()) - 60, "sub": "alice"})
    late = make_provider(server, grant="id_jag", client_id="ent", client_secret="x" * 8,
                         id_token=expired, idp_client_id="idp-client",
                         idp_token_endpoint=server.issuer_url("idp") + "/token",
                         interactive=False)
    evidence.expect_error(LoginRequired, late.login)
    evidence.secrets.update({id_token, expired, "ent-secret-5678", "idp-secret-9012"})
    # Device code.
    device = OAuthProvider(server.mcp_url, grant="device_code",
                           device_code_handler=lambda info: None)
    device.login()
    evidence.reprs(with_secret, with_key, workload, enterprise, device, device.token,
                   with_key.token, enterprise.token)
    evidence.fake_server(server)


def _authlib_secrets(protected: ProtectedMCP) -> Iterable[str]:
    auth = protected.auth
    for token in auth.tokens:
        yield token.access_token
        if token.refresh_token:
            yield token.refresh_token
    for request in auth.token_log:
        for name in _SECRET_FIELDS:
            yield from request.form.get(name, ())
    for client in auth.registrations:
        secret = getattr(client, "client_secret", None)
        if secret:
            yield secret


@pytest.mark.timeout(60)
def test_mcpsync_with_the_authlib_server_logs_no_secret(
        protected_mcp_factory: Callable[..., ProtectedMCP], evidence: Evidence) -> None:
    protected = protected_mcp_factory()
    provider = OAuthProvider(protected.url, authorization_handler=follow_once)
    with mcpsync.connect(protected.url, auth=provider, timeout=10) as client:
        assert client.call_tool("echo", {"text": "one"}).text == "one"
        token = provider.token
        assert token is not None
        # A 401 for the current token: refresh (with rotation) at the authlib server.
        provider.on_unauthorized(FakeChallenge(401, ("Bearer",), url=protected.url,
                                               authorization=f"Bearer {token.access_token}"))
        assert client.call_tool("echo", {"text": "two"}).text == "two"
        evidence.reprs(client, provider, provider.token)
    assert protected.auth.token_requests == {"authorization_code": 1, "refresh_token": 1}
    evidence.secrets.update(_authlib_secrets(protected))
    assert token.access_token in evidence.secrets
