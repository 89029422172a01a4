"""Fixtures of the mcpauth tests: the loopback servers of ``_servers.py``, for this folder.

The names (``server``, ``server2``, ``session``) are too plain to register for the whole
suite through the root conftest's ``pytest_plugins``, so they are offered here, where pytest
finds fixtures by the names a conftest module holds.
"""

from __future__ import annotations

from ._servers import scripted_server_fixture, second_scripted_server_fixture, session_fixture

__all__ = ["scripted_server_fixture", "second_scripted_server_fixture", "session_fixture"]
