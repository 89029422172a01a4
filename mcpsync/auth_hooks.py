"""The two hooks through which HTTP authentication plugs into mcpsync.

mcpsync knows nothing about OAuth. Before every HTTP request it asks an :class:`AuthHooks`
object for the auth headers of that request, and when the server answers 401 or 403 with a
challenge it hands the challenge to the same object and retries. The protocol is structural,
so ``mcpauth.OAuthProvider`` (or your own class) satisfies it without importing mcpsync.

This module imports nothing heavy (no ``requests``): ``import mcpsync`` stays light.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from mcpsync.errors import ConfigError

__all__ = ["AuthHooks", "BearerToken", "HttpChallenge", "make_auth"]


class _CaseInsensitiveHeaders(Mapping[str, str]):
    """A read-only header mapping whose lookups ignore case (``dpop-nonce`` = ``DPoP-Nonce``).

    Written here rather than borrowed from requests so this module does not import requests.
    """

    __slots__ = ("_items",)

    def __init__(self, headers: Mapping[str, str]) -> None:
        self._items = {k.lower(): (k, v) for k, v in headers.items()}

    def __getitem__(self, key: str) -> str:
        return self._items[key.lower()][1]

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self._items.values())

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key.lower() in self._items

    def __repr__(self) -> str:
        return repr(dict(self.items()))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mapping):
            return NotImplemented
        return {k: v for k, (_, v) in self._items.items()} == {
            str(k).lower(): v for k, v in other.items()}

    __hash__ = None  # type: ignore[assignment]


# An auth-param: token "=" ( token / quoted-string ), RFC 9110 §11.2. The name must start a
# param (after the scheme, a comma or whitespace), so ``error_scope=`` never reads as ``scope=``.
_TOKEN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_PARAM = re.compile(
    rf"(?:^|[\s,])({_TOKEN})\s*=\s*(?:\"((?:[^\"\\]|\\.)*)\"|({_TOKEN}))"
)
_UNESCAPE = re.compile(r"\\(.)")


def challenge_params(www_authenticate: str) -> list[tuple[str, str]]:
    """The auth-params of one ``WWW-Authenticate`` value, names lower-cased, in order.

    Deliberately small: enough to find ``error``, ``scope`` and friends reliably (whole names,
    quoted strings with escapes, several challenges in one value), not a full RFC 9110 parser
    (``mcpauth.challenge`` is that).
    """
    out: list[tuple[str, str]] = []
    pos = 0
    while True:
        m = _PARAM.search(www_authenticate, pos)
        if m is None:
            return out
        quoted, bare = m.group(2), m.group(3)
        value = _UNESCAPE.sub(r"\1", quoted) if quoted is not None else (bare or "")
        out.append((m.group(1).lower(), value))
        pos = m.end()


@dataclass(frozen=True)
class HttpChallenge:
    """A 401 or 403 answer, as the auth hook sees it.

    - ``status``: 401 or 403;
    - ``www_authenticate``: every ``WWW-Authenticate`` value as the server sent it (requests
      would join repeated headers with ``", "``, which makes challenges ambiguous);
    - ``headers``: all response headers, looked up case-insensitively (``DPoP-Nonce``);
    - ``method``, ``url``: the HTTP request that failed;
    - ``authorization``: the ``Authorization`` that request carried (hidden from ``repr``).
    """

    status: int
    www_authenticate: tuple[str, ...] = ()
    headers: Mapping[str, str] = field(default_factory=dict)
    method: str = "POST"
    url: str = ""
    authorization: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "www_authenticate", tuple(self.www_authenticate))
        object.__setattr__(self, "headers", _CaseInsensitiveHeaders(self.headers))

    def param(self, name: str) -> str | None:
        """The first auth-param called ``name`` (case-insensitive) in any challenge, or None."""
        key = name.lower()
        for value in self.www_authenticate:
            for pname, pvalue in challenge_params(value):
                if pname == key:
                    return pvalue
        return None

    @property
    def error(self) -> str | None:
        """The challenge's ``error`` auth-param (``invalid_token``, ``insufficient_scope``,
        ``use_dpop_nonce``, ...), from any scheme."""
        return self.param("error")

    def has_error(self, code: str) -> bool:
        """True if any challenge carries ``error="<code>"`` (any scheme, any position)."""
        return any(pname == "error" and pvalue == code
                   for value in self.www_authenticate
                   for pname, pvalue in challenge_params(value))


@runtime_checkable
class AuthHooks(Protocol):
    """What mcpsync calls to authenticate HTTP requests.

    - ``headers(method, url)`` runs before *every* HTTP request, from many threads at once, so
      it must be fast (cache the token). It returns that request's auth headers, e.g.
      ``{"Authorization": "Bearer ..."}`` or ``{"Authorization": "DPoP ...", "DPoP": proof}``;
      ``{}`` sends none. Its result replaces any ``Authorization`` in the static headers.
    - ``on_unauthorized(challenge)`` runs on a 401 (or a 403 ``insufficient_scope``) under the
      client's auth lock, one thread at a time; refresh or re-authorise there. mcpsync retries
      the request afterwards. Raising fails the request with :class:`mcpsync.AuthHookError`.
    - Optionally ``on_response(headers)``: called with the headers of every response that
      carries ``DPoP-Nonce``, so nonce rotation is seen. It is looked up with ``getattr``.
    """

    def headers(self, method: str, url: str) -> Mapping[str, str]: ...

    def on_unauthorized(self, challenge: HttpChallenge) -> None: ...


class BearerToken:
    """A static bearer token: ``Authorization: Bearer <token>`` on every request, no refresh.

    A 401 then raises :class:`mcpsync.Unauthorized` at once. ``repr()`` never shows the token.
    """

    __slots__ = ("_header", "token")
    _mcpsync_static = True

    def __init__(self, token: str) -> None:
        if not isinstance(token, str) or not token:
            raise ConfigError("invalid auth: BearerToken needs a non-empty str token")
        if any(c in token for c in "\r\n\0"):
            raise ConfigError("invalid auth: the bearer token contains CR, LF or NUL")
        self.token = token
        self._header = {"Authorization": f"Bearer {token}"}

    def headers(self, method: str, url: str) -> Mapping[str, str]:
        return self._header

    def on_unauthorized(self, challenge: HttpChallenge) -> None:
        """Nothing to refresh; mcpsync does not call this for a static token."""

    def __repr__(self) -> str:
        return "BearerToken('***')"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BearerToken) and other.token == self.token

    def __hash__(self) -> int:
        return hash((BearerToken, self.token))


def _takes_refused(callback: Callable[..., Any]) -> bool:
    """Whether ``on_unauthorized`` asked for a second argument, the refused ``Authorization``.

    Decided once, from the signature, and only on a clear request: the second positional
    parameter has no default (``def hook(www_authenticate, refused)``) or is named
    ``refused`` (``def hook(www, refused=None)``). A hook written for the one-argument call
    may well have an optional second parameter for something else (``def hook(www,
    log=None)``); handing it the refused token would put a credential where its author never
    expected one, so it, ``*args`` and a callable whose signature cannot be read keep the
    one-argument call.
    """
    import inspect

    try:
        params = list(inspect.signature(callback).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [p for p in params
                  if p.kind in (inspect.Parameter.POSITIONAL_ONLY,
                                inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    if len(positional) < 2:
        return False
    second = positional[1]
    return second.default is inspect.Parameter.empty or second.name == "refused"


class _CallableAuth:
    """Adapter for the plain callables: ``authorization() -> str | None`` (the whole header
    value) and ``on_unauthorized(www_authenticate: str[, refused: str | None])``.

    ``None`` or ``""`` from ``authorization`` sends no header. The second callable gets every
    ``WWW-Authenticate`` value joined by ``", "``; declared with a second parameter that has
    no default or is named ``refused``, it also gets the ``Authorization`` value the server
    refused (``None`` if none was sent), which is what a refresh needs to tell "my token was
    refused" from "another thread already replaced it". Without ``on_unauthorized`` the
    adapter is static: a 401 re-reads ``authorization()`` (another thread may have
    refreshed) and otherwise raises :class:`mcpsync.Unauthorized`.
    """

    __slots__ = ("_authorization", "_mcpsync_static", "_on_unauthorized", "_pass_refused")

    def __init__(self, authorization: Callable[[], str | None] | None,
                 on_unauthorized: Callable[..., Any] | None) -> None:
        self._authorization = authorization
        self._on_unauthorized = on_unauthorized
        self._mcpsync_static = on_unauthorized is None
        self._pass_refused = on_unauthorized is not None and _takes_refused(on_unauthorized)

    def headers(self, method: str, url: str) -> Mapping[str, str]:
        if self._authorization is None:
            return {}
        value = self._authorization()
        return {"Authorization": value} if value else {}

    def on_unauthorized(self, challenge: HttpChallenge) -> None:
        if self._on_unauthorized is None:
            return
        joined = ", ".join(challenge.www_authenticate)
        if self._pass_refused:
            self._on_unauthorized(joined, challenge.authorization)
        else:
            self._on_unauthorized(joined)

    def __repr__(self) -> str:
        return (f"_CallableAuth(authorization={self._authorization!r}, "
                f"on_unauthorized={self._on_unauthorized!r})")


def is_static(hooks: AuthHooks) -> bool:
    """True for hooks that cannot refresh (a static token): a 401 needs no hook call."""
    return bool(getattr(hooks, "_mcpsync_static", False))


def make_auth(auth: AuthHooks | BearerToken | str | None = None,
              authorization: Callable[[], str | None] | None = None,
              on_unauthorized: Callable[..., Any] | None = None) -> AuthHooks | None:
    """Turn the accepted ``auth=`` forms into one :class:`AuthHooks` (or None for no auth).

    - an :class:`AuthHooks` object is used as given;
    - a str or :class:`BearerToken` is a static ``Authorization: Bearer <token>``;
    - the plain callables (``ServerConfig.authorization`` / ``.on_unauthorized``) get an
      adapter; ``on_unauthorized`` may ask for a second argument, the refused
      ``Authorization``, by a second parameter without a default or named ``refused``.

    Giving ``auth`` together with either plain callable raises :class:`ConfigError`.
    """
    if auth is not None and (authorization is not None or on_unauthorized is not None):
        raise ConfigError("invalid auth: give either auth= or the authorization/"
                          "on_unauthorized callables, not both")
    if auth is None:
        if authorization is None and on_unauthorized is None:
            return None
        if authorization is not None and not callable(authorization):
            raise ConfigError("invalid auth: authorization: expected a callable returning "
                              "the header value")
        if on_unauthorized is not None and not callable(on_unauthorized):
            raise ConfigError("invalid auth: on_unauthorized: expected a callable taking the "
                              "challenge")
        return _CallableAuth(authorization, on_unauthorized)
    if isinstance(auth, str):
        return BearerToken(auth)
    if isinstance(auth, BearerToken):
        return auth
    if not (callable(getattr(auth, "headers", None))
            and callable(getattr(auth, "on_unauthorized", None))):
        raise ConfigError(f"invalid auth: expected an AuthHooks object (headers() and "
                          f"on_unauthorized()), a str or a BearerToken, got "
                          f"{type(auth).__name__}")
    return auth
