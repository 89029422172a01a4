"""The Manager's value types, thread-scope ids and per-server state.

``ManagedTool``, ``Notification``, ``thread_server_id`` and ``split_thread_server_id`` are
public (re-exported by :mod:`mcpsync.manager`); ``ServerEntry`` is the Manager's record of
one started server. They live here to keep ``manager.py`` about the Manager's behaviour.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcpsync.client import Client
from mcpsync.client._subscriptions import Subscription
from mcpsync.config import ServerConfig
from mcpsync.secrets import SecretFile
from mcpsync.types import Tool

__all__ = ["SEP", "ManagedTool", "Notification", "ServerEntry", "split_thread_server_id",
           "thread_server_id"]

SEP = "__"
_SEP = SEP


# -- public value types --------------------------------------------------------------------

@dataclass(frozen=True)
class ManagedTool:
    """A tool of one managed server: ``name`` is the tool's name, or
    ``f"{server_id}__{tool.name}"`` when listed with ``prefixed=True``."""

    server_id: str
    tool: Tool
    name: str


@dataclass(frozen=True)
class Notification:
    """A notification from a managed server; ``params`` is exactly what the server sent."""

    server_id: str
    method: str
    params: Any

    @property
    def level(self) -> str:
        """The log level of a ``notifications/message``; ``""`` for anything else."""
        if self.method != "notifications/message" or not isinstance(self.params, Mapping):
            return ""
        level = self.params.get("level")
        return level if isinstance(level, str) else ""

    @property
    def text(self) -> str:
        """The ``data`` of a ``notifications/message`` as text (a string unchanged, anything
        else as compact JSON); ``""`` for anything else."""
        if self.method != "notifications/message" or not isinstance(self.params, Mapping):
            return ""
        data = self.params.get("data")
        if isinstance(data, str):
            return data
        return json.dumps(data, separators=(",", ":"), ensure_ascii=False, default=str)


# -- thread-scope ids ----------------------------------------------------------------------

def _check_part(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} must be a non-empty string, got {value!r}")
    if _SEP in value:
        raise ValueError(f"{what} must not contain '__', got {value!r}")
    return value


def thread_server_id(integration_id: str, thread_id: str) -> str:
    """``f"{integration_id}__{thread_id}"``, refusing parts that would make it ambiguous."""
    _check_part(integration_id, "integration_id")
    _check_part(thread_id, "thread_id")
    if integration_id.endswith("_"):
        raise ValueError(f"integration_id must not end with '_', got {integration_id!r}")
    if thread_id.startswith("_"):
        raise ValueError(f"thread_id must not start with '_', got {thread_id!r}")
    return f"{integration_id}{_SEP}{thread_id}"


def split_thread_server_id(server_id: str) -> tuple[str, str]:
    """Invert :func:`thread_server_id`: ``(integration_id, thread_id)``, or ``ValueError``."""
    if not isinstance(server_id, str):
        raise ValueError(f"not a thread server id: {server_id!r}")
    parts = server_id.split(_SEP)
    if len(parts) != 2:
        raise ValueError(f"not a thread server id (expected 'integration__thread'): "
                         f"{server_id!r}")
    try:
        thread_server_id(parts[0], parts[1])
    except ValueError as exc:
        raise ValueError(f"not a thread server id: {server_id!r} ({exc})") from None
    return parts[0], parts[1]


# -- one running server --------------------------------------------------------------------

class ServerEntry:
    """A started server: its Client, secret file, discovery state and exit state."""

    def __init__(self, server_id: str, config: ServerConfig, client: Client,
                 secret: SecretFile | None, key: tuple[str, str] | None,
                 exited: threading.Event | None = None) -> None:
        self.server_id = server_id
        self.config = config            # as stored (placeholders kept), for restarts
        self.client = client
        self.secret = secret
        self.key = key                  # (integration_id, thread_id) for a thread server
        self.discovered = threading.Event()
        self.tools: list[Tool] | None = None
        self.discover_error: BaseException | None = None
        self.discover_thread: threading.Thread | None = None
        # Re-discovery after notifications/tools/list_changed (guarded by discover_lock):
        # one discovery thread at a time, a burst of notifications folded into one rerun.
        self.discover_lock = threading.Lock()
        self.discovering = False        # a discovery thread runs
        self.rediscover = False         # a list_changed came since its tools/list was sent
        self.closing = False            # no discovery may start any more
        self.refresh_error: BaseException | None = None   # the last re-discovery's failure
        # A modern server's tool-list watch (its subscriptions/listen); closed on stop.
        self.list_watch: Subscription | None = None
        # Set by the client's on_connection_lost: the process exited or the connection died.
        self.exited = exited if exited is not None else threading.Event()

    @property
    def thread_scope(self) -> bool:
        return self.key is not None

    @property
    def alive(self) -> bool:
        return not self.exited.is_set() and not self.client.closed

    @property
    def ready(self) -> bool:
        return self.alive and self.discovered.is_set() and self.discover_error is None

    def remove_secret(self) -> None:
        if self.secret is not None:
            self.secret.remove()
