"""OAuth bearer protection in front of the MCP endpoint: RFC 6750 challenges, RFC 9728
metadata, and the audience and expiry checks that no verifier can skip.

:class:`ProtectedApp` is a small WSGI layer around :class:`~mcpsync.server.http.McpApp`, not
a change to it, so the endpoint itself stays one thing (the protocol) and this one another
(who may use it). Every request to the MCP path must carry ``Authorization: Bearer <token>``;
the token goes to the :data:`TokenVerifier`, and what it returns is checked again here:

- a token whose audience does not name this server's resource is refused (401), so a token
  issued for another server (RFC 8707) cannot be replayed here even when the verifier only
  asks "is this token valid somewhere?";
- an expired one is refused (401), whatever the verifier's cache believed;
- one without every required scope is 403 ``insufficient_scope``.

The protected-resource metadata (RFC 9728) is served at
``/.well-known/oauth-protected-resource<path>`` and at the root form, without a token, so a
client that got the 401 can find the authorization server. The ``Authorization`` header is
removed from the environ before the request reaches the endpoint: nothing behind this layer
can forward the token. A legacy session belongs to the client and user whose token opened
it; another token naming its ``Mcp-Session-Id`` gets 404, as for an unknown session. The
verified :class:`AccessToken` is published in a context variable for the WSGI thread that
runs the handler (:func:`current_access_token`).
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

from mcpsync.server.http._app import McpApp
from mcpsync.server.http._headers import HostCheck

__all__ = ["AccessToken", "ProtectedApp", "TokenVerifier", "current_access_token",
           "same_resource"]

log = logging.getLogger("mcpsync.server.http.auth")

StartResponse = Callable[..., Callable[[bytes], None]]

WELL_KNOWN = "/.well-known/oauth-protected-resource"
_MAX_OWNERS = 4096   # legacy sessions whose owner is remembered (the oldest forgotten first)

_CURRENT: contextvars.ContextVar[AccessToken | None] = contextvars.ContextVar(
    "mcpsync_access_token", default=None)


@dataclass(frozen=True)
class AccessToken:
    """What a verifier learned about a valid token; never the token itself.

    ``audience`` holds the resources (RFC 8707; the ``aud`` of RFC 7662 / JWT) the token was
    issued for; this server accepts it only when its own resource is among them.
    ``expires_at`` is a POSIX timestamp (``None``: the authorization server set no expiry).
    ``subject`` is the user the token acts for (``None`` for a client acting for itself).
    """

    client_id: str
    scopes: frozenset[str] = frozenset()
    expires_at: float | None = None
    subject: str | None = None
    audience: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def expired(self, now: float | None = None) -> bool:
        """True once ``expires_at`` has passed."""
        return self.expires_at is not None and (time.time() if now is None else now) >= \
            self.expires_at


class TokenVerifier(Protocol):
    """Checks a bearer token: an :class:`AccessToken` for a valid one, ``None`` for any other.

    It may raise for "cannot tell right now" (its authorization server is down): the request
    is then answered 503, not 401, so the client retries instead of logging in again. It need
    not check the audience, the expiry or the scopes (the app does), but may.
    """

    def __call__(self, token: str, /) -> AccessToken | None: ...


def current_access_token() -> AccessToken | None:
    """The verified token of the request being handled on this thread (``None`` outside a
    protected request). A tool learns who called: ``current_access_token().subject``."""
    return _CURRENT.get()


def _canonical(url: str) -> tuple[str, str, str]:
    """``(scheme, host[:port], path)`` with case and default ports normalised."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    port = parts.port
    if port is not None and (scheme, port) not in (("http", 80), ("https", 443)):
        host = f"{host}:{port}"
    return scheme, host, parts.path.rstrip("/")


def same_resource(a: str, b: str) -> bool:
    """Whether two resource URIs name the same resource (scheme and host case, default ports
    and a trailing slash aside; the path compared exactly)."""
    try:
        return _canonical(a) == _canonical(b)
    except ValueError:
        return False


def _check_resource(resource: str) -> str:
    try:
        parts = urlsplit(resource)
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError as exc:
        raise ValueError(f"resource {resource!r} is not a URL: {exc}") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.fragment:
        raise ValueError(f"resource must be the absolute http(s) URL of the MCP endpoint "
                         f"without a fragment, such as https://mcp.example.com/mcp; got "
                         f"{resource!r}")
    return resource


