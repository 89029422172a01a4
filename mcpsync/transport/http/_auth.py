"""One logical HTTP request through the auth rules (docs/http.md, "What happens on a refusal").

:class:`AuthFlow` owns the order of headers (transport > auth hook > static; a static
``Authorization`` only without a hook), the 401/403 retry loop, and the client's auth lock.
The lock is held only around the hook, never across a request, and under it the flow re-reads
``headers()`` first: when 50 threads meet the same expired token, the first refreshes and the
other 49 see a new ``Authorization`` and just retry, so the hook runs once.

The retried request keeps its body and JSON-RPC id (``do_send`` rebuilds it from the same
bytes), because the server did not process a request it refused.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from mcpsync.auth_hooks import AuthHooks, HttpChallenge, is_static
from mcpsync.errors import AuthHookError, TransportError, Unauthorized

if TYPE_CHECKING:
    import requests

__all__ = ["MAX_HOOK_CALLS", "AuthFlow", "redact_url", "status_error", "www_authenticate_values"]

logger = logging.getLogger("mcpsync.http")

MAX_HOOK_CALLS = 3
"""Hook calls per logical request, for 401 and 403 together (the nonce call not counted)."""

_MAX_SENDS = 1 + MAX_HOOK_CALLS + 2
"""A hard stop on sends per logical request, whatever other threads do to the token."""


def redact_url(url: str) -> str:
    """The URL without user info, query or fragment: what error messages may show."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<invalid url>"
    netloc = parts.hostname or ""
    if ":" in netloc:
        netloc = f"[{netloc}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is not None:
        netloc = f"{netloc}:{port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def status_error(message: str, *, status: int | None, url: str, server: str | None = None,
                 method: str | None = None) -> TransportError:
    """A :class:`TransportError` carrying ``status`` and ``url`` attributes.

    ``TransportError`` has no such constructor arguments yet; they are set on the instance
    (they pickle with it) until errors.py grows them.
    """
    err = TransportError(message, server=server, method=method)
    err.__dict__["status"] = status
    err.__dict__["url"] = url
    return err


def www_authenticate_values(response: requests.Response) -> tuple[str, ...]:
    """Every ``WWW-Authenticate`` value as sent; requests joins repeats with ``", "``."""
    raw_headers = getattr(response.raw, "headers", None)
    getlist = getattr(raw_headers, "getlist", None)
    if callable(getlist):
        values = getlist("WWW-Authenticate")
        if values:
            return tuple(str(v) for v in values)
    joined = response.headers.get("WWW-Authenticate")
    return (joined,) if joined else ()


def _authorization_of(headers: Mapping[str, str]) -> str | None:
    for key, value in headers.items():
        if key.lower() == "authorization":
            return value
    return None


