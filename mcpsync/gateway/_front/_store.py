"""What a legacy host session set after ``initialize``, shared by replicas on one machine.

A sealed session id is drawn once, at ``initialize``, so it cannot carry what the host sets
later: its log level (``logging/setLevel``) and its resource subscriptions. Replicas that
share a session key file therefore also share a directory (by default the key file's path
with ``.sessions`` appended, created 0700) holding one small file per such session: named by
a digest of the session id (never the id, which opens the session), sealed with the session
key (AES-GCM, bound to that digest, so a file cannot stand in for another session's), 0600,
written whole to a temporary file and renamed, and removed when the session is deleted or
expires. It holds the level and the host's (gateway-side) URIs, never a credential.

A replica carrying the session on reads it after the replayed ``initialize`` and sends the
fresh stdio upstreams the same requests again. The directory is per machine: replicas on
other machines need it on a shared file system, or their stdio upstreams start without it.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import tempfile
from collections.abc import Sequence
from typing import Any, Final

from mcpsync.server._state import StateRefused, StateSealer, StateTooLarge

__all__ = ["STATE_DIR_ENV", "SessionStore", "state_dir_for"]

#: The environment variable naming the directory (instead of ``<key file>.sessions``).
STATE_DIR_ENV: Final = "MCPSYNC_GATEWAY_SESSION_STATE_DIR"
#: As long as the sealed ids themselves open.
_TTL: Final = 7 * 24 * 3600.0
_MAX_BYTES: Final = 256 * 1024
_METHOD: Final = "gateway/session-state"

_log = logging.getLogger("mcpsync.gateway")


def state_dir_for(key_file: str, configured: str | os.PathLike[str] | None = None) -> str:
    """The store's directory: ``configured``, else ``MCPSYNC_GATEWAY_SESSION_STATE_DIR``,
    else the key file's path with ``.sessions`` appended."""
    return os.fspath(configured or os.environ.get(STATE_DIR_ENV) or f"{key_file}.sessions")


def _digest(sid: str) -> str:
    return hashlib.sha256(sid.encode("utf-8")).hexdigest()


class SessionStore:
    """One sealed file per legacy session in ``directory``; holds no key in its ``repr``.
    Failing to write is logged and otherwise ignored: the session goes on here, only a move
    to another replica loses what the file would have carried."""

    def __init__(self, directory: str, keys: Sequence[str]) -> None:
        self.directory = directory
        self._sealer = StateSealer("mcpsync-gateway-session", list(keys), ttl=_TTL,
                                   max_bytes=_MAX_BYTES)

    def __repr__(self) -> str:
        return f"<SessionStore {self.directory!r}>"

    def _path(self, sid: str) -> str:
        return os.path.join(self.directory, _digest(sid) + ".state")

    def save(self, sid: str, state: dict[str, Any]) -> None:
        """Replace the session's file with ``state``, sealed (temp file and rename)."""
        try:
            sealed = self._sealer.seal(state, method=_METHOD, target=_digest(sid),
                                       arguments={})
        except StateTooLarge:
            _log.warning("a host session's log level and subscriptions are too large to keep "
                         "for other gateway processes; a move to another one loses them")
            return
        tmp = None
        try:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".", suffix=".tmp")
            with os.fdopen(fd, "w", encoding="ascii") as f:   # mkstemp: already 0600
                f.write(sealed)
            os.replace(tmp, self._path(sid))
            tmp = None
        except OSError as exc:
            _log.warning("the gateway could not write a host session's state in %r (%s); "
                         "a move to another gateway process loses its log level and "
                         "subscriptions", self.directory, exc.strerror or exc)
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)

    def load(self, sid: str) -> dict[str, Any]:
        """The session's state (empty when there is none, or it does not open)."""
        path = self._path(sid)
        try:
            with open(path, encoding="ascii") as f:
                sealed = f.read()
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            _log.warning("the gateway could not read a host session's state %r (%s)", path,
                         exc)
            return {}
        try:
            return self._sealer.open(sealed.strip(), method=_METHOD, target=_digest(sid),
                                     arguments={})
        except StateRefused as exc:
            _log.info("a host session's state file %r does not open here (%s)", path,
                      exc.reason)
            return {}

    def remove(self, sid: str) -> None:
        """The session ended: its file goes."""
        try:
            os.unlink(self._path(sid))
        except FileNotFoundError:
            pass
        except OSError as exc:
            _log.warning("the gateway could not remove a host session's state (%s)",
                         exc.strerror or exc)
