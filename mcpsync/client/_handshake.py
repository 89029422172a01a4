"""Era detection and the opening handshake on stdio (docs/architecture.md, "Era detection").

With ``era="auto"`` the client first sends ``server/discover`` carrying the modern ``_meta``.
A valid ``DiscoverResult`` (or a -32022 naming a modern version we speak) means modern; any
other answer, silence for ``probe_timeout`` seconds, or the server exiting means legacy, and the
client does the ``initialize`` handshake. Over HTTP (``HandshakeParams.http``) a -32021 or
-32020 also means modern: the server refused the probe, so its typed error is raised instead
of falling back to ``initialize``. The fallback is never keyed to one error code: legacy
servers answer unknown pre-``initialize`` methods in many ways, or not at all.

The probe is never cancelled (a legacy server should see nothing before ``initialize``), and a
late answer to it is dropped by the session. Detection costs up to ``probe_timeout`` against a
silent legacy server, so the era is remembered per process for each ``(command, args, cwd)``:
a later ``connect()`` to the same server goes straight to the right handshake, and detects
again once if that memory proves wrong.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Hashable, Mapping
from typing import Any, Protocol, TypeVar

from mcpsync.errors import (
    ConnectionLost,
    RemoteError,
    RequestTimeout,
    UnsupportedProtocolVersion,
)
from mcpsync.jsonrpc import HEADER_MISMATCH, MISSING_CLIENT_CAPABILITY
from mcpsync.protocol import (
    LATEST_LEGACY,
    LATEST_MODERN,
    LEGACY_VERSIONS,
    META_CLIENT_CAPABILITIES,
    MODERN_VERSIONS,
    SUPPORTED_VERSIONS,
    choose_legacy_version,
    classify_discover_error,
    classify_discover_result,
    retry_version_from_error,
    server_info_from_result,
)
from mcpsync.types import ServerInfo

__all__ = ["TASKS_EXTENSION", "Negotiated", "forget_era", "negotiate", "offers_tool_tasks",
           "remembered_era", "with_tasks_extension"]

_log = logging.getLogger("mcpsync.client")

# The Tasks extension (2026-07-28). Whether a server runs tools as tasks, and the ``_meta``
# that declares the extension, are settled once per session here; the task machinery itself
# (_tasks) is loaded only when a call turns into a task.
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"


def offers_tool_tasks(capabilities: Mapping[str, Any]) -> bool:
    """Whether a 2025-11-25 server runs ``tools/call`` as tasks
    (``capabilities.tasks.requests.tools.call``): then a tool may demand one."""
    node: Any = capabilities
    for key in ("tasks", "requests", "tools", "call"):
        node = node.get(key) if isinstance(node, Mapping) else None
    return isinstance(node, Mapping)


def with_tasks_extension(meta: dict[str, Any], capabilities: Mapping[str, Any]
                         ) -> dict[str, Any]:
    """The ``_meta`` of a 2026-07-28 ``tools/call``: ``meta`` with the Tasks extension added
    to its client capabilities when the server declared the extension (``meta`` itself when
    not). Built once per session, so a call pays nothing for it."""
    extensions = capabilities.get("extensions")
    if not isinstance(extensions, Mapping) or TASKS_EXTENSION not in extensions:
        return meta
    caps = dict(meta.get(META_CLIENT_CAPABILITIES) or {})
    caps["extensions"] = {**(caps.get("extensions") or {}), TASKS_EXTENSION: {}}
    return {**meta, META_CLIENT_CAPABILITIES: caps}


# Seconds each handshake request may take when the client's timeout is unlimited.
HANDSHAKE_BOUND = 30.0

# Over HTTP, a server/discover answered with these codes (at any status) means a modern
# server, as -32022 does; on stdio only -32022 counts (docs/architecture.md, "Era detection").
_HTTP_MODERN_PROBE_ERRORS = frozenset({HEADER_MISMATCH, MISSING_CLIENT_CAPABILITY})


class _Requester(Protocol):
    """The part of ``Session`` the handshake uses."""

    allow_batch: bool

    def request(self, method: str, params: dict[str, Any] | None = None, *,
                timeout: float | None = None, cancellable: bool = True) -> Any: ...

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None: ...

    def close(self, reason: str = ...) -> None: ...


_S = TypeVar("_S", bound=_Requester)


class Negotiated:
    """What the handshake settled: era, version, and the server's self-description.

    A plain slotted class, not a dataclass: building a dataclass at import generates and
    compiles its methods, which cost every ``import mcpsync.client`` more than this whole
    class, and nothing compares, prints or copies one (the client reads its fields once).
    Treat it as read-only.
    """

    __slots__ = ("capabilities", "era", "instructions", "protocol_version", "result",
                 "server_info")

    def __init__(self, era: str, protocol_version: str, capabilities: dict[str, Any],
                 instructions: str | None, server_info: ServerInfo,
                 result: dict[str, Any]) -> None:
        self.era = era                            # "legacy" or "modern"
        self.protocol_version = protocol_version
        self.capabilities = capabilities
        self.instructions = instructions
        self.server_info = server_info
        self.result = result                      # the raw discover or initialize result


# -- per-process memory of each server's era ---------------------------------------------

_memory: dict[Hashable, str] = {}
_memory_lock = threading.Lock()


def remembered_era(key: Hashable) -> str | None:
    with _memory_lock:
        return _memory.get(key)


def _remember(key: Hashable | None, era: str) -> None:
    if key is not None:
        with _memory_lock:
            _memory[key] = era


def forget_era(key: Hashable | None = None) -> None:
    """Forget one server's era (or all of them); the next ``connect()`` probes again."""
    with _memory_lock:
        if key is None:
            _memory.clear()
        else:
            _memory.pop(key, None)


