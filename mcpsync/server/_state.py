"""Sealing the ``requestState`` a server hands out in a multi-round-trip request.

Under 2026-07-28 a server that needs the client's input answers ``tools/call``,
``prompts/get`` or ``resources/read`` with ``resultType: "input_required"`` and an opaque
``requestState``; the client sends the same request again with its answers and that state
echoed. The server keeps nothing between rounds, so the state carries everything gathered so
far, and it comes back through a party we do not trust. Hence it is sealed, not just encoded:

- **Confidential and authentic.** AES-256-GCM with a fresh random 96-bit nonce per seal. The
  client can neither read the state nor change a byte of it unnoticed.
- **Bound to one request.** The additional authenticated data names the server, the method,
  the target (tool name, prompt name or resource URI) and a SHA-256 digest of the canonical
  JSON of the arguments. A state replayed on another tool, method, URI, server or other
  arguments fails exactly like an altered one: GCM cannot tell the two apart, so both are
  refused with the single reason ``"tampered-or-other-request"``.
- **Short-lived.** The expiry is sealed inside the payload (``ttl``, 10 minutes by default),
  so it cannot be extended by the client either.
- **Bounded.** A token longer than ``max_bytes`` (64 KiB by default) is neither issued nor
  decoded.

The token is URL-safe base64 without padding of ``version (1 byte) | key id (4 bytes) |
nonce (12 bytes) | ciphertext and tag``. The key id is the first 4 bytes of SHA-256 of the
derived AES key, so a sealer can say "not one of my keys" without trying each one, and
without the id revealing anything usable about the key.

The payload is compact JSON, never pickle: even a state sealed with our own key only ever
becomes plain data when opened.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
import os
import re
import time
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

__all__ = ["ENV_KEYS", "StateRefused", "StateSealer", "StateTooLarge"]

ENV_KEYS = "MCPSYNC_STATE_KEY"
"""The environment variable read when no keys are given: one or more secrets, comma-separated."""

_VERSION = 1
_KEY_ID_BYTES = 4
_NONCE_BYTES = 12
_TAG_BYTES = 16
_HEADER_BYTES = 1 + _KEY_ID_BYTES
_MIN_RAW_BYTES = _HEADER_BYTES + _NONCE_BYTES + _TAG_BYTES
_MIN_SECRET = 16
_HKDF_INFO = b"mcpsync requestState v1"
_TOKEN_ALPHABET = re.compile(r"[A-Za-z0-9_-]*")

_RESTART = "send the request again without requestState and inputResponses to start over"
_EXPLANATIONS = {
    "malformed": "requestState is not a state this server issued",
    "too-large": "requestState is longer than this server accepts",
    "unknown-key": "requestState was sealed with a key this server does not hold (a key "
                   "retired since, or another server's)",
    "tampered-or-other-request": "requestState was altered, or was issued for another "
                                 "method, target or arguments than this request's",
    "expired": "requestState has expired",
}


class StateRefused(ValueError):
    """``requestState`` could not be used.

    ``str()`` is safe to send to the client: it names the server and the reason, never key
    material or any of the sealed content, and says what to do (start the request again
    without ``requestState``). ``reason`` is one of ``"malformed"``, ``"too-large"``,
    ``"unknown-key"``, ``"tampered-or-other-request"`` and ``"expired"``. An altered token and
    a token replayed on another request are one reason, because authenticated decryption fails
    the same way for both and nothing else could tell them apart.
    """

    reason: str

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.reason, str(self)))


class StateTooLarge(ValueError):
    """:meth:`StateSealer.seal` would issue a token longer than the sealer's ``max_bytes``."""


def _canonical_json(value: Any) -> bytes:
    """The one byte form of ``value`` that both rounds agree on, whatever the key order.

    NaN and the infinities are allowed: the arguments come from the wire, where a lenient
    decoder may have produced them, and a digest must never fail on what the client sent.
    """
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8", "surrogatepass")


def _arguments_digest(arguments: Any) -> str:
    return hashlib.sha256(_canonical_json(arguments)).hexdigest()


def _derive(secret: bytes) -> bytes:
    """Stretch one configured secret into an AES-256 key (HKDF-SHA256, fixed info)."""
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_HKDF_INFO).derive(secret)


