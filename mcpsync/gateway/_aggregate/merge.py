"""Answers of several upstreams merged into the one answer the host sees.

- Paginated lists: one host page is one page from every upstream not yet exhausted; the
  gateway's ``nextCursor`` carries each upstream's own cursor (:func:`encode_cursor`),
  opaque to the host, and the host's next request is split back (:func:`decode_cursor`).
- ``initialize``: the host may use a feature if any upstream offers it, so capabilities are
  unioned (:func:`union_capabilities`).
- ``server/discover`` (2026-07-28): capabilities unioned, ``supportedVersions``
  intersected (the host may speak only versions every upstream speaks), ``ttlMs`` the
  minimum and ``cacheScope`` ``"private"`` if any is, so the merged answer is never cached
  longer or wider than one of its parts allows (:func:`merge_discover`).
- ``Mcp-Name``: the header must equal the body, so after the body is rewritten for an
  upstream the header is computed from it again (:func:`mcp_name_header`).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from mcpsync.gateway._aggregate.ids import RouteError
from mcpsync.transport.http._headers import encode_header_value

__all__ = ["decode_cursor", "encode_cursor", "mcp_name_header", "merge_cache_hints",
           "merge_discover", "merge_pages", "union_capabilities"]

_CURSOR_TAG: Final = "gw1."
#: The member of params that ``Mcp-Name`` repeats, by method.
_NAME_MEMBER: Final = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}


def encode_cursor(cursors: Mapping[str, Any]) -> str | None:
    """The gateway cursor for the upstreams that have more (upstream -> its own cursor, or
    ``None`` for "not started"); ``None`` when none has, so the host sees the end."""
    if not cursors:
        return None
    body = json.dumps([[u, c] for u, c in cursors.items()], ensure_ascii=False,
                      separators=(",", ":"))
    return _CURSOR_TAG + base64.urlsafe_b64encode(body.encode("utf-8")).decode(
        "ascii").rstrip("=")


def decode_cursor(cursor: Any, upstreams: Sequence[str]) -> dict[str, Any]:
    """Which upstreams to ask for the host's page, each with its own cursor (``None`` = its
    first page). No cursor: every upstream in ``upstreams`` from its start. An upstream the
    cursor names that is no longer in ``upstreams`` is skipped. A cursor this gateway did not
    make raises :class:`RouteError` (-32602), as an invalid cursor must."""
    if cursor is None:
        return dict.fromkeys(upstreams)
    bad = RouteError(f"cursor {str(cursor)[:60]!r} was not made by this gateway; list again "
                     "without a cursor")
    if not isinstance(cursor, str) or not cursor.startswith(_CURSOR_TAG):
        raise bad
    text = cursor[len(_CURSOR_TAG):]
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        pairs = json.loads(raw.decode("utf-8"))
    except (binascii.Error, ValueError):
        raise bad from None
    if not isinstance(pairs, list) or not all(
            isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) for p in pairs):
        raise bad
    known = set(upstreams)
    return {u: c for u, c in pairs if u in known}


def merge_cache_hints(results: Iterable[Any]) -> dict[str, Any]:
    """``ttlMs`` and ``cacheScope`` for a merged result: the smallest ``ttlMs`` (absent or
    negative counts as 0, as a client must read it) and ``"private"`` if any part is private
    or says nothing. Empty when no part carries either hint (a legacy answer)."""
    parts = [r for r in results if isinstance(r, Mapping)]
    if not any("ttlMs" in r or "cacheScope" in r for r in parts):
        return {}
    ttls = []
    for r in parts:
        ttl = r.get("ttlMs")
        ttls.append(ttl if isinstance(ttl, int) and not isinstance(ttl, bool) and ttl > 0
                    else 0)
    public = all(r.get("cacheScope") == "public" for r in parts)
    return {"ttlMs": min(ttls, default=0), "cacheScope": "public" if public else "private"}


def merge_pages(list_key: str, pages: Sequence[tuple[str, Any]],
                rewrite: Callable[[str, Any], Any], *,
                carry: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One host page from ``(upstream, result)`` pages, in that order.

    ``rewrite(upstream, result)`` turns an upstream's page into the host's view (names
    prefixed, URIs rewritten). The items of ``list_key`` are concatenated; ``nextCursor``
    encodes the cursor of each upstream that has more, plus ``carry`` (upstreams not asked
    this round, such as one that failed and should be retried, with the cursor to retry).
    Cache hints are merged (:func:`merge_cache_hints`); other members of the upstream
    results belong to one upstream and are not copied.
    """
    items: list[Any] = []
    more: dict[str, Any] = dict(carry or {})
    modern = False
    for upstream, result in pages:
        if not isinstance(result, Mapping):
            continue
        modern = modern or "resultType" in result
        view = rewrite(upstream, result)
        got = view.get(list_key) if isinstance(view, Mapping) else None
        if isinstance(got, list):
            items.extend(got)
        nxt = result.get("nextCursor")
        if nxt is not None:
            more[upstream] = nxt
    merged: dict[str, Any] = {list_key: items}
    if modern:
        merged["resultType"] = "complete"
    merged.update(merge_cache_hints(r for _, r in pages))
    cursor = encode_cursor(more)
    if cursor is not None:
        merged["nextCursor"] = cursor
    return merged


