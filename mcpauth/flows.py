"""The OAuth grants an MCP client runs: authorization code with PKCE,
refresh, client credentials, device code (RFC 8628), the ID-JAG token exchange (RFC 8693)
and the JWT-bearer grant (RFC 7523).

authlib builds what it is good at: the PKCE S256 challenge and the client authentication of
a token request (``client_secret_basic``, ``client_secret_post``, ``none``, and
``private_key_jwt`` with its signed assertion). We do not let authlib *send* anything: every
request leaves through :func:`mcpauth._http.request`, so the timeouts, the 1 MiB cap, the
https rule and "a POST never follows a redirect" hold for token requests exactly as for
discovery. authlib's client helpers are applied to a form and a header dict, and the result
is handed to that one door.

Written by hand because authlib's versions are server-side: the RFC 9207 ``iss`` check of
the authorization response, the RFC 8628 polling client and the RFC 8693 exchange.
"""

from __future__ import annotations

import secrets
import sys
import time
import webbrowser
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import parse_qs, parse_qsl, quote, urlencode, urlsplit

import requests
from authlib.common.urls import add_params_to_uri
from authlib.oauth2.auth import ClientAuth
from authlib.oauth2.rfc7523 import PrivateKeyJWT
from authlib.oauth2.rfc7636 import create_s256_code_challenge
from joserfc.jwk import import_key

from ._http import HttpPolicy, HttpResponse, display_url, is_loopback_host, request
from ._loopback import LoopbackListener
from ._urls import screen
from .discovery import ServerMetadata, same_identifier
from .dpop import DPoPProver
from .errors import (
    AuthError,
    AuthorizationDenied,
    DPoPError,
    InsecureURL,
    IssMismatch,
    LoginRequired,
    LoginTimeout,
    StateMismatch,
    TokenRequestError,
)
from .registration import ClientRegistration

__all__ = [
    "DeviceCode",
    "PendingAuthorization",
    "TokenEndpoint",
    "authorization_url",
    "client_credentials",
    "device_authorization",
    "exchange_code",
    "id_jag_exchange",
    "jwt_bearer",
    "new_pending",
    "parse_callback",
    "refresh",
    "run_browser_login",
]

GRANT_DEVICE_CODE = "urn:ietf:params:oauth:grant-type:device_code"
GRANT_TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
GRANT_JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
TOKEN_TYPE_ID_JAG = "urn:ietf:params:oauth:token-type:id-jag"
TOKEN_TYPE_ID_TOKEN = "urn:ietf:params:oauth:token-type:id_token"

VERIFIER_LENGTH = 64
"""PKCE verifier length (RFC 7636 allows 43-128; 64 is well inside)."""
_UNRESERVED = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"
ASSERTION_LIFETIME = 300
"""Seconds a ``private_key_jwt`` client assertion is valid (docs/auth.md, "In a service")."""
SLOW_DOWN_STEP = 5.0
"""Seconds RFC 8628 §3.5 adds to the polling interval on ``slow_down``."""
DEFAULT_INTERVAL = 5.0
_DEFAULT_DEVICE_LIFETIME = 1800.0

# Form fields whose values are secrets: never echoed, even when a server quotes them back.
_SECRET_FIELDS = ("code", "code_verifier", "refresh_token", "client_secret", "client_assertion",
                  "assertion", "subject_token", "device_code")
_MAX_DESCRIPTION = 300


# --- the token endpoint -------------------------------------------------------------------


def _key_type(alg: str) -> Literal["EC", "RSA", "OKP"]:
    """joserfc needs the key type of a PEM; the algorithm names it."""
    if alg.startswith("ES"):
        return "EC"
    if alg.startswith(("RS", "PS")):
        return "RSA"
    if alg in ("EdDSA", "Ed25519", "Ed448"):
        return "OKP"
    raise AuthError(f"token request: unsupported private_key_jwt signing algorithm {alg!r}",
                    step="token request")


