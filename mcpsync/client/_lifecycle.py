"""How a :class:`~mcpsync.client.Client` gets and replaces its session.

Opening the transport and the session on it, the era handshake's outcome becoming the client's
state, a modern server's restart after it died, and an HTTP server's era detected again after a
reply contradicted it: all of this runs at connect time or after a failure, never on a call's
first round, so it lives apart from the request path. It is a mixin rather than a collaborator
because every step reads and swaps the client's own state (session, era, version, ``_meta``,
name) under the client's locks, and the call pipeline reaches these steps as client methods.
"""

from __future__ import annotations

import logging
import os
import threading
import unicodedata
import weakref
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

import mcpsync
from mcpsync._version import __version__
from mcpsync.client._cache import ListCache
from mcpsync.client._callbacks import Callbacks, load_module
from mcpsync.client._finalizer import weak_method
from mcpsync.client._flow import era_contradicted
from mcpsync.client._handshake import (
    HandshakeParams,
    Negotiated,
    forget_era,
    negotiate,
    offers_tool_tasks,
    with_tasks_extension,
)
from mcpsync.client._notifications import Notifications
from mcpsync.client._options import ClientOptions
from mcpsync.client._restart import RESTART_LIMIT, RESTART_WINDOW, RestartBudget, dead_error
from mcpsync.client._subscriptions import Subscriptions
from mcpsync.config import ServerConfig
from mcpsync.errors import ClosedError, RemoteError
from mcpsync.protocol import build_meta
from mcpsync.session import Session
from mcpsync.transport.base import Transport
from mcpsync.transport.stdio import StdioTransport
from mcpsync.types import ServerInfo

if TYPE_CHECKING:
    # Loaded on first use: see ClientAside's in_process and http below.
    import mcpsync.client._connect_http
    import mcpsync.transport.memory

_log = logging.getLogger("mcpsync.client")


class ClientAside:
    """What a client keeps that its calls never read: how it opens a session, its names for
    logs and threads, the restart and re-detection bookkeeping, the close's second-half mark,
    the finalizer, and the handshake's outcome that only the properties return. Kept out of
    the client itself so that a client holds fewer attributes than CPython 3.11 keeps inline
    in an instance (29 at most): beyond that its instance dict is a real dict, and every
    attribute load on it (half a dozen per ``call_tool``) takes the slower, hinted lookup.

    The client makes it first thing in ``__init__``, so that a close or a finalizer that
    runs on a client whose ``__init__`` was interrupted finds it; the slots without a value
    here are set by ``__init__`` as it makes them (as the client's own attributes were)."""

    __slots__ = ("client_info", "close_rest", "finalizer", "handshake_result", "http",
                 "in_process", "instructions", "notes", "redetected_from", "resources",
                 "restart_lock", "restarts", "safe_name", "server_info", "server_log")

    # Through the package attribute, which loads the module when read, so that
    # typing.get_type_hints() resolves them although the client import defers them (the
    # HTTP settings' module is loaded by connect() for a URL, and by nothing else).
    in_process: Callable[[str], mcpsync.transport.memory.MemoryTransport] | None
    http: mcpsync.client._connect_http.HttpSettings | None
    client_info: dict[str, Any] | None
    safe_name: str
    server_log: logging.Logger
    notes: Notifications
    resources: SessionResources
    # Unsubscripted: weakref.finalize takes no subscript at run time (get_type_hints).
    finalizer: weakref.finalize  # type: ignore[type-arg]

    def __init__(self, in_process: Callable[[str], mcpsync.transport.memory.MemoryTransport]
                 | None, http: mcpsync.client._connect_http.HttpSettings | None,
                 client_info: dict[str, Any] | None) -> None:
        self.in_process = in_process  # set for an in-process server: opens its transport
        self.http = http              # set for a URL target: the HTTP transport's settings
        self.client_info = client_info
        self.restart_lock = threading.Lock()    # one restart at a time
        self.restarts = RestartBudget()
        # The session an era re-detection replaced (at most one per client), weakly: set
        # means "re-detected"; futures compare their round's session with it.
        self.redetected_from: weakref.ref[Session] | None = None
        self.close_rest = False   # _close_early() ran: close() still has to finish it
        # Set by _adopt().
        self.instructions: str | None = None
        self.server_info = ServerInfo()
        self.handshake_result: dict[str, Any] = {}


