"""The in-process token store, :class:`MemoryTokenStore` (re-exported by ``mcpauth.tokens``).

Its own module so each store sits apart with only what it needs; this one is the default of
``OAuthProvider`` and the simplest model of the ``TokenStore`` protocol.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from ._base import ForkSafe, KeyLocks, json_copy

__all__ = ["MemoryTokenStore"]


class MemoryTokenStore(ForkSafe):
    """The default store: a dict in this process, gone when it exits.

    ``locked(key)`` is a per-key ``threading.RLock``.
    """

    def __init__(self) -> None:
        self._data: dict[str, dict[str, Any]] = {}
        self._guard = threading.Lock()
        self._locks = KeyLocks()
        self._track_fork()

    def _after_fork(self) -> None:
        self._guard = threading.Lock()
        self._locks = KeyLocks()

    def __repr__(self) -> str:
        return f"MemoryTokenStore({len(self._data)} entries)"

    def get(self, key: str) -> dict[str, Any] | None:
        with self._guard:
            value = self._data.get(key)
            return json_copy(value) if value is not None else None

    def put(self, key: str, value: Mapping[str, Any]) -> None:
        copy = json_copy(value)
        with self._guard:
            self._data[key] = copy

    def delete(self, key: str) -> None:
        with self._guard:
            self._data.pop(key, None)

    @contextlib.contextmanager
    def locked(self, key: str) -> Iterator[None]:
        with self._locks.get(key):
            yield