def _client_auth(registration: ClientRegistration, audience: str, *, step: str,
                 url: str) -> Any:
    """The authlib ``ClientAuth`` for ``registration``'s token endpoint auth method.

    ``private_key_jwt`` is built fresh per request: authlib's ``PrivateKeyJWT`` signs the
    assertion, and our claims override its defaults so that ``aud`` is the issuer (not the
    token endpoint), ``exp`` is ``iat + 300`` and every assertion has its own ``jti``.
    """
    method = registration.token_endpoint_auth_method
    client_id = registration.client_id
    if method == "none":
        return ClientAuth(client_id, None, "none")
    if method in ("client_secret_basic", "client_secret_post"):
        if not registration.client_secret:
            raise AuthError(f"{step}: the client {client_id!r} uses {method} but has no "
                            "client_secret", step=step, url=display_url(url))
        if method == "client_secret_post":
            return ClientAuth(client_id, registration.client_secret, method)
        # RFC 6749 §2.3.1: both parts are form-urlencoded before the Basic encoding
        # (authlib's server and the conformance suite decode them again).
        return ClientAuth(quote(client_id, safe=""), quote(registration.client_secret, safe=""),
                          method)
    if method == "private_key_jwt":
        if not registration.private_key:
            raise AuthError(f"{step}: the client {client_id!r} uses private_key_jwt but has no "
                            "private key", step=step, url=display_url(url))
        alg = registration.signing_alg or "ES256"
        try:
            key = import_key(registration.private_key, _key_type(alg))
        except AuthError:
            raise
        except Exception as exc:
            raise AuthError(f"{step}: the private key of client {client_id!r} cannot be read "
                            f"as a {_key_type(alg)} key for {alg}", step=step,
                            url=display_url(url)) from exc
        now = int(time.time())
        claims = {"iat": now, "exp": now + ASSERTION_LIFETIME, "jti": secrets.token_urlsafe(24)}
        return ClientAuth(client_id, key,
                          PrivateKeyJWT(token_endpoint=audience, claims=claims, alg=alg))
    raise AuthError(f"{step}: unsupported token_endpoint_auth_method {method!r} for client "
                    f"{client_id!r}", step=step, url=display_url(url))


def _authenticated(registration: ClientRegistration, audience: str, url: str,
                   form: Mapping[str, str], *, step: str) -> tuple[dict[str, str], dict[str, str]]:
    """Apply client authentication to ``form``: returns (headers, form fields).

    authlib works on an encoded body; we decode it back into a dict, which also merges a
    ``client_id`` the grant already put in the form with the one the method adds.
    """
    auth = _client_auth(registration, audience, step=step, url=url)
    _, headers, body = auth.prepare("POST", url, {}, urlencode(list(form.items())))
    return dict(headers), dict(parse_qsl(body, keep_blank_values=True))


def _scrub(text: str, secret_values: Sequence[str]) -> str:
    """A server-supplied text made safe to show: our secrets masked, length capped."""
    for value in secret_values:
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    text = " ".join(text.split())
    return text if len(text) <= _MAX_DESCRIPTION else text[:_MAX_DESCRIPTION] + "..."


def _post_form(session: requests.Session, policy: HttpPolicy, url: str,
               form: Mapping[str, str], *, client: ClientRegistration, audience: str,
               dpop: DPoPProver | None, step: str, what: str,
               ) -> tuple[HttpResponse, dict[str, Any] | None, list[str]]:
    """POST one authenticated form; with DPoP, retry once on 400 ``use_dpop_nonce``.

    Each attempt gets a new client assertion and a new proof (fresh ``jti``); the retry's
    proof carries the nonce the server just sent. Returns the response, its JSON object and
    the secret values sent (for scrubbing messages).
    """
    for attempt in (1, 2):
        headers, data = _authenticated(client, audience, url, form, step=step)
        if dpop is not None:
            headers["DPoP"] = dpop.proof("POST", url)
        resp = request(session, "POST", url, policy, step=step, headers=headers, data=data,
                       what=what)
        if dpop is not None:
            dpop.observe(url, resp.headers)
        obj = resp.json_object()
        # Everything secret that went out, so a server quoting it back cannot make us show
        # it: form fields, and the client secret and proof that travel in headers.
        sent = [data[k] for k in _SECRET_FIELDS if k in data]
        if client.client_secret:
            sent += [client.client_secret, quote(client.client_secret, safe="")]
        sent += [value.rpartition(" ")[2] for name, value in headers.items()
                 if name.lower() in ("authorization", "dpop")]
        if (dpop is not None and attempt == 1 and resp.status == 400 and obj is not None
                and obj.get("error") == "use_dpop_nonce" and resp.headers.get("DPoP-Nonce")):
            continue
        return resp, obj, sent
    raise AssertionError("unreachable")  # pragma: no cover


