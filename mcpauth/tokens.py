"""Tokens and the stores that keep them between runs (rules §9).

A :class:`Token` holds an *absolute* expiry (``expires_at``, epoch seconds) computed once on
receipt, so a token read back from disk an hour later still knows when it dies; relative
``expires_in`` values would silently reset on every load.

Stores hold plain JSON dicts keyed by strings (:func:`credential_key`,
:func:`registration_key`, :func:`resource_index_key`), so one store can keep tokens,
registrations and DPoP keys alike. Every store has ``locked(key)``: the provider refreshes
inside it with "take the lock, re-read, use a token another process already refreshed, else
refresh and write", so two processes never spend the same rotating refresh token.

All three stores are safe to use from many threads.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from .errors import TokenRequestError, TokenStoreError

__all__ = [
    "FileTokenStore",
    "KeyringTokenStore",
    "MemoryTokenStore",
    "Token",
    "TokenStore",
    "credential_key",
    "default_token_path",
    "registration_key",
    "resource_index_key",
]

#: Refresh this long before expiry at most (rules §1), or half the lifetime if shorter.
REFRESH_MARGIN = 60.0
#: How long ``locked()`` waits for another process before giving up (rules §1).
LOCK_TIMEOUT = 30.0
_LOCK_POLL = 0.02
_FILE_FORMAT = 1


@dataclass(frozen=True, repr=False)
class Token:
    """An access token with what it is for and when it dies.

    ``expires_at`` is absolute (epoch seconds), ``None`` when the server gave no lifetime.
    ``issued_at`` is when we received it; with ``expires_at`` it gives the lifetime that
    sizes the refresh margin (a 30 s token must not be "due" from the moment it arrives).
    ``dpop_jwk`` is the private JWK of the key the token is bound to, stored with the token so
    a bound token read back from the store stays usable. ``repr`` masks every secret.
    """

    access_token: str
    token_type: str = "Bearer"
    expires_at: float | None = None
    refresh_token: str | None = None
    scope: str | None = None
    issuer: str = ""
    client_id: str = ""
    resource: str = ""
    dpop_jwk: Mapping[str, Any] | None = None
    issued_at: float | None = field(default=None, compare=False)

    def __repr__(self) -> str:
        refresh = "<masked>" if self.refresh_token else None
        key = "<bound key>" if self.dpop_jwk else None
        return (
            f"Token(access_token=<masked>, token_type={self.token_type!r}, "
            f"expires_at={self.expires_at!r}, refresh_token={refresh}, scope={self.scope!r}, "
            f"issuer={self.issuer!r}, client_id={self.client_id!r}, "
            f"resource={self.resource!r}, dpop_jwk={key})"
        )

    @classmethod
    def from_response(
        cls,
        data: Mapping[str, Any],
        *,
        now: float | None = None,
        requested_scope: str | None = None,
        issuer: str = "",
        client_id: str = "",
        resource: str = "",
        previous_refresh_token: str | None = None,
        dpop_jwk: Mapping[str, Any] | None = None,
    ) -> Token:
        """Build a token from a token-endpoint JSON answer.

        A missing ``refresh_token`` keeps ``previous_refresh_token`` (servers that do not
        rotate send none on refresh, and dropping ours would force a full login); a missing
        ``scope`` means the requested one was granted (RFC 6749 §5.1).
        """
        access = data.get("access_token")
        if not isinstance(access, str) or not access:
            raise TokenRequestError(
                f"token request: the answer from {issuer or 'the authorization server'} "
                "has no access_token",
                error="invalid_response",
                step="token request",
                url=issuer or None,
            )
        now = time.time() if now is None else now
        token_type = data.get("token_type")
        refresh = data.get("refresh_token")
        scope = data.get("scope")
        return cls(
            access_token=access,
            token_type=token_type if isinstance(token_type, str) and token_type else "Bearer",
            expires_at=_expires_at(data.get("expires_in"), now),
            refresh_token=refresh if isinstance(refresh, str) and refresh
            else previous_refresh_token,
            scope=scope if isinstance(scope, str) else requested_scope,
            issuer=issuer,
            client_id=client_id,
            resource=resource,
            dpop_jwk=dict(dpop_jwk) if dpop_jwk is not None else None,
            issued_at=now,
        )

    def expires_in(self, now: float | None = None) -> float | None:
        """Seconds left (negative once expired), ``None`` when the lifetime is unknown."""
        if self.expires_at is None:
            return None
        return self.expires_at - (time.time() if now is None else now)

    def refresh_due(self, now: float | None = None) -> bool:
        """True inside the refresh margin: ``min(60 s, half the lifetime)`` before expiry."""
        left = self.expires_in(now)
        if left is None or self.expires_at is None:
            return False
        margin = REFRESH_MARGIN
        if self.issued_at is not None:
            margin = min(margin, max(0.0, (self.expires_at - self.issued_at) / 2))
        return left <= margin

    def expired(self, now: float | None = None) -> bool:
        """True once ``expires_at`` has passed; a token without a lifetime never expires here
        (the server says so with a 401 instead)."""
        left = self.expires_in(now)
        return left is not None and left <= 0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict for a store; :meth:`from_dict` reads it back."""
        return {
            "access_token": self.access_token,
            "token_type": self.token_type,
            "expires_at": self.expires_at,
            "issued_at": self.issued_at,
            "refresh_token": self.refresh_token,
            "scope": self.scope,
            "issuer": self.issuer,
            "client_id": self.client_id,
            "resource": self.resource,
            "dpop_jwk": dict(self.dpop_jwk) if self.dpop_jwk is not None else None,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Token:
        """Read a :meth:`to_dict` dict back; a malformed entry raises ``TokenStoreError``."""
        try:
            access = d["access_token"]
            if not isinstance(access, str):
                raise TypeError("access_token")
            jwk = d.get("dpop_jwk")
            if jwk is not None and not isinstance(jwk, Mapping):
                raise TypeError("dpop_jwk")
            return cls(
                access_token=access,
                token_type=_opt_str(d.get("token_type")) or "Bearer",
                expires_at=_opt_float(d.get("expires_at")),
                refresh_token=_opt_str(d.get("refresh_token")),
                scope=_opt_str(d.get("scope")),
                issuer=_opt_str(d.get("issuer")) or "",
                client_id=_opt_str(d.get("client_id")) or "",
                resource=_opt_str(d.get("resource")) or "",
                dpop_jwk=dict(jwk) if jwk is not None else None,
                issued_at=_opt_float(d.get("issued_at")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise TokenStoreError(
                f"store: a stored token is malformed ({type(exc).__name__}: bad or missing "
                f"field {exc.args[0] if exc.args else '?'}); log in again",
                step="store",
            ) from None


def _expires_at(expires_in: Any, now: float) -> float | None:
    """Absolute expiry from ``expires_in``; anything unusable means "unknown"."""
    if isinstance(expires_in, bool):
        return None
    if isinstance(expires_in, str):
        try:
            expires_in = float(expires_in)
        except ValueError:
            return None
    if isinstance(expires_in, (int, float)) and expires_in == expires_in:  # not NaN
        return now + max(0.0, float(expires_in))
    return None


def _opt_str(v: Any) -> str | None:
    if v is None:
        return None
    if not isinstance(v, str):
        raise TypeError("string field")
    return v


def _opt_float(v: Any) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError("number field")
    return float(v)


# -- keys -----------------------------------------------------------------------------------

def credential_key(issuer: str, client_id: str, resource: str) -> str:
    """The store key of the tokens for ``(issuer, client_id, resource)`` (rules §9).

    The triple is JSON-encoded so no character inside a URL can make two triples collide.
    """
    return "credential:" + json.dumps([issuer, client_id, resource], separators=(",", ":"))


def registration_key(issuer: str) -> str:
    """The store key of the client registration made with ``issuer``."""
    return "registration:" + issuer


def resource_index_key(resource: str) -> str:
    """The store key of ``{"issuer": ..., "client_id": ...}`` last used for ``resource``, so a
    new process finds its stored tokens before any 401 tells it the issuer."""
    return "resource:" + resource


# -- the protocol and the memory store ------------------------------------------------------

class TokenStore(Protocol):
    """Where tokens, registrations and DPoP keys live; values are JSON dicts."""

    def get(self, key: str) -> dict[str, Any] | None: ...

    def put(self, key: str, value: Mapping[str, Any]) -> None: ...

    def delete(self, key: str) -> None: ...

    def locked(self, key: str) -> contextlib.AbstractContextManager[None]: ...


def _json_copy(value: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy through JSON: proves the value is storable and breaks aliasing."""
    try:
        out = json.loads(json.dumps(dict(value)))
    except (TypeError, ValueError) as exc:
        raise TokenStoreError(f"store: value is not JSON-serialisable ({exc})",
                              step="store") from None
    assert isinstance(out, dict)
    return out


class _ForkSafe:
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


_FORK_SAFE: weakref.WeakSet[_ForkSafe] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for store in list(_FORK_SAFE):
        store._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class _KeyLocks:
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


class MemoryTokenStore(_ForkSafe):
    """The default store: a dict in this process, gone when it exits.

    ``locked(key)`` is a per-key ``threading.RLock``.
    """

    def __init__(self) -> None:
        self._data: dict[str, dict[str, Any]] = {}
        self._guard = threading.Lock()
        self._locks = _KeyLocks()
        self._track_fork()

    def _after_fork(self) -> None:
        self._guard = threading.Lock()
        self._locks = _KeyLocks()

    def __repr__(self) -> str:
        return f"MemoryTokenStore({len(self._data)} entries)"

    def get(self, key: str) -> dict[str, Any] | None:
        with self._guard:
            value = self._data.get(key)
            return _json_copy(value) if value is not None else None

    def put(self, key: str, value: Mapping[str, Any]) -> None:
        copy = _json_copy(value)
        with self._guard:
            self._data[key] = copy

    def delete(self, key: str) -> None:
        with self._guard:
            self._data.pop(key, None)

    @contextlib.contextmanager
    def locked(self, key: str) -> Iterator[None]:
        with self._locks.get(key):
            yield


# -- the file store -------------------------------------------------------------------------

def default_token_path() -> str:
    """``~/.config/mcpauth/tokens.json``, honouring ``$XDG_CONFIG_HOME``;
    ``%APPDATA%\\mcpauth\\tokens.json`` on Windows."""
    if sys.platform == "win32":
        base = os.environ.get("APPDATA") or os.path.join(
            os.path.expanduser("~"), "AppData", "Roaming")
    else:
        xdg = os.environ.get("XDG_CONFIG_HOME", "")
        # The XDG spec says a relative value is invalid and must be ignored.
        base = xdg if os.path.isabs(xdg) else os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "mcpauth", "tokens.json")


class FileTokenStore(_ForkSafe):
    """A JSON file readable only by its owner, shared safely between processes.

    The directory is created 0700 and the file 0600 (created with that mode, never widened);
    a file that group or others can access is refused rather than used, since it would mean
    someone else may already have read the tokens. Writes are atomic: a temp file in the same
    directory, fsync, ``os.replace``, fsync of the directory, so a crash leaves the old file or
    the new one, never half of one. ``locked(key)`` takes ``fcntl.flock`` on ``<path>.lock``
    (``msvcrt`` on Windows, best effort) for the whole file, waits at most ``lock_timeout``
    seconds, and is re-entrant within a thread. Every ``get`` re-reads the file, so inside
    ``locked()`` it sees what another process wrote.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *,
                 lock_timeout: float = LOCK_TIMEOUT) -> None:
        self.path: str = os.path.abspath(os.fspath(path) if path is not None
                                         else default_token_path())
        self.lock_path: str = self.path + ".lock"
        self.lock_timeout = lock_timeout
        self._thread_lock = threading.RLock()
        self._local = threading.local()
        self._track_fork()

    def _after_fork(self) -> None:
        self._thread_lock = threading.RLock()
        self._local = threading.local()

    def __repr__(self) -> str:
        return f"FileTokenStore({self.path!r})"

    # reads and writes

    def get(self, key: str) -> dict[str, Any] | None:
        value = self._read().get(key)
        return dict(value) if isinstance(value, dict) else None

    def put(self, key: str, value: Mapping[str, Any]) -> None:
        copy = _json_copy(value)
        with self.locked(key):
            entries = self._read()
            entries[key] = copy
            self._write(entries)

    def delete(self, key: str) -> None:
        with self.locked(key):
            entries = self._read()
            if entries.pop(key, None) is not None:
                self._write(entries)

    def _read(self) -> dict[str, Any]:
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
        try:
            fd = os.open(self.path, flags)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise self._error(f"cannot open {self.path}: {exc.strerror}") from None
        with os.fdopen(fd, "rb") as f:
            self._check_mode(os.fstat(f.fileno()))
            raw = f.read()
        try:
            doc = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise self._error(
                f"{self.path} is not valid JSON ({type(exc).__name__}); fix or delete it "
                "(deleting it means logging in again)") from None
        entries = doc.get("entries") if isinstance(doc, dict) else None
        if not isinstance(entries, dict):
            raise self._error(
                f"{self.path} is not a token file (no 'entries' object); fix or delete it")
        return entries

    def _check_mode(self, st: os.stat_result) -> None:
        if sys.platform == "win32":
            return
        mode = stat.S_IMODE(st.st_mode)
        if mode & 0o077:
            raise self._error(
                f"{self.path} is accessible by group or others (mode {mode:04o}); "
                f"run: chmod 600 {self.path}")

    def _ensure_dir(self) -> str:
        directory = os.path.dirname(self.path)
        if not os.path.isdir(directory):
            try:
                os.makedirs(directory, mode=0o700, exist_ok=True)
            except OSError as exc:
                raise self._error(f"cannot create {directory}: {exc.strerror}") from None
        return directory

    def _write(self, entries: Mapping[str, Any]) -> None:
        directory = self._ensure_dir()
        data = json.dumps({"version": _FILE_FORMAT, "entries": entries}, indent=1,
                          sort_keys=True).encode("utf-8")
        # mkstemp creates the file 0600 (O_EXCL), so it is never readable by others, even
        # for the instant before os.replace.
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tokens.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise self._error(f"cannot write {self.path}: {exc.strerror}") from None
        _fsync_dir(directory)

    # locking

    @contextlib.contextmanager
    def locked(self, key: str) -> Iterator[None]:
        """Hold the file's lock (all keys share it); re-entrant within a thread."""
        local, lock, pid = self._local, self._thread_lock, os.getpid()
        depth: int = getattr(local, "depth", 0)
        if depth:
            local.depth = depth + 1
            try:
                yield
            finally:
                local.depth -= 1
            return
        deadline = time.monotonic() + self.lock_timeout
        if not lock.acquire(timeout=max(0.0, self.lock_timeout)):
            raise self._lock_timeout()
        try:
            fd = self._acquire_file_lock(deadline)
            local.depth = 1
            try:
                yield
            finally:
                local.depth = 0
                if os.getpid() == pid:
                    _unlock_file(fd)
                else:  # forked inside the block: the lock is the parent's to release
                    os.close(fd)
        finally:
            if os.getpid() == pid:
                lock.release()

    def _acquire_file_lock(self, deadline: float) -> int:
        self._ensure_dir()
        try:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise self._error(f"cannot open {self.lock_path}: {exc.strerror}") from None
        while True:
            try:
                if _try_lock_file(fd):
                    return fd
            except OSError as exc:
                os.close(fd)
                raise self._error(f"cannot lock {self.lock_path}: {exc.strerror}") from None
            if time.monotonic() >= deadline:
                os.close(fd)
                raise self._lock_timeout()
            time.sleep(_LOCK_POLL)

    def _lock_timeout(self) -> TokenStoreError:
        return self._error(
            f"{self.lock_path} is held by another process for more than "
            f"{self.lock_timeout:g} s; is another login or refresh stuck?")

    def _error(self, reason: str) -> TokenStoreError:
        return TokenStoreError(f"store: {reason}", step="store", url=self.path)


if sys.platform == "win32":
    import msvcrt

    def _try_lock_file(fd: int) -> bool:
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True

    def _unlock_file(fd: int) -> None:
        try:
            os.lseek(fd, 0, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
        except OSError:
            pass
        finally:
            os.close(fd)

    def _fsync_dir(directory: str) -> None:
        """Windows cannot open a directory for fsync; os.replace is as durable as it gets."""

else:
    import fcntl

    def _try_lock_file(fd: int) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return False
            raise
        return True

    def _unlock_file(fd: int) -> None:
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def _fsync_dir(directory: str) -> None:
        """Make the rename itself durable: without this a crash can lose the new name."""
        try:
            dfd = os.open(directory, os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(dfd)
        except OSError:
            pass
        finally:
            os.close(dfd)


# -- the keyring store ----------------------------------------------------------------------

class KeyringTokenStore(_ForkSafe):
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
        self._locks = _KeyLocks()
        self._track_fork()

    def _after_fork(self) -> None:
        self._locks = _KeyLocks()

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
        text = json.dumps(_json_copy(value), separators=(",", ":"))
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
