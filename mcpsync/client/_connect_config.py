"""``connect(config)``: one server out of a config file or a config dict (docs/client.md,
"Connecting from a config").

``config`` is a :class:`pathlib.Path` to a config file, or a mapping: either a whole config
(``mcpServers`` or ``servers``, the dialects :func:`~mcpsync.config_files.load_config`
reads) or one entry (``{"command": ..., "args": [...]}`` or ``{"url": ...}``). The entries
are read exactly as ``load_config`` reads them, ``oauth`` objects included. A ``str`` is
never a path here: it stays a command string, as it always was.

A single client cannot do what a :class:`~mcpsync.manager.Manager` does for a config with
``secret_ref`` (resolving and writing a secret file per spawn), so such an entry is refused
with a pointer to the Manager rather than started without its secret.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from mcpsync.client._callbacks import load_module
from mcpsync.config import ServerConfig
from mcpsync.errors import ConfigError

__all__ = ["config_from"]

_ONE_ENTRY_ID = "server"


def config_from(source: os.PathLike[str] | Mapping[str, Any], server_id: str | None
                ) -> ServerConfig:
    """The one :class:`ServerConfig` that ``connect(source, server_id=...)`` starts."""
    load_module("mcpsync.config_files")
    from mcpsync.config_files import load_config

    where = os.fspath(source) if isinstance(source, os.PathLike) else "the config dict"
    if isinstance(source, Mapping) and not any(k in source for k in ("mcpServers", "servers")):
        # One entry on its own: read it as the loader reads an entry.
        source = {"mcpServers": {server_id or _ONE_ENTRY_ID: dict(source)}}
        server_id = server_id or _ONE_ENTRY_ID
    configs = load_config(source)
    ids = [c.id for c in configs]
    if not configs:
        raise ConfigError(f"connecting from {where}: it holds no servers (add one under "
                          '"mcpServers", or pass a single server entry)')
    if server_id is None:
        if len(configs) != 1:
            listed = ", ".join(repr(i) for i in ids) or "none"
            raise ConfigError(f"connecting from {where}: it holds {len(configs)} servers "
                              f"({listed}); pass server_id= to choose one")
        config = configs[0]
    else:
        found = [c for c in configs if c.id == server_id]
        if not found:
            from mcpsync.client._arguments import did_you_mean

            hint = did_you_mean(server_id, ids)
            raise ConfigError(
                f"connecting from {where}: no server {server_id!r}"
                + (f"; did you mean {hint[0]!r}?" if hint else "")
                + f" (its servers: {', '.join(repr(i) for i in ids) or 'none'})")
        config = found[0]
    if config.secret_ref:
        raise ConfigError(f"connecting to server {config.id!r} of {where}: it has a "
                          f"secret_ref ({config.secret_ref!r}), which only a Manager resolves; "
                          "use a Manager(configs=..., secret_resolver=...)")
    return config