def _secret_bytes(secret: object, where: str) -> bytes:
    """One configured secret as bytes; the error names its position, never its value."""
    if isinstance(secret, str):
        if len(secret) < _MIN_SECRET:
            raise ValueError(f"{where} is shorter than {_MIN_SECRET} characters; use a longer "
                             "random secret (for example: python -c \"import secrets; "
                             "print(secrets.token_urlsafe(32))\")")
        return secret.encode("utf-8")
    if isinstance(secret, bytes):
        if len(secret) < _MIN_SECRET:
            raise ValueError(f"{where} is shorter than {_MIN_SECRET} bytes; use a longer "
                             "random secret (for example: os.urandom(32))")
        return secret
    raise TypeError(f"{where} must be str or bytes, not {type(secret).__name__}")


def _secrets_from_environment() -> list[bytes] | None:
    """The comma-separated secrets in ``MCPSYNC_STATE_KEY``; ``None`` when it is unset."""
    raw = os.environ.get(ENV_KEYS)
    if raw is None:
        return None
    parts = [part.strip() for part in raw.split(",")]
    if not any(parts):
        raise ValueError(f"{ENV_KEYS} is set but holds no key; unset it to use a key of this "
                         "process only, or set it to one or more comma-separated secrets of "
                         f"at least {_MIN_SECRET} characters")
    return [_secret_bytes(part, f"{ENV_KEYS} entry {index}")
            for index, part in enumerate(parts, 1) if part]


def _encoded_length(raw_bytes: int) -> int:
    """Characters of unpadded base64 for ``raw_bytes`` bytes."""
    return (4 * raw_bytes + 2) // 3


