"""The child's environment and the resolution of its command.

A server should see a small, predictable environment rather than everything the parent
happens to hold (tokens, proxies, virtualenv variables); the config's ``env`` goes on top.
The command is resolved against the *child's* ``PATH``, so the program that runs is the one
the user's env describes, and a missing program is reported before anything is spawned.

The Windows helpers (``PATHEXT`` lookup, ``.cmd``/``.bat`` through ``cmd.exe /c``) are plain
functions of their inputs, so they are unit-tested on Linux. They live in ``_env_windows``,
which :func:`resolve_argv` loads for a Windows command only (elsewhere no connection runs
them), and are still importable from here through a module ``__getattr__``.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...errors import ConfigError

if TYPE_CHECKING:
    from ._env_windows import resolve_windows as resolve_windows, windows_argv as windows_argv

__all__ = [
    "POSIX_SAFE_KEYS",
    "WINDOWS_SAFE_KEYS",
    "build_env",
    "resolve_argv",
    "resolve_windows",
    "windows_argv",
]

POSIX_SAFE_KEYS = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "TMPDIR")
WINDOWS_SAFE_KEYS = (
    "APPDATA", "HOMEDRIVE", "HOMEPATH", "LOCALAPPDATA", "PATH", "PATHEXT",
    "PROCESSOR_ARCHITECTURE", "SYSTEMDRIVE", "SYSTEMROOT", "TEMP", "USERNAME", "USERPROFILE",
)


def _which(command: str, path: str) -> str | None:
    """``shutil.which(command, path=path)`` for a command without a path separator, written
    out: ``shutil`` loads ``bz2``, ``lzma`` and ``zlib`` (about 1 ms), and every stdio
    connection resolves its command. The same steps as the standard library's POSIX branch:
    an empty ``PATH`` finds nothing, an empty entry means the current directory, a directory
    seen before (after ``normcase``) is skipped, and a hit is an existing, executable
    non-directory. On Windows (where ``which`` also tries ``PATHEXT`` and the current
    directory) the standard library's function itself runs; ``resolve_argv`` only gets here
    there when told ``windows=False``, since a Windows command goes through
    :func:`resolve_windows`, which never called ``shutil.which``."""
    if sys.platform == "win32":
        import shutil

        return shutil.which(command, path=path)
    if os.path.dirname(command):
        return command if _runnable(command) else None
    if not path:
        return None
    seen = set()
    for folder in path.split(os.pathsep):
        norm = os.path.normcase(folder)
        if norm not in seen:
            seen.add(norm)
            name = os.path.join(folder, command)
            if _runnable(name):
                return name
    return None


def _runnable(name: str) -> bool:
    """``shutil``'s access check for the default mode: exists, executable, not a directory."""
    return (os.path.exists(name) and os.access(name, os.F_OK | os.X_OK)
            and not os.path.isdir(name))


def _safe_value(value: str) -> bool:
    """Exported bash functions (``BASH_FUNC_x%%=() { ...``) are skipped: they are code."""
    return not value.startswith("()")


def build_env(
    env: Mapping[str, str | None] | None,
    *,
    inherit_env: bool = False,
    environ: Mapping[str, str] | None = None,
    windows: bool | None = None,
) -> dict[str, str]:
    """Return the child's environment: the safe default set (or everything with
    ``inherit_env``), then ``env`` on top, where a ``None`` value removes the key.

    ``environ`` and ``windows`` default to this process; tests pass their own.
    """
    source = os.environ if environ is None else environ
    is_windows = (os.name == "nt") if windows is None else windows
    result: dict[str, str] = {}
    if inherit_env:
        result.update(source)
    elif is_windows:
        upper = {k.upper(): (k, v) for k, v in source.items()}
        for key in WINDOWS_SAFE_KEYS:
            if key in upper and _safe_value(upper[key][1]):
                result[upper[key][0]] = upper[key][1]
    else:
        for key, value in source.items():
            if (key in POSIX_SAFE_KEYS or key.startswith("LC_")) and _safe_value(value):
                result[key] = value
    for key, override in (env or {}).items():
        if is_windows:
            # Windows variable names are case-insensitive: replace whatever spelling is there.
            for existing in [k for k in result if k.upper() == key.upper()]:
                del result[existing]
        if override is None:
            result.pop(key, None)
        else:
            result[key] = override
    return result


def _env_get(env: Mapping[str, str], key: str, windows: bool) -> str | None:
    if not windows:
        return env.get(key)
    for k, v in env.items():
        if k.upper() == key.upper():
            return v
    return None


def _not_found(command: str, path: str) -> str:
    return f'starting {command!r}: command not found (PATH searched: "{path}")'


def resolve_argv(
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    cwd: str | None = None,
    windows: bool | None = None,
) -> list[str]:
    """Return ``argv`` with its command resolved for spawning.

    A command with a path separator is used as given (relative to ``cwd``, as the OS does);
    otherwise it is looked up on the child's ``PATH``. Raises :class:`ConfigError` naming the
    command and the ``PATH`` searched when it is not found or ``cwd`` does not exist.
    """
    is_windows = (os.name == "nt") if windows is None else windows
    if not argv or not argv[0]:
        raise ConfigError("starting a stdio server: the command is empty")
    command, args = argv[0], list(argv[1:])
    path = _env_get(env, "PATH", is_windows) or ""
    if cwd is not None and not os.path.isdir(cwd):
        raise ConfigError(f"starting {command!r}: the working directory cwd={cwd!r} does not "
                          f'exist (PATH: "{path}")')
    seps = ("/", "\\") if is_windows else ("/",)
    if is_windows:
        # Loaded first by import_module, which imports it again in a thread that waited on
        # the module lock while a Ctrl-C stopped another thread's import of it (a bare
        # ``from`` import would read the name from the failed, half-built module).
        importlib.import_module("mcpsync.transport.stdio._env_windows")
        from ._env_windows import resolve_windows, windows_argv

        pathext = _env_get(env, "PATHEXT", True)
        found = resolve_windows(command, path, pathext=pathext, cwd=cwd)
        if found is None:
            raise ConfigError(_not_found(command, path))
        return windows_argv(found, args, comspec=_env_get(env, "COMSPEC", True) or "cmd.exe")
    if any(s in command for s in seps):
        full = command if cwd is None else os.path.join(cwd, command)
        if not os.path.exists(full):
            raise ConfigError(f"starting {command!r}: no such file {full!r} (a command with a "
                              f'path separator is not searched on PATH: "{path}")')
        return [command, *args]
    found_posix = _which(command, path)
    if found_posix is None:
        raise ConfigError(_not_found(command, path))
    return [os.path.abspath(found_posix), *args]


if not TYPE_CHECKING:   # the type checker sees the imports at the top, and no other name
    def __getattr__(name: str) -> Any:
        """The Windows helpers, importable from here as before (PEP 562), loaded on first
        access. Nothing reads this module's attributes on a connection (its users import
        the names they need)."""
        if name in ("resolve_windows", "windows_argv"):
            return getattr(importlib.import_module("mcpsync.transport.stdio._env_windows"),
                           name)
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
