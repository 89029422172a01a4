"""Where a URL will really connect: the first half of every URL decision mcpauth makes.

mcpauth fetches with requests, so a URL must be judged by what requests and urllib3 will do
with it, never by a second parser. ``urllib.parse`` reads ``http://10.9.8.7\\@127.0.0.1/x`` as
host ``127.0.0.1`` (loopback, so "http is fine"), while urllib3 connects in cleartext to
``10.9.8.7``; ``http://127.0.0.1:8080\\@93.184.216.34/x`` looks public and reaches loopback.

Every check therefore has two steps:

1. :func:`refuse_hostile` refuses what no honest server sends and parsers disagree on: a
   backslash, a control character, any whitespace, a Unicode format character, or user info
   (``@`` before the host).
2. :func:`connection_origin` prepares the URL exactly as requests does (IDNA, quoting) and
   reads scheme, host and port with urllib3's ``parse_url``, which is what the connection pool
   is given.

:func:`screen` runs both and turns a refusal into :class:`~mcpauth.errors.InsecureURL`. The
https rule, the private-network block, the resource check and the cross-origin test all build
on its answer.

mcpsync has the same two steps for its own redirects (``mcpsync/transport/_origin.py``);
they are written twice on purpose, because mcpauth never imports mcpsync.
"""

from __future__ import annotations

import re
import unicodedata
from typing import NamedTuple

import requests
from urllib3.exceptions import LocationParseError
from urllib3.util import parse_url

from .errors import InsecureURL

__all__ = ["Origin", "UnsafeURL", "connection_origin", "connection_target", "refuse_hostile",
           "same_origin", "screen", "screen_reference"]

_DEFAULT_PORTS = {"http": 80, "https": 443}
# Cc: controls (C0, DEL, C1); Cf: format characters, which IDNA may silently drop; Zs, Zl,
# Zp: every kind of space and line break.
_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp"})
# The authority of an absolute or scheme-relative URL (RFC 3986 §3.2).
_AUTHORITY = re.compile(r"(?:[A-Za-z][A-Za-z0-9+.\-]*:)?//([^/?#]*)")


class UnsafeURL(ValueError):
    """A URL refused before it is used; the text says why (never the URL itself)."""


class Origin(NamedTuple):
    """``(scheme, host, port)`` as the connection will use them: lower-case, IDNA-encoded
    host (IPv6 in brackets), default port filled in."""

    scheme: str
    host: str
    port: int

    @property
    def bare_host(self) -> str:
        """The host without IPv6 brackets, as ``getaddrinfo`` and address checks want it."""
        return self.host[1:-1] if self.host.startswith("[") else self.host

    def __str__(self) -> str:
        if self.port == _DEFAULT_PORTS.get(self.scheme):
            return f"{self.scheme}://{self.host}"
        return f"{self.scheme}://{self.host}:{self.port}"


def refuse_hostile(url: str) -> None:
    """Raise :class:`UnsafeURL` for a backslash, a control, format or whitespace character,
    or user info in the authority (``@`` or ``%40`` before the host)."""
    for ch in url:
        if ch == "\\":
            raise UnsafeURL("it contains a backslash")
        if ch.isspace() or unicodedata.category(ch) in _REFUSED_CATEGORIES:
            raise UnsafeURL(f"it contains the character U+{ord(ch):04X}")
    match = _AUTHORITY.match(url)
    authority = match.group(1) if match else ""
    if "@" in authority or "%40" in authority.lower():
        raise UnsafeURL("it carries user info (an '@' before the host)")


def connection_origin(url: str) -> Origin:
    """The origin the connection for ``url`` will use, from urllib3's reading of the URL as
    requests prepares it. :class:`UnsafeURL` when it cannot be parsed or is not http(s)
    with a host."""
    return connection_target(url)[0]


def connection_target(url: str) -> tuple[Origin, str]:
    """The origin and the path the request for ``url`` will reach: requests' preparation
    unquotes ``%2e`` to ``.``, and dot segments are resolved as the server will resolve them
    (``/mcp/%2e%2e/admin`` reaches ``/admin``)."""
    prepared = requests.PreparedRequest()
    try:
        prepared.prepare_url(url, None)
        parsed = parse_url(prepared.url or "")
    except (requests.exceptions.RequestException, LocationParseError, ValueError) as exc:
        raise UnsafeURL(f"it is not a valid URL ({type(exc).__name__})") from None
    scheme = (parsed.scheme or "").lower()
    host = (parsed.host or "").lower()
    if scheme not in _DEFAULT_PORTS or not host:
        raise UnsafeURL("it is not an http:// or https:// URL with a host")
    return Origin(scheme, host, parsed.port or _DEFAULT_PORTS[scheme]), parsed.path or "/"


def screen(url: str, *, what: str, step: str, shown: str) -> Origin:
    """Both steps; a refusal becomes :class:`InsecureURL` naming ``what`` and ``shown`` (the
    URL as messages may show it)."""
    try:
        refuse_hostile(url)
        return connection_origin(url)
    except UnsafeURL as exc:
        raise InsecureURL(f"{step}: {what} {shown} is refused because {exc}",
                          step=step, url=shown) from None


def screen_reference(reference: str, *, what: str, step: str, shown: str) -> None:
    """Step 1 alone, for a reference that may be relative (a ``Location`` header before it
    is joined: ``urljoin`` drops tab, CR and LF and would hide them)."""
    try:
        refuse_hostile(reference)
    except UnsafeURL as exc:
        raise InsecureURL(f"{step}: {what} {shown} is refused because {exc}",
                          step=step, url=shown) from None


def same_origin(a: str, b: str) -> bool:
    """True when both URLs connect to the same origin; False when either is unusable."""
    try:
        return connection_origin(a) == connection_origin(b)
    except UnsafeURL:
        return False
