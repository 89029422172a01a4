"""What every token store is built from: JSON-copied values and fork-safe thread locks.

The memory, file and keyring stores (:mod:`mcpauth.tokens`) each need the same three pieces:
a deep copy that proves a value is JSON-storable, a lock per key, and thread locks that are
replaced in a forked child. They live here once, so the stores stay small and cannot drift
apart on how they copy values or survive a ``fork()``.
"""

from __future__ import annotations

import json
import os
import threading
import weakref
from collections.abc import Mapping
from typing import Any

from ..errors import TokenStoreError

__all__ = ["ForkSafe", "KeyLocks", "json_copy"]


def json_copy(value: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy through JSON: proves the value is storable and breaks aliasing."""
    try:
        out = json.loads(json.dumps(dict(value)))
    except (TypeError, ValueError) as exc:
        raise TokenStoreError(f"store: value is not JSON-serialisable ({exc})",
                              step="store") from None
    assert isinstance(out, dict)
    return out


class ForkSafe:
    """A store whose thread locks are replaced in a forked child.

    A lock held by another thread at ``fork()`` stays held forever in the child, where that
    thread does not exist; a Celery or multiprocessing worker would then wait on it until the
    lock timeout. The child gets fresh locks instead (cross-process exclusion is the file
    lock's job, and the child opens its own).
    """

    def _track_fork(self) -> None:
        _FORK_SAFE.add(self)

    def _after_fork(self) -> None:
        raise NotImplementedError


_FORK_SAFE: weakref.WeakSet[ForkSafe] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for store in list(_FORK_SAFE):
        store._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class KeyLocks:
    """One re-entrant lock per key, made on first use."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, threading.RLock] = {}

    def get(self, key: str) -> threading.RLock:
        with self._guard:
            lock = self._locks.get(key)
            if lock is None:
                lock = self._locks[key] = threading.RLock()
            return lock

