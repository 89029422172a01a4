"""``OAuthProvider``: the orchestrator that takes an MCP client from a 401 to a valid token.

It fills mcpsync's ``AuthHooks`` protocol structurally (``headers``, ``on_unauthorized``,
``on_response``) without importing mcpsync, and drives the other mcpauth modules: the challenge
parser, discovery, registration, the grants, DPoP and the token stores
(docs/auth.md, "The provider's methods").

Thread contract: every public method is safe from many threads at once. ``headers()`` is the
hot path: it hands out the cached token and never holds a lock across a request. Inside the
refresh margin one thread refreshes while the others keep using the still-valid token; only
once it has expired do they wait, on that same refresh. One refresh or authorization runs per
credential key (the store's ``locked(key)`` makes that hold across processes too), and one
interactive login runs at a time in the process.

This module keeps the decisions (when to refresh, step up, migrate or authorize, and the
locking that makes them safe); three private collaborators do the rest: ``_token``
(the current token and DPoP key, in memory and in the store), ``_registrations``
(which client the provider is at each authorization server) and ``_grants`` (how
each grant runs).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

import requests

from mcpauth._http import HttpPolicy, check_url, display_url
from mcpauth.challenge import parse_challenges, select_challenge
from mcpauth.discovery import (
    ResourceMetadata,
    ServerMetadata,
    authorization_server_at,
    canonical_resource,
    discover_authorization_server,
    discover_resource,
    legacy_authorization_server,
    resource_covers,
    same_identifier,
)
from mcpauth.dpop import check_server_supports_dpop
from mcpauth.errors import (
    AuthError,
    AuthorizationServerChanged,
    DPoPError,
    LoginRequired,
    TokenRequestError,
)
from mcpauth.flows import DeviceCode, TokenEndpoint, refresh
from mcpauth.provider._grants import GRANTS, INTERACTIVE_GRANTS, GrantRunner
from mcpauth.provider._registrations import ClientRegistrations, Credential as Credential
from mcpauth.provider._token import TokenCache
from mcpauth.registration import ClientRegistration, check_client_metadata_url
from mcpauth.tokens import (
    MemoryTokenStore,
    Token,
    TokenStore,
    credential_key,
)

__all__ = ["GRANTS", "OAuthProvider"]

_log = logging.getLogger("mcpauth.provider")

# Only one interactive login at a time in a process: two browser tabs racing for the user's
# attention (or two stdin prompts) is worse than a short wait.
_INTERACTIVE_LOCK = threading.Lock()


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

    ``authorization_server_metadata_url`` skips authorization-server discovery: the metadata
    is read from that URL (https, loopback excepted). With protected-resource metadata its
    ``issuer`` must still be the one the resource names.

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
        authorization_server_metadata_url: str | None = None,
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
        if isinstance(redirect_port, bool) or not isinstance(redirect_port, int) \
                or not 0 <= redirect_port <= 65535:
            raise ValueError(f"redirect_port must be a port number 0-65535 (0: any free "
                             f"port), got {redirect_port!r}")
        # The server URL is fetched from too (its well-known metadata): the https rule now,
        # not at the first 401. No DNS here: block_private_networks applies on each fetch.
        check_url(server_url, HttpPolicy(allow_insecure_http=allow_insecure_http),
                  what="MCP server URL", step="discovery")
        if client_metadata_url is not None:
            check_client_metadata_url(client_metadata_url)
        self.server_url = server_url
        self.grant = grant
        self.interactive = interactive
        self._store: TokenStore = store if store is not None else MemoryTokenStore()
        self._scopes = list(scopes) if scopes is not None else None
        self._dpop_setting = dpop
        self._policy = HttpPolicy(allow_insecure_http=allow_insecure_http,
                                  block_private_networks=block_private_networks)
        self._choose = choose_authorization_server
        if authorization_server_metadata_url is not None:
            check_url(authorization_server_metadata_url, self._policy,
                      what="authorization server metadata URL", step="discovery")
        self._as_metadata_url = authorization_server_metadata_url
        self._protocol_version = protocol_version
        self._session = session if session is not None else requests.Session()
        self._own_session = session is None
        self._canonical = canonical_resource(server_url)
        self._registrations = ClientRegistrations(
            store=self._store, session=self._session, policy=self._policy,
            client_id=client_id, client_secret=client_secret, private_key=private_key,
            signing_alg=signing_alg, client_metadata_url=client_metadata_url,
            client_name=client_name)
        self._grants = GrantRunner(
            registrations=self._registrations, endpoint=self._endpoint,
            session=self._session, policy=self._policy,
            authorization_handler=authorization_handler,
            device_code_handler=device_code_handler, redirect_uri=redirect_uri,
            redirect_port=redirect_port, assertion_provider=assertion_provider,
            id_token=id_token, idp_token_endpoint=idp_token_endpoint, idp_issuer=idp_issuer,
            idp_client_id=idp_client_id, idp_client_secret=idp_client_secret)

        # The token and its DPoP key, in memory and in the store (their own lock).
        self._tokens = TokenCache(self._store, self._canonical)
        # State guarded by _state_lock (held briefly, never across a network call).
        self._state_lock = threading.Lock()
        self._prm: ResourceMetadata | None = None
        self._meta: ServerMetadata | None = None
        self._requested_scopes: list[str] = []
        self._dpop_required = dpop is True
        # One refresh or authorization at a time for this provider; with the store's
        # locked(key) this makes the single flight per credential key.
        self._flight = threading.RLock()
        # (resource, url, covered) of the last headers() call: most calls repeat one URL.
        self._last_cover: tuple[str, str, bool] | None = None

    # --- the AuthHooks protocol -------------------------------------------------------------

    def headers(self, method: str, url: str) -> Mapping[str, str]:
        """The auth headers of one request: ``{}`` before any token, else Bearer or DPoP.

        ``{}`` too for a ``url`` outside the resource the token was issued for (same origin
        and a path-segment prefix, as :func:`~mcpauth.discovery.resource_covers` decides):
        whoever asks, a token never goes to another server. Inside the refresh margin the
        first thread to get here refreshes (its own request waits); the others keep the
        current token. Past expiry everyone waits for that refresh.
        """
        token = self._tokens.current()
        if token is None:
            return {}
        if not self._covers(token.resource or self._canonical, url):
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
                self._tokens.prover().record_nonce(challenge.url or self.server_url, nonce)
                return
            _log.debug("use_dpop_nonce challenge without a DPoP-Nonce header")
        failing = _token_of(challenge.authorization)
        with self._flight:
            current = self._tokens.current()
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
            current = self._tokens.current()
            if current is not None and current.refresh_token and self._refresh_now(current):
                return
            self._authorize(self._initial_scopes(wanted))

    def on_response(self, headers: Mapping[str, str]) -> None:
        """Keep the newest ``DPoP-Nonce`` the MCP server sent (nonces rotate)."""
        nonce = headers.get("DPoP-Nonce")
        prover = self._tokens.existing_prover
        if nonce and prover is not None:
            prover.record_nonce(self.server_url, nonce)

    # --- public operations --------------------------------------------------------------

    @property
    def token(self) -> Token | None:
        """The current token (loaded from the store on first use), or None."""
        return self._tokens.current()

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
            self._tokens.clear()

    def close(self) -> None:
        """Close the HTTP session this provider made (a given session is left alone)."""
        if self._own_session:
            self._session.close()

    def __repr__(self) -> str:
        return (f"OAuthProvider({display_url(self.server_url)!r}, grant={self.grant!r}, "
                f"interactive={self.interactive!r})")

    # --- headers ----------------------------------------------------------------------------

    def _covers(self, resource: str, url: str) -> bool:
        """Whether ``url`` lies inside ``resource``; the last answer is cached (hot path)."""
        last = self._last_cover
        if last is not None and last[0] == resource and last[1] == url:
            return last[2]
        covered = resource_covers(resource, url)
        if not covered:
            _log.warning("not sending the token for %s to %s: that URL is outside the "
                         "resource the token was issued for", display_url(resource),
                         display_url(url))
        self._last_cover = (resource, url, covered)
        return covered

    def _auth_headers(self, token: Token, method: str, url: str) -> dict[str, str]:
        if token.token_type.lower() == "dpop":
            return self._tokens.prover().resource_headers(method, url, token.access_token)
        return {"Authorization": f"Bearer {token.access_token}"}

    # --- refresh ----------------------------------------------------------------------------

    def _can_renew(self, token: Token) -> bool:
        """Whether ``headers()`` may renew without a person: a refresh token, or a grant that
        can simply run again."""
        return bool(token.refresh_token) or self.grant not in INTERACTIVE_GRANTS

    def _renew_quietly(self, stale: Token) -> Token:
        """Refresh (or re-run a non-interactive grant) from ``headers()``.

        Another thread or process may have done it already. Failing, the old token is sent and
        its 401 brings ``on_unauthorized``; only an error while the old token has expired is
        raised, because sending it would be pointless.
        """
        current = self._tokens.current()
        if current is not None and current is not stale and not current.refresh_due():
            return current
        try:
            if stale.refresh_token and self._refresh_now(stale):
                return self._tokens.current() or stale
            if self.grant not in INTERACTIVE_GRANTS:
                # No (usable) refresh token: a service grant simply runs again.
                return self._authorize(self._requested_scopes or self._initial_scopes([]))
            # A person is needed: send what we have and let its 401 reach on_unauthorized.
            return self._tokens.current() or stale
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
                self._tokens.adopt(stored)          # another process refreshed it meanwhile
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
            registration = self._registrations.for_client(meta, stale.client_id)
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
                    self._tokens.drop()
                    return False
                raise
            token = Token.from_response(
                data, requested_scope=stale.scope, issuer=stale.issuer,
                client_id=stale.client_id, resource=stale.resource,
                previous_refresh_token=refresh_token, dpop_jwk=stale.dpop_jwk)
            self._store.put(key, token.to_dict())
        self._tokens.adopt(token)
        return True

    # --- discovery --------------------------------------------------------------------------

    def _locate(self, hint: str | None) -> None:
        """Fetch the resource metadata again and settle the authorization server (step 5
        of docs/auth.md, "What happens on the first 401").

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
        token = self._tokens.current()
        if old is None and token is not None:
            old = token.issuer or None
        meta: ServerMetadata | None = None
        if issuer is None and self._as_metadata_url is not None:
            meta = authorization_server_at(self._as_metadata_url, session=self._session,
                                           policy=self._policy,
                                           protocol_version=self._protocol_version)
            issuer = meta.issuer
        elif issuer is None:
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
                                             policy=self._policy,
                                             metadata_url=self._as_metadata_url)
        with self._state_lock:
            self._meta = meta
        return meta

    def _migrate(self, old: str, new: str) -> None:
        """The resource moved to another authorization server (SEP-2352).

        Pre-registered credentials are bound to their issuer: a str ``client_id`` belongs to
        the old one, so only a per-issuer mapping naming the new issuer lets this proceed.
        Dynamic and CIMD registrations of the old issuer are forgotten, here and in the store.
        """
        if self._registrations.bound_to_old_issuer(old, new):
            raise AuthorizationServerChanged(
                f"discovery: the authorization server of {display_url(self.server_url)} "
                f"changed from {old} to {new}, and the pre-registered client_id belongs to {old}; "
                f"configure credentials for {new}",
                step="discovery", url=new, old_issuer=old, new_issuer=new)
        _log.info("authorization server of %s changed from %s to %s: registering anew",
                  display_url(self.server_url), old, new)
        self._registrations.forget_issuer(old)
        self._tokens.forget(self._tokens.current())
        with self._state_lock:
            self._meta = None

    # --- scopes -----------------------------------------------------------------------------

    def _initial_scopes(self, challenged: Sequence[str]) -> list[str]:
        """The challenge's scope, else the caller's, else the resource's scopes_supported."""
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
        if self.grant in INTERACTIVE_GRANTS:
            return _union(scopes, ["offline_access"])
        return scopes

    # --- the token endpoint -----------------------------------------------------------------

    def _endpoint(self, meta: ServerMetadata, registration: ClientRegistration, *,
                  dpop: bool) -> TokenEndpoint:
        prover = None
        if dpop:
            check_server_supports_dpop(meta.dpop_signing_alg_values_supported,
                                       issuer=meta.issuer)
            prover = self._tokens.prover()
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
        if self.grant in INTERACTIVE_GRANTS:
            if not self.interactive:
                raise LoginRequired(
                    f"authorization: logging in to {meta.issuer} for "
                    f"{display_url(self.server_url)} needs a person, and interactive=False; "
                    "run `mcpsync login` or use a non-interactive grant",
                    step="authorization", url=meta.issuer)
            with _INTERACTIVE_LOCK:
                requested = self._with_offline_access(scopes, meta)
                data, registration = self._grants.interactive(self.grant, meta, requested,
                                                              resource, dpop)
        else:
            requested = self._with_offline_access(scopes, meta)
            data, registration = self._grants.service(self.grant, meta, requested, resource, dpop)
        with self._state_lock:
            self._requested_scopes = list(scopes)
        token = Token.from_response(
            data, requested_scope=" ".join(requested) or None, issuer=meta.issuer,
            client_id=registration.client_id, resource=resource,
            dpop_jwk=self._tokens.prover().key.private_jwk() if dpop else None)
        if dpop and token.token_type.lower() != "dpop":
            raise DPoPError(f"dpop: {meta.issuer} answered a DPoP token request "
                            f"with token_type {token.token_type!r}", step="dpop",
                            url=meta.issuer)
        return self._tokens.save(token)
