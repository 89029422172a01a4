"""Real OAuth peers for mcpauth's end-to-end tests: an authlib authorization server on loopback.

``authlib_server.AuthlibServer`` is a Flask app built on authlib's server side (authorization
code + PKCE S256, refresh with rotation, RFC 7591 registration, client credentials, RFC 8414
metadata); ``fixtures`` has the pytest fixtures that start it and wire it in front of the
loopback Streamable HTTP MCP test server (``http_peers.fault_server``).
"""
