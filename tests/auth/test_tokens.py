"""Token maths, rotation, masking and store keys."""

from __future__ import annotations

import json
import pickle

import pytest

from mcpauth.errors import AuthError, TokenRequestError, TokenStoreError
from mcpauth.tokens import Token, credential_key, registration_key, resource_index_key

NOW = 1_000_000.0
JWK = {"kty": "EC", "crv": "P-256", "x": "xx", "y": "yy", "d": "KEY-SECRET-D"}


def _token(**data: object) -> Token:
    base: dict[str, object] = {"access_token": "AT-SECRET", "token_type": "Bearer"}
    base.update(data)
    return Token.from_response(base, now=NOW, issuer="https://as.example", client_id="c1",
                               resource="https://mcp.example/mcp")


# -- from_response ---------------------------------------------------------------------------

def test_from_response_computes_absolute_expiry() -> None:
    tok = _token(expires_in=3600, refresh_token="RT-1", scope="a b")
    assert tok.expires_at == NOW + 3600
    assert tok.issued_at == NOW
    assert tok.refresh_token == "RT-1"
    assert tok.scope == "a b"
    assert (tok.issuer, tok.client_id, tok.resource) == (
        "https://as.example", "c1", "https://mcp.example/mcp")


def test_from_response_accepts_numeric_string_and_ignores_garbage_expiry() -> None:
    assert _token(expires_in="120").expires_at == NOW + 120
    assert _token(expires_in="soon").expires_at is None
    assert _token(expires_in=True).expires_at is None
    assert _token(expires_in=None).expires_at is None
    assert _token().expires_at is None
    # A negative lifetime is already expired, not "expires in the past plus margin".
    assert _token(expires_in=-5).expires_at == NOW


def test_from_response_keeps_server_token_type() -> None:
    assert _token(token_type="DPoP").token_type == "DPoP"
    assert _token(token_type=None).token_type == "Bearer"


def test_missing_refresh_token_keeps_previous_one() -> None:
    tok = Token.from_response({"access_token": "A2", "expires_in": 60}, now=NOW,
                              previous_refresh_token="RT-OLD")
    assert tok.refresh_token == "RT-OLD"


def test_new_refresh_token_replaces_previous_one() -> None:
    tok = Token.from_response({"access_token": "A2", "refresh_token": "RT-NEW"}, now=NOW,
                              previous_refresh_token="RT-OLD")
    assert tok.refresh_token == "RT-NEW"


def test_missing_scope_means_requested_scope() -> None:
    tok = Token.from_response({"access_token": "A"}, now=NOW, requested_scope="read write")
    assert tok.scope == "read write"
    granted = Token.from_response({"access_token": "A", "scope": "read"}, now=NOW,
                                  requested_scope="read write")
    assert granted.scope == "read"


@pytest.mark.parametrize("data", [
    {"token_type": "Bearer", "refresh_token": "RT-SECRET"},
    {"access_token": "", "refresh_token": "RT-SECRET"},
    {"access_token": 42, "refresh_token": "RT-SECRET"},
])
def test_missing_access_token_is_a_token_request_error(data: dict[str, object]) -> None:
    with pytest.raises(TokenRequestError) as info:
        Token.from_response(data, now=NOW, issuer="https://as.example")
    err = info.value
    assert isinstance(err, AuthError)
    assert err.step == "token request"
    assert err.url == "https://as.example"
    assert "access_token" in str(err)
    assert "RT-SECRET" not in str(err)


def test_from_response_copies_the_dpop_key() -> None:
    jwk = dict(JWK)
    tok = Token.from_response({"access_token": "A", "token_type": "DPoP"}, now=NOW,
                              dpop_jwk=jwk)
    jwk["d"] = "changed"
    assert tok.dpop_jwk is not None and tok.dpop_jwk["d"] == "KEY-SECRET-D"


# -- expiry maths ------------------------------------------------------------------------------

def test_expires_in_and_expired() -> None:
    tok = _token(expires_in=100)
    assert tok.expires_in(now=NOW) == 100
    assert tok.expires_in(now=NOW + 30) == 70
    assert not tok.expired(now=NOW + 99.9)
    assert tok.expired(now=NOW + 100)
    assert tok.expires_in(now=NOW + 150) == -50