class StateSealer:
    """Seals and opens the ``requestState`` of one server's multi-round-trip requests.

    ``keys``: secrets (str or bytes, at least 16 of either) from which the AES keys are
    derived. The first one seals; every one opens, so a key is rotated by putting the new one
    first and keeping the old one after it until the states it sealed have expired (``ttl``).
    Without ``keys`` the secrets come from ``MCPSYNC_STATE_KEY`` (comma-separated, same
    order rule). When that is unset too, a random key is made for this process alone: then
    a state sealed by one worker process cannot be opened by another, nor after a restart, so
    a server run as several processes behind one address must share a key.

    ``ttl`` is how long a sealed state stays valid (seconds, 600 by default); ``max_bytes``
    bounds the token both ways (64 KiB by default); ``clock`` gives the time (for tests).
    The sealer holds derived keys only, shows none of them in its ``repr``, and refuses to be
    pickled, so the keys do not travel with it by accident. One sealer may be shared by any
    number of threads.
    """

    def __init__(self, server_name: str, keys: Sequence[str | bytes] | None = None, *,
                 ttl: float = 600.0, max_bytes: int = 65536,
                 clock: Callable[[], float] = time.time) -> None:
        if isinstance(keys, (str, bytes)):
            raise TypeError("keys must be a sequence of secrets, not one secret: "
                            "write keys=[secret]")
        number = isinstance(ttl, (int, float)) and not isinstance(ttl, bool)
        if not (number and math.isfinite(ttl) and ttl > 0):
            raise ValueError(f"ttl must be a positive number of seconds, not {ttl!r}")
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) \
                or max_bytes < _encoded_length(_MIN_RAW_BYTES):
            raise ValueError(f"max_bytes must be an int of at least "
                             f"{_encoded_length(_MIN_RAW_BYTES)}, not {max_bytes!r}")
        if keys is not None:
            if not keys:
                raise ValueError("keys is empty; give at least one secret, or None to read "
                                 f"{ENV_KEYS}")
            secrets_ = [_secret_bytes(key, f"requestState key {index}")
                        for index, key in enumerate(keys, 1)]
        else:
            secrets_ = _secrets_from_environment() or [os.urandom(32)]
        self._server_name = server_name
        self._ttl = float(ttl)
        self._max_bytes = max_bytes
        self._clock = clock
        self._ciphers: dict[bytes, AESGCM] = {}
        self._sealing_id = b""
        for secret in secrets_:
            derived = _derive(secret)
            key_id = hashlib.sha256(derived).digest()[:_KEY_ID_BYTES]
            self._ciphers.setdefault(key_id, AESGCM(derived))
            if not self._sealing_id:
                self._sealing_id = key_id

    def __repr__(self) -> str:
        return f"StateSealer(server_name={self._server_name!r}, keys={len(self._ciphers)})"

    def __reduce__(self) -> NoReturn:
        raise TypeError("a StateSealer cannot be pickled: it holds secret keys; build one in "
                        "each process from the same keys instead")

    def _aad(self, header: bytes, method: str, target: str, arguments: Any) -> bytes:
        """What the tag binds besides the payload: the token header and the request."""
        bound = [_HKDF_INFO.decode(), self._server_name, method, target,
                 _arguments_digest(arguments)]
        return header + b"\x00" + _canonical_json(bound)

    def _refuse(self, reason: str) -> NoReturn:
        raise StateRefused(reason, f"{self._server_name}: {_EXPLANATIONS[reason]} "
                                   f"({reason}); {_RESTART}")

    def seal(self, payload: dict[str, Any], *, method: str, target: str,
             arguments: Any) -> str:
        """The token carrying ``payload`` for this request, valid for ``ttl`` seconds.

        ``payload`` must be a JSON object (``TypeError``/``ValueError`` otherwise); the token
        opens only with the same ``method``, ``target`` and ``arguments`` (dict key order does
        not matter). Raises :class:`StateTooLarge` when the token would exceed ``max_bytes``.
        """
        if not isinstance(payload, dict):
            raise TypeError(f"requestState payload must be a dict, not "
                            f"{type(payload).__name__}")
        envelope = {"exp": self._clock() + self._ttl, "state": payload}
        plaintext = json.dumps(envelope, separators=(",", ":"), ensure_ascii=False,
                               allow_nan=False).encode("utf-8", "surrogatepass")
        length = _encoded_length(_MIN_RAW_BYTES + len(plaintext))
        if length > self._max_bytes:
            raise StateTooLarge(
                f"{self._server_name}: the sealed requestState would be {length} bytes, over "
                f"the limit of {self._max_bytes}; keep less in the state (large data belongs "
                "in server-side storage, with only its reference in the state)")
        header = bytes([_VERSION]) + self._sealing_id
        nonce = os.urandom(_NONCE_BYTES)
        sealed = self._ciphers[self._sealing_id].encrypt(
            nonce, plaintext, self._aad(header, method, target, arguments))
        return base64.urlsafe_b64encode(header + nonce + sealed).rstrip(b"=").decode("ascii")

    def open(self, token: object, *, method: str, target: str, arguments: Any) -> dict[str, Any]:
        """The payload sealed in ``token``, if it was sealed by one of our keys for this very
        request and has not expired; :class:`StateRefused` otherwise."""
        raw = self._decode(token)
        header, nonce, sealed = (raw[:_HEADER_BYTES],
                                 raw[_HEADER_BYTES:_HEADER_BYTES + _NONCE_BYTES],
                                 raw[_HEADER_BYTES + _NONCE_BYTES:])
        if header[0] != _VERSION:
            self._refuse("malformed")
        cipher = self._ciphers.get(header[1:])
        if cipher is None:
            self._refuse("unknown-key")
        try:
            plaintext = cipher.decrypt(nonce, sealed, self._aad(header, method, target,
                                                                arguments))
        except InvalidTag:
            plaintext = None
        if plaintext is None:
            self._refuse("tampered-or-other-request")
        envelope = self._parse(plaintext)
        if self._clock() >= envelope["exp"]:
            self._refuse("expired")
        state: dict[str, Any] = envelope["state"]
        return state

    def _decode(self, token: object) -> bytes:
        """The token's bytes: a string of the URL-safe alphabet, in its one canonical form.

        The length is checked before any decoding, so an oversized token costs nothing.
        """
        if not isinstance(token, str):
            self._refuse("malformed")
        if len(token) > self._max_bytes:
            self._refuse("too-large")
        raw: bytes | None = None
        if _TOKEN_ALPHABET.fullmatch(token) and len(token) % 4 != 1:
            try:
                raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
            except (binascii.Error, ValueError):
                raw = None
        # a different spelling of the same bytes (stray low bits in the last character) is
        # not the token we issued, and the client must echo it exactly
        if raw is None or len(raw) < _MIN_RAW_BYTES or \
                base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii") != token:
            self._refuse("malformed")
        return raw

    def _parse(self, plaintext: bytes) -> dict[str, Any]:
        """The decrypted envelope, checked for shape (it is ours, but say so if it is not)."""
        envelope: Any = None
        try:
            envelope = json.loads(plaintext.decode("utf-8", "surrogatepass"))
        except ValueError:  # UnicodeDecodeError and JSONDecodeError: not re-raised, the
            envelope = None  # latter would carry the plaintext along
        if not (isinstance(envelope, dict) and isinstance(envelope.get("state"), dict)
                and isinstance(envelope.get("exp"), (int, float))
                and not isinstance(envelope.get("exp"), bool)):
            self._refuse("malformed")
        return envelope
