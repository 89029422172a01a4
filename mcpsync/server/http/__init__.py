"""The HTTP room of the server: an embedded WSGI server built on the standard library only.

``_builtin`` holds :class:`~mcpsync.server.http._builtin.WsgiServer` (listening socket,
acceptor, connection threads, shutdown); ``_conn`` runs one keep-alive connection and the
WSGI calling convention; ``_head`` parses a request head within its limits; ``_io`` reads the
socket through one buffer, against deadlines. Those know nothing about MCP: they serve any
WSGI application, so that ``serve_http()`` needs no dependency beyond Python itself.
``_app`` is the MCP endpoint itself (:class:`McpApp`, what ``Server.wsgi_app()`` returns),
with ``_headers`` (Host, Origin and the 2026-07-28 header rules) and ``_channel`` (frames
waiting for the thread that writes a response). ``_django`` bridges the app into a Django
view, ``_workers`` refuses several gunicorn workers that do not share a state key.
"""

from __future__ import annotations

from mcpsync.server.http._app import McpApp as McpApp
from mcpsync.server.http._builtin import WsgiServer as WsgiServer
from mcpsync.server.http._django import DjangoView as DjangoView

__all__ = ["DjangoView", "McpApp", "WsgiServer"]