def _token_error(resp: HttpResponse, obj: dict[str, Any] | None, *, step: str, url: str,
                 sent: Sequence[str]) -> TokenRequestError:
    """The :class:`TokenRequestError` for a refused request (RFC 6749 §5.2)."""
    shown = display_url(url)
    error = obj.get("error") if obj is not None else None
    description = obj.get("error_description") if obj is not None else None
    error = _scrub(error, sent)[:80] if isinstance(error, str) else ""
    description = _scrub(description, sent) if isinstance(description, str) else ""
    reason = error or "no OAuth error in the answer"
    message = f"{step}: {shown} answered HTTP {resp.status}: {reason}"
    if description:
        message += f" ({description})"
    return TokenRequestError(message, error=error, error_description=description,
                             status=resp.status, step=step, url=shown)


class TokenEndpoint:
    """POSTs to one token endpoint with client authentication (authlib), DPoP proofs and
    the one ``use_dpop_nonce`` retry.

    Stateless apart from the prover's nonces, so one instance is safe from many threads.
    """

    def __init__(self, meta: ServerMetadata, registration: ClientRegistration, *,
                 session: requests.Session, policy: HttpPolicy,
                 dpop: DPoPProver | None = None) -> None:
        self.meta = meta
        self.registration = registration
        self.session = session
        self.policy = policy
        self.dpop = dpop
        self.url = meta.token_endpoint

    def __repr__(self) -> str:
        return (f"TokenEndpoint({display_url(self.url)!r}, client_id="
                f"{self.registration.client_id!r}, dpop={self.dpop is not None})")

    def request(self, form: Mapping[str, str], *, step: str) -> dict[str, Any]:
        """Send ``form`` and return the JSON answer of a 2xx.

        Raises :class:`TokenRequestError` (the server's ``error``, ``error_description`` and
        HTTP status) for a refusal or a non-JSON answer, and :class:`DPoPError` when DPoP is
        on and the server issued anything but a ``DPoP`` token.
        """
        resp, obj, sent = _post_form(self.session, self.policy, self.url, form,
                                     client=self.registration, audience=self.meta.issuer,
                                     dpop=self.dpop, step=step, what="token endpoint")
        if not 200 <= resp.status < 300:
            raise _token_error(resp, obj, step=step, url=self.url, sent=sent)
        if obj is None:
            raise TokenRequestError(
                f"{step}: {display_url(self.url)} answered HTTP {resp.status} without a JSON "
                "object", error="invalid_response", status=resp.status, step=step,
                url=display_url(self.url))
        if self.dpop is not None:
            token_type = obj.get("token_type")
            if not isinstance(token_type, str) or token_type.lower() != "dpop":
                raise DPoPError(
                    f"dpop: {self.meta.issuer} answered a DPoP-bound token request with "
                    f"token_type {token_type!r}, not 'DPoP'", step="dpop", url=self.meta.issuer)
        return obj


# --- authorization code with PKCE ---------------------------------------------------------


