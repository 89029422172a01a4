"""Checking ``connect()``'s target and options, so ``client.py`` holds only behaviour.

Every check raises :class:`~mcpsync.errors.ConfigError` naming the option, before anything is
spawned: a typo fails at the call site, not in a half-started connection.
"""

from __future__ import annotations

import math
import os
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from mcpsync._version import __version__
from mcpsync.config import ServerConfig
from mcpsync.errors import ConfigError, ConnectionLost
from mcpsync.protocol import LEGACY_VERSIONS, LOG_LEVELS, SUPPORTED_VERSIONS

__all__ = ["Options", "config_of", "make_options"]

_ERAS = ("auto", "legacy", "modern")


@dataclass(frozen=True)
class Options:
    """Every ``connect()`` option after checking; frozen so restarts reuse them safely."""

    name: str
    timeout: float
    max_timeout: float
    reset_timeout_on_progress: bool
    era: str
    protocol_version: str | None
    probe_timeout: float
    max_frame_bytes: int
    inherit_env: bool
    stderr_bytes: int
    on_stderr: Callable[[str], None] | None
    die_with_parent: bool
    restart: str | None
    on_log: Callable[[str, str | None, Any], Any] | None
    on_notification: Callable[[str, Any], Any] | None
    notification_observer: Callable[[str, Any], Any] | None
    on_connection_lost: Callable[[ConnectionLost], Any] | None
    log_level: str | None
    client_info: dict[str, Any] | None
    max_pages: int
    max_input_rounds: int
    validate_output: bool


def _positive(name: str, value: Any, *, allow_inf: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0 or (
            not allow_inf and math.isinf(value)) or math.isnan(value):
        raise ConfigError(f"invalid option: {name}: must be a number > 0, got {value!r}")
    return float(value)


def _count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"invalid option: {name}: must be an integer >= 1, got {value!r}")
    return value


def config_of(target: Any) -> ServerConfig:
    if isinstance(target, ServerConfig):
        config = target
    elif isinstance(target, str):
        if target.startswith(("http://", "https://")):
            config = ServerConfig(url=target)
        else:
            argv = shlex.split(target)
            if not argv:
                raise ConfigError("invalid target: the command string is empty")
            config = ServerConfig(command=argv[0], args=argv[1:])
    elif isinstance(target, Sequence) and not isinstance(target, (bytes, bytearray)):
        argv = [os.fspath(a) for a in target]
        if not argv:
            raise ConfigError("invalid target: the argv list is empty")
        config = ServerConfig(command=argv[0], args=argv[1:])
    else:
        raise ConfigError(f"invalid target: expected an argv list, a command string, a URL or "
                          f"a ServerConfig, got {type(target).__name__}")
    return config


def make_options(target: Any, *, name: str | None, timeout: float | None, max_timeout: float,
                 reset_timeout_on_progress: bool, era: str, protocol_version: str | None,
                 probe_timeout: float, max_frame_bytes: int,
                 env: Mapping[str, str | None] | Sequence[str] | None, inherit_env: bool,
                 cwd: str | os.PathLike[str] | None, stderr_bytes: int,
                 on_stderr: Callable[[str], None] | None, die_with_parent: bool,
                 restart: str | None, on_log: Callable[[str, str | None, Any], Any] | None,
                 on_notification: Callable[[str, Any], Any] | None, log_level: str | None,
                 client_info: Mapping[str, Any] | bool | None, max_pages: int,
                 max_input_rounds: int, validate_output: bool,
                 notification_observer: Callable[[str, Any], Any] | None = None,
                 on_connection_lost: Callable[[ConnectionLost], Any] | None = None,
                 ) -> tuple[ServerConfig, Options]:
    """The server config (with ``connect()``'s overrides applied) and the checked options."""
    config = config_of(target)
    overrides: dict[str, Any] = {}
    if name is not None:
        overrides["name"] = name
    if env is not None:
        merged: dict[str, str | None] = dict(config.env)
        merged.update(ServerConfig(command="x", env=env).env)
        overrides["env"] = merged
    if cwd is not None:
        overrides["cwd"] = cwd
    if timeout is not None:
        overrides["timeout"] = _positive("timeout", timeout, allow_inf=True)
    if overrides:
        config = replace(config, **overrides)
    if era not in _ERAS:
        raise ConfigError(f"invalid option: era: must be 'auto', 'legacy' or 'modern', "
                          f"got {era!r}")
    if protocol_version is not None and protocol_version not in SUPPORTED_VERSIONS:
        raise ConfigError(f"invalid option: protocol_version: mcpsync speaks "
                          f"{', '.join(SUPPORTED_VERSIONS)}, got {protocol_version!r}")
    if protocol_version is not None and era != "auto" and (
            (protocol_version in LEGACY_VERSIONS) != (era == "legacy")):
        raise ConfigError(f"invalid option: protocol_version {protocol_version!r} is not of "
                          f"era {era!r}")
    if restart not in ("on_demand", None):
        raise ConfigError(f"invalid option: restart: must be 'on_demand' or None, "
                          f"got {restart!r}")
    if log_level is not None and log_level not in LOG_LEVELS:
        raise ConfigError(f"invalid option: log_level: must be one of "
                          f"{', '.join(LOG_LEVELS)}, got {log_level!r}")
    if client_info is True:
        info: dict[str, Any] | None = {"name": "mcpsync", "version": __version__}
    elif client_info is None or client_info is False:
        info = None
    elif isinstance(client_info, Mapping):
        info = dict(client_info)
    else:
        raise ConfigError("invalid option: client_info: expected a dict, True or None")
    options = Options(
        name=config.display_name, timeout=config.timeout,
        max_timeout=_positive("max_timeout", max_timeout, allow_inf=True),
        reset_timeout_on_progress=bool(reset_timeout_on_progress), era=era,
        protocol_version=protocol_version,
        probe_timeout=_positive("probe_timeout", probe_timeout),
        max_frame_bytes=_count("max_frame_bytes", max_frame_bytes),
        inherit_env=bool(inherit_env), stderr_bytes=_count("stderr_bytes", stderr_bytes),
        on_stderr=on_stderr, die_with_parent=bool(die_with_parent), restart=restart,
        on_log=on_log, on_notification=on_notification,
        notification_observer=notification_observer,
        on_connection_lost=on_connection_lost, log_level=log_level,
        client_info=info, max_pages=_count("max_pages", max_pages),
        max_input_rounds=_count("max_input_rounds", max_input_rounds),
        validate_output=bool(validate_output))
    return config, options