# -- classification ----------------------------------------------------------------------

def _modern(version: str, result: dict[str, Any]) -> Negotiated:
    instructions = result.get("instructions")
    caps = result.get("capabilities")
    return Negotiated("modern", version, dict(caps) if isinstance(caps, dict) else {},
                      instructions if isinstance(instructions, str) else None,
                      server_info_from_result(result, version), result)


class _Exited(Exception):
    """Internal: the server went away during the probe."""


# -- the two handshakes ----------------------------------------------------------------

class HandshakeParams:
    """Everything the handshake needs from the client, gathered in one place.

    A plain slotted class, not a dataclass, for the reason :class:`Negotiated` gives.
    """

    __slots__ = ("client_info", "http", "legacy_capabilities", "modern_meta", "name",
                 "on_legacy", "probe_timeout", "timeout")

    def __init__(self, name: str, timeout: float, probe_timeout: float,
                 legacy_capabilities: dict[str, Any], client_info: dict[str, Any],
                 modern_meta: Callable[[str], dict[str, Any]], http: bool = False,
                 on_legacy: Callable[[str, dict[str, Any]], None] | None = None) -> None:
        self.name = name
        self.timeout = timeout
        self.probe_timeout = probe_timeout
        self.legacy_capabilities = legacy_capabilities
        self.client_info = client_info
        self.modern_meta = modern_meta    # version -> request _meta
        self.http = http                  # the probe runs over HTTP (more codes mean modern)
        # Told (version, initialize params) once a legacy handshake is answered, before
        # ``notifications/initialized``: the HTTP transport's headers need the version.
        self.on_legacy = on_legacy

    @property
    def bound(self) -> float:
        """The timeout of each handshake request: ``timeout``, but never unlimited (a
        ``timeout=math.inf`` client still fails to connect to a silent server)."""
        return self.timeout if math.isfinite(self.timeout) else HANDSHAKE_BOUND


