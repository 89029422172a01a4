"""Secrets for spawned servers: resolve a reference, render it, hand the child a 0600 file.

A secret never travels in ``argv`` or the environment, where ``ps`` and ``/proc`` show it.
Instead each spawn gets a fresh private directory holding one file (``secret.env``,
``secret.properties`` or ``secret.json``), and the file's *path* replaces the
``{{secret_file}}`` placeholder in the server's ``args`` and ``env``. The file is deleted when
the server stops, on restart, on ``Manager.close()`` and at interpreter exit (``atexit``).
A hard kill of the host leaves it behind until the next ``Manager`` starts: the directory's
name says which process made it, and :mod:`mcpsync._secret_dirs` sweeps those whose maker is
provably dead.

No secret value is ever put into a message, a log line or a repr: errors name the server, the
reference and the offending *key*.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import os
import re
import shutil
import threading
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from mcpsync._secret_dirs import make_directory
from mcpsync.config import ServerConfig
from mcpsync.errors import ConfigError, SecretError

__all__ = [
    "SECRET_FORMATS",
    "SecretFile",
    "SecretResolver",
    "apply_header_secrets",
    "apply_placeholders",
    "check_secret_config",
    "render_secret",
    "resolve_secret",
    "write_secret_file",
]

SECRET_FORMATS = ("env", "properties", "json")
"""The formats ``render_secret`` writes (``ServerConfig.secret_format``)."""

SECRET_FILE_PLACEHOLDER = "{{secret_file}}"
# An HTTP server has no file to read: a header value names a key of the secret instead.
_HEADER_SECRET = re.compile(r"\{\{secret:([A-Za-z_][A-Za-z0-9_.-]*)\}\}")
WORKTREE_ROOT_PLACEHOLDER = "{{worktree_root}}"

# Shell variable names for env; .properties and JSON keys may also hold dots and dashes.
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*\Z")
# An env value made only of these needs no quotes in any shell or dotenv reader.
_ENV_BARE = re.compile(r"[A-Za-z0-9_./:@+-]+\Z")
_ENV_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t",
                "$": "\\$", "`": "\\`"}
_PROPERTIES_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f",
                       "=": "\\=", ":": "\\:", "#": "\\#", "!": "\\!"}
_SURROGATE = re.compile("[\ud800-\udfff]")


@runtime_checkable
class SecretResolver(Protocol):
    """Turns a secret reference (``ServerConfig.secret_ref``) into key/value pairs.

    Called once per spawn, on the thread that starts the server, so it can fetch fresh values
    (a vault lease, a rotated token). Anything it raises becomes a
    :class:`~mcpsync.errors.SecretError` naming the server and the reference.
    """

    def resolve(self, ref: str) -> Mapping[str, str]:
        """Return the secret's key/value pairs for ``ref``."""
        ...


# -- rendering ---------------------------------------------------------------------------

def _check_pairs(format: str, kv: Mapping[str, str]) -> list[tuple[str, str]]:
    """Validate keys and values; errors name the key and never the value."""
    if format not in SECRET_FORMATS:
        raise ValueError(f"unknown secret format {format!r} (expected 'env', 'properties' "
                         f"or 'json')")
    if not isinstance(kv, Mapping):
        raise ValueError(f"secret must be a mapping of strings, got {type(kv).__name__}")
    pattern = _ENV_KEY if format == "env" else _KEY
    shape = "[A-Za-z_][A-Za-z0-9_]*" if format == "env" else "[A-Za-z_][A-Za-z0-9_.-]*"
    pairs: list[tuple[str, str]] = []
    for key, value in kv.items():
        if not isinstance(key, str):
            raise ValueError(f"secret key must be a string, got {type(key).__name__}")
        if not pattern.match(key):
            raise ValueError(f"secret key {key!r} is not valid for the {format} format "
                             f"(expected {shape})")
        if not isinstance(value, str):
            raise ValueError(f"value of secret key {key!r} must be a string, got "
                             f"{type(value).__name__}")
        if "\0" in value:
            raise ValueError(f"value of secret key {key!r} contains a NUL character")
        if _SURROGATE.search(value):
            # A lone surrogate cannot be written as UTF-8; fail here, naming the key, rather
            # than in the encoder, whose message would quote the character.
            raise ValueError(f"value of secret key {key!r} contains a lone surrogate")
        pairs.append((key, value))
    pairs.sort()
    return pairs


