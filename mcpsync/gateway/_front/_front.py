"""The gateway's HTTP front: MCP hosts over Streamable HTTP, upstreams behind.

The HTTP handling is the server side's :class:`~mcpsync.server.http.McpApp` (Host and Origin
checks, Accept and Content-Type, session ids, resumable event streams, keep-alives, session
expiry, ``DELETE``); what it calls a router is, here, a relay to a gateway core:

- each legacy host session (``initialize``, then ``Mcp-Session-Id``) gets a core of its own
  (:class:`~mcpsync.gateway._front._session.SessionRelay`): its own stdio processes and HTTP
  upstream sessions, stopped when the session ends;
- 2026-07-28 requests share one core (:class:`~mcpsync.gateway._front._shared.SharedRelay`)
  under ids of the front's own, so two hosts never get each other's answers.

``max_upstream_processes`` bounds the stdio upstream processes of all cores together: a
session whose ``initialize`` would pass it is refused, readably, and the host may retry when
another session ends. Who sent each request (the guard's budget key) is read from the
request being answered, which the front keeps in a context variable while McpApp runs.
"""

from __future__ import annotations

import contextvars
import functools
import importlib
import logging
import os
import secrets
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final

from mcpsync.config import ServerConfig
from mcpsync.gateway._front._caller import Caller, caller_of
from mcpsync.gateway._front._replicas import KEY_FILE_ENV, SessionSealer, read_key_file
from mcpsync.gateway._front._session import SessionRelay
from mcpsync.gateway._front._shared import SharedRelay
from mcpsync.gateway._front._store import SessionStore, state_dir_for
from mcpsync.jsonrpc import Message
from mcpsync.server._router import Send
from mcpsync.server.http._app import AppDispatcher, DispatcherFactory, McpApp, StartResponse
from mcpsync.server.http._auth import ProtectedApp, TokenVerifier

if TYPE_CHECKING:
    from mcpsync.gateway._gateway import Gateway

__all__ = ["DEFAULT_MAX_PROCESSES", "HttpFront", "env_config", "serve_front"]

#: The default bound on stdio upstream processes across every host session.
DEFAULT_MAX_PROCESSES: Final = 32

#: Tool schemas kept for header checks (past it, the table starts again).
_MAX_SCHEMAS: Final = 4096

_log = logging.getLogger("mcpsync.gateway")
_ENVIRON: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "mcpsync_gateway_http_environ", default=None)


