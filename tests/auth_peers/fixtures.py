"""Pytest fixtures: the authlib authorization server, alone or guarding the MCP test server.

The root ``tests/conftest.py`` registers this module through ``pytest_plugins``: a test
takes a fixture by naming it (``def test_x(protected_mcp: ProtectedMCP)``), with no import.

- ``authlib_server``: a running :class:`AuthlibServer` with default options.
- ``authlib_server_factory``: ``make(**options) -> AuthlibServer`` (``access_token_lifetime``,
  ``send_iss``, ``rotate_refresh_tokens``, ``device_interval``, ``device_auto_approve``, ...).
- ``protected_mcp``: a :class:`ProtectedMCP`, the loopback MCP fault server acting as an OAuth
  protected resource of an authlib server: every MCP request must carry a token that server
  issued for this resource with scope ``mcp:tools``; a 401 names the RFC 9728 metadata, which
  the MCP server serves and which points at the authorization server.
- ``protected_mcp_factory``: ``make(**authlib_options) -> ProtectedMCP``.

At teardown every server is stopped, and the test fails if one of them raised internally or
left a thread running.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from http_peers.fault_server import FaultServer

from auth_peers.authlib_server import AuthlibServer, iter_threads

MCP_SCOPES = ("mcp:tools",)


@dataclass
class ProtectedMCP:
    """An MCP server (``mcp``) protected by an authorization server (``auth``)."""

    auth: AuthlibServer
    mcp: FaultServer

    @property
    def url(self) -> str:
        """The MCP endpoint: ``http://127.0.0.1:<port>/mcp``."""
        return self.mcp.url

    @property
    def resource_metadata_url(self) -> str:
        origin = self.mcp.url.rsplit("/", 1)[0]
        return f"{origin}/.well-known/oauth-protected-resource/mcp"

    def mcp_requests(self) -> list[Any]:
        """The MCP requests the server received (metadata GETs left out)."""
        return [r for r in self.mcp.requests if not r.path.startswith("/.well-known/")]


def protect(mcp: FaultServer, auth: AuthlibServer,
            scopes: Sequence[str] = MCP_SCOPES) -> ProtectedMCP:
    """Make ``mcp`` a protected resource of ``auth`` (RFC 9728 metadata + token checks)."""
    protected = ProtectedMCP(auth, mcp)
    mcp.faults.resource_metadata = {
        "resource": mcp.url,
        "authorization_servers": [auth.issuer],
        "scopes_supported": list(scopes),
        "bearer_methods_supported": ["header"],
    }
    mcp.faults.www_authenticate = [
        f'Bearer resource_metadata="{protected.resource_metadata_url}"']
    mcp.faults.token_validator = auth.resource_validator(mcp.url, scopes)
    return protected


def _check_stopped(servers: list[AuthlibServer], mcps: list[FaultServer]) -> None:
    for server in servers:
        server.stop()
    for mcp in mcps:
        mcp.close()
    errors = [e for s in servers for e in s.errors] + [e for m in mcps for e in m.errors]
    assert not errors, f"a test server failed internally: {errors}"
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(
            True for s in servers for _ in iter_threads(s.port)):
        time.sleep(0.01)
    left = [t.name for s in servers for t in iter_threads(s.port)]
    assert not left, f"authorization server threads left running: {left}"


@pytest.fixture(name="authlib_server_factory")
def authlib_server_factory_fixture() -> Iterator[Callable[..., AuthlibServer]]:
    """Start authorization servers on demand; all stopped and checked at teardown."""
    servers: list[AuthlibServer] = []

    def make(**options: Any) -> AuthlibServer:
        server = AuthlibServer(**options)
        servers.append(server)
        return server

    yield make
    _check_stopped(servers, [])


@pytest.fixture(name="authlib_server")
def authlib_server_fixture(authlib_server_factory: Callable[..., AuthlibServer]
                           ) -> AuthlibServer:
    """One authorization server with default options."""
    return authlib_server_factory()


@pytest.fixture(name="protected_mcp_factory")
def protected_mcp_factory_fixture() -> Iterator[Callable[..., ProtectedMCP]]:
    """Start protected MCP servers, each with its own authorization server."""
    servers: list[AuthlibServer] = []
    mcps: list[FaultServer] = []

    def make(*, scopes: Sequence[str] = MCP_SCOPES, **options: Any) -> ProtectedMCP:
        auth = AuthlibServer(**options)
        servers.append(auth)
        mcp = FaultServer()
        mcps.append(mcp)
        return protect(mcp, auth, scopes)

    yield make
    _check_stopped(servers, mcps)


@pytest.fixture(name="protected_mcp")
def protected_mcp_fixture(protected_mcp_factory: Callable[..., ProtectedMCP]) -> ProtectedMCP:
    """One protected MCP server with a default authorization server."""
    return protected_mcp_factory()


__all__ = [
    "MCP_SCOPES",
    "ProtectedMCP",
    "authlib_server_factory_fixture",
    "authlib_server_fixture",
    "protect",
    "protected_mcp_factory_fixture",
    "protected_mcp_fixture",
]