def _discover(session: _Requester, hp: HandshakeParams, timeout: float, *,
              silence_is_legacy: bool = True) -> Negotiated | None:
    """Send ``server/discover``; a ``Negotiated`` when the answer is modern, else ``None``.

    Raises ``_Exited`` when the server closed during the probe, and ``RequestTimeout`` on
    silence unless ``silence_is_legacy`` (the auto-detection's reading of it).
    """
    version = LATEST_MODERN
    for attempt in range(2):
        try:
            result = session.request("server/discover", {"_meta": hp.modern_meta(version)},
                                     timeout=timeout, cancellable=False)
        except RemoteError as exc:
            if hp.http and exc.code in _HTTP_MODERN_PROBE_ERRORS:
                # Only a modern server emits these: it is modern, but it
                # refused the probe, so falling back to `initialize` would be wrong. The
                # typed error (MissingCapability, HeaderMismatch) says what to fix.
                _log.debug("server %r answered server/discover with modern error %s",
                           hp.name, exc.code)
                raise
            verdict, retry = classify_discover_error(exc.code, exc.data)
            if verdict == "retry" and retry is not None and attempt == 0:
                version = retry  # once, even with the version we asked for
                continue
            _log.debug("server %r answered server/discover with error %s: legacy",
                       hp.name, exc.code)
            return None
        except RequestTimeout:
            if not silence_is_legacy:
                raise
            _log.debug("server %r did not answer server/discover in %ss: legacy",
                       hp.name, timeout)
            return None
        except ConnectionLost as exc:
            raise _Exited() from exc
        _verdict, chosen = classify_discover_result(result)
        return None if chosen is None else _modern(chosen, result)
    return None


def _initialize(session: _Requester, hp: HandshakeParams, version: str,
                *, exact: bool) -> Negotiated:
    """The legacy handshake: ``initialize``, check the version, ``notifications/initialized``.

    ``initialize`` is never cancelled; a timeout propagates and the caller closes the
    connection. With ``exact`` (a pinned version) any other answer is refused.
    """
    for attempt in range(2):
        params = {"protocolVersion": version, "capabilities": hp.legacy_capabilities,
                  "clientInfo": hp.client_info}
        try:
            result = session.request("initialize", params, timeout=hp.bound,
                                     cancellable=False)
        except RemoteError as exc:
            retry = retry_version_from_error(exc.data, "legacy")
            if attempt == 0 and not exact and retry is not None:
                version = retry
                continue
            supported = exc.data.get("supported") if isinstance(exc.data, dict) else None
            if isinstance(supported, list) and supported and retry is None:
                raise UnsupportedProtocolVersion(
                    f"initializing on server {hp.name!r}: the server speaks {supported}, "
                    f"none of which this client speaks as a legacy revision (asked for "
                    f"{version}); mcpsync speaks {', '.join(SUPPORTED_VERSIONS)}",
                    requested=version, supported=[str(v) for v in supported],
                    server=hp.name, method="initialize") from exc
            raise
        answered = choose_legacy_version(
            result.get("protocolVersion") if isinstance(result, dict) else None,
            requested=version, pinned=exact, server=hp.name)
        assert isinstance(result, dict)
        # Arrays are legal only once 2025-03-26 is negotiated.
        session.allow_batch = answered == "2025-03-26"
        if hp.on_legacy is not None:
            hp.on_legacy(answered, params)
        session.notify("notifications/initialized")
        instructions = result.get("instructions")
        caps = result.get("capabilities")
        return Negotiated("legacy", answered, dict(caps) if isinstance(caps, dict) else {},
                          instructions if isinstance(instructions, str) else None,
                          server_info_from_result(result, answered), result)
    raise AssertionError("unreachable")  # pragma: no cover


def negotiate(open_session: Callable[[], _S], hp: HandshakeParams, *, era: str,
              protocol_version: str | None, memory_key: Hashable | None,
              allow_probe_restart: bool = True) -> tuple[_S, Negotiated]:
    """Open a session and settle the era; return ``(session, negotiated)``.

    ``open_session`` starts a fresh process and session (called again, once, when the server
    exits during the probe). On failure the session is closed before the error propagates.
    """
    session = open_session()
    try:
        return session, _negotiate(session, hp, era, protocol_version, memory_key)
    except _Exited as exc:
        session.close("server exited during the era probe")
        if not allow_probe_restart:
            raise exc.__cause__ or ConnectionLost("server exited") from None
        _log.warning("server %r exited during the server/discover probe; restarting it once "
                     "and using the legacy handshake", hp.name)
        session = open_session()
        try:
            negotiated = _initialize(session, hp, LATEST_LEGACY, exact=False)
            # Inside the try: this handler runs outside the one below, so a Ctrl-C here
            # would otherwise leave the new session open with nobody to close it.
            _remember(memory_key, "legacy")
        except BaseException:
            session.close("handshake failed")
            raise
        return session, negotiated
    except BaseException:
        session.close("handshake failed")
        raise


