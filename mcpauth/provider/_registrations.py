"""Which client ``OAuthProvider`` is, at each authorization server (step 2 of docs/auth.md,
"What happens on the first 401").

The provider may hold pre-registered credentials (one str, or a mapping per issuer), a
client-ID metadata document URL, a registration stored from an earlier run, or none of these
and register dynamically. Choosing among them, remembering the choice, and finding again the
registration a stored token was issued to is one job with its own small state; it lives here
so the provider only asks "which client for this issuer?".
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

import requests

from mcpauth._http import HttpPolicy
from mcpauth.discovery import ServerMetadata, same_identifier
from mcpauth.registration import (
    BROWSER_GRANT_TYPES,
    ClientRegistration,
    application_type_for,
    choose_registration,
    preregistered_auth_method,
)
from mcpauth.tokens import TokenStore, registration_key

__all__ = ["ClientRegistrations", "Credential"]

Credential = str | Mapping[str, str] | None


class ClientRegistrations:
    """The provider's client registrations: pre-registered, CIMD, stored or dynamic.

    ``current`` is the registration last used; ``prereg_issuer`` is where a str
    ``client_id`` belongs (the first issuer met). Writes are guarded by a lock held briefly,
    never across a network call; the provider's single flight keeps registrations themselves
    one at a time.
    """

    def __init__(self, *, store: TokenStore, session: requests.Session, policy: HttpPolicy,
                 client_id: Credential, client_secret: Credential, private_key: Credential,
                 signing_alg: str, client_metadata_url: str | None,
                 client_name: str) -> None:
        self._store = store
        self._session = session
        self._policy = policy
        self._client_id = client_id
        self._client_secret = client_secret
        self._private_key = private_key
        self._signing_alg = signing_alg
        self._client_metadata_url = client_metadata_url
        self._client_name = client_name
        self._lock = threading.Lock()
        self.current: ClientRegistration | None = None
        self.prereg_issuer: str | None = None      # where a str client_id belongs

    def credential(self, value: Credential, issuer: str) -> str | None:
        """A pre-registered value for ``issuer``: a mapping is looked up, a str belongs to the
        first issuer this provider meets."""
        if value is None:
            return None
        if isinstance(value, Mapping):
            for name, item in value.items():
                if same_identifier(name, issuer):
                    return item
            return None
        if self.prereg_issuer is None or same_identifier(self.prereg_issuer, issuer):
            return value
        return None

    def bound_to_old_issuer(self, old: str, new: str) -> bool:
        """True when the pre-registered ``client_id`` was used with ``old`` and none is
        configured for ``new``: such credentials are bound to their issuer (SEP-2352)."""
        given = self._client_id
        used_prereg = given is not None and (not isinstance(given, Mapping)
                                             or self.credential(given, old) is not None)
        have_new = isinstance(given, Mapping) and self.credential(given, new) is not None
        return used_prereg and not have_new

    def forget_issuer(self, old: str) -> None:
        """Forget the dynamic or CIMD registration of ``old``, here and in the store."""
        self._store.delete(registration_key(old))
        with self._lock:
            self.current = None
            self.prereg_issuer = None

    def preregistered(self, meta: ServerMetadata) -> ClientRegistration | None:
        client_id = self.credential(self._client_id, meta.issuer)
        if client_id is None:
            return None
        secret = self.credential(self._client_secret, meta.issuer)
        key = self.credential(self._private_key, meta.issuer)
        method = preregistered_auth_method(meta, has_secret=secret is not None,
                                           has_key=key is not None)
        if self.prereg_issuer is None:
            self.prereg_issuer = meta.issuer
        return ClientRegistration(client_id=client_id, token_endpoint_auth_method=method,
                                  client_secret=secret, private_key=key,
                                  signing_alg=self._signing_alg, issuer=meta.issuer,
                                  source="preregistered")

    def stored(self, issuer: str) -> ClientRegistration | None:
        raw = self._store.get(registration_key(issuer))
        if not raw:
            return None
        try:
            return ClientRegistration.from_dict(raw)
        except (KeyError, TypeError, ValueError):
            return None

    def for_client(self, meta: ServerMetadata, client_id: str) -> ClientRegistration | None:
        """The registration a stored token was issued to (for refresh), or None (also when
        its client secret has expired)."""
        current = self.current
        if (current is not None and current.client_id == client_id and not current.expired()
                and same_identifier(current.issuer or meta.issuer, meta.issuer)):
            return current
        prereg = self.preregistered(meta)
        if prereg is not None and prereg.client_id == client_id:
            return prereg
        stored = self.stored(meta.issuer)
        if stored is not None and stored.client_id == client_id and not stored.expired():
            # An expired client_secret (RFC 7591 client_secret_expires_at) cannot refresh:
            # None makes the caller authorize in full, which registers anew.
            return stored
        if self._client_metadata_url is not None and client_id == self._client_metadata_url:
            return ClientRegistration(client_id=client_id, token_endpoint_auth_method="none",
                                      issuer=meta.issuer, source="cimd")
        return None

    def register(self, meta: ServerMetadata, redirect_uri: str | None, *,
                 grant_types: Sequence[str] = BROWSER_GRANT_TYPES) -> ClientRegistration:
        """Pre-registered, CIMD, a stored or new dynamic registration, in that order.

        ``grant_types`` are those of the login about to run; a stored registration made for
        other grants is replaced. ``redirect_uri`` is None for the device code (a CLI login:
        ``application_type`` ``native``).
        """
        registration = choose_registration(
            meta, preregistered=self.preregistered(meta),
            client_metadata_url=self._client_metadata_url,
            stored=self.stored(meta.issuer), redirect_uri=redirect_uri,
            client_name=self._client_name,
            application_type=application_type_for(redirect_uri) if redirect_uri else "native",
            session=self._session, policy=self._policy, grant_types=grant_types)
        if registration.source in ("dynamic", "cimd"):
            self._store.put(registration_key(meta.issuer), registration.to_dict())
        self.adopt(registration)
        return registration

    def adopt(self, registration: ClientRegistration) -> None:
        """Make ``registration`` the current one."""
        with self._lock:
            self.current = registration
