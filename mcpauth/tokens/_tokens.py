"""Tokens and the stores that keep them between runs (docs/auth.md, "Where tokens live").

A :class:`Token` holds an *absolute* expiry (``expires_at``, epoch seconds) computed once on
receipt, so a token read back from disk an hour later still knows when it dies; relative
``expires_in`` values would silently reset on every load.

Stores hold plain JSON dicts keyed by strings (:func:`credential_key`,
:func:`registration_key`, :func:`resource_index_key`), so one store can keep tokens,
registrations and DPoP keys alike. Every store has ``locked(key)``: the provider refreshes
inside it with "take the lock, re-read, use a token another process already refreshed, else
refresh and write", so two processes never spend the same rotating refresh token.

All three stores are safe to use from many threads. Each lives in its own private module
(``_memory_store``, ``_file_store``, ``_keyring_store``, on the shared ``_store_base``) and is
re-exported here, so ``mcpauth.tokens`` stays the one place to import them from.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import TokenRequestError, TokenStoreError
from ._file import (
    LOCK_TIMEOUT as LOCK_TIMEOUT,
    FileTokenStore as FileTokenStore,
    default_token_path as default_token_path,
)
from ._keyring import KeyringTokenStore as KeyringTokenStore
from ._memory import MemoryTokenStore as MemoryTokenStore

__all__ = [
    "FileTokenStore",
    "KeyringTokenStore",
    "MemoryTokenStore",
    "Token",
    "TokenStore",
    "credential_key",
    "default_token_path",
    "registration_key",
    "resource_index_key",
]

#: Refresh this long before expiry at most, or half the lifetime if shorter.
REFRESH_MARGIN = 60.0


@dataclass(frozen=True, repr=False)
class Token:
    """An access token with what it is for and when it dies.

    ``expires_at`` is absolute (epoch seconds), ``None`` when the server gave no lifetime.
    ``issued_at`` is when we received it; with ``expires_at`` it gives the lifetime that
    sizes the refresh margin (a 30 s token must not be "due" from the moment it arrives).
    ``dpop_jwk`` is the private JWK of the key the token is bound to, stored with the token so
    a bound token read back from the store stays usable. ``repr`` masks every secret.
    """

    access_token: str
    token_type: str = "Bearer"
    expires_at: float | None = None
    refresh_token: str | None = None
    scope: str | None = None
    issuer: str = ""
    client_id: str = ""
    resource: str = ""
    dpop_jwk: Mapping[str, Any] | None = None
    issued_at: float | None = field(default=None, compare=False)

    def __repr__(self) -> str:
        refresh = "<masked>" if self.refresh_token else None
        key = "<bound key>" if self.dpop_jwk else None
        return (
            f"Token(access_token=<masked>, token_type={self.token_type!r}, "
            f"expires_at={self.expires_at!r}, refresh_token={refresh}, scope={self.scope!r}, "
            f"issuer={self.issuer!r}, client_id={self.client_id!r}, "
            f"resource={self.resource!r}, dpop_jwk={key})"
        )

    @classmethod
    def from_response(
        cls,
        data: Mapping[str, Any],
        *,
        now: float | None = None,
        requested_scope: str | None = None,
        issuer: str = "",
        client_id: str = "",
        resource: str = "",
        previous_refresh_token: str | None = None,
        dpop_jwk: Mapping[str, Any] | None = None,
    ) -> Token:
        """Build a token from a token-endpoint JSON answer.

        A missing ``refresh_token`` keeps ``previous_refresh_token`` (servers that do not
        rotate send none on refresh, and dropping ours would force a full login); a missing
        ``scope`` means the requested one was granted (RFC 6749 §5.1).
        """
        access = data.get("access_token")
        if not isinstance(access, str) or not access:
            raise TokenRequestError(
                f"token request: the answer from {issuer or 'the authorization server'} "
                "has no access_token",
                error="invalid_response",
                step="token request",
                url=issuer or None,
            )
        now = time.time() if now is None else now
        token_type = data.get("token_type")
        refresh = data.get("refresh_token")
        scope = data.get("scope")
        return cls(
            access_token=access,
            token_type=token_type if isinstance(token_type, str) and token_type else "Bearer",
            expires_at=_expires_at(data.get("expires_in"), now),
            refresh_token=refresh if isinstance(refresh, str) and refresh
            else previous_refresh_token,
            scope=scope if isinstance(scope, str) else requested_scope,
            issuer=issuer,
            client_id=client_id,
            resource=resource,
            dpop_jwk=dict(dpop_jwk) if dpop_jwk is not None else None,
            issued_at=now,
        )

    def expires_in(self, now: float | None = None) -> float | None:
        """Seconds left (negative once expired), ``None`` when the lifetime is unknown."""
        if self.expires_at is None:
            return None
        return self.expires_at - (time.time() if now is None else now)

    def refresh_due(self, now: float | None = None) -> bool:
        """True inside the refresh margin: ``min(60 s, half the lifetime)`` before expiry."""
        left = self.expires_in(now)
        if left is None or self.expires_at is None:
            return False
        margin = REFRESH_MARGIN
        if self.issued_at is not None:
            margin = min(margin, max(0.0, (self.expires_at - self.issued_at) / 2))
        return left <= margin

    def expired(self, now: float | None = None) -> bool:
        """True once ``expires_at`` has passed; a token without a lifetime never expires here
        (the server says so with a 401 instead)."""
        left = self.expires_in(now)
        return left is not None and left <= 0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict for a store; :meth:`from_dict` reads it back."""
        return {
            "access_token": self.access_token,
            "token_type": self.token_type,
            "expires_at": self.expires_at,
            "issued_at": self.issued_at,
            "refresh_token": self.refresh_token,
            "scope": self.scope,
            "issuer": self.issuer,
            "client_id": self.client_id,
            "resource": self.resource,
            "dpop_jwk": dict(self.dpop_jwk) if self.dpop_jwk is not None else None,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Token:
        """Read a :meth:`to_dict` dict back; a malformed entry raises ``TokenStoreError``."""
        try:
            access = d["access_token"]
            if not isinstance(access, str):
                raise TypeError("access_token")
            jwk = d.get("dpop_jwk")
            if jwk is not None and not isinstance(jwk, Mapping):
                raise TypeError("dpop_jwk")
            return cls(
                access_token=access,
                token_type=_opt_str(d.get("token_type")) or "Bearer",
                expires_at=_opt_float(d.get("expires_at")),
                refresh_token=_opt_str(d.get("refresh_token")),
                scope=_opt_str(d.get("scope")),
                issuer=_opt_str(d.get("issuer")) or "",
                client_id=_opt_str(d.get("client_id")) or "",
                resource=_opt_str(d.get("resource")) or "",
                dpop_jwk=dict(jwk) if jwk is not None else None,
                issued_at=_opt_float(d.get("issued_at")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise TokenStoreError(
                f"store: a stored token is malformed ({type(exc).__name__}: bad or missing "
                f"field {exc.args[0] if exc.args else '?'}); log in again",
                step="store",
            ) from None


def _expires_at(expires_in: Any, now: float) -> float | None:
    """Absolute expiry from ``expires_in``; anything unusable means "unknown"."""
    if isinstance(expires_in, bool):
        return None
    if isinstance(expires_in, str):
        try:
            expires_in = float(expires_in)
        except ValueError:
            return None
    if isinstance(expires_in, (int, float)) and expires_in == expires_in:  # not NaN
        return now + max(0.0, float(expires_in))
    return None


def _opt_str(v: Any) -> str | None:
    if v is None:
        return None
    if not isinstance(v, str):
        raise TypeError("string field")
    return v


def _opt_float(v: Any) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError("number field")
    return float(v)


# -- keys -----------------------------------------------------------------------------------

def credential_key(issuer: str, client_id: str, resource: str) -> str:
    """The store key of the tokens for ``(issuer, client_id, resource)``.

    The triple is JSON-encoded so no character inside a URL can make two triples collide.
    """
    return "credential:" + json.dumps([issuer, client_id, resource], separators=(",", ":"))


def registration_key(issuer: str) -> str:
    """The store key of the client registration made with ``issuer``."""
    return "registration:" + issuer


def resource_index_key(resource: str) -> str:
    """The store key of ``{"issuer": ..., "client_id": ...}`` last used for ``resource``, so a
    new process finds its stored tokens before any 401 tells it the issuer."""
    return "resource:" + resource


# -- the store protocol -------------------------------------------------------------------

class TokenStore(Protocol):
    """Where tokens, registrations and DPoP keys live; values are JSON dicts."""

    def get(self, key: str) -> dict[str, Any] | None: ...

    def put(self, key: str, value: Mapping[str, Any]) -> None: ...

    def delete(self, key: str) -> None: ...

    def locked(self, key: str) -> contextlib.AbstractContextManager[None]: ...
