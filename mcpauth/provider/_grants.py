"""Running each grant for ``OAuthProvider``: from server metadata to a token-endpoint answer.

The provider decides *when* to authorize and with which scopes; this module knows *how*
each grant goes: a browser login with PKCE on a loopback redirect, the device code, or a
service grant (``client_credentials``, ``jwt_bearer`` for workload identity, ``id_jag`` for
enterprise-managed authorization). Keeping the grant mechanics apart keeps the provider's
thread and token logic readable, and puts every grant's inputs in one constructor.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import time
import webbrowser
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import urlsplit

import requests

from mcpauth._http import HttpPolicy
from mcpauth._loopback import LoopbackListener
from mcpauth.discovery import ServerMetadata, discover_authorization_server, require_pkce_s256
from mcpauth.errors import LoginRequired, RegistrationError
from mcpauth.flows import (
    DeviceCode,
    TokenEndpoint,
    authorization_url,
    client_credentials,
    device_authorization,
    exchange_code,
    id_jag_exchange,
    jwt_bearer,
    new_pending,
    parse_callback,
    run_browser_login,
)
from mcpauth.provider._registrations import ClientRegistrations
from mcpauth.registration import DEVICE_GRANT_TYPES, ClientRegistration

__all__ = ["GRANTS", "INTERACTIVE_GRANTS", "EndpointFactory", "GrantRunner"]

# The provider's logger: these records are the provider's, wherever the code lives.
_log = logging.getLogger("mcpauth.provider")

GRANTS = ("authorization_code", "device_code", "client_credentials", "jwt_bearer", "id_jag")
# Grants that involve a person (a browser or a device code): these need interactive=True, run
# one at a time per process, and are the ones that ask for offline_access.
INTERACTIVE_GRANTS = ("authorization_code", "device_code")


class EndpointFactory(Protocol):
    """The provider's token endpoint for a registration, DPoP-bound when ``dpop`` (the DPoP
    key is the provider's, so the provider builds it)."""

    def __call__(self, meta: ServerMetadata, registration: ClientRegistration, *,
                 dpop: bool) -> TokenEndpoint: ...


def _jwt_expired(jwt: str, now: float) -> bool:
    """True when an (unverified) JWT's ``exp`` has passed; unreadable means not known expired.

    Only a local early warning for the enterprise flow's ID token: the IdP is the judge.
    """
    parts = jwt.split(".")
    if len(parts) < 2:
        return False
    try:
        padded = parts[1] + "=" * (-len(parts[1]) % 4)
        claims = json.loads(base64.urlsafe_b64decode(padded))
    except (ValueError, binascii.Error):
        return False
    exp = claims.get("exp") if isinstance(claims, dict) else None
    return isinstance(exp, (int, float)) and exp <= now


def _browser_available() -> bool:
    """Whether ``webbrowser`` knows a browser to open (False on a headless machine)."""
    try:
        webbrowser.get()
    except webbrowser.Error:
        return False
    return True