class SessionLifecycle:
    """The open / adopt / restart / re-detect steps of ``Client`` (which sets every attribute
    declared here in its ``__init__``)."""

    _aside: ClientAside
    _config: ServerConfig
    _opts: ClientOptions
    _name: str
    _callbacks: Callbacks
    _cache: ListCache
    _subs: Subscriptions
    _state_lock: threading.Lock
    _closed: bool
    _log_level: str | None
    _session: Session
    _transport: Transport | None
    _era: str
    _modern: bool
    _protocol_version: str
    _capabilities: dict[str, Any]
    _meta: dict[str, Any]
    _tool_meta: dict[str, Any]
    _may_task: bool
    _has_tools: bool

    def _memory_key(self) -> Hashable | None:
        """Per-process memory of the era for ``(command, args, cwd)``; only for ``auto``."""
        if (self._opts.era != "auto" or self._opts.protocol_version is not None
                or self._config.transport == "sse" or self._aside.in_process is not None):
            return None
        if self._config.is_http:
            return ("url", self._config.url)
        return (self._config.argv, self._config.cwd)

    def _handshake_params(self) -> HandshakeParams:
        return HandshakeParams(
            name=self._name, timeout=self._config.timeout, probe_timeout=self._opts.probe_timeout,
            legacy_capabilities=self._callbacks.capabilities(modern=False),
            client_info=self._aside.client_info or {"name": "mcpsync", "version": __version__},
            modern_meta=lambda version: build_meta(
                version, self._callbacks.capabilities(modern=True), self._aside.client_info),
            http=self._config.is_http,
            on_legacy=self._tell_transport_legacy if self._config.is_http else None)

    def _tell_transport_legacy(self, version: str, params: dict[str, Any]) -> None:
        """The HTTP transport learns the legacy era from us, not from the frames."""
        load_module("mcpsync.transport.http._transport")
        from mcpsync.transport.http._transport import HttpTransport, SessionState
        transport = self._transport
        if isinstance(transport, HttpTransport):
            transport.session_updated(SessionState("legacy", version, params))

    def _on_stderr(self) -> Callable[[str], None] | None:
        """The stderr line callback: the user's ``on_stderr``, and with ``stderr="show"``
        a printer on ``sys.stderr`` before it."""
        if self._opts.stderr != "show":
            return self._opts.on_stderr
        load_module("mcpsync.client._stderr_show")
        from mcpsync.client._stderr_show import stderr_printer

        return stderr_printer(self._name, self._opts.on_stderr)

    def _open_session(self) -> Session:
        """Spawn the server (or open the HTTP transport) and start a session on it (the
        handshake comes after)."""
        transport: Transport
        if self._aside.in_process is not None:
            transport = self._aside.in_process(self._name)
        elif self._aside.http is not None:
            # Loaded already: connect() made the settings there.
            load_module("mcpsync.client._connect_http")
            from mcpsync.client._connect_http import open_http_transport

            transport = open_http_transport(self._config, self._aside.http, name=self._name,
                                            max_frame_bytes=self._opts.max_frame_bytes)
        else:
            stdio = StdioTransport(
                self._config.argv, name=self._name, env=self._config.env,
                inherit_env=self._opts.inherit_env, cwd=self._config.cwd,
                max_frame_bytes=self._opts.max_frame_bytes,
                stderr_bytes=self._opts.stderr_bytes, on_stderr=self._on_stderr(),
                die_with_parent=self._opts.die_with_parent)
            try:
                stdio.start()
            except BaseException:
                stdio.close()
                raise
            transport = stdio
        # From here the server runs: whatever raises (a Ctrl-C in the session's making)
        # closes the session, or, before there is one (it starts no thread until start()),
        # the transport, so that the server stops before the exception goes on.
        session: Session | None = None
        try:
            session = Session(
                transport, name=self._name, default_timeout=self._config.timeout,
                max_timeout=self._opts.max_timeout,
                reset_timeout_on_progress=self._opts.reset_timeout_on_progress,
                on_notification=weak_method(self._aside.notes.handle, _nothing),
                on_request=weak_method(self._on_request, self._gone),
                observe_progress=self._opts.notification_observer is not None,
                on_lost=self._opts.on_connection_lost)
            if transport.kind == "stdio":
                session.watch_handshake()   # until answered: is this an MCP server at all?
            session.start()
        except BaseException:
            if session is None:
                transport.close()
            else:
                session.close("start failed")
            raise
        self._transport = transport
        return session

    def _adopt(self, negotiated: Negotiated) -> None:
        """Take the handshake's outcome as this client's state."""
        self._era = negotiated.era
        self._modern = negotiated.era == "modern"
        self._protocol_version = negotiated.protocol_version
        self._capabilities = negotiated.capabilities
        self._aside.instructions = negotiated.instructions
        self._aside.server_info = negotiated.server_info
        self._aside.handshake_result = negotiated.result
        self._has_tools = "tools" in negotiated.capabilities
        self._may_task = not self._modern and offers_tool_tasks(negotiated.capabilities)
        self._rebuild_meta()
        transport = self._transport
        if self._modern and self._config.is_http:
            load_module("mcpsync.transport.http._transport")
            from mcpsync.transport.http._transport import HttpTransport, SessionState
            if isinstance(transport, HttpTransport):
                transport.session_updated(SessionState("modern", negotiated.protocol_version))

    def _take_server_name(self, session: Session) -> None:
        """Name a stdio server by what it calls itself (``serverInfo.name``) in errors and
        reprs, rather than by its program (``node``, ``npx``, ``python``), unless the caller
        named it (``name=``, or a config's ``name``/``id``). Thread and logger names keep the
        name they started with."""
        config = self._config
        if config.name or config.id or config.command is None:
            return
        own = _clean_server_name(self._aside.server_info.name)
        if not own or own == self._name:
            return
        self._name = own
        session.name = own
        self._subs.rename(own)
        transport = self._transport
        if isinstance(transport, StdioTransport):
            transport.name = own

    def _rebuild_meta(self) -> None:
        """The modern ``_meta`` shared by every request (replaced whole, never mutated)."""
        if self._modern:
            self._meta = build_meta(self._protocol_version,
                                    self._callbacks.capabilities(modern=True),
                                    self._aside.client_info, self._log_level)
            self._tool_meta = with_tasks_extension(self._meta, self._capabilities)

    def _revive(self) -> Session:
        """Called when the session is gone: restart a modern server, or say why we cannot.

        One restart at a time: threads that find the server dead together queue on the
        restart lock, and all but the first find a live session when they get it.
        """
        with self._aside.restart_lock:
            with self._state_lock:
                if self._closed:
                    raise ClosedError(f"client for server {self._name!r} is closed",
                                      server=self._name)
                old = self._session
                lost = old.lost
                if lost is None:
                    return old
                if not self._modern or self._opts.restart is None:
                    raise dead_error(lost, self._name)
                if not self._aside.restarts.take():
                    raise dead_error(
                        lost, self._name, f"; it was already restarted {RESTART_LIMIT} times "
                        f"within {RESTART_WINDOW:.0f} s, so it is not restarted again")
            old.close("server exited; restarting")
            _log.warning("server %r exited (%s); restarting it", self._name, lost)
            # The era is kept for the client's lifetime: rediscover as modern only.
            session, negotiated = negotiate(
                self._open_session, self._handshake_params(), era="modern",
                protocol_version=self._protocol_version, memory_key=None,
                allow_probe_restart=False)
            self._install(session, negotiated)
        self._subs.reopen()   # outside the lock: re-opening sends through _live()
        return session

    def _install(self, session: Session, negotiated: Negotiated) -> None:
        """Adopt a session made by a restart or a re-detection (restart lock held), unless
        the client was closed meanwhile: then close it and raise ``ClosedError``."""
        with self._state_lock:
            if self._closed:
                session.close()
                raise ClosedError(f"client for server {self._name!r} is closed",
                                  server=self._name)
            session.handshake_done()
            self._session = session
            self._aside.resources.session = session
            self._adopt(negotiated)
            self._take_server_name(session)
        self._cache.clear()

    @staticmethod
    def _gone() -> Any:
        raise ClosedError("the client was garbage-collected")

    def _on_request(self, message: Any) -> Any:
        """A legacy server→client request (callback pool thread)."""
        return self._callbacks.handle_request(message.method, message.params)

    def _contradicts(self, exc: RemoteError, method: str, session: Session, *,
                     modern: bool) -> bool:
        """Whether an HTTP reply says the era ``session`` was detected in is wrong
        (docs/http.md): a modern-only error code on a legacy session, or -32601 for
        ``tools/list`` on a modern one. Only when the era was detected (no pin), and once per
        client: after a re-detection, only a reply from the session it replaced still counts
        (that call is then sent again on the new session)."""
        if not self._config.is_http or self._memory_key() is None:
            return False
        replaced = self._aside.redetected_from
        if replaced is not None and session is not replaced():
            return False
        return era_contradicted(exc, method, modern=modern)

    def _redetect(self, used: Session, exc: RemoteError) -> None:
        """Detect the era anew on a fresh transport and adopt it; threads that meet the
        same contradiction together share one detection."""
        with self._aside.restart_lock:
            with self._state_lock:
                if self._closed:
                    raise ClosedError(f"client for server {self._name!r} is closed",
                                      server=self._name)
                if self._aside.redetected_from is not None:
                    if self._session is used:
                        raise exc
                    return
                self._aside.redetected_from = weakref.ref(used)
            _log.warning("server %r answered %s with error %s, which contradicts the detected "
                         "%s era; detecting its era again", self._name, exc.method, exc.code,
                         self._era)
            used.close("the era is detected again")
            key = self._memory_key()
            forget_era(key)
            session, negotiated = negotiate(
                self._open_session, self._handshake_params(), era="auto",
                protocol_version=None, memory_key=key, allow_probe_restart=False)
            self._install(session, negotiated)
        self._subs.reopen()   # a modern listen, or legacy resources/subscribe, on the new one


