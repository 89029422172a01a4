"""Whole lists: ``tools/list``, ``prompts/list``, ``resources/list`` and
``resources/templates/list`` followed through ``nextCursor`` to the end.

Modern pages come from the list cache while fresh. A cached cursor the server no longer
honours (``-32602`` on a page fetched after a cached one) drops the method's pages and the
list is fetched once more from the start. A list that does not end within ``max_pages``
raises :class:`~mcpsync.errors.TooManyPages` rather than looping forever.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mcpsync._codes import INVALID_PARAMS
from mcpsync.client._cache import ListCache
from mcpsync.errors import ProtocolError, RemoteError, TooManyPages
from mcpsync.protocol import describe_call

__all__ = ["list_all"]

_INVALID_PARAMS = INVALID_PARAMS


def list_all(method: str, key: str, *, request: Callable[[str, Any], dict[str, Any]],
             cache: ListCache, modern: Callable[[], bool], max_pages: int,
             server: str) -> list[Any]:
    """Every item of a list; ``request(method, params)`` fetches one page, and ``modern()``
    says whether the cache applies (read per page: a re-detection may change the era)."""
    for attempt in range(2):
        items: list[Any] = []
        cursor: str | None = None
        pages = 0
        used_cache = False
        try:
            while True:
                page = cache.get(method, cursor) if modern() else None
                if page is not None:
                    used_cache = True
                else:
                    page = request(method, {"cursor": cursor} if cursor is not None else None)
                    if modern():
                        cache.put(method, cursor, page)
                got = page.get(key)
                if not isinstance(got, list):
                    raise ProtocolError(
                        f"{describe_call(method, None, server)}: the result has no "
                        f"{key!r} list", server=server, method=method)
                items.extend(got)
                pages += 1
                cursor = page.get("nextCursor")
                if cursor is None:
                    return items
                if pages >= max_pages:
                    raise TooManyPages(
                        f"{describe_call(method, None, server)}: the list did not end "
                        f"within {max_pages} pages; raise max_pages if it is genuinely that "
                        "long", server=server, method=method)
        except RemoteError as exc:
            if attempt or not used_cache or exc.code != _INVALID_PARAMS:
                raise
            cache.invalidate(method)
    raise AssertionError("unreachable")  # pragma: no cover
