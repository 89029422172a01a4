"""mcpauth: OAuth for MCP clients, from the first 401 to a refreshed token.

It never imports mcpsync: ``OAuthProvider`` fills mcpsync's ``AuthHooks`` protocol
structurally, so any client that calls ``headers()`` and ``on_unauthorized()`` can use it::

    import mcpauth, mcpsync

    auth = mcpauth.OAuthProvider("https://mcp.example.com/mcp",
                                 store=mcpauth.FileTokenStore())
    with mcpsync.connect("https://mcp.example.com/mcp", auth=auth) as client:
        print(client.list_tools())

Public names load lazily on first use (PEP 562), so ``import mcpauth`` costs almost nothing
and does not import requests or authlib until a provider is actually built.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

logging.getLogger("mcpauth").addHandler(logging.NullHandler())

if TYPE_CHECKING:
    from mcpauth.challenge import Challenge as Challenge, parse_challenges as parse_challenges
    from mcpauth.errors import (
        AuthError as AuthError,
        AuthorizationDenied as AuthorizationDenied,
        AuthorizationServerChanged as AuthorizationServerChanged,
        DiscoveryError as DiscoveryError,
        DPoPError as DPoPError,
        InsecureURL as InsecureURL,
        IssMismatch as IssMismatch,
        IssuerMismatch as IssuerMismatch,
        LoginRequired as LoginRequired,
        LoginTimeout as LoginTimeout,
        PKCENotSupported as PKCENotSupported,
        RegistrationError as RegistrationError,
        ResourceMismatch as ResourceMismatch,
        StateMismatch as StateMismatch,
        TokenRequestError as TokenRequestError,
        TokenStoreError as TokenStoreError,
    )
    from mcpauth.flows import DeviceCode as DeviceCode
    from mcpauth.provider import OAuthProvider as OAuthProvider
    from mcpauth.registration import client_metadata_document as client_metadata_document
    from mcpauth.tokens import (
        FileTokenStore as FileTokenStore,
        KeyringTokenStore as KeyringTokenStore,
        MemoryTokenStore as MemoryTokenStore,
        Token as Token,
        TokenStore as TokenStore,
    )

_ERRORS = (
    "AuthError", "AuthorizationDenied", "AuthorizationServerChanged", "DiscoveryError",
    "DPoPError", "InsecureURL", "IssMismatch", "IssuerMismatch", "LoginRequired",
    "LoginTimeout", "PKCENotSupported", "RegistrationError", "ResourceMismatch",
    "StateMismatch", "TokenRequestError", "TokenStoreError",
)

_LAZY: dict[str, str] = {
    "OAuthProvider": "mcpauth.provider",
    "Token": "mcpauth.tokens",
    "TokenStore": "mcpauth.tokens",
    "MemoryTokenStore": "mcpauth.tokens",
    "FileTokenStore": "mcpauth.tokens",
    "KeyringTokenStore": "mcpauth.tokens",
    "Challenge": "mcpauth.challenge",
    "parse_challenges": "mcpauth.challenge",
    "client_metadata_document": "mcpauth.registration",
    "DeviceCode": "mcpauth.flows",
    **{name: "mcpauth.errors" for name in _ERRORS},
}

__all__ = sorted([*_LAZY, "__version__"])


def __getattr__(name: str) -> Any:
    """Import the module that defines a public name on first access (PEP 562)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'mcpauth' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