class AuthFlow:
    """Auth headers and the 401/403 retry loop for one client; safe from many threads.

    ``hooks`` is what :func:`mcpsync.auth_hooks.make_auth` returned (None for no auth);
    ``static_headers`` are the caller's ``headers=``; ``server`` names the server in errors.
    """

    def __init__(self, hooks: AuthHooks | None, static_headers: Mapping[str, str] | None = None,
                 *, server: str | None = None) -> None:
        self._hooks = hooks
        self._static = dict(static_headers or {})
        self._static_without_auth = {k: v for k, v in self._static.items()
                                     if k.lower() != "authorization"}
        self._server = server
        self._static_hooks = hooks is not None and is_static(hooks)
        on_response = getattr(hooks, "on_response", None) if hooks is not None else None
        self._on_response: Callable[[Mapping[str, str]], Any] | None = (
            on_response if callable(on_response) else None)
        self.lock = threading.Lock()
        """The client's auth lock: held only while a hook refreshes."""
        self.hook_calls = 0
        """Total ``on_unauthorized`` calls made (for tests and diagnostics)."""

    @property
    def hooks(self) -> AuthHooks | None:
        return self._hooks

    def auth_headers(self, method: str, url: str, *,
                     rpc_method: str | None = None) -> dict[str, str]:
        """The static headers with the hook's headers over them, for one HTTP request.

        Raises :class:`AuthHookError` (chaining the cause) if ``headers()`` raises: the request
        is then not sent.
        """
        if self._hooks is None:
            return dict(self._static)
        hook_headers = self._call_headers(method, url, rpc_method)
        out = dict(self._static_without_auth)
        if hook_headers:
            lowered = {k.lower() for k in hook_headers}
            out = {k: v for k, v in out.items() if k.lower() not in lowered}
            out.update(hook_headers)
        return out

    def _call_headers(self, method: str, url: str, rpc_method: str | None) -> Mapping[str, str]:
        assert self._hooks is not None
        try:
            result = self._hooks.headers(method, url)
        except Exception as exc:
            raise AuthHookError(
                f"the auth hook headers() failed for {method} {redact_url(url)}: "
                f"{type(exc).__name__}: {exc}", server=self._server, method=rpc_method,
            ) from exc
        if not isinstance(result, Mapping):
            raise AuthHookError(
                f"the auth hook headers() returned {type(result).__name__}, expected a mapping",
                server=self._server, method=rpc_method)
        return result

    def send(self, method: str, url: str,
             do_send: Callable[[dict[str, str]], requests.Response], *,
             rpc_method: str | None = None) -> requests.Response:
        """Send one logical request through the auth flow and return the final response.

        ``do_send(headers)`` sends it once with ``headers`` (auth + static) merged *under* the
        transport's own headers, and returns the response (``stream=True`` is fine; a refused
        response is closed here before the retry). Raises :class:`Unauthorized`,
        :class:`AuthHookError`, or :class:`TransportError` (``status=403``).
        """
        hook_calls = 0
        had_401 = False
        nonce_used = False
        sends = 0
        while True:
            headers = self.auth_headers(method, url, rpc_method=rpc_method)
            response = do_send(headers)
            sends += 1
            self._notify_response(response)
            status = response.status_code
            if status != 401 and status != 403:
                return response
            challenge = HttpChallenge(
                status=status, www_authenticate=www_authenticate_values(response),
                headers=response.headers, method=method, url=url,
                authorization=_authorization_of(headers))
            response.close()
            if sends >= _MAX_SENDS:
                raise self._unauthorized(challenge, rpc_method, "after the retries allowed")
            if status == 403:
                if not challenge.has_error("insufficient_scope"):
                    raise status_error(
                        f"HTTP 403 {response.reason or 'Forbidden'} from {redact_url(url)}"
                        + _challenge_suffix(challenge),
                        status=403, url=url, server=self._server, method=rpc_method)
                if self._hooks is None or self._static_hooks:
                    raise self._unauthorized(challenge, rpc_method,
                                             "insufficient scope, and no auth hook to step up")
                if hook_calls >= MAX_HOOK_CALLS:
                    raise self._unauthorized(
                        challenge, rpc_method, f"after {MAX_HOOK_CALLS} auth hook calls")
                hook_calls += self._refresh(challenge, rpc_method)
                continue
            # 401
            if self._hooks is None:
                raise self._unauthorized(challenge, rpc_method, "and no auth is configured")
            if had_401:
                if (challenge.has_error("use_dpop_nonce") and not nonce_used
                        and not self._static_hooks):
                    nonce_used = True
                    self._refresh(challenge, rpc_method, check_refreshed=False)
                    continue
                raise self._unauthorized(challenge, rpc_method, "after refreshing credentials")
            had_401 = True
            if hook_calls >= MAX_HOOK_CALLS:
                raise self._unauthorized(
                    challenge, rpc_method, f"after {MAX_HOOK_CALLS} auth hook calls")
            if self._static_hooks:
                if not self._refreshed_elsewhere(challenge, rpc_method):
                    raise self._unauthorized(challenge, rpc_method,
                                             "and the credentials are static")
                continue
            hook_calls += self._refresh(challenge, rpc_method)

    def _refreshed_elsewhere(self, challenge: HttpChallenge, rpc_method: str | None) -> bool:
        """True if ``headers()`` now gives another ``Authorization`` than the refused one."""
        with self.lock:
            current = self._call_headers(challenge.method, challenge.url, rpc_method)
        return _authorization_of(current) != challenge.authorization

    def _refresh(self, challenge: HttpChallenge, rpc_method: str | None, *,
                 check_refreshed: bool = True) -> int:
        """Under the auth lock: call ``on_unauthorized`` unless another thread already
        refreshed. Returns 1 if the hook ran, 0 if it was skipped."""
        assert self._hooks is not None
        with self.lock:
            if check_refreshed:
                current = self._call_headers(challenge.method, challenge.url, rpc_method)
                if _authorization_of(current) != challenge.authorization:
                    return 0
            try:
                self._hooks.on_unauthorized(challenge)
            except Exception as exc:
                raise AuthHookError(
                    f"the auth hook on_unauthorized() failed after HTTP {challenge.status} "
                    f"from {redact_url(challenge.url)}: {type(exc).__name__}: {exc}",
                    server=self._server, method=rpc_method,
                ) from exc
            finally:
                self.hook_calls += 1
        return 1

    def _notify_response(self, response: requests.Response) -> None:
        """Give ``on_response`` the headers of a response that carries ``DPoP-Nonce``."""
        if self._on_response is None or "DPoP-Nonce" not in response.headers:
            return
        try:
            self._on_response(response.headers)
        except Exception:
            logger.warning("the auth hook on_response() raised; ignored", exc_info=True)

    def _unauthorized(self, challenge: HttpChallenge, rpc_method: str | None,
                      why: str) -> Unauthorized:
        joined = ", ".join(challenge.www_authenticate)
        err = Unauthorized(
            f"HTTP {challenge.status} from {redact_url(challenge.url)} {why}"
            + _challenge_suffix(challenge),
            www_authenticate=joined or None, status=challenge.status,
            server=self._server, method=rpc_method)
        # Unauthorized has no url constructor argument yet; set it on the instance (it
        # pickles with it). The challenge itself is not attached: it holds the refused token.
        err.__dict__["url"] = challenge.url
        err.__dict__["www_authenticate_values"] = challenge.www_authenticate
        return err


def _challenge_suffix(challenge: HttpChallenge) -> str:
    if not challenge.www_authenticate:
        return ""
    return f" (WWW-Authenticate: {', '.join(challenge.www_authenticate)})"
