"""The one door through which mcpauth talks to the network.

Every metadata, registration and token request goes through :func:`request`, so the rules of
docs/auth.md, "Safety rules", live in one place: 10 s connect / 30 s read timeouts, a 1 MiB cap
on what is read, the https rule (loopback excepted, or ``allow_insecure_http``), the optional
refusal of private networks, at most 5 redirect hops for a GET (each re-checked, never https to
http, credentials dropped on a cross-origin hop) and none for a POST.

We follow redirects ourselves (``allow_redirects=False``) because requests' own redirect
handling would re-send headers such as ``DPoP`` to another origin and would not re-check the
https rule per hop.

Known limit: ``block_private_networks`` resolves the host name before connecting; a DNS
answer that changes between that check and the connection (DNS rebinding) is not caught.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

import requests
from requests.structures import CaseInsensitiveDict

from ._urls import Origin, connection_origin, screen, screen_reference
from .errors import AuthError, InsecureURL

__all__ = ["HttpPolicy", "HttpResponse", "check_url", "is_loopback_host", "request"]

MAX_REDIRECTS = 5
"""Hops a metadata GET may follow, each one re-checked."""

_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_CREDENTIAL_HEADERS = ("authorization", "proxy-authorization", "dpop", "cookie")
_CHUNK = 16384


@dataclass(frozen=True)
class HttpPolicy:
    """How careful mcpauth is with the network; one per provider.

    ``allow_insecure_http`` lifts the https rule for every host (tests, private labs);
    ``block_private_networks`` (for clients running on servers) refuses hosts that resolve
    to private, loopback or link-local addresses, so metadata cannot point us at internal
    services.
    """

    allow_insecure_http: bool = False
    block_private_networks: bool = False
    connect_timeout: float = 10.0
    read_timeout: float = 30.0
    max_bytes: int = 1 << 20


def is_loopback_host(host: str) -> bool:
    """True for ``localhost``, ``127.0.0.0/8`` and ``::1`` (brackets allowed).

    Only these names are exempt from the https rule: traffic to them never leaves the machine.
    """
    h = host.strip().lower().rstrip(".")
    if h.startswith("[") and h.endswith("]"):
        h = h[1:-1]
    if h == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(h)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def display_url(url: str) -> str:
    """The URL as shown in messages: no user info, query or fragment.

    None of the URLs mcpauth fetches should carry secrets, but a misconfigured one might
    hold them in the user info or query, and messages must never show a secret.
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<invalid URL>"
    _, at, host = parts.netloc.rpartition("@")
    netloc = f"***@{host}" if at else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _blocked_address(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return (ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_unspecified
            or ip.is_reserved or ip.is_multicast or not ip.is_global)


def _check_private(host: str, port: int | None, *, what: str, url: str, step: str) -> None:
    """Refuse a host any of whose addresses is not a public unicast address."""
    try:
        infos = socket.getaddrinfo(host, port or 443, proto=socket.IPPROTO_TCP)
    except OSError as exc:
        raise AuthError(f"{step}: cannot resolve the host of {what} {display_url(url)}",
                        step=step, url=display_url(url)) from exc
    for info in infos:
        address = str(info[4][0]).split("%", 1)[0]
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            continue
        if _blocked_address(ip):
            raise InsecureURL(
                f"{step}: {what} {display_url(url)} resolves to the non-public address "
                f"{address}, refused because block_private_networks is on",
                step=step, url=display_url(url))


def check_url(url: str, policy: HttpPolicy, *, what: str, step: str) -> Origin:
    """Raise :class:`InsecureURL` unless ``url`` may be fetched under ``policy``; return the
    origin the connection will use.

    First the hostile forms are refused and the origin is read as urllib3 will read it
    (:func:`mcpauth._urls.screen`); the rules below judge that origin, never another
    parser's opinion. An https URL passes; an http URL passes only for a loopback host or
    with ``allow_insecure_http``; anything else (other schemes, no host) fails. With
    ``block_private_networks`` the host is resolved and every address must be public.
    """
    shown = display_url(url)
    origin = screen(url, what=what, step=step, shown=shown)
    if origin.scheme == "http" and not (policy.allow_insecure_http
                                        or is_loopback_host(origin.host)):
        raise InsecureURL(
            f"{step}: {what} {shown} must be https (loopback excepted); pass "
            "allow_insecure_http=True only for a test or a trusted network",
            step=step, url=shown)
    if policy.block_private_networks:
        _check_private(origin.bare_host, origin.port, what=what, url=url, step=step)
    return origin


@dataclass(frozen=True)
class HttpResponse:
    """A fully read, size-capped response; ``url`` is the final URL after redirects."""

    status: int
    headers: Mapping[str, str] = field(repr=False)
    body: bytes = field(repr=False)
    url: str

    def json_object(self) -> dict[str, Any] | None:
        """The body as a JSON object, or None when it is not one (bad JSON, a list, ...)."""
        try:
            value = json.loads(self.body)
        except (ValueError, UnicodeDecodeError):
            return None
        return value if isinstance(value, dict) else None


def _network_reason(exc: requests.RequestException, policy: HttpPolicy) -> str:
    """A short reason for a network failure, built without the exception text (which may
    quote a request) but with the OS error, which is what a user needs to act."""
    if isinstance(exc, requests.ConnectTimeout):
        return f"no connection within {policy.connect_timeout:g} s"
    if isinstance(exc, requests.ReadTimeout):
        return f"no answer within {policy.read_timeout:g} s"
    if isinstance(exc, requests.exceptions.SSLError):
        return "TLS error (certificate or handshake)"
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        cur = todo.pop()
        if id(cur) in seen:
            continue
        seen.add(id(cur))
        if isinstance(cur, OSError) and cur.strerror:
            return f"{type(exc).__name__}: {cur.strerror}"
        todo.extend(a for a in cur.args if isinstance(a, BaseException))
        for nxt in (cur.__cause__, cur.__context__, getattr(cur, "reason", None)):
            if isinstance(nxt, BaseException):
                todo.append(nxt)
    return type(exc).__name__


def _read_capped(resp: requests.Response, policy: HttpPolicy, *, step: str, url: str) -> bytes:
    """Read at most ``policy.max_bytes`` of the (decoded) body, within a total read deadline."""
    shown = display_url(url)
    declared = resp.headers.get("Content-Length")
    if declared is not None and declared.strip().isdigit() and int(declared) > policy.max_bytes:
        raise AuthError(f"{step}: the response of {shown} is larger than "
                        f"{policy.max_bytes} bytes ({declared} declared)", step=step, url=shown)
    deadline = time.monotonic() + policy.read_timeout
    chunks: list[bytes] = []
    total = 0
    for chunk in resp.iter_content(_CHUNK):
        total += len(chunk)
        if total > policy.max_bytes:
            raise AuthError(f"{step}: the response of {shown} is larger than "
                            f"{policy.max_bytes} bytes", step=step, url=shown)
        if time.monotonic() > deadline:
            raise AuthError(f"{step}: the response of {shown} took longer than "
                            f"{policy.read_timeout:g} s to read", step=step, url=shown)
        chunks.append(chunk)
    return b"".join(chunks)


def request(session: requests.Session, method: str, url: str, policy: HttpPolicy, *,
            step: str, headers: Mapping[str, str] | None = None,
            data: Mapping[str, str] | None = None,
            json_body: Any = None,
            auth: Any = None,
            what: str = "URL") -> HttpResponse:
    """Send one request under ``policy`` and return the whole (capped) response.

    A GET follows at most :data:`MAX_REDIRECTS` hops, each checked with :func:`check_url`;
    an https-to-http hop is refused even with ``allow_insecure_http``; a cross-origin hop
    drops ``Authorization``, ``DPoP``, ``Cookie`` and ``auth``. Any other method treats a
    3xx as an error (a redirected POST would re-send credentials). A status is never an
    error here: callers read it. ``what`` names the URL in messages ("token endpoint").
    """
    method = method.upper()
    check_url(url, policy, what=what, step=step)
    hdrs: CaseInsensitiveDict[str] = CaseInsensitiveDict()
    hdrs["Accept"] = "application/json"
    hdrs.update(headers or {})
    current, hops = url, 0
    while True:
        shown = display_url(current)
        try:
            resp = session.request(method, current, headers=dict(hdrs), data=data,
                                   json=json_body, auth=auth, allow_redirects=False,
                                   stream=True,
                                   timeout=(policy.connect_timeout, policy.read_timeout))
        except requests.RequestException as exc:
            raise AuthError(f"{step}: request to {shown} failed: "
                            f"{_network_reason(exc, policy)}", step=step, url=shown) from exc
        except (ValueError, UnicodeError) as exc:
            # requests reads a redirect's Location even with allow_redirects=False (for
            # Response.next) and raises ValueError on one it cannot parse.
            raise InsecureURL(f"{step}: the reply of {shown} could not be parsed "
                              f"({type(exc).__name__}); nothing more was sent",
                              step=step, url=shown) from None
        try:
            if resp.status_code in _REDIRECT_STATUSES and "Location" in resp.headers:
                location = resp.headers["Location"].strip(" \t")
                target = urljoin(current, location)
                if method != "GET":
                    raise AuthError(f"{step}: {method} to {shown} answered a redirect "
                                    f"({resp.status_code}); mcpauth never follows redirects "
                                    "of a POST", step=step, url=shown)
                hops += 1
                if hops > MAX_REDIRECTS:
                    raise AuthError(f"{step}: more than {MAX_REDIRECTS} redirects starting "
                                    f"at {display_url(url)}", step=step, url=display_url(url))
                # The raw header too: urljoin drops tab, CR and LF and would hide them.
                screen_reference(location, what="redirect target", step=step,
                                 shown=display_url(target))
                here = connection_origin(current)
                there = check_url(target, policy, what="redirect target", step=step)
                if here.scheme == "https" and there.scheme != "https":
                    raise InsecureURL(f"{step}: {shown} redirects from https to "
                                      f"{display_url(target)}; refused", step=step, url=shown)
                if there != here:
                    for name in _CREDENTIAL_HEADERS:
                        hdrs.pop(name, None)
                    auth = None
                current = target
                continue
            try:
                body = _read_capped(resp, policy, step=step, url=current)
            except requests.RequestException as exc:
                raise AuthError(f"{step}: reading the response of {shown} failed: "
                                f"{_network_reason(exc, policy)}", step=step,
                                url=shown) from exc
            return HttpResponse(status=resp.status_code,
                                headers=CaseInsensitiveDict(resp.headers),
                                body=body, url=current)
        finally:
            resp.close()
