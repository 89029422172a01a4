"""``ServerConfig``: how to reach one MCP server, checked once at construction.

A config is a frozen value: build it, pass it to ``mcpsync.connect()`` (or a ``Manager``),
share it between threads. Every check happens in the constructor and raises
:class:`~mcpsync.errors.ConfigError` naming the field, so a bad config fails where it is
written rather than deep inside a connection attempt.

The field set is that of the Manager's original server config, plus ``cwd``. New fields are only
keyword fields with defaults, so code written against this class keeps working.
"""

from __future__ import annotations

import importlib
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any

# The auth hooks load on first use (a stdio config never needs them); the annotations name
# them as mcpsync.AuthHooks, a lazy public name, so typing.get_type_hints(ServerConfig) works.
import mcpsync
from mcpsync._fields_eq import fields_eq
from mcpsync._names import safe
from mcpsync.errors import ConfigError

__all__ = ["DEFAULT_TIMEOUT", "EnvInput", "ServerConfig", "logger_name_part"]

DEFAULT_TIMEOUT = 30.0
"""Seconds a request waits for its answer unless told otherwise (``connect()`` and
``ServerConfig.timeout`` alike)."""

EnvInput = Mapping[str, "str | None"] | Iterable[str]
"""What ``env`` accepts: a mapping, or a Manager-style ``["KEY=VALUE", ...]`` list."""

_SCOPES = ("", "project", "thread")
_SECRET_FORMATS = ("env", "properties", "json")
_TRANSPORTS = ("", "streamable-http", "sse")  # ServerConfig.transport
_SECRET_FILE = "{{secret_file}}"   # the placeholder mcpsync.secrets fills in args and env


#: The thread- and logger-safe form of a display name (one rule for the package, in _names).
logger_name_part = safe


# The URL, header and credential checks and repr() load ``_config_http`` on first use, by
# importlib.import_module before the ``from`` import that names the function: a thread that
# waited on the module lock while a Ctrl-C stopped another thread's import of it imports it
# again (import_module looks in sys.modules again after the lock), where a bare ``from``
# import would read the name from the failed, half-built module and raise ImportError.


def _empty(headers: object) -> bool:
    """True for no headers: None, or an empty ``dict`` (what ``dataclasses.replace`` of a
    stdio config passes on). Anything else goes to the checks, as it always did, so an odd
    mapping is judged (and refused) by them alone."""
    return headers is None or (type(headers) is dict and not headers)


def _fail(field_name: str, problem: str) -> ConfigError:
    return ConfigError(f"invalid server config: {field_name}: {problem}")


def _check_str(field_name: str, value: object, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str):
        raise _fail(field_name, f"expected a string, got {type(value).__name__}")


def _normalise_env(value: object) -> dict[str, str | None]:
    """Turn a mapping or a ``KEY=VALUE`` list into a fresh dict (never the caller's)."""
    if value is None:
        return {}
    result: dict[str, str | None] = {}
    if isinstance(value, Mapping):
        items: Iterable[tuple[object, object]] = value.items()
    elif isinstance(value, (str, bytes)):
        raise _fail("env", "expected a mapping or a list of 'KEY=VALUE' strings, got a string")
    elif isinstance(value, Iterable):
        pairs: list[tuple[object, object]] = []
        for entry in value:
            if not isinstance(entry, str):
                raise _fail("env", f"list entries must be 'KEY=VALUE' strings, got {entry!r}")
            key, sep, val = entry.partition("=")
            if not sep:
                # Quote only the part before any '=': there is none, so the entry holds no
                # value, but keep it short in case someone pasted a secret without '='.
                raise _fail("env", f"entry {entry[:40]!r} has no '=' (expected 'KEY=VALUE')")
            pairs.append((key, val))
        items = pairs
    else:
        raise _fail("env", f"expected a mapping or a list, got {type(value).__name__}")
    for name, setting in items:
        if not isinstance(name, str) or not name or "=" in name or "\0" in name:
            raise _fail("env", f"invalid variable name {name!r}")
        if setting is not None and not isinstance(setting, str):
            # Values are never echoed: they are often secrets.
            raise _fail("env", f"value of {name} must be a string or None, "
                               f"got {type(setting).__name__}")
        result[name] = setting
    return result


