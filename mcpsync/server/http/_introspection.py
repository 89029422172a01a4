"""A token verifier that asks the authorization server: RFC 7662 token introspection.

Why introspection: it works with opaque tokens and with any authorization server that offers
the endpoint, needs no key management, and sees revocations. The price is one request per
new token, so answers are kept for a short while (``cache_ttl``, and never past the token's
own ``exp``); a revoked token is therefore honoured for at most ``cache_ttl`` seconds more.

The cache is keyed by a SHA-256 of the token, so the token itself is held nowhere after the
call returns; the token travels only in the body of the POST to the introspection URL, and
redirects are not followed (the resource server's credentials go to that one origin).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import requests

from mcpsync.server.http._auth import AccessToken

__all__ = ["IntrospectionError", "IntrospectionVerifier"]

_LOOPBACK = ("127.0.0.1", "localhost", "::1")


class IntrospectionError(Exception):
    """The introspection endpoint could not be asked or gave no usable answer (the request
    is then answered 503: the token's validity is unknown, not refused)."""


class IntrospectionVerifier:
    """``verifier(token) -> AccessToken | None`` backed by an RFC 7662 endpoint.

    ``client_id`` / ``client_secret`` are this resource server's credentials at the
    authorization server (sent as HTTP Basic). ``timeout`` bounds each introspection request;
    ``cache_ttl`` is how long an active answer is reused (0: never); at most ``max_cached``
    answers are kept. The endpoint must report ``aud`` (the token's RFC 8707 resource): the
    app refuses a token whose audience does not name it.
    """

    def __init__(self, url: str, *, client_id: str, client_secret: str,
                 timeout: float = 5.0, cache_ttl: float = 30.0, max_cached: int = 1024,
                 session: requests.Session | None = None) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"introspection URL {url!r} is not an http(s) URL")
        if parts.scheme == "http" and parts.hostname not in _LOOPBACK:
            raise ValueError(f"introspection URL {url!r}: tokens and the client secret would "
                             "travel unencrypted; use https (http is accepted on loopback "
                             "only)")
        if not client_id or not client_secret:
            raise ValueError(f"introspection at {url}: client_id and client_secret are the "
                             "resource server's credentials there and are both required")
        if not (timeout > 0 and cache_ttl >= 0 and max_cached >= 0):
            raise ValueError("timeout must be positive, cache_ttl and max_cached not negative")
        self.url = url
        self.client_id = client_id
        self._secret = client_secret
        self.timeout = float(timeout)
        self.cache_ttl = float(cache_ttl)
        self.max_cached = max_cached
        self._session = session or requests.Session()
        self._own_session = session is None
        self._lock = threading.Lock()
        self._cache: OrderedDict[bytes, tuple[float, AccessToken]] = OrderedDict()
        self.requests = 0   # introspection requests sent (cache misses)

    def __repr__(self) -> str:
        return f"<IntrospectionVerifier {self.url} client_id={self.client_id!r}>"

    def close(self) -> None:
        """Close the HTTP session this verifier opened."""
        if self._own_session:
            self._session.close()

    def __call__(self, token: str, /) -> AccessToken | None:
        key = hashlib.sha256(token.encode()).digest()
        now = time.time()
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and hit[0] > now:
                self._cache.move_to_end(key)
                return hit[1]
            self._cache.pop(key, None)
        answer = self._introspect(token)
        verified = _access_token(answer)
        if verified is not None and self.cache_ttl > 0 and self.max_cached > 0:
            until = now + self.cache_ttl
            if verified.expires_at is not None:
                until = min(until, verified.expires_at)
            with self._lock:
                self._cache[key] = (until, verified)
                while len(self._cache) > self.max_cached:
                    self._cache.popitem(last=False)
        return verified

    def _introspect(self, token: str) -> Mapping[str, Any]:
        with self._lock:
            self.requests += 1
        try:
            response = self._session.post(
                self.url, data={"token": token, "token_type_hint": "access_token"},
                auth=(self.client_id, self._secret), timeout=self.timeout,
                allow_redirects=False, headers={"Accept": "application/json"})
        except requests.RequestException as exc:
            # requests' text names the URL, never the body: no token in it.
            raise IntrospectionError(f"token introspection at {self.url} failed: "
                                     f"{type(exc).__name__}") from None
        if response.status_code != 200:
            raise IntrospectionError(f"token introspection at {self.url} answered HTTP "
                                     f"{response.status_code}; check the resource server's "
                                     "client_id/client_secret there")
        try:
            answer = response.json()
        except ValueError:
            answer = None
        if not isinstance(answer, dict) or not isinstance(answer.get("active"), bool):
            raise IntrospectionError(f"token introspection at {self.url} did not answer an "
                                     "RFC 7662 JSON object with 'active'")
        return answer


def _access_token(answer: Mapping[str, Any]) -> AccessToken | None:
    """An active RFC 7662 answer as an :class:`AccessToken` (``None``: inactive)."""
    if answer.get("active") is not True:
        return None
    scope = answer.get("scope")
    aud = answer.get("aud")
    audience = (aud,) if isinstance(aud, str) else tuple(a for a in aud if isinstance(a, str)) \
        if isinstance(aud, list) else ()
    exp = answer.get("exp")
    sub = answer.get("sub")
    client_id = answer.get("client_id")
    extra = {k: v for k, v in answer.items()
             if k in ("iss", "username", "token_type", "iat", "nbf")}
    return AccessToken(
        client_id=client_id if isinstance(client_id, str) else "",
        scopes=frozenset(scope.split()) if isinstance(scope, str) else frozenset(),
        expires_at=float(exp) if isinstance(exp, (int, float)) and not isinstance(exp, bool)
        else None,
        subject=sub if isinstance(sub, str) else None, audience=audience, extra=extra)
