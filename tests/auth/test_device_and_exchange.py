"""The device-code grant (RFC 8628), the ID-JAG token exchange (RFC 8693) and the JWT-bearer
grant (RFC 7523), against the scripted loopback authorization server of ``test_flows``.

The device flow gets a fake clock whose ``sleep`` only advances time, so the polling
schedule (interval, ``slow_down`` + 5 s, expiry) is asserted exactly and instantly.
"""

from __future__ import annotations

import base64

import pytest
import requests

from mcpauth._http import HttpPolicy
from mcpauth.errors import AuthError, AuthorizationDenied, LoginTimeout, TokenRequestError
from mcpauth.flows import (
    DeviceCode,
    TokenEndpoint,
    device_authorization,
    id_jag_exchange,
    jwt_bearer,
)
from mcpauth.registration import ClientRegistration

from ._servers import Reply, ScriptedServer
from .test_flows import ISSUER, RESOURCE, TOKEN, make_meta

POLICY = HttpPolicy()
DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
ID_JAG = "urn:ietf:params:oauth:token-type:id-jag"
PUBLIC = ClientRegistration(client_id="dev-client", token_endpoint_auth_method="none")


class FakeClock:
    """``sleep`` advances ``now``; nothing really waits."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def device_reply(**overrides: object) -> Reply:
    body = {"device_code": "dc-secret", "user_code": "WDJB-MJHT",
            "verification_uri": "https://as.example.com/device",
            "verification_uri_complete": "https://as.example.com/device?user_code=WDJB-MJHT",
            "expires_in": 60, "interval": 2}
    body.update(overrides)
    return Reply(body=body)


def error(code: str) -> Reply:
    return Reply(400, {"error": code})


def run_device(server: ScriptedServer, session: requests.Session, fake: FakeClock,
               shown: list[DeviceCode] | None = None, *,
               handler: bool = True) -> dict[str, object]:
    meta = make_meta(f"{server.base}/token", device_endpoint=f"{server.base}/device")
    endpoint = TokenEndpoint(meta, PUBLIC, session=session, policy=POLICY)
    sink = shown if shown is not None else []
    return device_authorization(meta, PUBLIC, scopes=["mcp:read", "offline_access"],
                                resource=RESOURCE, session=session, policy=POLICY,
                                handler=sink.append if handler else None, endpoint=endpoint,
                                sleep=fake.sleep, clock=fake.clock)


def test_device_flow_polls_with_pending_and_slow_down(server: ScriptedServer,
                                                      session: requests.Session) -> None:
    server.script += [device_reply(), error("authorization_pending"), error("slow_down"),
                      error("authorization_pending"), Reply(body=TOKEN)]
    fake = FakeClock()
    shown: list[DeviceCode] = []
    answer = run_device(server, session, fake, shown)
    assert answer["access_token"] == "at-1"
    assert shown == [DeviceCode(user_code="WDJB-MJHT",
                                verification_uri="https://as.example.com/device",
                                verification_uri_complete=(
                                    "https://as.example.com/device?user_code=WDJB-MJHT"),
                                expires_in=60.0, interval=2.0)]
    assert fake.sleeps == [2.0, 2.0, 7.0, 7.0]  # slow_down adds 5 s from then on
    first, *polls = server.requests
    assert first.path == "/device"
    assert first.form == {"client_id": "dev-client", "scope": "mcp:read offline_access",
                          "resource": RESOURCE}
    assert [r.path for r in polls] == ["/token"] * 4
    for rec in polls:
        assert rec.form == {"grant_type": DEVICE_GRANT, "device_code": "dc-secret",
                            "client_id": "dev-client", "resource": RESOURCE}


def test_device_flow_default_interval_is_five_seconds(server: ScriptedServer,
                                                      session: requests.Session) -> None:
    server.script += [device_reply(interval=None), Reply(body=TOKEN)]
    fake = FakeClock()
    run_device(server, session, fake)
    assert fake.sleeps == [5.0]


def test_device_flow_access_denied(server: ScriptedServer, session: requests.Session) -> None:
    server.script += [device_reply(), error("authorization_pending"), error("access_denied")]
    with pytest.raises(AuthorizationDenied) as info:
        run_device(server, session, FakeClock())
    assert info.value.error == "access_denied"


def test_device_flow_expired_token(server: ScriptedServer, session: requests.Session) -> None:
    server.script += [device_reply(), error("expired_token")]
    with pytest.raises(LoginTimeout):
        run_device(server, session, FakeClock())


def test_device_flow_stops_at_expires_in(server: ScriptedServer,
                                         session: requests.Session) -> None:
    server.script += [device_reply(expires_in=10, interval=4)] + [
        error("authorization_pending") for _ in range(5)]
    fake = FakeClock()
    with pytest.raises(LoginTimeout) as info:
        run_device(server, session, fake)
    assert fake.sleeps == [4.0, 4.0]  # a third poll would land after 10 s
    assert len(server.requests) == 3
    assert "dc-secret" not in str(info.value)


def test_device_flow_other_errors_are_raised(server: ScriptedServer,
                                             session: requests.Session) -> None:
    server.script += [device_reply(), error("invalid_client")]
    with pytest.raises(TokenRequestError) as info:
        run_device(server, session, FakeClock())
    assert info.value.error == "invalid_client"


def test_device_flow_refused_or_malformed_start(server: ScriptedServer,
                                                session: requests.Session) -> None:
    server.script.append(error("unauthorized_client"))
    with pytest.raises(TokenRequestError) as info:
        run_device(server, session, FakeClock())
    assert info.value.error == "unauthorized_client" and info.value.step == "authorization"
    server.script.append(Reply(body={"user_code": "X"}))
    with pytest.raises(TokenRequestError):
        run_device(server, session, FakeClock())


def test_device_flow_default_handler_prints_to_stderr(server: ScriptedServer,
                                                      session: requests.Session,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    server.script += [device_reply(), Reply(body=TOKEN)]
    run_device(server, session, FakeClock(), handler=False)
    err = capsys.readouterr().err
    assert "WDJB-MJHT" in err and "https://as.example.com/device" in err
    assert "dc-secret" not in err


def test_device_flow_needs_the_endpoint(session: requests.Session) -> None:
    meta = make_meta()
    endpoint = TokenEndpoint(meta, PUBLIC, session=session, policy=POLICY)
    with pytest.raises(AuthError):
        device_authorization(meta, PUBLIC, scopes=[], resource=RESOURCE, session=session,
                             policy=POLICY, handler=None, endpoint=endpoint)


# ---- ID-JAG (RFC 8693) and JWT bearer (RFC 7523) ------------------------------------------


def jag_reply(issued: str = ID_JAG) -> Reply:
    return Reply(body={"access_token": "the.id.jag", "issued_token_type": issued,
                       "token_type": "N_A"})


def exchange(server: ScriptedServer, session: requests.Session,
             secret: str | None) -> str:
    return id_jag_exchange(idp_token_endpoint=f"{server.base}/idp/token", id_token="id.tok.en",
                           audience=ISSUER, resource=RESOURCE, scopes=["mcp:read"],
                           idp_client_id="idp-client", idp_client_secret=secret,
                           session=session, policy=POLICY)


def test_id_jag_exchange_form_with_a_public_idp_client(server: ScriptedServer,
                                                       session: requests.Session) -> None:
    server.script.append(jag_reply())
    assert exchange(server, session, None) == "the.id.jag"
    (rec,) = server.requests
    assert rec.path == "/idp/token"
    assert rec.header("Authorization") is None
    assert rec.form == {
        "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
        "requested_token_type": ID_JAG,
        "subject_token": "id.tok.en",
        "subject_token_type": "urn:ietf:params:oauth:token-type:id_token",
        "audience": ISSUER, "resource": RESOURCE, "scope": "mcp:read",
        "client_id": "idp-client",
    }


def test_id_jag_exchange_with_a_secret_uses_basic(server: ScriptedServer,
                                                  session: requests.Session) -> None:
    server.script.append(jag_reply())
    exchange(server, session, "idp-secret")
    (rec,) = server.requests
    scheme, _, encoded = (rec.header("Authorization") or "").partition(" ")
    assert scheme == "Basic"
    assert base64.b64decode(encoded).decode() == "idp-client:idp-secret"
    assert "client_secret" not in rec.form


def test_id_jag_exchange_rejects_another_token_type(server: ScriptedServer,
                                                    session: requests.Session) -> None:
    server.script.append(jag_reply("urn:ietf:params:oauth:token-type:access_token"))
    with pytest.raises(TokenRequestError) as info:
        exchange(server, session, None)
    assert "ID-JAG" in str(info.value)
    assert "the.id.jag" not in str(info.value)


def test_id_jag_exchange_error(server: ScriptedServer, session: requests.Session) -> None:
    server.script.append(Reply(400, {"error": "invalid_grant",
                                     "error_description": "id.tok.en is expired"}))
    with pytest.raises(TokenRequestError) as info:
        exchange(server, session, None)
    assert (info.value.error, info.value.status) == ("invalid_grant", 400)
    assert "id.tok.en" not in str(info.value)


@pytest.mark.parametrize("include_client_id", [False, True])
def test_jwt_bearer_form(server: ScriptedServer, session: requests.Session,
                         include_client_id: bool) -> None:
    reg = ClientRegistration(client_id="mcp-client", client_secret="s",
                             token_endpoint_auth_method="client_secret_basic")
    endpoint = TokenEndpoint(make_meta(f"{server.base}/token"), reg, session=session,
                             policy=POLICY)
    server.script.append(Reply(body=TOKEN))
    jwt_bearer(endpoint, "the.id.jag", scopes=["a", "b"], resource=RESOURCE,
               include_client_id=include_client_id)
    (rec,) = server.requests
    expected = {"grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer",
                "assertion": "the.id.jag", "scope": "a b", "resource": RESOURCE}
    if include_client_id:
        expected["client_id"] = "mcp-client"
    assert rec.form == expected
    assert (rec.header("Authorization") or "").startswith("Basic ")


def test_jwt_bearer_error_is_raised_at_once(server: ScriptedServer,
                                            session: requests.Session) -> None:
    endpoint = TokenEndpoint(make_meta(f"{server.base}/token"), PUBLIC, session=session,
                             policy=POLICY)
    server.script.append(error("invalid_grant"))
    with pytest.raises(TokenRequestError) as info:
        jwt_bearer(endpoint, "wif.jwt.token", scopes=[], resource=RESOURCE,
                   include_client_id=True)
    assert info.value.error == "invalid_grant"
    assert len(server.requests) == 1
    assert server.requests[0].form["client_id"] == "dev-client"
    assert "scope" not in server.requests[0].form
