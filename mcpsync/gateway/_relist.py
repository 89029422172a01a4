"""The gateway's own list requests, for a prefixed name it has not listed yet.

A host that cached the gateway's tool names (``demo__add``) across a gateway restart calls
one before it lists again; the new gateway's name table is empty, so the call would be
refused with "list again". Instead the gateway lists the upstreams whose id prefixes the name
itself (the first page of each), then routes the call as if the host had listed. These
requests carry ids of the gateway's own (never in the host id table), so their answers reach
only this module; they share the merge time limit, after which the call is refused as before.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mcpsync.gateway._gather import Deadlines

__all__ = ["Relists"]


@dataclass
class _Group:
    """One relisting: the upstreams still owed an answer and the pages that came."""

    waiting: set[str]
    done: Callable[[dict[str, Any]], None]
    results: dict[str, Any] = field(default_factory=dict)
    timer: Deadlines.Entry | None = None


class Relists:
    """The gateway's list requests in flight, by ``(upstream, id)``."""

    def __init__(self, deadlines: Deadlines, timeout: float) -> None:
        self._deadlines = deadlines
        self._timeout = timeout
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, int], _Group] = {}

    def start(self, legs: dict[str, int], send: Callable[[str, int], None],
              done: Callable[[dict[str, Any]], None]) -> None:
        """Send a list request to each upstream of ``legs`` (upstream -> the gateway's id)
        with ``send``; ``done(results)`` once every one answered or the time limit passed,
        ``results`` holding the answered pages by upstream."""
        group = _Group(set(legs), done)
        with self._lock:
            for upstream, n in legs.items():
                self._pending[(upstream, n)] = group
        group.timer = self._deadlines.add(self._timeout, lambda: self._finish(group, legs))
        for upstream, n in legs.items():
            send(upstream, n)

    def answered(self, upstream: str, upstream_id: Any, result: Any) -> bool:
        """An answer with an id the host table does not hold: ``True`` when it was one of
        ours (``result`` is ``None`` for an error answer)."""
        if type(upstream_id) is not int:
            return False
        with self._lock:
            group = self._pending.pop((upstream, upstream_id), None)
            if group is None:
                return False
            group.waiting.discard(upstream)
            if result is not None:
                group.results[upstream] = result
            last = not group.waiting
        if last:
            if group.timer is not None:
                group.timer.cancel()
            group.done(group.results)
        return True

    def _finish(self, group: _Group, legs: dict[str, int]) -> None:
        with self._lock:
            if not group.waiting:
                return   # answered in time
            group.waiting.clear()
            for upstream, n in legs.items():
                self._pending.pop((upstream, n), None)
        group.done(group.results)