class HttpFront:
    """A WSGI application serving the gateway over Streamable HTTP at ``path``.

    Built by :meth:`mcpsync.Gateway.wsgi_app`; call :meth:`close` when done, to end every
    host session and stop every upstream.
    """

    def __init__(self, configs: Sequence[ServerConfig], *, make_core: Callable[[], Gateway],
                 path: str = "/mcp", allowed_hosts: Iterable[str] | None = None,
                 max_upstream_processes: int = DEFAULT_MAX_PROCESSES,
                 max_sessions: int = 256, session_idle_timeout: float | None = 1800.0,
                 session_key_file: str | os.PathLike[str] | None = None,
                 token_verifier: TokenVerifier | None = None, resource: str | None = None,
                 authorization_servers: Sequence[str] = (), scopes: Sequence[str] = (),
                 on_close: Callable[[], None] | None = None) -> None:
        if max_upstream_processes < 1:
            raise ValueError("max_upstream_processes is a number of processes above 0, got "
                             f"{max_upstream_processes!r}")
        self.configs = list(configs)
        #: Makes one gateway core (a legacy session's, or the shared one) with every option
        #: of the configured gateway: its guard, bridge, secrets, inspector, on_frame.
        self.make_core = make_core
        self._on_close = on_close
        #: Stdio upstream processes one core starts (HTTP upstreams start none).
        self.processes_per_core = sum(1 for c in self.configs if not c.is_http)
        self._max = max_upstream_processes
        self._lock = threading.Lock()
        self._running = 0
        self._live: set[SessionRelay] = set()   # the legacy sessions' relays
        self._schemas: dict[str, Any] = {}    # tool name -> inputSchema, as listed
        key_file = session_key_file or os.environ.get(KEY_FILE_ENV) or None
        key = read_key_file(key_file) if key_file else None
        self._sealer = SessionSealer([key]) if key is not None else None
        #: What legacy sessions set after initialize, for the replicas (see ``_store``).
        self.store = (SessionStore(state_dir_for(os.fspath(key_file)), [key])
                      if key is not None and key_file else None)
        self.closing = False
        self.app = McpApp(self._session, name="gateway", path=path, tool_schema=self._schema,
                          session_ids=_SealedIds(self) if self._sealer is not None else None,
                          allowed_hosts=allowed_hosts, max_sessions=max_sessions,
                          session_idle_timeout=session_idle_timeout,
                          make_shared=self._shared_relay)
        # With a verifier, every request needs a bearer token for this endpoint (as for
        # Server.wsgi_app); its principal is then a 2026-07-28 host's budget key.
        self._outer: Callable[[dict[str, Any], StartResponse], Iterable[bytes]] = self.app
        if token_verifier is not None:
            self._outer = ProtectedApp(self.app, token_verifier, resource=resource,
                                       authorization_servers=authorization_servers,
                                       scopes=scopes, allowed_hosts=allowed_hosts,
                                       session_owner=self._sealed_owner
                                       if self._sealer is not None else None)

    def __repr__(self) -> str:
        return (f"<HttpFront {self.app.path!r} processes={self._running}/{self._max} "
                f"upstreams={[c.id for c in self.configs]}>")

    @property
    def path(self) -> str:
        return self.app.path

    @property
    def upstream_processes(self) -> int:
        """The stdio upstream processes reserved by the live cores now."""
        with self._lock:
            return self._running

    def __call__(self, environ: dict[str, Any],
                 start_response: StartResponse) -> Iterable[bytes]:
        token = _ENVIRON.set(environ)
        try:
            return self._outer(environ, start_response)
        finally:
            _ENVIRON.reset(token)

    def session_processes(self) -> list[list[int]]:
        """The stdio upstream process ids of each live legacy host session (one list per
        session that has started its upstreams): what an operator, or a test, looks at."""
        with self._lock:
            relays = list(self._live)
        out: list[list[int]] = []
        for relay in relays:
            core = relay.core
            if core is not None:
                out.append([u.pid for u in core.upstreams if u.pid is not None])
        return out

    def close(self) -> None:
        """End every host session (their upstreams stop) and the shared upstreams. The
        sessions' stored state stays: other replicas may carry them on."""
        self.closing = True
        self.app.close()
        if self._on_close is not None:
            self._on_close()

    # -- what the relays ask -----------------------------------------------------------

    def caller(self, *, legacy: bool) -> Caller:
        """Who sent the request being answered on this thread."""
        environ = _ENVIRON.get()
        return caller_of(environ or {}, legacy=legacy)

    def reserve(self, processes: int) -> str | None:
        """Room for a core's ``processes``; a readable refusal when the bound is reached."""
        with self._lock:
            if self._running + processes > self._max:
                return (f"the gateway runs {self._running} upstream processes for its host "
                        f"sessions and a new session needs {processes} more, past its bound "
                        f"of {self._max} (max_upstream_processes); end an idle session "
                        "(DELETE) or retry later")
            self._running += processes
            return None

    def release(self, processes: int) -> None:
        with self._lock:
            self._running = max(0, self._running - processes)

    def note_tools(self, result: Any) -> None:
        """A ``tools/list`` result passed to a host: its input schemas, by name, so that
        a 2026-07-28 call's ``Mcp-Param-*`` headers are checked against them as the server
        side checks its own tools' (a tool never listed here is not checked)."""
        tools = result.get("tools") if isinstance(result, dict) else None
        if not isinstance(tools, list):
            return
        found = {t["name"]: t.get("inputSchema") for t in tools
                 if isinstance(t, dict) and isinstance(t.get("name"), str)}
        with self._lock:
            if len(self._schemas) + len(found) > _MAX_SCHEMAS:
                self._schemas.clear()
            self._schemas.update(found)

    def _schema(self, name: str) -> Any:
        with self._lock:
            return self._schemas.get(name)

    def forget(self, relay: SessionRelay) -> None:
        """A legacy session ended."""
        with self._lock:
            self._live.discard(relay)

    def _sealed_owner(self, sid: str) -> tuple[str, str | None] | None:
        """Who opened a legacy session another process sealed (``None``: not ours, or
        opened without a token), so it is usable on this process by that principal only."""
        state = self._sealer.open(sid) if self._sealer is not None else None
        who = state.get("who") if state is not None else None
        if not (isinstance(who, list) and len(who) == 2 and isinstance(who[0], str)
                and (who[1] is None or isinstance(who[1], str))):
            return None
        return who[0], who[1]

    def _session(self, send: Send, send_batch: Callable[[list[Message]], None], *,
                 resumed: dict[str, Any] | None = None, sid: str | None = None
                 ) -> AppDispatcher:
        relay = SessionRelay(self, send, send_batch, resumed=resumed, sid=sid)
        with self._lock:
            self._live.add(relay)
        return relay

    def _shared_relay(self, send: Send, send_batch: Callable[[list[Message]], None]
                      ) -> AppDispatcher:
        return SharedRelay(self, send, send_batch)


