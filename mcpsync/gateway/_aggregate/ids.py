"""Request ids, progress tokens and cancellations across several upstreams.

The host picks its request ids, and every upstream expects ids unique on its own
connection; the gateway also sends requests of its own (list refreshes). So each request
going upstream gets a fresh integer id from the gateway, and :class:`IdTable` maps it back
to the host's id when the answer comes. The host's id is kept as its raw JSON text (any JSON
type: ``7``, ``"a"``, ``1.5``, even ``null`` or an object from a careless host) and written
back exactly so; two spellings of one value (``"ab"`` and ``"a\\u0062"``) are one id.

A host request may go to several upstreams at once (a list merged from all of them), so a
:class:`Call` has one *leg* per upstream and leaves the table when its last leg is answered,
when the host cancels it, or when the upstreams of all its legs have died. The table is
bounded: past ``limit`` calls in flight, :meth:`IdTable.open` raises :class:`TableFull` and
the core answers the host with an error instead of growing without end.

Progress tokens are remapped with the ids: the token a leg carries upstream is its own
upstream id, which is unique there, and a ``notifications/progress`` from an upstream is
turned back into the host's token by :meth:`IdTable.progress`. Server-to-client requests
(sampling, elicitation, roots in the legacy era) get a host-side id from
:class:`PeerTable`, which also records the host request that caused them.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from mcpsync._codes import INTERNAL_ERROR, INVALID_PARAMS

__all__ = ["DEFAULT_LIMIT", "Call", "DuplicateId", "IdTable", "PeerCall", "PeerTable",
           "RouteError", "TableFull", "id_key", "value_key", "with_progress_token"]

#: How many host requests may be in flight at once by default.
DEFAULT_LIMIT: Final = 4096


class RouteError(ValueError):
    """A host message the gateway cannot route; ``code`` is the JSON-RPC error to answer."""

    def __init__(self, message: str, code: int = INVALID_PARAMS) -> None:
        super().__init__(message)
        self.code = code


class TableFull(RouteError):
    """Too many requests in flight; the host should wait for answers before sending more."""


class DuplicateId(RouteError):
    """The host reused the id of a request that is still in flight."""


def value_key(value: Any) -> str:
    """The key two equal JSON ids share: compact JSON of the decoded value. ``1``, ``1.0``,
    ``true`` and ``"1"`` stay four different ids."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def id_key(raw: str) -> str:
    """:func:`value_key` of an id given as its raw JSON text."""
    try:
        return value_key(json.loads(raw))
    except ValueError:
        raise RouteError(f"request id {raw[:80]!r} is not JSON", INVALID_PARAMS) from None


def with_progress_token(params: Any, token: Any) -> Any:
    """``params`` (copied) with ``_meta.progressToken`` set to ``token``."""
    params = dict(params) if isinstance(params, Mapping) else {}
    meta = params.get("_meta")
    params["_meta"] = {**(meta if isinstance(meta, Mapping) else {}), "progressToken": token}
    return params


_NO_TOKEN: Final[Any] = object()


@dataclass(frozen=True)
class Call:
    """One host request in flight.

    ``host_id`` is the raw text of the host's id; ``legs`` maps each upstream the request went
    to onto the id it carries there (also its progress token there); ``progress_token`` is
    the host's token (``None`` when ``has_token`` is false); ``method`` is for logs.
    """

    host_id: str
    legs: Mapping[str, int]
    method: str = ""
    has_token: bool = False
    progress_token: Any = None
    key: str = field(default="", repr=False, compare=False)

    def upstream_id(self, upstream: str) -> int:
        """The id (and progress token) this call carries at ``upstream``."""
        return self.legs[upstream]


