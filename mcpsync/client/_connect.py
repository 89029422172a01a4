"""``connect()``: from a target and options to a ready :class:`~mcpsync.client.Client`.

The options are defined once, in :class:`~mcpsync.client._options.ClientOptions`; this module
only merges them. A caller may pass a ``ClientOptions`` value, keywords, or both (keywords
replace the value's fields), and the per-server keywords (name, env, cwd, timeout, transport
and the HTTP credentials) go into the server's config. The keywords are typed for a type
checker through ``Unpack`` of :class:`~mcpsync.client._connect_keywords.ConnectKeywords`
(in a module of its own, which only the type checker and ``typing.get_type_hints`` load), so
there is no second list of parameters with their own defaults to keep in step.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import fields, replace
from typing import TYPE_CHECKING, Any

import mcpsync
from mcpsync.client._callbacks import load_module
from mcpsync.client._client import Client
from mcpsync.client._options import ClientOptions, config_of, with_overrides
from mcpsync.config import ServerConfig

if TYPE_CHECKING:
    from typing_extensions import Unpack

    # Loaded on first use: the annotations reach them through a package attribute, which
    # loads the module when read, so typing.get_type_hints(connect) still resolves them.
    import mcpsync.client._connect_keywords
    import mcpsync.transport.memory
    from mcpsync.client._connect_keywords import ConnectKeywords as ConnectKeywords

__all__ = ["PER_SERVER", "ConnectKeywords", "connect"]

#: ``connect()`` keywords that describe one server (its identity, transport and credentials)
#: rather than how the client behaves; they are never part of a ``ClientOptions``.
PER_SERVER = ("name", "timeout", "env", "cwd", "transport", "headers", "auth", "session",
              "authorization", "on_unauthorized")
#: Of those, the ones that carry credentials or another server's HTTP state.
CREDENTIALS = ("auth", "headers", "session", "authorization", "on_unauthorized")

_DEFAULT = ClientOptions()
#: Target types that cannot be an in-process server (exact types: a subclass is asked).
_NOT_IN_PROCESS = frozenset((str, list, tuple, ServerConfig))
_OPTION_NAMES = frozenset(f.name for f in fields(ClientOptions))
#: The keywords ``http_settings`` takes (``CREDENTIALS`` and ``transport``): any of them given
#: for a command is refused there.
_HTTP_KEYWORDS = (*CREDENTIALS, "transport")


def connect(target: ServerConfig | Sequence[str] | str
            | mcpsync.transport.memory.InProcessServer | os.PathLike[str] | Mapping[str, Any],
            options: ClientOptions | None = None, *, server_id: str | None = None,
            **overrides: Unpack[mcpsync.client._connect_keywords.ConnectKeywords]
            ) -> Client:
    """Start an MCP server and connect to it; return a ready :class:`Client`.

    ``target`` is an argv list (``[sys.executable, "server.py"]``), a command string (split
    with :func:`shlex.split`; pass a list to avoid that, as Windows users should), a URL, or
    a :class:`~mcpsync.config.ServerConfig`, a :class:`pathlib.Path` to a config file or a
    config mapping (a whole ``mcpServers``/``servers`` config, or one entry; ``server_id``
    picks one of several, see ``docs/client.md``, "Connecting from a config"), or a
    :class:`mcpsync.Server` object, which is
    then served in this process (no subprocess, no stdout redirection; see
    ``docs/client.md``, "A server in this process"). ``options`` is a :class:`ClientOptions`; any
    keyword replaces the field of that name. ``name``, ``env``, ``cwd`` and ``timeout`` given
    here override the config's. See ``docs/client.md`` for every option; in short:

    - ``era``: ``"auto"`` (probe with ``server/discover``, fall back to ``initialize``),
      ``"legacy"`` or ``"modern"``; ``protocol_version`` pins one exact revision.
    - ``sampling``, ``elicitation``, ``roots``: callbacks that serve both eras; only the
      capabilities with a callback are declared.
    - ``restart``: ``"on_demand"`` restarts a modern server on the next call after it died
      (at most 3 times in 60 s); ``None`` turns that off. Legacy servers are never restarted.
    - ``client_info``: ``True`` sends ``{"name": "mcpsync", "version": ...}``; a dict sends
      that; ``None`` sends none in modern requests.
    - ``on_connection_lost(error)``: called once per connection, on a client thread, as soon
      as the server exits or the connection is lost (never on ``close()``); ``error`` is the
      ``ServerExited`` / ``ConnectionLost`` pending calls fail with. Keep it short and do not
      call the client from it.
    - HTTP only (a URL target, see ``docs/http.md``): ``headers`` (static headers), ``auth``
      (auth hooks, or a bearer token str; replaces ``ServerConfig.auth``),
      ``authorization``/``on_unauthorized`` (the plain callables, instead of ``auth``),
      ``session`` (your own ``requests.Session``, used as given and never closed by mcpsync),
      ``transport`` (``"sse"`` forces the 2024-11-05 HTTP+SSE transport without detection;
      ``"streamable-http"`` never falls back to it).

    Raises :class:`~mcpsync.errors.ConfigError` for a bad option or a command that cannot be
    found, :class:`~mcpsync.errors.UnsupportedProtocolVersion` when no revision is shared,
    :class:`~mcpsync.errors.RequestTimeout` when ``initialize`` times out,
    :class:`~mcpsync.errors.ServerExited` when the server dies during the handshake, and
    :class:`~mcpsync.errors.ProtocolError` when a stdio program writes 10 lines that are not
    JSON-RPC before any answer (it is probably not an MCP server; the message quotes them).
    """
    given: dict[str, Any] = dict(overrides)
    unknown = sorted(set(given) - _OPTION_NAMES - set(PER_SERVER))
    if unknown:
        raise TypeError(f"connect() got an unexpected keyword argument {unknown[0]!r}")
    if options is not None and not isinstance(options, ClientOptions):
        raise TypeError(f"connect(): options must be a ClientOptions, got "
                        f"{type(options).__name__} (pass single options as keywords)")
    base = options if options is not None else _DEFAULT
    changed = {key: value for key, value in given.items() if key in _OPTION_NAMES}
    opts = replace(base, **changed) if changed else base
    in_process = None
    if isinstance(target, (os.PathLike, Mapping)):
        load_module("mcpsync.client._connect_config")
        from mcpsync.client._connect_config import config_from

        target = config_from(target, server_id)
    elif server_id is not None:
        raise TypeError("connect(): server_id= is only for a config file or mapping")
    # A command or a config is never an in-process server: only another kind of target loads
    # the memory transport (and its protocol) to ask.
    if type(target) not in _NOT_IN_PROCESS:
        load_module("mcpsync.client._memory")
        from mcpsync.client._memory import InProcessServer, in_process_target

        if isinstance(target, InProcessServer):   # a mcpsync.Server: served in this process
            target, in_process = in_process_target(target)
    config = with_overrides(config_of(target), name=given.get("name"), timeout=opts.timeout,
                            env=given.get("env"), cwd=given.get("cwd"))
    http = None
    # The HTTP settings' module is loaded for a URL, or to refuse HTTP keywords given for a
    # command; a stdio connect with neither never loads it.
    if config.is_http or any(given.get(key) is not None for key in _HTTP_KEYWORDS):
        load_module("mcpsync.client._connect_http")   # not a bare from-import: see load_module
        from mcpsync.client._connect_http import http_settings

        config, http = http_settings(
            config, headers=given.get("headers"), auth=given.get("auth"),
            session=given.get("session"), authorization=given.get("authorization"),
            on_unauthorized=given.get("on_unauthorized"), transport=given.get("transport"))
    return Client(config, opts, sampling=opts.sampling, elicitation=opts.elicitation,
                  roots=opts.roots, http=http, in_process=in_process)


if not TYPE_CHECKING:   # the type checker sees the import at the top
    def __getattr__(name: str) -> Any:
        """``ConnectKeywords``, importable from here as before, loaded on first access (PEP
        562). A failed attribute lookup is the only one that calls this, and nothing reads a
        missing name of this module on a call."""
        if name == "ConnectKeywords":
            return load_module("mcpsync.client._connect_keywords").ConnectKeywords
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
