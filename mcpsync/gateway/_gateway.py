"""``mcpsync.Gateway``: one MCP host in front, configured servers behind, frames passed as-is.

The host (Claude Desktop, an IDE, any MCP client) starts the gateway as its stdio server. The
gateway reads the host's lines, parses each into a tolerant :class:`~mcpsync._envelope.Envelope`
(kind, id, method; everything else kept as raw text) and hands the frame's own bytes to the
upstream it is for; upstream lines come back the same way. So with one upstream the gateway is
a pass-through: the host negotiates with the upstream itself (the gateway offers whatever
revision the upstream answers), and numbers, escapes, key order and members of a revision the
gateway does not know reach the other side byte for byte.

What the gateway itself writes to the host is only what it must: a JSON-RPC error for a call
it could not deliver (an upstream that died with the call in flight, could not be started, or
is not keeping up), and a parse error for a line that is not JSON. Nothing but MCP frames goes
to stdout: logs go to the ``mcpsync.gateway`` logger (stderr in the command), and while
:meth:`Gateway.serve_stdio` runs on the real stdout, file descriptor 1 points at stderr, so a
stray ``print`` cannot corrupt the stream.

Two seams are left open on purpose. :attr:`Gateway.on_frame` is called for every frame that
crosses (direction, upstream id, envelope, latency for answers): the traffic inspector hangs
there. :meth:`Gateway._route_request` / :meth:`Gateway._route_answer` pick the upstream of a
frame: with several upstreams, aggregation (prefixed names, URI rewriting, id remapping)
replaces them.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import select
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, BinaryIO, Final, cast

from mcpsync._codes import INTERNAL_ERROR
from mcpsync._envelope import (
    Envelope,
    EnvelopeError,
    IdKey,
    parse_envelope,
)
from mcpsync._threads import join_all
from mcpsync.config import ServerConfig
from mcpsync.config_files import load_config
from mcpsync.errors import ConfigError, MCPError
from mcpsync.gateway._bridge import upstream_factory
from mcpsync.gateway._conns import PIPE_ATOMIC, Conn, StdioConn
from mcpsync.gateway._frame_keys import checks
from mcpsync.gateway._gather import DEFAULT_MERGE_TIMEOUT, check_merge_timeout
from mcpsync.gateway._guard._core import PROCESS, Caller
from mcpsync.gateway._guard._hooks import GuardHooks
from mcpsync.gateway._hostread import HostReader
from mcpsync.gateway._inspector import (
    GATEWAY_TO_HOST,
    GATEWAY_TO_UPSTREAM,
    HOST_TO_GATEWAY,
    UPSTREAM_TO_GATEWAY,
    Inspector,
)
from mcpsync.gateway._multi import Aggregator
from mcpsync.gateway._rawstdio import RawLines, RawStdioTransport
from mcpsync.gateway._redact import redact_for_log
from mcpsync.gateway._secretdir import check_secrets
from mcpsync.gateway._upstream import MAX_INFLIGHT, Upstream, refuse_self_launch
from mcpsync.jsonrpc import MAX_FRAME_BYTES, StreamError
from mcpsync.policy import Policy
from mcpsync.secrets import SecretResolver

if TYPE_CHECKING:
    from mcpsync.gateway._front import HttpFront

__all__ = ["FrameObserver", "Gateway"]

#: ``on_frame(direction, upstream_id, envelope, latency_seconds_or_None)``; ``direction`` is
#: ``"to_upstream"`` or ``"to_host"``.
FrameObserver = Callable[[str, str, Envelope, "float | None"], None]

_log = logging.getLogger("mcpsync.gateway")
_CLOSE_BUDGET: Final = 6.0
_FRONT_OPTIONS: Final = frozenset({"allowed_hosts", "max_upstream_processes", "max_sessions",
                                   "session_idle_timeout", "session_key_file",
                                   "token_verifier", "resource", "authorization_servers",
                                   "scopes"})
_READ_SIZE: Final = 256 * 1024
_TO_UPSTREAM_LEGS: Final = (HOST_TO_GATEWAY, GATEWAY_TO_UPSTREAM)
_TO_HOST_LEGS: Final = (UPSTREAM_TO_GATEWAY, GATEWAY_TO_HOST)


def _load(config: str | os.PathLike[str] | Mapping[str, Any] | Sequence[ServerConfig]
          ) -> tuple[list[ServerConfig], str]:
    if isinstance(config, (str, os.PathLike)):
        return load_config(config), os.fspath(config)
    if isinstance(config, Mapping):
        return load_config(config), "the gateway config"
    return list(config), "the gateway config"


class Gateway:
    """An MCP gateway over the servers of ``config`` (a config file path, a parsed
    ``mcpServers``/``servers`` dict, or a list of :class:`~mcpsync.ServerConfig`).

    Disabled entries are skipped; an entry that would launch a gateway itself is refused
    (``ConfigError``). One upstream is a pass-through; several are served as one aggregated
    server (see ``_multi``). ``on_frame`` observes every frame;
    ``inspector`` (an ``Inspector``) logs each one, redacted, as JSON lines, and is closed
    with the gateway.
    ``policy`` (a :class:`~mcpsync.Policy`) guards the tool calls: denied tools are hidden
    from lists and refused (-32010), spent budgets refused (-32012), calls that need approval
    held until ``approver`` (default: the policy's ``approve``) decides, at most
    ``hold_seconds`` (-32011 otherwise); see ``docs/gateway-guard.md``.
    ``secret_resolver`` resolves an entry's ``secret_ref`` for each spawn of
    a stdio upstream, as the Manager's does (a fresh 0600 file filling ``{{secret_file}}``).
    ``bridge=True`` lets a host of one protocol era use servers of the
    other (see ``_bridge``); without it frames pass as they are.
    ``merge_timeout`` (seconds, default 5): with several upstreams, how long a merged
    request (``initialize``, ``*/list``, ...) waits for each (``server/discover`` at most
    3); the host is then answered from those that did, and a late answer is dropped.
    Use :meth:`serve_stdio` to run it; :meth:`close` (or ``with``) stops the upstreams.
    """

    def __init__(self, config: str | os.PathLike[str] | Mapping[str, Any] | Sequence[ServerConfig],
                 *, on_frame: FrameObserver | None = None, inspector: Inspector | None = None,
                 max_frame_bytes: int = MAX_FRAME_BYTES, policy: Policy | None = None,
                 approver: object = None, hold_seconds: float = 25.0,
                 secret_resolver: SecretResolver | None = None, bridge: bool = False,
                 merge_timeout: float = DEFAULT_MERGE_TIMEOUT) -> None:
        if policy is not None and not isinstance(policy, Policy):
            raise TypeError(f"policy must be a Policy, got {type(policy).__name__}")
        self._merge_timeout = check_merge_timeout(merge_timeout)
        configs, source = _load(config)
        configs = [c for c in configs if not c.disabled]
        make = upstream_factory(bridge, configs, source)   # Upstream, or the era-bridging one
        if not configs:
            raise ConfigError(f"{source}: no enabled server to put behind the gateway "
                              "(add an entry under mcpServers)")
        for each in configs:
            refuse_self_launch(each, source)
            check_secrets(each, secret_resolver, source)
        self.on_frame = on_frame
        self.inspector = inspector
        self._owns_inspector = True   # a core made by _new_core writes to its maker's
        self._configs = configs   # what each host session of the HTTP front starts anew
        # What _new_core gives each core of the HTTP front as it is; the guard and the
        # inspector (one for the whole gateway) and on_frame (read when the core is made)
        # are handed over there. A new __init__ option goes here or there (a test checks).
        self._core_options: dict[str, Any] = {"max_frame_bytes": max_frame_bytes,
                                              "merge_timeout": merge_timeout,
                                              "secret_resolver": secret_resolver,
                                              "bridge": bridge}
        self._max_frame = max_frame_bytes
        self._upstreams = [make(c, on_line=self._from_upstream, on_down=self._upstream_down,
                                    on_refused=self._refuse, on_failed=self._call_failed,
                                    max_frame_bytes=max_frame_bytes,
                                    secret_resolver=secret_resolver) for c in configs]
        self._by_id = {u.id: u for u in self._upstreams}
        if len(self._by_id) != len(self._upstreams):
            raise ConfigError(f"{source}: two servers share one id; give each its own")
        # Several upstreams: one aggregated server (prefixed names, remapped ids).
        self._agg = Aggregator(self) if len(self._upstreams) > 1 else None
        self._guard = None if policy is None else GuardHooks.make(
            self, policy, approver=approver, hold_seconds=hold_seconds)
        self._s2c: dict[IdKey, Upstream] = {}   # server-to-client request id -> its upstream
        self._s2c_lock = threading.Lock()
        self._out_fd = -1
        self._out_lock = threading.Lock()
        # The host seam: where frames for the host go (stdout here, an HTTP session's
        # streams on the HTTP front) and who the host is for the guard's budgets.
        self._sink: Callable[[bytes], None] = self._write_stdout
        self._caller: Caller = PROCESS
        self._log_session: str | None = None   # the traffic log's name of a legacy session
        self._wake_r, self._wake_w = os.pipe()
        # The pass-through's fast path (serve_stdio with one plain upstream, no guard): the
        # usual frames go from the read to the write without an Envelope or a hop through
        # the routing seams; everything else takes the full path. See _host_fast.
        self._fast = False
        self._closed = False
        self._started = False
        self._close_lock = threading.Lock()

    # ---------------------------------------------------------------- public

    @property
    def caller(self) -> Caller:
        """Whom the guard counts a host frame against when the front does not say (the
        process on stdio; a legacy HTTP session's core: that session)."""
        return self._caller

    @caller.setter
    def caller(self, who: Caller) -> None:
        if who != self._caller:
            self._caller, self._log_session = who, who.session_tag

    @property
    def upstreams(self) -> list[Upstream]:
        """The upstreams, in config order."""
        return list(self._upstreams)

    def serve_stdio(self, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> None:
        """Serve one host over ``stdin``/``stdout`` (default: this process's) until the host
        closes its end or :meth:`close` is called; then stop the upstreams."""
        if self._started:
            raise RuntimeError("a Gateway serves one host once; make a new one")
        self._started = True
        in_fd = (stdin if stdin is not None else sys.stdin.buffer).fileno()
        saved_stdout = -1
        if stdout is None:
            sys.stdout.flush()
            self._out_fd = os.dup(1)
            saved_stdout = os.dup(1)
            os.dup2(2, 1)   # only the gateway writes to the host's stdout from now on
        else:
            self._out_fd = os.dup(stdout.fileno())
        self._fast = (self._agg is None and self._guard is None
                      and type(self._upstreams[0]) is Upstream)
        if self._fast:
            self._upstreams[0].on_lines = self._from_upstream_lines
            self._upstreams[0].fast_reader = self._upstream_loop
        try:
            self._start_upstreams()
            self._read_host(in_fd)
        finally:
            self.close()
            if saved_stdout >= 0:
                with contextlib.suppress(OSError):
                    sys.stdout.flush()
                os.dup2(saved_stdout, 1)
                os.close(saved_stdout)

    def serve_host(self, sink: Callable[[bytes], None]) -> None:
        """Serve a host that is not on stdio (the HTTP front): every frame for the host goes
        to ``sink(frame)`` (no newline, from the gateway's threads), and the front hands the
        host's frames in with :meth:`feed`. Returns at once; :meth:`close` ends it."""
        if self._started:
            raise RuntimeError("a Gateway serves one host once; make a new one")
        self._started = True
        self._sink = sink
        self._start_upstreams()

    def feed(self, frame: bytes, caller: Caller | None = None) -> None:
        """One frame from the host (one JSON-RPC message, no newline); ``caller`` is whom it
        is from when the host is not one for the whole gateway (a 2026-07-28 HTTP request)."""
        self._from_host(frame, caller)

    def _start_upstreams(self) -> None:
        for upstream in self._upstreams:
            upstream.start()

    def wsgi_app(self, path: str = "/mcp", **options: Any) -> HttpFront:
        """The gateway over Streamable HTTP, as a WSGI application (for gunicorn, or
        :meth:`serve_http`). Each legacy host session starts its own upstreams; 2026-07-28
        hosts share one set. ``options``: ``allowed_hosts``, ``max_upstream_processes``,
        ``max_sessions``, ``session_idle_timeout``, ``session_key_file`` (replicas),
        ``token_verifier`` with ``resource``, ``authorization_servers`` and ``scopes``
        (OAuth, as for ``Server.wsgi_app``); see ``docs/gateway-http.md``. This
        gateway's own upstreams are not used: every core the front starts is made by
        :meth:`_new_core`, with this gateway's guard, bridge, secrets, inspector and
        ``on_frame``. Call the app's ``close()`` when done (``on_close``, a callable, runs
        after it: the gunicorn entry point closes its gateway so)."""
        importlib.import_module("mcpsync.gateway._front")
        from mcpsync.gateway._front import HttpFront

        return HttpFront(self._configs, path=path, make_core=self._new_core, **options)

    def _new_core(self) -> Gateway:
        """A gateway core for one legacy host session or for the 2026-07-28 hosts of the HTTP
        front: this gateway's configs and options, its one guard (one budget ledger and one
        approval desk for every session), its inspector and its ``on_frame``. The front
        makes every core here, so a core has whatever the user configured."""
        core = Gateway(self._configs, on_frame=self.on_frame, **self._core_options)
        core.inspector, core._owns_inspector = self.inspector, False
        if self._guard is not None:
            core._guard = self._guard.for_core(core)
        return core

    def serve_http(self, host: str = "127.0.0.1", port: int = 8000, *, path: str = "/mcp",
                   stop: threading.Event | None = None,
                   ready: Callable[[str], None] | None = None, **options: Any) -> None:
        """Serve :meth:`wsgi_app` on the built-in HTTP server until Ctrl-C or ``stop``;
        ``ready(url)`` is called once hosts can connect."""
        importlib.import_module("mcpsync.gateway._front")
        from mcpsync.gateway._front import serve_front

        front_options = {k: options.pop(k) for k in list(options) if k in _FRONT_OPTIONS}
        serve_front(self.wsgi_app(path, **front_options), host, port, stop=stop, ready=ready,
                    **options)

    def close(self) -> None:
        """Stop serving: close every upstream (the stdio shutdown sequence, bounded) and
        join the gateway's threads. Idempotent; safe from any thread."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        if self._guard is not None:
            self._guard.close()   # held calls are answered -32011 while the host listens
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"\0")
        deadline = time.monotonic() + _CLOSE_BUDGET
        stuck: list[threading.Thread] = []
        for upstream in self._upstreams:
            stuck += upstream.close(deadline)
        if self._agg is not None:
            stuck += self._agg.close(deadline)   # the merge time limits' thread
        stuck = join_all(stuck, deadline)
        if stuck:
            _log.warning("gateway threads still running after close: %s",
                         ", ".join(t.name for t in stuck))
        if self.inspector is not None and self._owns_inspector:
            self.inspector.close()
        with self._out_lock:
            for fd in (self._out_fd, self._wake_r, self._wake_w):
                if fd >= 0:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            self._out_fd = self._wake_r = self._wake_w = -1

    def __enter__(self) -> Gateway:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("serving" if self._started else "new")
        return f"<Gateway upstreams={[u.id for u in self._upstreams]} {state}>"

    # ---------------------------------------------------------------- routing seams

    def _route_request(self, envelope: Envelope) -> Upstream:
        """The upstream a host request or notification goes to (aggregation replaces this)."""
        return self._upstreams[0]

    def _route_answer(self, envelope: Envelope) -> Upstream:
        """The upstream whose server-to-client request the host is answering."""
        with self._s2c_lock:
            key = envelope.id_key
            upstream = self._s2c.pop(key, None) if key is not None else None
        return upstream if upstream is not None else self._upstreams[0]

    def _record(self, direction: str, upstream: Upstream, envelope: Envelope,
                latency: float | None, *, made: bool = False) -> None:
        """Every frame that crosses: to the inspector (both legs it travels; only the last
        for a frame the gateway made itself) and to ``on_frame``."""
        inspector = self.inspector
        if inspector is not None and inspector.enabled:
            legs = ((GATEWAY_TO_HOST,) if made else (UPSTREAM_TO_GATEWAY, GATEWAY_TO_HOST)) \
                if direction == "to_host" else (HOST_TO_GATEWAY, GATEWAY_TO_UPSTREAM)
            inspector.record_frame(legs, envelope, upstream.id, self._log_session)
        if self.on_frame is not None:
            self._observe(direction, upstream.id, envelope, latency)

    def _observe(self, direction: str, uid: str, envelope: Envelope,
                 latency: float | None) -> None:
        """Hand a frame to ``on_frame``, which must never break the traffic."""
        observer = self.on_frame
        if observer is not None:
            try:
                observer(direction, uid, envelope, latency)
            except Exception:
                _log.warning("the gateway's frame observer raised", exc_info=True)

    def _record_legs(self, direction: str, upstream: Upstream | None,
                     received: Envelope | None, sent: Envelope | None) -> None:
        """A frame the gateway rewrote on its way (with several upstreams: a call's id, the
        host's on the host's legs, the upstream's on the upstream's): each leg is recorded
        with the frame as that leg carried it, so its ``id`` is that leg's and an answer
        pairs with its request. ``received`` (the first leg) or ``sent`` (the second) may be
        ``None``: that leg is not recorded here (the host's request sent to several
        upstreams is recorded once; a merged answer was received from no one). ``on_frame``
        sees the frame sent, as for any frame."""
        inspector = self.inspector
        uid = None if upstream is None else upstream.id
        if inspector is not None and inspector.enabled:
            first, second = _TO_HOST_LEGS if direction == "to_host" else _TO_UPSTREAM_LEGS
            if received is not None:
                inspector.record_frame((first,), received, uid, self._log_session)
            if sent is not None:
                inspector.record_frame((second,), sent, uid, self._log_session)
        if sent is not None and uid is not None:
            self._observe(direction, uid, sent, None)

    # ---------------------------------------------------------------- the host side

    def _read_host(self, fd: int) -> None:
        lines = RawLines(max_frame_bytes=self._max_frame)
        if self._fast:
            self._host_loop(fd, lines)
            return
        reader = HostReader(fd, self._wake_r, _READ_SIZE)
        while not self._closed:
            try:
                data = reader.read()
            except OSError as exc:
                _log.warning("reading the host's input failed: %s", exc)
                return
            if data is None or not self._host_read(lines, data):
                return

    def _host_read(self, lines: RawLines, data: bytes) -> bool:
        """One read of the host's input by the full path (the fast path's several lines
        first, when they qualify); ``False``: the input ended or broke, stop serving."""
        # Whole lines, none held from the read before: the read can go on as it is.
        batch = lines.whole_lines(data) if self._fast and self.on_frame is None else None
        if batch is not None:
            if self._host_fast(batch, data):
                return True
        else:
            try:
                batch = lines.feed(data) if data else lines.finish()
            except StreamError as exc:
                _log.error("the host's input broke: %s", exc)
                return False
        for line in batch:
            self._from_host(line)
        if not data:
            _log.info("the host closed its input; the gateway stops")
            return False
        return True

    def _host_loop(self, fd: int, lines: RawLines) -> None:
        """The host's reader in the pass-through (one plain upstream, no guard, no bridge,
        no aggregation): one tight loop. Per read: ``poll`` the input and the close
        wake-up, ``readv`` into one buffer allocated once; when the read is whole lines
        (nothing held from before, at most ``PIPE_BUF`` in all), each a request with a
        number or string id other than ``initialize``, and ``on_frame`` is unset, the calls
        are entered in flight (dict stores under the upstream's lock, after the checks of
        ``Upstream.pass_requests``) and the read goes to the upstream's stdin in one
        ``os.write``; one line needs no list. Any other read (a notification, an answer, a
        line split over reads, one that is not JSON, EOF, among others) takes
        :meth:`_host_read`, the full path, in its turn, so the order of frames is kept. Each
        line's check and key come from :func:`~mcpsync.gateway._frame_keys.checks` (msgspec
        where it is installed, else the standard library's C scanner): one JSON object that
        fills the line.

        Everything is bound once outside the loop. Read here without changing those
        classes: the upstream's ``_state_lock``, ``_inflight``, ``_queue``, ``_busy``,
        ``_stopping`` and ``_conn``; the stdio transport's ``_write_lock``, ``_stdin_fd``,
        ``_rx_done`` (also set once closed), ``_closing`` and ``_try_write_lock`` (the checks of
        ``RawStdioTransport.write_now``); the line splitter's ``_buf`` (a partial line held)."""
        wake = self._wake_r
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        poller.register(wake, select.POLLIN)
        poll = poller.poll
        view = memoryview(bytearray(_READ_SIZE))
        bufs = [view]
        readv = os.readv
        write = os.write
        call_key = checks()[0]
        monotonic = time.monotonic
        upstream = self._upstreams[0]
        state_lock = upstream._state_lock
        lock, unlock = state_lock.acquire, state_lock.release
        inflight = upstream._inflight
        held = lines._buf
        limit = min(PIPE_ATOMIC, self._max_frame)
        seen: Conn | None = None   # the connection the write's bindings are for
        t: RawStdioTransport | None = None
        wunlock = unlock   # rebound to the transport's write lock below
        no_entries: list[tuple[IdKey, bytes]] = []   # never filled
        while not self._closed:
            ready = poll()
            if (len(ready) != 1 or ready[0][0] != fd) and any(r == wake for r, _ in ready):
                return   # closing
            try:
                n = readv(fd, bufs)
            except OSError as exc:
                _log.warning("reading the host's input failed: %s", exc)
                return
            data = view[:n].tobytes()
            if 0 < n <= limit and view[n - 1] == 10 and not held and self.on_frame is None:
                one = many = False
                entries = no_entries   # several lines: each call (a new list then)
                if data.find(b"\n") == n - 1:   # one line
                    key = call_key(data)
                    if key is not None:
                        one = True
                        one_key: IdKey = key
                        line = data[:-1]
                else:   # several lines
                    entries = []
                    calls = data.split(b"\n")
                    calls.pop()
                    for line in calls:
                        key = call_key(line)
                        if key is None:
                            break
                        entries.append((key, line))
                    else:
                        many = True
                if one or many:
                    lock()
                    try:
                        conn = upstream._conn
                        entered = not (upstream._queue or upstream._busy or conn is None
                                       or upstream._stopping
                                       or len(inflight) + (len(entries) or 1) > MAX_INFLIGHT)
                        if entered:
                            now = monotonic()
                            if one:
                                inflight[one_key] = (now, line)
                            else:
                                for key, line in entries:
                                    inflight[key] = (now, line)
                    finally:
                        unlock()
                    if entered:
                        inspector = self.inspector
                        if inspector is not None and inspector.enabled:
                            for _, frame in entries if many else ((one_key, line),):
                                inspector.record_line(_TO_UPSTREAM_LEGS, frame, upstream.id,
                                                      self._log_session)
                        if conn is not seen:
                            seen = conn
                            t = conn.transport if type(conn) is StdioConn else None
                            if t is not None:
                                wunlock = t._write_lock.release
                        sent = got = False
                        if t is not None and not t._rx_done:
                            try:
                                # As write_now: the lock is taken Ctrl-C safe, from C.
                                for got in t._try_write_lock:  # noqa: B007 - `got` is the point
                                    break
                                out = t._stdin_fd
                                if got and out >= 0 and not t._closing:
                                    sent = write(out, data) == n   # atomic: <= PIPE_BUF
                            except OSError:   # full or broken: the writer thread's turn
                                pass
                            finally:
                                if got:
                                    wunlock()
                        if not sent:
                            upstream.queue_entered([c for _, c in entries] if many else [line])
                        continue
            if not self._host_read(lines, data):
                return

    def _host_fast(self, batch: list[bytes], data: bytes) -> bool:
        """The pass-through's usual case: every line of the read ``data`` (``batch``: its
        lines, see ``RawLines.whole_lines``) is a request with a number or string id, other than
        ``initialize``, that goes to the one upstream unchanged; then the calls are entered
        in flight and ``data`` goes out as it came, in one write. ``False`` (nothing done):
        the lines take the full path, one by one. With the inspector on, each frame still
        reaches it, as the bytes forwarded (``Inspector.record_line``: parsed on the log's
        side, not here)."""
        inspector = self.inspector
        record = inspector is not None and inspector.enabled
        upstream = self._upstreams[0]
        call_key = checks()[0]
        calls: list[tuple[IdKey, Envelope | bytes]] = []
        for line in batch:
            key = call_key(line)
            if key is None:
                return False
            calls.append((key, line))
        if record:
            assert inspector is not None
            for _, call in calls:
                assert isinstance(call, bytes)
                inspector.record_line(_TO_UPSTREAM_LEGS, call, upstream.id,
                                      self._log_session)
        if upstream.pass_requests(calls, data):
            return True
        if record:   # recorded already: the full path must not record them again
            for _, call in calls:
                assert isinstance(call, bytes)
                upstream.submit(parse_envelope(call))
            return True
        return False

    def _from_host(self, line: bytes, caller: Caller | None = None) -> None:
        # ``caller`` (None: ``self.caller``) is whom the guard counts this frame against.
        who = caller if caller is not None else self.caller
        try:
            envelope = parse_envelope(line)
        except EnvelopeError as exc:
            _log.warning("a line from the host is not a JSON-RPC message: %s",
                         redact_for_log(str(exc)))
            self._record_host_line(line)
            self._write_error("null", exc.code, f"the gateway could not read this line: {exc}",
                              None)
            return
        if self._agg is not None:
            self._agg.from_host(envelope, who)
            return
        if envelope.kind in ("response", "error"):
            upstream = self._route_answer(envelope)
        else:
            upstream = self._route_request(envelope)
            if self._guard is not None and self._guard.passthrough_request(envelope, upstream,
                                                                           who):
                return
        self._record("to_upstream", upstream, envelope, None)
        upstream.submit(envelope)

    def _write_host(self, frame: bytes) -> None:
        self._sink(frame)

    def _write_stdout(self, frame: bytes) -> None:
        data = frame + b"\n"
        with self._out_lock:
            fd = self._out_fd
            if fd < 0:
                return
            try:
                written = os.write(fd, data)
                if written < len(data):
                    view = memoryview(data)[written:]
                    while view:
                        view = view[os.write(fd, view):]
            except OSError as exc:   # the host went away; its input's EOF ends serving
                _log.info("writing to the host failed: %s", exc)

    def _write_error(self, raw_id: str, code: int, message: str,
                     upstream: Upstream | None) -> None:
        body: dict[str, Any] = {"code": code, "message": message}
        if upstream is not None:
            body["data"] = {"upstream": upstream.id}
        text = f'{{"jsonrpc":"2.0","id":{raw_id},"error":{json.dumps(body)}}}'
        if upstream is not None:
            self._record("to_host", upstream, parse_envelope(text), None, made=True)
        else:   # an answer of the gateway's own (an unroutable call, say): upstream null
            inspector = self.inspector
            if inspector is not None and inspector.enabled:
                self._record_legs("to_host", None, None, parse_envelope(text))
        self._write_host(text.encode())

    def _record_host_line(self, line: bytes) -> None:
        """A line from the host that is not a JSON-RPC message: its ``host->gateway``
        record (kind ``invalid``), since it reaches no upstream."""
        inspector = self.inspector
        if inspector is not None and inspector.enabled:
            inspector.record(HOST_TO_GATEWAY, line, session=self._log_session)

    # ---------------------------------------------------------------- the upstream side

    def _upstream_loop(self, upstream: Upstream, conn: StdioConn) -> str | None:
        """The upstream's reader in the pass-through, for one process generation: one tight
        loop over the stdio transport's stdout instead of its ``receive``. Per read, under
        the transport's read lock as ``receive`` takes it: ``poll`` what the transport
        polls (stdout, its wake-up pipe for close, the process's pidfd for an exit while a
        grandchild holds stdout), ``readv`` into the transport's buffer. A read that is one
        whole line (nothing held from before, within the frame limit) holding an answer
        with a number or string id is handled here (the check and key of
        :func:`~mcpsync.gateway._frame_keys.checks`): the call is taken out of the in-flight
        table and the read written to the host in one ``os.write``; so is a read of several
        lines that are all such answers. Several lines go to
        :meth:`_from_upstream_lines` (each answer the same way, anything else by the full
        path, in order). Any other poll result (the wake-up, the exit), ``_rx_done``
        (closing, EOF, a sticky error) or a read error is left to the transport's
        ``receive``; a read with a partial or over-long line, or EOF, to its decoder
        (``_got``: an over-long line breaks the stream with an error naming the upstream).
        Returns why the connection ended, as ``Conn.read`` does; ``None`` (nothing read)
        where the transport has no ``poll`` (a stdout pump thread): ``Conn.read`` then.

        The in-flight entry is popped without the upstream's lock: a ``dict.pop`` of a key
        of ``str``/``int`` runs no Python code, so under the GIL it is one atomic step
        against the other users of the table, which insert and pop under the lock or (the
        death of a process) take a snapshot with ``list()``. ``_replay_id`` is read without
        it as well: it is set before the replayed ``initialize`` is sent, so its answer
        cannot come before this loop sees it set (then the full path drops that answer).

        Read here without changing those classes: the transport's ``_pump``, ``_poller``,
        ``_stdout_fd``, ``_rx_buf``, ``_rx_lock``, ``_rx_done``,
        ``_decoder`` (``_buf``, ``_max``) and ``_got``; the upstream's ``_inflight`` and
        ``_replay_id``."""
        t = conn.transport
        if t._pump is not None or t._poller is None:
            return None
        poll = t._poller.poll
        fd = t._stdout_fd
        buf = t._rx_buf
        bufs = [buf]   # os.readv()'s list
        rx_lock = t._rx_lock
        lock, unlock = rx_lock.acquire, rx_lock.release
        decoder = t._decoder
        limit = decoder._max
        got = cast("Callable[[int], list[bytes] | None]", t._got)   # RawLines: bytes
        receive = t.receive_lines
        readv = os.readv
        write = os.write
        answer_key = checks()[1]
        pop = upstream._inflight.pop
        out_lock = self._out_lock
        out_lock_acquire, out_unlock = out_lock.acquire, out_lock.release
        several = self._from_upstream_lines
        try:
            while True:
                data: bytearray | None = None
                lines: list[bytes] | None = None
                lock()
                try:
                    if not t._rx_done:
                        ready = poll()
                        if len(ready) == 1 and ready[0][0] == fd:
                            try:
                                n = readv(fd, bufs)
                            except BlockingIOError:
                                n = -2
                            except OSError:
                                n = -1   # receive() reads again and reports it
                            if 0 < n <= limit and buf[n - 1] == 10 and not decoder._buf:
                                data = buf[:n]
                            elif n >= 0:
                                lines = got(n)   # EOF, a partial or over-long line
                            elif n == -2:
                                lines = []
                finally:
                    unlock()
                if data is None:
                    if lines is None:
                        lines = receive(None)
                        if lines is None:
                            return "it closed its output"
                    if lines:
                        several(upstream, lines)
                    continue
                passed = False
                if upstream._replay_id is not None or self.on_frame is not None:
                    pass   # a restart's replayed initialize may be answered: the full way
                elif data.find(b"\n") == n - 1:   # one line
                    key = answer_key(data)
                    if key is not None:
                        pop(key, None)
                        passed = True
                        inspector = self.inspector
                        if inspector is not None and inspector.enabled:
                            inspector.record_line(_TO_HOST_LEGS, bytes(data[:-1]),
                                                  upstream.id, self._log_session)
                else:   # several lines: all answers with a number or string id, or none
                    lines = bytes(data).split(b"\n")
                    lines.pop()
                    keys: list[IdKey] = []
                    for line in lines:
                        key = answer_key(line)
                        if key is None:
                            break
                        keys.append(key)
                    else:
                        for key in keys:
                            pop(key, None)
                        passed = True
                        inspector = self.inspector
                        if inspector is not None and inspector.enabled:
                            for line in lines:
                                inspector.record_line(_TO_HOST_LEGS, line, upstream.id,
                                                      self._log_session)
                if not passed:   # the full way, without blank lines (as RawLines skips them)
                    several(upstream, [
                        line for line in (lines if lines else bytes(data[:-1]).split(b"\n"))
                        if line and (line[0] == 0x7B or line.strip(b" \t\r"))])
                    continue
                out_lock_acquire()
                try:
                    out = self._out_fd
                    if out >= 0:
                        written = write(out, data)
                        while written < n:
                            written += write(out, data[written:])
                except OSError as exc:   # the host went away; its EOF ends serving
                    _log.info("writing to the host failed: %s", exc)
                finally:
                    out_unlock()
        except MCPError as exc:   # StreamError: an over-long line, a read that failed
            return str(exc)

    def _from_upstream_lines(self, upstream: Upstream, lines: list[bytes]) -> None:
        """One read of the upstream's stdout (the pass-through's fast path): the answers
        with a number or string id among its lines go on unchanged, as many as follow one
        another in one write to the host; any other line takes the full path, in order."""
        if len(lines) == 1 or not self._fast or self.on_frame is not None:
            for line in lines:
                self._from_upstream(upstream, line)
            return
        inspector = self.inspector
        record = inspector is not None and inspector.enabled
        pending: list[bytes] = []
        answer_key = checks()[1]
        for line in lines:
            key = answer_key(line)
            if key is not None:
                if upstream.answered(key) == -1.0:
                    continue   # the answer to a replayed initialize: the host had its own
                if record:
                    assert inspector is not None
                    inspector.record_line(_TO_HOST_LEGS, line, upstream.id, self._log_session)
                pending.append(line)
                continue
            if pending:
                self._write_stdout(b"\n".join(pending))
                pending = []
            self._from_upstream(upstream, line)
        if pending:
            self._write_stdout(b"\n".join(pending))

    def _from_upstream(self, upstream: Upstream, line: bytes) -> None:
        if self._fast and self.on_frame is None:
            # The pass-through's usual case: an answer with a number or string id, passed
            # on as it came (no Envelope unless the inspector records it).
            key = checks()[1](line)
            if key is not None:
                if upstream.answered(key) == -1.0:
                    return   # the answer to a replayed initialize: the host had its own
                inspector = self.inspector
                if inspector is not None and inspector.enabled:
                    inspector.record_line(_TO_HOST_LEGS, line, upstream.id, self._log_session)
                self._write_stdout(line)
                return
        try:
            envelope = parse_envelope(line)
        except EnvelopeError as exc:
            _log.warning("upstream %r wrote a line that is not a JSON-RPC message (dropped): "
                         "%s", upstream.id, redact_for_log(str(exc)))
            return
        latency = None
        key = envelope.id_key
        if envelope.kind in ("response", "error") and key is not None:
            sent = upstream.answered(key)
            if sent == -1.0:
                return   # the answer to a replayed initialize: the host had its own
            latency = None if sent is None else time.monotonic() - sent
        if self._agg is not None:
            self._agg.from_upstream(upstream, envelope)
            return
        if envelope.kind == "request" and key is not None:
            with self._s2c_lock:
                full = len(self._s2c) >= MAX_INFLIGHT and key not in self._s2c
                if not full:
                    self._s2c[key] = upstream
            if full:   # a host that answers nothing must not make the table grow forever
                body = json.dumps({"code": INTERNAL_ERROR, "message": (
                    f"the gateway already holds {MAX_INFLIGHT} requests of upstream "
                    f"{upstream.id!r} that the host has not answered")})
                upstream.submit(parse_envelope(
                    f'{{"jsonrpc":"2.0","id":{envelope.id},"error":{body}}}'))
                return
        if self._guard is not None:
            envelope = self._guard.answer_to_host(envelope)
        self._record("to_host", upstream, envelope, latency)
        self._write_host(envelope.to_bytes())

    def _upstream_down(self, upstream: Upstream, calls: list[Envelope], why: str) -> None:
        if self._agg is not None:
            self._agg.upstream_down(upstream, why)
            return
        with self._s2c_lock:
            for key in [k for k, u in self._s2c.items() if u is upstream]:
                del self._s2c[key]
        for call in calls:
            self._write_error(call.id or "null", INTERNAL_ERROR,
                              f"upstream {upstream.id!r} stopped while handling this request "
                              f"({why}); it will be restarted on the next call", upstream)

    def _call_failed(self, upstream: Upstream, call: Envelope, why: str) -> None:
        if self._agg is not None:
            self._agg.call_failed(upstream, call, f"upstream {upstream.id!r}: {why}")
            return
        self._write_error(call.id or "null", INTERNAL_ERROR, f"upstream {upstream.id!r}: {why}",
                          upstream)

    def _refuse(self, upstream: Upstream, envelope: Envelope, why: str) -> None:
        if envelope.id_key is not None:
            upstream.forget(envelope.id_key)
            if self._agg is not None:
                self._agg.call_failed(upstream, envelope, why)
                return
            self._write_error(envelope.id or "null", INTERNAL_ERROR, why, upstream)
