"""Legacy host sessions that survive a move to another gateway process (replicas).

Several gateway processes behind one address (gunicorn workers, or gateways behind a load
balancer) cannot share memory, so what a process needs to carry on a legacy host session is
sealed into the session id itself: the host's ``initialize`` parameters, the negotiated
revision, and for each HTTP upstream its own ``Mcp-Session-Id`` and revision. Never an
upstream's credentials: those stay in each process's config. The seal is AES-256-GCM (the
server side's :class:`~mcpsync.server._state.StateSealer`) under a key every replica reads
from the same file, so the host can neither read nor alter it, and a process without the key
cannot open it.

A process that meets an id it never drew opens it and starts a core for the session: its
HTTP upstreams carry on the upstream sessions named in it (no new handshake), its stdio
upstreams, which are per process, are started afresh with the host's ``initialize``
replayed. A log level or subscriptions the host set on the first process are not in the id
(it is drawn once, at ``initialize``): an HTTP upstream keeps them itself, and a fresh stdio
one gets them from the replicas' session store (see ``_store``).
"""

from __future__ import annotations

import json
import logging
import os
import stat
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from mcpsync._envelope import parse_envelope
from mcpsync.errors import ConfigError
from mcpsync.server._state import StateRefused, StateSealer, StateTooLarge

if TYPE_CHECKING:
    from mcpsync.gateway._gateway import Gateway

__all__ = ["KEY_FILE_ENV", "SessionSealer", "read_key_file", "resume_core"]

#: The environment variable naming the key file (a path; the key itself is never in env).
KEY_FILE_ENV: Final = "MCPSYNC_GATEWAY_SESSION_KEY_FILE"
#: How long a sealed session id opens: longer than any session lives idle.
_TTL: Final = 7 * 24 * 3600.0
_MAX_BYTES: Final = 4096
_PREFIX: Final = "g1."
_RESUME_ID: Final = '"mcpsync-gateway-resume"'

_log = logging.getLogger("mcpsync.gateway")


def read_key_file(path: str | os.PathLike[str]) -> str:
    """The session key in ``path``: a file only its owner can read (0600), of at least 16
    characters; a ConfigError naming the file says what is wrong otherwise."""
    where = os.fspath(path)
    try:
        info = os.stat(where)
        with open(where, encoding="utf-8") as f:
            key = f.read().strip()
    except OSError as exc:
        raise ConfigError(f"the gateway session key file {where!r} cannot be read: "
                          f"{exc.strerror or exc}") from None
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"the gateway session key file {where!r} is readable by others "
                          f"(mode {stat.S_IMODE(info.st_mode):o}); run: chmod 600 {where}")
    if len(key) < 16:
        raise ConfigError(f"the gateway session key file {where!r} holds fewer than 16 "
                          "characters; write a long random secret in it (e.g. the output of "
                          "'python -c \"import secrets; print(secrets.token_urlsafe(32))\"')")
    return key


class SessionSealer:
    """Seals a legacy session's state into its id and opens such ids; holds no key in its
    ``repr``. ``keys``: the first seals, all open (rotate by putting the new one first)."""

    def __init__(self, keys: Sequence[str]) -> None:
        self._sealer = StateSealer("mcpsync-gateway-session", list(keys), ttl=_TTL,
                                   max_bytes=_MAX_BYTES)

    def __repr__(self) -> str:
        return "<SessionSealer>"

    def seal(self, state: dict[str, Any]) -> str | None:
        """The session id carrying ``state``; ``None`` when it would be too large (the
        session then gets a plain random id and lives in this process only)."""
        try:
            return _PREFIX + self._sealer.seal(state, method="gateway/session", target="",
                                               arguments={})
        except StateTooLarge:
            _log.warning("a host session's state is too large to seal into its id; it can "
                         "only be served by this gateway process")
            return None

    def open(self, sid: str) -> dict[str, Any] | None:
        """The state sealed in ``sid`` by one of our keys; ``None`` for any other id."""
        if not sid.startswith(_PREFIX):
            return None
        try:
            return self._sealer.open(sid[len(_PREFIX):], method="gateway/session",
                                     target="", arguments={})
        except StateRefused as exc:
            _log.info("a session id that does not open here was refused (%s)", exc.reason)
            return None


def resume_core(core: Gateway, init_params: Mapping[str, Any],
                sessions: Mapping[str, Any]) -> None:
    """Before ``core.serve_host``: carry on the sealed session in a fresh core."""
    init = parse_envelope(f'{{"jsonrpc":"2.0","id":{_RESUME_ID},"method":"initialize",'
                          f'"params":{json.dumps(dict(init_params))}}}')
    initialized = parse_envelope('{"jsonrpc":"2.0","method":"notifications/initialized"}')
    for upstream in core.upstreams:
        found = sessions.get(upstream.id)
        session = ({str(k): str(v) for k, v in found.items()}
                   if isinstance(found, dict) else None)
        upstream.resume(init, initialized, session)