def _env_value(value: str) -> str:
    if _ENV_BARE.match(value):
        return value
    # Inside double quotes a POSIX shell still expands $, ` and \; escaping all three means
    # sourcing the file can never run a command or read another variable.
    return '"' + "".join(_ENV_ESCAPES.get(ch, ch) for ch in value) + '"'


def _properties_value(value: str) -> str:
    out: list[str] = []
    for index, ch in enumerate(value):
        code = ord(ch)
        if ch in _PROPERTIES_ESCAPES:
            out.append(_PROPERTIES_ESCAPES[ch])
        elif ch == " " and index == 0:
            # java.util.Properties strips leading whitespace of a value, so keep it escaped.
            out.append("\\ ")
        elif code < 0x20 or code == 0x7F:
            # Other control characters (vertical tab, form separators) would be read as line
            # breaks by some readers; \\uXXXX is what Properties.store writes for them too.
            out.append(f"\\u{code:04X}")
        elif code > 0xFF:
            # Beyond Latin-1: the file is ISO-8859-1, the classic Properties.load encoding.
            data = ch.encode("utf-16-be")
            for unit in range(0, len(data), 2):
                out.append(f"\\u{int.from_bytes(data[unit:unit + 2], 'big'):04X}")
        else:
            out.append(ch)
    return "".join(out)


def render_secret(format: str, kv: Mapping[str, str]) -> str:
    """Render a secret as the text of a file in ``format`` (``env``, ``properties``, ``json``).

    Keys are sorted, so the output is deterministic, and it ends with a newline. Raises
    ``ValueError`` naming the key (never the value) for a bad key or value, and for an
    unknown format. A ``properties`` text uses only Latin-1 characters (write it as
    ISO-8859-1, as :func:`write_secret_file` does); the others are written as UTF-8.
    """
    pairs = _check_pairs(format, kv)
    if format == "json":
        return json.dumps(dict(pairs), sort_keys=True, ensure_ascii=False) + "\n"
    if format == "env":
        lines = [f"{key}={_env_value(value)}" for key, value in pairs]
    else:
        lines = [f"{key}={_properties_value(value)}" for key, value in pairs]
    # An empty secret still ends with a newline, like every other rendering.
    return "".join(line + "\n" for line in lines) or "\n"


# -- config checks -----------------------------------------------------------------------

def _uses(config: ServerConfig, placeholder: str, *, cwd: bool) -> bool:
    values = [*config.args, *(v for v in config.env.values() if v is not None)]
    if cwd and config.cwd is not None:
        values.append(config.cwd)
    return any(placeholder in value for value in values)


def _config_error(config: ServerConfig, problem: str) -> ConfigError:
    name = config.display_name
    return ConfigError(f"server {name!r}: {problem}", server=name)


def check_secret_config(config: ServerConfig, resolver: SecretResolver | None) -> None:
    """Check a config's secret settings before anything is spawned.

    Raises :class:`~mcpsync.errors.ConfigError` naming the server for an unknown
    ``secret_format``, a ``secret_ref`` without a resolver, a ``{{secret_file}}`` or
    ``{{secret:KEY}}`` placeholder without a ``secret_ref``, and a ``secret_ref`` on an HTTP
    config none of whose headers takes a ``{{secret:KEY}}`` (a secret file is handed to a
    spawned process only).
    """
    if config.secret_format not in SECRET_FORMATS:
        raise _config_error(config, f"unknown secret_format {config.secret_format!r} "
                                    f"(expected 'env', 'properties' or 'json')")
    in_headers = any(_HEADER_SECRET.search(v) for v in config.headers.values())
    if config.secret_ref and config.is_http and not in_headers:
        raise _config_error(config, "secret_ref on an HTTP server needs a header that takes "
                                    "a key of the secret, as in \"Authorization\": \"Bearer "
                                    "{{secret:TOKEN}}\" (secret files are only for a spawned "
                                    "process)")
    if in_headers and not config.secret_ref:
        raise _config_error(config, "a header uses {{secret:...}} but the config has no "
                                    "secret_ref")
    if config.secret_ref and resolver is None:
        raise _config_error(config, f"secret_ref {config.secret_ref!r} needs a secret "
                                    f"resolver (Manager(secret_resolver=...))")
    if not config.secret_ref and _uses(config, SECRET_FILE_PLACEHOLDER, cwd=False):
        raise _config_error(config, "{{secret_file}} is used but the config has no "
                                    "secret_ref")


