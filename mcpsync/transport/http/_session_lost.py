"""Recognising a lost legacy session that a server reports with HTTP 400 instead of 404.

The spec says a server answers a request carrying an ``Mcp-Session-Id`` it does not know
with 404, and the client then re-creates the session. Servers built like the TypeScript
SDK's examples (``@modelcontextprotocol/server-everything`` among them) keep their sessions
in a map, and after a restart answer every request carrying an old id with HTTP 400 and a
JSON-RPC error such as ``-32000 "Bad Request: No valid session ID provided"``; a
single-session TypeScript server says ``"Bad Request: Server not initialized"``. Without
recognising that, a long-lived client fails every call until its process restarts.

The test is deliberately narrow, so an ordinary 400 (bad params, a refused header) is never
read as session loss: a session id was sent, the status is 400, the body is a JSON-RPC error
with one of the codes such servers use, and its message says the session is unknown.
"""

from __future__ import annotations

import re
from typing import Any, Final

from mcpsync._codes import INVALID_REQUEST, TS_BAD_REQUEST, TS_SESSION_NOT_FOUND

__all__ = ["says_session_lost"]

# -32000: the TypeScript SDK's "Bad Request" errors; -32001: its "Session not found";
# -32600: Invalid Request, which other servers use for the same answer.
_CODES: Final = frozenset({TS_BAD_REQUEST, TS_SESSION_NOT_FOUND, INVALID_REQUEST})
_WORDING: Final = re.compile(
    r"no valid session|session (id )?(not found|unknown|is invalid|expired|has expired)"
    r"|(unknown|invalid|expired) session|server not initiali[sz]ed", re.IGNORECASE)


def says_session_lost(status: int, error: Any) -> bool:
    """True when a ``status`` reply whose JSON-RPC ``error`` object answered a request that
    carried a session id means "I do not know that session"."""
    if status != 400 or not isinstance(error, dict):
        return False
    message = error.get("message")
    return error.get("code") in _CODES and isinstance(message, str) \
        and _WORDING.search(message) is not None
