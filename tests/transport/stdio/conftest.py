"""Shared fixtures of the stdio transport's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mcpsync.transport.stdio import _lifecycle


@pytest.fixture(autouse=True)
def _by_pid_as_it_was(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Whether the by-pid module is in use, and the answer to whether this kernel's pidfds
    read a status, are process-wide state: a test that takes every pidfd away (or asks the
    question of a simulated kernel) makes start() load it, or leaves the answer no. Both
    put back as they were after each test, so that the tests after it run as on a machine
    whose pidfds work."""
    monkeypatch.setattr(_lifecycle, "_by_pid", _lifecycle._by_pid)
    monkeypatch.setattr(_lifecycle, "_pidfd_peeks", _lifecycle._pidfd_peeks)
    yield
