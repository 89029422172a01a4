"""mcpauth: OAuth for MCP clients, from the first 401 to a refreshed token.

It never imports mcpsync: ``OAuthProvider`` fills mcpsync's ``AuthHooks`` protocol
structurally, so any client that calls ``headers()`` and ``on_unauthorized()`` can use it.
"""

from __future__ import annotations

__version__ = "0.1.0"