@dataclass(frozen=True)
class PendingAuthorization:
    """What we recorded before sending the user to the authorization server.

    The callback is checked against it (``state``, the issuer for RFC 9207) and the code
    exchange uses its verifier and redirect URI. ``repr`` masks the verifier and state.
    """

    issuer: str
    code_verifier: str
    state: str
    redirect_uri: str
    resource: str
    scopes: tuple[str, ...]

    def __repr__(self) -> str:
        return (f"PendingAuthorization(issuer={self.issuer!r}, code_verifier='***', "
                f"state='***', redirect_uri={self.redirect_uri!r}, "
                f"resource={self.resource!r}, scopes={self.scopes!r})")


def new_pending(meta: ServerMetadata, registration: ClientRegistration, *, redirect_uri: str,
                resource: str, scopes: Sequence[str]) -> PendingAuthorization:
    """A fresh verifier (64 unreserved characters) and state (32 random bytes, base64url)."""
    del registration  # part of the interface; the client_id goes into the URL, not here
    verifier = "".join(secrets.choice(_UNRESERVED) for _ in range(VERIFIER_LENGTH))
    return PendingAuthorization(issuer=meta.issuer, code_verifier=verifier,
                                state=secrets.token_urlsafe(32), redirect_uri=redirect_uri,
                                resource=resource, scopes=tuple(scopes))


def authorization_url(meta: ServerMetadata, registration: ClientRegistration,
                      pending: PendingAuthorization) -> str:
    """The URL the user's browser opens (RFC 6749 §4.1.1 + PKCE + RFC 8707 ``resource``).

    A query already present on the endpoint is kept (RFC 6749 §3.1).
    """
    endpoint = meta.authorization_endpoint
    if not endpoint:
        raise AuthError(f"authorization: {meta.issuer} has no authorization_endpoint",
                        step="authorization", url=meta.issuer)
    params: list[tuple[str, str]] = [
        ("response_type", "code"),
        ("client_id", registration.client_id),
        ("redirect_uri", pending.redirect_uri),
        ("state", pending.state),
    ]
    if pending.scopes:
        params.append(("scope", " ".join(pending.scopes)))
    params += [
        ("code_challenge", create_s256_code_challenge(pending.code_verifier)),
        ("code_challenge_method", "S256"),
    ]
    if pending.resource:
        params.append(("resource", pending.resource))
    return str(add_params_to_uri(endpoint, params))


def _single(params: Mapping[str, list[str]], name: str) -> str | None:
    """A parameter that must appear at most once (RFC 6749 §3.1); repeats count as absent
    with a sentinel so that a doubled ``state`` or ``iss`` can never match."""
    values = params.get(name)
    if not values:
        return None
    return values[0] if len(values) == 1 else "\0duplicate"


def parse_callback(callback_url: str, pending: PendingAuthorization,
                   meta: ServerMetadata) -> str:
    """Check the redirect back from the authorization server and return the code.

    Order (docs/auth.md, "Safety rules"): ``state`` (``StateMismatch``), then the RFC 9207
    ``iss`` table (``IssMismatch``), then ``error`` (``AuthorizationDenied``). Only after both
    checks pass is an ``error`` believed: a forged response must not be able to show its text.
    """
    issuer = meta.issuer
    try:
        params = parse_qs(urlsplit(callback_url.strip()).query, keep_blank_values=True)
    except ValueError:
        params = {}
    state = _single(params, "state")
    if state is None or not secrets.compare_digest(state.encode(), pending.state.encode()):
        raise StateMismatch(
            f"authorization: the callback's state is {'missing' if state is None else 'wrong'}"
            f" (not the one sent to {issuer}); the response was discarded",
            step="authorization", url=issuer)
    iss = _single(params, "iss")
    if iss is not None:
        if not same_identifier(iss, pending.issuer) or not same_identifier(iss, issuer):
            raise IssMismatch(
                f"authorization: the callback's iss {iss[:200]!r} is not the issuer {issuer} "
                "(RFC 9207); the response was discarded", step="authorization", url=issuer)
    elif meta.authorization_response_iss_parameter_supported:
        raise IssMismatch(
            f"authorization: {issuer} advertises authorization_response_iss_parameter_supported"
            " but the callback has no iss (RFC 9207); the response was discarded",
            step="authorization", url=issuer)
    error = _single(params, "error")
    if error is not None:
        description = _single(params, "error_description") or ""
        message = f"authorization: {issuer} refused the authorization: {error[:80]}"
        if description:
            message += f" ({_scrub(description, ())})"
        raise AuthorizationDenied(message, error=error[:80],
                                  error_description=_scrub(description, ()),
                                  step="authorization", url=issuer)
    code = _single(params, "code")
    if not code or code.startswith("\0"):
        raise AuthorizationDenied(f"authorization: the callback from {issuer} has no code",
                                  error="", step="authorization", url=issuer)
    return code