class IdTable:
    """Host request ids <-> upstream ids, bounded and thread-safe (one lock, short holds)."""

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, not {limit}")
        self._limit = limit
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._by_host: dict[str, Call] = {}
        # (upstream, upstream id) -> call, for the legs not yet answered.
        self._by_leg: dict[tuple[str, int], Call] = {}
        self._open_legs: dict[str, set[str]] = {}

    def __len__(self) -> int:
        return len(self._by_host)

    def next_id(self) -> int:
        """A fresh upstream id for a request of the gateway's own (never in the table)."""
        with self._lock:
            return next(self._ids)

    def open(self, host_id: str, upstreams: str | Sequence[str], *, method: str = "",
             progress_token: Any = _NO_TOKEN) -> Call:
        """Record host request ``host_id`` (raw id text) going to ``upstreams``.

        Raises :class:`DuplicateId` when that id is already in flight and :class:`TableFull`
        past the limit; in both cases nothing is recorded.
        """
        ups = [upstreams] if isinstance(upstreams, str) else list(dict.fromkeys(upstreams))
        if not ups:
            raise ValueError("a call needs at least one upstream")
        key = id_key(host_id)
        with self._lock:
            if key in self._by_host:
                raise DuplicateId(f"request id {host_id[:80]} is already in flight; use a "
                                  "new id for each request")
            if len(self._by_host) >= self._limit:
                raise TableFull(f"{self._limit} requests are already in flight through the "
                                "gateway; wait for some to finish", INTERNAL_ERROR)
            legs = {u: next(self._ids) for u in ups}
            has = progress_token is not _NO_TOKEN
            call = Call(host_id, legs, method, has, progress_token if has else None, key)
            self._by_host[key] = call
            self._open_legs[key] = set(ups)
            for u, n in legs.items():
                self._by_leg[(u, n)] = call
            return call

    def get(self, host_id: str) -> Call | None:
        """The call in flight under host id ``host_id`` (raw text)."""
        return self._by_host.get(id_key(host_id))

    def leg(self, upstream: str, upstream_id: Any) -> Call | None:
        """The call whose leg at ``upstream`` has id ``upstream_id``, without removing it."""
        if type(upstream_id) is not int:
            return None
        return self._by_leg.get((upstream, upstream_id))

    def in_flight(self, upstream: str) -> list[Call]:
        """The calls with a leg still open at ``upstream``."""
        with self._lock:
            return [c for (u, _), c in self._by_leg.items() if u == upstream]

    def _drop_leg(self, upstream: str, call: Call) -> bool:
        """Remove one leg (lock held); True when it was the call's last."""
        self._by_leg.pop((upstream, call.legs[upstream]), None)
        left = self._open_legs.get(call.key)
        if left is None:
            return True
        left.discard(upstream)
        if left:
            return False
        del self._open_legs[call.key]
        self._by_host.pop(call.key, None)
        return True

    def answered(self, upstream: str, upstream_id: Any) -> tuple[Call, bool] | None:
        """``upstream`` answered ``upstream_id``: ``(call, done)``, ``done`` when that was the
        last leg (the call has left the table); ``None`` for an id the table does not hold
        (the gateway's own request, or a call already cancelled)."""
        if type(upstream_id) is not int:
            return None
        with self._lock:
            call = self._by_leg.get((upstream, upstream_id))
            if call is None:
                return None
            return call, self._drop_leg(upstream, call)

    def cancel(self, params: Any) -> list[tuple[str, dict[str, Any]]]:
        """A host's ``notifications/cancelled`` params, as ``(upstream, params)`` to send to
        each upstream still working on the call; the call leaves the table. Members other
        than ``requestId`` (``reason``, unknown ones) are kept. Empty for an id not in flight
        (already answered: the cancellation crossed the answer, which is allowed)."""
        if not isinstance(params, Mapping) or "requestId" not in params:
            return []
        key = value_key(params["requestId"])
        with self._lock:
            call = self._by_host.pop(key, None)
            if call is None:
                return []
            left = self._open_legs.pop(key, set())
            for u in left:
                self._by_leg.pop((u, call.legs[u]), None)
        return [(u, {**params, "requestId": call.legs[u]}) for u in call.legs if u in left]

    def upstream_died(self, upstream: str) -> list[tuple[Call, bool]]:
        """Drop every leg open at ``upstream``: ``(call, done)`` for each, ``done`` when the
        call had no other leg (the core fails it at once, naming the upstream)."""
        with self._lock:
            calls = [c for (u, _), c in self._by_leg.items() if u == upstream]
            return [(c, self._drop_leg(upstream, c)) for c in calls]

    def progress(self, upstream: str, params: Any) -> tuple[Call, dict[str, Any]] | None:
        """An upstream's ``notifications/progress`` params turned into the host's: the token
        back to the host's own. ``None`` when no call in flight owns it or the host asked for
        no progress (then nothing is forwarded)."""
        if not isinstance(params, Mapping):
            return None
        call = self.leg(upstream, params.get("progressToken"))
        if call is None or not call.has_token:
            return None
        return call, {**params, "progressToken": call.progress_token}


