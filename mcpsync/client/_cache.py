"""The modern era's list cache, driven by the server's ``ttlMs`` (docs/client.md, "Lists,
resources, prompts, completion").

A modern server says how long a ``*/list`` page stays fresh. We keep each page, keyed by
method and cursor, until ``ttlMs`` passes; an absent or non-positive ``ttlMs`` means "stale at
once", so nothing is stored. A ``*/list_changed`` notification drops that method's pages, and
``cacheScope: "private"`` pages are dropped when the authorization context changes (HTTP).
Legacy lists are never cached: legacy servers give no freshness promise.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcpsync.client._skills import Skill

__all__ = ["ListCache", "SkillRegistry"]

_Key = tuple[str, "str | None"]


class ListCache:
    """Fresh list pages; safe from many threads (lists are not a hot path, one lock is fine)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._pages: dict[_Key, tuple[float, bool, dict[str, Any]]] = {}

    def get(self, method: str, cursor: str | None) -> dict[str, Any] | None:
        """The cached page, if still fresh."""
        with self._lock:
            entry = self._pages.get((method, cursor))
            if entry is None:
                return None
            if self._clock() >= entry[0]:
                del self._pages[(method, cursor)]
                return None
            return entry[2]

    def put(self, method: str, cursor: str | None, result: dict[str, Any]) -> None:
        """Store a page for its ``ttlMs``; pages without a positive ttl are not stored."""
        ttl = result.get("ttlMs")
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or ttl <= 0:
            return
        private = result.get("cacheScope") == "private"
        with self._lock:
            self._pages[(method, cursor)] = (self._clock() + ttl / 1000.0, private, result)

    def invalidate(self, *methods: str) -> None:
        """Drop every page of these methods (a list changed, or a cursor proved invalid)."""
        with self._lock:
            for key in [k for k in self._pages if k[0] in methods]:
                del self._pages[key]

    def drop_private(self) -> None:
        """The authorization context changed: private pages must not be served to it."""
        with self._lock:
            for key in [k for k, v in self._pages.items() if v[1]]:
                del self._pages[key]

    def clear(self) -> None:
        with self._lock:
            self._pages.clear()


class SkillRegistry:
    """The skill entries this client has been given, keyed by (server identity, uri). Here,
    not in _skills, because every client makes one and most never list a skill."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, str], Skill] = {}

    def remember(self, identity: str, skills: list[Skill]) -> None:
        with self._lock:
            for skill in skills:
                self._entries[(identity, skill.uri)] = skill

    def get(self, identity: str, uri: str) -> Skill | None:
        with self._lock:
            return self._entries.get((identity, uri))