def test_refresh_margin_is_60_seconds_for_long_tokens() -> None:
    tok = _token(expires_in=3600)
    assert not tok.refresh_due(now=NOW + 3600 - 60.5)
    assert tok.refresh_due(now=NOW + 3600 - 60)
    assert tok.refresh_due(now=NOW + 3600 + 1)  # expired tokens are due too


def test_refresh_margin_is_half_the_lifetime_for_short_tokens() -> None:
    tok = _token(expires_in=30)
    assert not tok.refresh_due(now=NOW)  # a fresh 30 s token is not due at once
    assert not tok.refresh_due(now=NOW + 14.9)
    assert tok.refresh_due(now=NOW + 15)
    assert not tok.expired(now=NOW + 15)


def test_token_without_lifetime_is_never_due_nor_expired() -> None:
    tok = _token()
    assert tok.expires_in(now=NOW) is None
    assert not tok.refresh_due(now=NOW + 10**9)
    assert not tok.expired(now=NOW + 10**9)


def test_hand_built_token_uses_the_60_second_margin() -> None:
    tok = Token(access_token="A", expires_at=NOW + 100)
    assert not tok.refresh_due(now=NOW + 39)
    assert tok.refresh_due(now=NOW + 40)


def test_default_now_is_the_clock() -> None:
    tok = Token.from_response({"access_token": "A", "expires_in": 3600})
    left = tok.expires_in()
    assert left is not None and 3590 < left <= 3600
    assert not tok.refresh_due() and not tok.expired()


# -- masking -----------------------------------------------------------------------------------

def test_repr_masks_every_secret() -> None:
    tok = Token.from_response(
        {"access_token": "AT-SECRET", "refresh_token": "RT-SECRET", "expires_in": 60,
         "token_type": "DPoP"}, now=NOW, issuer="https://as.example", dpop_jwk=JWK)
    for text in (repr(tok), str(tok), repr([tok]), f"{tok}"):
        assert "AT-SECRET" not in text
        assert "RT-SECRET" not in text
        assert "KEY-SECRET-D" not in text
    assert "https://as.example" in repr(tok)
    assert "<masked>" in repr(tok)
    assert "refresh_token=None" in repr(Token(access_token="x"))


# -- serialisation -----------------------------------------------------------------------------

def test_to_dict_from_dict_round_trip_through_json() -> None:
    tok = Token.from_response(
        {"access_token": "AT", "refresh_token": "RT", "expires_in": 60, "scope": "s",
         "token_type": "DPoP"}, now=NOW, issuer="i", client_id="c", resource="r", dpop_jwk=JWK)
    back = Token.from_dict(json.loads(json.dumps(tok.to_dict())))
    assert back == tok
    assert back.issued_at == NOW
    assert back.dpop_jwk == JWK
    assert back.refresh_due(now=NOW + 30) == tok.refresh_due(now=NOW + 30)
    assert Token.from_dict(Token(access_token="x").to_dict()) == Token(access_token="x")


def test_token_pickles() -> None:
    tok = _token(expires_in=60, refresh_token="RT")
    assert pickle.loads(pickle.dumps(tok)) == tok


@pytest.mark.parametrize("bad", [
    {},
    {"access_token": 5},
    {"access_token": "A", "expires_at": "tomorrow"},
    {"access_token": "A", "refresh_token": ["x"]},
    {"access_token": "A", "dpop_jwk": "not-a-jwk"},
])
def test_from_dict_rejects_malformed_entries(bad: dict[str, object]) -> None:
    with pytest.raises(TokenStoreError) as info:
        Token.from_dict(bad)
    assert info.value.step == "store"


# -- keys --------------------------------------------------------------------------------------

def test_credential_keys_are_distinct_and_stable() -> None:
    k = credential_key("https://as.example", "c1", "https://mcp.example/mcp")
    assert k == credential_key("https://as.example", "c1", "https://mcp.example/mcp")
    # No separator trick can make two different triples collide.
    assert credential_key("a|b", "c", "d") != credential_key("a", "b|c", "d")
    assert credential_key('a","b', "c", "") != credential_key("a", "b", "c")
    assert k != credential_key("https://as.example", "c2", "https://mcp.example/mcp")
    assert k != credential_key("https://as.example", "c1", "https://mcp.example/other")


def test_key_families_do_not_overlap() -> None:
    url = "https://as.example"
    keys = {credential_key(url, "", ""), registration_key(url), resource_index_key(url)}
    assert len(keys) == 3
    assert registration_key(url) != registration_key(url + "/")