@dataclass(frozen=True)
class PeerCall:
    """A request an upstream sent to the host (sampling, elicitation, roots).

    ``host_id`` is the id the gateway gave it towards the host; ``upstream_id`` the raw
    text of the upstream's id, written back exactly; ``cause`` the host request it was made
    for (``None`` when that cannot be told).
    """

    host_id: int
    upstream: str
    upstream_id: str
    cause: Call | None
    key: str = field(default="", repr=False, compare=False)


class PeerTable:
    """Server-to-client requests in flight: upstream (upstream, id) <-> host-side id.

    Thread-safe and bounded like :class:`IdTable`. The cause of a request is the call whose
    leg the transport says it belongs to (``related``: over Streamable HTTP, the POST whose
    stream carried it), else the only call in flight at that upstream; with several in
    flight over stdio nothing on the wire tells them apart, and ``cause`` is ``None``.
    """

    def __init__(self, calls: IdTable, limit: int = DEFAULT_LIMIT) -> None:
        self._calls = calls
        self._limit = limit
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._by_host: dict[int, PeerCall] = {}
        self._by_upstream: dict[tuple[str, str], PeerCall] = {}

    def __len__(self) -> int:
        return len(self._by_host)

    def open(self, upstream: str, upstream_id: str, related: int | None = None) -> PeerCall:
        """Record ``upstream``'s request ``upstream_id`` (raw id text) going to the host."""
        key = id_key(upstream_id)
        cause = self._calls.leg(upstream, related) if related is not None else None
        if cause is None and related is None:
            flying = self._calls.in_flight(upstream)
            cause = flying[0] if len(flying) == 1 else None
        with self._lock:
            if (upstream, key) in self._by_upstream:
                raise DuplicateId(f"upstream {upstream!r} reused request id "
                                  f"{upstream_id[:80]} while it was in flight")
            if len(self._by_host) >= self._limit:
                raise TableFull(f"{self._limit} requests from upstreams are already waiting "
                                "for the host", INTERNAL_ERROR)
            peer = PeerCall(next(self._ids), upstream, upstream_id, cause, key)
            self._by_host[peer.host_id] = peer
            self._by_upstream[(upstream, key)] = peer
            return peer

    def _forget(self, peer: PeerCall) -> None:
        self._by_host.pop(peer.host_id, None)
        self._by_upstream.pop((peer.upstream, peer.key), None)

    def answered(self, host_id: Any) -> PeerCall | None:
        """The host answered ``host_id`` (the decoded id): the request, now out of the table."""
        if type(host_id) is not int:
            return None
        with self._lock:
            peer = self._by_host.get(host_id)
            if peer is not None:
                self._forget(peer)
            return peer

    def cancel(self, upstream: str, params: Any) -> tuple[PeerCall, dict[str, Any]] | None:
        """``upstream`` cancelled its request: the request (out of the table) and the
        ``notifications/cancelled`` params for the host, with the host-side id."""
        if not isinstance(params, Mapping) or "requestId" not in params:
            return None
        with self._lock:
            peer = self._by_upstream.get((upstream, value_key(params["requestId"])))
            if peer is None:
                return None
            self._forget(peer)
        return peer, {**params, "requestId": peer.host_id}

    def caused_by(self, call: Call) -> list[PeerCall]:
        """The requests still waiting at the host that ``call`` caused (to cancel with it)."""
        with self._lock:
            return [p for p in self._by_host.values() if p.cause is call]

    def upstream_died(self, upstream: str) -> list[PeerCall]:
        """Drop every request of ``upstream`` (their answers have nowhere to go)."""
        with self._lock:
            dead = [p for p in self._by_host.values() if p.upstream == upstream]
            for p in dead:
                self._forget(p)
            return dead
