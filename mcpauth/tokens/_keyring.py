"""The operating system's keyring as a token store, :class:`KeyringTokenStore`
(re-exported by ``mcpauth.tokens``).

Its own module because it alone depends on the optional ``keyring`` package, imported only
when such a store is built, so nobody else pays for it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from typing import Any

from ..errors import TokenStoreError
from ._base import ForkSafe, KeyLocks, json_copy

__all__ = ["KeyringTokenStore"]


class KeyringTokenStore(ForkSafe):
    """Entries in the operating system's keyring (the optional ``keyring`` package).

    Each key is one keyring item of ``service``, holding the JSON text. ``locked(key)`` is a
    per-key lock within this process only: keyring backends offer no cross-process lock, so
    use :class:`FileTokenStore` when several processes share credentials.
    """

    def __init__(self, service: str = "mcpauth") -> None:
        try:
            import keyring
        except ImportError:
            raise TokenStoreError(
                "store: KeyringTokenStore needs the 'keyring' package; install it with "
                "pip install 'mcpsync[keyring]' (or pip install keyring)",
                step="store") from None
        self._keyring: Any = keyring
        self.service = service
        self._locks = KeyLocks()
        self._track_fork()

    def _after_fork(self) -> None:
        self._locks = KeyLocks()

    def __repr__(self) -> str:
        return f"KeyringTokenStore({self.service!r})"

    def get(self, key: str) -> dict[str, Any] | None:
        try:
            text = self._keyring.get_password(self.service, key)
        except Exception as exc:
            raise self._error("read", exc) from None
        if text is None:
            return None
        try:
            value = json.loads(text)
        except ValueError:
            raise TokenStoreError(
                f"store: keyring item of service {self.service!r} is not valid JSON; "
                "delete it and log in again", step="store") from None
        return value if isinstance(value, dict) else None

    def put(self, key: str, value: Mapping[str, Any]) -> None:
        text = json.dumps(json_copy(value), separators=(",", ":"))
        try:
            self._keyring.set_password(self.service, key, text)
        except Exception as exc:
            raise self._error("write", exc) from None

    def delete(self, key: str) -> None:
        errors = self._keyring.errors
        try:
            self._keyring.delete_password(self.service, key)
        except errors.PasswordDeleteError:
            pass
        except Exception as exc:
            raise self._error("delete", exc) from None

    @contextlib.contextmanager
    def locked(self, key: str) -> Iterator[None]:
        with self._locks.get(key):
            yield

    def _error(self, what: str, exc: BaseException) -> TokenStoreError:
        # The backend's message is not ours to trust with secrets; name its type only.
        return TokenStoreError(
            f"store: cannot {what} keyring service {self.service!r} "
            f"({type(exc).__name__})", step="store")

