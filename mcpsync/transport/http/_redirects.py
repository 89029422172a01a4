"""Following HTTP redirects by hand (see docs/http.md, "Redirects").

Every request is sent with ``allow_redirects=False`` and handed to :func:`follow`, because
requests' own rules are wrong for MCP: it turns a POST into a GET on 301/302 (losing the
JSON-RPC body), strips only ``Authorization`` when the host changes (the session id, DPoP proof,
``Mcp-*`` and custom headers would still leak) and follows https→http downgrades.

Our rule is narrow on purpose: a 307 or 308 to the *same origin* (scheme, host, port) is
followed, at most 5 hops, with the same method, body and headers. Anything else that redirects
raises :class:`~mcpsync.errors.TransportError` naming both URLs, so no header ever reaches
another origin and the user sees where the server wanted to send them. "Same origin" is
judged by :mod:`mcpsync._origin`: by where the connection will really go.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlsplit, urlunsplit

from mcpsync._origin import (
    UnsafeURL,
    check_same_origin,
    connection_origin,
    refuse_hostile,
)
from mcpsync.transport.http._auth import status_error

if TYPE_CHECKING:
    import requests

__all__ = ["MAX_HOPS", "REDIRECT_STATUSES", "follow"]

MAX_HOPS = 5
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_FOLLOWED = frozenset({307, 308})
# Optional white space around a header value (RFC 9110 §5.5); anything inside is refused.
_OWS = " \t"


def _shown(url: str) -> str:
    """The URL as error messages show it: without user info (it may hold a password)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def follow(send_once: Callable[[str], requests.Response], url: str, *,
           max_hops: int = MAX_HOPS, server: str | None = None,
           method: str | None = None) -> requests.Response:
    """Send with ``send_once(url)`` and follow same-origin 307/308 redirects.

    ``send_once`` must send with ``allow_redirects=False`` and the same method, body and
    headers each time. Returns the first response that is not a redirect (a 3xx without a
    ``Location`` is returned as is). Raises :class:`TransportError` (with ``status`` and
    ``url`` attributes) for a 301/302/303, a redirect to another origin, an https→http
    downgrade, or more than ``max_hops`` hops. ``server`` and ``method`` (the MCP method) go
    into the error.
    """
    current = url
    hops = 0
    while True:
        response = send_once(current)
        status = response.status_code
        if status not in REDIRECT_STATUSES:
            return response
        location = response.headers.get("Location")
        if not location:
            return response
        location = location.strip(_OWS)
        target = urljoin(current, location)
        response.close()
        why: str | None = None
        if status not in _FOLLOWED:
            why = (f"HTTP {status} redirects are not followed (they would turn the POST into "
                   "a GET); update the server URL")
        elif (reason := _unsafe_target(location, target, url)) is not None:
            why = reason
        elif hops >= max_hops:
            why = f"more than {max_hops} redirects"
        if why is not None:
            raise status_error(
                f"{_shown(current)} redirected (HTTP {status}) to {_shown(target)}: {why}",
                status=status, url=current, server=server, method=method)
        hops += 1
        current = target


def _unsafe_target(location: str, target: str, url: str) -> str | None:
    """Why the redirect to ``target`` (``location`` joined to the current URL) must not be
    followed, or None. The raw header is screened too, because ``urljoin`` drops tab, CR and
    LF and would hide them."""
    try:
        refuse_hostile(location)
        check_same_origin(target, url)
    except UnsafeURL as exc:
        try:
            downgrade = (connection_origin(url).scheme == "https"
                         and connection_origin(target).scheme != "https")
        except UnsafeURL:
            downgrade = False
        if downgrade:
            return "a redirect from https to http is never followed"
        return (f"the target is refused because {exc}; a redirect is followed only to the "
                "same origin, so no credentials or session headers were sent to it; update "
                "the server URL if the move is genuine")
    return None
