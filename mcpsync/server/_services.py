"""What every feature handler of one connection may use: the registry, the settings, the way
out, the outbox of requests to the client, and the context a handler receives."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mcpsync.jsonrpc import INVALID_PARAMS, Message
from mcpsync.server._context import Context, _Send
from mcpsync.server._registry import Registry
from mcpsync.server._request import Refusal, Request

__all__ = ["CACHE_SCOPES", "ServerIdentity", "ServerSettings", "Services"]

CACHE_SCOPES = ("public", "private")


@dataclass(frozen=True)
class ServerIdentity:
    """Name, version, title and instructions: what every era tells the client about us."""

    name: str
    version: str
    title: str | None
    instructions: str | None

    def info(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "version": self.version}
        if self.title is not None:
            out["title"] = self.title
        return out


@dataclass
class ServerSettings:
    """The server-wide settings a connection reads (shared by every connection)."""

    identity: ServerIdentity
    registry: Registry
    sealer: Callable[[], Any]           # the StateSealer, built on first use
    ask_timeout: float = 300.0
    cache_ttl_ms: int = 60_000
    cache_scope: str | None = None      # None: not given (public; private behind a token)
    advertise: frozenset[str] = frozenset()
    skills: Any = None                  # the _skills.SkillCatalog served, if any


@dataclass
class Services:
    """One connection's view: settings plus its own way out and outbox."""

    settings: ServerSettings
    send: _Send
    send_batch: Callable[[list[Message]], None]
    outbox: Any   # _asking.Outbox
    tasks: Any = None   # _tasks.TaskStore of the router (2026-07-28 task tools)

    @property
    def registry(self) -> Registry:
        return self.settings.registry

    def context(self, req: Request, asker: Any,
                make_asker: Callable[[], Any] | None = None) -> Context:
        return Context(req.call, protocol_version=req.version, meta=req.meta, send=self.send,
                       log_threshold=req.threshold, asker=asker,
                       client_capabilities=req.capabilities, make_asker=make_asker)

    def cache(self, out: dict[str, Any], req: Request, ttl_ms: int | None = None,
              scope: str | None = None) -> dict[str, Any]:
        """Add the 2026-07-28 caching hints to a complete result (nothing under legacy)."""
        if req.modern:
            out["ttlMs"] = self.settings.cache_ttl_ms if ttl_ms is None else ttl_ms
            out["cacheScope"] = scope or self.settings.cache_scope or "public"
        return out


def args_of(params: Mapping[str, Any], what: str) -> dict[str, Any]:
    """``params.arguments`` as a dict (absent: empty); anything else is the caller's error."""
    arguments = params.get("arguments", {})
    if not isinstance(arguments, dict):
        raise Refusal(INVALID_PARAMS, f"{what}: 'arguments' must be an object")
    return arguments


def no_cursor(req: Request) -> None:
    """Lists come in one page, so no cursor we issued exists: any cursor is invalid (-32602)."""
    cursor = req.params.get("cursor")
    if cursor is not None:
        raise Refusal(INVALID_PARAMS, f"{req.method}: unknown cursor {cursor!r} (this server "
                      "returns every list in one page; ask again without a cursor)")
