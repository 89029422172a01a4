"""Who a host frame is from, as the guard's budgets count it.

On the stdio front the gateway serves one host, so every call is the process's. On the HTTP
front a legacy host session is its ``Mcp-Session-Id``; a 2026-07-28 host has no session, so
it is the authenticated principal when the front checks tokens, else the remote address.
The address is only advisory: hosts behind one proxy or NAT share one, and a host can move.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcpsync.gateway._guard._core import PROCESS, Caller

__all__ = ["PROCESS", "Caller", "caller_of"]


def caller_of(environ: Mapping[str, Any], *, legacy: bool) -> Caller:
    """The caller of one HTTP request: the legacy session it names, else the principal of
    its verified token, else its remote address."""
    sid = environ.get("HTTP_MCP_SESSION_ID")
    if legacy and sid:
        return Caller(str(sid), "session")
    # Per request, so no import_module() first: a request reaches this only through the
    # HTTP front, whose own imports have loaded mcpsync.server.http already.
    from mcpsync.server.http import current_access_token

    token = current_access_token()
    if token is not None:
        return Caller(token.subject or token.client_id, "principal")
    return Caller(str(environ.get("REMOTE_ADDR") or "unknown"), "address")
