"""Shared fixtures of the stdio transport's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mcpsync.transport.stdio import _lifecycle


@pytest.fixture(autouse=True)
def _by_pid_as_it_was(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Whether the by-pid module is in use is process-wide state: a test that takes every
    pidfd away makes start() load it. Put back as it was after each test, so that the
    tests after it run as on a machine whose pidfds work."""
    monkeypatch.setattr(_lifecycle, "_by_pid", _lifecycle._by_pid)
    yield
