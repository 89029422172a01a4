"""DPoP proofs (RFC 9449), written by hand: authlib has no client-side DPoP (docs/auth.md, "DPoP").

A proof is a compact JWS signed with the client's EC P-256 key: header ``{typ: "dpop+jwt",
alg: "ES256", jwk: <public key>}``, claims ``jti`` (128 fresh random bits per proof, so a
retry is never a replay), ``htm``, ``htu`` (the URL without query or fragment), ``iat``, the
latest server ``nonce`` for the URL's origin, and on resource requests ``ath``, which binds
the proof to the access token. Signing uses ``cryptography`` directly; ECDSA's DER output is
turned into the fixed 64-byte ``r || s`` that JWS ES256 requires (RFC 7518 §3.4).

:class:`DPoPProver` is safe to use from many threads.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from .errors import DPoPError

__all__ = ["DPoPKey", "DPoPProver", "ath", "check_server_supports_dpop"]

_ALG = "ES256"
_CRV = "P-256"
_COORD = 32  # bytes in a P-256 coordinate or scalar
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _int_to_b64(n: int) -> str:
    return _b64url(n.to_bytes(_COORD, "big"))


def _b64_to_int(jwk: Mapping[str, Any], name: str) -> int:
    value = jwk.get(name)
    if not isinstance(value, str):
        raise DPoPError(f"dpop: the stored key has no {name!r} member", step="dpop")
    try:
        raw = _b64url_decode(value)
    except ValueError:
        raise DPoPError(f"dpop: the stored key's {name!r} member is not base64url",
                        step="dpop") from None
    if len(raw) != _COORD:
        raise DPoPError(f"dpop: the stored key's {name!r} member is not 32 bytes", step="dpop")
    return int.from_bytes(raw, "big")


class DPoPKey:
    """An EC P-256 key pair that proofs are signed with.

    ``repr`` shows the RFC 7638 thumbprint only: the private scalar must never reach a log.
    """

    def __init__(self, private_key: ec.EllipticCurvePrivateKey) -> None:
        if not isinstance(private_key.curve, ec.SECP256R1):
            raise DPoPError("dpop: the key must be on curve P-256", step="dpop")
        self._key = private_key
        numbers = private_key.public_key().public_numbers()
        self._public = {"kty": "EC", "crv": _CRV, "x": _int_to_b64(numbers.x),
                        "y": _int_to_b64(numbers.y)}

    @classmethod
    def generate(cls) -> DPoPKey:
        """A new random P-256 key."""
        return cls(ec.generate_private_key(ec.SECP256R1()))

    @classmethod
    def from_jwk(cls, jwk: Mapping[str, Any]) -> DPoPKey:
        """Load a private JWK made by :meth:`private_jwk` (what the token store keeps)."""
        if jwk.get("kty") != "EC" or jwk.get("crv") != _CRV:
            raise DPoPError("dpop: the stored key is not an EC P-256 JWK", step="dpop")
        x, y, d = (_b64_to_int(jwk, n) for n in ("x", "y", "d"))
        public = ec.EllipticCurvePublicNumbers(x, y, ec.SECP256R1())
        try:
            key = ec.EllipticCurvePrivateNumbers(d, public).private_key()
        except ValueError:
            raise DPoPError("dpop: the stored key is invalid (its public part does not match)",
                            step="dpop") from None
        return cls(key)

    def private_jwk(self) -> dict[str, Any]:
        """The whole key as a JWK, for the 0600 store entry of the tokens it binds."""
        d = self._key.private_numbers().private_value
        return {**self._public, "d": _int_to_b64(d)}

    def public_jwk(self) -> dict[str, Any]:
        """The public key only (``kty``, ``crv``, ``x``, ``y``), as sent in every proof."""
        return dict(self._public)

    def thumbprint(self) -> str:
        """The RFC 7638 SHA-256 thumbprint: what the server binds the token to (``jkt``)."""
        canonical = json.dumps({k: self._public[k] for k in ("crv", "kty", "x", "y")},
                               separators=(",", ":"), sort_keys=True)
        return _b64url(hashlib.sha256(canonical.encode("ascii")).digest())

    def _sign(self, signing_input: bytes) -> bytes:
        """An ES256 signature: raw ``r || s``, 64 bytes, as JWS requires (not DER)."""
        der = self._key.sign(signing_input, ec.ECDSA(hashes.SHA256()))
        r, s = decode_dss_signature(der)
        return r.to_bytes(_COORD, "big") + s.to_bytes(_COORD, "big")

    def __repr__(self) -> str:
        return f"DPoPKey(thumbprint={self.thumbprint()!r})"


def ath(access_token: str) -> str:
    """base64url (no padding) of the SHA-256 of the ASCII access token (RFC 9449 §4.2)."""
    try:
        raw = access_token.encode("ascii")
    except UnicodeEncodeError:
        raise DPoPError("dpop: the access token is not ASCII", step="dpop") from None
    return _b64url(hashlib.sha256(raw).digest())


def _htu(url: str) -> str:
    """The URL without query or fragment (RFC 9449 §4.2)."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))


