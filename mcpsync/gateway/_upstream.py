"""One upstream server of the gateway: its process, its outgoing queue, its in-flight calls.

Each upstream has two threads of its own, so that one that is slow, stuck or dead never holds
up another (nor the host's reader):

- ``mcpsync-gateway-writer-<id>`` takes frames from a bounded queue and writes them to the
  server, starting (or restarting) the server first when it is not running;
- ``mcpsync-gateway-reader-<id>`` (one per process) reads the server's stdout lines, raw, and
  hands each to the gateway.

The queue holds at most :data:`QUEUE_BYTES` of frames (and :data:`QUEUE_FRAMES` frames); the
in-flight table at most :data:`MAX_INFLIGHT` calls. A request that finds either full is
refused at once with a JSON-RPC error instead of waiting, so a flood costs bounded memory.

When the process ends (or its stream breaks), every call in flight to it is failed at once
with an error naming it; the next request restarts it, replaying the host's ``initialize``
exchange (legacy era) so the new process is in the state the host believes it is in.
"""

from __future__ import annotations

import collections
import functools
import json
import logging
import os
import re
import shlex
import threading
import time
from collections.abc import Callable
from typing import Final

from mcpsync._envelope import Envelope, IdKey, parse_envelope
from mcpsync._threads import join_all, new_thread
from mcpsync.config import ServerConfig
from mcpsync.errors import ConfigError, MCPError
from mcpsync.gateway._conns import PIPE_ATOMIC, Conn, StdioConn, open_conn
from mcpsync.gateway._redact import redact_for_log
from mcpsync.jsonrpc import MAX_FRAME_BYTES, ParseError, StreamError
from mcpsync.secrets import SecretResolver
from mcpsync.transport.base import safe_name

__all__ = ["MAX_INFLIGHT", "QUEUE_BYTES", "QUEUE_FRAMES", "Upstream", "refuse_self_launch"]

#: Bytes of frames waiting to be written to one upstream (one bigger frame is let through
#: when the queue is empty, so any frame the wire allows can be sent).
QUEUE_BYTES: Final = 8 * 1024 * 1024
#: Frames waiting to be written to one upstream.
QUEUE_FRAMES: Final = 1024
#: Calls in flight to one upstream.
MAX_INFLIGHT: Final = 4096
#: How long a restart waits for the replayed ``initialize`` to be answered.
REPLAY_TIMEOUT: Final = 30.0

_log = logging.getLogger("mcpsync.gateway")
_MODULES: Final = frozenset({"mcpsync", "mcpsync.cli", "mcpsync.__main__"})
_VERSIONED: Final = re.compile(r"[@=<>!~\[].*$")   # mcpsync@1.2, mcpsync==1.2, mcpsync[dev]


def _words(argv: list[str], depth: int = 0) -> list[str]:
    """The argv's words, lower-cased, without directories or ``.exe``; an argument holding
    whitespace (a shell's ``-c`` script, ``cmd /c`` line) is split into its own words too,
    so ``sh -c 'mcpsync gateway'`` is read as what it runs."""
    words: list[str] = []
    for arg in argv:
        arg = arg.replace("\\", "/")   # C:\\bin\\mcpsync.exe; and shlex's escapes
        if depth < 3 and any(c.isspace() for c in arg.strip()):
            try:
                inner = shlex.split(arg)
            except ValueError:   # unbalanced quotes: split on whitespace
                inner = arg.split()
            words += _words(inner, depth + 1)
            continue
        word = os.path.basename(arg).lower().removesuffix(".exe")
        words.append(word.strip(";&|()'\"`"))
    return words


def _launches(words: list[str], i: int) -> bool:
    word = _VERSIONED.sub("", words[i])
    if word == "mcpsync":
        return True
    if word == "-m":
        return i + 1 < len(words) and words[i + 1] in _MODULES
    return word.startswith("-m") and word[2:] in _MODULES   # python -mmcpsync


