"""The ``approval`` object of the gateway command's config (``mcpsync.approval``), read strictly.

A typo in a security setting must not be ignored: ``"aprover": "tty"`` silently meaning
"no approver" would refuse every held call, and ``"hold_second": 600`` silently meaning 25
would surprise in the other direction. So every key is known, every value has its type, and
an error names the file and the key path and says what is accepted::

    "approval": {"approver": "tty", "hold_seconds": 25}
    "approval": {"approver": {"tty": {"path": "/dev/tty"}}}
    "approval": {"approver": {"web": {"port": 8765}}}           (host: loopback only)
    "approval": {"approver": {"command": ["/usr/local/bin/approve", "--team", "ops"],
                              "env": {"APPROVE_URL": "..."}}}
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from typing import Any, Final

from mcpsync.errors import ConfigError
from mcpsync.gateway._guard._approval import ApproverBase
from mcpsync.gateway._guard._approvers._command import CommandApprover
from mcpsync.gateway._guard._approvers._tty import TtyApprover
from mcpsync.gateway._guard._approvers._web import LOOPBACK_HOSTS, WebApprover

__all__ = ["approver_from_config", "desk_settings"]

_SECTION_KEYS: Final = ("approver", "hold_seconds")
_KINDS: Final = {"tty": ("path",), "web": ("host", "port"), "command": ("command", "env")}


def _keys(value: Mapping[str, Any], known: tuple[str, ...], source: str, where: str) -> None:
    for key in value:
        if key not in known:
            raise ConfigError(f"{source}: unknown key {where}.{key} (known: "
                              f"{', '.join(known)})")


def _mapping(value: object, source: str, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{source}: {where} must be an object, not {_kind(value)}")
    return value


def _kind(value: object) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false",
            int: "a number", float: "a number", type(None): "null"}.get(type(value),
                                                                        type(value).__name__)


def desk_settings(section: Mapping[str, Any], source: str, *,
                  key: str = "mcpsync.approval") -> float:
    """``hold_seconds`` from the section (25 when absent), the other keys checked."""
    section = _mapping(section, source, key)
    _keys(section, _SECTION_KEYS, source, key)
    hold = section.get("hold_seconds", 25)
    if isinstance(hold, bool) or not isinstance(hold, (int, float)) or not 0 < hold <= 3600:
        raise ConfigError(f"{source}: {key}.hold_seconds must be a number of seconds above 0 "
                          f"and at most 3600, not {hold!r}")
    return float(hold)


def approver_from_config(section: Mapping[str, Any], source: str, *,
                         key: str = "mcpsync.approval") -> ApproverBase | None:
    """The approver ``section["approver"]`` names, unstarted, or ``None`` without one."""
    desk_settings(section, source, key=key)   # the other keys are checked even when unused
    spec = section.get("approver")
    where = f"{key}.approver"
    if spec is None:
        return None
    if isinstance(spec, str):
        if spec not in _KINDS:
            raise ConfigError(f"{source}: {where} is {spec!r}; use 'tty', or an object "
                              f"{{'web': {{...}}}} or {{'command': [...]}}")
        if spec == "web":
            raise ConfigError(f"{source}: {where} 'web' is written as an object: "
                              f"{{'web': {{'port': 0}}}}")
        if spec == "command":
            raise ConfigError(f"{source}: {where} 'command' needs the command: write "
                              f"{{'command': ['/path/to/hook']}}")
        return TtyApprover(origin=f"{source}: {where}")
    spec = _mapping(spec, source, where)
    kinds = [k for k in spec if k in _KINDS]
    if len(kinds) != 1:
        raise ConfigError(f"{source}: {where} must name exactly one approver (tty, web or "
                          f"command), not {', '.join(map(str, spec)) or 'none'}")
    kind = kinds[0]
    if kind == "command":
        _keys(spec, _KINDS["command"], source, where)
        return _command(spec, source, where)
    _keys(spec, (kind,), source, where)
    settings = _mapping(spec[kind], source, f"{where}.{kind}")
    _keys(settings, _KINDS[kind], source, f"{where}.{kind}")
    if kind == "tty":
        path = settings.get("path", "/dev/tty")
        if not isinstance(path, str) or not path:
            raise ConfigError(f"{source}: {where}.tty.path must be a path, not {path!r}")
        return TtyApprover(path, origin=f"{source}: {where}")
    host = settings.get("host", "127.0.0.1")
    if host not in LOOPBACK_HOSTS:
        raise ConfigError(f"{source}: {where}.web.host must be a loopback address "
                          f"({', '.join(LOOPBACK_HOSTS)}), not {host!r}: the page must not be "
                          f"reachable by the agent whose calls it approves")
    port = settings.get("port", 0)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ConfigError(f"{source}: {where}.web.port must be a port number (0 picks a free "
                          f"one), not {port!r}")
    return WebApprover(host=host, port=port)


def _command(spec: Mapping[str, Any], source: str, where: str) -> CommandApprover:
    argv = spec["command"]
    if not isinstance(argv, list) or not argv or \
            not all(isinstance(a, str) and a for a in argv):
        raise ConfigError(f"{source}: {where}.command must be a non-empty list of strings "
                          f"(the program and its arguments, run without a shell), not "
                          f"{_kind(argv)}")
    if shutil.which(argv[0]) is None:
        raise ConfigError(f"{source}: {where}.command: the program {argv[0]!r} is not found "
                          f"or not executable; give its full path")
    env = spec.get("env", {})
    if not isinstance(env, Mapping) or not all(isinstance(k, str) and isinstance(v, str)
                                               for k, v in env.items()):
        raise ConfigError(f"{source}: {where}.env must be an object of strings")
    return CommandApprover(argv, env=env)
