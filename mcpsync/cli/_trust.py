"""Trust of project config files: a ``./.mcp.json`` found by default never runs silently.

A config file names programs to start, so running ``mcpsync tools`` inside a freshly cloned
repository would run whatever that repository's ``.mcp.json`` says. The ``mcpsync`` command
therefore asks before it starts servers from a file it found by itself in the current
directory (``./.mcp.json``, ``./.vscode/mcp.json``): on a terminal it asks once, on stderr
(stdout may be carrying MCP or a ``--json`` document); without a terminal it refuses (exit 2)
and says how to trust the file. A file named with ``--config`` or ``$MCPSYNC_CONFIG``, and
every library call, is the caller's explicit choice and is not asked about.

Decisions are kept in ``$XDG_CONFIG_HOME/mcpsync/trusted.json`` (mode 0600, in a 0700
directory), keyed by the path where the file was found (absolute, links not resolved) and
holding its real path and the SHA-256 of the content that was trusted: any change to the
file, one byte or a new server, asks again. The found path matters as much as the content:
``${workspaceFolder}`` and a relative command are resolved from where the file was found,
so a ``./.mcp.json`` that is a symbolic link to a trusted file elsewhere would run *this*
directory's ``run.sh`` with the other file's trust. Such a link is asked about for its own
location.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import json
import os
import shlex
import stat
import sys
import tempfile
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mcpsync.cli._errors import EXIT_USAGE, CLIError

if TYPE_CHECKING:
    from mcpsync.cli._context import _Context
    from mcpsync.cli._output import _Outcome
    from mcpsync.config import ServerConfig

__all__ = ["content_digest", "require_trust", "trust_file_path"]

_FORMAT = 1


def trust_file_path() -> str:
    """``~/.config/mcpsync/trusted.json``, honouring an absolute ``$XDG_CONFIG_HOME``."""
    xdg = os.environ.get("XDG_CONFIG_HOME", "")
    # The XDG spec says a relative value is invalid and must be ignored.
    base = xdg if os.path.isabs(xdg) else os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "mcpsync", "trusted.json")


def content_digest(path: str) -> str:
    """The SHA-256 (hex) of the file's bytes."""
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError as exc:
        raise CLIError(f"cannot read config file {path!r}: {exc.strerror or exc}",
                       EXIT_USAGE) from None


