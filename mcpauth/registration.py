"""Client registration: which ``client_id`` we use at an authorization server, and how we
authenticate at its token endpoint.

Written by hand (authlib's RFC 7591 code is server-side). The order is that of docs/auth.md,
"What happens on the first 401": pre-registered credentials, then a client-ID metadata document
(CIMD) when the caller hosts one and the server supports it, then dynamic registration (RFC
7591), else an error asking the user to configure a ``client_id``.

Registrations are keyed by issuer (MCP 2026-07-28): a registration made at one
authorization server is never used at another. Storing them is the provider's job; this
module only says whether a stored one can be reused.

Grant types: a registration asks for the grants the client will use (RFC 7591 §2), not always
``authorization_code``: a device login registers for the device-code grant, because a strict
server (authlib's ``ClientMixin.check_grant_type``, for one) refuses a grant the client did
not register. So the browser grants are only the default.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import requests

from ._http import HttpPolicy, display_url, is_loopback_host, request
from ._urls import screen
from .discovery import ServerMetadata, same_identifier
from .errors import InsecureURL, RegistrationError, TokenStoreError

__all__ = [
    "BROWSER_GRANT_TYPES",
    "DEVICE_GRANT_TYPES",
    "GRANT_DEVICE_CODE",
    "ClientRegistration",
    "application_type_for",
    "choose_registration",
    "client_metadata_document",
    "dcr_auth_method",
    "preregistered_auth_method",
    "register",
]

_STEP = "registration"
AUTH_METHODS = ("none", "client_secret_basic", "client_secret_post", "private_key_jwt")
_SECRET_METHODS = ("client_secret_basic", "client_secret_post")
GRANT_DEVICE_CODE = "urn:ietf:params:oauth:grant-type:device_code"
# What a registration asks for: the browser login, or the device code (RFC 8628).
BROWSER_GRANT_TYPES = ("authorization_code", "refresh_token")
DEVICE_GRANT_TYPES = (GRANT_DEVICE_CODE, "refresh_token")
_DEFAULT_GRANTS = BROWSER_GRANT_TYPES
# RFC 7591 §2: a registration that names no grant types is for authorization_code only (and
# registrations stored before grant types were recorded were made for the browser login).
_UNNAMED_GRANTS = ("authorization_code",)
_MAX_SERVER_TEXT = 300


@dataclass(frozen=True, repr=False)
class ClientRegistration:
    """A client identity at one authorization server (``issuer``).

    ``source`` says where it came from: ``"preregistered"`` (the caller's credentials),
    ``"cimd"`` (our client-ID metadata document URL) or ``"dynamic"`` (RFC 7591). The
    ``repr`` masks ``client_secret`` and ``private_key``.
    """

    client_id: str
    token_endpoint_auth_method: str
    client_secret: str | None = None
    private_key: str | None = None
    signing_alg: str = "ES256"
    redirect_uris: tuple[str, ...] = ()
    client_secret_expires_at: float | None = None
    issuer: str = ""
    source: str = "preregistered"
    grant_types: tuple[str, ...] = ()

    def __repr__(self) -> str:
        secret = None if self.client_secret is None else "***"
        key = None if self.private_key is None else "***"
        return (f"ClientRegistration(client_id={self.client_id!r}, "
                f"token_endpoint_auth_method={self.token_endpoint_auth_method!r}, "
                f"client_secret={secret}, private_key={key}, "
                f"signing_alg={self.signing_alg!r}, redirect_uris={self.redirect_uris!r}, "
                f"client_secret_expires_at={self.client_secret_expires_at!r}, "
                f"issuer={self.issuer!r}, source={self.source!r}, "
                f"grant_types={self.grant_types!r})")

    def covers(self, grant_types: Sequence[str]) -> bool:
        """Whether this registration was made for every grant in ``grant_types`` other than
        ``refresh_token`` (which a server may have declined: it is dropped when unsupported).

        No recorded grant types means ``authorization_code`` only (the RFC 7591 default).
        """
        registered = self.grant_types or _UNNAMED_GRANTS
        return all(g in registered for g in grant_types if g != "refresh_token")

    def expired(self, now: float | None = None) -> bool:
        """True once ``client_secret_expires_at`` has passed (None or 0: never expires)."""
        if not self.client_secret_expires_at:
            return False
        current = time.time() if now is None else now
        return current >= self.client_secret_expires_at

    def to_dict(self) -> dict[str, Any]:
        """A plain JSON object for a token store (it holds the secret: stores are 0600)."""
        return {
            "client_id": self.client_id,
            "token_endpoint_auth_method": self.token_endpoint_auth_method,
            "client_secret": self.client_secret,
            "private_key": self.private_key,
            "signing_alg": self.signing_alg,
            "redirect_uris": list(self.redirect_uris),
            "client_secret_expires_at": self.client_secret_expires_at,
            "issuer": self.issuer,
            "source": self.source,
            "grant_types": list(self.grant_types),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ClientRegistration:
        """Rebuild from :meth:`to_dict`; a malformed entry raises :class:`TokenStoreError`
        (naming the field, never a value)."""
        def fail(name: str) -> TokenStoreError:
            return TokenStoreError(f"store: a stored client registration has an invalid "
                                   f"{name!r}; delete it to register again", step="store")

        if not isinstance(d, Mapping):
            raise fail("entry")
        client_id = d.get("client_id")
        method = d.get("token_endpoint_auth_method", "none")
        if not isinstance(client_id, str) or not client_id:
            raise fail("client_id")
        if method not in AUTH_METHODS:
            raise fail("token_endpoint_auth_method")
        for name in ("client_secret", "private_key"):
            if d.get(name) is not None and not isinstance(d.get(name), str):
                raise fail(name)
        uris = d.get("redirect_uris") or []
        if not isinstance(uris, (list, tuple)) or not all(isinstance(u, str) for u in uris):
            raise fail("redirect_uris")
        expires = d.get("client_secret_expires_at")
        if expires is not None and (isinstance(expires, bool)
                                    or not isinstance(expires, (int, float))):
            raise fail("client_secret_expires_at")
        grants = d.get("grant_types") or []
        if not isinstance(grants, (list, tuple)) or not all(isinstance(g, str) for g in grants):
            raise fail("grant_types")
        for name in ("signing_alg", "issuer", "source"):
            if name in d and not isinstance(d[name], str):
                raise fail(name)
        return cls(client_id=client_id, token_endpoint_auth_method=method,
                   client_secret=d.get("client_secret"), private_key=d.get("private_key"),
                   signing_alg=d.get("signing_alg", "ES256"), redirect_uris=tuple(uris),
                   client_secret_expires_at=None if expires is None else float(expires),
                   issuer=d.get("issuer", ""), source=d.get("source", "preregistered"),
                   grant_types=tuple(grants))


def preregistered_auth_method(meta: ServerMetadata, *, has_secret: bool, has_key: bool) -> str:
    """The token-endpoint auth method for the caller's own credentials.

    A private key means ``private_key_jwt``; a secret means ``client_secret_basic`` when the
    server lists it or lists nothing (the RFC 8414 default), else ``client_secret_post``;
    neither means a public client (``none``).
    """
    if has_key:
        return "private_key_jwt"
    if has_secret:
        methods = meta.token_endpoint_auth_methods_supported
        if methods is None or "client_secret_basic" in methods:
            return "client_secret_basic"
        return "client_secret_post"
    return "none"


def dcr_auth_method(meta: ServerMetadata) -> str:
    """The auth method we ask for in a dynamic registration.

    ``none`` (a public client: nothing to leak) when the server lists it or lists nothing;
    else whichever of ``client_secret_basic`` / ``client_secret_post`` it lists first;
    ``client_secret_basic`` (the RFC 7591 default) when it lists neither.
    """
    methods = meta.token_endpoint_auth_methods_supported
    if methods is None or "none" in methods:
        return "none"
    for method in methods:
        if method in _SECRET_METHODS:
            return method
    return "client_secret_basic"


def application_type_for(redirect_uri: str) -> str:
    """``native`` for a loopback (or non-https) redirect, as from a CLI or desktop app;
    ``web`` for a non-loopback https redirect."""
    try:
        parts = urlsplit(redirect_uri)
        host = parts.hostname or ""
    except ValueError:
        return "native"
    if parts.scheme.lower() == "https" and host and not is_loopback_host(host):
        return "web"
    return "native"


def check_client_metadata_url(url: str) -> None:
    """A client-ID metadata document URL must be https with a path; no loopback exception,
    because the authorization server, not we, fetches it. Screened like every URL first,
    since it becomes our ``client_id`` that another party parses."""
    shown = display_url(url)
    origin = screen(url, what="client_metadata_url", step=_STEP, shown=shown)
    if origin.scheme != "https" or urlsplit(url).path in ("", "/"):
        raise InsecureURL(f"{_STEP}: client_metadata_url {shown} must be an "
                          "https URL with a path", step=_STEP, url=shown)


def client_metadata_document(client_metadata_url: str, *, client_name: str = "mcpsync",
                             redirect_uris: Sequence[str],
                             grant_types: Sequence[str] = _DEFAULT_GRANTS,
                             client_uri: str | None = None,
                             logo_uri: str | None = None) -> dict[str, Any]:
    """The JSON the caller hosts at ``client_metadata_url`` for CIMD.

    Its ``client_id`` equals the URL exactly (the server checks this), and the client is
    public (``token_endpoint_auth_method: none``).
    """
    check_client_metadata_url(client_metadata_url)
    doc: dict[str, Any] = {
        "client_id": client_metadata_url,
        "client_name": client_name,
        "redirect_uris": list(redirect_uris),
        "grant_types": list(grant_types),
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    }
    if client_uri is not None:
        doc["client_uri"] = client_uri
    if logo_uri is not None:
        doc["logo_uri"] = logo_uri
    return doc


def _server_text(value: Any) -> str:
    """A server-supplied error string, trimmed for a message."""
    if not isinstance(value, str):
        return ""
    return value if len(value) <= _MAX_SERVER_TEXT else value[:_MAX_SERVER_TEXT] + "..."


def _registered_grants(doc: Mapping[str, Any], asked: list[str]) -> tuple[str, ...]:
    """The grant types the server registered: its answer when it echoes a list of strings
    (RFC 7591 §3.2.1: the response is the registered metadata), else what we asked for."""
    echoed = doc.get("grant_types")
    if isinstance(echoed, list) and echoed and all(isinstance(g, str) for g in echoed):
        return tuple(echoed)
    return tuple(asked)


def register(meta: ServerMetadata, *, redirect_uris: Sequence[str], client_name: str,
             application_type: str, session: requests.Session, policy: HttpPolicy,
             grant_types: Sequence[str] = _DEFAULT_GRANTS) -> ClientRegistration:
    """Register a client dynamically (RFC 7591) at ``meta.registration_endpoint``.

    ``grant_types`` are the grants the client will use (RFC 7591 §2): the browser login's
    by default, :data:`DEVICE_GRANT_TYPES` for a device login. ``refresh_token`` is dropped
    when the server lists its grant types without it. A registration without
    ``authorization_code`` is not redirect-based: it sends no ``redirect_uris`` and an empty
    ``response_types`` (RFC 7591 §2.1 pairs the device-code grant with no response type).

    The response's ``token_endpoint_auth_method`` is authoritative. A refusal (a
    redirect-URI rejection included) raises :class:`RegistrationError` quoting the
    server's ``error`` and ``error_description``.
    """
    endpoint = meta.registration_endpoint
    if not endpoint:
        raise RegistrationError(f"{_STEP}: {meta.issuer} has no registration endpoint",
                                step=_STEP, url=meta.issuer)
    grants = list(dict.fromkeys(grant_types))
    if not grants:
        raise ValueError("register() needs at least one grant type")
    if (meta.grant_types_supported is not None
            and "refresh_token" not in meta.grant_types_supported and len(grants) > 1):
        grants = [g for g in grants if g != "refresh_token"]
    redirect_based = "authorization_code" in grants
    if redirect_based and not redirect_uris:
        raise ValueError("register() needs redirect_uris for the authorization_code grant")
    asked = dcr_auth_method(meta)
    body: dict[str, Any] = {"client_name": client_name}
    if redirect_based:
        body["redirect_uris"] = list(redirect_uris)
        body["response_types"] = ["code"]
    else:
        redirect_uris = ()
        body["response_types"] = []
    body.update({
        "grant_types": grants,
        "token_endpoint_auth_method": asked,
        "application_type": application_type,
    })
    resp = request(session, "POST", endpoint, policy, step=_STEP, json_body=body,
                   headers={"Content-Type": "application/json"},
                   what="registration endpoint")
    shown = display_url(endpoint)
    doc = resp.json_object()
    if resp.status not in (200, 201):
        error = _server_text(doc.get("error")) if doc else ""
        description = _server_text(doc.get("error_description")) if doc else ""
        detail = f"{error}: {description}" if description else error
        raise RegistrationError(
            f"{_STEP}: {shown} refused the registration (HTTP {resp.status}"
            f"{', ' + detail if detail else ''})",
            error=error, error_description=description, step=_STEP, url=shown)
    if doc is None or not isinstance(doc.get("client_id"), str) or not doc["client_id"]:
        raise RegistrationError(f"{_STEP}: {shown} answered without a client_id",
                                step=_STEP, url=shown)
    method = doc.get("token_endpoint_auth_method", asked)
    if method not in ("none", *_SECRET_METHODS):
        raise RegistrationError(
            f"{_STEP}: {shown} registered the client with token_endpoint_auth_method "
            f"{_server_text(method)!r}, which mcpauth cannot use after dynamic registration",
            step=_STEP, url=shown)
    secret = doc.get("client_secret")
    if not isinstance(secret, str) or not secret:
        secret = None
    if method in _SECRET_METHODS and secret is None:
        raise RegistrationError(f"{_STEP}: {shown} chose {method} but sent no client_secret",
                                step=_STEP, url=shown)
    expires = doc.get("client_secret_expires_at")
    expires_at = (float(expires) if isinstance(expires, (int, float))
                  and not isinstance(expires, bool) and expires > 0 else None)
    return ClientRegistration(
        client_id=doc["client_id"], token_endpoint_auth_method=method, client_secret=secret,
        redirect_uris=tuple(redirect_uris), client_secret_expires_at=expires_at,
        issuer=meta.issuer, source="dynamic", grant_types=_registered_grants(doc, grants))


def choose_registration(meta: ServerMetadata, *,
                        preregistered: ClientRegistration | None,
                        client_metadata_url: str | None,
                        stored: ClientRegistration | None,
                        redirect_uri: str | None, client_name: str, application_type: str,
                        session: requests.Session, policy: HttpPolicy,
                        grant_types: Sequence[str] = _DEFAULT_GRANTS) -> ClientRegistration:
    """Pick the registration for ``meta.issuer`` in order: pre-registered, CIMD, dynamic.

    ``grant_types`` are those of the login about to run (see :func:`register`);
    ``redirect_uri`` is None for a login without a redirect (the device code).
    ``stored`` (an earlier dynamic registration at this issuer) is reused while its issuer
    matches, it was registered for those grants, its redirect URIs include ``redirect_uri``
    and its secret has not expired; otherwise a new one is made.
    """
    if preregistered is not None:
        if not preregistered.issuer:
            return dataclasses.replace(preregistered, issuer=meta.issuer)
        return preregistered
    if client_metadata_url and meta.client_id_metadata_document_supported:
        check_client_metadata_url(client_metadata_url)
        return ClientRegistration(client_id=client_metadata_url,
                                  token_endpoint_auth_method="none",
                                  redirect_uris=(redirect_uri,) if redirect_uri else (),
                                  issuer=meta.issuer, source="cimd")
    if meta.registration_endpoint:
        if (stored is not None and stored.source == "dynamic"
                and same_identifier(stored.issuer, meta.issuer)
                and stored.covers(grant_types)
                and (redirect_uri is None or redirect_uri in stored.redirect_uris)
                and not stored.expired()):
            return stored
        return register(meta, redirect_uris=[redirect_uri] if redirect_uri else [],
                        client_name=client_name, application_type=application_type,
                        session=session, policy=policy, grant_types=grant_types)
    raise RegistrationError(
        f"{_STEP}: configure a client_id for {meta.issuer}: it supports neither client ID "
        "metadata documents (or none was configured) nor dynamic registration",
        step=_STEP, url=meta.issuer)
