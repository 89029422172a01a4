"""The MCP server room: tools, resources, prompts and completion, in both protocol eras.

The public face of the room. ``_server`` holds the :class:`Server` API, ``_registry`` the live
tables, ``_router`` picks the era and the feature (``_tools``, ``_resources``, ``_prompts``,
``_listen``), ``_asking`` / ``_rounds`` / ``_state`` let a handler ask the client for input,
``_loop`` (stdio) and ``_memory`` (in process) carry the frames; ``http`` serves Streamable
HTTP, optionally behind OAuth (``AccessToken``, ``IntrospectionVerifier``); ``_bus`` carries
change announcements between worker processes.
"""
from __future__ import annotations

from mcpsync.server._asking import ElicitResult as ElicitResult, SampleResult as SampleResult
from mcpsync.server._asks import Ask as Ask
from mcpsync.server._bus import (
    Change as Change,
    LocalBus as LocalBus,
    NotificationBus as NotificationBus,
    UnixSocketBus as UnixSocketBus,
)
from mcpsync.server._request import Refusal as Refusal
from mcpsync.server._server import (
    Context as Context,
    Server as Server,
    ToolHandler as ToolHandler,
)
from mcpsync.server.http._auth import (
    AccessToken as AccessToken,
    TokenVerifier as TokenVerifier,
    current_access_token as current_access_token,
)
from mcpsync.server.http._introspection import IntrospectionVerifier as IntrospectionVerifier

__all__ = [
    "AccessToken",
    "Ask",
    "Change",
    "Context",
    "ElicitResult",
    "IntrospectionVerifier",
    "LocalBus",
    "NotificationBus",
    "Refusal",
    "SampleResult",
    "Server",
    "TokenVerifier",
    "ToolHandler",
    "UnixSocketBus",
    "current_access_token",
]
