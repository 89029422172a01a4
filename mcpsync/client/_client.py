"""The user-facing client: :func:`connect` and :class:`Client`.

``connect()`` turns a command (a string split with :func:`shlex.split`, or an argv list) or a
:class:`~mcpsync.config.ServerConfig` into a connected :class:`Client`, the way
``requests.get`` turns a URL into a response: it has no behaviour of its own. The ``Client``
is a thin layer over one :class:`~mcpsync.session.Session`: it adds the era handshake, the
modern ``_meta``, the input-required loop, pagination, caching, subscriptions and restarts,
and turns wire dicts into the dataclasses of :mod:`mcpsync.types`.

Thread contract: every method is safe to call from any number of threads at once, including
from inside a sampling/elicitation/roots callback and from a running asyncio event loop (the
calls block the calling thread; nothing here touches asyncio). ``close()`` is idempotent.
"""

from __future__ import annotations

import atexit
import collections
import concurrent.futures
import copy
import logging
import math
import os
import threading
import time
import unicodedata
import weakref
from collections.abc import Callable, Hashable, Mapping
from dataclasses import replace
from typing import Any

from mcpsync._codes import (
    INVALID_PARAMS as _INVALID_PARAMS,
    METHOD_NOT_FOUND as _METHOD_NOT_FOUND,
    MODERN_ONLY_CODES as _MODERN_ONLY_CODES,
    UNSUPPORTED_PROTOCOL_VERSION as _UNSUPPORTED_PROTOCOL_VERSION,
)
from mcpsync._version import __version__
from mcpsync.client._cache import ListCache
from mcpsync.client._callbacks import (
    Callbacks,
    ElicitationCallback,
    ElicitationRequest,
    RootsInput,
    SamplingCallback,
    SamplingRequest,
)
from mcpsync.client._connect_http import HttpSettings, open_http_transport
from mcpsync.client._finalizer import watch, weak_method
from mcpsync.client._future import CallFuture
from mcpsync.client._handshake import HandshakeParams, Negotiated, forget_era, negotiate
from mcpsync.client._input_required import check_result_type, next_round_params, run_input_rounds
from mcpsync.client._options import ClientOptions
from mcpsync.client._subscriptions import KINDS, Subscription, Subscriptions
from mcpsync.config import ServerConfig, logger_name_part
from mcpsync.errors import (
    CapabilityNotSupported,
    ClosedError,
    ConnectionLost,
    OutputValidationError,
    ProtocolError,
    RemoteError,
    ServerExited,
    ToolError,
    TooManyPages,
    UnsupportedInThisEra,
    UsedAfterFork,
)
from mcpsync.protocol import (
    LOG_LEVELS,
    build_meta,
    describe_call,
    log_level_to_logging,
    retry_version_from_error,
)
from mcpsync.session import RequestFuture, Session
from mcpsync.transport.base import Transport
from mcpsync.transport.memory import MemoryTransport
from mcpsync.transport.stdio import StdioTransport
from mcpsync.types import (
    CallToolResult,
    CompleteResult,
    GetPromptResult,
    Prompt,
    ReadResourceResult,
    Resource,
    ResourceTemplate,
    ServerInfo,
    Tool,
)

__all__ = ["Client", "ElicitationRequest", "SamplingRequest", "Subscription"]

_log = logging.getLogger("mcpsync.client")

ProgressCallback = Callable[[float, "float | None", "str | None"], Any]

_RESTART_LIMIT = 3          # modern stdio restarts ...
_RESTART_WINDOW = 60.0      # ... within this many seconds
_LIST_METHODS = {"tools": ("tools/list",), "prompts": ("prompts/list",),
                 "resources": ("resources/list", "resources/templates/list")}

# Clients left open at interpreter exit are closed, so no server outlives the script.
_open_clients: weakref.WeakSet[Client] = weakref.WeakSet()


def _close_open_clients() -> None:
    for client in list(_open_clients):
        try:
            client.close()
        except Exception as exc:  # never let one client's teardown stop the others
            _log.debug("closing %r at exit failed: %s", client, exc)


atexit.register(_close_open_clients)


