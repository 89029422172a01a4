"""Tool and prompt names of several upstreams, exposed as one namespace.

A host sees one server, so two upstreams that both have a ``search`` tool must show two
names. Each name is prefixed with its upstream's id and the Manager's separator
(``docs__search``), so a user who knows the Manager's prefixed names reads the gateway's the
same way. Hosts (and the models behind them) accept only ``^[a-zA-Z0-9_-]{1,64}$``, so the
exposed name is made to fit: other characters become ``_``, a name longer than 64 characters
is cut and ends in a short hash of the full original (stable: the same original always gives
the same short form), and two originals that come out the same are told apart
deterministically (see :func:`assign_names`).

Because the exposed name is altered and upstream ids may themselves contain the separator
(``a__b`` + ``c`` and ``a`` + ``b__c``), a name is never split back into its parts: it is
looked up in a :class:`NameTable`.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from mcpsync.gateway._aggregate.ids import RouteError
from mcpsync.manager._types import SEP

__all__ = ["MAX_NAME", "NAME_RULE", "SEP", "NameTable", "Route", "assign_names",
           "exposed_name"]

#: The longest exposed name.
MAX_NAME: Final = 64
#: What every exposed name matches.
NAME_RULE: Final = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_UNSAFE: Final = re.compile(r"[^a-zA-Z0-9_-]")
_HASH_LEN: Final = 8


@dataclass(frozen=True)
class Route:
    """Where an exposed name leads: the upstream's id and the name the upstream knows."""

    upstream: str
    name: str


def _digest(upstream: str, name: str, salt: int = 0) -> str:
    # A NUL cannot occur in either part's meaning of "boundary", so (a, bc) and (ab, c)
    # hash differently even though their prefixed spellings are equal.
    text = f"{upstream}\x00{name}\x00{salt}" if salt else f"{upstream}\x00{name}"
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_LEN]


def _shorten(base: str, upstream: str, name: str, salt: int = 0) -> str:
    tag = "-" + _digest(upstream, name, salt)
    return base[:MAX_NAME - len(tag)] + tag


def exposed_name(upstream: str, name: str) -> str:
    """The name ``name`` of upstream ``upstream`` is offered under when nothing collides.

    ``<upstream>__<name>`` when that already matches :data:`NAME_RULE`. Otherwise every
    character outside it becomes ``_``, the result is cut to 55 characters if longer, and
    ``-`` plus 8 hex digits of a hash of the full original is appended: an altered name
    always carries the hash, so it cannot take the spelling of another upstream's name
    that needed no change (``a.b`` and ``a_b`` stay apart without a collision rule).
    """
    raw = f"{upstream}{SEP}{name}"
    if NAME_RULE.match(raw):
        return raw
    return _shorten(_UNSAFE.sub("_", raw), upstream, name)


def assign_names(names: Mapping[str, Iterable[str]]) -> dict[str, Route]:
    """Exposed name -> :class:`Route` for every upstream's names (``upstream -> names``).

    Two originals can still want one spelling: upstream ids may contain the separator, so
    ``a__b`` + ``c`` and ``a`` + ``b__c`` both spell ``a__b__c``. Then neither gets it: both
    take the hash form (each hash covers its own upstream and name, so they differ), salted
    with 1, 2, ... in the astronomically rare case a hash form is taken too. The result
    depends only on the set of names, never on the order they arrived in, and a spelling
    used while it was unique is never given to a different original when a clash appears
    (see :class:`NameTable` for how the old spelling stays resolvable).
    """
    wanted: dict[str, list[tuple[str, str]]] = {}
    for entry in sorted({(up, n) for up, ns in names.items() for n in ns}):
        wanted.setdefault(exposed_name(*entry), []).append(entry)
    table = {spelling: Route(*entries[0]) for spelling, entries in wanted.items()
             if len(entries) == 1}
    clashing = sorted(e for entries in wanted.values() if len(entries) > 1 for e in entries)
    for upstream, name in clashing:
        base = _UNSAFE.sub("_", f"{upstream}{SEP}{name}")
        salt = 0
        candidate = _shorten(base, upstream, name)
        while candidate in table or candidate in wanted:
            salt += 1
            candidate = _shorten(base, upstream, name, salt)
        table[candidate] = Route(upstream, name)
    return table


class _Snapshot(NamedTuple):
    forward: dict[str, Route]
    back: dict[Route, str]
    retired: dict[str, Route]