def exchange_code(endpoint: TokenEndpoint, pending: PendingAuthorization,
                  code: str) -> dict[str, Any]:
    """Trade the authorization code for tokens (with the PKCE verifier and ``resource``)."""
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": pending.redirect_uri,
        "code_verifier": pending.code_verifier,
        "client_id": endpoint.registration.client_id,
    }
    if pending.resource:
        form["resource"] = pending.resource
    return endpoint.request(form, step="token request")


def refresh(endpoint: TokenEndpoint, refresh_token: str, *, resource: str) -> dict[str, Any]:
    """Use a refresh token. No ``scope``: the grant keeps what was granted (RFC 6749 §6)."""
    form = {"grant_type": "refresh_token", "refresh_token": refresh_token}
    if resource:
        form["resource"] = resource
    return endpoint.request(form, step="refresh")


def _scoped(form: dict[str, str], scopes: Sequence[str], resource: str) -> dict[str, str]:
    if scopes:
        form["scope"] = " ".join(scopes)
    if resource:
        form["resource"] = resource
    return form


def client_credentials(endpoint: TokenEndpoint, *, scopes: Sequence[str],
                       resource: str) -> dict[str, Any]:
    """The client-credentials grant (a secret or ``private_key_jwt`` authenticates)."""
    form = _scoped({"grant_type": "client_credentials"}, scopes, resource)
    return endpoint.request(form, step="token request")


def jwt_bearer(endpoint: TokenEndpoint, assertion: str, *, scopes: Sequence[str],
               resource: str, include_client_id: bool = False) -> dict[str, Any]:
    """The RFC 7523 JWT-bearer grant: an ID-JAG (enterprise) or a workload identity token.

    ``include_client_id`` puts ``client_id`` in the form even when the auth method does not
    (workload identity). Errors are raised at once: no retry, no other grant.
    """
    form = {"grant_type": GRANT_JWT_BEARER, "assertion": assertion}
    if include_client_id:
        form["client_id"] = endpoint.registration.client_id
    return endpoint.request(_scoped(form, scopes, resource), step="token request")


# --- device code (RFC 8628) ---------------------------------------------------------------


@dataclass(frozen=True)
class DeviceCode:
    """What the user needs to finish a device-code login on another device.

    The ``device_code`` itself stays inside :func:`device_authorization`: it is a secret.
    """

    user_code: str
    verification_uri: str
    verification_uri_complete: str | None
    expires_in: float
    interval: float


def _show_device_code(info: DeviceCode) -> None:
    """Default ``device_code_handler``: tell the user on stderr."""
    where = info.verification_uri_complete or info.verification_uri
    print(f"To sign in, open {where} and enter the code {info.user_code} "
          f"(valid for {info.expires_in:.0f} s).", file=sys.stderr, flush=True)


def _number(value: Any, default: float) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    return default