class Client:
    """A connection to one MCP server over stdio; use :func:`connect` to make one.

    Properties tell what was negotiated: :attr:`era` (``"legacy"``/``"modern"``),
    :attr:`protocol_version`, :attr:`capabilities`, :attr:`instructions`,
    :attr:`server_info`. Blocking calls are safe from many threads at once. A ``Client`` is a
    context manager; ``close()`` is idempotent, and clients still open at interpreter exit are
    closed by an ``atexit`` hook.
    """

    def __init__(self, config: ServerConfig, options: ClientOptions, *,
                 sampling: SamplingCallback | None = None,
                 elicitation: ElicitationCallback | None = None,
                 roots: RootsInput | None = None,
                 http: HttpSettings | None = None,
                 in_process: Callable[[str], MemoryTransport] | None = None) -> None:
        self._config = config
        self._in_process = in_process  # set for an in-process server: opens its transport
        self._http = http              # set for a URL target: the HTTP transport's settings
        self._opts = options
        self._client_info = options.client_info_sent()
        self._name = config.display_name
        self._safe_name = logger_name_part(self._name)
        self._server_log = logging.getLogger(f"mcpsync.server.{self._safe_name}")
        self._pid = os.getpid()
        self._callbacks = Callbacks(sampling=sampling, elicitation=elicitation, roots=roots)
        self._cache = ListCache()
        self._tools: dict[str, Tool] = {}
        self._schemas: dict[str, Any] = {}       # tool name -> outputSchema (validation on)
        self._validators: dict[str, Any] = {}    # tool name -> compiled jsonschema validator
        # The subscription thread and the session reach this client only weakly, so that a
        # client nobody holds is collected and its server stopped (see _finalizer).
        me = weakref.ref(self)
        self._subs = Subscriptions(
            name=self._name, thread_name=f"mcpsync-listen-{self._safe_name}",
            request=weak_method(self._request, self._gone),
            submit_listen=weak_method(self._submit_listen, self._gone),
            era=lambda: _alive(me)._era, capabilities=lambda: _alive(me)._capabilities,
            ack_timeout=lambda: config.timeout)
        self._resources = _Resources(self._subs)
        self._state_lock = threading.Lock()      # close and the session swap
        self._restart_lock = threading.Lock()    # one restart at a time
        # The session an era re-detection replaced (at most one per client), weakly: set
        # means "re-detected"; futures compare their round's session with it.
        self._redetected_from: weakref.ref[Session] | None = None
        self._closed = False
        self._restarts: collections.deque[float] = collections.deque()
        self._workers: set[threading.Thread] = set()   # submitted calls between rounds
        self._log_level = options.log_level
        self._session: Session
        self._transport: Transport | None = None
        # Set by _adopt(); declared here for the type checker.
        self._era = "legacy"
        self._modern = False
        self._protocol_version = ""
        self._capabilities: dict[str, Any] = {}
        self._instructions: str | None = None
        self._server_info = ServerInfo()
        self._handshake_result: dict[str, Any] = {}
        self._meta: dict[str, Any] = {}
        self._has_tools = False
        # A forced HTTP+SSE transport (2024-11-05) is legacy by definition: no detection.
        era = "legacy" if config.transport == "sse" and options.era == "auto" else options.era
        session, negotiated = negotiate(
            self._open_session, self._handshake_params(), era=era,
            protocol_version=options.protocol_version, memory_key=self._memory_key(),
            allow_probe_restart=http is None)   # an HTTP server cannot be restarted
        session.handshake_done()
        self._session = session
        self._resources.session = session
        self._adopt(negotiated)
        self._take_server_name(session)
        _open_clients.add(self)
        self._finalizer = watch(self, self._resources, self._name)

    # -- opening, handshake, restart -------------------------------------------------------

    def _memory_key(self) -> Hashable | None:
        """Per-process memory of the era for ``(command, args, cwd)``; only for ``auto``."""
        if (self._opts.era != "auto" or self._opts.protocol_version is not None
                or self._config.transport == "sse" or self._in_process is not None):
            return None
        if self._config.is_http:
            return ("url", self._config.url)
        return (self._config.argv, self._config.cwd)

    def _handshake_params(self) -> HandshakeParams:
        return HandshakeParams(
            name=self._name, timeout=self._config.timeout, probe_timeout=self._opts.probe_timeout,
            legacy_capabilities=self._callbacks.capabilities(modern=False),
            client_info=self._client_info or {"name": "mcpsync", "version": __version__},
            modern_meta=lambda version: build_meta(
                version, self._callbacks.capabilities(modern=True), self._client_info),
            http=self._config.is_http,
            on_legacy=self._tell_transport_legacy if self._config.is_http else None)

    def _tell_transport_legacy(self, version: str, params: dict[str, Any]) -> None:
        """The HTTP transport learns the legacy era from us, not from the frames."""
        from mcpsync.transport.http._transport import HttpTransport, SessionState
        transport = self._transport
        if isinstance(transport, HttpTransport):
            transport.session_updated(SessionState("legacy", version, params))

    def _open_session(self) -> Session:
        """Spawn the server (or open the HTTP transport) and start a session on it (the
        handshake comes after)."""
        transport: Transport
        if self._in_process is not None:
            transport = self._in_process(self._name)
        elif self._http is not None:
            transport = open_http_transport(self._config, self._http, name=self._name,
                                            max_frame_bytes=self._opts.max_frame_bytes)
        else:
            stdio = StdioTransport(
                self._config.argv, name=self._name, env=self._config.env,
                inherit_env=self._opts.inherit_env, cwd=self._config.cwd,
                max_frame_bytes=self._opts.max_frame_bytes,
                stderr_bytes=self._opts.stderr_bytes, on_stderr=self._opts.on_stderr,
                die_with_parent=self._opts.die_with_parent)
            try:
                stdio.start()
            except BaseException:
                stdio.close()
                raise
            transport = stdio
        session = Session(
            transport, name=self._name, default_timeout=self._config.timeout,
            max_timeout=self._opts.max_timeout,
            reset_timeout_on_progress=self._opts.reset_timeout_on_progress,
            on_notification=weak_method(self._on_notification, _nothing),
            on_request=weak_method(self._on_request, self._gone),
            observe_progress=self._opts.notification_observer is not None,
            on_lost=self._opts.on_connection_lost)
        if transport.kind == "stdio":
            session.watch_handshake()   # until answered: is this an MCP server at all?
        try:
            session.start()
        except BaseException:
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
        self._instructions = negotiated.instructions
        self._server_info = negotiated.server_info
        self._handshake_result = negotiated.result
        self._has_tools = "tools" in negotiated.capabilities
        self._rebuild_meta()
        transport = self._transport
        if self._modern and self._config.is_http:
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
        own = _clean_server_name(self._server_info.name)
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
                                    self._client_info, self._log_level)

    def _revive(self) -> Session:
        """Called when the session is gone: restart a modern server, or say why we cannot.

        One restart at a time: threads that find the server dead together queue on the
        restart lock, and all but the first find a live session when they get it.
        """
        with self._restart_lock:
            with self._state_lock:
                if self._closed:
                    raise ClosedError(f"client for server {self._name!r} is closed",
                                      server=self._name)
                old = self._session
                lost = old.lost
                if lost is None:
                    return old
                if not self._modern or self._opts.restart is None:
                    raise self._dead_error(lost, "")
                now = time.monotonic()
                while self._restarts and now - self._restarts[0] > _RESTART_WINDOW:
                    self._restarts.popleft()
                if len(self._restarts) >= _RESTART_LIMIT:
                    raise self._dead_error(
                        lost, f"; it was already restarted {_RESTART_LIMIT} times within "
                              f"{_RESTART_WINDOW:.0f} s, so it is not restarted again")
                self._restarts.append(now)
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
            self._resources.session = session
            self._adopt(negotiated)
            self._take_server_name(session)
        self._cache.clear()

    def _dead_error(self, lost: ConnectionLost, suffix: str) -> ConnectionLost:
        """A fresh error for a call made after the server died (nothing was sent)."""
        if isinstance(lost, ServerExited):
            return ServerExited(
                f"server {self._name!r} exited earlier (exit code {lost.exit_code}){suffix}; "
                f"connect again to start it anew", exit_code=lost.exit_code,
                stderr_tail=lost.stderr_tail, server=self._name)
        return ConnectionLost(f"the connection to server {self._name!r} was lost earlier "
                              f"({lost}){suffix}; connect again", server=self._name)

    @staticmethod
    def _gone() -> Any:
        raise ClosedError("the client was garbage-collected")

    def _live(self) -> Session:
        """The current session, restarting a dead modern server first (see docs/client.md)."""
        session = self._session
        return session if session.lost is None else self._revive()

    # -- server → client traffic -----------------------------------------------------------

    def _on_request(self, message: Any) -> Any:
        """A legacy server→client request (callback pool thread)."""
        return self._callbacks.handle_request(message.method, message.params)

    def _on_notification(self, message: Any) -> None:
        """Route a notification (dispatcher thread, in arrival order), then show it to the
        ``notification_observer``, which sees every notification after our own handling."""
        observer = self._opts.notification_observer
        if message.method != "notifications/progress":   # progress reaches us only when
            self._route_notification(message)             # observed; the call has it already
        if observer is not None:
            try:
                observer(message.method, message.params)
            except Exception:
                _log.exception("server %r: notification_observer raised on %s; delivery "
                               "goes on", self._name, message.method)

    def _route_notification(self, message: Any) -> None:
        method = message.method
        params = message.params
        if method == "notifications/message":
            self._server_message(params)
        elif method.endswith("/list_changed") and method.startswith("notifications/"):
            kind = method[len("notifications/"):-len("/list_changed")]
            if kind in KINDS:
                self._cache.invalidate(*_LIST_METHODS[kind])
                if kind == "tools":
                    self._tools = {}
                    self._schemas = {}
                    self._validators = {}
                self._subs.deliver_list_changed(kind, params)
            elif self._opts.on_notification is not None:
                self._opts.on_notification(method, params)
        elif method == "notifications/resources/updated":
            self._subs.deliver_updated(params)
        elif method == "notifications/subscriptions/acknowledged":
            self._subs.acknowledged(params)
        elif method == "notifications/elicitation/complete":
            self._callbacks.elicitation_complete(params)
        elif self._opts.on_notification is not None:
            self._opts.on_notification(method, params)

    def _server_message(self, params: Any) -> None:
        """``notifications/message``: log it under ``mcpsync.server.<name>``, then ``on_log``."""
        p = params if isinstance(params, Mapping) else {}
        level = p.get("level")
        logger = p.get("logger")
        data = p.get("data")
        self._server_log.log(log_level_to_logging(level if isinstance(level, str) else ""),
                             "%s%s", f"[{logger}] " if logger else "", data)
        if self._opts.on_log is not None:
            self._opts.on_log(level if isinstance(level, str) else "info",
                              logger if isinstance(logger, str) else None, data)

    # -- the request path ------------------------------------------------------------------

    def _params(self, params: Mapping[str, Any] | None,
                meta: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        """Params with the modern ``_meta`` (ours win over the caller's protocol keys)."""
        if self._modern:
            out = dict(params) if params else {}
            extra = out.get("_meta")
            if meta:
                extra = {**extra, **meta} if isinstance(extra, Mapping) else dict(meta)
            out["_meta"] = self._meta if not extra else {**extra, **self._meta}
            return out
        if meta:
            out = dict(params) if params else {}
            out["_meta"] = dict(meta)
            return out
        return dict(params) if params is not None else None

    def _request(self, method: str, params: Mapping[str, Any] | None = None, *,
                 timeout: float | None = None, progress: ProgressCallback | None = None,
                 reset_timeout_on_progress: bool | None = None,
                 meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """One call with everything but the result parsing: ``_meta``, version retry, MRTR."""
        wire = self._params(params, meta)
        opts = _Round(timeout, progress, reset_timeout_on_progress)
        session = self._live()
        try:
            result = opts.send(session, method, wire)
        except RemoteError as exc:
            if self._contradicts(exc, method):
                self._redetect(session, exc)
                return self._request(method, params, timeout=timeout, progress=progress,
                                     reset_timeout_on_progress=reset_timeout_on_progress,
                                     meta=meta)
            result = self._version_retry(exc, method, wire, opts)
        if self._modern and check_result_type(method, result, params=params,
                                              server=self._name) == "input_required":
            assert wire is not None
            result = self._input_rounds(method, wire, result, opts)
        if not isinstance(result, dict):
            raise ProtocolError(f"{describe_call(method, params, self._name)}: the result is "
                                f"not an object: {result!r:.200}", server=self._name,
                                method=method)
        return result

    def _retry_params(self, exc: RemoteError, wire: dict[str, Any] | None) -> dict[str, Any]:
        """A modern -32022 on a later request: switch to the newest shared version and return
        the params to send again once; re-raise ``exc`` when that does not apply."""
        if not (self._modern and exc.code == _UNSUPPORTED_PROTOCOL_VERSION and wire):
            raise exc
        version = retry_version_from_error(exc.data, "modern")
        if version is None:
            raise exc
        _log.info("server %r asked for protocol %s; retrying %s", self._name, version,
                  exc.method)
        self._protocol_version = version
        self._server_info = replace(self._server_info, protocol_version=version)
        self._rebuild_meta()
        retry = dict(wire)
        retry["_meta"] = {**wire.get("_meta", {}), **self._meta}
        return retry

    def _version_retry(self, exc: RemoteError, method: str, wire: dict[str, Any] | None,
                       opts: _Round) -> Any:
        return opts.send(self._session, method, self._retry_params(exc, wire))

    def _contradicts(self, exc: RemoteError, method: str) -> bool:
        """Whether an HTTP reply says the detected era is wrong (docs/http.md): a modern-only
        error code on a legacy session, or -32601 for ``tools/list`` on a modern one. Only
        when the era was detected (no pin), and only once per client."""
        if self._redetected_from is not None or not self._config.is_http \
                or self._memory_key() is None:
            return False
        return _era_contradicted(exc, method, modern=self._modern)

    def _redetect(self, used: Session, exc: RemoteError) -> None:
        """Detect the era anew on a fresh transport and adopt it; threads that meet the
        same contradiction together share one detection."""
        with self._restart_lock:
            with self._state_lock:
                if self._closed:
                    raise ClosedError(f"client for server {self._name!r} is closed",
                                      server=self._name)
                if self._redetected_from is not None:
                    if self._session is used:
                        raise exc
                    return
                self._redetected_from = weakref.ref(used)
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

    def _input_rounds(self, method: str, wire: dict[str, Any], result: dict[str, Any],
                      opts: _Round) -> dict[str, Any]:
        def send(params: dict[str, Any]) -> Any:
            return opts.send(self._live(), method, params)
        return run_input_rounds(method, wire, result, send=send, callbacks=self._callbacks,
                                max_rounds=self._opts.max_input_rounds, server=self._name)

    def _require(self, capability: str, doing: str, method: str) -> None:
        """Raise ``CapabilityNotSupported`` (nothing sent) when the server did not offer it."""
        if capability not in self._capabilities:
            raise CapabilityNotSupported(
                f"{doing} on server {self._name!r}: the server did not advertise the "
                f"{capability!r} capability", server=self._name, method=method)

    # -- tools -----------------------------------------------------------------------------

    def call_tool(self, name: str, arguments: Mapping[str, Any] | None = None, *,
                  timeout: float | None = None, progress: ProgressCallback | None = None,
                  raise_on_error: bool = False, retry_on_drop: bool = False,
                  meta: Mapping[str, Any] | None = None,
                  reset_timeout_on_progress: bool | None = None) -> CallToolResult:
        """Call a tool and return its :class:`~mcpsync.types.CallToolResult`.

        A tool that fails reports ``is_error=True`` in a normal result; pass
        ``raise_on_error=True`` to get :class:`~mcpsync.errors.ToolError` instead.
        ``progress(progress, total, message)`` receives the server's progress notifications
        (on the dispatcher thread); every one that arrived before the answer has run by the
        time this returns. ``timeout`` overrides the client default (``math.inf``: no limit);
        ``reset_timeout_on_progress`` overrides the client option for this call. With
        ``retry_on_drop=True`` a call whose connection dropped is sent again once after a
        modern server's restart (only for tools safe to run twice).

        When the last :meth:`list_tools` cached an ``outputSchema`` for this tool and
        ``jsonschema`` is installed, the structured result is validated
        (:class:`~mcpsync.errors.OutputValidationError`); ``validate_output=False`` on
        ``connect()`` turns that off. Errors leave the client usable, except
        :class:`~mcpsync.errors.ServerExited` on a legacy server.

        This is the blocking form of :meth:`submit_tool`: same result, same errors, same
        rounds, but it waits in the calling thread (which may read its own answer, see
        ``docs/performance.md``) instead of building a future.
        """
        # Hot path (benchmarked): build the params, one session.request, from_dict.
        if not self._has_tools:
            self._require("tools", f"calling tool {name!r}", "tools/call")
        session = self._session
        if session.lost is not None:
            session = self._revive()
        params: dict[str, Any] = {"name": name,
                                  "arguments": arguments if arguments is not None else {}}
        if self._modern:
            params["_meta"] = self._meta if meta is None else {**meta, **self._meta}
        elif meta is not None:
            params["_meta"] = dict(meta)
        try:
            if progress is None and reset_timeout_on_progress is None:
                result = session.request("tools/call", params, timeout=timeout)
            else:
                result = session.request("tools/call", params, timeout=timeout,
                                         progress=progress,
                                         reset_timeout_on_progress=reset_timeout_on_progress)
        except RemoteError as exc:
            if self._contradicts(exc, "tools/call"):
                self._redetect(session, exc)
                return self.call_tool(name, arguments, timeout=timeout, progress=progress,
                                      raise_on_error=raise_on_error,
                                      retry_on_drop=retry_on_drop, meta=meta,
                                      reset_timeout_on_progress=reset_timeout_on_progress)
            result = self._version_retry(exc, "tools/call", params,
                                         _Round(timeout, progress, reset_timeout_on_progress))
        except ConnectionLost:
            if not (retry_on_drop and self._modern and self._opts.restart is not None):
                raise
            result = self._live().request("tools/call", params, timeout=timeout,
                                          progress=progress,
                                          reset_timeout_on_progress=reset_timeout_on_progress)
        if self._modern and type(result) is dict and result.get("resultType") is not None \
                and check_result_type("tools/call", result, params=params,
                                      server=self._name) == "input_required":
            result = self._input_rounds("tools/call", params, result,
                                        _Round(timeout, progress, reset_timeout_on_progress))
        if type(result) is not dict or self._schemas or raise_on_error:
            return self._tool_result(name, result, raise_on_error)
        return CallToolResult.from_dict(result)   # the common case, without the checks

    def _tool_params(self, name: str, arguments: Mapping[str, Any] | None,
                     meta: Mapping[str, Any] | None) -> dict[str, Any]:
        """``tools/call`` params (``call_tool`` inlines the same, it is the hot path)."""
        params: dict[str, Any] = {"name": name,
                                  "arguments": arguments if arguments is not None else {}}
        if self._modern:
            params["_meta"] = self._meta if meta is None else {**meta, **self._meta}
        elif meta is not None:
            params["_meta"] = dict(meta)
        return params

    def _tool_result(self, name: str, result: Any, raise_on_error: bool) -> CallToolResult:
        """The final ``tools/call`` result as a dataclass: validated, and raised on request."""
        if type(result) is not dict:
            raise ProtocolError(f"calling tool {name!r} on server {self._name!r}: the result "
                                f"is not an object: {result!r:.200}", server=self._name,
                                method="tools/call")
        out = CallToolResult.from_dict(result)
        if self._schemas and name in self._schemas:
            self._validate(name, out)
        if raise_on_error and out.is_error:
            raise ToolError(f"calling tool {name!r} on server {self._name!r}: the tool "
                            f"reported an error: {out.text[:500] or '(no text)'}",
                            result=out, server=self._name, method="tools/call")
        return out

    def _validate(self, name: str, result: CallToolResult) -> None:
        """Check ``structuredContent`` against the cached ``outputSchema``."""
        if result.is_error:
            return
        doing = f"calling tool {name!r} on server {self._name!r}"
        if result.structured is None:
            raise OutputValidationError(
                f"{doing}: the tool has an outputSchema but returned no structuredContent; "
                "pass validate_output=False to connect() to accept it", result=result,
                server=self._name, method="tools/call")
        validator = self._validators.get(name)
        if validator is None:
            import jsonschema  # checked at list_tools; imported lazily to keep import fast

            schema = self._schemas[name]
            cls = jsonschema.validators.validator_for(
                schema, default=jsonschema.Draft202012Validator)
            validator = cls(schema)
            self._validators[name] = validator
        error = next(iter(validator.iter_errors(result.structured)), None)
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "(root)"
            raise OutputValidationError(
                f"{doing}: the structured result does not match the tool's outputSchema at "
                f"{where}: {error.message}; pass validate_output=False to connect() to accept "
                "it", result=result, server=self._name, method="tools/call")

    def list_tools(self) -> list[Tool]:
        """Every tool (all pages). Remembers output schemas for :meth:`call_tool` validation."""
        self._require("tools", "listing tools", "tools/list")
        tools = [Tool.from_dict(t) for t in self._list_all("tools/list", "tools")]
        self._tools = {t.name: t for t in tools}
        schemas: dict[str, Any] = {}
        if self._opts.validate_output and _jsonschema_available():
            schemas = {t.name: t.output_schema for t in tools if t.output_schema is not None}
        self._validators = {}
        self._schemas = schemas
        return tools

    def submit(self, method: str, params: Mapping[str, Any] | None = None, *,
               timeout: float | None = None, progress: ProgressCallback | None = None,
               reset_timeout_on_progress: bool | None = None,
               meta: Mapping[str, Any] | None = None) -> CallFuture:
        """Send a request without waiting; return a ``concurrent.futures.Future`` for it.

        The future resolves to the raw result dict, after the same protocol-version retry
        and input-required rounds as a blocking call (rounds run their callbacks on a
        ``mcpsync-input-<name>`` thread). ``future.cancel()`` cancels on the wire and returns
        ``True`` if no answer had arrived, ``False`` once it had. Its done-callbacks and
        progress callbacks run on the dispatcher thread; do not wait on the future *inside*
        such a callback (it would wait for itself).
        """
        wire = self._params(params, meta)
        future = CallFuture(describe_call(method, params, self._name), self._name, method)
        self._submit_round(future, _Chain(method, wire, params,
                                          _Round(timeout, progress, reset_timeout_on_progress),
                                          _raw_result,
                                          rebuild=lambda: self._params(params, meta)))
        return future

    def submit_tool(self, name: str, arguments: Mapping[str, Any] | None = None, *,
                    timeout: float | None = None, progress: ProgressCallback | None = None,
                    raise_on_error: bool = False, retry_on_drop: bool = False,
                    meta: Mapping[str, Any] | None = None,
                    reset_timeout_on_progress: bool | None = None) -> CallFuture:
        """:meth:`call_tool` without waiting: the future resolves to its
        :class:`~mcpsync.types.CallToolResult` (or raises what ``call_tool`` would raise:
        ``ToolError`` with ``raise_on_error``, ``OutputValidationError``, ...).
        ``future.cancel()`` cancels on the wire."""
        if not self._has_tools:
            self._require("tools", f"calling tool {name!r}", "tools/call")
        params = self._tool_params(name, arguments, meta)
        future = CallFuture(f"calling tool {name!r} on server {self._name!r}", self._name,
                            "tools/call")

        def rebuild() -> dict[str, Any]:   # after a re-detection: the new era's params
            if not self._has_tools:
                self._require("tools", f"calling tool {name!r}", "tools/call")
            return self._tool_params(name, arguments, meta)

        self._submit_round(future, _Chain(
            "tools/call", params, params, _Round(timeout, progress, reset_timeout_on_progress),
            lambda result: self._tool_result(name, result, raise_on_error),
            retry_on_drop=retry_on_drop, rebuild=rebuild))
        return future

    def _submit_round(self, future: CallFuture, chain: _Chain) -> None:
        """Send one wire round of ``future``'s call; its answer goes to :meth:`_on_round`."""
        opts = chain.opts
        session = self._live()
        chain.session = session
        chain.modern = self._modern
        wire = session.submit(chain.method, chain.wire, timeout=opts.timeout,
                              progress=opts.progress, reset_timeout_on_progress=opts.reset)
        if future._attach(wire):
            wire.add_done_callback(lambda done: self._on_round(future, chain, done))

    def _on_round(self, future: CallFuture, chain: _Chain,
                  wire: concurrent.futures.Future[Any]) -> None:
        """A round of a submitted call ended (dispatcher thread): resolve the future, or
        start the next round on a worker thread (it may run user callbacks or a restart)."""
        if future.done() or wire.cancelled():
            return
        error = wire.exception()
        try:
            if error is None:
                result = wire.result()
                if self._modern and check_result_type(
                        chain.method, result, params=chain.params,
                        server=self._name) == "input_required":
                    chain.rounds += 1
                    self._continue(future, chain, lambda: next_round_params(
                        chain.method, chain.wire or {}, result, callbacks=self._callbacks,
                        round_number=chain.rounds, max_rounds=self._opts.max_input_rounds,
                        server=self._name))
                    return
                future._resolve(chain.finish(result))
            elif isinstance(error, RemoteError) and chain.first and \
                    self._chain_contradicts(error, chain):
                self._continue(future, chain, lambda: self._redetect_chain(chain, error))
            elif isinstance(error, RemoteError) and self._modern and not \
                    chain.version_retried and error.code == _UNSUPPORTED_PROTOCOL_VERSION:
                chain.version_retried = True
                self._continue(future, chain, lambda: self._retry_params(error, chain.wire))
            elif isinstance(error, ConnectionLost) and chain.retry_on_drop and \
                    self._modern and self._opts.restart is not None:
                chain.retry_on_drop = False
                self._continue(future, chain, lambda: chain.wire)
            else:
                future._fail(error)
        except Exception as exc:  # the conversion's own errors (validation, protocol)
            future._fail(exc)

    def _continue(self, future: CallFuture, chain: _Chain,
                  next_params: Callable[[], dict[str, Any] | None]) -> None:
        """Run ``next_params`` and send the next round, on a ``mcpsync-input-<name>`` thread."""
        chain.first = False
        future._between_rounds()

        def run() -> None:
            try:
                params = next_params()
                if future.cancelled():
                    return
                chain.wire = params
                self._submit_round(future, chain)
            except BaseException as exc:  # the future carries every outcome
                future._fail(exc)
            finally:
                with self._state_lock:
                    self._workers.discard(threading.current_thread())

        thread = threading.Thread(target=run, name=f"mcpsync-input-{self._safe_name}",
                                  daemon=True)
        with self._state_lock:
            self._workers.add(thread)
        thread.start()

    def _chain_contradicts(self, exc: RemoteError, chain: _Chain) -> bool:
        """:meth:`_contradicts` for a submitted call's first round (dispatcher thread). The
        era is the one the round was sent in, and a contradiction that arrives after another
        call re-detected still counts when it came from the session that re-detection
        replaced: the call is then sent again on the new session, as a blocking call that met
        it at the same time would be."""
        if chain.rebuild is None or not self._config.is_http or self._memory_key() is None:
            return False
        replaced = self._redetected_from
        if replaced is not None and chain.session is not replaced():
            return False
        return _era_contradicted(exc, chain.method, modern=chain.modern)

    def _redetect_chain(self, chain: _Chain, exc: RemoteError) -> dict[str, Any] | None:
        """Re-detect the era for a submitted call (on its worker thread, never the caller's)
        and return its params rebuilt for the new era; the call then starts over."""
        assert chain.session is not None and chain.rebuild is not None
        self._redetect(chain.session, exc)
        chain.rounds = 0
        chain.version_retried = False
        return chain.rebuild()

    def _submit_listen(self, params: dict[str, Any]) -> RequestFuture:
        return self._live().submit("subscriptions/listen", self._params(params),
                                   timeout=math.inf)

    # -- lists -----------------------------------------------------------------------------

    def _page(self, method: str, cursor: str | None) -> tuple[dict[str, Any], bool]:
        """One page, from the modern cache when fresh; ``(page, came_from_cache)``."""
        if self._modern:
            cached = self._cache.get(method, cursor)
            if cached is not None:
                return cached, True
        params = {"cursor": cursor} if cursor is not None else None
        page = self._request(method, params)
        if self._modern:
            self._cache.put(method, cursor, page)
        return page, False

    def _list_all(self, method: str, key: str) -> list[Any]:
        """Follow ``nextCursor`` to the end; only an absent or null cursor ends a list."""
        for attempt in range(2):
            items: list[Any] = []
            cursor: str | None = None
            pages = 0
            used_cache = False
            try:
                while True:
                    page, cached = self._page(method, cursor)
                    used_cache = used_cache or cached
                    got = page.get(key)
                    if not isinstance(got, list):
                        raise ProtocolError(
                            f"{describe_call(method, None, self._name)}: the result has no "
                            f"{key!r} list", server=self._name, method=method)
                    items.extend(got)
                    pages += 1
                    cursor = page.get("nextCursor")
                    if cursor is None:
                        return items
                    if pages >= self._opts.max_pages:
                        raise TooManyPages(
                            f"{describe_call(method, None, self._name)}: the list did not end "
                            f"within {self._opts.max_pages} pages; raise max_pages if it is "
                            "genuinely that long", server=self._name, method=method)
            except RemoteError as exc:
                # A cached cursor the server no longer honours: drop every page, start over.
                if attempt or not used_cache or exc.code != _INVALID_PARAMS:
                    raise
                self._cache.invalidate(method)
        raise AssertionError("unreachable")  # pragma: no cover

    def list_resources(self) -> list[Resource]:
        """Every resource (all pages)."""
        self._require("resources", "listing resources", "resources/list")
        return [Resource.from_dict(r) for r in self._list_all("resources/list", "resources")]

    def list_resource_templates(self) -> list[ResourceTemplate]:
        """Every resource template (all pages)."""
        self._require("resources", "listing resource templates", "resources/templates/list")
        return [ResourceTemplate.from_dict(r)
                for r in self._list_all("resources/templates/list", "resourceTemplates")]

    def list_prompts(self) -> list[Prompt]:
        """Every prompt (all pages)."""
        self._require("prompts", "listing prompts", "prompts/list")
        return [Prompt.from_dict(p) for p in self._list_all("prompts/list", "prompts")]

    # -- resources, prompts, completion ----------------------------------------------------

    def read_resource(self, uri: str, *, timeout: float | None = None,
                      meta: Mapping[str, Any] | None = None) -> ReadResourceResult:
        """Read one resource. A missing one raises :class:`~mcpsync.errors.ResourceNotFound`."""
        self._require("resources", f"reading resource {uri!r}", "resources/read")
        return ReadResourceResult.from_dict(
            self._request("resources/read", {"uri": uri}, timeout=timeout, meta=meta))

    def get_prompt(self, name: str, arguments: Mapping[str, str] | None = None, *,
                   timeout: float | None = None,
                   meta: Mapping[str, Any] | None = None) -> GetPromptResult:
        """Render a prompt with its (string) arguments."""
        self._require("prompts", f"getting prompt {name!r}", "prompts/get")
        params: dict[str, Any] = {"name": name}
        if arguments is not None:
            params["arguments"] = dict(arguments)
        return GetPromptResult.from_dict(
            self._request("prompts/get", params, timeout=timeout, meta=meta))

    def complete(self, ref: Any, argument: Any,
                 context: Mapping[str, Any] | None = None) -> CompleteResult:
        """Ask for completions of one argument (``completion/complete``).

        ``ref`` is a ``{"type": "ref/prompt", "name": ...}`` /
        ``{"type": "ref/resource", "uri": ...}`` dict, a :class:`~mcpsync.types.Prompt` or
        :class:`~mcpsync.types.ResourceTemplate`, or a string (a URI or URI template when it
        contains ``://``, else a prompt name). ``argument`` is ``{"name", "value"}`` or a
        ``(name, value)`` pair; ``context`` maps already-chosen argument names to values.
        """
        if self._protocol_version != "2024-11-05":  # the capability exists from 2025-03-26
            self._require("completions", "completing an argument", "completion/complete")
        params: dict[str, Any] = {"ref": _completion_ref(ref),
                                  "argument": _completion_argument(argument)}
        if context is not None:
            params["context"] = dict(context) if "arguments" in context else {
                "arguments": dict(context)}
        return CompleteResult.from_dict(self._request("completion/complete", params))

    # -- utilities -------------------------------------------------------------------------

    def ping(self, *, timeout: float | None = None) -> None:
        """Check that a legacy server answers; modern servers have no ``ping``."""
        if self._modern and os.getpid() == self._pid:
            raise UnsupportedInThisEra(
                f"pinging server {self._name!r}: ping does not exist in protocol "
                f"{self._protocol_version}; any cheap call (list_tools()) serves instead",
                server=self._name, method="ping")
        self._request("ping", None, timeout=timeout)

    def set_log_level(self, level: str) -> None:
        """Ask for server log messages at ``level`` and above (delivered to ``on_log``).

        Legacy sends ``logging/setLevel``; modern puts the level in every later request's
        ``_meta`` (messages then arrive only for those requests).
        """
        if level not in LOG_LEVELS:
            raise ValueError(f"level must be one of {', '.join(LOG_LEVELS)}, got {level!r}")
        if self._modern:
            self._log_level = level
            self._rebuild_meta()
            return
        self._require("logging", "setting the log level", "logging/setLevel")
        self._request("logging/setLevel", {"level": level})
        self._log_level = level

    def set_roots(self, roots: RootsInput) -> None:
        """Replace the roots offered to the server.

        Legacy (with roots declared at ``connect()``) also sends
        ``notifications/roots/list_changed``; modern servers ask for roots through
        input-required rounds, which read the new list.
        """
        self._callbacks.set_roots(roots)
        if not self._modern and self._callbacks.roots_declared:
            self._live().notify("notifications/roots/list_changed")

    def subscribe(self, uri: str, callback: Callable[[str], Any]) -> Subscription:
        """Call ``callback(uri)`` whenever the resource changes; returns a handle to close.

        Returns once the server acknowledged. Raises
        :class:`~mcpsync.errors.CapabilityNotSupported` when the server does not offer
        resource subscriptions (or did not acknowledge this URI).
        """
        return self._subs.subscribe(uri, callback)

    def on_list_changed(self, kind: str, callback: Callable[[str], Any]) -> Subscription:
        """Call ``callback(kind)`` when the ``tools``, ``prompts`` or ``resources`` list changes.

        The cached list is dropped before the callback runs, so calling ``list_*`` inside it
        fetches the new one.
        """
        return self._subs.on_list_changed(kind, callback)

    def stderr_tail(self) -> str:
        """The server's recent stderr (up to ``stderr_bytes``, newest kept)."""
        transport = self._transport
        return transport.stderr_tail() if transport is not None else ""

    # -- properties ------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The display name used in errors and reprs: the name you gave (``name=``, or the
        config's ``name``/``id``); else, once connected, the name the server gives itself
        (``serverInfo.name``, without control characters, at most 64 characters); else the
        program's base name. Thread and logger names keep the name known at start."""
        return self._name

    @property
    def era(self) -> str:
        """``"legacy"`` (an ``initialize`` handshake) or ``"modern"`` (2026-07-28)."""
        return self._era

    @property
    def protocol_version(self) -> str:
        return self._protocol_version

    @property
    def capabilities(self) -> dict[str, Any]:
        """The server's capabilities (a copy)."""
        return dict(self._capabilities)

    @property
    def instructions(self) -> str | None:
        return self._instructions

    @property
    def server_info(self) -> ServerInfo:
        return self._server_info

    @property
    def handshake_result(self) -> dict[str, Any]:
        """The whole ``initialize`` (legacy) or ``server/discover`` (modern) result, as the
        server sent it (a copy): for fields mcpsync does not model."""
        return copy.deepcopy(self._handshake_result)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def pid(self) -> int | None:
        """The server process id (changes after a modern restart)."""
        transport = self._transport
        return transport.pid if isinstance(transport, StdioTransport) else None

    # -- closing ---------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the server and every thread of this client. Idempotent and thread-safe.

        In a forked child it only drops references: the parent's server is not touched, and
        no lock is taken (a parent thread may have held one at the fork).
        """
        if os.getpid() != self._pid:
            # A forked child: never signal the parent's processes or write its pipes.
            self._closed = True
            _open_clients.discard(self)
            self._finalizer.detach()
            return
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
        _open_clients.discard(self)
        self._finalizer.detach()
        self._subs.close()
        self._session.close()
        with self._state_lock:
            workers = list(self._workers)
        me = threading.current_thread()
        deadline = time.monotonic() + 1.0
        for worker in workers:  # a worker stuck in a user callback must not stretch close()
            if worker is not me:
                worker.join(max(0.0, deadline - time.monotonic()))

    def __enter__(self) -> Client:
        if os.getpid() != self._pid:
            raise UsedAfterFork(f"client for server {self._name!r} was created in another "
                                "process; connect again in this one", server=self._name)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{self._era} {self._protocol_version}"
        return f"<mcpsync.Client {self._name!r} {state}>"


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


class _Resources:
    """What the finalizer of an unreachable client closes (it must not refer to the client):
    the subscriptions and the current session, which the client updates when it swaps it."""

    def __init__(self, subs: Subscriptions) -> None:
        self.subs = subs
        self.session: Session | None = None
        self.pid = os.getpid()

    def close(self) -> None:
        session = self.session
        if os.getpid() != self.pid:
            if session is not None:
                session.close()   # forked child: drops references only, takes no lock
            return
        self.subs.close()
        if session is not None:
            session.close("the client was garbage-collected without close()")


def _alive(ref: weakref.ref[Client]) -> Client:
    client = ref()
    if client is None:
        raise ClosedError("the client was garbage-collected")
    return client


def _nothing() -> None:
    return None


def _era_contradicted(exc: RemoteError, method: str, *, modern: bool) -> bool:
    """Whether an error says the era a request was sent in is wrong (docs/http.md): -32601 for
    ``tools/list`` on a modern session, a modern-only code on a legacy one."""
    if modern:
        return exc.code == _METHOD_NOT_FOUND and method == "tools/list"
    return exc.code in _MODERN_ONLY_CODES


def _raw_result(result: Any) -> dict[str, Any]:
    if type(result) is not dict:
        raise ProtocolError(f"the result is not an object: {result!r:.200}")
    return result


class _Round:
    """The per-round options of one call (each wire round gets its own timeout)."""

    __slots__ = ("progress", "reset", "timeout")

    def __init__(self, timeout: float | None, progress: ProgressCallback | None,
                 reset: bool | None) -> None:
        self.timeout = timeout
        self.progress = progress
        self.reset = reset

    def send(self, session: Session, method: str, params: dict[str, Any] | None) -> Any:
        """One blocking round; the session returns only after its progress callbacks ran."""
        return session.request(method, params, timeout=self.timeout, progress=self.progress,
                               reset_timeout_on_progress=self.reset)


class _Chain:
    """The state of one submitted call across its wire rounds."""

    def __init__(self, method: str, wire: dict[str, Any] | None, params: Any, opts: _Round,
                 finish: Callable[[Any], Any], *, retry_on_drop: bool = False,
                 rebuild: Callable[[], dict[str, Any] | None] | None = None) -> None:
        self.method = method
        self.wire = wire          # the params of the next round
        self.params = params      # the caller's, for error messages
        self.opts = opts
        self.finish = finish
        self.retry_on_drop = retry_on_drop
        self.rebuild = rebuild    # the first round's params anew, after an era re-detection
        self.version_retried = False
        self.rounds = 0
        self.first = True         # the round in flight is the call's first (re-detection)
        self.session: Session | None = None   # the session of the round in flight
        self.modern = False       # the era that round was sent in


def _completion_ref(ref: Any) -> dict[str, Any]:
    if isinstance(ref, Mapping):
        return dict(ref)
    if isinstance(ref, Prompt):
        return {"type": "ref/prompt", "name": ref.name}
    if isinstance(ref, ResourceTemplate):
        return {"type": "ref/resource", "uri": ref.uri_template}
    if isinstance(ref, Resource):
        return {"type": "ref/resource", "uri": ref.uri}
    if isinstance(ref, str):
        if "://" in ref:
            return {"type": "ref/resource", "uri": ref}
        return {"type": "ref/prompt", "name": ref}
    raise TypeError(f"ref must be a dict, a Prompt, a ResourceTemplate or a str, "
                    f"got {type(ref).__name__}")


def _completion_argument(argument: Any) -> dict[str, Any]:
    if isinstance(argument, Mapping):
        return dict(argument)
    if isinstance(argument, (tuple, list)) and len(argument) == 2:
        return {"name": argument[0], "value": argument[1]}
    raise TypeError("argument must be {'name': ..., 'value': ...} or a (name, value) pair")


_jsonschema: bool | None = None


def _jsonschema_available() -> bool:
    """Whether the optional ``jsonschema`` extra is installed (checked once, lazily)."""
    global _jsonschema
    if _jsonschema is None:
        import importlib.util

        _jsonschema = importlib.util.find_spec("jsonschema") is not None
    return _jsonschema