def _negotiate(session: _Requester, hp: HandshakeParams, era: str, protocol_version: str | None,
               memory_key: Hashable | None) -> Negotiated:
    if protocol_version is not None:
        if protocol_version in LEGACY_VERSIONS:
            return _initialize(session, hp, protocol_version, exact=True)
        era = "modern"
    if era == "legacy":
        return _initialize(session, hp, LATEST_LEGACY, exact=False)
    if era == "modern":
        try:
            found = _discover(session, hp, hp.bound, silence_is_legacy=False)
        except _Exited as exc:
            raise exc.__cause__ or ConnectionLost("server exited") from None
        except RequestTimeout as exc:
            raise RequestTimeout(
                f"connecting to server {hp.name!r} with era='modern': server/discover got no "
                f"answer within {hp.bound:g} s; check that the server is running and speaks "
                "MCP, or raise timeout= if it is slow to start", timeout=hp.bound,
                server=hp.name, method="server/discover") from exc
        if found is None or (protocol_version is not None
                             and found.protocol_version != protocol_version):
            raise UnsupportedProtocolVersion(
                f"connecting to server {hp.name!r}: asked for the modern protocol "
                f"({protocol_version or MODERN_VERSIONS[0]}), but the server answered "
                "server/discover as a legacy server does; connect with era='auto' or "
                "era='legacy'", requested=protocol_version or MODERN_VERSIONS[0],
                supported=[], server=hp.name, method="server/discover")
        return found
    remembered = remembered_era(memory_key) if memory_key is not None else None
    if remembered == "legacy":
        try:
            return _initialize(session, hp, LATEST_LEGACY, exact=False)
        except (RemoteError, UnsupportedProtocolVersion):
            _log.info("server %r no longer takes the legacy handshake; detecting its era "
                      "again", hp.name)
            forget_era(memory_key)
    timeout = hp.bound if remembered == "modern" else hp.probe_timeout
    found = _discover(session, hp, timeout)
    if found is not None:
        _remember(memory_key, "modern")
        return found
    try:
        negotiated = _initialize(session, hp, LATEST_LEGACY, exact=False)
    except UnsupportedProtocolVersion as exc:
        if not any(v in MODERN_VERSIONS for v in exc.supported):
            raise
        found = _reprobe(session, hp, exc)
        _remember(memory_key, "modern")
        return found
    _remember(memory_key, "legacy")
    return negotiated


def _reprobe(session: _Requester, hp: HandshakeParams,
             refused: UnsupportedProtocolVersion) -> Negotiated:
    """``initialize`` was refused by a modern server that left the probe unanswered.

    Why: a server slower to start than ``probe_timeout`` (a cold ``npx -y``, a heavy import)
    reads the probe late, becomes modern, and refuses the ``initialize`` that followed with
    -32022 naming its modern versions. It is up now, so the probe is sent once more, with
    the handshake's own timeout, as the official SDK does in this case.
    """
    _log.info("server %r refused initialize as a modern server (it speaks %s) after not "
              "answering server/discover within %g s; probing again", hp.name,
              refused.supported, hp.probe_timeout)
    try:
        found = _discover(session, hp, hp.bound, silence_is_legacy=False)
    except RequestTimeout:
        found = None
    if found is not None:
        return found
    raise UnsupportedProtocolVersion(
        f"connecting to server {hp.name!r}: the server refused initialize as a modern "
        f"server does (it speaks {refused.supported}), but did not answer server/discover, "
        f"neither within probe_timeout={hp.probe_timeout:g} s nor when asked again; if it "
        "is slow to start, raise probe_timeout= or connect with era='modern'",
        requested=refused.requested, supported=refused.supported, server=hp.name,
        method="server/discover") from refused