def refuse_self_launch(config: ServerConfig, source: str) -> None:
    """Raise ``ConfigError`` when ``config`` would start a gateway (possibly this one), which
    would spawn itself without end. The command is read through the wrappers that commonly
    hide it: ``uv run``, ``uvx mcpsync@1.2``, ``/usr/bin/env``, ``python -m mcpsync`` (or
    ``-mmcpsync``, ``mcpsync.__main__``) and a shell's ``-c`` script."""
    if config.command is None:
        return
    argv = [config.command, *config.args]
    words = _words(argv)
    for i in range(len(words)):
        if _launches(words, i) and "gateway" in words[i + 1:]:
            raise ConfigError(
                f"{source}: server {config.id or config.display_name!r} runs "
                f"'{' '.join(argv)}', which is an mcpsync gateway itself; a gateway cannot "
                "be one of its own upstreams (remove that entry from the gateway's config, "
                "or give the gateway a config without it)")


class Upstream:
    """One configured server as the gateway sees it. Thread-safe.

    ``on_frame(upstream, envelope_or_line)`` runs on the reader thread for each stdout line;
    ``on_down(upstream, calls, why)`` runs once per process end with the requests that were
    in flight; ``on_failed(upstream, call, why)`` fails one (an HTTP-level failure).
    """

    def __init__(self, config: ServerConfig, *,
                 on_line: Callable[[Upstream, bytes], None],
                 on_down: Callable[[Upstream, list[Envelope], str], None],
                 on_refused: Callable[[Upstream, Envelope, str], None],
                 on_failed: Callable[[Upstream, Envelope, str], None],
                 max_frame_bytes: int = MAX_FRAME_BYTES,
                 secret_resolver: SecretResolver | None = None) -> None:
        self.config = config
        self._secret_resolver = secret_resolver
        self.id = config.id or config.display_name
        self._safe = safe_name(self.id)
        self._on_line = on_line
        self._on_down = on_down
        self._on_refused = on_refused
        self._on_failed = on_failed
        self._max_frame = max_frame_bytes
        # The per-frame paths take the lock itself (a C call); ``with self._cond`` runs two
        # Python methods around the same lock, so only code that waits or notifies uses it.
        self._state_lock = threading.Lock()
        self._cond = threading.Condition(self._state_lock)
        self._queue: collections.deque[Envelope | bytes] = collections.deque()
        self._queued_bytes = 0
        self._busy = False
        # When each call was sent, and the call: an Envelope, or (from the pass-through's
        # fast path) the frame's bytes, parsed only if the call must be failed.
        self._inflight: dict[IdKey, tuple[float, Envelope | bytes]] = {}
        self._conn: Conn | None = None
        self._readers: list[threading.Thread] = []
        self._generation = 0
        self._stopping = False
        self._init_frame: Envelope | None = None     # the host's initialize, for a restart
        self._initialized_frame: Envelope | None = None
        self._replay_id: IdKey | None = None
        self._replayed = threading.Event()
        self._resuming: dict[str, str] | None = None   # carry on another process's session
        #: Set by the gateway before :meth:`start` to get each read's stdout lines at once
        #: (``on_lines(upstream, lines)``, on the reader thread) instead of ``on_line``.
        self.on_lines: Callable[[Upstream, list[bytes]], None] | None = None
        #: Set by the gateway before :meth:`start`: for a stdio connection, the reader thread
        #: runs ``fast_reader(upstream, conn)`` (it reads the connection itself until it
        #: ends and returns why, like ``Conn.read``; ``None``: it cannot, read as usual).
        self.fast_reader: Callable[[Upstream, StdioConn], str | None] | None = None
        self.last_error = ""
        self.restarts = 0
        self._writer = new_thread(f"mcpsync-gateway-writer-{self._safe}", self._write_loop)

    # ---------------------------------------------------------------- the gateway's side

    def resume(self, init: Envelope, initialized: Envelope | None,
               session: dict[str, str] | None) -> None:
        """Before :meth:`start`: carry on a host session another gateway process began. An
        HTTP upstream goes on with its ``session`` (``{"session": id, "version": v}``); a
        stdio one is started with the host's ``initialize`` replayed, as after a restart."""
        self._init_frame, self._initialized_frame = init, initialized
        self._resuming = session or {}

    def session(self) -> dict[str, str] | None:
        """What another gateway process needs to carry on this upstream's session."""
        conn = self._conn
        return conn.session() if conn is not None else None

    def start(self) -> None:
        """Start the writer thread and, eagerly, the server (a failure is kept for later)."""
        self._writer.start()
        with self._cond:
            self._queue.append(b"")   # the empty frame: "start the server now"
            self._cond.notify_all()

    def submit(self, envelope: Envelope) -> bool:
        """Queue a frame for the server; ``False`` (nothing queued, the refusal already sent
        for a request) when the queue or the in-flight table is full, or when closing."""
        frame = envelope.to_bytes()
        size = len(frame)
        with self._cond:
            if self._stopping:
                return False
            why = ""
            if self._queue and (len(self._queue) >= QUEUE_FRAMES
                                or self._queued_bytes + size > QUEUE_BYTES):
                why = (f"upstream {self.id!r} is not keeping up: {len(self._queue)} frames "
                       f"({self._queued_bytes} bytes) are already waiting for it")
            elif envelope.kind == "request" and len(self._inflight) >= MAX_INFLIGHT:
                why = (f"upstream {self.id!r} already has {MAX_INFLIGHT} calls in flight; "
                       "try again when some have finished")
            if not why:
                if envelope.kind == "request" and envelope.id_key is not None:
                    self._inflight[envelope.id_key] = (time.monotonic(), envelope)
                    if envelope.method == "initialize":
                        self._init_frame = envelope
                elif envelope.method == "notifications/initialized":
                    self._initialized_frame = envelope
                conn = self._conn
                # The fast path: nothing waits before this frame, so the submitting thread
                # writes it now (no hop to the writer thread), after releasing the lock: a
                # pipe write wakes the server, and the answer's reader must not wait for
                # this thread to come back from the write to take the lock. Frames of other
                # threads may go out meanwhile; the order of one thread's frames is kept,
                # since a frame that cannot go out now is queued before its next one.
                if self._queue or self._busy or conn is None:
                    self._enqueue(envelope, size)
                    return True
        if not why:
            assert conn is not None
            if not conn.try_send(envelope):   # the pipe is full (or gone): the writer's turn
                with self._cond:
                    if not self._stopping:
                        self._enqueue(envelope, size)
            return True
        if envelope.kind == "request":
            self._on_refused(self, envelope, why)
        else:
            _log.warning("dropped a %s notification for upstream %r: %s",
                         envelope.method, self.id, why)
        return False

    def pass_requests(self, calls: list[tuple[IdKey, Envelope | bytes]], data: bytes) -> bool:
        """The pass-through's fast path: ``data`` is one read of the host's, whole lines,
        each a request (``calls``: its id key and its frame, an Envelope or the line's
        bytes) that goes out unchanged and is neither ``initialize`` nor a notification.
        When nothing waits in the queue and the in-flight table has room, the calls are
        entered and ``data`` is written at once, in one ``os.write``; if the pipe cannot
        take it now the frames are queued for the writer thread, in order. ``False``:
        nothing done (closing, frames queued, the table near full: the caller takes each
        frame through :meth:`submit`, which refuses or queues it). A read larger than a
        pipe takes whole (``PIPE_BUF``) is left to :meth:`submit` too: frame by frame, each
        that fits is still written at once, where this would queue all of them."""
        if len(data) > PIPE_ATOMIC:
            return False
        with self._state_lock:
            conn = self._conn
            inflight = self._inflight
            if (self._queue or self._busy or conn is None or self._stopping
                    or len(inflight) + len(calls) > MAX_INFLIGHT):
                return False
            now = time.monotonic()
            for key, item in calls:
                inflight[key] = (now, item)
        if not conn.try_send_raw(data):   # the pipe is full (or gone): the writer's turn
            self.queue_entered([item for _, item in calls])
        return True

    def queue_entered(self, items: list[Envelope | bytes]) -> None:
        """Queue for the writer thread, in order, calls the fast path entered in flight but
        could not write at once (the pipe was full, or the connection gone)."""
        with self._cond:
            if not self._stopping:
                for item in items:
                    envelope = _as_envelope(item)
                    self._enqueue(envelope, len(envelope.to_bytes()))

    def _enqueue(self, envelope: Envelope, size: int) -> None:
        """For the writer thread; the caller holds the lock."""
        self._queue.append(envelope)
        self._queued_bytes += size
        self._cond.notify_all()

    def answered(self, key: IdKey) -> float | None:
        """The server answered call ``key``: forget it; returns when it was sent (or None when
        it was not in flight; -1.0 for the answer to a replayed initialize, to be dropped)."""
        with self._state_lock:
            if key == self._replay_id:
                self._replay_id = None
                self._replayed.set()
                return -1.0
            entry = self._inflight.pop(key, None)
        return None if entry is None else entry[0]

    def forget(self, key: IdKey) -> None:
        """The call ``key`` was answered some other way (refused): forget it."""
        with self._cond:
            self._inflight.pop(key, None)

    @property
    def running(self) -> bool:
        conn = self._conn
        return conn is not None and conn.running()

    @property
    def pid(self) -> int | None:
        """The server's process id (stdio), or None."""
        conn = self._conn
        return conn.pid if conn is not None else None

    def close(self, deadline: float) -> list[threading.Thread]:
        """Stop the writer, close the server; returns threads still alive at ``deadline``."""
        with self._cond:
            self._stopping = True
            self._queue.clear()
            self._queued_bytes = 0
            self._cond.notify_all()
            conn = self._conn
        self._replayed.set()
        if conn is not None:
            conn.close()
        return join_all([self._writer, *self._readers], deadline)

    # ---------------------------------------------------------------- the writer thread

    def _write_loop(self) -> None:
        while True:
            with self._cond:
                self._busy = False
                while not self._queue and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                item = self._queue.popleft()
                self._busy = True   # the host's thread must not write past this frame
                if isinstance(item, Envelope):
                    self._queued_bytes -= len(item.to_bytes())
            self._write_one(item)

    def _write_one(self, item: Envelope | bytes) -> None:
        """Deliver one queued frame (``b""``: just start the server), starting or
        restarting the server first when it is not running."""
        is_request = isinstance(item, Envelope) and item.kind == "request"
        if is_request and isinstance(item, Envelope) and self._answered(item):
            # Already answered while it waited here: its upstream died with it in flight
            # (the death fails every call entered, queued ones too) or it was refused.
            # Sending it now, to a restarted process, would give the host a second answer
            # for one id.
            return
        if not self.running:
            if isinstance(item, Envelope) and not is_request and self._conn is not None:
                return   # a notification or an answer for a process that is gone
            try:
                self._launch(replay=self._conn is not None or self._resuming is not None)
            except (MCPError, OSError) as exc:
                self.last_error = str(exc)
                _log.warning("upstream %r could not be started: %s", self.id, exc)
                if is_request:
                    assert isinstance(item, Envelope) and item.id_key is not None
                    with self._state_lock:
                        pending = self._inflight.pop(item.id_key, None) is not None
                    if pending:   # else the restarted process's death already failed it
                        self._on_refused(self, item, f"upstream {self.id!r} could not be "
                                         f"started: {exc}")
                if isinstance(exc, _ReplayUnanswered) and self._conn is not None:
                    # A process that did not take the handshake is not used: a late answer
                    # to the replay must not reach the host (nothing expects it now), and
                    # the next call starts another process. Closed after the refusal, so
                    # that its death does not fail this call a second time.
                    self._conn.close()
                return
        if not isinstance(item, Envelope):
            return
        if is_request and self._answered(item):
            # Once more after a restart: the old process's death was reported during
            # _launch (its reader is joined there), and may have failed this very call.
            return
        conn = self._conn
        assert conn is not None
        try:
            conn.send(item)
        except ParseError as exc:   # HTTP routes by a strict parse of the frame
            if is_request and item.id_key is not None:
                self.forget(item.id_key)
                self._on_refused(self, item, f"upstream {self.id!r} is reached over HTTP, "
                                 f"which needs a strict JSON-RPC frame: {exc}")
        except MCPError as exc:   # TransportClosed: the reader reports the death
            _log.info("write to upstream %r failed: %s", self.id, exc)

    def _answered(self, call: Envelope) -> bool:
        """The queued request ``call`` is no longer in flight: it was answered (failed by a
        death, or refused) while it waited for the writer thread."""
        with self._state_lock:
            return call.id_key not in self._inflight

    def _launch(self, *, replay: bool) -> None:
        """Open a connection (start the process) and its reader; replay the handshake
        after a death."""
        old = self._conn
        if old is not None:
            old.close()
            join_all(self._readers, time.monotonic() + 2.0)   # its death is reported first
        conn = open_conn(self.config, self.id, self._stderr_line, self._max_frame,
                         self._secret_resolver)
        conn.start()
        self._generation += 1
        self._conn = conn
        reader = new_thread(f"mcpsync-gateway-reader-{self._safe}", self._read_loop,
                            conn, self._generation)
        self._readers = [r for r in self._readers if r.is_alive()] + [reader]
        reader.start()
        if not replay:
            return
        resuming, self._resuming = self._resuming, None
        init = self._init_frame
        if resuming is not None:
            params = json.loads(init.raw("params") or "{}") if init is not None else {}
            if conn.resume(resuming, params if isinstance(params, dict) else {}):
                return
            _log.info("upstream %r started for a resumed host session (pid %s)", self.id,
                      conn.pid)
        else:
            self.restarts += 1
            _log.warning("upstream %r restarted (pid %s)", self.id, conn.pid)
        if init is None or init.id_key is None:
            return   # modern era, or no handshake yet: nothing to replay
        self._replayed.clear()
        with self._cond:
            self._replay_id = init.id_key
        try:
            conn.send(init)
            answered = self._replayed.wait(REPLAY_TIMEOUT)
        finally:
            # Answered (answered() cleared it), abandoned (a death or close() set the event)
            # or given up: no answer to it is expected any more. Left set, it would send
            # every later answer of this upstream the slow way, and drop the answer to a host
            # call that reuses the initialize's id.
            with self._cond:
                self._replay_id = None
        if not answered and not self._stopping:
            raise _ReplayUnanswered(f"upstream {self.id!r} was restarted but did not answer "
                                    f"the replayed initialize within {REPLAY_TIMEOUT:g} s",
                                    server=self.id)
        if self._initialized_frame is not None:
            conn.send(self._initialized_frame)

    def _stderr_line(self, line: str) -> None:
        if _log.isEnabledFor(logging.DEBUG):
            _log.debug("upstream %r stderr: %s", self.id, redact_for_log(line))

    # ---------------------------------------------------------------- the reader thread

    def _read_loop(self, conn: Conn, generation: int) -> None:
        on_lines = self.on_lines
        fast = self.fast_reader
        why = fast(self, conn) if fast is not None and type(conn) is StdioConn else None
        if why is None:
            why = conn.read(functools.partial(self._on_line, self),
                            lambda key, why: self._call_failed(key, why),
                            None if on_lines is None else functools.partial(on_lines, self))
        if self._stopping:
            return
        code = conn.exit_code(1.0)
        if code is not None:
            why = f"it exited with code {code}"
        with self._cond:
            if generation != self._generation:
                return
            # list(): one step under the GIL, against the pass-through's pops without the lock
            calls = [_as_envelope(call) for _, call in list(self._inflight.values())]
            self._inflight.clear()
            if self._replay_id is not None:   # the replay is abandoned: _launch clears it
                self._replayed.set()
        self.last_error = why
        _log.warning("upstream %r is down (%s); %d call(s) in flight failed", self.id, why,
                     len(calls))
        tail = conn.stderr_excerpt()
        if tail:
            _log.warning("upstream %r's last stderr lines:\n%s", self.id, redact_for_log(tail))
        conn.close()
        self._on_down(self, calls, why)

    def _call_failed(self, key: IdKey, why: str) -> None:
        """One exchange failed below JSON-RPC (HTTP): fail that call alone."""
        with self._cond:
            if key == self._replay_id:
                self._replay_id = None
                self._replayed.set()
                return
            entry = self._inflight.pop(key, None)
        if entry is not None:
            self._on_failed(self, _as_envelope(entry[1]), why)


class _ReplayUnanswered(StreamError):
    """A restarted server did not answer the replayed ``initialize`` in time."""


def _as_envelope(call: Envelope | bytes) -> Envelope:
    """An in-flight call as an envelope (the fast path keeps a request's bytes only; they
    were decoded as a JSON object with a method when it was sent, so this parse succeeds)."""
    return call if isinstance(call, Envelope) else parse_envelope(call)