def _quote(value: str) -> str:
    """A quoted-string of an auth-param (RFC 9110): backslash and quote escaped."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


class ProtectedApp:
    """The MCP endpoint behind OAuth bearer tokens: what ``Server.wsgi_app(token_verifier=)``
    returns. It keeps the wrapped app's ``path``, ``name`` and ``close()``, and passes its
    responses (streams written with ``write()`` included) through untouched.

    ``resource`` is the endpoint's canonical URL, the audience tokens must name; ``None``
    derives it from each request's scheme, ``Host`` and the path, which is right when
    clients reach the server directly and wrong behind a proxy that changes any of them.
    """

    def __init__(self, app: McpApp, verifier: TokenVerifier, *, resource: str | None = None,
                 authorization_servers: Sequence[str] = (), scopes: Sequence[str] = (),
                 allowed_hosts: Iterable[str] | None = None,
                 session_owner: Callable[[str], tuple[str, str | None] | None] | None = None,
                 ) -> None:
        if not callable(verifier):
            raise ValueError(f"token_verifier must be callable as verifier(token) -> "
                             f"AccessToken | None, got {verifier!r}")
        if isinstance(authorization_servers, str) or isinstance(scopes, str):
            raise ValueError("authorization_servers and scopes take lists of strings")
        for issuer in authorization_servers:
            _check_resource(issuer)
        self.app = app
        self.path = app.path
        self.name = app.name
        self.resource = None if resource is None else _check_resource(resource)
        self.authorization_servers = tuple(authorization_servers)
        self.scopes = tuple(scopes)
        self._verify = verifier
        # who opened a session this process never saw (one sealed by another replica)
        self._session_owner = session_owner
        self._hosts = HostCheck(allowed_hosts)
        if self.resource is None and "*" in self._hosts.entries:
            raise ValueError(f"MCP server {app.name!r}: with allowed_hosts=['*'] the resource "
                             "cannot be derived from the Host header (a client would choose "
                             "the audience its token is checked against); pass resource= "
                             "with the endpoint's public URL")
        self._lock = threading.Lock()
        self._owners: OrderedDict[bytes, tuple[str, str | None]] = OrderedDict()
        suffix = "" if self.path == "/" else self.path.rstrip("/")
        self._metadata_paths = frozenset({WELL_KNOWN + suffix, WELL_KNOWN})
        # Each open legacy session has its owner here: room for every session the endpoint
        # can hold, so none is ever forgotten while open.
        self._max_owners = max(_MAX_OWNERS, 2 * getattr(app, "_max_sessions", 0))

    def __repr__(self) -> str:
        return f"<ProtectedApp {self.name!r} {self.path!r}>"

    def close(self) -> None:
        """Close the wrapped endpoint (its sessions and streams)."""
        self.app.close()

    # -- the resource and its metadata -------------------------------------------------------

    def _resource_for(self, environ: dict[str, Any]) -> str | None:
        """This endpoint's resource URL: ``resource=``, or derived from the request. A derived
        one is trusted only when the ``Host`` names the port this server listens on: else a
        client could name another server's address (``Host: localhost:9999``) and have a
        token issued for that server accepted here. ``None``: it cannot be derived."""
        if self.resource is not None:
            return self.resource
        scheme = str(environ.get("wsgi.url_scheme") or "http")
        host = str(environ.get("HTTP_HOST") or "")
        served = str(environ.get("SERVER_PORT") or "")
        port = _port_of(host, scheme)
        if not host or port is None or port != served:
            return None
        return urlunsplit((scheme, host, self.path, "", ""))

    def _metadata_url(self, resource: str) -> str:
        parts = urlsplit(resource)
        path = parts.path.rstrip("/")
        return urlunsplit((parts.scheme, parts.netloc, WELL_KNOWN + path, "", ""))

    def metadata(self, resource: str) -> dict[str, Any]:
        """The RFC 9728 document for ``resource``."""
        doc: dict[str, Any] = {"resource": resource,
                               "authorization_servers": list(self.authorization_servers),
                               "bearer_methods_supported": ["header"]}
        if self.scopes:
            doc["scopes_supported"] = list(self.scopes)
        return doc

    # -- WSGI --------------------------------------------------------------------------------

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        # Guard exactly what the endpoint would answer (its own path rule, mounted or not,
        # trailing slash included), so no spelling of the path reaches it without a token.
        full = str(environ.get("SCRIPT_NAME", "")) + str(environ.get("PATH_INFO", ""))
        metadata = full.rstrip("/") in self._metadata_paths
        if not metadata and not self.app.serves(environ):
            return self.app(_without_credentials(environ), start_response)   # its 404
        refused = self.app.screen(environ, start_response)   # Host / Origin, before all else
        if refused is not None:
            return refused
        resource = self._resource_for(environ)
        if resource is None:
            return _json(start_response, "400 Bad Request", {
                "error": "invalid_request",
                "error_description": f"MCP server {self.name!r}: cannot tell this server's "
                                     f"resource URL from Host {environ.get('HTTP_HOST')!r} "
                                     "(it names another port than the one served); connect "
                                     "by the server's own address, or start it with "
                                     "resource= naming its public URL"})
        if metadata:
            if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
                return _json(start_response, "405 Method Not Allowed", {
                    "error": "invalid_request",
                    "error_description": "the protected-resource metadata answers GET only"},
                    [("Allow", "GET")])
            return _json(start_response, "200 OK", self.metadata(resource),
                         [("Cache-Control", "max-age=300")])
        verdict = self._authenticate(environ, resource)
        if isinstance(verdict, _Refusal):
            return verdict.send(start_response, self._metadata_url(resource), self.scopes)
        sid = environ.get("HTTP_MCP_SESSION_ID")
        principal = (verdict.client_id, verdict.subject)
        if sid is not None and not self._session_of(str(sid), principal):
            return _json(start_response, "404 Not Found", {
                "error": "invalid_request",
                "error_description": f"MCP server {self.name!r}: unknown session for this "
                                     "token; start a new one with initialize"})
        reset = _CURRENT.set(verdict)
        try:
            return self.app(_without_credentials(environ),
                            self._binding(start_response, principal, environ))
        finally:
            _CURRENT.reset(reset)

    def _session_of(self, sid: str, principal: tuple[str, str | None]) -> bool:
        """Whether the token's principal may use legacy session ``sid``: a session belongs to
        whoever opened it, so a session id that leaked is no use with another token."""
        key = hashlib.sha256(sid.encode()).digest()
        with self._lock:
            owner = self._owners.get(key)
        if owner is None and self._session_owner is not None:
            owner = self._session_owner(sid)   # opened elsewhere, its owner sealed in its id
            if owner is not None:
                with self._lock:
                    self._owners[key] = owner
                    while len(self._owners) > self._max_owners:
                        self._owners.popitem(last=False)
        # Unknown: never opened through this layer, or ended (the endpoint answers 404 then
        # anyway). Refused either way: a session is usable only by the token that opened it.
        return owner == principal

    def _binding(self, start_response: StartResponse, principal: tuple[str, str | None],
                 environ: dict[str, Any]) -> StartResponse:
        """``start_response`` noting which principal a new session (or its end) belongs to."""
        sid = environ.get("HTTP_MCP_SESSION_ID")
        deleting = environ.get("REQUEST_METHOD") == "DELETE" and sid is not None

        def start(status: str, headers: list[tuple[str, str]], *rest: Any) -> Any:
            opened = next((v for k, v in headers if k.lower() == "mcp-session-id"), None)
            with self._lock:
                if opened is not None:
                    self._owners[hashlib.sha256(opened.encode()).digest()] = principal
                    while len(self._owners) > self._max_owners:
                        self._owners.popitem(last=False)
                elif sid is not None and (status.startswith("404") or
                                          (deleting and status.startswith("204"))):
                    # Ended (DELETE) or gone (expired, closed): forget its owner.
                    self._owners.pop(hashlib.sha256(str(sid).encode()).digest(), None)
            return start_response(status, headers, *rest)

        return start

    def _authenticate(self, environ: dict[str, Any], resource: str) -> AccessToken | _Refusal:
        header = str(environ.get("HTTP_AUTHORIZATION") or "")
        scheme, _, token = header.strip().partition(" ")
        if scheme.lower() != "bearer":
            return _Refusal(401, None, f"MCP server {self.name!r} requires an OAuth access "
                            "token: send Authorization: Bearer <token> (the authorization "
                            "server is named in the protected-resource metadata)")
        token = token.strip()
        if not token or any(c.isspace() for c in token):
            return _Refusal(400, "invalid_request", f"MCP server {self.name!r}: the "
                            "Authorization header is not 'Bearer <token>'")
        try:
            verified = self._verify(token)
        except Exception as exc:
            # The verifier's text may quote what it was given: never log or send the token.
            reason = str(exc).replace(token, "[token]")
            log.warning("MCP server %r: the token verifier failed (%s: %s)", self.name,
                        type(exc).__name__, reason)
            return _Refusal(503, None, f"MCP server {self.name!r} cannot check access tokens "
                            "right now; retry later")
        if verified is None:
            return self._invalid("the access token is not valid (unknown, revoked or "
                                 "expired); obtain a new one")
        if not isinstance(verified, AccessToken):
            log.warning("MCP server %r: the token verifier returned %s, not an AccessToken",
                        self.name, type(verified).__name__)
            return _Refusal(503, None, f"MCP server {self.name!r} cannot check access tokens "
                            "right now; retry later")
        if verified.expired():
            return self._invalid("the access token has expired; obtain a new one")
        if not any(same_resource(aud, resource) for aud in verified.audience):
            log.info("MCP server %r: refused a token of client %r issued for %r, not %r",
                     self.name, verified.client_id, list(verified.audience), resource)
            return self._invalid(f"the access token was not issued for {resource} (RFC 8707 "
                                 "resource); request one with resource=" + resource)
        missing = [s for s in self.scopes if s not in verified.scopes]
        if missing:
            return _Refusal(403, "insufficient_scope", f"MCP server {self.name!r}: the access "
                            f"token lacks the scope {' '.join(missing)}")
        return verified

    def _invalid(self, why: str) -> _Refusal:
        return _Refusal(401, "invalid_token", f"MCP server {self.name!r}: {why}")


@dataclass(frozen=True)
class _Refusal:
    """A 400/401/403/503 with its RFC 6750 challenge."""

    status: int
    error: str | None
    description: str

    def send(self, start_response: StartResponse, metadata_url: str,
             scopes: Sequence[str]) -> list[bytes]:
        params = [f"resource_metadata={_quote(metadata_url)}"]
        if self.error is not None:
            params.append(f"error={_quote(self.error)}")
        if scopes and self.status in (401, 403):
            params.append(f"scope={_quote(' '.join(scopes))}")
        headers = [("WWW-Authenticate", "Bearer " + ", ".join(params))] \
            if self.status in (400, 401, 403) else [("Retry-After", "5")]
        body = {"error": self.error or ("temporarily_unavailable" if self.status == 503
                                        else "invalid_token"),
                "error_description": self.description}
        if self.status == 401 and self.error is None:
            body["error"] = "unauthorized"
        return _json(start_response, _STATUS[self.status], body,
                     [*headers, ("Cache-Control", "no-store")])


_STATUS = {400: "400 Bad Request", 401: "401 Unauthorized", 403: "403 Forbidden",
           503: "503 Service Unavailable"}


def _port_of(host: str, scheme: str) -> str | None:
    """The port a ``Host`` value names (the scheme's default when it names none); ``None``
    when the value is not ``name[:port]`` (IPv6 literals in brackets)."""
    if host.startswith("["):
        end = host.find("]")
        if end < 0:
            return None
        rest = host[end + 1:]
    else:
        _, sep, port = host.partition(":")
        rest = sep + port
    if not rest:
        return "443" if scheme == "https" else "80"
    return rest[1:] if rest.startswith(":") and rest[1:].isdigit() else None


def _without_credentials(environ: dict[str, Any]) -> dict[str, Any]:
    """The environ minus ``Authorization``: the endpoint and its handlers never see a token."""
    if "HTTP_AUTHORIZATION" not in environ:
        return environ
    return {k: v for k, v in environ.items() if k != "HTTP_AUTHORIZATION"}


def _json(start_response: StartResponse, status: str, doc: dict[str, Any],
          headers: Iterable[tuple[str, str]] = ()) -> list[bytes]:
    body = json.dumps(doc).encode()
    start_response(status, [("Content-Type", "application/json"),
                            ("Content-Length", str(len(body))), *headers])
    return [body]
