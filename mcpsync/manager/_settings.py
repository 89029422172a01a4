"""The checks of what a ``Manager`` is built from: its configs and its connect options.

They run once, in the constructor, and refuse bad input before any server starts: a
config without an id (the Manager routes by id), an id given twice, and connect options
that would carry one server's credentials to every other server of the Manager.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from mcpsync.client._connect import CREDENTIALS
from mcpsync.client._options import ClientOptions
from mcpsync.config import ServerConfig
from mcpsync.errors import ConfigError

__all__ = ["checked_configs", "split_connect_options"]


def checked_configs(configs: Iterable[ServerConfig]) -> list[ServerConfig]:
    """The configs as a list, each a ``ServerConfig`` with its own non-empty id."""
    stored: list[ServerConfig] = []
    seen: set[str] = set()
    for config in configs:
        if not isinstance(config, ServerConfig):
            raise TypeError(f"configs must be ServerConfig values, got "
                            f"{type(config).__name__}")
        if not config.id:
            raise ConfigError(f"invalid server config: id: every config given to a "
                              f"Manager needs an id ({config!r})")
        if config.id in seen:
            raise ConfigError(f"invalid server config: id: {config.id!r} is given twice")
        seen.add(config.id)
        stored.append(config)
    return stored


def split_connect_options(connect_options: ClientOptions | Mapping[str, Any] | None,
                          ) -> tuple[ClientOptions | None, dict[str, Any]]:
    """``(base options, connect() keywords)`` for every server of the Manager.

    Credentials are refused: they belong to one server (``ServerConfig(auth=...)``), and
    options shared by all would send them to the others. The notification observer is the
    Manager's own (it feeds ``set_notification_handler()``), so it is refused too.
    """
    if isinstance(connect_options, ClientOptions):
        # A ClientOptions carries no credentials by construction.
        if connect_options.notification_observer is not None:
            raise ValueError("connect_options cannot set notification_observer: use "
                             "set_notification_handler()")
        return connect_options, {}
    if connect_options is not None and not isinstance(connect_options, Mapping):
        raise TypeError(f"connect_options must be a ClientOptions or a mapping of "
                        f"connect() keywords, got {type(connect_options).__name__}")
    options = dict(connect_options or {})
    credentials = [key for key in CREDENTIALS if key in options]
    if credentials:
        raise ConfigError(f"connect_options: {', '.join(credentials)} would apply to every "
                          "server of the Manager, sending one server's credentials to the "
                          "others; set credentials per server with ServerConfig(auth=...)")
    for reserved in ("notification_observer",):
        if reserved in options:
            raise ValueError(f"connect_options cannot set {reserved}: use "
                             "set_notification_handler()")
    return None, options