def _origin(url: str) -> str:
    """``scheme://host:port``, lower-cased with the default port filled in: nonces are per
    origin, and ``https://A.example`` and ``https://a.example:443`` are one origin."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None:
        port = _DEFAULT_PORTS.get(scheme)
    return f"{scheme}://{host}:{port}"


class DPoPProver:
    """Makes proofs with one key and remembers each origin's latest ``DPoP-Nonce``."""

    def __init__(self, key: DPoPKey) -> None:
        self.key = key
        self._header = {"typ": "dpop+jwt", "alg": _ALG, "jwk": key.public_jwk()}
        self._nonces: dict[str, str] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"DPoPProver({self.key!r})"

    def proof(self, method: str, url: str, *, access_token: str | None = None,
              nonce: str | None = None) -> str:
        """A fresh proof for one request; ``nonce`` defaults to the latest for the origin."""
        claims: dict[str, Any] = {
            "jti": _b64url(secrets.token_bytes(16)),
            "htm": method.upper(),
            "htu": _htu(url),
            "iat": int(time.time()),
        }
        if nonce is None:
            nonce = self.nonce_for(url)
        if nonce is not None:
            claims["nonce"] = nonce
        if access_token is not None:
            claims["ath"] = ath(access_token)
        signing_input = (_b64url(json.dumps(self._header, separators=(",", ":")).encode())
                         + "." + _b64url(json.dumps(claims, separators=(",", ":")).encode()))
        signature = self.key._sign(signing_input.encode("ascii"))
        return signing_input + "." + _b64url(signature)

    def record_nonce(self, url: str, nonce: str) -> None:
        """Remember the server's nonce for every later proof to ``url``'s origin."""
        with self._lock:
            self._nonces[_origin(url)] = nonce

    def nonce_for(self, url: str) -> str | None:
        """The latest nonce recorded for ``url``'s origin, if any."""
        with self._lock:
            return self._nonces.get(_origin(url))

    def observe(self, url: str, headers: Mapping[str, str]) -> None:
        """Record a ``DPoP-Nonce`` from any response (nonces rotate; the newest wins)."""
        nonce = headers.get("DPoP-Nonce")
        if nonce is None:
            nonce = next((v for k, v in headers.items() if k.lower() == "dpop-nonce"), None)
        if nonce:
            self.record_nonce(url, nonce)

    def resource_headers(self, method: str, url: str, access_token: str) -> dict[str, str]:
        """The two headers of a request to the protected resource (one ``DPoP`` header)."""
        return {"Authorization": f"DPoP {access_token}",
                "DPoP": self.proof(method, url, access_token=access_token)}


def check_server_supports_dpop(dpop_signing_alg_values_supported: Sequence[str] | None,
                               *, issuer: str) -> None:
    """Raise ``DPoPError`` unless the authorization server lists ES256, the only alg we sign."""
    algs = dpop_signing_alg_values_supported
    if algs and _ALG in algs:
        return
    listed = "absent" if algs is None else repr(list(algs))
    raise DPoPError(
        f"dpop: authorization server {issuer} cannot issue DPoP-bound tokens for ES256 "
        f"proofs (dpop_signing_alg_values_supported: {listed})", step="dpop", url=issuer)