def device_authorization(meta: ServerMetadata, registration: ClientRegistration, *,
                         scopes: Sequence[str], resource: str, session: requests.Session,
                         policy: HttpPolicy, handler: Callable[[DeviceCode], None] | None,
                         endpoint: TokenEndpoint,
                         sleep: Callable[[float], None] = time.sleep,
                         clock: Callable[[], float] = time.monotonic) -> dict[str, Any]:
    """Run the device flow: ask for a code, show it, poll until the user acts.

    Polls every ``interval`` (5 s unless the server says otherwise); ``slow_down`` adds 5 s;
    ``authorization_pending`` continues; ``access_denied`` raises ``AuthorizationDenied``;
    ``expired_token`` or reaching ``expires_in`` raises ``LoginTimeout``. ``sleep`` and
    ``clock`` are injectable so tests need not wait.
    """
    url = meta.device_authorization_endpoint
    if not url:
        raise AuthError(f"authorization: {meta.issuer} has no device_authorization_endpoint",
                        step="authorization", url=meta.issuer)
    form = _scoped({"client_id": registration.client_id}, scopes, resource)
    resp, obj, sent = _post_form(session, policy, url, form, client=registration,
                                 audience=meta.issuer, dpop=None, step="authorization",
                                 what="device authorization endpoint")
    if not 200 <= resp.status < 300:
        raise _token_error(resp, obj, step="authorization", url=url, sent=sent)
    obj = obj or {}
    device_code = obj.get("device_code")
    user_code = obj.get("user_code")
    verification_uri = obj.get("verification_uri") or obj.get("verification_url")
    if not (isinstance(device_code, str) and device_code and isinstance(user_code, str)
            and isinstance(verification_uri, str)):
        raise TokenRequestError(
            f"authorization: the device authorization answer of {display_url(url)} lacks "
            "device_code, user_code or verification_uri", error="invalid_response",
            status=resp.status, step="authorization", url=display_url(url))
    complete = obj.get("verification_uri_complete")
    info = DeviceCode(user_code=user_code, verification_uri=verification_uri,
                      verification_uri_complete=complete if isinstance(complete, str) else None,
                      expires_in=_number(obj.get("expires_in"), _DEFAULT_DEVICE_LIFETIME),
                      interval=_number(obj.get("interval"), DEFAULT_INTERVAL))
    deadline = clock() + info.expires_in
    (handler or _show_device_code)(info)
    interval = info.interval
    poll = _scoped({"grant_type": GRANT_DEVICE_CODE, "device_code": device_code,
                    "client_id": registration.client_id}, (), resource)

    def expired() -> LoginTimeout:
        return LoginTimeout(f"authorization: the device code from {meta.issuer} expired before "
                            "the login was completed", step="authorization", url=meta.issuer)

    while True:
        if clock() + interval > deadline:
            raise expired()
        sleep(interval)
        try:
            return endpoint.request(poll, step="token request")
        except TokenRequestError as exc:
            if exc.error == "authorization_pending":
                continue
            if exc.error == "slow_down":
                interval += SLOW_DOWN_STEP
                continue
            if exc.error == "access_denied":
                raise AuthorizationDenied(
                    f"authorization: the login at {meta.issuer} was denied",
                    error=exc.error, error_description=exc.error_description,
                    step="authorization", url=meta.issuer) from None
            if exc.error == "expired_token":
                raise expired() from None
            raise


# --- enterprise-managed authorization (ID-JAG, RFC 8693) ----------------------------------


