"""Where secret-file directories live, how they are named, and sweeping the ones a killed host
left behind.

A host killed with ``SIGKILL`` (or by the OOM killer, or a power cut on a disk-backed
``/tmp``) runs no ``atexit`` hook, so its secret files stay. To let a later process clean up
without ever touching a live one, each directory's name records its creator:
``mcpsync-secret-<pid>-<starttime>-<pidns>-<random>``, where ``starttime`` is the process's
start in clock ticks since boot (``/proc/<pid>/stat`` field 22) and ``pidns`` the inode of its
pid namespace. A pid alone is not enough: pids are reused, and containers sharing a ``/tmp``
each count from 1.

:func:`sweep` deletes a directory only when it can prove the creator dead: the name parses,
:func:`os.lstat` shows a real directory (not a symbolic link) owned by this user with mode
exactly 0700, the pid namespace is ours, and the pid is gone, a zombie, or now a different
process (another start time). Anything else is left alone. Without ``/proc`` (macOS, BSD)
the names carry no start time and nothing is ever swept.

Directories go in ``$XDG_RUNTIME_DIR`` when it is usable (a tmpfs private to the user,
emptied at logout), else in :func:`tempfile.gettempdir`.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import stat
import tempfile

__all__ = ["PREFIX", "base_directory", "make_directory", "sweep"]

_log = logging.getLogger("mcpsync.secrets")

PREFIX = "mcpsync-secret-"
_NAME = re.compile(r"mcpsync-secret-(\d+)-(\d+)-(\d+)-[A-Za-z0-9_]+\Z")

# (pid, start time, pid namespace) of this process, computed once per pid (a fork recomputes).
_identity: tuple[int, str | None, str | None] | None = None


def _stat_fields(pid: int) -> tuple[str, str] | None:
    """The state letter and start time of ``pid``, or ``None`` when it does not exist.

    Raises ``OSError`` when ``/proc`` cannot say (no ``/proc``, no permission).
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) may hold spaces and parentheses: parse after the last ')'.
    rest = data[data.rfind(b")") + 1:].split()
    if len(rest) < 20:
        raise OSError(f"/proc/{pid}/stat has an unexpected shape")
    return rest[0].decode("ascii", "replace"), rest[19].decode("ascii", "replace")


def _pid_namespace() -> str | None:
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return None


def _me() -> tuple[int, str | None, str | None]:
    global _identity
    pid = os.getpid()
    if _identity is None or _identity[0] != pid:
        try:
            fields = _stat_fields(pid)
        except OSError:
            fields = None
        _identity = (pid, fields[1] if fields else None, _pid_namespace())
    return _identity


def base_directory() -> str:
    """``$XDG_RUNTIME_DIR`` if it is an absolute path to a directory of ours that nobody
    else can enter, else the temporary directory."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(runtime):
        try:
            st = os.stat(runtime)
        except OSError:
            st = None
        if st is not None and stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() \
                and not stat.S_IMODE(st.st_mode) & 0o077:
            return runtime
    return tempfile.gettempdir()


def make_directory() -> str:
    """A fresh 0700 directory named after this process (see the module docstring)."""
    pid, start, namespace = _me()
    if start is None or namespace is None:
        prefix = f"{PREFIX}{pid}-x-"   # cannot be proved dead later: never swept
    else:
        prefix = f"{PREFIX}{pid}-{start}-{namespace}-"
    return tempfile.mkdtemp(prefix=prefix, dir=base_directory())


def _creator_is_dead(pid: int, start: str) -> bool:
    try:
        fields = _stat_fields(pid)
    except OSError:
        return False
    if fields is None:
        return True
    state, now = fields
    # A zombie has exited already; only its parent's wait is missing.
    return state in ("Z", "X") or now != start


def _is_stale(path: str, name: str, namespace: str) -> bool:
    match = _NAME.match(name)
    if match is None or match.group(3) != namespace:
        return False
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() \
            or stat.S_IMODE(st.st_mode) != 0o700:
        return False
    return _creator_is_dead(int(match.group(1)), match.group(2))


def sweep() -> list[str]:
    """Delete the secret directories whose creator is provably dead; return their paths.

    Looks in both places :func:`base_directory` may choose. Never raises: a directory that
    cannot be checked or removed is left for a later sweep.
    """
    _pid, start, namespace = _me()
    if start is None or namespace is None:
        return []
    removed: list[str] = []
    for base in dict.fromkeys((base_directory(), tempfile.gettempdir())):
        try:
            entries = [e.name for e in os.scandir(base) if e.name.startswith(PREFIX)]
        except OSError:
            continue
        for name in entries:
            path = os.path.join(base, name)
            if _is_stale(path, name, namespace):
                # rmtree works on file descriptors here, so a link planted inside is
                # removed, never followed.
                shutil.rmtree(path, ignore_errors=True)
                if not os.path.lexists(path):
                    removed.append(path)
    if removed:
        _log.debug("removed %d secret directories left by killed processes: %s",
                   len(removed), ", ".join(removed))
    return removed
