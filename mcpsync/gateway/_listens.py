"""``subscriptions/listen`` (2026-07-28) across several upstreams: one host listen, one per
upstream behind it.

The host's listen is split (:func:`~mcpsync.gateway._aggregate.split_listen_filter`): list
flags to every upstream, each subscribed URI only to its own upstream. Each upstream answers
with its own ``notifications/subscriptions/acknowledged``; the host must see one, so the
acknowledgements are held until every upstream asked has acknowledged (or ended its listen,
or died) and sent as one, the filters unioned and the URIs wrapped again. Until then nothing
said on the listen could be told apart from the acknowledgement's promise, and the host's
client waits for the acknowledgement before it trusts the listen, so holding is safe.

Every notification on a listen carries ``_meta["io.modelcontextprotocol/subscriptionId"]``,
the listen's request id; upstream it is the gateway's id of that leg, so it is turned back
into the host's id here.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

from mcpsync.gateway._aggregate import Call, wrap_listen_filter
from mcpsync.protocol import META_SUBSCRIPTION_ID

__all__ = ["ListenAcks", "host_subscription_meta"]


@dataclass
class _Pending:
    call: Call
    waiting: set[str]
    filters: list[Any] = field(default_factory=list)


def _union(filters: list[Any]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    uris: list[str] = []
    for one in filters:
        if not isinstance(one, dict):
            continue
        for key, value in one.items():
            if key == "resourceSubscriptions" and isinstance(value, list):
                uris.extend(u for u in value if isinstance(u, str) and u not in uris)
            elif value is True or key not in merged:
                merged[key] = value
    if uris:
        merged["resourceSubscriptions"] = uris
    return merged


class ListenAcks:
    """The host listens whose upstream acknowledgements are still being gathered."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[str, _Pending] = {}   # call key -> gathering

    def opened(self, call: Call) -> None:
        with self._lock:
            self._pending[call.key] = _Pending(call, set(call.legs))

    def acknowledged(self, call: Call, upstream: str, params: Any) -> dict[str, Any] | None:
        """``upstream`` acknowledged its leg of ``call``: the host's acknowledgement params
        once every leg has, else ``None``."""
        notifications = params.get("notifications") if isinstance(params, dict) else None
        return self._step(call.key, upstream, wrap_listen_filter(upstream, notifications))

    def leg_gone(self, call: Call, upstream: str) -> dict[str, Any] | None:
        """A leg ended without acknowledging (an error, its upstream died): as
        :meth:`acknowledged`, with nothing honoured there."""
        return self._step(call.key, upstream, None)

    def late(self, call: Call) -> list[str]:
        """The upstreams that have not yet acknowledged their leg of ``call`` (sorted)."""
        with self._lock:
            pending = self._pending.get(call.key)
            return sorted(pending.waiting) if pending is not None and pending.call is call \
                else []

    def forget(self, key: str) -> None:
        """The host cancelled the listen (``key``: its call key)."""
        with self._lock:
            self._pending.pop(key, None)

    def _step(self, key: str, upstream: str, notifications: Any) -> dict[str, Any] | None:
        with self._lock:
            pending = self._pending.get(key)
            if pending is None or upstream not in pending.waiting:
                return None
            pending.waiting.discard(upstream)
            if notifications is not None:
                pending.filters.append(notifications)
            if pending.waiting:
                return None
            del self._pending[key]
        return {"notifications": _union(pending.filters),
                "_meta": {META_SUBSCRIPTION_ID: _host_value(pending.call)}}


def _host_value(call: Call) -> Any:
    return json.loads(call.host_id)


def host_subscription_meta(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` of a notification on a listen leg with the subscription id made the host's."""
    meta = params.get("_meta")
    meta = dict(meta) if isinstance(meta, dict) else {}
    meta[META_SUBSCRIPTION_ID] = _host_value(call)
    return {**params, "_meta": meta}
