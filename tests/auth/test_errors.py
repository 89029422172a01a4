"""mcpauth.errors: one root, attributes survive pickling, messages are plain."""

from __future__ import annotations

import pickle

import pytest

from mcpauth import errors
from mcpauth.errors import (
    AuthError,
    AuthorizationDenied,
    AuthorizationServerChanged,
    IssuerMismatch,
    RegistrationError,
    ResourceMismatch,
    TokenRequestError,
)

ALL = [getattr(errors, name) for name in errors.__all__]


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_every_error_is_an_auth_error_and_pickles(cls: type[AuthError]) -> None:
    exc = cls("discovery: something at https://a.example failed", step="discovery",
              url="https://a.example")
    assert isinstance(exc, AuthError)
    assert str(exc) == "discovery: something at https://a.example failed"
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is cls
    assert str(back) == str(exc)
    assert back.step == "discovery"
    assert back.url == "https://a.example"


def test_defaults() -> None:
    exc = AuthError()
    assert str(exc) == ""
    assert exc.step == ""
    assert exc.url is None


@pytest.mark.parametrize(("exc", "attrs"), [
    (ResourceMismatch("m", resource="https://a/x", server_url="https://a/y", step="discovery"),
     {"resource": "https://a/x", "server_url": "https://a/y"}),
    (IssuerMismatch("m", expected="https://a", actual="https://a/"),
     {"expected": "https://a", "actual": "https://a/"}),
    (RegistrationError("m", error="invalid_redirect_uri", error_description="bad uri"),
     {"error": "invalid_redirect_uri", "error_description": "bad uri"}),
    (AuthorizationServerChanged("m", old_issuer="https://old", new_issuer="https://new"),
     {"old_issuer": "https://old", "new_issuer": "https://new"}),
    (AuthorizationDenied("m", error="access_denied", error_description="no"),
     {"error": "access_denied", "error_description": "no"}),
    (TokenRequestError("m", error="invalid_grant", error_description="x", status=400,
                       step="refresh", url="https://a/token"),
     {"error": "invalid_grant", "error_description": "x", "status": 400, "step": "refresh",
      "url": "https://a/token"}),
], ids=lambda v: type(v).__name__ if isinstance(v, Exception) else "")
def test_extra_attributes_survive_pickling(exc: AuthError, attrs: dict[str, object]) -> None:
    for name, value in attrs.items():
        assert getattr(exc, name) == value
    back = pickle.loads(pickle.dumps(exc))
    for name, value in attrs.items():
        assert getattr(back, name) == value
    assert str(back) == "m"


def test_extra_attributes_default_empty() -> None:
    exc = TokenRequestError("m")
    assert (exc.error, exc.error_description, exc.status) == ("", "", None)
    assert RegistrationError().error == ""
    assert IssuerMismatch().expected == ""