def _load(trust_path: str) -> dict[str, Any]:
    """The recorded decisions; a file others could have written is refused, not used."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(trust_path, flags)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise CLIError(f"cannot read {trust_path}: {exc.strerror or exc}; fix or delete it",
                       EXIT_USAGE) from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        mode = stat.S_IMODE(st.st_mode)
        if sys.platform != "win32" and (st.st_uid != os.geteuid() or mode & 0o022):
            raise CLIError(f"{trust_path} could have been written by someone else (mode "
                           f"{mode:04o}, uid {st.st_uid}); check it, then run: chmod 600 "
                           f"{trust_path}", EXIT_USAGE)
        raw = f.read()
    try:
        doc = json.loads(raw.decode("utf-8"))
        files = doc["files"]
        if not isinstance(files, dict):
            raise TypeError("files")
    except (UnicodeDecodeError, ValueError, KeyError, TypeError):
        raise CLIError(f"{trust_path} is not a trust file mcpsync wrote; fix or delete it "
                       f"(deleting it means every project config is asked about again)",
                       EXIT_USAGE) from None
    return files


def _save(trust_path: str, files: dict[str, Any]) -> None:
    """Write atomically (temp file 0600, fsync, rename) so a crash never leaves half."""
    directory = os.path.dirname(trust_path)
    data = json.dumps({"version": _FORMAT, "files": files}, indent=1,
                      sort_keys=True).encode("utf-8")
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".trusted.", suffix=".tmp")
    except OSError as exc:
        raise CLIError(f"cannot write {trust_path}: {exc.strerror or exc}",
                       EXIT_USAGE) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, trust_path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise CLIError(f"cannot write {trust_path}: {exc.strerror or exc}",
                       EXIT_USAGE) from None


def _is_trusted(recorded: object, path: str, digest: str) -> bool | None:
    """``True`` if ``recorded`` (the trust file's entry for ``path``) trusts this file at
    this location with this content, ``False`` if it trusted something else there, ``None``
    if nothing was recorded."""
    if not isinstance(recorded, dict):
        return None
    found = os.path.abspath(path)
    # Entries written before the real path was recorded were keyed by it: they match only
    # a file reached without any link.
    real = recorded.get("realpath", found)
    return recorded.get("sha256") == digest and real == os.path.realpath(path)


def record_trust(path: str, digest: str) -> str:
    """Trust ``path`` (where it was found, and its real path) with content ``digest``;
    returns the trust file's path."""
    trust_path = trust_file_path()
    files = _load(trust_path)
    files[os.path.abspath(path)] = {"sha256": digest, "realpath": os.path.realpath(path)}
    _save(trust_path, files)
    return trust_path


def _ask(path: str, digest: str, changed: bool, configs: Sequence[ServerConfig]) -> bool:
    """Ask on stderr, read the answer from stdin (both are a terminal). What is shown of
    the file is escaped and unexpanded (see :mod:`mcpsync.cli._trust_show`)."""
    importlib.import_module("mcpsync.cli._trust_show")
    from mcpsync.cli._trust_show import printable, read_raw, what_it_starts

    why = ("has changed since you trusted it" if changed
           else "was found in the current directory and is not trusted yet")
    lines = what_it_starts(read_raw(path, digest), configs)
    text = "\n".join([f"mcpsync: {printable(path, 4096)} {why}. It would start:", *lines,
                      "mcpsync: a project config can run any program; trust this file and "
                      "run it? [y/N] "])
    sys.stderr.write(text)
    sys.stderr.flush()
    answer = sys.stdin.readline()
    if not answer.endswith("\n"):   # end of input: no answer is a no
        sys.stderr.write("\n")
    return answer.strip().lower() in ("y", "yes")


def _interactive() -> bool:
    try:
        return sys.stdin.isatty() and sys.stderr.isatty()
    except (AttributeError, ValueError):   # closed or replaced streams
        return False


def require_trust(path: str, digest: str, configs: Sequence[ServerConfig]) -> None:
    """Return if the project config ``path`` (content ``digest``) may run; else ask on a
    terminal (recording a yes), or raise :class:`CLIError` (exit 2) saying what to do."""
    trust_path = trust_file_path()
    trusted = _is_trusted(_load(trust_path).get(os.path.abspath(path)), path, digest)
    if trusted:
        return
    changed = trusted is not None
    if _interactive():
        if _ask(path, digest, changed, configs):
            record_trust(path, digest)
            return
        raise CLIError(f"not running the servers of {path}: you did not trust it",
                       EXIT_USAGE)
    state = ("has changed since it was trusted" if changed
             else "was found in the current directory and is not trusted")
    quoted = shlex.quote(path)
    raise CLIError(f"{path} {state}; a project config can run any program, so read it, "
                   f"then run 'mcpsync trust {quoted}' (or pass --trust-project-config to "
                   f"use it this once)", EXIT_USAGE)


def _cmd_trust(args: argparse.Namespace, ctx: _Context) -> _Outcome:
    """``mcpsync trust PATH``: trust a config file's current content."""
    from mcpsync.cli._errors import _describe
    from mcpsync.cli._output import _json_doc, _Outcome
    importlib.import_module("mcpsync.config_files")
    from mcpsync.config_files import load_config
    importlib.import_module("mcpsync.errors")
    from mcpsync.errors import ConfigError

    path: str = args.path
    if not os.path.isfile(path):
        raise CLIError(f"config file {path!r} does not exist (or is not a file)", EXIT_USAGE)
    digest = content_digest(path)
    try:
        configs = load_config(path)   # a file that cannot be read as a config is no use
    except ConfigError as exc:
        raise CLIError(_describe(exc), EXIT_USAGE) from exc
    if content_digest(path) != digest:
        raise CLIError(f"{path} changed while it was read; run the command again",
                       EXIT_USAGE)
    trust_path = record_trust(path, digest)
    ids = ", ".join(c.id for c in configs) or "none"
    if ctx.json:
        return _Outcome(_json_doc({"path": os.path.abspath(path),
                                   "realpath": os.path.realpath(path), "sha256": digest,
                                   "servers": [c.id for c in configs],
                                   "trust_file": trust_path}))
    return _Outcome(f"trusted {path} (servers: {ids}) until it changes\n")
