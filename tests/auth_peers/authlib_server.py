"""A real OAuth 2.1 authorization server on loopback, built on authlib's server side.

Why a real one: mcpauth's unit tests use canned responses, which agree with whatever the code
under test expects. This server is authlib's own implementation of the RFCs (the grants, PKCE,
client authentication, RFC 7591 registration, RFC 8414 metadata, RFC 9207 ``iss``), so an
end-to-end test proves mcpauth interoperates with an independent implementation, not with our
reading of the specs. The models are in memory, guarded by one lock; the server is a Flask app
served by werkzeug's threaded WSGI server in a daemon thread on ``127.0.0.1:0``.

What it does, beyond authlib's defaults:

- PKCE is mandatory and S256 only: an authorization request without ``code_challenge`` or
  with ``plain`` is refused (OAuth 2.1, and what MCP requires).
- ``/authorize`` approves at once (no user interaction) and redirects with ``code``, ``state``
  and, when ``send_iss`` is set, ``iss`` (RFC 9207).
- Refresh tokens rotate: using one revokes it, so a second use is ``invalid_grant``
  (``rotate_refresh_tokens=False`` keeps the old one and returns none).
- RFC 8707 ``resource``: recorded from the authorization request and bound to the code; a
  token request naming another resource is ``invalid_target``. Tokens remember their
  resource, and :meth:`AuthlibServer.resource_validator` (authlib's ``ResourceProtector`` with
  a ``BearerTokenValidator``) checks token, expiry, revocation, scope and resource, for the
  MCP test server in the same process.
- RFC 7662 token introspection at ``/introspect`` (authlib's ``IntrospectionEndpoint``), for
  resource servers registered with :meth:`AuthlibServer.register_introspector`; an active
  token's answer carries ``aud``: the resource it was issued for (RFC 8707), so a resource
  server can refuse a token meant for another one. Counted in :attr:`introspections`.
- Every token request is logged (:attr:`token_log`) and counted by grant type
  (:attr:`token_requests`), for assertions such as "exactly one refresh".
- The device authorization grant (RFC 8628), on authlib's ``DeviceAuthorizationEndpoint``
  and ``DeviceCodeGrant``: ``/device_authorization`` issues a device code (its ``resource``
  recorded, as for ``/authorize``), and the token endpoint answers ``authorization_pending``
  until the test plays the user: :meth:`AuthlibServer.approve_device` or
  :meth:`AuthlibServer.deny_device` with the user code (:meth:`AuthlibServer.wait_for_user_code`
  waits for one), or ``device_auto_approve=N`` approving at the N-th poll. Polling faster than
  the advertised ``interval`` (``device_interval``, 1 s by default) is answered ``slow_down``,
  so a test can assert that the client honours the interval.

Usage::

    with AuthlibServer(access_token_lifetime=2) as auth:
        auth.issuer                        # http://127.0.0.1:<port>
        auth.register_client(client_id="cc", client_secret="s3cret",
                             grant_types=["client_credentials"])
        check = auth.resource_validator("http://127.0.0.1:9/mcp", ["mcp:tools"])
        check("Bearer <token>")            # True / False
"""

from __future__ import annotations

import contextlib
import hmac
import secrets
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from authlib.common.security import generate_token
from authlib.integrations.flask_oauth2 import AuthorizationServer
from authlib.oauth2 import OAuth2Error
from authlib.oauth2.rfc6749 import (
    ClientMixin,
    InvalidRequestError,
    ResourceProtector,
    TokenMixin,
    UnauthorizedClientError,
)
from authlib.oauth2.rfc6749.grants import (
    AuthorizationCodeGrant,
    ClientCredentialsGrant,
    RefreshTokenGrant,
)
from authlib.oauth2.rfc6750 import BearerTokenGenerator, BearerTokenValidator
from authlib.oauth2.rfc7591 import ClientRegistrationEndpoint
from authlib.oauth2.rfc7636 import CodeChallenge
from authlib.oauth2.rfc7662 import IntrospectionEndpoint
from authlib.oauth2.rfc8414 import AuthorizationServerMetadata
from authlib.oauth2.rfc8628 import (
    DEVICE_CODE_GRANT_TYPE,
    DeviceAuthorizationEndpoint,
    DeviceCodeGrant,
    DeviceCredentialDict,
)
from authlib.oauth2.rfc9207 import IssuerParameter
from flask import Flask, Response, jsonify, request
from werkzeug.serving import ThreadedWSGIServer, WSGIRequestHandler

DEFAULT_SCOPES = ("mcp:tools", "offline_access")
GRANT_TYPES = ("authorization_code", "refresh_token", "client_credentials")
DEVICE_GRANT = DEVICE_CODE_GRANT_TYPE  # urn:ietf:params:oauth:grant-type:device_code
DEVICE_CODE_LIFETIME = 600
SLOW_DOWN_TOLERANCE = 0.8  # a poll sooner than this share of the interval is too fast
AUTH_METHODS = ("client_secret_basic", "client_secret_post", "none")
CODE_LIFETIME = 600


