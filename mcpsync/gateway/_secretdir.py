"""The ``--secrets-dir`` resolver: a config entry's ``secret_ref`` names a file in a directory.

A gateway started by a host has no Python caller to hand it a
:class:`~mcpsync.secrets.SecretResolver`, so the command takes a directory instead: the
reference ``vault/app`` is the file ``DIR/vault/app``, a JSON object of string values, which
the Manager's own code (:func:`mcpsync.secrets.write_secret_file` and
:func:`~mcpsync.secrets.apply_placeholders`) then renders into the spawn's private secret file.

The file must be a regular file of this user that nobody else can read (no group or other
permission bits), as the token store requires of its files; a reference may not climb out of
the directory (``..``, an absolute path) nor follow a symbolic link at its last step. Errors
name the file and say what to do; no error carries a value read from the file.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from mcpsync.config import ServerConfig
from mcpsync.errors import ConfigError
from mcpsync.secrets import SecretResolver, check_secret_config

__all__ = ["DirectorySecrets", "check_secrets"]


class DirectorySecrets:
    """A :class:`~mcpsync.secrets.SecretResolver` over the files of one directory."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        if not self.directory.is_dir():
            raise ConfigError(f"--secrets-dir {str(self.directory)!r} is not a directory "
                              "(create it with mode 0700 and put one file per secret_ref in it)")

    def __repr__(self) -> str:
        return f"DirectorySecrets({str(self.directory)!r})"

    def path(self, ref: str) -> Path:
        """The file of ``ref``; ``ConfigError`` when the reference would leave the directory."""
        parts = ref.split("/")
        if not ref or PurePosixPath(ref).is_absolute() or "\\" in ref \
                or any(part in ("..", ".", "") for part in parts):
            raise ConfigError(f"secret_ref {ref!r} must be a relative path inside "
                              f"{str(self.directory)!r} (no '..', '.' or leading '/')")
        return self.directory.joinpath(*parts)

    def check(self, ref: str) -> None:
        """Refuse, before anything starts, a missing file or one others may read."""
        self._open_checked(ref)

    def resolve(self, ref: str) -> Mapping[str, str]:
        """The key/value pairs of ``ref``'s file."""
        path, fd = self._open_checked(ref)
        with os.fdopen(fd, "rb") as f:
            raw = f.read()
        try:
            value = json.loads(raw)
        except ValueError:
            # The decoder's message quotes the text around the error: keep only where it is.
            raise ConfigError(f"{path} is not JSON (write an object of strings, "
                              '{"KEY": "value"})') from None
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise ConfigError(f"{path} must hold a JSON object of string values")
        return value

    def _open_checked(self, ref: str) -> tuple[Path, int]:
        path = self.path(ref)
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
                         | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            raise ConfigError(f"secret_ref {ref!r}: cannot open {path}: "
                              f"{exc.strerror or exc} (write the secret there as a JSON "
                              "object, mode 0600)") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise ConfigError(f"secret_ref {ref!r}: {path} is not a regular file")
            if hasattr(os, "geteuid") and info.st_uid != os.geteuid():
                raise ConfigError(f"secret_ref {ref!r}: {path} belongs to another user")
            if info.st_mode & 0o077:
                raise ConfigError(f"secret_ref {ref!r}: {path} has mode "
                                  f"{stat.S_IMODE(info.st_mode):04o}, so others may read it "
                                  f"(chmod 600 {path})")
        except BaseException:
            os.close(fd)
            raise
        return path, fd


def check_secrets(config: ServerConfig, resolver: SecretResolver | None, source: str) -> None:
    """The Manager's checks of an entry's secret settings, before anything starts, worded
    for the gateway when there is no resolver; with a :class:`DirectorySecrets`, the entry's
    file is checked too."""
    if config.secret_ref and resolver is None:
        raise ConfigError(f"{source}: server {config.display_name!r} has secret_ref "
                          f"{config.secret_ref!r} but the gateway has no secrets: start it "
                          "with --secrets-dir DIR (or Gateway(..., secret_resolver=...))",
                          server=config.display_name)
    check_secret_config(config, resolver)
    if config.secret_ref and isinstance(resolver, DirectorySecrets):
        resolver.check(config.secret_ref)
