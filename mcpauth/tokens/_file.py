"""The token file shared between processes, :class:`FileTokenStore` (re-exported by
``mcpauth.tokens``), and where it lives by default.

Everything that makes the file safe is here together: owner-only modes, atomic writes
(temp file, fsync, ``os.replace``, directory fsync) and the cross-process lock the provider
refreshes under, so that the reasoning about one can be checked against the others.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

from ..errors import TokenStoreError
from ._base import ForkSafe, json_copy
from ._oslock import fsync_dir, try_lock_file, unlock_file

__all__ = ["LOCK_TIMEOUT", "FileTokenStore", "default_token_path"]

#: How long ``locked()`` waits for another process before giving up (docs/auth.md, "Where
#: tokens live").
LOCK_TIMEOUT = 30.0
_LOCK_POLL = 0.02
_FILE_FORMAT = 1


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


class FileTokenStore(ForkSafe):
    """A JSON file readable only by its owner, shared safely between processes.

    The directory is created 0700 and the file 0600 (created with that mode, never widened);
    a file that group or others can access is refused rather than used, since it would mean
    someone else may already have read the tokens. So is an existing directory that group or
    others can write, or that another user owns: whoever can write there can swap the token
    file or plant the lock file as a symbolic link. The lock file is opened without following
    a symbolic link and must be a regular file of ours. Writes are atomic: a temp file in the same
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
        copy = json_copy(value)
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
        self._check_dir(os.path.dirname(self.path))
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

    def _check_dir(self, directory: str) -> None:
        """Refuse a directory that someone else can write into (missing is fine: we create
        it 0700). It is followed if it is a symbolic link, like ``~/.config`` often is."""
        if sys.platform == "win32":
            return
        try:
            st = os.stat(directory)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise self._error(f"cannot check {directory}: {exc.strerror}") from None
        if not stat.S_ISDIR(st.st_mode):
            raise self._error(f"{directory} is not a directory; remove it or give "
                              f"FileTokenStore another path")
        if st.st_uid != os.geteuid():
            raise self._error(
                f"{directory} belongs to another user (uid {st.st_uid}), who could replace "
                f"the token file; keep tokens in a directory of your own (FileTokenStore("
                f"path=...)) or run: chown {os.geteuid()} {directory}")
        mode = stat.S_IMODE(st.st_mode)
        if mode & 0o022:
            raise self._error(
                f"{directory} can be written by group or others (mode {mode:04o}), who could "
                f"replace the token file or its lock; run: chmod 700 {directory}")

    def _ensure_dir(self) -> str:
        directory = os.path.dirname(self.path)
        if not os.path.isdir(directory):
            try:
                os.makedirs(directory, mode=0o700, exist_ok=True)
            except OSError as exc:
                raise self._error(f"cannot create {directory}: {exc.strerror}") from None
        self._check_dir(directory)
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
        fsync_dir(directory)

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
                    unlock_file(fd)
                else:  # forked inside the block: the lock is the parent's to release
                    os.close(fd)
        finally:
            if os.getpid() == pid:
                lock.release()

    def _acquire_file_lock(self, deadline: float) -> int:
        self._ensure_dir()
        fd = self._open_lock_file()
        while True:
            try:
                if try_lock_file(fd):
                    return fd
            except OSError as exc:
                os.close(fd)
                raise self._error(f"cannot lock {self.lock_path}: {exc.strerror}") from None
            if time.monotonic() >= deadline:
                os.close(fd)
                raise self._lock_timeout()
            time.sleep(_LOCK_POLL)

    def _open_lock_file(self) -> int:
        """Open (or create, 0600) the lock file, never through a symbolic link: a planted
        link would make us create or lock a file of someone else's choosing."""
        flags = (os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
                 | getattr(os, "O_CLOEXEC", 0))
        try:
            fd = os.open(self.lock_path, flags, 0o600)
        except OSError as exc:
            if os.path.islink(self.lock_path):
                raise self._error(
                    f"{self.lock_path} is a symbolic link; remove it (the store creates its "
                    f"own lock file) and check who made it") from None
            raise self._error(f"cannot open {self.lock_path}: {exc.strerror}") from None
        if sys.platform != "win32":
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                os.close(fd)
                raise self._error(
                    f"{self.lock_path} is not a regular file of yours; remove it (the "
                    f"store creates its own lock file)")
        return fd

    def _lock_timeout(self) -> TokenStoreError:
        return self._error(
            f"{self.lock_path} is held by another process for more than "
            f"{self.lock_timeout:g} s; is another login or refresh stuck?")

    def _error(self, reason: str) -> TokenStoreError:
        return TokenStoreError(f"store: {reason}", step="store", url=self.path)