@dataclass(frozen=True)
class User:
    """The resource owner every authorization is granted for (there is no login page)."""

    name: str = "alice"

    def get_user_id(self) -> str:
        return self.name


@dataclass
class Client(ClientMixin):  # type: ignore[misc]  # authlib is untyped
    """A registered client: pre-registered by a test, or dynamically registered (RFC 7591)."""

    client_id: str
    client_secret: str | None = None
    redirect_uris: list[str] = field(default_factory=list)
    grant_types: list[str] = field(default_factory=lambda: ["authorization_code"])
    response_types: list[str] = field(default_factory=lambda: ["code"])
    token_endpoint_auth_method: str = "client_secret_basic"
    scope: str = ""  # empty: any scope the server supports
    client_name: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)  # as registered
    server_scopes: tuple[str, ...] = DEFAULT_SCOPES

    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> str | None:
        return self.redirect_uris[0] if self.redirect_uris else None

    def get_allowed_scope(self, scope: str | None) -> str:
        if not scope:
            return ""
        allowed = set(self.scope.split()) if self.scope else set(self.server_scopes)
        return " ".join(s for s in scope.split() if s in allowed)

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return redirect_uri in self.redirect_uris  # exact match, as OAuth 2.1 requires

    def check_client_secret(self, client_secret: str) -> bool:
        return self.client_secret is not None and hmac.compare_digest(
            self.client_secret.encode(), client_secret.encode())

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return endpoint != "token" or method == self.token_endpoint_auth_method

    def check_response_type(self, response_type: str) -> bool:
        return response_type in self.response_types

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type in self.grant_types


@dataclass
class AuthorizationCode:
    """An issued code, bound to its client, redirect URI, PKCE challenge and resources."""

    code: str
    client_id: str
    redirect_uri: str
    scope: str
    user: User
    code_challenge: str | None
    code_challenge_method: str | None
    resources: tuple[str, ...]
    expires_at: float

    def get_redirect_uri(self) -> str:
        return self.redirect_uri

    def get_scope(self) -> str:
        return self.scope


@dataclass
class Token(TokenMixin):  # type: ignore[misc]  # authlib is untyped
    """An issued access token and its refresh token, with what the tests assert on."""

    access_token: str
    client_id: str
    grant_type: str
    scope: str
    issued_at: float
    expires_in: int
    resource: str | None
    user: User | None
    refresh_token: str | None = None
    revoked: bool = False  # the access token
    refresh_revoked: bool = False  # the refresh token, after rotation
    client: Client | None = None

    def check_client(self, client: Client) -> bool:
        return client.client_id == self.client_id

    def get_scope(self) -> str:
        return self.scope

    def get_expires_in(self) -> int:
        return self.expires_in

    def is_expired(self) -> bool:
        return time.time() >= self.issued_at + self.expires_in

    def is_revoked(self) -> bool:
        return self.revoked

    def get_user(self) -> User | None:
        return self.user

    def get_client(self) -> Client | None:
        return self.client


@dataclass(frozen=True)
class TokenRequest:
    """One request to the token endpoint, as the server saw it and answered it."""

    grant_type: str
    form: Mapping[str, tuple[str, ...]]  # every value of every field (secrets included)
    basic_auth: bool  # an ``Authorization: Basic`` header was sent
    status: int
    response: Mapping[str, Any]  # the JSON answer (token or error)

    def value(self, name: str) -> str | None:
        """The single value of a form field, or None."""
        values = self.form.get(name) or ()
        return values[0] if values else None

    @property
    def error(self) -> str | None:
        error = self.response.get("error")
        return error if isinstance(error, str) else None


class _InvalidTarget(OAuth2Error):  # type: ignore[misc]
    """RFC 8707 §2: the requested resource is not one the grant was issued for."""

    error = "invalid_target"


class _S256Only(CodeChallenge):  # type: ignore[misc]
    """authlib's PKCE extension, made strict: a challenge is required, and only S256."""

    SUPPORTED_CODE_CHALLENGE_METHOD = ["S256"]

    def validate_code_challenge(self, grant: Any, redirect_uri: str) -> None:
        data = grant.request.payload.data
        if not data.get("code_challenge"):
            raise InvalidRequestError("PKCE is required: missing 'code_challenge'")
        if data.get("code_challenge_method") != "S256":
            raise InvalidRequestError("Only code_challenge_method=S256 is supported")
        super().validate_code_challenge(grant, redirect_uri)


def _form_resources(oauth_request: Any) -> tuple[str, ...]:
    return tuple(oauth_request.payload.datalist.get("resource", []))


