"""OAuth for an HTTP entry of a config file, as the editors do it: on demand, per server.

VS Code and Claude Code start OAuth on any 401 from an HTTP server, with or without an
``oauth`` object in its entry. :class:`ConfigOAuth` gives each such entry its own
``mcpauth.OAuthProvider``, so one server's token can never be sent to another, and builds it
only when it is needed: at the first 401, or at the first request when the token store
already holds a login for that server (what ``mcpsync login`` leaves behind). Until then it
does no network I/O and imports nothing of mcpauth but its token store, so a server that
never answers 401 runs exactly as without it, and ``import mcpsync`` stays light.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from mcpsync._mcpauth_import import import_mcpauth
from mcpsync.auth_hooks import HttpChallenge

__all__ = ["ConfigOAuth"]

_log = logging.getLogger("mcpsync.auth")


class ConfigOAuth:
    """The :class:`~mcpsync.AuthHooks` of one config-file HTTP server: an ``OAuthProvider``
    for ``url`` made on demand.

    ``client_id``, ``redirect_port``, ``scopes`` and ``metadata_url`` come from the entry's
    ``oauth`` object; ``store`` is a ``mcpauth.TokenStore`` (default: the file store that
    ``mcpsync login`` writes); ``interactive=False`` never opens a browser (a login that
    needs a person fails with ``mcpauth.LoginRequired``). :meth:`close` closes the provider's
    HTTP session; a later 401 makes a new provider. Safe from many threads; ``repr`` shows
    no secret.
    """

    _mcpsync_owned = True   # made by mcpsync for a config: the Manager closes it

    def __init__(self, url: str, *, client_id: str | None = None, redirect_port: int = 0,
                 scopes: Sequence[str] | None = None, metadata_url: str | None = None,
                 store: Any = None, interactive: bool = False) -> None:
        self.url = url
        self.client_id = client_id
        self.redirect_port = redirect_port
        self.scopes = tuple(scopes) if scopes is not None else None
        self.metadata_url = metadata_url
        self.interactive = interactive
        self._store = store
        self._lock = threading.Lock()
        self._provider: Any = None
        self._peeked = False

    # -- AuthHooks -------------------------------------------------------------------------

    def headers(self, method: str, url: str) -> Mapping[str, str]:
        provider = self._provider
        if provider is None:
            if self._peeked:
                return {}
            provider = self._peek()
            if provider is None:
                return {}
        result: Mapping[str, str] = provider.headers(method, url)
        return result

    def on_unauthorized(self, challenge: HttpChallenge) -> None:
        self.provider().on_unauthorized(challenge)

    def on_response(self, headers: Mapping[str, str]) -> None:
        provider = self._provider
        if provider is not None:
            provider.on_response(headers)

    # -- the provider ----------------------------------------------------------------------

    def provider(self) -> Any:
        """The ``mcpauth.OAuthProvider`` of this server, made now if there is none yet."""
        with self._lock:
            if self._provider is None:
                self._provider = self._make(self._store_or_default())
            return self._provider

    def close(self) -> None:
        """Close the provider's HTTP session (a later 401 makes a new provider)."""
        with self._lock:
            provider, self._provider = self._provider, None
            self._peeked = False
        if provider is not None:
            provider.close()

    def _store_or_default(self) -> Any:
        if self._store is not None:
            return self._store
        tokens = import_mcpauth("mcpauth.tokens")
        return tokens.FileTokenStore()

    def _peek(self) -> Any:
        """Once: if the store already holds a login for this server, make the provider now,
        so the stored token goes with the first request. Otherwise wait for a 401.

        A store that cannot be read (say its directory became group-writable) must not break
        a server that never asks for OAuth: the peek logs one warning naming the store and
        goes on without a stored login. The same error is raised, by the provider, only if a
        401 really needs the store.
        """
        with self._lock:
            if self._peeked or self._provider is not None:
                return self._provider
            self._peeked = True
            tokens = import_mcpauth("mcpauth.tokens")
            store = self._store
            try:
                if store is None:
                    if not os.path.exists(tokens.default_token_path()):
                        return None
                    store = tokens.FileTokenStore()
                discovery = import_mcpauth("mcpauth.discovery")
                key = tokens.resource_index_key(discovery.canonical_resource(self.url))
                if store.get(key) is None:
                    return None
            except import_mcpauth("mcpauth.errors").TokenStoreError as exc:
                where = getattr(store, "path", None) or tokens.default_token_path()
                _log.warning("%s: cannot read the stored logins in %s, going on without one "
                             "(OAuth will fail the same way if this server asks for it): %s",
                             self._shown_url(), where, exc)
                return None
            self._provider = self._make(store)
            return self._provider

    def _make(self, store: Any) -> Any:
        provider_module = import_mcpauth("mcpauth.provider")
        options: dict[str, Any] = {"store": store, "interactive": self.interactive,
                                   "redirect_port": self.redirect_port}
        if self.client_id is not None:
            options["client_id"] = self.client_id
        if self.scopes is not None:
            options["scopes"] = list(self.scopes)
        if self.metadata_url is not None:
            options["authorization_server_metadata_url"] = self.metadata_url
        return provider_module.OAuthProvider(self.url, **options)

    def _shown_url(self) -> str:
        """The URL without user info, query or fragment: what messages and repr show."""
        from urllib.parse import urlsplit

        try:
            parts = urlsplit(self.url)
            port = parts.port
        except ValueError:
            return "<invalid URL>"
        shown = f"{parts.scheme}://{parts.hostname or ''}"
        if port is not None:
            shown += f":{port}"
        return shown + parts.path

    def __repr__(self) -> str:
        return (f"ConfigOAuth({self._shown_url()!r}, interactive={self.interactive!r}, "
                f"started={self._provider is not None})")