# -- secret files ------------------------------------------------------------------------

_registry_lock = threading.Lock()
_live: dict[int, SecretFile] = {}


class SecretFile:
    """One spawn's secret file: ``path`` inside its own 0700 directory.

    ``remove()`` deletes the file and the directory; it is idempotent, safe from many threads
    and never raises. Until then the file is registered for removal at interpreter exit. In
    a forked child ``remove()`` (and the exit hook) does nothing: the file belongs to the
    parent's server.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.directory = os.path.dirname(path)
        self._pid = os.getpid()
        self._removed = False
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        state = "removed" if self._removed else "live"
        return f"SecretFile({self.path!r}, {state})"

    def remove(self) -> None:
        """Delete the file and its directory (once; later calls do nothing)."""
        if os.getpid() != self._pid:
            return
        with self._lock:
            if self._removed:
                return
            self._removed = True
        with _registry_lock:
            _live.pop(id(self), None)
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        # The server may have left files of its own next to the secret; the directory is ours.
        shutil.rmtree(self.directory, ignore_errors=True)


def _register(secret: SecretFile) -> None:
    with _registry_lock:
        _live[id(secret)] = secret


def _remove_all_at_exit() -> None:
    """Delete every secret file this process still holds (``atexit``)."""
    with _registry_lock:
        pending = list(_live.values())
    for secret in pending:
        secret.remove()  # does nothing in a forked child: the pid differs


def _after_fork_in_child() -> None:
    """A forked child starts with no secret files of its own and a fresh lock (a parent
    thread may have held the old one at the fork, and nobody would release it here)."""
    global _registry_lock, _live
    _registry_lock = threading.Lock()
    _live = {}


atexit.register(_remove_all_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def resolve_secret(config: ServerConfig, resolver: SecretResolver) -> Mapping[str, str]:
    """``resolver.resolve(config.secret_ref)``, with its failure as a
    :class:`~mcpsync.errors.SecretError` naming the server and the reference only."""
    name = config.display_name
    ref = config.secret_ref
    try:
        return resolver.resolve(ref)
    except Exception as exc:
        # The resolver's message may quote what it fetched (`int("s3cr3t")` does), and a
        # chained cause would be printed with any traceback or logged exception: keep only
        # its type.
        raise SecretError(f"server {name!r}: resolving secret {ref!r} failed "
                          f"({type(exc).__name__})", ref=ref, server=name) from None


def apply_header_secrets(config: ServerConfig, resolver: SecretResolver) -> ServerConfig:
    """Return an HTTP ``config`` whose ``{{secret:KEY}}`` header placeholders hold the values
    of ``KEY`` in its resolved ``secret_ref`` (resolved afresh on each call).

    A key the secret lacks, a value that is not a string or one with a line break or NUL
    (which would split the header) raises :class:`~mcpsync.errors.SecretError` naming the
    server, the reference and the key, never the value. The returned config's ``repr`` still
    shows header names only.
    """
    name = config.display_name
    ref = config.secret_ref
    kv = resolve_secret(config, resolver)

    def value_of(match: re.Match[str]) -> str:
        key = match.group(1)
        value = kv.get(key) if isinstance(kv, Mapping) else None
        if not isinstance(value, str):
            raise SecretError(f"server {name!r}: secret {ref!r} has no string key {key!r} "
                              f"for a header", ref=ref, server=name)
        if any(ch in value for ch in "\r\n\0"):
            raise SecretError(f"server {name!r}: the value of key {key!r} of secret {ref!r} "
                              f"holds a line break or NUL, which cannot go in a header",
                              ref=ref, server=name)
        return value

    headers = {key: _HEADER_SECRET.sub(value_of, value)
               for key, value in config.headers.items()}
    return dataclasses.replace(config, headers=headers)


def write_secret_file(config: ServerConfig, resolver: SecretResolver) -> SecretFile:
    """Resolve ``config.secret_ref``, render it and write it to a fresh private file.

    The directory, ``mcpsync-secret-<pid>-<starttime>-...`` (0700), is made by ``mkdtemp`` in
    ``$XDG_RUNTIME_DIR`` when usable, else in the temporary directory; the file,
    ``secret.<format>``, is created with ``O_CREAT | O_EXCL | O_WRONLY`` and mode 0600. The
    returned :class:`SecretFile` is registered for removal at exit until ``remove()``.
    Failures raise :class:`~mcpsync.errors.SecretError` naming the server and the reference.
    """
    name = config.display_name
    ref = config.secret_ref
    if not ref:
        raise _config_error(config, "write_secret_file needs a config with a secret_ref")
    if config.secret_format not in SECRET_FORMATS:
        raise _config_error(config, f"unknown secret_format {config.secret_format!r}")
    kv = resolve_secret(config, resolver)
    try:
        text = render_secret(config.secret_format, kv)
    except ValueError as exc:
        raise SecretError(f"server {name!r}: secret {ref!r} cannot be written as "
                          f"{config.secret_format}: {exc}", ref=ref, server=name) from None
    data = text.encode("latin-1" if config.secret_format == "properties" else "utf-8")
    try:
        directory = make_directory()
    except OSError as exc:
        raise SecretError(f"server {name!r}: cannot create a directory for secret {ref!r}: "
                          f"{exc}", ref=ref, server=name) from exc
    path = os.path.join(directory, f"secret.{config.secret_format}")
    try:
        os.chmod(directory, 0o700)
        flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(path, flags, 0o600)
        try:
            # The umask can only take bits away; make the mode exactly 0600 all the same.
            if hasattr(os, "fchmod"):
                os.fchmod(fd, 0o600)
            _write_all(fd, data)
        finally:
            os.close(fd)
    except OSError as exc:
        shutil.rmtree(directory, ignore_errors=True)
        raise SecretError(f"server {name!r}: cannot write secret {ref!r} to {path}: "
                          f"{exc.strerror or exc}", ref=ref, server=name) from None
    secret = SecretFile(path)
    _register(secret)
    return secret


# -- placeholders ------------------------------------------------------------------------

def apply_placeholders(config: ServerConfig, *, secret_file: str | None = None,
                       worktree_root: str | None = None) -> ServerConfig:
    """Return ``config`` with ``{{secret_file}}`` and ``{{worktree_root}}`` filled in.

    ``{{secret_file}}`` is replaced in ``args`` and ``env`` values, ``{{worktree_root}}`` in
    ``args``, ``env`` values and ``cwd`` (``ServerConfig`` already refused ``{{secret_file}}``
    in ``cwd``). A placeholder that appears without a value raises
    :class:`~mcpsync.errors.ConfigError` naming the server.
    """
    if secret_file is None and _uses(config, SECRET_FILE_PLACEHOLDER, cwd=False):
        raise _config_error(config, "{{secret_file}} is used but there is no secret file "
                                    "(set secret_ref and a secret resolver)")
    if worktree_root is None and _uses(config, WORKTREE_ROOT_PLACEHOLDER, cwd=True):
        raise _config_error(config, "{{worktree_root}} is used but no worktree_root was "
                                    "given (start_thread_server(..., worktree_root=...))")

    def fill(value: str, *, secret: bool) -> str:
        if secret and secret_file is not None:
            value = value.replace(SECRET_FILE_PLACEHOLDER, secret_file)
        if worktree_root is not None:
            value = value.replace(WORKTREE_ROOT_PLACEHOLDER, worktree_root)
        return value

    args = tuple(fill(arg, secret=True) for arg in config.args)
    env = {key: (fill(val, secret=True) if val is not None else None)
           for key, val in config.env.items()}
    cwd = fill(config.cwd, secret=False) if config.cwd is not None else None
    if args == config.args and env == dict(config.env) and cwd == config.cwd:
        return config
    return dataclasses.replace(config, args=args, env=env, cwd=cwd)
