"""Where a URL will really connect: the one origin check for every URL a server hands us.

A server can hand the client a URL in two places: a redirect's ``Location`` and the
2024-11-05 HTTP+SSE ``endpoint`` event. Before any credential (``Authorization``, the static
``headers=``, ``Mcp-Session-Id``) is sent there, the URL must belong to the origin the user
configured. Comparing origins with ``urllib.parse`` is not enough: it reads
``http://localhost:8001\\@127.0.0.1:8000/mcp`` as host ``127.0.0.1`` while requests and urllib3
connect to ``localhost:8001``, the part before the backslash. Two parsers, two opinions, and
the token goes to the wrong one.

So the check has two steps, and never asks a second parser:

1. Refuse outright what no honest server sends and what parsers disagree on: a backslash, a
   control character, any whitespace, a Unicode format character, or user info (``@`` in the
   authority). This is :func:`refuse_hostile`.
2. Prepare the URL exactly as requests will (``PreparedRequest.prepare_url``: IDNA, quoting)
   and take scheme, host and port from urllib3's ``parse_url`` of the prepared URL: that is
   what ``HTTPAdapter`` hands the connection pool, so it is the host the socket will reach.
   This is :func:`connection_origin`.

:func:`check_same_origin` does both and is what the redirect follower and the HTTP+SSE
endpoint use.
"""

from __future__ import annotations

import ipaddress
from typing import NamedTuple

from mcpsync._urls import bad_character, has_userinfo

__all__ = ["Origin", "UnsafeURL", "check_same_origin", "connection_origin", "is_loopback_host",
           "refuse_hostile"]

_DEFAULT_PORTS = {"http": 80, "https": 443}


class UnsafeURL(ValueError):
    """A URL refused before any request is sent to it; the text says why."""


class Origin(NamedTuple):
    """``(scheme, host, port)`` as the connection will use them: lower-case, default port
    filled in, host IDNA-encoded (``[...]`` kept for IPv6)."""

    scheme: str
    host: str
    port: int | None

    def __str__(self) -> str:
        return f"{self.scheme}://{self.host}" + (f":{self.port}" if self.port else "")


def refuse_hostile(url: str) -> None:
    """Raise :class:`UnsafeURL` for a backslash, a control, format or whitespace character,
    or user info anywhere in the authority.

    These are refused rather than normalised: parsers disagree about them (urllib.parse drops
    tab, CR and LF; WHATWG turns ``\\`` into ``/``; urllib3 ends the authority at it), and a
    server that means no harm never sends them.
    """
    reason = bad_character(url)
    if reason is None and has_userinfo(url):
        reason = "it carries user info (an '@' before the host)"
    if reason is not None:
        raise UnsafeURL(reason)


def connection_origin(url: str) -> Origin:
    """The origin the connection for ``url`` will actually use, taken from urllib3's reading
    of the URL as requests prepares it. Raises :class:`UnsafeURL` when requests or urllib3
    cannot parse it, or it is not http(s) with a host."""
    # Imported here, not at the top: the redirect module is one of the HTTP building blocks
    # that `import mcpsync` may load without requests.
    import requests
    from urllib3.exceptions import LocationParseError
    from urllib3.util import parse_url

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
    return Origin(scheme, host, parsed.port or _DEFAULT_PORTS[scheme])


def is_loopback_host(host: str) -> bool:
    """True for ``localhost``, an address in ``127.0.0.0/8`` and ``::1`` (brackets allowed,
    IPv4-mapped forms included): the only hosts where cleartext http never leaves the
    machine. A name that merely starts with ``127.`` (``127.evil.example``) is not one.

    The same rule as mcpauth's, kept here so that ``import mcpsync`` need not load mcpauth.
    """
    name = host.strip().lower().rstrip(".")
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    if name == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(name)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def check_same_origin(url: str, base: str) -> Origin:
    """Refuse ``url`` (:class:`UnsafeURL`) unless it is free of hostile forms and connects to
    the same origin as ``base``, the URL the user configured. Returns the origin."""
    refuse_hostile(url)
    target = connection_origin(url)
    expected = connection_origin(base)
    if target != expected:
        raise UnsafeURL(f"it connects to {target}, another origin than {expected}")
    return target
