"""The HTTP room of the server: an embedded WSGI server built on the standard library only.

``_builtin`` holds :class:`~mcpsync.server.http._builtin.WsgiServer` (listening socket,
acceptor, connection threads, shutdown); ``_conn`` runs one keep-alive connection and the
WSGI calling convention; ``_head`` parses a request head within its limits; ``_io`` reads the
socket through one buffer, against deadlines. Nothing here knows about MCP: the room serves
any WSGI application, so that ``serve_http()`` needs no dependency beyond Python itself.
"""

from __future__ import annotations

from mcpsync.server.http._builtin import WsgiServer as WsgiServer

__all__ = ["WsgiServer"]