_SERVER_NAME_MAX = 64


#: Removed from a server's name: every "other" category (Cc controls, Cf format characters
#: such as zero-width and bidi marks, unassigned, private use, surrogates) and the Unicode
#: line and paragraph separators (Zl U+2028, Zp U+2029), which split a log line as "\n" does.
_NAME_DROPPED_CATEGORIES = frozenset({"Zl", "Zp"})


def _clean_server_name(name: str) -> str:
    """A server's self-reported name, safe to show in one line: control, format and other
    unprintable characters and line breaks removed, surrounding space stripped, cut to 64
    characters."""
    text = "".join(c for c in name
                   if not ((cat := unicodedata.category(c))[0] == "C"
                           or cat in _NAME_DROPPED_CATEGORIES))
    return text.strip()[:_SERVER_NAME_MAX].strip()


class SessionResources:
    """What the finalizer of an unreachable client closes (it must not refer to the client):
    the subscriptions and the current session, which the client updates when it swaps it."""

    def __init__(self, subs: Subscriptions) -> None:
        self.subs = subs
        self.session: Session | None = None
        self.pid = os.getpid()
        # Whether the finalizer warns "was not closed". A connect() that failed clears it:
        # the caller never had the client, and the constructor closed the session itself
        # (a Ctrl-C landing as the finalizer was made leaves one it could not detach).
        self.warn = True

    def close(self) -> None:
        session = self.session
        if os.getpid() != self.pid:
            if session is not None:
                session.close()   # forked child: drops references only, takes no lock
            return
        self.subs.close()
        if session is not None:
            session.close("the client was garbage-collected without close()")



def _nothing() -> None:
    return None
