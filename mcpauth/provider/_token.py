"""``OAuthProvider``'s current token and DPoP key, in memory and in the token store.

``headers()`` reads the token on every request, so the in-memory copy must be cheap to read
and must agree with the store: a stored token is loaded on first use (a new process uses it
from its very first request), a saved one is written with the resource index that finds it
next time, and a DPoP-bound token brings its key back with it. That bookkeeping, and the lock
that guards it, live here; the provider decides when a token is saved, replaced or forgotten.
"""

from __future__ import annotations

import logging
import threading

from mcpauth.dpop import DPoPKey, DPoPProver
from mcpauth.tokens import Token, TokenStore, credential_key, resource_index_key

__all__ = ["TokenCache"]

# The provider's logger: these records are the provider's, wherever the code lives.
_log = logging.getLogger("mcpauth.provider")


class TokenCache:
    """The token for one resource (``canonical``) and the DPoP prover of its key.

    State is guarded by a lock held briefly, never across a network call (a store read on
    first use is the only I/O under it). ``current()`` reads without the lock once loaded:
    ``headers()`` is the hot path.
    """

    def __init__(self, store: TokenStore, canonical: str) -> None:
        self._store = store
        self._canonical = canonical
        self._lock = threading.Lock()
        self._token: Token | None = None
        self._loaded = False
        self._prover: DPoPProver | None = None

    def current(self) -> Token | None:
        """The cached token; the first call looks in the store, so a stored token is used
        from the very first request."""
        if self._loaded:
            return self._token
        with self._lock:
            if self._loaded:
                return self._token
            token = self._load_stored()
            self._token = token
            if token is not None and token.dpop_jwk is not None:
                self._prover = DPoPProver(DPoPKey.from_jwk(token.dpop_jwk))
            self._loaded = True
            return token

    def _load_stored(self) -> Token | None:
        index = self._store.get(resource_index_key(self._canonical))
        if not index:
            return None
        issuer = str(index.get("issuer") or "")
        client_id = str(index.get("client_id") or "")
        resource = str(index.get("resource") or self._canonical)
        stored = self._store.get(credential_key(issuer, client_id, resource))
        if not stored:
            return None
        try:
            return Token.from_dict(stored)
        except (KeyError, TypeError, ValueError) as exc:
            _log.warning("ignoring an unreadable stored token for %s: %s", self._canonical,
                         type(exc).__name__)
            return None

    def adopt(self, token: Token) -> Token:
        """Make ``token`` current (already stored), with a prover for its key if bound."""
        with self._lock:
            self._token = token
            self._loaded = True
            if token.dpop_jwk is not None and (
                    self._prover is None
                    or self._prover.key.thumbprint()
                    != DPoPKey.from_jwk(token.dpop_jwk).thumbprint()):
                self._prover = DPoPProver(DPoPKey.from_jwk(token.dpop_jwk))
        return token

    def save(self, token: Token) -> Token:
        """Store the token and the resource index that finds it next time, then adopt it."""
        key = credential_key(token.issuer, token.client_id, token.resource)
        with self._store.locked(key):
            self._store.put(key, token.to_dict())
        self._store.put(resource_index_key(self._canonical),
                        {"issuer": token.issuer, "client_id": token.client_id,
                         "resource": token.resource})
        return self.adopt(token)

    def forget(self, token: Token | None) -> None:
        """Delete ``token`` from the store (if given) and drop the current one."""
        if token is not None:
            key = credential_key(token.issuer, token.client_id, token.resource)
            with self._store.locked(key):
                self._store.delete(key)
        self.drop()

    def drop(self) -> None:
        """Drop the current token from memory only (the caller has dealt with the store)."""
        with self._lock:
            self._token = None

    def clear(self) -> None:
        """Logout: the current token and the resource index leave the store, and the token
        and DPoP key leave memory (registrations are kept for next time)."""
        token = self.current()
        if token is not None:
            key = credential_key(token.issuer, token.client_id, token.resource)
            with self._store.locked(key):
                self._store.delete(key)
        self._store.delete(resource_index_key(self._canonical))
        with self._lock:
            self._token = None
            self._prover = None

    @property
    def existing_prover(self) -> DPoPProver | None:
        """The prover if one exists, without making a key (for recording nonces)."""
        return self._prover

    def prover(self) -> DPoPProver:
        """The provider's DPoP prover, its EC P-256 key made on first need."""
        with self._lock:
            if self._prover is None:
                self._prover = DPoPProver(DPoPKey.generate())
            return self._prover
