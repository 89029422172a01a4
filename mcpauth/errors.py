"""The exception hierarchy of mcpauth.

Every error mcpauth raises is an :class:`AuthError`. Each carries ``step`` (what was being
done: ``"discovery"``, ``"registration"``, ``"authorization"``, ``"token request"``,
``"refresh"``, ``"store"`` or ``"dpop"``) and ``url`` (the URL or issuer concerned), and its
message names both with the reason. Errors pickle with their attributes, because Celery and
``multiprocessing`` carry exceptions across processes.

No message ever contains a token, refresh token, code, verifier, secret, assertion, private
key or DPoP proof: callers build messages from URLs and server-supplied error codes only.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AuthError",
    "AuthorizationDenied",
    "AuthorizationServerChanged",
    "DPoPError",
    "DiscoveryError",
    "InsecureURL",
    "IssMismatch",
    "IssuerMismatch",
    "LoginRequired",
    "LoginTimeout",
    "PKCENotSupported",
    "RegistrationError",
    "ResourceMismatch",
    "StateMismatch",
    "TokenRequestError",
    "TokenStoreError",
]


def _rebuild(cls: type[AuthError], args: tuple[Any, ...], state: dict[str, Any]) -> AuthError:
    """Recreate an error from its pickled parts without calling ``__init__``.

    Subclasses have different keyword-only constructors; restoring ``args`` and ``__dict__``
    directly keeps every attribute without each class writing its own ``__reduce__``.
    """
    obj = cls.__new__(cls, *args)
    obj.args = args
    obj.__dict__.update(state)
    return obj


class AuthError(Exception):
    """Root of every mcpauth error; ``step`` and ``url`` say where it happened."""

    def __init__(self, message: str = "", *, step: str = "", url: str | None = None) -> None:
        super().__init__(message)
        self.step = step
        self.url = url

    @property
    def message(self) -> str:
        """The message text, without the class name."""
        return str(self.args[0]) if self.args else ""

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))


class DiscoveryError(AuthError):
    """No usable protected-resource or authorization-server metadata was found."""


class ResourceMismatch(AuthError):
    """The protected-resource metadata's ``resource`` does not cover the server URL.

    ``resource`` is what the metadata claimed, ``server_url`` the URL we were connecting to.
    Using such metadata would let one server send us to another's authorization server.
    """

    def __init__(self, message: str = "", *, resource: str = "", server_url: str = "",
                 step: str = "", url: str | None = None) -> None:
        super().__init__(message, step=step, url=url)
        self.resource = resource
        self.server_url = server_url


class IssuerMismatch(AuthError):
    """The authorization-server metadata's ``issuer`` is not exactly the expected issuer."""

    def __init__(self, message: str = "", *, expected: str = "", actual: str = "",
                 step: str = "", url: str | None = None) -> None:
        super().__init__(message, step=step, url=url)
        self.expected = expected
        self.actual = actual


class InsecureURL(AuthError):
    """A URL is not https (loopback excepted) or points at a blocked private network."""


class PKCENotSupported(AuthError):
    """The authorization server does not advertise PKCE ``S256``."""


class RegistrationError(AuthError):
    """No client registration could be made: ``error`` / ``error_description`` are the
    server's (RFC 7591 §3.2.2), when it answered with them."""

    def __init__(self, message: str = "", *, error: str = "", error_description: str = "",
                 step: str = "", url: str | None = None) -> None:
        super().__init__(message, step=step, url=url)
        self.error = error
        self.error_description = error_description


class AuthorizationServerChanged(AuthError):
    """The resource moved to another authorization server and pre-registered credentials
    exist only for the old one."""

    def __init__(self, message: str = "", *, old_issuer: str = "", new_issuer: str = "",
                 step: str = "", url: str | None = None) -> None:
        super().__init__(message, step=step, url=url)
        self.old_issuer = old_issuer
        self.new_issuer = new_issuer


class StateMismatch(AuthError):
    """The authorization callback's ``state`` is not the one we sent; the code is discarded."""


class IssMismatch(AuthError):
    """The authorization callback's RFC 9207 ``iss`` is missing or not the issuer."""


class AuthorizationDenied(AuthError):
    """The authorization server answered the authorization request with an ``error``."""

    def __init__(self, message: str = "", *, error: str = "", error_description: str = "",
                 step: str = "", url: str | None = None) -> None:
        super().__init__(message, step=step, url=url)
        self.error = error
        self.error_description = error_description


class TokenRequestError(AuthError):
    """The token endpoint refused: ``error``, ``error_description`` and HTTP ``status``."""

    def __init__(self, message: str = "", *, error: str = "", error_description: str = "",
                 status: int | None = None, step: str = "", url: str | None = None) -> None:
        super().__init__(message, step=step, url=url)
        self.error = error
        self.error_description = error_description
        self.status = status


class LoginRequired(AuthError):
    """A login is needed but the provider is not interactive (or the ID token expired)."""


class LoginTimeout(AuthError):
    """The user did not finish the login in time (loopback wait or device-code expiry)."""


class DPoPError(AuthError):
    """DPoP is required but cannot be used (no ES256 at the server, or a Bearer answer)."""


class TokenStoreError(AuthError):
    """The token store cannot be read, written or locked safely."""