def _normalise_args(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, (str, bytes)):
        # A bare string would iterate character by character; that is never what was meant.
        raise _fail("args", "expected a list of strings, got a single string "
                            "(write args=[...])")
    if not isinstance(value, Iterable):
        raise _fail("args", f"expected a list of strings, got {type(value).__name__}")
    out: list[str] = []
    for arg in value:
        if isinstance(arg, os.PathLike):
            arg = os.fspath(arg)
        if not isinstance(arg, str):
            raise _fail("args", f"every argument must be a string, got {arg!r}")
        out.append(arg)
    return tuple(out)


@dataclass(frozen=True, init=False, repr=False, eq=False)
class ServerConfig:
    """How to reach one MCP server: a command to spawn (stdio) or a URL (HTTP).

    Exactly one of ``command`` and ``url`` is given. ``command`` is the program (a str);
    its arguments go in ``args``, so no shell quoting is involved. Construction checks
    every field and raises :class:`~mcpsync.errors.ConfigError` naming the one at fault.
    The instance is immutable, hashable and safe to share between threads; use
    ``dataclasses.replace`` to derive a variant.

    Fields:

    - ``id``: the Manager's key for this server (also the display name when ``name`` is
      empty).
    - ``name``: a human name used in errors, thread names and logger names.
    - ``command``, ``args``: the program and its arguments (stdio).
    - ``env``: variables put on top of the child's safe default environment; a mapping or
      a Manager-style ``["KEY=VALUE", ...]`` list (split at the first ``=``). A value of
      ``None`` removes that variable from the child's environment. Stored as a new dict.
    - ``cwd``: the child's working directory.
    - ``timeout``: the default per-request timeout in seconds (> 0; ``math.inf`` for no
      limit per request, while the handshake stays bounded: see ``docs/client.md``).
    - ``url``, ``headers``, ``authorization``, ``on_unauthorized``: the HTTP transport
      (see ``docs/http.md``). ``headers`` and the two hooks are only allowed together with
      ``url``.
    - ``auth``: this server's credentials, used by ``connect(config)``, the Manager and the
      CLI: an :class:`~mcpsync.AuthHooks` object (an ``mcpauth.OAuthProvider`` among them),
      a :class:`~mcpsync.BearerToken` or a str (a static bearer token, stored as a
      ``BearerToken``). Only with ``url``; not together with ``authorization`` /
      ``on_unauthorized`` or a static ``Authorization`` in ``headers``.
    - ``transport``: ``""`` (detect), ``"streamable-http"`` (never fall back to HTTP+SSE)
      or ``"sse"`` (the 2024-11-05 HTTP+SSE transport, no detection); only with ``url``.
    - ``scope`` (``""``, ``"project"``, ``"thread"``), ``secret_ref`` and
      ``secret_format`` (``env``, ``properties``, ``json``): accepted and checked now,
      honoured by the :class:`~mcpsync.Manager`.
    - ``disabled``: ``Manager.start_all()`` skips this server (``start_server`` still starts
      it). ``gateway``: the server is an MCP gateway, so its error codes -32010…-32012 are
      policy refusals, raised by ``Client.call_tool`` and the Manager as ``PolicyDenied``,
      ``ApprovalRejected`` and ``BudgetExceeded`` (``docs/gateway-guard.md``).
    - ``extra``: keys of a config file that mcpsync does not know, kept as read (ignored).

    ``repr()`` shows the keys of ``env`` and ``headers``, never their values.
    """

    id: str = ""
    name: str = ""
    command: str | None = None
    args: tuple[str, ...] = ()
    # Dicts are not hashable, so env and headers take part in == but not in hash().
    env: Mapping[str, str | None] = field(default_factory=dict, hash=False)
    cwd: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    scope: str = ""
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict, hash=False)
    authorization: Callable[[], str | None] | None = None
    on_unauthorized: Callable[..., Any] | None = None
    secret_ref: str = ""
    secret_format: str = "env"
    transport: str = ""
    disabled: bool = False
    gateway: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)
    # A hooks object may be unhashable (a dataclass with eq): compared, never hashed.
    auth: mcpsync.AuthHooks | None = field(default=None, hash=False)

    # A hand-written __init__ (rather than the generated one) lets ``env`` accept the Manager's
    # list form and ``args`` any iterable while the stored fields keep one precise type.
    # ``dataclasses.replace`` still works: it calls __init__ with every field as a keyword.
    # A field added later must be added here too.
    def __init__(
        self,
        id: str = "",
        name: str = "",
        command: str | None = None,
        args: Iterable[str | os.PathLike[str]] = (),
        env: EnvInput | None = None,
        cwd: str | os.PathLike[str] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        scope: str = "",
        url: str | None = None,
        headers: Mapping[str, str] | None = None,
        authorization: Callable[[], str | None] | None = None,
        on_unauthorized: Callable[..., Any] | None = None,
        secret_ref: str = "",
        secret_format: str = "env",
        transport: str = "",
        disabled: bool = False,
        gateway: bool = False,
        extra: Mapping[str, Any] | None = None,
        auth: mcpsync.AuthHooks | mcpsync.BearerToken | str | None = None,
    ) -> None:
        _check_str("id", id)
        _check_str("name", name)
        if isinstance(command, (list, tuple)):
            raise _fail("command", "expected the program as a string; put its arguments in "
                                   "args (command=argv[0], args=argv[1:])")
        _check_str("command", command, optional=True)
        _check_str("url", url, optional=True)
        _check_str("scope", scope)
        _check_str("secret_ref", secret_ref)
        _check_str("secret_format", secret_format)
        if command is None and url is None:
            raise _fail("command", "give either command (stdio) or url (HTTP)")
        if command is not None and url is not None:
            raise _fail("command", "give either command (stdio) or url (HTTP), not both")
        if command is not None and not command.strip():
            raise _fail("command", "must not be empty")
        if url is not None:   # the HTTP checks load with the first URL config
            importlib.import_module("mcpsync._config_http")
            from mcpsync._config_http import check_url

            check_url(url, id or name or "?")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise _fail("timeout", f"expected a number of seconds, got {timeout!r}")
        if math.isnan(timeout) or timeout <= 0:
            raise _fail("timeout", f"must be > 0 (math.inf for no limit), got {timeout!r}")
        if scope not in _SCOPES:
            raise _fail("scope", f"must be '', 'project' or 'thread', got {scope!r}")
        if secret_format not in _SECRET_FORMATS:
            raise _fail("secret_format",
                        f"must be 'env', 'properties' or 'json', got {secret_format!r}")
        if transport not in _TRANSPORTS:
            raise _fail("transport",
                        f"must be '', 'streamable-http' or 'sse', got {transport!r}")
        for flag_name, flag in (("disabled", disabled), ("gateway", gateway)):
            if not isinstance(flag, bool):
                raise _fail(flag_name, f"expected true or false, got {flag!r}")
        if extra is not None and not isinstance(extra, Mapping):
            raise _fail("extra", f"expected a mapping, got {type(extra).__name__}")
        if transport and url is None:
            raise _fail("transport", "only allowed with url (an HTTP server)")
        if cwd is not None:
            if not isinstance(cwd, (str, os.PathLike)):
                raise _fail("cwd", f"expected a path, got {type(cwd).__name__}")
            cwd = os.fspath(cwd)
            if not isinstance(cwd, str):
                raise _fail("cwd", "expected a text path, got bytes")
            if _SECRET_FILE in cwd:
                # The secret file is a file written after the working directory is chosen;
                # filling it in would make the child start inside (or beside) its secret.
                who = id or name or command or url or "?"
                raise _fail("cwd", f"server {who!r}: {_SECRET_FILE} cannot be used in cwd "
                                   f"(it names a file, not a directory); pass it in args or "
                                   f"an env value, and give cwd a real directory or "
                                   f"{{{{worktree_root}}}}")
        norm_headers: dict[str, str] = {}
        hooks: mcpsync.AuthHooks | None = None
        # dataclasses.replace() of a stdio config passes its headers, an empty dict: that
        # needs no check either (check_http_fields would return a new empty dict, no hooks).
        if url is not None or not (_empty(headers) and authorization is None
                                   and on_unauthorized is None and auth is None):
            importlib.import_module("mcpsync._config_http")
            from mcpsync._config_http import check_http_fields

            norm_headers, hooks = check_http_fields(url, headers, authorization,
                                                    on_unauthorized, auth)

        values: dict[str, Any] = {
            "id": id,
            "name": name,
            "command": command,
            "args": _normalise_args(args),
            "env": _normalise_env(env),
            "cwd": cwd,
            "timeout": float(timeout),
            "scope": scope,
            "url": url,
            "headers": norm_headers,
            "authorization": authorization,
            "on_unauthorized": on_unauthorized,
            "secret_ref": secret_ref,
            "secret_format": secret_format,
            "transport": transport,
            "disabled": disabled,
            "gateway": gateway,
            "extra": dict(extra or {}),
            "auth": hooks,
        }
        for key, value in values.items():
            object.__setattr__(self, key, value)

    @property
    def is_http(self) -> bool:
        """True for a URL config, False for a command."""
        return self.url is not None

    @property
    def argv(self) -> tuple[str, ...]:
        """``(command, *args)``: what the stdio transport spawns.

        Raises ``ConfigError`` on a URL config, which has no process to spawn.
        """
        if self.command is None:
            raise _fail("command", "this is an HTTP config (url=...); it has no argv")
        return (self.command, *self.args)

    @property
    def display_name(self) -> str:
        """The name used in errors, thread names and logger names.

        ``name``, else ``id``, else the command's base name, else the URL's host.
        """
        if self.name:
            return self.name
        if self.id:
            return self.id
        if self.command is not None:
            # Both separators: a Windows path may arrive on any platform via a config file.
            return re.split(r"[\\/]", self.command.rstrip("\\/"))[-1] or self.command
        from urllib.parse import urlsplit

        host = urlsplit(self.url or "").hostname
        return host or (self.url or "")

    def __repr__(self) -> str:
        """The fields, with only the keys of ``env`` and ``headers`` (their values are
        routinely secrets: API keys, bearer tokens)."""
        importlib.import_module("mcpsync._config_http")   # loaded by the first repr()
        from mcpsync._config_http import config_repr

        return config_repr(self)

    # Written out rather than generated (eq is False above): a dataclass generates and
    # compiles __eq__ and __hash__ every time the class is made, at every import, cached or
    # not. They compare and hash what the generated ones did, the fields that the fields'
    # own flags name (_eq and _hashed, below; a test holds them to a generated twin).
    def __eq__(self, other: object) -> bool:
        return _eq(self, other)

    def __hash__(self) -> int:
        return hash(_hashed(self))


#: What the generated ``__eq__`` compared (every field but ``extra``) and ``__hash__`` hashed
#: (not ``env``, ``headers``, ``extra`` or ``auth``), in field order.
_eq = fields_eq([f.name for f in fields(ServerConfig) if f.compare])
_hashed = attrgetter(*[f.name for f in fields(ServerConfig)
                       if (f.compare if f.hash is None else f.hash)])
