"""The HTTP room of the server: an embedded WSGI server built on the standard library only.

``_builtin`` holds :class:`~mcpsync.server.http._builtin.WsgiServer` (listening socket,
acceptor, connection threads, shutdown); ``_conn`` runs one keep-alive connection and the
WSGI calling convention; ``_head`` parses a request head within its limits; ``_io`` reads the
socket through one buffer, against deadlines. Those know nothing about MCP: they serve any
WSGI application, so that ``serve_http()`` needs no dependency beyond Python itself.
``_app`` is the MCP endpoint itself (:class:`McpApp`, what ``Server.wsgi_app()`` returns),
with ``_headers`` (Host, Origin and the 2026-07-28 header rules) and ``_channel`` (frames
waiting for the thread that writes a response). ``_auth`` puts OAuth in front of it
(:class:`ProtectedApp`: bearer tokens, RFC 9728 metadata, the audience check) and
``_introspection`` offers a verifier that asks the authorization server (RFC 7662).
``_django`` bridges the app into a Django view, ``_workers`` refuses several gunicorn
workers that do not share a state key.
"""

from __future__ import annotations

from mcpsync.server.http._app import McpApp as McpApp
from mcpsync.server.http._auth import (
    AccessToken as AccessToken,
    ProtectedApp as ProtectedApp,
    TokenVerifier as TokenVerifier,
    current_access_token as current_access_token,
)
from mcpsync.server.http._builtin import WsgiServer as WsgiServer
from mcpsync.server.http._django import DjangoView as DjangoView
from mcpsync.server.http._introspection import (
    IntrospectionError as IntrospectionError,
    IntrospectionVerifier as IntrospectionVerifier,
)

__all__ = [
    "AccessToken",
    "DjangoView",
    "IntrospectionError",
    "IntrospectionVerifier",
    "McpApp",
    "ProtectedApp",
    "TokenVerifier",
    "WsgiServer",
    "current_access_token",
]
