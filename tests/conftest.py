"""Fixtures for every test: the leak check, the demo command, and the peers' fixtures.

The peer packages' fixtures are registered here through ``pytest_plugins``, so a test only
names the fixture it wants (``fault_server``, ``authlib_server``, ...) and imports nothing.

The leak check runs around every test: a test that leaves an ``mcpsync-...`` thread alive
fails, naming it. A test that cannot meet that says so with ``@pytest.mark.leaves_threads(
"why")``, which the check then skips.

Peers (the official ``mcp`` SDK, Node for conformance) are skipped when missing on a
developer's machine but are a hard failure under ``CI=true``: CI must never pass by skipping
(see ``helpers.require_peer``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from helpers import mcpsync_threads, wait_no_threads

pytest_plugins = [
    "http_peers.fixtures",
    "http_peers.everything",
    "auth_peers.fixtures",
]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "leaves_threads(reason): the test may end with mcpsync threads alive; the leak check "
        "is off for it",
    )


@pytest.fixture(autouse=True)
def no_leaks(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail the test if it leaves an mcpsync thread behind (unless marked ``leaves_threads``)."""
    if request.node.get_closest_marker("leaves_threads") is not None:
        yield
        return
    before = set(mcpsync_threads())
    yield
    left = wait_no_threads(before)
    assert not left, f"threads left running: {left}"


@pytest.fixture
def demo_argv() -> list[str]:
    """The command that starts the bundled demo server."""
    return [sys.executable, "-m", "mcpsync.demo"]
