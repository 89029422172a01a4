"""What ``connect(url, ...)`` needs beyond the stdio options: headers, auth and a session.

Kept out of ``client.py`` so that the client only asks "is this HTTP?" and hands the settings
to :func:`open_http_transport`; and kept free of ``requests`` (imported only when a transport
is opened), so ``import mcpsync`` stays light.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from mcpsync.client._callbacks import load_module
from mcpsync.config import ServerConfig
from mcpsync.errors import ConfigError

if TYPE_CHECKING:
    from mcpsync.auth_hooks import AuthHooks
    from mcpsync.transport.http import HttpTransport

__all__ = ["HttpSettings", "http_settings", "open_http_transport"]


class HttpSettings:
    """The HTTP-only parts of a connection: the caller's ``requests.Session`` (or None for
    our own) and the auth hooks (None for no auth).

    A plain slotted class, not a dataclass: every client import loads this module, and
    building a dataclass generates and compiles its methods at import; nothing compares,
    prints or copies one. Treat it as read-only.
    """

    __slots__ = ("auth", "session")

    def __init__(self, session: Any = None, auth: AuthHooks | None = None) -> None:
        self.session = session
        self.auth = auth


def http_settings(config: ServerConfig, *, headers: Mapping[str, str] | None, auth: Any,
                  session: Any, authorization: Callable[[], str | None] | None,
                  on_unauthorized: Callable[..., Any] | None, transport: str | None = None
                  ) -> tuple[ServerConfig, HttpSettings | None]:
    """Merge ``connect()``'s HTTP keywords into the config; check they fit the target.

    ``headers=`` go on top of the config's; ``auth``, ``authorization``/``on_unauthorized``
    and ``transport`` replace the config's; ``auth=`` with either plain callable raises
    :class:`ConfigError`. Without ``auth=`` the config's own ``auth`` is used.
    """
    given = [name for name, value in (("headers", headers), ("auth", auth),
                                      ("session", session), ("authorization", authorization),
                                      ("on_unauthorized", on_unauthorized),
                                      ("transport", transport)) if value is not None]
    if not config.is_http:
        if given:
            raise ConfigError(f"invalid option: {', '.join(given)}: only for HTTP servers "
                              "(a URL target)")
        return config, None
    overrides: dict[str, Any] = {}
    if headers is not None:
        overrides["headers"] = {**dict(config.headers), **dict(headers)}
    if auth is not None:
        overrides["auth"] = None     # connect()'s auth= replaces the config's
    if authorization is not None:
        overrides["authorization"] = authorization
    if on_unauthorized is not None:
        overrides["on_unauthorized"] = on_unauthorized
    if transport is not None:
        overrides["transport"] = transport   # checked by ServerConfig.__init__
    if overrides:
        config = replace(config, **overrides)
    if session is not None and not callable(getattr(session, "request", None)):
        raise ConfigError(f"invalid option: session: expected a requests.Session, got "
                          f"{type(session).__name__}")
    load_module("mcpsync.auth_hooks")
    from mcpsync.auth_hooks import make_auth  # HTTP only: a stdio connect never loads it

    hooks = make_auth(auth if auth is not None else config.auth, config.authorization,
                      config.on_unauthorized)
    return config, HttpSettings(session=session, auth=hooks)


def open_http_transport(config: ServerConfig, settings: HttpSettings, *, name: str,
                        max_frame_bytes: int) -> HttpTransport:
    """The transport for one HTTP session (imports ``requests`` on first use)."""
    load_module("mcpsync.transport.http")
    from mcpsync.transport.http import HttpTransport

    assert config.url is not None
    return HttpTransport(config.url, name=name, session=settings.session,
                         headers=dict(config.headers), auth=settings.auth,
                         max_frame_bytes=max_frame_bytes, transport=config.transport)