class _CodeGrant(AuthorizationCodeGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = list(AUTH_METHODS)

    @property
    def owner(self) -> AuthlibServer:
        owner: AuthlibServer = self.server.owner
        return owner

    def save_authorization_code(self, code: str, oauth_request: Any) -> None:
        data = oauth_request.payload.data
        scope = getattr(oauth_request, "scope", None)
        record = AuthorizationCode(
            code=code, client_id=oauth_request.client.client_id,
            redirect_uri=oauth_request.payload.redirect_uri or "",
            scope=scope if isinstance(scope, str) else (oauth_request.payload.scope or ""),
            user=oauth_request.user, code_challenge=data.get("code_challenge"),
            code_challenge_method=data.get("code_challenge_method"),
            resources=_form_resources(oauth_request),
            expires_at=time.time() + CODE_LIFETIME)
        self.owner._codes[code] = record

    def query_authorization_code(self, code: str, client: Client) -> AuthorizationCode | None:
        record = self.owner._codes.get(code)
        if record is None or record.client_id != client.client_id \
                or record.expires_at < time.time():
            return None
        return record

    def delete_authorization_code(self, authorization_code: AuthorizationCode) -> None:
        self.owner._codes.pop(authorization_code.code, None)

    def authenticate_user(self, authorization_code: AuthorizationCode) -> User:
        return authorization_code.user

    def validate_token_request(self) -> None:
        super().validate_token_request()
        code: AuthorizationCode = self.request.authorization_code
        requested = _form_resources(self.request)
        if self.owner.require_resource and not requested:
            raise InvalidRequestError("Missing 'resource' (RFC 8707)")
        for resource in requested:
            if code.resources and resource not in code.resources:
                raise _InvalidTarget("The resource was not in the authorization request")


class _RefreshGrant(RefreshTokenGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = list(AUTH_METHODS)

    @property
    def owner(self) -> AuthlibServer:
        owner: AuthlibServer = self.server.owner
        return owner

    @property
    def INCLUDE_NEW_REFRESH_TOKEN(self) -> bool:
        return self.owner.rotate_refresh_tokens

    def authenticate_refresh_token(self, refresh_token: str) -> Token | None:
        token = self.owner._by_refresh.get(refresh_token)
        if token is None:
            return None
        if token.refresh_revoked:
            self.owner.refresh_reuse += 1
            return None
        return token

    def authenticate_user(self, refresh_token: Token) -> User:
        return refresh_token.user or User()

    def validate_token_request(self) -> None:
        super().validate_token_request()
        old: Token = self.request.refresh_token
        requested = _form_resources(self.request)
        if self.owner.require_resource and not requested:
            raise InvalidRequestError("Missing 'resource' (RFC 8707)")
        if any(resource != old.resource for resource in requested):
            raise _InvalidTarget("The resource differs from the one the grant was issued for")

    def revoke_old_credential(self, refresh_token: Token) -> None:
        if self.owner.rotate_refresh_tokens:
            refresh_token.refresh_revoked = True


class _ClientCredentialsGrant(ClientCredentialsGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic", "client_secret_post"]

    def validate_token_request(self) -> None:
        super().validate_token_request()
        owner: AuthlibServer = self.server.owner
        if owner.require_resource and not _form_resources(self.request):
            raise InvalidRequestError("Missing 'resource' (RFC 8707)")


@dataclass
class DeviceAuthorization:
    """One device authorization request (RFC 8628 §3.1) and what became of it.

    ``form`` is the request as sent; ``decision`` is None while the user has not acted, else
    True (approved) or False (denied); ``polls`` counts the token requests for this code and
    ``last_poll`` is when the latest one arrived (``time.monotonic()``).
    """

    device_code: str
    user_code: str
    client_id: str
    scope: str
    resources: tuple[str, ...]
    form: Mapping[str, tuple[str, ...]]
    expires_at: float
    decision: bool | None = None
    polls: int = 0
    last_poll: float | None = None

    def credential(self) -> DeviceCredentialDict:
        """The record authlib's ``DeviceCodeGrant`` reads (client, scope, user code, expiry)."""
        return DeviceCredentialDict(client_id=self.client_id, scope=self.scope,
                                    user_code=self.user_code, device_code=self.device_code,
                                    expires_at=self.expires_at)


class _DeviceEndpoint(DeviceAuthorizationEndpoint):  # type: ignore[misc]
    """RFC 8628 §3.1-3.2: issue a device code; ``interval`` comes from the owner."""

    @property
    def owner(self) -> AuthlibServer:
        owner: AuthlibServer = self.server.owner
        return owner

    def authenticate_client(self, oauth_request: Any) -> Client:
        client: Client = super().authenticate_client(oauth_request)
        if not client.check_grant_type(DEVICE_GRANT):  # RFC 8628 §3.1: the client's grants
            raise UnauthorizedClientError("The client is not registered for the device grant")
        return client

    def create_endpoint_response(self, oauth_request: Any) -> Any:
        self.INTERVAL = self.owner.device_interval
        self.EXPIRES_IN = DEVICE_CODE_LIFETIME
        return super().create_endpoint_response(oauth_request)

    def get_verification_uri(self) -> str:
        return f"{self.owner.issuer}/device"

    def save_device_credential(self, client_id: str, scope: str | None,
                               data: dict[str, Any]) -> None:
        form = {k: tuple(request.form.getlist(k)) for k in request.form}
        record = DeviceAuthorization(
            device_code=data["device_code"], user_code=data["user_code"], client_id=client_id,
            scope=scope or "", resources=form.get("resource", ()), form=form,
            expires_at=time.time() + DEVICE_CODE_LIFETIME)
        owner = self.owner
        with owner._lock:
            owner.device_authorizations.append(record)
            owner._device_codes[record.device_code] = record
            owner._user_codes[record.user_code] = record
            owner._device_issued.notify_all()


class _DeviceGrant(DeviceCodeGrant):  # type: ignore[misc]
    """RFC 8628 §3.4-3.5 on authlib's grant: pending until the test approves or denies,
    ``slow_down`` when polled faster than the interval, ``resource`` checked as for a code."""

    TOKEN_ENDPOINT_AUTH_METHODS = list(AUTH_METHODS)

    @property
    def owner(self) -> AuthlibServer:
        owner: AuthlibServer = self.server.owner
        return owner

    def query_device_credential(self, device_code: str) -> DeviceCredentialDict | None:
        record = self.owner._device_codes.get(device_code)
        return record.credential() if record is not None else None

    def validate_device_credential(self, credential: DeviceCredentialDict) -> User:
        record = self.owner._device_codes[credential["device_code"]]
        record.polls += 1
        auto = self.owner.device_auto_approve
        if record.decision is None and auto is not None and record.polls >= auto:
            record.decision = True
        self._too_fast = self._polled_too_fast(record)
        user: User = super().validate_device_credential(credential)
        return user

    def _polled_too_fast(self, record: DeviceAuthorization) -> bool:
        now = time.monotonic()
        previous, record.last_poll = record.last_poll, now
        interval = self.owner.device_interval
        return previous is not None and now - previous < interval * SLOW_DOWN_TOLERANCE

    def query_user_grant(self, user_code: str) -> tuple[User, bool] | None:
        record = self.owner._user_codes.get(user_code)
        if record is None or record.decision is None:
            return None
        return self.owner.user, record.decision

    def should_slow_down(self, credential: DeviceCredentialDict) -> bool:
        return self._too_fast

    def validate_token_request(self) -> None:
        super().validate_token_request()
        record = self.owner._device_codes[self.request.credential["device_code"]]
        requested = _form_resources(self.request)
        if self.owner.require_resource and not requested:
            raise InvalidRequestError("Missing 'resource' (RFC 8707)")
        for resource in requested:
            if record.resources and resource not in record.resources:
                raise _InvalidTarget("The resource was not in the device authorization request")
        self.request.device = record

    def create_token_response(self) -> Any:
        response = super().create_token_response()
        # A device code is used once (RFC 8628 §3.5: it concludes the session).
        record: DeviceAuthorization = self.request.device
        self.owner._device_codes.pop(record.device_code, None)
        return response


class _Registration(ClientRegistrationEndpoint):  # type: ignore[misc]
    """Open dynamic registration (no initial access token), as MCP servers commonly offer."""

    @property
    def owner(self) -> AuthlibServer:
        owner: AuthlibServer = self.server.owner
        return owner

    def authenticate_token(self, oauth_request: Any) -> bool:
        return True  # open registration

    def get_server_metadata(self) -> dict[str, Any]:
        return self.owner.metadata

    def generate_client_info(self, oauth_request: Any) -> dict[str, Any]:
        info: dict[str, Any] = super().generate_client_info(oauth_request)
        if (oauth_request.payload.data or {}).get("token_endpoint_auth_method") == "none":
            info.pop("client_secret", None)  # a public client gets no secret
            info.pop("client_secret_expires_at", None)
        return info

    def extract_client_metadata(self, oauth_request: Any) -> dict[str, Any]:
        metadata: dict[str, Any] = super().extract_client_metadata(oauth_request)
        # RFC 7591 §2 defaults, echoed back so the client learns what it got.
        metadata.setdefault("token_endpoint_auth_method", "client_secret_basic")
        metadata.setdefault("grant_types", ["authorization_code"])
        metadata.setdefault("response_types", ["code"])
        return metadata

    def save_client(self, client_info: dict[str, Any], client_metadata: dict[str, Any],
                    oauth_request: Any) -> Client:
        client = Client(
            client_id=client_info["client_id"], client_secret=client_info.get("client_secret"),
            redirect_uris=list(client_metadata.get("redirect_uris", [])),
            grant_types=list(client_metadata["grant_types"]),
            response_types=list(client_metadata["response_types"]),
            token_endpoint_auth_method=client_metadata["token_endpoint_auth_method"],
            scope=client_metadata.get("scope", ""),
            client_name=client_metadata.get("client_name", ""),
            metadata=dict(oauth_request.payload.data or {}),
            server_scopes=self.owner.scopes)
        self.owner._clients[client.client_id] = client
        self.owner.registrations.append(client)
        return client


class _Introspection(IntrospectionEndpoint):  # type: ignore[misc]
    """RFC 7662 for the resource servers the test registered as introspectors; ``aud`` is
    the token's RFC 8707 resource (left out when the token was issued for none)."""

    CLIENT_AUTH_METHODS = ["client_secret_basic", "client_secret_post"]

    @property
    def owner(self) -> AuthlibServer:
        owner: AuthlibServer = self.server.owner
        return owner

    def query_token(self, token_string: str, token_type_hint: str | None) -> Token | None:
        with self.owner._lock:
            return self.owner._by_access.get(token_string)

    def check_permission(self, token: Token, client: Client, oauth_request: Any) -> bool:
        return client.client_id in self.owner._introspectors

    def introspect_token(self, token: Token) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "active": True, "client_id": token.client_id, "token_type": "Bearer",
            "scope": token.scope, "iss": self.owner.issuer, "iat": int(token.issued_at),
            "exp": int(token.issued_at + token.expires_in)}
        if token.user is not None:
            payload["sub"] = token.user.get_user_id()
        if token.resource is not None:
            payload["aud"] = token.resource
        return payload


class _Issuer(IssuerParameter):  # type: ignore[misc]
    def __init__(self, owner: AuthlibServer) -> None:
        self.owner = owner

    def get_issuer(self) -> str | None:
        return self.owner.issuer if self.owner.send_iss else None


class _Validator(BearerTokenValidator):  # type: ignore[misc]
    """authlib's bearer validation (token known, unexpired, unrevoked, scope) plus the
    RFC 8707 audience: the token must have been issued for this resource."""

    def __init__(self, owner: AuthlibServer, resource: str | None) -> None:
        super().__init__()
        self.owner = owner
        self.resource = resource

    def authenticate_token(self, token_string: str) -> Token | None:
        with self.owner._lock:
            return self.owner._by_access.get(token_string)

    def validate_token(self, token: Token | None, scopes: Sequence[str] | None,
                       oauth_request: Any) -> None:
        super().validate_token(token, scopes, oauth_request)
        if self.resource is not None and token is not None and token.resource != self.resource:
            raise _InvalidTarget("The token was issued for another resource")


@dataclass(frozen=True)
class _HeaderRequest:
    """The one thing authlib's ResourceProtector reads from a request: its headers."""

    headers: Mapping[str, str]


class _QuietHandler(WSGIRequestHandler):
    """No access log on stderr: the tests assert on ``token_log`` instead."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass


class _WSGIServer(ThreadedWSGIServer):
    """werkzeug's threaded server (what ``make_server(threaded=True)`` builds), naming and
    tracking its connection threads so :meth:`AuthlibServer.stop` can drop keep-alive
    connections and join every thread."""

    def __init__(self, app: Flask) -> None:
        super().__init__("127.0.0.1", 0, app, handler=_QuietHandler)
        self.conn_lock = threading.Lock()
        self.conn_threads: list[threading.Thread] = []
        self.conn_sockets: set[socket.socket] = set()
        self.accepted = 0

    def process_request(self, req: Any, client_address: Any) -> None:
        self.accepted += 1
        thread = threading.Thread(
            target=self.process_request_thread, args=(req, client_address),
            name=f"test-authlib-server-{self.server_port}-conn-{self.accepted}", daemon=True)
        with self.conn_lock:
            self.conn_sockets.add(req)
            self.conn_threads[:] = [t for t in self.conn_threads if t.is_alive()]
            self.conn_threads.append(thread)
        thread.start()

    def shutdown_request(self, req: Any) -> None:
        with self.conn_lock:
            self.conn_sockets.discard(req)
        super().shutdown_request(req)


class AuthlibServer:
    """The running authorization server: endpoints, models, counters and a clean ``stop()``.

    Options (all but ``scopes`` may be changed while it runs):

    - ``access_token_lifetime``: seconds, the ``expires_in`` of every access token.
    - ``scopes``: ``scopes_supported`` (``offline_access`` included by default).
    - ``rotate_refresh_tokens``: a refresh issues a new refresh token and revokes the old.
    - ``send_iss``: add ``iss`` to authorization responses and advertise
      ``authorization_response_iss_parameter_supported``.
    - ``require_resource``: token requests without ``resource`` are ``invalid_request``.
    - ``approve``: False makes ``/authorize`` answer ``access_denied``.
    - ``registration``: False leaves ``registration_endpoint`` out of the metadata (and 404s).
    - ``device``: False leaves the device grant out of the metadata (``/device_authorization``
      404s). ``device_interval``: the polling interval it advertises, in seconds.
      ``device_auto_approve``: approve a device code at its N-th poll (None: wait for
      :meth:`approve_device` / :meth:`deny_device`).
    """

    def __init__(self, *, access_token_lifetime: int = 3600,
                 scopes: Sequence[str] = DEFAULT_SCOPES, rotate_refresh_tokens: bool = True,
                 send_iss: bool = True, require_resource: bool = False, approve: bool = True,
                 registration: bool = True, device: bool = True, device_interval: int = 1,
                 device_auto_approve: int | None = None) -> None:
        self.access_token_lifetime = access_token_lifetime
        self.scopes = tuple(scopes)
        self.rotate_refresh_tokens = rotate_refresh_tokens
        self.send_iss = send_iss
        self.require_resource = require_resource
        self.approve = approve
        self.registration = registration
        self.device = device
        self.device_interval = device_interval
        self.device_auto_approve = device_auto_approve
        self.user = User()
        self._lock = threading.RLock()  # every model, and one token request at a time
        self._device_issued = threading.Condition(self._lock)
        self._device_codes: dict[str, DeviceAuthorization] = {}  # unused device codes
        self._user_codes: dict[str, DeviceAuthorization] = {}
        self.device_authorizations: list[DeviceAuthorization] = []  # in order
        self._clients: dict[str, Client] = {}
        self._codes: dict[str, AuthorizationCode] = {}
        self._by_access: dict[str, Token] = {}
        self._by_refresh: dict[str, Token] = {}
        self.tokens: list[Token] = []  # every token issued, in order
        self.registrations: list[Client] = []  # dynamically registered clients, in order
        self.authorizations: list[dict[str, list[str]]] = []  # /authorize query strings
        self.token_requests: Counter[str] = Counter()  # by grant_type, failures included
        self.token_log: list[TokenRequest] = []
        self.refresh_reuse = 0  # refreshes refused: refresh token spent (rotated) or revoked
        self.resource_checks: Counter[bool] = Counter()  # resource_validator verdicts
        self._introspectors: set[str] = set()  # client ids allowed to introspect
        self.introspections = 0  # requests to /introspect, refused ones included
        self.errors: list[str] = []  # exceptions inside the app; the fixture fails on any

        self.app = self._make_app()
        self._httpd = _WSGIServer(self.app)
        self.port: int = self._httpd.server_port
        self.issuer = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={
            "poll_interval": 0.05}, name=f"test-authlib-server-{self.port}", daemon=True)
        self._thread.start()
        self._stopped = False

    # ---- public helpers ------------------------------------------------------------

    @property
    def metadata(self) -> dict[str, Any]:
        """The RFC 8414 document (validated by authlib's ``AuthorizationServerMetadata``)."""
        issuer = self.issuer
        data: dict[str, Any] = {
            "issuer": issuer,
            "authorization_endpoint": f"{issuer}/authorize",
            "token_endpoint": f"{issuer}/token",
            "scopes_supported": list(self.scopes),
            "response_types_supported": ["code"],
            "response_modes_supported": ["query"],
            "grant_types_supported": [*GRANT_TYPES, *([DEVICE_GRANT] if self.device else [])],
            "token_endpoint_auth_methods_supported": list(AUTH_METHODS),
            "code_challenge_methods_supported": ["S256"],
            "authorization_response_iss_parameter_supported": self.send_iss,
        }
        if self.registration:
            data["registration_endpoint"] = f"{issuer}/register"
        if self.device:
            data["device_authorization_endpoint"] = f"{issuer}/device_authorization"
        data["introspection_endpoint"] = f"{issuer}/introspect"
        AuthorizationServerMetadata(data).validate()
        return data

    def register_client(self, *, client_id: str | None = None, client_secret: str | None = None,
                        redirect_uris: Sequence[str] = (),
                        grant_types: Sequence[str] = ("authorization_code", "refresh_token"),
                        token_endpoint_auth_method: str | None = None,
                        scope: str = "") -> Client:
        """Pre-register a client (as an administrator would); returns it."""
        method = token_endpoint_auth_method or (
            "client_secret_basic" if client_secret else "none")
        client = Client(client_id=client_id or generate_token(24), client_secret=client_secret,
                        redirect_uris=list(redirect_uris), grant_types=list(grant_types),
                        token_endpoint_auth_method=method, scope=scope,
                        server_scopes=self.scopes)
        with self._lock:
            self._clients[client.client_id] = client
        return client

    def register_introspector(self, *, client_id: str = "resource-server",
                              client_secret: str | None = None) -> Client:
        """Register a resource server allowed to introspect tokens (RFC 7662); it has no
        grant of its own. Returns it (its ``client_secret`` is drawn when not given)."""
        client = Client(client_id=client_id, client_secret=client_secret or generate_token(32),
                        grant_types=[], response_types=[], server_scopes=self.scopes)
        with self._lock:
            self._clients[client.client_id] = client
            self._introspectors.add(client.client_id)
        return client

    def client(self, client_id: str) -> Client | None:
        with self._lock:
            return self._clients.get(client_id)

    def token(self, access_token: str) -> Token | None:
        """The record of an issued access token (None when this server never issued it)."""
        with self._lock:
            return self._by_access.get(access_token)

    def requests_of(self, grant_type: str) -> list[TokenRequest]:
        """The logged token requests of one grant type, in order."""
        with self._lock:
            return [r for r in self.token_log if r.grant_type == grant_type]

    def wait_for_user_code(self, timeout: float = 10.0, *, index: int = 0) -> str:
        """The user code of the ``index``-th device authorization, waiting for it to be
        issued (TimeoutError after ``timeout`` seconds)."""
        with self._device_issued:
            if not self._device_issued.wait_for(
                    lambda: len(self.device_authorizations) > index, timeout):
                raise TimeoutError(f"no device authorization #{index} within {timeout} s")
            return self.device_authorizations[index].user_code

    def approve_device(self, user_code: str) -> None:
        """The user signs in and approves the device login of ``user_code``."""
        self._decide(user_code, True)

    def deny_device(self, user_code: str) -> None:
        """The user refuses the device login of ``user_code``: the next poll is
        ``access_denied``."""
        self._decide(user_code, False)

    def _decide(self, user_code: str, approved: bool) -> None:
        with self._lock:
            record = self._user_codes.get(user_code)
            if record is None:
                raise KeyError(f"unknown user code {user_code!r}")
            record.decision = approved

    def revoke_access_tokens(self) -> None:
        """Revoke every access token issued so far (refresh tokens stay valid): the next
        resource request is a 401 that only a refresh cures."""
        with self._lock:
            for token in self.tokens:
                token.revoked = True

    def revoke_refresh_tokens(self) -> None:
        """Revoke every refresh token issued so far: the next refresh is ``invalid_grant``."""
        with self._lock:
            for token in self.tokens:
                token.refresh_revoked = True

    def resource_validator(self, resource: str | None,
                           scopes: Sequence[str] = ("mcp:tools",),
                           ) -> Callable[[str | None], bool]:
        """A check for a resource server: ``check(authorization_header) -> bool``.

        authlib's ``ResourceProtector`` parses the header (``Bearer <token>``), and its
        ``BearerTokenValidator`` requires a token this server issued, unexpired, unrevoked,
        carrying ``scopes``; ``resource`` (None: any) must be the token's RFC 8707 resource.
        """
        protector = ResourceProtector()
        protector.register_token_validator(_Validator(self, resource))
        required = list(scopes)

        def check(authorization: str | None) -> bool:
            headers = {"Authorization": authorization} if authorization else {}
            try:
                protector.validate_request(required, _HeaderRequest(headers))
                ok = True
            except OAuth2Error:
                ok = False
            with self._lock:
                self.resource_checks[ok] += 1
            return ok

        return check

    def stop(self) -> None:
        """Stop serving, drop keep-alive connections and join every thread (idempotent)."""
        if self._stopped:
            return
        self._stopped = True
        self._httpd.shutdown()
        with self._httpd.conn_lock:
            sockets = list(self._httpd.conn_sockets)
            threads = list(self._httpd.conn_threads)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._httpd.server_close()
        self._thread.join(5)
        for thread in threads:
            thread.join(5)

    def __enter__(self) -> AuthlibServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- the Flask app ---------------------------------------------------------------

    def _make_app(self) -> Flask:
        app = Flask(f"authlib-server-{id(self)}")
        app.config["OAUTH2_SCOPES_SUPPORTED"] = list(self.scopes)
        server = AuthorizationServer(app, query_client=self.client, save_token=self._save_token)
        server.owner = self
        server.register_token_generator("default", BearerTokenGenerator(
            lambda *a, **k: generate_token(42), lambda *a, **k: generate_token(48),
            lambda client, grant_type: self.access_token_lifetime))
        server.register_grant(_CodeGrant, [_S256Only(required=True)])
        server.register_grant(_RefreshGrant)
        server.register_grant(_ClientCredentialsGrant)
        server.register_grant(_DeviceGrant)
        server.register_endpoint(_Registration)
        server.register_endpoint(_DeviceEndpoint)
        server.register_endpoint(_Introspection)
        server.register_extension(_Issuer(self))
        self._authz = server

        app.add_url_rule("/.well-known/oauth-authorization-server", "metadata", self._metadata)
        app.add_url_rule("/authorize", "authorize", self._authorize)
        app.add_url_rule("/token", "token", self._token, methods=["POST"])
        app.add_url_rule("/register", "register", self._register, methods=["POST"])
        app.add_url_rule("/introspect", "introspect", self._introspect, methods=["POST"])
        app.add_url_rule("/device_authorization", "device_authorization",
                         self._device_authorization, methods=["POST"])

        @app.errorhandler(Exception)
        def _crash(exc: Exception) -> Response:
            code = getattr(exc, "code", None)
            if isinstance(code, int) and code < 500:  # a werkzeug HTTPException (404, 405)
                return Response(str(exc), status=code)
            with self._lock:
                self.errors.append(f"{request.method} {request.path}: {exc!r}")
            return Response("internal error", status=500)

        return app

    def _metadata(self) -> Response:
        return jsonify(self.metadata)

    def _authorize(self) -> Response:
        with self._lock:
            self.authorizations.append(parse_qs(urlsplit(request.url).query))
        oauth_request = self._authz.create_oauth2_request(None)
        try:
            grant = self._authz.get_authorization_grant(oauth_request)
        except OAuth2Error as error:
            error.state = oauth_request.payload.state
            response: Response = self._authz.handle_error_response(oauth_request, error)
            return response
        user = self.user if self.approve else None
        with self._lock:
            # Validates the request (client, redirect URI, PKCE, scope) and redirects with a
            # code, or with an error when the redirect URI is valid (else a 400 here).
            response = self._authz.create_authorization_response(
                oauth_request, grant=grant, grant_user=user)
        return response

    def _token(self) -> Response:
        grant_type = request.form.get("grant_type", "")
        form = {k: tuple(request.form.getlist(k)) for k in request.form}
        basic = (request.headers.get("Authorization") or "").lower().startswith("basic ")
        with self._lock:  # one at a time: a rotating refresh token is spent exactly once
            response: Response = self._authz.create_token_response()
            body = response.get_json(silent=True)
            self.token_requests[grant_type] += 1
            self.token_log.append(TokenRequest(grant_type, form, basic, response.status_code,
                                               body if isinstance(body, dict) else {}))
        return response

    def _register(self) -> Response:
        if not self.registration:
            return Response("not found", status=404)
        with self._lock:
            response: Response = self._authz.create_endpoint_response(
                ClientRegistrationEndpoint.ENDPOINT_NAME)
        return response

    def _introspect(self) -> Response:
        with self._lock:
            self.introspections += 1
            response: Response = self._authz.create_endpoint_response(
                _Introspection.ENDPOINT_NAME)
        return response

    def _device_authorization(self) -> Response:
        if not self.device:
            return Response("not found", status=404)
        with self._lock:
            response: Response = self._authz.create_endpoint_response(
                DeviceAuthorizationEndpoint.ENDPOINT_NAME)
        return response

    def _save_token(self, token_data: Mapping[str, Any], oauth_request: Any) -> None:
        grant_type = oauth_request.payload.grant_type or ""
        resource: str | None
        if grant_type == "authorization_code":
            code: AuthorizationCode = oauth_request.authorization_code
            requested = _form_resources(oauth_request) or code.resources
            resource = requested[0] if requested else None
        elif grant_type == "refresh_token":
            resource = oauth_request.refresh_token.resource
        elif grant_type == DEVICE_GRANT:
            device: DeviceAuthorization = oauth_request.device
            requested = _form_resources(oauth_request) or device.resources
            resource = requested[0] if requested else None
        else:
            requested = _form_resources(oauth_request)
            resource = requested[0] if requested else None
        token = Token(access_token=token_data["access_token"],
                      client_id=oauth_request.client.client_id, grant_type=grant_type,
                      scope=token_data.get("scope", ""), issued_at=time.time(),
                      expires_in=int(token_data.get("expires_in", 0)), resource=resource,
                      user=oauth_request.user, refresh_token=token_data.get("refresh_token"),
                      client=oauth_request.client)
        if token.refresh_token is None and grant_type == "refresh_token":
            # No rotation: the old refresh token keeps working for the new access token.
            old: Token = oauth_request.refresh_token
            token.refresh_token = old.refresh_token
        with self._lock:
            self.tokens.append(token)
            self._by_access[token.access_token] = token
            if token.refresh_token:
                self._by_refresh[token.refresh_token] = token


def new_pkce_pair() -> tuple[str, str]:
    """A fresh ``(code_verifier, S256 code_challenge)`` for tests that drive the flow by hand."""
    from authlib.oauth2.rfc7636 import create_s256_code_challenge

    verifier = secrets.token_urlsafe(48)
    return verifier, create_s256_code_challenge(verifier)


def iter_threads(port: int) -> Iterator[threading.Thread]:
    """The live threads of the server on ``port`` (for leak checks)."""
    prefix = f"test-authlib-server-{port}"
    return (t for t in threading.enumerate() if t.name.startswith(prefix) and t.is_alive())


__all__ = [
    "DEFAULT_SCOPES",
    "DEVICE_GRANT",
    "AuthlibServer",
    "AuthorizationCode",
    "Client",
    "DeviceAuthorization",
    "Token",
    "TokenRequest",
    "User",
    "iter_threads",
    "new_pkce_pair",
]
