"""Token storage: the ``Token`` record, the ``TokenStore`` protocol and three stores.

The public face of the room; the record and keys are in ``_tokens``, shared helpers in
``_base`` and each store (memory, file, keyring) in its own module.
"""
from __future__ import annotations

from mcpauth.tokens._tokens import (
    FileTokenStore as FileTokenStore,
    KeyringTokenStore as KeyringTokenStore,
    MemoryTokenStore as MemoryTokenStore,
    Token as Token,
    TokenStore as TokenStore,
    credential_key as credential_key,
    default_token_path as default_token_path,
    registration_key as registration_key,
    resource_index_key as resource_index_key,
)

__all__ = [
    "FileTokenStore",
    "KeyringTokenStore",
    "MemoryTokenStore",
    "Token",
    "TokenStore",
    "credential_key",
    "default_token_path",
    "registration_key",
    "resource_index_key",
]
