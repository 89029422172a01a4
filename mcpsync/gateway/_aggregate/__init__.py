"""Pure helpers that let the gateway show several upstreams as one MCP server.

Nothing here does I/O or starts threads; the tables are thread-safe. Every function works on
parsed JSON values (dicts, lists), copies only what it changes and keeps every other member
in its order, so the core can re-serialise only the messages it had to touch.

- :mod:`.names`: tool and prompt names, ``<upstream>__<name>`` fitted to
  ``^[a-zA-Z0-9_-]{1,64}$``, mapped back through a :class:`NameTable` (never by splitting).
- :mod:`.uris`: resource URIs and templates as ``mcpgw://<upstream>/<original>`` and back,
  in lists, reads, subscriptions, ``subscriptions/listen`` filters and notifications.
- :mod:`.ids`: host request ids <-> upstream ids (:class:`IdTable`), progress tokens,
  ``notifications/cancelled``, and server-to-client requests routed back to the host
  request that caused them (:class:`PeerTable`).
- :mod:`.merge`: paginated lists merged behind one cursor, capabilities unioned,
  ``server/discover`` merged, the ``Mcp-Name`` header recomputed from the body.
"""

from __future__ import annotations

from mcpsync.gateway._aggregate.ids import (
    DEFAULT_LIMIT,
    Call,
    DuplicateId,
    IdTable,
    PeerCall,
    PeerTable,
    RouteError,
    TableFull,
    id_key,
    value_key,
    with_progress_token,
)
from mcpsync.gateway._aggregate.merge import (
    decode_cursor,
    encode_cursor,
    mcp_name_header,
    merge_cache_hints,
    merge_discover,
    merge_pages,
    union_capabilities,
)
from mcpsync.gateway._aggregate.names import (
    MAX_NAME,
    NAME_RULE,
    SEP,
    NameTable,
    Route,
    assign_names,
    exposed_name,
)
from mcpsync.gateway._aggregate.uris import (
    SCHEME,
    split_listen_filter,
    unwrap_uri,
    unwrap_uri_params,
    wrap_content_blocks,
    wrap_contents,
    wrap_listen_filter,
    wrap_prompt_result,
    wrap_resources,
    wrap_templates,
    wrap_tool_result,
    wrap_updated,
    wrap_uri,
)

__all__ = [
    "DEFAULT_LIMIT", "MAX_NAME", "NAME_RULE", "SCHEME", "SEP", "Call", "DuplicateId",
    "IdTable", "NameTable", "PeerCall", "PeerTable", "Route", "RouteError", "TableFull",
    "assign_names", "decode_cursor", "encode_cursor", "exposed_name", "id_key",
    "mcp_name_header", "merge_cache_hints", "merge_discover", "merge_pages",
    "split_listen_filter", "union_capabilities", "unwrap_uri", "unwrap_uri_params",
    "value_key", "with_progress_token", "wrap_content_blocks", "wrap_contents",
    "wrap_listen_filter", "wrap_prompt_result", "wrap_resources", "wrap_templates",
    "wrap_tool_result", "wrap_updated", "wrap_uri",
]
