"""The JSON-RPC 2.0 and MCP error codes, in one table.

Every layer needs these numbers: the wire layer builds error messages with them, ``errors``
gives gateway refusals their code, ``protocol`` classifies a server's answer by them, and the
client and the server send them. Written once here, a code cannot drift between a sender and
the place that reads it. The module imports nothing, so even ``errors`` (which ``jsonrpc``
imports) can use it; ``mcpsync.jsonrpc`` re-exports the public names.
"""

from __future__ import annotations

from typing import Final

# --- JSON-RPC 2.0 ---------------------------------------------------------------------

#: The text is not JSON (or not UTF-8, or holds NaN / a lone surrogate).
PARSE_ERROR: Final = -32700
#: Valid JSON that is not a valid JSON-RPC message.
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603

# --- MCP ------------------------------------------------------------------------------

#: The user declined a sampling request (the code the 2024-11-05 schema's examples use).
USER_REJECTED: Final = -1
#: No resource at that URI.
RESOURCE_NOT_FOUND: Final = -32002
#: MCP 2025-11-25: the user must visit a URL first.
URL_ELICITATION_REQUIRED: Final = -32042
#: MCP 2026-07-28: an HTTP header disagrees with the body.
HEADER_MISMATCH: Final = -32020
#: MCP 2026-07-28: the server needs a client capability that was not declared.
MISSING_CLIENT_CAPABILITY: Final = -32021
#: MCP 2026-07-28: the requested protocol version is not served.
UNSUPPORTED_PROTOCOL_VERSION: Final = -32022

#: The codes only a modern (2026-07-28) server sends; on a legacy session they mean the
#: request went out in the wrong era.
MODERN_ONLY_CODES: Final = frozenset({UNSUPPORTED_PROTOCOL_VERSION, MISSING_CLIENT_CAPABILITY,
                                      HEADER_MISMATCH})

# --- the gateway ----------------------------------------------------------------------
# -32000..-32019 is JSON-RPC's implementation-defined range, so these are names for sending
# only: nothing gives them a meaning on receipt.

DENIED_BY_POLICY: Final = -32010
APPROVAL_REJECTED: Final = -32011
BUDGET_EXCEEDED: Final = -32012

# --- other SDKs -----------------------------------------------------------------------
# Codes of the TypeScript SDK's Streamable HTTP server, read when it says a session is gone.

#: "Bad Request: No valid session ID provided".
TS_BAD_REQUEST: Final = -32000
#: "Session not found".
TS_SESSION_NOT_FOUND: Final = -32001
