"""``OAuthProvider``: mcpsync's ``AuthHooks`` filled with OAuth.

The public face of the room; the provider is in ``_provider``, token requests in
``_token``, client registrations in ``_registrations`` and the grant types in ``_grants``.
"""
from __future__ import annotations

from mcpauth.provider._provider import (
    GRANTS as GRANTS,
    OAuthProvider as OAuthProvider,
)

__all__ = [
    "GRANTS",
    "OAuthProvider",
]