class NameTable:
    """The exposed names of one kind (``"tool"`` or ``"prompt"``) across all upstreams.

    Thread-safe: writers rebuild under a lock and publish an immutable snapshot with one
    assignment; readers take the current snapshot without locking, so a lookup never sees
    half a rebuild.

    Rebuilds: :meth:`update` replaces one upstream's names (its list changed), :meth:`extend`
    adds a further page of them, and either recomputes every exposed name, since a clash may
    have appeared or gone. A call in flight is not affected by a rebuild, for two reasons.
    The core resolves the name once, when the host's request arrives, and keeps the
    :class:`Route` with the call, so a later rebuild cannot change where that call goes. And
    a host may still hold a list fetched before the change: every spelling the table ever
    gave out stays resolvable, to the original it named, for as long as no current name uses
    it (the most recent ``keep_retired`` such spellings are kept). So a call made with an
    old name right after a rebuild still reaches the same tool, or, if the tool is gone, its
    upstream, which answers that it does not know it; and because a spelling is never given
    to a different original while it is retired (:func:`assign_names` never hands a
    clashing spelling to anyone), an old name cannot silently lead somewhere else.
    """

    def __init__(self, kind: str = "tool", *, keep_retired: int = 10_000) -> None:
        self.kind = kind
        self._keep = keep_retired
        self._lock = threading.Lock()
        self._names: dict[str, dict[str, None]] = {}
        self._now = _Snapshot({}, {}, {})

    def update(self, upstream: str, names: Iterable[str]) -> None:
        """Set ``upstream``'s names (replacing what it had) and rebuild the table."""
        with self._lock:
            self._names[upstream] = dict.fromkeys(names)
            self._rebuild()

    def extend(self, upstream: str, names: Iterable[str]) -> None:
        """Add names to ``upstream``'s (a further page of its list) and rebuild the table."""
        with self._lock:
            self._names.setdefault(upstream, {}).update(dict.fromkeys(names))
            self._rebuild()

    def remove(self, upstream: str) -> None:
        """Forget ``upstream``'s names (it left the configuration) and rebuild."""
        with self._lock:
            if self._names.pop(upstream, None) is not None:
                self._rebuild()

    def _rebuild(self) -> None:
        old = self._now
        forward = assign_names(self._names)
        retired = {name: route for name, route in old.retired.items() if name not in forward}
        for name, route in old.forward.items():
            if name not in forward:
                retired.pop(name, None)
                retired[name] = route  # newest last, so the oldest go first below
        for name in list(itertools.islice(retired, max(0, len(retired) - self._keep))):
            del retired[name]
        # One assignment: a reader sees the old snapshot or the new one, never a mixture.
        self._now = _Snapshot(forward, {route: name for name, route in forward.items()},
                              retired)

    def expose(self, upstream: str, name: str) -> str | None:
        """The exposed name of ``upstream``'s ``name``; ``None`` if the table lacks it."""
        return self._now.back.get(Route(upstream, name))

    def resolve(self, exposed: str) -> Route | None:
        """Where ``exposed`` leads: the current table first, then retired spellings."""
        now = self._now
        route = now.forward.get(exposed)
        return route if route is not None else now.retired.get(exposed)

    def names(self) -> dict[str, Route]:
        """A copy of the current table (exposed name -> route)."""
        return dict(self._now.forward)

    def expose_list(self, upstream: str, result: Any, list_key: str) -> Any:
        """A list result of ``upstream`` (``tools/list``: ``"tools"``, ``prompts/list``:
        ``"prompts"``) with each item's ``name`` replaced by its exposed name. The page's
        names are added to the table first, so nothing is left unnamed; every other member
        is kept as it was."""
        if not isinstance(result, dict) or not isinstance(result.get(list_key), list):
            return result
        items = result[list_key]
        self.extend(upstream, [i["name"] for i in items
                               if isinstance(i, dict) and isinstance(i.get("name"), str)])
        back = self._now.back
        renamed = [{**i, "name": back[Route(upstream, i["name"])]}
                   if isinstance(i, dict) and isinstance(i.get("name"), str) else i
                   for i in items]
        return {**result, list_key: renamed}

    def route_params(self, params: Any) -> tuple[Route, dict[str, Any]]:
        """``(route, params for the upstream)`` for ``tools/call`` or ``prompts/get`` params
        (or a ``ref/prompt`` completion ref): ``name`` mapped back, everything else kept.
        Raises :class:`~mcpsync.gateway._aggregate.ids.RouteError` (-32602) for a name the
        gateway never gave out."""
        name = params.get("name") if isinstance(params, dict) else None
        if not isinstance(name, str):
            raise RouteError(f"the request has no {self.kind} name (params.name)")
        route = self.resolve(name)
        if route is None:
            raise RouteError(f"no {self.kind} named {name[:100]!r} behind this gateway; "
                             f"list the {self.kind}s again to see the current names")
        return route, {**params, "name": route.name}
