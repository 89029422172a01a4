"""``ClientOptions``: how a client behaves, defined once and checked when built.

``connect()`` takes these as keywords, a ``ClientOptions`` value, or both (the keywords win);
a ``Manager`` gives one set to every server it starts. The values are checked in the
constructor and raise :class:`~mcpsync.errors.ConfigError` naming the option, before anything
is spawned: a typo fails at the call site, not in a half-started connection. The dataclass is
frozen, so restarts and many servers share one value safely.

What identifies or authenticates one server is not here: the name, environment, working
directory and transport belong to its :class:`~mcpsync.config.ServerConfig`, and credentials
(``auth``, ``headers``, ``session``, ``authorization``, ``on_unauthorized``) only ever go to
the server they were given for, so a value shared by a Manager's servers cannot leak them.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from operator import attrgetter
from reprlib import recursive_repr
from typing import Any

from mcpsync._fields_eq import fields_eq
from mcpsync._version import __version__
from mcpsync.client._callbacks import (
    ElicitationCallback,
    RootsInput,
    SamplingCallback,
    load_module,
)
from mcpsync.config import ServerConfig
from mcpsync.errors import ConfigError, ConnectionLost
from mcpsync.jsonrpc import MAX_FRAME_BYTES
from mcpsync.protocol import LEGACY_VERSIONS, LOG_LEVELS, SUPPORTED_VERSIONS

__all__ = ["ClientOptions", "config_of", "with_overrides"]

_ERAS = ("auto", "legacy", "modern")
_set = object.__setattr__   # what a frozen dataclass's __init__ sets fields with


@dataclass(frozen=True, init=False, repr=False, eq=False)
class ClientOptions:
    """How a client behaves; every field has ``connect()``'s default (``docs/client.md``).

    ``timeout`` (seconds per request; ``None`` keeps the server config's) and ``max_timeout``
    (the cap a per-call timeout may ask for); ``era`` (``"auto"``, ``"legacy"`` or
    ``"modern"``) and ``protocol_version`` (one exact revision); ``restart`` (``"on_demand"``
    or ``None``); ``sampling``, ``elicitation``, ``roots`` (the callbacks that serve the
    server's requests); ``client_info`` (``True`` for mcpsync's own, a dict, or ``None``);
    ``validate_input`` (check tool calls against the cached tool list); ``stderr``
    (``"show"`` prints the server's stderr lines on ``sys.stderr``).
    """

    timeout: float | None = None
    max_timeout: float = 600.0
    reset_timeout_on_progress: bool = False
    era: str = "auto"
    protocol_version: str | None = None
    probe_timeout: float = 5.0
    max_frame_bytes: int = MAX_FRAME_BYTES
    inherit_env: bool = False
    stderr_bytes: int = 64 * 1024
    on_stderr: Callable[[str], None] | None = None
    die_with_parent: bool = True
    restart: str | None = "on_demand"
    sampling: SamplingCallback | None = None
    elicitation: ElicitationCallback | None = None
    roots: RootsInput | None = None
    on_log: Callable[[str, str | None, Any], Any] | None = None
    on_notification: Callable[[str, Any], Any] | None = None
    notification_observer: Callable[[str, Any], Any] | None = None
    on_connection_lost: Callable[[ConnectionLost], Any] | None = None
    log_level: str | None = None
    client_info: Mapping[str, Any] | bool | None = True
    max_pages: int = 100
    max_input_rounds: int = 10
    validate_output: bool = True
    validate_input: bool = True
    stderr: str | None = None

    # Written out rather than generated (init, repr and eq are False above): a dataclass
    # generates and compiles these methods every time the class is made, about 0.6 ms of
    # each client import, cached or not. They do what the generated ones did (a test holds
    # them to a generated twin); a field added later must be added to __init__'s parameters
    # too (the other methods go by the fields, through _NAMES).
    def __init__(self,
                 timeout: float | None = None,
                 max_timeout: float = 600.0,
                 reset_timeout_on_progress: bool = False,
                 era: str = "auto",
                 protocol_version: str | None = None,
                 probe_timeout: float = 5.0,
                 max_frame_bytes: int = MAX_FRAME_BYTES,
                 inherit_env: bool = False,
                 stderr_bytes: int = 64 * 1024,
                 on_stderr: Callable[[str], None] | None = None,
                 die_with_parent: bool = True,
                 restart: str | None = "on_demand",
                 sampling: SamplingCallback | None = None,
                 elicitation: ElicitationCallback | None = None,
                 roots: RootsInput | None = None,
                 on_log: Callable[[str, str | None, Any], Any] | None = None,
                 on_notification: Callable[[str, Any], Any] | None = None,
                 notification_observer: Callable[[str, Any], Any] | None = None,
                 on_connection_lost: Callable[[ConnectionLost], Any] | None = None,
                 log_level: str | None = None,
                 client_info: Mapping[str, Any] | bool | None = True,
                 max_pages: int = 100,
                 max_input_rounds: int = 10,
                 validate_output: bool = True,
                 validate_input: bool = True,
                 stderr: str | None = None) -> None:
        given = locals()
        for name in _NAMES:
            _set(self, name, given[name])
        self.__post_init__()

    @recursive_repr()
    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in _NAMES)
        return f"{self.__class__.__qualname__}({fields})"

    def __eq__(self, other: object) -> bool:
        return _eq(self, other)

    def __hash__(self) -> int:
        return hash(_fields(self))

    def __post_init__(self) -> None:
        if self.timeout is not None:
            _positive("timeout", self.timeout, allow_inf=True)
        _positive("max_timeout", self.max_timeout, allow_inf=True)
        _positive("probe_timeout", self.probe_timeout)
        for name in ("max_frame_bytes", "stderr_bytes", "max_pages", "max_input_rounds"):
            _count(name, getattr(self, name))
        era, version = self.era, self.protocol_version
        if era not in _ERAS:
            raise ConfigError(f"invalid option: era: must be 'auto', 'legacy' or 'modern', "
                              f"got {era!r}")
        if version is not None and version not in SUPPORTED_VERSIONS:
            raise ConfigError(f"invalid option: protocol_version: mcpsync speaks "
                              f"{', '.join(SUPPORTED_VERSIONS)}, got {version!r}")
        if version is not None and era != "auto" and (
                (version in LEGACY_VERSIONS) != (era == "legacy")):
            raise ConfigError(f"invalid option: protocol_version {version!r} is not of "
                              f"era {era!r}")
        if self.restart not in ("on_demand", None):
            raise ConfigError(f"invalid option: restart: must be 'on_demand' or None, "
                              f"got {self.restart!r}")
        if self.log_level is not None and self.log_level not in LOG_LEVELS:
            raise ConfigError(f"invalid option: log_level: must be one of "
                              f"{', '.join(LOG_LEVELS)}, got {self.log_level!r}")
        if self.stderr not in (None, "show"):
            raise ConfigError(f"invalid option: stderr: must be 'show' or None, got "
                              f"{self.stderr!r}")
        if not isinstance(self.client_info, (bool, Mapping)) and self.client_info is not None:
            raise ConfigError("invalid option: client_info: expected a dict, True or None")

    def client_info_sent(self) -> dict[str, Any] | None:
        """The ``clientInfo`` this client sends: mcpsync's own for ``True``, none for
        ``None``/``False``, else a copy of the dict given."""
        if self.client_info is True:
            return {"name": "mcpsync", "version": __version__}
        if isinstance(self.client_info, Mapping):
            return dict(self.client_info)
        return None


# The generated __init__ carried the object None as its return annotation, not the string
# "None" that this module's annotations become: help() and inspect.signature show it so.
ClientOptions.__init__.__annotations__["return"] = None
#: The fields' names, in order.
_NAMES = tuple(ClientOptions.__dataclass_fields__)
#: Every field's value, in order: what the generated ``__hash__`` hashed.
_fields: Callable[[ClientOptions], tuple[Any, ...]] = attrgetter(*_NAMES)
#: What the generated ``__eq__`` did, on the running Python (see :mod:`mcpsync._fields_eq`).
_eq = fields_eq(list(_NAMES))


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
            # Only a command string needs shlex (an argv list never does), so it loads here.
            load_module("shlex")
            import shlex

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


def with_overrides(config: ServerConfig, *, name: str | None, timeout: float | None,
                   env: Mapping[str, str | None] | Sequence[str] | None,
                   cwd: str | os.PathLike[str] | None) -> ServerConfig:
    """``config`` with ``connect()``'s per-server keywords applied: ``name``, ``cwd`` and
    ``timeout`` replace the config's, ``env`` is merged on top of it."""
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
    return replace(config, **overrides) if overrides else config
