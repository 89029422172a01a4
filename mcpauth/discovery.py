"""Discovery: from an MCP server URL to its authorization server's metadata.

Written by hand (``docs/auth.md`` says so): RFC 9728 protected-resource discovery in the MCP
order with the resource check, the exact issuer comparison, the PKCE check and the
2025-03-26 fallback. authlib supplies only the RFC 8414 well-known URL construction
(``get_well_known_url``); its other discovery code is server-side.

Every fetch goes through :mod:`mcpauth._http`, so the https rule, redirects, timeouts and
the 1 MiB cap hold here too. Nothing is cached in this module: the provider caches.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

import requests
from authlib.oauth2.rfc8414 import get_well_known_url

from ._http import HttpPolicy, check_url, display_url, request
from ._urls import (
    UnsafeURL,
    connection_origin,
    connection_target,
    refuse_hostile,
    screen_reference,
)
from .errors import (
    AuthError,
    DiscoveryError,
    InsecureURL,
    IssuerMismatch,
    PKCENotSupported,
    ResourceMismatch,
)

__all__ = [
    "ResourceMetadata",
    "ServerMetadata",
    "authorization_server_metadata_urls",
    "canonical_resource",
    "discover_authorization_server",
    "discover_resource",
    "legacy_authorization_server",
    "require_pkce_s256",
    "resource_covers",
    "resource_metadata_urls",
    "same_identifier",
]

_log = logging.getLogger("mcpauth.discovery")
_STEP = "discovery"


@dataclass(frozen=True)
class ResourceMetadata:
    """A validated RFC 9728 protected-resource metadata document."""

    resource: str
    authorization_servers: tuple[str, ...]
    scopes_supported: tuple[str, ...] | None
    dpop_bound_access_tokens_required: bool
    url: str
    raw: Mapping[str, Any] = field(repr=False, compare=False)


@dataclass(frozen=True)
class ServerMetadata:
    """Validated authorization-server metadata (RFC 8414 or OpenID Connect Discovery).

    ``fallback`` is True only for the 2025-03-26 guess of ``/authorize``, ``/token`` and
    ``/register`` at the MCP server's origin, made when no metadata exists at all.
    """

    issuer: str
    authorization_endpoint: str | None
    token_endpoint: str
    registration_endpoint: str | None
    device_authorization_endpoint: str | None
    scopes_supported: tuple[str, ...] | None
    grant_types_supported: tuple[str, ...] | None
    token_endpoint_auth_methods_supported: tuple[str, ...] | None
    code_challenge_methods_supported: tuple[str, ...] | None
    dpop_signing_alg_values_supported: tuple[str, ...] | None
    authorization_response_iss_parameter_supported: bool
    client_id_metadata_document_supported: bool
    fallback: bool
    raw: Mapping[str, Any] = field(repr=False, compare=False)


def same_identifier(a: str, b: str) -> bool:
    """The package's one identifier comparison (metadata ``issuer``, RFC 9207 ``iss``):
    character for character, with no case, slash, port or percent-encoding tolerance,
    because any normalisation is a way for one server to pass as another."""
    return isinstance(a, str) and isinstance(b, str) and a == b


def _origin(url: str) -> str:
    """``scheme://host[:port]`` as the connection will use it (lower-case, IDNA host,
    default port dropped, no user info); ``""`` for a URL that cannot be used."""
    try:
        return str(connection_origin(url))
    except UnsafeURL:
        return ""


def canonical_resource(server_url: str) -> str:
    """The canonical server URI (RFC 8707 ``resource`` when there is no metadata).

    Lower-case scheme and host, default port dropped, user info and fragment dropped, no
    trailing slash on a non-root path; the root path is written ``/``.
    """
    parts = urlsplit(server_url)
    path = parts.path.rstrip("/") or "/"
    query = f"?{parts.query}" if parts.query else ""
    return _origin(server_url) + path + query


def resource_covers(resource: str, server_url: str) -> bool:
    """True when protected-resource metadata for ``resource`` may describe ``server_url``.

    Same origin (scheme, case-insensitive host, port with 443/80 defaults), and the resource
    path equals the server path or is a path-segment prefix of it: ``/mcp`` covers ``/mcp``
    and ``/mcp/x`` but not ``/mcpx``; an empty or ``/`` path covers everything.
    """
    try:
        refuse_hostile(resource)
        refuse_hostile(server_url)
        r_origin, rpath = connection_target(resource)
        s_origin, spath = connection_target(server_url)
    except UnsafeURL:
        return False
    if r_origin != s_origin:
        return False
    # Paths as the server will see them (dot segments resolved), so /mcp/../admin and
    # /mcp/%2e%2e/admin are /admin, outside /mcp.
    rpath, spath = rpath.rstrip("/"), spath.rstrip("/")
    return rpath == "" or spath == rpath or spath.startswith(rpath + "/")


def resource_metadata_urls(server_url: str, hint: str | None) -> list[str]:
    """Where to look for protected-resource metadata, in the MCP order (docs/auth.md,
    "What happens on the first 401"): the challenge's ``resource_metadata``, the path-inserted
    well-known URL (when the server path is not empty or ``/``), then the root well-known
    URL."""
    urls: list[str] = []
    if hint:
        urls.append(urljoin(server_url, hint))
    origin = _origin(server_url)
    path = urlsplit(server_url).path.rstrip("/")
    if path:
        urls.append(f"{origin}/.well-known/oauth-protected-resource{path}")
    urls.append(f"{origin}/.well-known/oauth-protected-resource")
    out: list[str] = []
    for url in urls:
        if url not in out:
            out.append(url)
    return out


def authorization_server_metadata_urls(issuer: str) -> list[str]:
    """The RFC 8414 / OpenID Connect well-known URLs for ``issuer``, in the MCP order.

    With a path (``https://a.example/tenant1``): OAuth path-inserted, OIDC path-inserted,
    OIDC path-appended. Without: OAuth, then OIDC. A terminating ``/`` of the path is
    removed first (RFC 8414 §3.1). The first two come from authlib.
    """
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")
    base = urlunsplit((parts.scheme, parts.netloc, path, "", ""))
    oauth = get_well_known_url(base, external=True)
    oidc = get_well_known_url(base, external=True, suffix="openid-configuration")
    if not path:
        return [oauth, oidc]
    return [oauth, oidc, f"{base}/.well-known/openid-configuration"]


def _str_tuple(value: Any) -> tuple[str, ...] | None:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return None


def _headers(protocol_version: str | None) -> dict[str, str]:
    return {"MCP-Protocol-Version": protocol_version} if protocol_version else {}


def _fetch_json(session: requests.Session, url: str, policy: HttpPolicy, *,
                what: str, headers: Mapping[str, str]) -> tuple[int, dict[str, Any] | None]:
    """GET ``url``; (status, JSON object or None). Network trouble is (0, None) and logged;
    InsecureURL (a redirect to somewhere unsafe) propagates."""
    try:
        resp = request(session, "GET", url, policy, step=_STEP, headers=headers, what=what)
    except InsecureURL:
        raise
    except AuthError as exc:
        _log.debug("discovery: %s", exc)
        return 0, None
    return resp.status, resp.json_object() if resp.status == 200 else None


def _resource_metadata(doc: Mapping[str, Any], url: str) -> ResourceMetadata | None:
    resource = doc.get("resource")
    servers = _str_tuple(doc.get("authorization_servers"))
    if not isinstance(resource, str) or not resource or not servers:
        return None
    return ResourceMetadata(
        resource=resource,
        authorization_servers=servers,
        scopes_supported=_str_tuple(doc.get("scopes_supported")),
        dpop_bound_access_tokens_required=doc.get("dpop_bound_access_tokens_required") is True,
        url=url,
        raw=dict(doc),
    )


def discover_resource(server_url: str, *, hint: str | None, session: requests.Session,
                      policy: HttpPolicy,
                      protocol_version: str | None = None) -> ResourceMetadata | None:
    """Fetch and validate the server's protected-resource metadata (RFC 9728).

    The first 200 with a valid JSON object wins; any other answer moves on to the next URL.
    Returns None when no URL gave metadata (the caller then tries the 2025-03-26 fallback).
    Raises :class:`ResourceMismatch` when the metadata found does not cover ``server_url``,
    and :class:`InsecureURL` when the challenge's URL breaks the https rule or when the only
    answers came through an unsafe redirect.
    """
    headers = _headers(protocol_version)
    insecure: InsecureURL | None = None
    if hint:  # before urljoin, which drops tab, CR and LF and would hide them
        screen_reference(hint, what="resource_metadata URL", step=_STEP,
                         shown=display_url(hint))
    for i, url in enumerate(resource_metadata_urls(server_url, hint)):
        what = "resource_metadata URL" if hint and i == 0 else "protected-resource metadata URL"
        try:
            check_url(url, policy, what=what, step=_STEP)
        except InsecureURL:
            raise
        except AuthError as exc:  # the host does not resolve: a network error, move on
            _log.debug("discovery: %s", exc)
            continue
        try:
            _status, doc = _fetch_json(session, url, policy, what=what, headers=headers)
        except InsecureURL as exc:
            insecure = insecure or exc
            continue
        meta = _resource_metadata(doc, url) if doc is not None else None
        if meta is None:
            continue
        if not resource_covers(meta.resource, server_url):
            raise ResourceMismatch(
                f"{_STEP}: the protected-resource metadata at {display_url(url)} is for "
                f"{meta.resource!r}, which does not cover the server URL "
                f"{display_url(server_url)}",
                resource=meta.resource, server_url=server_url, step=_STEP,
                url=display_url(url))
        return meta
    if insecure is not None:
        raise insecure
    return None


def _server_metadata(doc: Mapping[str, Any], *, fallback: bool = False) -> ServerMetadata | None:
    issuer = doc.get("issuer")
    token_endpoint = doc.get("token_endpoint")
    if not isinstance(issuer, str) or not isinstance(token_endpoint, str) or not token_endpoint:
        return None

    def opt_str(name: str) -> str | None:
        value = doc.get(name)
        return value if isinstance(value, str) and value else None

    return ServerMetadata(
        issuer=issuer,
        authorization_endpoint=opt_str("authorization_endpoint"),
        token_endpoint=token_endpoint,
        registration_endpoint=opt_str("registration_endpoint"),
        device_authorization_endpoint=opt_str("device_authorization_endpoint"),
        scopes_supported=_str_tuple(doc.get("scopes_supported")),
        grant_types_supported=_str_tuple(doc.get("grant_types_supported")),
        token_endpoint_auth_methods_supported=_str_tuple(
            doc.get("token_endpoint_auth_methods_supported")),
        code_challenge_methods_supported=_str_tuple(doc.get("code_challenge_methods_supported")),
        dpop_signing_alg_values_supported=_str_tuple(
            doc.get("dpop_signing_alg_values_supported")),
        authorization_response_iss_parameter_supported=doc.get(
            "authorization_response_iss_parameter_supported") is True,
        client_id_metadata_document_supported=doc.get(
            "client_id_metadata_document_supported") is True,
        fallback=fallback,
        raw=dict(doc),
    )


def _check_endpoints(meta: ServerMetadata, policy: HttpPolicy) -> None:
    """Every endpoint the metadata names must pass the https rule (docs/auth.md, "Safety rules")."""
    for what, url in (("authorization endpoint", meta.authorization_endpoint),
                      ("token endpoint", meta.token_endpoint),
                      ("registration endpoint", meta.registration_endpoint),
                      ("device authorization endpoint", meta.device_authorization_endpoint)):
        if url is not None:
            check_url(url, policy, what=f"{what} of {meta.issuer}", step=_STEP)


def discover_authorization_server(issuer: str, *, session: requests.Session,
                                  policy: HttpPolicy,
                                  protocol_version: str | None = None,
                                  metadata_url: str | None = None) -> ServerMetadata:
    """Fetch the metadata of ``issuer``, trying the well-known URLs in order.

    A document whose ``issuer`` is not exactly ``issuer`` is not used; the next URL is
    tried. With none valid, :class:`IssuerMismatch` when a mismatch was seen (naming both
    issuers), else :class:`DiscoveryError`. Endpoints must pass the https rule.
    ``metadata_url`` (configured by the user) replaces the well-known URLs.
    """
    check_url(issuer, policy, what="authorization server issuer", step=_STEP)
    headers = _headers(protocol_version)
    if metadata_url is not None:
        check_url(metadata_url, policy, what="authorization server metadata URL", step=_STEP)
        urls = [metadata_url]
    else:
        urls = authorization_server_metadata_urls(issuer)
    mismatch: str | None = None
    insecure: InsecureURL | None = None
    for url in urls:
        try:
            _status, doc = _fetch_json(session, url, policy,
                                       what="authorization server metadata URL",
                                       headers=headers)
        except InsecureURL as exc:
            insecure = insecure or exc
            continue
        meta = _server_metadata(doc) if doc is not None else None
        if meta is None:
            continue
        if not same_identifier(meta.issuer, issuer):
            _log.debug("discovery: %s names issuer %r, expected %r", url, meta.issuer, issuer)
            mismatch = mismatch if mismatch is not None else meta.issuer
            continue
        _check_endpoints(meta, policy)
        return meta
    if mismatch is not None:
        raise IssuerMismatch(
            f"{_STEP}: the authorization server metadata for {issuer} names the issuer "
            f"{mismatch!r}; it must be exactly {issuer!r}, so it was not used",
            expected=issuer, actual=mismatch, step=_STEP, url=issuer)
    if insecure is not None:
        raise insecure
    raise DiscoveryError(
        f"{_STEP}: no usable authorization server metadata for {issuer} (tried "
        f"{', '.join(urls)})", step=_STEP, url=issuer)


def authorization_server_at(metadata_url: str, *, session: requests.Session,
                            policy: HttpPolicy,
                            protocol_version: str | None = None) -> ServerMetadata:
    """The metadata document at a URL the user configured, for a server without
    protected-resource metadata: its ``issuer`` is taken as given (the user vouched for the
    URL), its endpoints must still pass the https rule."""
    check_url(metadata_url, policy, what="authorization server metadata URL", step=_STEP)
    status, doc = _fetch_json(session, metadata_url, policy,
                              what="authorization server metadata URL",
                              headers=_headers(protocol_version))
    meta = _server_metadata(doc) if doc is not None else None
    if meta is None:
        raise DiscoveryError(
            f"{_STEP}: no usable authorization server metadata at {display_url(metadata_url)} "
            f"({'HTTP ' + str(status) if status else 'no answer'})", step=_STEP,
            url=display_url(metadata_url))
    _check_endpoints(meta, policy)
    return meta


def legacy_authorization_server(server_url: str, *, session: requests.Session,
                                policy: HttpPolicy,
                                protocol_version: str | None = None) -> ServerMetadata:
    """The 2025-03-26 way, used when no protected-resource metadata exists.

    The authorization server is the MCP server's origin; its metadata is at
    ``{origin}/.well-known/oauth-authorization-server`` (``issuer`` must be the origin).
    On a 404 there, the endpoints are guessed as ``{origin}/authorize``, ``/token`` and
    ``/register`` (``fallback=True``, the one case that skips the PKCE check).
    """
    origin = _origin(server_url)
    check_url(origin, policy, what="MCP server origin", step=_STEP)
    url = f"{origin}/.well-known/oauth-authorization-server"
    status, doc = _fetch_json(session, url, policy,
                              what="authorization server metadata URL",
                              headers=_headers(protocol_version))
    if status == 404:
        return ServerMetadata(
            issuer=origin, authorization_endpoint=f"{origin}/authorize",
            token_endpoint=f"{origin}/token", registration_endpoint=f"{origin}/register",
            device_authorization_endpoint=None, scopes_supported=None,
            grant_types_supported=None, token_endpoint_auth_methods_supported=None,
            code_challenge_methods_supported=None, dpop_signing_alg_values_supported=None,
            authorization_response_iss_parameter_supported=False,
            client_id_metadata_document_supported=False, fallback=True, raw={})
    meta = _server_metadata(doc) if doc is not None else None
    if meta is None:
        raise DiscoveryError(
            f"{_STEP}: no protected-resource metadata for {display_url(server_url)} and "
            f"no usable authorization server metadata at {url} "
            f"({'HTTP ' + str(status) if status else 'no answer'})", step=_STEP, url=url)
    if not same_identifier(meta.issuer, origin):
        raise IssuerMismatch(
            f"{_STEP}: the authorization server metadata at {url} names the issuer "
            f"{meta.issuer!r}; it must be exactly {origin!r}, so it was not used",
            expected=origin, actual=meta.issuer, step=_STEP, url=origin)
    _check_endpoints(meta, policy)
    return meta


def require_pkce_s256(meta: ServerMetadata) -> None:
    """Refuse an authorization server that does not advertise PKCE ``S256``.

    Absent ``code_challenge_methods_supported`` counts as unsupported (MCP 2025-11-25);
    only the metadata-less 2025-03-26 fallback is exempt, and it still uses S256.
    """
    if meta.fallback:
        return
    methods = meta.code_challenge_methods_supported
    if methods is None or "S256" not in methods:
        listed = "absent" if methods is None else f"{list(methods)!r}"
        raise PKCENotSupported(
            f"{_STEP}: the authorization server {meta.issuer} does not advertise PKCE S256 "
            f"(code_challenge_methods_supported is {listed}); refusing to proceed",
            step=_STEP, url=meta.issuer)