class _SealedIds:
    """Session ids that carry the session's state sealed (see ``_replicas``), so another
    gateway process holding the same key can carry the session on."""

    def __init__(self, front: HttpFront) -> None:
        self._front = front

    def new_id(self, dispatcher: AppDispatcher) -> str:
        sealer = self._front._sealer
        sealed = None
        if sealer is not None and isinstance(dispatcher, SessionRelay):
            sealed = sealer.seal(dispatcher.sealable_state())
            dispatcher.sid = sealed
        return sealed or secrets.token_urlsafe(24)

    def resume(self, sid: str) -> DispatcherFactory | None:
        sealer = self._front._sealer
        state = sealer.open(sid) if sealer is not None else None
        if state is None:
            return None
        _log.info("carrying on a host session opened by another gateway process")
        return functools.partial(self._front._session, resumed=state, sid=sid)


def serve_front(front: HttpFront, host: str, port: int, *,
                stop: threading.Event | None = None,
                ready: Callable[[str], None] | None = None, **options: Any) -> None:
    """Serve ``front`` on the built-in server until Ctrl-C or ``stop`` is set; then close
    the server and the front."""
    importlib.import_module("mcpsync.server.http")
    from mcpsync.server.http import WsgiServer

    server = WsgiServer(front, host, port, name=options.pop("name", "gateway"), **options)
    try:
        server.start()
        url = server.url + front.path
        if ready is not None:
            ready(url)
        else:
            print(f"mcpsync gateway: serving MCP at {url}", file=sys.stderr, flush=True)
        waiter = stop if stop is not None else threading.Event()
        try:
            while not waiter.wait(0.2):
                pass
        except KeyboardInterrupt:
            pass
    finally:
        front.close()    # its streams end first, so the server's drain is short
        server.close()


def env_config() -> str:
    """The config path gunicorn's entry point reads: ``MCPSYNC_GATEWAY_CONFIG``."""
    path = os.environ.get("MCPSYNC_GATEWAY_CONFIG", "")
    if not path:
        raise RuntimeError("the gateway's WSGI entry point reads its config file from the "
                           "MCPSYNC_GATEWAY_CONFIG environment variable, which is not set; "
                           "run: MCPSYNC_GATEWAY_CONFIG=gateway.json gunicorn -k gthread "
                           "'mcpsync.gateway:wsgi()'")
    return path
