"""``OAuthProvider``: the orchestrator that takes an MCP client from a 401 to a valid token.

It fills mcpsync's ``AuthHooks`` protocol structurally (``headers``, ``on_unauthorized``,
``on_response``) without importing mcpsync, and drives the other mcpauth modules: the challenge
parser, discovery, registration, the grants, DPoP and the token stores (rules/auth.md §10).

Thread contract: every public method is safe from many threads at once. ``headers()`` is the
hot path: it hands out the cached token and never holds a lock across a request. Inside the
refresh margin one thread refreshes while the others keep using the still-valid token; only
once it has expired do they wait, on that same refresh. One refresh or authorization runs per
credential key (the store's ``locked(key)`` makes that hold across processes too), and one
interactive login runs at a time in the process.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import threading
import time
import webbrowser
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol
from urllib.parse import urlsplit

import requests

from mcpauth._http import HttpPolicy, display_url
from mcpauth._loopback import LoopbackListener
from mcpauth.challenge import parse_challenges, select_challenge
from mcpauth.discovery import (
    ResourceMetadata,
    ServerMetadata,
    canonical_resource,
    discover_authorization_server,
    discover_resource,
    legacy_authorization_server,
    require_pkce_s256,
    same_identifier,
)
from mcpauth.dpop import DPoPKey, DPoPProver, check_server_supports_dpop
from mcpauth.errors import (
    AuthError,
    AuthorizationServerChanged,
    DPoPError,
    LoginRequired,
    RegistrationError,
    TokenRequestError,
)
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
    refresh,
    run_browser_login,
)
from mcpauth.registration import (
    ClientRegistration,
    application_type_for,
    choose_registration,
    preregistered_auth_method,
)
from mcpauth.tokens import (
    MemoryTokenStore,
    Token,
    TokenStore,
    credential_key,
    registration_key,
    resource_index_key,
)

__all__ = ["GRANTS", "OAuthProvider"]

_log = logging.getLogger("mcpauth.provider")

GRANTS = ("authorization_code", "device_code", "client_credentials", "jwt_bearer", "id_jag")
# Grants that involve a person (a browser or a device code): these need interactive=True, run
# one at a time per process, and are the ones that ask for offline_access.
_INTERACTIVE_GRANTS = ("authorization_code", "device_code")
# Only one interactive login at a time in a process: two browser tabs racing for the user's
# attention (or two stdin prompts) is worse than a short wait.
_INTERACTIVE_LOCK = threading.Lock()
# Used as the redirect URI of a registration made for the device-code grant, which has none.
_DEVICE_REDIRECT = "http://127.0.0.1/callback"

Credential = str | Mapping[str, str] | None


class ChallengeLike(Protocol):
    """What ``on_unauthorized`` reads from mcpsync's ``HttpChallenge``, by duck typing, so
    mcpauth needs no import of mcpsync (any object with these attributes will do)."""

    @property
    def status(self) -> int: ...
    @property
    def www_authenticate(self) -> Sequence[str]: ...
    @property
    def headers(self) -> Mapping[str, str]: ...
    @property
    def method(self) -> str: ...
    @property
    def url(self) -> str: ...
    @property
    def authorization(self) -> str | None: ...


def _union(*groups: Iterable[str]) -> list[str]:
    """Scopes of every group, first occurrence first, no duplicates, no empty strings."""
    seen: dict[str, None] = {}
    for group in groups:
        for scope in group:
            if scope:
                seen.setdefault(scope, None)
    return list(seen)


def _token_of(authorization: str | None) -> str | None:
    """The credential of an ``Authorization`` value (``Bearer x`` / ``DPoP x`` -> ``x``)."""
    if not authorization:
        return None
    _, _, rest = authorization.strip().partition(" ")
    return rest.strip() or None


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


class OAuthProvider:
    """OAuth 2.1 for one MCP server, as mcpsync's ``auth=`` hook.

    ``OAuthProvider(url)`` with no other argument does the whole MCP dance on the first 401:
    protected-resource discovery, authorization-server discovery, registration (client-ID
    metadata document or dynamic registration), a browser login with PKCE on a loopback
    redirect, then refresh ahead of expiry. Other grants: ``grant="device_code"``,
    ``"client_credentials"`` (``client_id`` with ``client_secret`` or ``private_key``),
    ``"jwt_bearer"`` (workload identity: ``assertion_provider`` returns the JWT), ``"id_jag"``
    (enterprise-managed: ``id_token`` plus the IdP's token endpoint or issuer and client).

    ``client_id``, ``client_secret`` and ``private_key`` are pre-registered credentials; a str
    belongs to the first authorization server this provider meets, a mapping
    ``{issuer: value}`` names them per issuer (so a server can migrate between known issuers).

    ``interactive=False`` never opens a browser, prompts or shows a device code: a login that
    needs a person raises :class:`LoginRequired` (use it in services and CI).

    Safe from many threads; ``repr`` shows no secret.
    """

    def __init__(
        self,
        server_url: str,
        *,
        store: TokenStore | None = None,
        client_id: Credential = None,
        client_secret: Credential = None,
        private_key: Credential = None,
        signing_alg: str = "ES256",
        client_metadata_url: str | None = None,
        client_name: str = "mcpsync",
        grant: str = "authorization_code",
        scopes: Sequence[str] | None = None,
        interactive: bool = True,
        authorization_handler: Callable[[str], str] | None = None,
        device_code_handler: Callable[[DeviceCode], None] | None = None,
        redirect_uri: str | None = None,
        redirect_port: int = 0,
        dpop: bool | None = None,
        allow_insecure_http: bool = False,
        block_private_networks: bool = False,
        assertion_provider: Callable[[], str] | None = None,
        id_token: str | Callable[[], str] | None = None,
        idp_token_endpoint: str | None = None,
        idp_issuer: str | None = None,
        idp_client_id: str | None = None,
        idp_client_secret: str | None = None,
        choose_authorization_server: Callable[[list[str]], str] | None = None,
        protocol_version: str | None = None,
        session: requests.Session | None = None,
    ) -> None:
        if grant not in GRANTS:
            raise ValueError(f"grant must be one of {', '.join(GRANTS)}, got {grant!r}")
        if grant == "jwt_bearer" and assertion_provider is None:
            raise ValueError("grant='jwt_bearer' needs assertion_provider (returns the JWT)")
        if grant == "id_jag" and (id_token is None or idp_client_id is None
                                  or (idp_token_endpoint is None and idp_issuer is None)):
            raise ValueError("grant='id_jag' needs id_token, idp_client_id and "
                             "idp_token_endpoint or idp_issuer")
        if grant == "client_credentials" and client_id is None:
            raise ValueError("grant='client_credentials' needs client_id with client_secret "
                             "or private_key")
        self.server_url = server_url
        self.grant = grant
        self.interactive = interactive
        self._store: TokenStore = store if store is not None else MemoryTokenStore()
        self._client_id = client_id
        self._client_secret = client_secret
        self._private_key = private_key
        self._signing_alg = signing_alg
        self._client_metadata_url = client_metadata_url
        self._client_name = client_name
        self._scopes = list(scopes) if scopes is not None else None
        self._authorization_handler = authorization_handler
        self._device_code_handler = device_code_handler
        self._redirect_uri = redirect_uri
        self._redirect_port = redirect_port
        self._dpop_setting = dpop
        self._policy = HttpPolicy(allow_insecure_http=allow_insecure_http,
                                  block_private_networks=block_private_networks)
        self._assertion_provider = assertion_provider
        self._id_token = id_token
        self._idp_token_endpoint = idp_token_endpoint
        self._idp_issuer = idp_issuer
        self._idp_client_id = idp_client_id
        self._idp_client_secret = idp_client_secret
        self._choose = choose_authorization_server
        self._protocol_version = protocol_version
        self._session = session if session is not None else requests.Session()
        self._own_session = session is None
        self._canonical = canonical_resource(server_url)

        # State guarded by _state_lock (held briefly, never across a network call).
        self._state_lock = threading.Lock()
        self._token: Token | None = None
        self._loaded = False
        self._prm: ResourceMetadata | None = None
        self._meta: ServerMetadata | None = None
        self._registration: ClientRegistration | None = None
        self._prereg_issuer: str | None = None      # where a str client_id belongs
        self._requested_scopes: list[str] = []
        self._dpop_required = dpop is True
        self._prover: DPoPProver | None = None
        # One refresh or authorization at a time for this provider; with the store's
        # locked(key) this makes the single flight per credential key.
        self._flight = threading.RLock()

    # --- the AuthHooks protocol -------------------------------------------------------------

    def headers(self, method: str, url: str) -> Mapping[str, str]:
        """The auth headers of one request: ``{}`` before any token, else Bearer or DPoP.

        Inside the refresh margin the first thread to get here refreshes (its own request
        waits); the others keep the current token. Past expiry everyone waits for that refresh.
        """
        token = self._current()
        if token is None:
            return {}
        if token.refresh_due() and self._can_renew(token):
            if not token.expired():
                if self._flight.acquire(blocking=False):
                    try:
                        token = self._renew_quietly(token)
                    finally:
                        self._flight.release()
            else:
                with self._flight:
                    token = self._renew_quietly(token)
        return self._auth_headers(token, method, url)

    def on_unauthorized(self, challenge: ChallengeLike) -> None:
        """Handle a 401 (or a 403 ``insufficient_scope``) so that a retry can succeed.

        In order: a DPoP nonce challenge only records the nonce; a challenge for a token that is
        no longer current means another thread already refreshed; otherwise the resource
        metadata is fetched again (authorization-server migration), then a 403 steps up with
        the scope union and a 401 refreshes or authorizes in full.
        """
        challenges = parse_challenges(challenge.www_authenticate)
        nonce = challenge.headers.get("DPoP-Nonce") if challenge.headers else None
        if any(c.error == "use_dpop_nonce" for c in challenges):
            if nonce:
                self._dpop_prover().record_nonce(challenge.url or self.server_url, nonce)
                return
            _log.debug("use_dpop_nonce challenge without a DPoP-Nonce header")
        failing = _token_of(challenge.authorization)
        with self._flight:
            current = self._current()
            if current is not None and failing != current.access_token:
                return          # another thread (or process) has already replaced the token
            dpop_challenged = any(c.scheme == "dpop" for c in challenges)
            chosen = select_challenge(challenges,
                                      dpop=dpop_challenged or self._dpop_required)
            if dpop_challenged and self._dpop_setting is not False:
                self._dpop_required = True
            self._locate(chosen.resource_metadata if chosen else None)
            wanted = chosen.scopes if chosen else []
            step_up = (challenge.status == 403 and chosen is not None
                       and chosen.error == "insufficient_scope")
            if step_up:
                scopes = _union(self._requested_scopes, wanted)
                self._authorize(scopes)
                return
            current = self._current()
            if current is not None and current.refresh_token and self._refresh_now(current):
                return
            self._authorize(self._initial_scopes(wanted))

    def on_response(self, headers: Mapping[str, str]) -> None:
        """Keep the newest ``DPoP-Nonce`` the MCP server sent (nonces rotate)."""
        nonce = headers.get("DPoP-Nonce")
        if nonce and self._prover is not None:
            self._prover.record_nonce(self.server_url, nonce)

    # --- public operations --------------------------------------------------------------

    @property
    def token(self) -> Token | None:
        """The current token (loaded from the store on first use), or None."""
        return self._current()

    def login(self) -> Token:
        """Run discovery and the configured grant now, without waiting for a 401.

        What ``mcpsync login`` calls. Interactive grants still honour ``interactive``.
        """
        with self._flight:
            self._locate(None)
            return self._authorize(self._initial_scopes([]))

    def logout(self) -> None:
        """Forget the token here and in the store (registrations are kept for next time)."""
        with self._flight:
            token = self._current()
            if token is not None:
                key = credential_key(token.issuer, token.client_id, token.resource)
                with self._store.locked(key):
                    self._store.delete(key)
            self._store.delete(resource_index_key(self._canonical))
            with self._state_lock:
                self._token = None
                self._prover = None

    def close(self) -> None:
        """Close the HTTP session this provider made (a given session is left alone)."""
        if self._own_session:
            self._session.close()

    def __repr__(self) -> str:
        return (f"OAuthProvider({display_url(self.server_url)!r}, grant={self.grant!r}, "
                f"interactive={self.interactive!r})")

    # --- the token in memory and in the store ---------------------------------------------

    def _current(self) -> Token | None:
        """The cached token; the first call looks in the store, so a stored token is used
        from the very first request."""
        if self._loaded:
            return self._token
        with self._state_lock:
            if self._loaded:
                return self._token
            token = self._load_stored()
            self._token = token
            if token is not None and token.dpop_jwk is not None:
                self._prover = DPoPProver(DPoPKey.from_jwk(token.dpop_jwk))
            self._loaded = True
            return token

    def _load_stored(self) -> Token | None:
        index = self._store.get(resource_index_key(self._canonical))
        if not index:
            return None
        issuer = str(index.get("issuer") or "")
        client_id = str(index.get("client_id") or "")
        resource = str(index.get("resource") or self._canonical)
        stored = self._store.get(credential_key(issuer, client_id, resource))
        if not stored:
            return None
        try:
            return Token.from_dict(stored)
        except (KeyError, TypeError, ValueError) as exc:
            _log.warning("ignoring an unreadable stored token for %s: %s", self._canonical,
                         type(exc).__name__)
            return None

    def _adopt(self, token: Token) -> Token:
        with self._state_lock:
            self._token = token
            self._loaded = True
            if token.dpop_jwk is not None and (
                    self._prover is None
                    or self._prover.key.thumbprint()
                    != DPoPKey.from_jwk(token.dpop_jwk).thumbprint()):
                self._prover = DPoPProver(DPoPKey.from_jwk(token.dpop_jwk))
        return token

    def _save(self, token: Token) -> Token:
        """Store the token and the resource index that finds it next time, then adopt it."""
        key = credential_key(token.issuer, token.client_id, token.resource)
        with self._store.locked(key):
            self._store.put(key, token.to_dict())
        self._store.put(resource_index_key(self._canonical),
                        {"issuer": token.issuer, "client_id": token.client_id,
                         "resource": token.resource})
        return self._adopt(token)

    def _forget(self, token: Token | None) -> None:
        if token is not None:
            key = credential_key(token.issuer, token.client_id, token.resource)
            with self._store.locked(key):
                self._store.delete(key)
        with self._state_lock:
            self._token = None

    # --- headers ----------------------------------------------------------------------------

    def _auth_headers(self, token: Token, method: str, url: str) -> dict[str, str]:
        if token.token_type.lower() == "dpop":
            return self._dpop_prover().resource_headers(method, url, token.access_token)
        return {"Authorization": f"Bearer {token.access_token}"}

    def _dpop_prover(self) -> DPoPProver:
        """The provider's DPoP prover, its EC P-256 key made on first need."""
        with self._state_lock:
            if self._prover is None:
                self._prover = DPoPProver(DPoPKey.generate())
            return self._prover

    # --- refresh ----------------------------------------------------------------------------

    def _can_renew(self, token: Token) -> bool:
        """Whether ``headers()`` may renew without a person: a refresh token, or a grant that
        can simply run again."""
        return bool(token.refresh_token) or self.grant not in _INTERACTIVE_GRANTS

    def _renew_quietly(self, stale: Token) -> Token:
        """Refresh (or re-run a non-interactive grant) from ``headers()``.

        Another thread or process may have done it already. Failing, the old token is sent and
        its 401 brings ``on_unauthorized``; only an error while the old token has expired is
        raised, because sending it would be pointless.
        """
        current = self._current()
        if current is not None and current is not stale and not current.refresh_due():
            return current
        try:
            if stale.refresh_token and self._refresh_now(stale):
                return self._current() or stale
            if self.grant not in _INTERACTIVE_GRANTS:
                # No (usable) refresh token: a service grant simply runs again.
                return self._authorize(self._requested_scopes or self._initial_scopes([]))
            # A person is needed: send what we have and let its 401 reach on_unauthorized.
            return self._current() or stale
        except LoginRequired:
            raise
        except AuthError as exc:
            if not stale.expired():
                _log.warning("token renewal failed, using the current token: %s", exc)
                return stale
            raise

    def _refresh_now(self, stale: Token) -> bool:
        """Refresh under the store lock, re-reading first; False when the refresh token was
        refused (``invalid_grant``) and a full authorization is needed."""
        key = credential_key(stale.issuer, stale.client_id, stale.resource)
        with self._store.locked(key):
            raw = self._store.get(key)
            stored = Token.from_dict(raw) if raw else None
            if (stored is not None and stored.access_token != stale.access_token
                    and not stored.expired()):
                self._adopt(stored)          # another process refreshed it meanwhile
                return True
            refresh_token = (stored.refresh_token if stored is not None
                             and stored.refresh_token else stale.refresh_token)
            if not refresh_token:
                return False
            meta = self._meta
            if meta is None or not same_identifier(meta.issuer, stale.issuer):
                self._locate(None)
                meta = self._meta
                if meta is None or not same_identifier(meta.issuer, stale.issuer):
                    return False
            registration = self._registration_for(meta, stale.client_id)
            if registration is None:
                return False
            endpoint = self._endpoint(meta, registration, dpop=stale.dpop_jwk is not None)
            try:
                data = refresh(endpoint, refresh_token, resource=stale.resource)
            except TokenRequestError as exc:
                if exc.error == "invalid_grant":
                    _log.info("the refresh token for %s was refused; authorizing again",
                              stale.issuer)
                    self._store.delete(key)
                    with self._state_lock:
                        self._token = None
                    return False
                raise
            token = Token.from_response(
                data, requested_scope=stale.scope, issuer=stale.issuer,
                client_id=stale.client_id, resource=stale.resource,
                previous_refresh_token=refresh_token, dpop_jwk=stale.dpop_jwk)
            self._store.put(key, token.to_dict())
        self._adopt(token)
        return True

    # --- discovery --------------------------------------------------------------------------

    def _locate(self, hint: str | None) -> None:
        """Fetch the resource metadata again and settle the authorization server (§4, §10.3).

        A changed issuer forgets what belonged to the old one: its dynamic or CIMD
        registration and its token. Pre-registered credentials of the old issuer are not
        carried over: without credentials for the new issuer this raises
        :class:`AuthorizationServerChanged`.
        """
        prm = discover_resource(self.server_url, hint=hint, session=self._session,
                                policy=self._policy)
        if prm is not None:
            servers = list(prm.authorization_servers)
            issuer = self._choose(servers) if self._choose is not None else servers[0]
            if prm.dpop_bound_access_tokens_required and self._dpop_setting is not False:
                self._dpop_required = True
        else:
            issuer = None
        old = self._meta.issuer if self._meta is not None else None
        token = self._current()
        if old is None and token is not None:
            old = token.issuer or None
        meta: ServerMetadata | None = None
        if issuer is None:
            meta = legacy_authorization_server(self.server_url, session=self._session,
                                               policy=self._policy,
                                               protocol_version=self._protocol_version)
            issuer = meta.issuer
        if old is not None and not same_identifier(old, issuer):
            self._migrate(old, issuer)
        if meta is None:
            meta = self._server_metadata(issuer)
        with self._state_lock:
            self._prm = prm
            self._meta = meta

    def _server_metadata(self, issuer: str) -> ServerMetadata:
        """The cached metadata of ``issuer``, discovered on first need."""
        meta = self._meta
        if meta is not None and same_identifier(meta.issuer, issuer):
            return meta
        meta = discover_authorization_server(issuer, session=self._session,
                                             policy=self._policy)
        with self._state_lock:
            self._meta = meta
        return meta

    def _migrate(self, old: str, new: str) -> None:
        """The resource moved to another authorization server (SEP-2352).

        Pre-registered credentials are bound to their issuer: a str ``client_id`` belongs to
        the old one, so only a per-issuer mapping naming the new issuer lets this proceed.
        Dynamic and CIMD registrations of the old issuer are forgotten, here and in the store.
        """
        given = self._client_id
        used_prereg = given is not None and (not isinstance(given, Mapping)
                                             or self._credential(given, old) is not None)
        have_new = isinstance(given, Mapping) and self._credential(given, new) is not None
        if used_prereg and not have_new:
            raise AuthorizationServerChanged(
                f"discovery: the authorization server of {display_url(self.server_url)} "
                f"changed from {old} to {new}, and the pre-registered client_id belongs to {old}; "
                f"configure credentials for {new}",
                step="discovery", url=new, old_issuer=old, new_issuer=new)
        _log.info("authorization server of %s changed from %s to %s: registering anew",
                  display_url(self.server_url), old, new)
        self._store.delete(registration_key(old))
        self._forget(self._current())
        with self._state_lock:
            self._registration = None
            self._meta = None
            self._prereg_issuer = None

    # --- scopes -----------------------------------------------------------------------------

    def _initial_scopes(self, challenged: Sequence[str]) -> list[str]:
        """§6: the challenge's scope, else the caller's, else the resource's scopes_supported."""
        if challenged:
            return list(challenged)
        if self._scopes is not None:
            return list(self._scopes)
        prm = self._prm
        if prm is not None and prm.scopes_supported:
            return list(prm.scopes_supported)
        return []

    def _with_offline_access(self, scopes: list[str], meta: ServerMetadata) -> list[str]:
        """``offline_access`` only when the authorization server lists it (SEP-2207): then a
        person's login asks for it; otherwise it is dropped even when a challenge or the
        resource metadata names it."""
        listed = bool(meta.scopes_supported) and "offline_access" in (
            meta.scopes_supported or ())
        if not listed:
            return [s for s in scopes if s != "offline_access"]
        if self.grant in _INTERACTIVE_GRANTS:
            return _union(scopes, ["offline_access"])
        return scopes

    # --- registration -----------------------------------------------------------------------

    def _credential(self, value: Credential, issuer: str) -> str | None:
        """A pre-registered value for ``issuer``: a mapping is looked up, a str belongs to the
        first issuer this provider meets."""
        if value is None:
            return None
        if isinstance(value, Mapping):
            for name, item in value.items():
                if same_identifier(name, issuer):
                    return item
            return None
        if self._prereg_issuer is None or same_identifier(self._prereg_issuer, issuer):
            return value
        return None

    def _preregistered(self, meta: ServerMetadata) -> ClientRegistration | None:
        client_id = self._credential(self._client_id, meta.issuer)
        if client_id is None:
            return None
        secret = self._credential(self._client_secret, meta.issuer)
        key = self._credential(self._private_key, meta.issuer)
        method = preregistered_auth_method(meta, has_secret=secret is not None,
                                           has_key=key is not None)
        if self._prereg_issuer is None:
            self._prereg_issuer = meta.issuer
        return ClientRegistration(client_id=client_id, token_endpoint_auth_method=method,
                                  client_secret=secret, private_key=key,
                                  signing_alg=self._signing_alg, issuer=meta.issuer,
                                  source="preregistered")

    def _stored_registration(self, issuer: str) -> ClientRegistration | None:
        raw = self._store.get(registration_key(issuer))
        if not raw:
            return None
        try:
            return ClientRegistration.from_dict(raw)
        except (KeyError, TypeError, ValueError):
            return None

    def _registration_for(self, meta: ServerMetadata,
                          client_id: str) -> ClientRegistration | None:
        """The registration a stored token was issued to (for refresh), or None (also when
        its client secret has expired)."""
        current = self._registration
        if (current is not None and current.client_id == client_id and not current.expired()
                and same_identifier(current.issuer or meta.issuer, meta.issuer)):
            return current
        prereg = self._preregistered(meta)
        if prereg is not None and prereg.client_id == client_id:
            return prereg
        stored = self._stored_registration(meta.issuer)
        if stored is not None and stored.client_id == client_id and not stored.expired():
            # An expired client_secret (RFC 7591 client_secret_expires_at) cannot refresh:
            # None makes the caller authorize in full, which registers anew (§5).
            return stored
        if self._client_metadata_url is not None and client_id == self._client_metadata_url:
            return ClientRegistration(client_id=client_id, token_endpoint_auth_method="none",
                                      issuer=meta.issuer, source="cimd")
        return None

    def _register(self, meta: ServerMetadata, redirect_uri: str) -> ClientRegistration:
        """§5: pre-registered, CIMD, a stored or new dynamic registration, in that order."""
        registration = choose_registration(
            meta, preregistered=self._preregistered(meta),
            client_metadata_url=self._client_metadata_url,
            stored=self._stored_registration(meta.issuer), redirect_uri=redirect_uri,
            client_name=self._client_name,
            application_type=application_type_for(redirect_uri),
            session=self._session, policy=self._policy)
        if registration.source in ("dynamic", "cimd"):
            self._store.put(registration_key(meta.issuer), registration.to_dict())
        with self._state_lock:
            self._registration = registration
        return registration

    def _endpoint(self, meta: ServerMetadata, registration: ClientRegistration, *,
                  dpop: bool) -> TokenEndpoint:
        prover = None
        if dpop:
            check_server_supports_dpop(meta.dpop_signing_alg_values_supported,
                                       issuer=meta.issuer)
            prover = self._dpop_prover()
        return TokenEndpoint(meta, registration, session=self._session, policy=self._policy,
                             dpop=prover)

    # --- authorization ----------------------------------------------------------------------

    def _authorize(self, scopes: list[str]) -> Token:
        """Run the configured grant in full with ``scopes`` and store the result."""
        meta = self._meta
        if meta is None:
            self._locate(None)
            meta = self._meta
        assert meta is not None
        resource = self._prm.resource if self._prm is not None else self._canonical
        dpop = self._dpop_required
        if self.grant in _INTERACTIVE_GRANTS:
            if not self.interactive:
                raise LoginRequired(
                    f"authorization: logging in to {meta.issuer} for "
                    f"{display_url(self.server_url)} needs a person, and interactive=False; "
                    "run `mcpsync login` or use a non-interactive grant",
                    step="authorization", url=meta.issuer)
            with _INTERACTIVE_LOCK:
                requested = self._with_offline_access(scopes, meta)
                data, registration = self._interactive(meta, requested, resource, dpop)
        else:
            requested = self._with_offline_access(scopes, meta)
            data, registration = self._service_grant(meta, requested, resource, dpop)
        with self._state_lock:
            self._requested_scopes = list(scopes)
        token = Token.from_response(
            data, requested_scope=" ".join(requested) or None, issuer=meta.issuer,
            client_id=registration.client_id, resource=resource,
            dpop_jwk=self._dpop_prover().key.private_jwk() if dpop else None)
        if dpop and token.token_type.lower() != "dpop":
            raise DPoPError(f"dpop: {meta.issuer} answered a DPoP token request "
                            f"with token_type {token.token_type!r}", step="dpop",
                            url=meta.issuer)
        return self._save(token)

    def _use_device_code(self, meta: ServerMetadata) -> bool:
        if self.grant == "device_code":
            return True
        return (self._authorization_handler is None and self._redirect_uri is None
                and meta.device_authorization_endpoint is not None
                and not _browser_available())

    def _interactive(self, meta: ServerMetadata, scopes: list[str], resource: str,
                     dpop: bool) -> tuple[dict[str, Any], ClientRegistration]:
        if self._use_device_code(meta):
            registration = self._register(meta, self._redirect_uri or _DEVICE_REDIRECT)
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
            registration = self._register(meta, redirect_uri)
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
        stored = self._stored_registration(meta.issuer)
        if stored is not None and stored.redirect_uris and not self._redirect_port:
            port = urlsplit(stored.redirect_uris[0]).port
            if port:
                try:
                    return LoopbackListener(port)
                except OSError:
                    _log.info("port %d of the stored registration is taken; registering a "
                              "new redirect URI", port)
        return LoopbackListener(self._redirect_port)

    def _service_grant(self, meta: ServerMetadata, scopes: list[str], resource: str,
                       dpop: bool) -> tuple[dict[str, Any], ClientRegistration]:
        """client_credentials, jwt_bearer (workload identity) and id_jag (enterprise)."""
        registration = self._preregistered(meta)
        if registration is None:
            raise RegistrationError(
                f"registration: the {self.grant} grant needs a pre-registered client_id for "
                f"{meta.issuer}", step="registration", url=meta.issuer)
        with self._state_lock:
            self._registration = registration
        endpoint = self._endpoint(meta, registration, dpop=dpop)
        if self.grant == "client_credentials":
            return client_credentials(endpoint, scopes=scopes, resource=resource), registration
        if self.grant == "jwt_bearer":
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

