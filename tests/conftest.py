"""Fixtures for every test: the leak check, the demo command, and the peers' fixtures.

The peer packages' fixtures are registered here through ``pytest_plugins``, so a test only
names the fixture it wants (``fault_server``, ``authlib_server``, ...) and imports nothing.

The leak check runs around every test: a test that leaves an ``mcpsync-...`` thread alive
fails, naming it. A test that cannot meet that says so with ``@pytest.mark.leaves_threads(
"why")``, which the check then skips.

Peers (the official ``mcp`` SDK, Node for conformance) are skipped when missing on a
developer's machine but are a hard failure under ``CI=true``: CI must never pass by skipping
(see ``helpers.require_peer``).

A test of the pidfd paths is marked ``@pytest.mark.needs_pidfds(reads_status=...)``: it skips
where this kernel (or a sandbox) refuses what it needs, and under ``CI=true`` on Linux fails
instead (see ``helpers.require_pidfds``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from helpers import mcpsync_threads, require_pidfds, wait_no_threads

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
    config.addinivalue_line(
        "markers",
        "needs_pidfds(reads_status): the test needs pidfds that open (and, with reads_status, "
        "that read an exit status); skipped where the kernel refuses them, failed under CI "
        "on Linux",
    )


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip (or under CI on Linux fail) a ``needs_pidfds`` test where the kernel refuses
    what it needs, asked as the stdio transport asks, before its fixtures run."""
    marker = item.get_closest_marker("needs_pidfds")
    if marker is not None:
        require_pidfds(reads_status=marker.kwargs.get("reads_status", False))


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
