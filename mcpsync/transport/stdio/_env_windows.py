"""How a stdio command is resolved and run on Windows: ``PATHEXT`` lookup, batch files.

Split from ``_env`` because only a Windows command runs it (``resolve_argv`` loads it there),
so a client import elsewhere does not compile it. Plain functions of their inputs, so they
are unit-tested on Linux; ``_env`` still exports both public names.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

__all__ = ["resolve_windows", "windows_argv"]

_DEFAULT_PATHEXT = ".COM;.EXE;.BAT;.CMD"


def resolve_windows(
    command: str,
    path: str,
    *,
    pathext: str | None = None,
    cwd: str | None = None,
    isfile: Callable[[str], bool] = os.path.isfile,
) -> str | None:
    """Find ``command`` the way ``CreateProcess`` users expect: each ``PATH`` directory in
    order, trying the name as given when it already has a ``PATHEXT`` extension, otherwise
    each extension of ``PATHEXT``. A command with a path separator is only tried there
    (relative to ``cwd``). Returns the file found, or ``None``.
    """
    exts = [e for e in (pathext or _DEFAULT_PATHEXT).split(";") if e]
    lower_exts = [e.lower() for e in exts]
    has_ext = os.path.splitext(command)[1].lower() in lower_exts

    def candidates(base: str) -> list[str]:
        names = [base] if has_ext else []
        return names + [base + e for e in exts]

    if "/" in command or "\\" in command:
        base = command if cwd is None or _is_abs_windows(command) else _join(cwd, command)
        dirs_names = candidates(base)
    else:
        dirs_names = []
        for directory in (d.strip('"') for d in path.split(";") if d.strip('"')):
            dirs_names.extend(candidates(_join(directory, command)))
    for candidate in dirs_names:
        if isfile(candidate):
            return candidate
    return None


def _is_abs_windows(p: str) -> bool:
    return p.startswith(("\\", "/")) or (len(p) > 1 and p[1] == ":")


def _join(directory: str, name: str) -> str:
    return directory if not directory else directory.rstrip("\\/") + "\\" + name


def windows_argv(resolved: str, args: Sequence[str], *, comspec: str = "cmd.exe") -> list[str]:
    """Batch files cannot be executed directly by ``CreateProcess``; run them through
    ``cmd.exe /c`` (which is how ``npx.cmd`` and friends start). Best-effort: cmd.exe's
    quoting rules are not those of ``subprocess.list2cmdline``.
    """
    if os.path.splitext(resolved)[1].lower() in (".cmd", ".bat"):
        return [comspec, "/c", resolved, *args]
    return [resolved, *args]