def union_capabilities(capabilities: Iterable[Any]) -> dict[str, Any]:
    """The union of capability objects: objects merged member by member, a flag true if any
    is, any other value the first one seen (capabilities are objects of flags and objects)."""
    merged: dict[str, Any] = {}
    for caps in capabilities:
        if isinstance(caps, Mapping):
            _union_into(merged, caps)
    return merged


def _union_into(into: dict[str, Any], caps: Mapping[str, Any]) -> None:
    for key, value in caps.items():
        have = into.get(key)
        if key not in into:
            into[key] = _copy(value)
        elif isinstance(have, dict) and isinstance(value, Mapping):
            _union_into(have, value)
        elif isinstance(have, bool) and isinstance(value, bool):
            into[key] = have or value


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _copy(v) for k, v in value.items()}
    return value


def merge_discover(results: Mapping[str, Any], *,
                   server_info: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One ``server/discover`` result from every upstream's (upstream -> result).

    ``supportedVersions`` keeps the first upstream's order, holding the versions every
    upstream lists (it may come out empty: the core must then refuse the modern era);
    ``instructions`` are joined, each headed by its upstream's id; ``server_info`` (the
    gateway's own) goes in ``_meta``.
    """
    parts = [r for r in results.values() if isinstance(r, Mapping)]
    lists = [[v for v in r.get("supportedVersions") or [] if isinstance(v, str)]
             for r in parts]
    versions = [v for v in lists[0] if all(v in other for other in lists[1:])] if lists else []
    merged: dict[str, Any] = {
        "resultType": "complete",
        "supportedVersions": versions,
        "capabilities": union_capabilities(r.get("capabilities") for r in parts),
    }
    notes = [f"{u}: {r['instructions']}" for u, r in results.items()
             if isinstance(r, Mapping) and isinstance(r.get("instructions"), str)]
    if notes:
        merged["instructions"] = "\n\n".join(notes)
    hints = merge_cache_hints(parts)
    merged.update(hints or {"ttlMs": 0, "cacheScope": "private"})
    if server_info is not None:
        merged["_meta"] = {"io.modelcontextprotocol/serverInfo": dict(server_info)}
    return merged


def mcp_name_header(method: str, params: Any) -> str | None:
    """The ``Mcp-Name`` value for a request with these (already rewritten) params, encoded
    for a header; ``None`` when the method carries no such header or the member is absent.
    Computed from the body the upstream receives, so header and body always agree."""
    member = _NAME_MEMBER.get(method, "taskId" if method.startswith("tasks/") else None)
    if member is None or not isinstance(params, Mapping):
        return None
    value = params.get(member)
    if not isinstance(value, str | int):
        return None
    return encode_header_value(value)
