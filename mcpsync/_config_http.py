"""What only a URL (HTTP) ``ServerConfig`` checks, and ``repr()`` of any config.

Split from ``mcpsync.config`` because every stdio connection builds a ``ServerConfig`` but
never runs these: the URL, header and credential checks run for a URL config (or to refuse
HTTP fields given for a command), and ``repr()`` when something prints a config. The first
such use loads this module; ``ServerConfig.__init__`` calls the checks at the point where
they ran before, so a config with several faults reports the same one.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING

from mcpsync._urls import bad_character
from mcpsync.config import _fail
from mcpsync.errors import ConfigError

if TYPE_CHECKING:
    from mcpsync.auth_hooks import AuthHooks
    from mcpsync.config import ServerConfig

__all__ = ["check_http_fields", "check_url", "config_repr"]


def check_url(url: str, who: str) -> None:
    """The URL of an HTTP config: no character on which parsers disagree, http(s) and a
    host. ``who`` names the server in the error (its id, name, or ``?``)."""
    # Before parsing: a backslash or a control or space character makes urllib.parse
    # and urllib3 (which connects) disagree about the host.
    reason = bad_character(url)
    if reason is not None:
        raise _fail("url", f"server {who!r}: the URL is refused because {reason}; "
                           "write it without that character")
    from urllib.parse import urlsplit  # a URL config only: stdio never loads it

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise _fail("url", f"expected an http:// or https:// URL, got {url!r}")


def check_http_fields(url: str | None, headers: object, authorization: object,
                      on_unauthorized: object, auth: object
                      ) -> tuple[dict[str, str], AuthHooks | None]:
    """``headers`` as a new dict and ``auth`` as one hooks object, after the checks
    ``ServerConfig.__init__`` makes of the HTTP fields (all of them refused without a URL)."""
    norm_headers = _normalise_headers(headers)
    if url is None:
        if norm_headers:
            raise _fail("headers", "only allowed with url (an HTTP server)")
        if authorization is not None:
            raise _fail("authorization", "only allowed with url (an HTTP server)")
        if on_unauthorized is not None:
            raise _fail("on_unauthorized", "only allowed with url (an HTTP server)")
        if auth is not None:
            raise _fail("auth", "only allowed with url (an HTTP server)")
    if authorization is not None and not callable(authorization):
        raise _fail("authorization", "expected a callable returning the header value")
    if on_unauthorized is not None and not callable(on_unauthorized):
        raise _fail("on_unauthorized", "expected a callable taking the challenge")
    return norm_headers, _check_auth(auth, norm_headers, authorization, on_unauthorized)


def _normalise_headers(value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _fail("headers", f"expected a mapping, got {type(value).__name__}")
    result: dict[str, str] = {}
    for key, val in value.items():
        if not isinstance(key, str) or not key:
            raise _fail("headers", f"invalid header name {key!r}")
        if not isinstance(val, str):
            raise _fail("headers", f"value of {key} must be a string, got {type(val).__name__}")
        result[key] = val
    return result


def _check_auth(auth: object, headers: Mapping[str, str],
                authorization: object, on_unauthorized: object) -> AuthHooks | None:
    """``auth`` as one hooks object, refusing a second source of credentials beside it."""
    if auth is None:
        return None
    for other, given in (("authorization", authorization),
                         ("on_unauthorized", on_unauthorized)):
        if given is not None:
            raise _fail("auth", f"give either auth or {other}, not both (auth holds this "
                                f"server's credentials; drop {other})")
    if any(key.lower() == "authorization" for key in headers):
        raise _fail("auth", "give either auth or a static Authorization header in headers, "
                            "not both (drop one of them)")
    # Auth hooks are an HTTP matter: a stdio config never loads them. import_module first, as
    # config.py's loaders of this module do (a bare from-import can read a half-built module).
    importlib.import_module("mcpsync.auth_hooks")
    from mcpsync.auth_hooks import make_auth

    try:
        return make_auth(auth)  # type: ignore[arg-type]  # checked there, clear error
    except ConfigError as exc:
        raise _fail("auth", exc.message.removeprefix("invalid auth: ")) from None


def config_repr(config: ServerConfig) -> str:
    """``repr(config)``: :meth:`ServerConfig.__repr__`."""
    # Values of env and headers are routinely secrets (API keys, bearer tokens): show keys.
    parts = []
    for name in ("id", "name", "command", "args"):
        parts.append(f"{name}={getattr(config, name)!r}")
    parts.append(f"env=<keys {sorted(config.env)!r}>")
    for name in ("cwd", "timeout", "scope", "url"):
        parts.append(f"{name}={getattr(config, name)!r}")
    parts.append(f"headers=<keys {sorted(config.headers)!r}>")
    for name in ("authorization", "on_unauthorized"):
        value = getattr(config, name)
        parts.append(f"{name}={'<set>' if value is not None else None}")
    if config.auth is not None:
        parts.append(f"auth=<{type(config.auth).__name__}>")
    parts.append(f"secret_ref={config.secret_ref!r}")
    parts.append(f"secret_format={config.secret_format!r}")
    if config.transport:
        parts.append(f"transport={config.transport!r}")
    for flag_name in ("disabled", "gateway"):
        if getattr(config, flag_name):
            parts.append(f"{flag_name}=True")
    if config.extra:
        parts.append(f"extra=<keys {sorted(config.extra)!r}>")
    return f"ServerConfig({', '.join(parts)})"