def id_jag_exchange(*, idp_token_endpoint: str, id_token: str, audience: str, resource: str,
                    scopes: Sequence[str], idp_client_id: str, idp_client_secret: str | None,
                    session: requests.Session, policy: HttpPolicy) -> str:
    """Exchange the user's ID token at the IdP for an ID-JAG for ``audience`` (the MCP
    authorization server's issuer). The IdP client authenticates with Basic when it has a
    secret, else sends its ``client_id``. Returns the ID-JAG (a JWT)."""
    client = ClientRegistration(
        client_id=idp_client_id,
        token_endpoint_auth_method="client_secret_basic" if idp_client_secret else "none",
        client_secret=idp_client_secret or None)
    form = _scoped({
        "grant_type": GRANT_TOKEN_EXCHANGE,
        "requested_token_type": TOKEN_TYPE_ID_JAG,
        "subject_token": id_token,
        "subject_token_type": TOKEN_TYPE_ID_TOKEN,
        "audience": audience,
    }, scopes, resource)
    step = "token request"
    shown = display_url(idp_token_endpoint)
    resp, obj, sent = _post_form(session, policy, idp_token_endpoint, form, client=client,
                                 audience=idp_token_endpoint, dpop=None, step=step,
                                 what="IdP token endpoint")
    if not 200 <= resp.status < 300:
        raise _token_error(resp, obj, step=step, url=idp_token_endpoint, sent=sent)
    obj = obj or {}
    issued = obj.get("issued_token_type")
    if issued != TOKEN_TYPE_ID_JAG:
        raise TokenRequestError(
            f"{step}: the IdP {shown} issued a token of type {str(issued)[:100]!r}, not an "
            "ID-JAG", error="invalid_response", status=resp.status, step=step, url=shown)
    token = obj.get("access_token")
    if not isinstance(token, str) or not token:
        raise TokenRequestError(f"{step}: the IdP {shown} answered without access_token",
                                error="invalid_response", status=resp.status, step=step,
                                url=shown)
    return token


# --- opening the browser ------------------------------------------------------------------


def _check_browser_url(url: str) -> None:
    """Only http(s) URLs are opened, and http only on loopback. The URL comes from the
    authorization server's metadata, so it is screened like every fetched URL first: a
    browser parses by WHATWG rules, which read a backslash as a slash."""
    shown = display_url(url)
    what = "refusing to open the authorization URL"
    origin = screen(url, what=what, step="authorization", shown=shown)
    if origin.scheme == "https" or is_loopback_host(origin.host):
        return
    raise InsecureURL(f"authorization: refusing to open {shown} in a browser: only "
                      "https URLs (http on loopback) are opened", step="authorization",
                      url=shown)


def _open_browser(url: str) -> bool:
    """``webbrowser.open`` (never a shell); False when no browser could be started."""
    try:
        return bool(webbrowser.open(url))
    except webbrowser.Error:
        return False


def _read_pasted_url(url: str, redirect_uri: str) -> str:
    """Print the URL to stderr and read the redirect URL the user pastes.

    ``input()`` rather than ``sys.stdin.readline()``: in Jupyter (local or remote) the kernel
    replaces ``input`` with a prompt in the notebook, while ``sys.stdin`` is not readable.
    """
    print(f"Open this URL in a browser to sign in:\n\n    {url}\n\n"
          f"Then paste here the full URL your browser was sent to (it starts with "
          f"{redirect_uri}):", file=sys.stderr, flush=True)
    try:
        line = input("")
    except EOFError:
        line = ""
    return line.strip()


def run_browser_login(url: str, *, redirect_uri: str, listener: LoopbackListener | None,
                      authorization_handler: Callable[[str], str] | None,
                      open_browser: bool = True, timeout: float = 300.0) -> str:
    """Send the user to ``url`` and return the callback URL the browser lands on.

    With ``authorization_handler``, it alone is used. Otherwise the URL goes to
    ``webbrowser.open`` and the ``listener`` waits for the redirect (``LoginTimeout`` after
    ``timeout``); when no browser can be opened (or there is no listener) the URL is printed
    to stderr and the redirect URL read from stdin. The caller closes the listener.
    """
    if authorization_handler is not None:
        return authorization_handler(url)
    _check_browser_url(url)
    if listener is not None and open_browser and _open_browser(url):
        return listener.wait(timeout)
    pasted = _read_pasted_url(url, redirect_uri)
    if pasted:
        return pasted
    if listener is not None:
        # Nothing pasted (stdin closed): the user may still finish in a local browser.
        return listener.wait(timeout)
    raise LoginRequired("authorization: no browser, no authorization_handler and no redirect "
                        "URL on stdin; pass authorization_handler or run `mcpsync login`",
                        step="authorization", url=display_url(url))