class GrantRunner:
    """Runs a grant in full; returns the token-endpoint JSON and the registration the token
    is issued to. The grant's name comes with each call (it is the provider's ``grant``)."""

    def __init__(
        self,
        *,
        registrations: ClientRegistrations,
        endpoint: EndpointFactory,
        session: requests.Session,
        policy: HttpPolicy,
        authorization_handler: Callable[[str], str] | None,
        device_code_handler: Callable[[DeviceCode], None] | None,
        redirect_uri: str | None,
        redirect_port: int,
        assertion_provider: Callable[[], str] | None,
        id_token: str | Callable[[], str] | None,
        idp_token_endpoint: str | None,
        idp_issuer: str | None,
        idp_client_id: str | None,
        idp_client_secret: str | None,
    ) -> None:
        self._registrations = registrations
        self._endpoint = endpoint
        self._session = session
        self._policy = policy
        self._authorization_handler = authorization_handler
        self._device_code_handler = device_code_handler
        self._redirect_uri = redirect_uri
        self._redirect_port = redirect_port
        self._assertion_provider = assertion_provider
        self._id_token = id_token
        self._idp_token_endpoint = idp_token_endpoint
        self._idp_issuer = idp_issuer
        self._idp_client_id = idp_client_id
        self._idp_client_secret = idp_client_secret

    def _use_device_code(self, grant: str, meta: ServerMetadata) -> bool:
        if grant == "device_code":
            return True
        return (self._authorization_handler is None and self._redirect_uri is None
                and meta.device_authorization_endpoint is not None
                and not _browser_available())

    def interactive(self, grant: str, meta: ServerMetadata, scopes: list[str], resource: str,
                    dpop: bool) -> tuple[dict[str, Any], ClientRegistration]:
        """A person's login: the device code, or a browser login with PKCE.

        A dynamic registration for the device code asks for the device-code grant (and
        ``refresh_token``) only, with no redirect URI (RFC 7591 §2): the device code runs when
        ``grant="device_code"`` (never a browser), or as the fallback that needs no browser,
        no handler and no redirect URI; a later browser login needs a loopback redirect URI
        such a registration never has, so it registers anew for ``authorization_code``.
        """
        if self._use_device_code(grant, meta):
            registration = self._registrations.register(meta, None,
                                                        grant_types=DEVICE_GRANT_TYPES)
            endpoint = self._endpoint(meta, registration, dpop=dpop)
            data = device_authorization(meta, registration, scopes=scopes, resource=resource,
                                        session=self._session, policy=self._policy,
                                        handler=self._device_code_handler, endpoint=endpoint)
            return data, registration
        require_pkce_s256(meta)
        listener = None
        redirect_uri = self._redirect_uri
        try:
            if redirect_uri is None:
                listener = self._listener(meta)
                redirect_uri = listener.redirect_uri
            registration = self._registrations.register(meta, redirect_uri)
            endpoint = self._endpoint(meta, registration, dpop=dpop)
            pending = new_pending(meta, registration, redirect_uri=redirect_uri,
                                  resource=resource, scopes=scopes)
            url = authorization_url(meta, registration, pending)
            callback = run_browser_login(url, redirect_uri=redirect_uri, listener=listener,
                                         authorization_handler=self._authorization_handler)
        finally:
            if listener is not None:
                listener.close()
        code = parse_callback(callback, pending, meta)
        return exchange_code(endpoint, pending, code), registration

    def _listener(self, meta: ServerMetadata) -> LoopbackListener:
        """The loopback listener: on a stored registration's port when it can be bound
        again (so that registration stays valid), else on ``redirect_port``."""
        stored = self._registrations.stored(meta.issuer)
        if stored is not None and stored.redirect_uris and not self._redirect_port:
            port = urlsplit(stored.redirect_uris[0]).port
            if port:
                try:
                    return LoopbackListener(port)
                except OSError:
                    _log.info("port %d of the stored registration is taken; registering a "
                              "new redirect URI", port)
        return LoopbackListener(self._redirect_port)

    def service(self, grant: str, meta: ServerMetadata, scopes: list[str], resource: str,
                dpop: bool) -> tuple[dict[str, Any], ClientRegistration]:
        """client_credentials, jwt_bearer (workload identity) and id_jag (enterprise)."""
        registration = self._registrations.preregistered(meta)
        if registration is None:
            raise RegistrationError(
                f"registration: the {grant} grant needs a pre-registered client_id for "
                f"{meta.issuer}", step="registration", url=meta.issuer)
        self._registrations.adopt(registration)
        endpoint = self._endpoint(meta, registration, dpop=dpop)
        if grant == "client_credentials":
            return client_credentials(endpoint, scopes=scopes, resource=resource), registration
        if grant == "jwt_bearer":
            assert self._assertion_provider is not None
            assertion = self._assertion_provider()
            return jwt_bearer(endpoint, assertion, scopes=scopes, resource=resource,
                              include_client_id=True), registration
        id_token = self._id_token() if callable(self._id_token) else self._id_token
        assert id_token is not None and self._idp_client_id is not None
        if _jwt_expired(id_token, time.time()):
            raise LoginRequired(
                f"authorization: the ID token for the enterprise IdP "
                f"{self._idp_issuer or self._idp_token_endpoint} has expired; sign in to the "
                f"IdP again", step="authorization",
                url=self._idp_issuer or self._idp_token_endpoint)
        idp_endpoint = self._idp_token_endpoint
        if idp_endpoint is None:
            assert self._idp_issuer is not None
            idp_endpoint = discover_authorization_server(
                self._idp_issuer, session=self._session, policy=self._policy).token_endpoint
        id_jag = id_jag_exchange(idp_token_endpoint=idp_endpoint, id_token=id_token,
                                 audience=meta.issuer, resource=resource, scopes=scopes,
                                 idp_client_id=self._idp_client_id,
                                 idp_client_secret=self._idp_client_secret,
                                 session=self._session, policy=self._policy)
        return jwt_bearer(endpoint, id_jag, scopes=scopes, resource=resource), registration
