"""The session engine: correlation, timeouts, cancellation, progress, notifications and
server->client requests over a pull transport (``receive``/``wake``/``send``).

Theory of operation (the *reader role*; ``docs/performance.md`` has the long version):

- Exactly one thread at a time reads the transport: it holds the *reader role*
  (``self._role``, a :class:`~mcpsync.session._role.Role`). It is owned through its token,
  a slot that one thread only can delete: a caller on the usual path claims a free role
  without ``self._lock`` by ``del role.token`` and the holder's store, on one line with
  nothing between them that runs Python code (``_request``); every other claimer (``_send``,
  ``_claim_after_write``, the background reader, ``start()``) takes the token under the
  lock (``Role.take``). Only the owner gives it back: a leader without the lock in the
  usual case (see ``_release_role``), else ``Role.free`` under it. The other changes of
  the role (a grant, a takeover) are made under the lock.
  The holder is the background reader thread ``mcpsync-<kind>-reader-<name>`` (``_BG``;
  ``<kind>`` is the transport's ``kind``: ``stdio``, ``http``, ``memory``), or a caller (its
  :class:`Call`).
- Leader/follower: a caller whose request is the only one in flight reads its own response
  (it *leads*): no hand-off between threads, which is the one hop per call a plain reader
  thread costs. Every other caller *follows*: it sleeps on its call's lock until the current
  reader completes it.
- A caller claims a free role before writing its request (``sending`` marks the write; a
  write that blocks is rescued by the background reader taking the role over), or asks the
  background reader for it (``want`` + ``transport.wake()``) when its call is the only one
  pending; the background reader grants it and sleeps. A leader reads with bounded polls (its
  deadline; 0.1 s slices on the main thread, so a simulated Ctrl-C is seen), completes other
  callers' responses and feeds the dispatcher exactly as the background reader would, then
  gives the role back. It wakes the background reader at once when calls are still pending;
  otherwise the background reader resumes within HANDOFF_GRACE by itself (no thread switch
  per sequential call), or, where it is absent, the idle watch looks within its pause
  (HANDOFF_GRACE, up to MAX_WATCH_PAUSE after calls back to back).
- On stdio (where ``poll()`` exists) the background reader is *absent* until first needed
  (``Role.absent``): a session used one call at a time never needs it, and the shared idle
  watch (``transport/stdio/_idle_watch``) polls its stdout and its server's exit meanwhile.
  Every wake-up of the reader (``_unpark``) starts it instead, as do the watch (something
  arrived with the role free), a write that finds stdin's pipe full, and a loss; once
  started it stays. So "wakes the background reader" below means "starts it" while it is
  absent, and its "short sleep" is the watch's pause and poll (a pause of HANDOFF_GRACE, up
  to MAX_WATCH_PAUSE after calls back to back; see ``_idle_ready``).
- Nothing user-supplied runs on a reader: notifications and progress go to the dispatcher,
  server->client requests and deferred cancellations to the callback pool. A leader writes
  a cancellation only after giving the role up.
- A call is completed exactly once, by the thread that pops it from ``self._pending``. A
  call with a progress callback is the one exception to "the reader settles it": the reader
  pops it, marks it answered and queues the settling on the dispatcher behind the progress
  callbacks queued before it, so its caller never returns before its progress has run. Calls
  without one (the hot path) take no extra hop.
- When the connection dies, every pending call fails at once; the background reader then
  tears the transport down and calls ``on_lost``.
- A call's ``Call`` object is reused: one spare per session (on its ``Role``), taken by one
  atomic ``dict.pop``. It goes back only after a call of the usual path went through whole:
  popped with its answer by its own caller (the exchange's read, or the caller's own lead),
  no waiter lock ever made, the role given back, no error and no Ctrl-C. Anything else
  leaves the object to whoever may still hold it (a canceller, a reader, a log), never
  reused. Nothing else may keep a ``Call`` past its call (see ``_call.py``).
- State: the reader role is one ``Role`` (``_role``) and the session's life one ``Phase``
  (``_phase``: new, open, losing, lost, torn down, closing, closed), both changed under
  ``self._lock`` (but for the role fields ``_role.py`` lists: the usual claim and
  give-back are made without it); the hot path reads them without it and acts only on
  "the role is mine" or "the phase is open", which no other thread can take away from it
  unseen. The lock-free claim tests the phase after it took the token: a close that
  came first is seen and the role given back; a later one sweeps the call, registered
  before, and the leader then finds it done and gives the role back.

Free-threaded CPython (3.13t and later) is not supported yet: the engine relies on single
dict operations on ``_pending`` (insert, ``pop``) being atomic and on plain attribute reads
seeing a recent value, both true under the GIL and promised by the free-threaded build too,
but the suite has not been run on one; until it has, use a GIL build. The lock-free
give-back of the reader role (in ``_request``; why it is safe: ``_release_role``) also
relies on plain attribute stores and loads being seen by other threads in the order
they were made (a store then a load on each side, so one side sees the other's store),
which the GIL gives; a free-threaded build would need that fast path to take the lock.
The lock-free claim relies on a slot's deletion being atomic (one thread only succeeds),
and on nothing running between it and the holder's store; neither was checked on a
free-threaded build.

The session is built from parts (see ``_base``): this module holds the hot path (claiming
the role, writing, leading and following, routing answers); the background reader, the
server's other frames, deadlines and connection loss live beside it.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Final

from mcpsync._names import safe
from mcpsync.config import DEFAULT_TIMEOUT
from mcpsync.errors import (
    ClosedError,
    ConfigError,
    ConnectionLost,
    RequestTimeout,
    UsedAfterFork,
)
from mcpsync.jsonrpc import (
    AnswerSink,
    Batch,
    Message,
    ParseError,
    StreamError,
    _c_chunks,
    _serialize_tool_call,
    _tool_call_failed,
    _tool_part,
    notification as notification_message,
    request as request_message,
    serialize,
    serialize_request,
)
from mcpsync.protocol import describe_call
from mcpsync.session._background import BackgroundReader
from mcpsync.session._base import (
    DEFAULT_MAX_TIMEOUT,
    EAGER_HANDBACK,
    EXIT_WAIT,
    JOIN_TIMEOUT,
    MAIN_THREAD_SLICE,
    NOTICE_WRITE_BOUND,
    Aside,
    Phase,
    logger,
)
from mcpsync.session._call import Call, ProgressCallback
from mcpsync.session._cancel import Cancelling
from mcpsync.session._delivery import CallbackPool, Dispatcher
from mcpsync.session._future import RequestFuture
from mcpsync.session._incoming import Incoming
from mcpsync.session._loss import LossHandling
from mcpsync.session._role import BG as _BG, Role
from mcpsync.transport.base import CallFailed, ReadBroke, Transport, WriteTimedOut

if TYPE_CHECKING:
    from mcpsync.session._base import SendUntil

__all__ = ["DEFAULT_MAX_TIMEOUT", "RequestFuture", "Session", "SessionTransport"]

#: The old name of :class:`~mcpsync.transport.base.Transport`, kept for its importers.
SessionTransport = Transport

_OPEN: Final = Phase.OPEN      # module globals: the hot path compares phases by identity
_CLOSED: Final = Phase.CLOSED
_new_call: Final = object.__new__
#: ``_request``'s mark for "the transport's exchange read nothing for the lead loop".
_NONE: Final = object()


# The pid of this process, refreshed in a forked child. Comparing it with the session's pid
# costs an attribute load instead of a getpid() system call on every request.
_current_pid = os.getpid()
# The main thread's ident, refreshed in a forked child (threading's own at-fork hook, which
# runs before ours, makes the forking thread the main thread): a leader compares it with
# get_ident() instead of calling current_thread() and main_thread() on every call.
_main_ident = threading.main_thread().ident
_get_ident = threading.get_ident


def _after_fork_in_child() -> None:
    global _current_pid, _main_ident
    _current_pid = os.getpid()
    _main_ident = threading.main_thread().ident


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

NotificationHandler = Callable[[Message], None]
RequestHandler = Callable[[Message], Any]
LostHandler = Callable[[ConnectionLost], None]


def _with_token(params: Any, token: int) -> dict[str, Any]:
    """A copy of ``params`` with ``_meta.progressToken`` set; the caller's dicts are untouched."""
    out = dict(params) if isinstance(params, dict) else {}
    meta = out.get("_meta")
    meta = dict(meta) if isinstance(meta, dict) else {}
    meta["progressToken"] = token
    out["_meta"] = meta
    return out


class Session(BackgroundReader, Incoming, Cancelling, LossHandling):
    """One JSON-RPC connection: blocking and future-based requests, safe from any thread.

    Thread contract: :meth:`request`, :meth:`submit` and :meth:`notify` may be called from
    any number of threads at once; :meth:`close` is idempotent and thread-safe. Callbacks run
    on the dispatcher (notifications, progress, future done-callbacks, in arrival order) or
    the callback pool (server->client requests), never on a thread that reads.
    """

    def __init__(self, transport: Transport, *, name: str,
                 default_timeout: float = DEFAULT_TIMEOUT,
                 max_timeout: float = DEFAULT_MAX_TIMEOUT,
                 reset_timeout_on_progress: bool = False,
                 on_notification: NotificationHandler | None = None,
                 on_request: RequestHandler | None = None,
                 on_lost: LostHandler | None = None,
                 observe_progress: bool = False) -> None:
        _check_timeout("default_timeout", default_timeout)
        _check_timeout("max_timeout", max_timeout)
        self.name = name
        self._safe = safe(name)
        self._transport = transport
        self._default_timeout = float(default_timeout)
        self._notice_bound = min(self._default_timeout, NOTICE_WRITE_BOUND)
        self._max_timeout = float(max_timeout)
        self._reset_on_progress = reset_timeout_on_progress
        self._on_notification = on_notification
        self._on_request = on_request
        # What the calls never read (on_lost; observe_progress: also hand progress
        # notifications to on_notification, after the call's own callback, for an observer
        # of every notification such as the Manager's), aside: see Aside.
        self._aside = Aside(observe_progress, on_lost)
        self._pid = os.getpid()
        self._ids = itertools.count(1)
        # In flight, by id. The session sends integer ids only, so the table is keyed by
        # the integer itself (a key tuple would be made, hashed and freed twice per call);
        # an id read from the wire matches a call only when it is an ``int`` too, so a
        # string "1" (or a bool) never matches call 1, as with ``RequestId.key``.
        self._pending: dict[int, Call] = {}
        self._unattended: set[Call] = set()
        self._answered: set[Call] = set()  # popped, waiting for the dispatcher to settle them
        self._lock = threading.Lock()
        # Each next() is a blocking ``_lock.acquire()`` made from C, returning True. The two
        # sections of the lock that every sequential call runs (claiming the role in _send,
        # giving it back in _release_role) take it by ``for held in self._locking: break``
        # inside a ``try`` whose ``finally`` releases it if ``held``: the loop stores True
        # before any call returns into the frame (where the interpreter raises a Ctrl-C),
        # and a Ctrl-C raised later is inside the ``try``. That is Ctrl-C safe as ``with
        # self._lock:`` is; under a trace function (a debugger), whose line events can raise
        # between lines, the ``finally``'s own lines stay exposed (and in ``receive()`` the
        # ``try:`` lines after a return); and it costs about 1,150 fewer
        # instructions per section (``with`` looks ``__enter__`` and ``__exit__`` up and
        # makes and frees two bound methods; docs/performance.md).
        self._locking = itertools.starmap(self._lock.acquire, itertools.repeat(()))
        self._close_lock = threading.Lock()
        # Reader role. Invariant: while the role is free, the background reader is awake, or
        # asleep for at most HANDOFF_GRACE, or absent with the idle watch polling stdout and
        # the exit (each session left out of its poll for at most HANDOFF_GRACE at a time,
        # MAX_WATCH_PAUSE while calls keep coming) (see _release_role, _bg_run and
        # _idle_ready).
        self._role = Role()
        self._bg_thread: threading.Thread | None = None
        self._phase = Phase.NEW
        # Connection loss: set once.
        self._lost: ConnectionLost | None = None
        self._watching = False   # the handshake watch (see watch_handshake)
        self._dispatcher = Dispatcher(self._safe, logger)
        self._pool = CallbackPool(self._safe, logger)
        # A request is written by its deadline where the transport can (stdio): a server that
        # stops reading must not hold a caller past its timeout (see _write_timed_out).
        # Its third argument, ``ended``, says that the frame is the whole line, its newline
        # included (a tool call's, see _serialize_tool_call): a transport whose
        # send_bytes_until is not marked as taking such a line (transport.base.takes_lines)
        # is handed the frame without it.
        send_until = getattr(transport, "send_bytes_until", None)
        if send_until is None:
            send_bytes = transport.send_bytes

            def send_until(frame: bytes, deadline: float, ended: bool = False) -> None:
                send_bytes(frame[:-1] if ended else frame)
        elif not getattr(send_until, "send_takes_lines", False):
            send_frame = send_until

            def send_until(frame: bytes, deadline: float, ended: bool = False) -> None:
                send_frame(frame[:-1] if ended else frame, deadline)
        self._send_until: SendUntil = send_until
        # The transport's receive, bound once: a leader calls it through a local, since a
        # method looked up on the transport (its instance dict is a real dict) takes the
        # generic path, about 300 instructions per call.
        self._receive: Callable[[float | None], Any] = transport.receive
        # Where the transport has one (stdio), its exchange: a tool call's line written and
        # its first read made in one call (see _request), taken only when the transport's
        # send_bytes_until and receive are the very functions the exchange stands for and
        # its class defines it (transport.base.fuses): a subclass overriding either, or a
        # wrapper forwarding attributes, keeps the two calls.
        self._exchange: Callable[[bytes, Call, Role, float], Any] | None = None
        exchange = getattr(type(transport), "exchange", None)
        pair = getattr(exchange, "fuses", None)
        if pair is not None and getattr(send_until, "__func__", None) is pair[0] \
                and getattr(self._receive, "__func__", None) is pair[1] \
                and getattr(getattr(transport, "exchange", None), "__func__", None) is exchange:
            self._exchange = transport.exchange  # type: ignore[attr-defined]
        # Where the transport can (stdio), a plain result response read alone is handed
        # straight to _take_answer, without a Message or a pass through _feed (the hot path).
        # Not kept on the session (the close asks the transport again): the session holds
        # at most the attributes CPython keeps inline (see Aside).
        route_answers: Callable[[AnswerSink | None], None] | None = getattr(
            transport, "route_answers", None)
        if route_answers is not None:
            route_answers(self._take_answer)

    # ------------------------------------------------------------------ lifecycle

    @property
    def allow_batch(self) -> bool:
        """Whether the transport accepts JSON arrays as frames (2025-03-26 only)."""
        return bool(self._transport.allow_batch)

    @allow_batch.setter
    def allow_batch(self, value: bool) -> None:
        self._transport.allow_batch = value

    @property
    def lost(self) -> ConnectionLost | None:
        """The error that ended the connection, or ``None`` while it is alive (while the
        error is being built, this waits for it: up to EXIT_WAIT for the exit status)."""
        lost = self._lost
        if lost is None:
            phase = self._phase
            if phase is _OPEN:  # the usual answer, checked first: call_tool asks every call
                return None
            if Phase.LOSING <= phase <= Phase.TORN_DOWN:
                self._aside.loss_settled.wait(EXIT_WAIT + JOIN_TIMEOUT)
            return self._lost
        return lost

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._phase >= Phase.CLOSING

    def watch_handshake(self) -> None:
        """Until :meth:`handshake_done`, treat a program that does not talk JSON-RPC as what
        it probably is, not an MCP server: its 10th stdout line that is not JSON-RPC fails
        every pending call with :class:`ProtocolError` at once, and the errors of an exit or
        a timeout before any answer quote its first stdout line and say so."""
        self._watching = True

    def handshake_done(self) -> None:
        """The handshake has been answered: stdout lines are judged one at a time again."""
        self._watching = False

    def start(self) -> None:
        """Open the session (the transport must already be started): start the background
        reader, or, where the transport has an idle watch (stdio with ``poll()``), register
        with it and start the reader only once one is needed (see ``Role.absent``)."""
        self._check_usable(None, None)
        watch_idle = getattr(self._transport, "watch_idle", None)
        with self._lock:
            if self._phase is not Phase.NEW:
                return
            absent = False
            if watch_idle is not None:
                try:
                    absent = watch_idle(self._idle_ready, self._idle_full)
                except Exception as exc:   # no pipe or thread for the watch: a reader
                    logger.debug("server %r: no idle watch (%r); starting a reader",
                                 self.name, exc)
            if absent:
                role = self._role
                role.absent = True
                role.parked = True        # as a reader in its short sleep: see Role
                role.long_park = False
            else:
                # Taken by the background reader before the phase lets a call claim it.
                self._role.take(_BG)
            self._phase = Phase.OPEN
        if absent:
            return
        self._bg_thread = self._new_reader()
        self._bg_thread.start()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self, reason: str = "client closed") -> None:
        """Close the session: refuse new calls (:class:`ClosedError`), fail pending calls with
        ``ConnectionLost(reason)``, stop the reader, close the transport, join every thread
        (1 s each). Idempotent and thread-safe; in a forked child it only drops references.
        """
        if os.getpid() != self._pid:
            # Forked child: our threads do not exist here and our locks may be held forever.
            self._phase = Phase.CLOSED
            self._pending = {}
            self._unattended = set()
            with contextlib.suppress(OSError):
                self._transport.close()  # drops the child's copies of the descriptors only
            self._aside.on_lost = self._on_request = self._on_notification = None
            return
        with self._close_lock:
            self._begin_close(reason)
            if self._aside.close_done:
                return
            self._aside.close_done = True
            # Each step runs even when one before it was interrupted (Ctrl-C in a wait): the
            # transport's close then ends the server at once, and the threads are stopped.
            try:
                me = threading.current_thread()
                bg = self._bg_thread
                if bg is not None and bg is not me and bg.ident is not None:
                    bg.join(JOIN_TIMEOUT)
            except BaseException:
                # Ctrl-C in the join: the user wants out, so the transport's close below
                # ends the server at once instead of waiting for it politely.
                interrupted = getattr(self._transport, "interrupted", None)
                if interrupted is not None:
                    interrupted()
                raise
            finally:
                try:
                    try:
                        self._transport.close()
                    except KeyboardInterrupt:
                        # Ctrl-C as the transport's close began, before it could take the
                        # shutdown over: end the server now, as an interrupted close does.
                        interrupted = getattr(self._transport, "interrupted", None)
                        if interrupted is not None and not getattr(self._transport, "closed", True):
                            interrupted()
                            self._transport.close()
                        raise
                finally:
                    route_answers = getattr(self._transport, "route_answers", None)
                    if route_answers is not None:
                        route_answers(None)  # the transport no longer holds on to us
                    try:
                        self._dispatcher.stop(JOIN_TIMEOUT)
                        self._settle_answered()
                    finally:
                        self._pool.stop(JOIN_TIMEOUT)

    def begin_close(self, reason: str = "client closed") -> None:
        """The first half of :meth:`close`, which never waits: refuse new calls, fail the
        pending ones, tell the reader to stop and begin the transport's shutdown (a stdio
        server's stdin is closed, so it starts exiting). :meth:`close` does the rest.

        Whoever closes many sessions calls this on each first, so that their servers all
        shut down at once. A no-op once closing began, while another thread is closing it
        (that one does it all), and in a forked child.
        """
        if os.getpid() != self._pid or not self._close_lock.acquire(blocking=False):
            return
        try:
            self._begin_close(reason)
        finally:
            self._close_lock.release()

    def _begin_close(self, reason: str) -> None:
        """Under ``_close_lock``: the non-blocking half of the close, done once."""
        if self._phase >= Phase.CLOSING:
            return
        self._phase = Phase.CLOSING
        self._fail_all(lambda call: ConnectionLost(
            f"{self._describe(call)}: {reason}", maybe_executed=True, server=self.name,
            method=call.method))
        with self._lock:
            self._phase = Phase.CLOSED
            self._role.want = None
            self._unpark()   # starts no absent reader: the phase is closed
        unwatch_idle = getattr(self._transport, "unwatch_idle", None)
        if unwatch_idle is not None:
            unwatch_idle()   # before the server's exit can wake the watch for nothing
        if self._watching:
            # It never answered: no MCP shutdown to wait for (stdin EOF, then 2 s).
            hurry = getattr(self._transport, "hurry", None)
            if hurry is not None:
                hurry()
        # The phase is CLOSED, so the reader takes the server's exit for the close it is, not
        # for a loss: stdin may go now, before the reader is woken and joined (closing it
        # first lets the server start exiting before the reader competes for the GIL).
        close_input = getattr(self._transport, "close_input", None)
        if close_input is not None:
            close_input()
        self._transport.wake()

    # ------------------------------------------------------------------ sending

    def request(self, method: str, params: dict[str, Any] | None = None, *,
                timeout: float | None = None, progress: ProgressCallback | None = None,
                reset_timeout_on_progress: bool | None = None,
                cancellable: bool = True) -> Any:
        """Send a request and block until its result (returned) or an error (raised).

        Raises :class:`RemoteError` (the subclass follows the code), :class:`RequestTimeout`
        (the request is cancelled unless ``cancellable=False``), :class:`ConnectionLost` /
        :class:`ServerExited`, :class:`ClosedError`, :class:`UsedAfterFork` or
        :class:`ProtocolError`. A ``KeyboardInterrupt`` while waiting (or while sending)
        cancels the request on the wire and is re-raised; the session stays usable.
        """
        return self._request(method, params, timeout, progress, reset_timeout_on_progress,
                             cancellable, None)

    def _request(self, method: str, params: dict[str, Any] | None, timeout: float | None,
                 progress: ProgressCallback | None, reset_timeout_on_progress: bool | None,
                 cancellable: bool, tool: str | None) -> Any:
        """:meth:`request` with every argument positional: what ``Client.call_tool`` calls.

        ``tool``, when not ``None``, says that ``method`` is ``tools/call`` and ``params`` was
        built by the caller as ``{"name": tool, "arguments": <...>}``, those two members in
        that order and no other: on the usual (inline) path the request line is then
        written without looking for that shape again (``call_tool`` built the dict;
        :meth:`request` passes ``None``), here for a name whose piece of the line is cached
        and by :func:`~mcpsync.jsonrpc._serialize_tool_call` otherwise; the general path
        (``_open``) ignores it and uses ``serialize_request``. Nor does the
        inline path's entry test the method's and the params' types for such a call (a
        ``str`` and a ``dict`` by that promise: about 380 instructions less per call).

        CPython 3.11 does not specialise a call to a function with keyword-only parameters:
        the call is still made inline, but through the general frame set-up, which fills
        each missing one from ``__kwdefaults__``; a call with every parameter positional and
        given takes the specialised set-up. In a loop under
        callgrind the first cost about 1,130 instructions per call and the second about 510
        (docs/performance.md), so ``call_tool``, the hot path, calls this directly; every
        other caller goes through :meth:`request` and pays the difference the other way.

        The usual call is claimed, written and read here, in one frame: the claim of a free
        reader role and the write (what :meth:`_send` does, which takes over when the role
        is not free), the lead (reading frames until the answer came) and the lock-free
        give-back of the role (see :meth:`_release_role`). Each was a method of its own;
        a sequential call runs each once, and a call of a method costs a frame and its
        lookup: about 700 instructions each, measured while the session's instance dict was
        a real dict (before :class:`~mcpsync.session._base.Aside`; the frame stays).
        """
        got: Any = _NONE   # what the transport's exchange read, for the lead loop
        mine = False       # this thread popped the call with its answer (see the end)
        if (progress is None and reset_timeout_on_progress is None and self._phase is _OPEN
                and self._pid == _current_pid and not self._reset_on_progress
                and (tool is not None  # call_tool's: a str method, a dict it built
                     or (type(method) is str and (params is None or type(params) is dict)))
                and (timeout is None or timeout > 0)):
            # The usual call (hot path): what _open does for it, inlined, which saves a
            # frame and its eight arguments per call. Anything else (progress, a session not
            # open, a bad timeout or method) goes through _open, which checks and words it.
            rid = next(self._ids)
            # A tool call's line is serialised with its newline (``ended``), which the
            # transport then writes as it is: one copy of the line fewer.
            if tool is None:
                frame = serialize_request(rid, method, params)
                ended = False
            else:
                # _serialize_tool_call's usual case written out here (a str name whose
                # piece of the line is cached, dict arguments): the same f-string without
                # the call's frame (about 500 instructions per call; docs/performance.md).
                # Anything else is left to it, which caches a new name; an error is worded
                # by the helper the two share. Nothing is written or registered yet, so an
                # error or a Ctrl-C here leaves no call pending and no lock held. A test
                # holds the two copies to the same bytes and errors for every shape.
                arguments = params["arguments"]  # type: ignore[index]
                if type(tool) is str and type(arguments) is dict \
                        and (after := _tool_part(tool)) is not None:
                    try:
                        frame = (f'{{"jsonrpc":"2.0","id":{rid}{after}'
                                 f'{"".join(_c_chunks(arguments, 0))}}}}}\n').encode()  # type: ignore[misc]
                    except Exception as exc:
                        _tool_call_failed(exc)
                else:
                    frame = _serialize_tool_call(rid, tool, params)  # type: ignore[arg-type]
                ended = True
            # Call(rid, method, params, timeout, None, False, cancellable, now, max_timeout),
            # without calling the class: a class call runs __init__ as a nested evaluation
            # that costs about as much again as these stores (docs/performance.md).
            # The object is the spare when there is one: a Call that an earlier call of
            # this path gave back whole (see the end of this method), taken by one
            # ``dict.pop`` with a default, a single C call that runs no Python code, so no
            # other thread runs during it under the GIL: two callers never get the same
            # one, and finding none (the first call, another thread took it) raises
            # nothing. Only the slots a call of this path changes are stored for it: the
            # others (progress, future, lock, error, result, reset, ordered, answered,
            # attended) hold the constructor's values in any call given back, since
            # nothing changes them on a call of this path that is given back (its lock
            # and error are tested then, its result let go). A test holds every slot to
            # what the constructor gives, for a new object and for the spare, so none can
            # be missed here.
            spare = self._role.spare
            call = spare.pop(0, None)
            if call is None:
                call = _new_call(Call)
                call.progress = call.future = call.lock = call.result = call.error = None
                call.reset = call.ordered = call.answered = False
                call.attended = True
            call.id = rid
            call.key = rid
            call.method = method
            call.params = params
            call.timeout = span = self._default_timeout if timeout is None else timeout
            call.done = False
            call.cancellable = cancellable
            now = time.monotonic()
            call.deadline = now + span
            call.limit = now + self._max_timeout
            pending = self._pending
            pending[rid] = call
            if self._phase is not _OPEN:  # close()/loss may have swept before we registered
                if pending.pop(rid, None) is not None:
                    self._check_usable(method, params)
            else:
                try:  # Ctrl-C in the write, say: as _open does
                    # _send(call, frame, True), inlined for a role found free (the usual
                    # case: a frame and a method lookup less per call); when it is not,
                    # _send does it all, its claim tried again.
                    # The claim, without the session's lock: the role's token taken by
                    # one bytecode that one thread only can complete (see Role); nothing
                    # between it and the holder's store where a Ctrl-C is raised.
                    role = self._role
                    claimed = False
                    if role.holder is None:   # taken otherwise: no exception to learn it
                        try:
                            # One line: no trace function's line event between the two.
                            del role.token; role.holder = role.sending = call  # noqa: E702
                        except AttributeError:
                            pass
                        else:
                            claimed = self._phase is not _CLOSED  # type: ignore[comparison-overlap]
                            if not claimed:   # closed meanwhile: give both back
                                role.holder = role.sending = None; role.token = True  # noqa: E702
                    if not claimed:
                        self._send(call, frame[:-1] if ended else frame, True)
                    elif ended and self._exchange is not None and not self._unattended \
                            and span > MAIN_THREAD_SLICE:
                        # The write and the lead's first read in one transport call (stdio):
                        # two frames and the lead's first-iteration bookkeeping less. Its
                        # read waits one slice, as the lead's first wait does; taken only
                        # when no future's expiry and not this call's deadline can fall
                        # within that slice (no unattended call, a timeout longer than it).
                        exchange = self._exchange   # a local: see send_until below
                        try:
                            got = exchange(frame, call, role, MAIN_THREAD_SLICE)
                        except (WriteTimedOut, ConnectionLost) as exc:
                            self._write_failed(call, exc)
                        except ReadBroke as exc:   # written; then the read failed (a bug)
                            logger.error("server %r: reading failed", self.name,
                                         exc_info=exc.__cause__)
                            self._lose(ConnectionLost(
                                f"reading from server {self.name!r} failed: "
                                f"{exc.__cause__!r}", server=self.name))
                        else:
                            if got is False:   # taken over while the write blocked
                                got = _NONE
                                self._claim_after_write(call)
                            elif type(got) is dict:
                                # This call's plain result: _take_answer's settling of an
                                # attended call, inlined. Whoever pops the call settles it:
                                # a close or a loss that swept it first has settled it.
                                if pending.pop(rid, None) is not None:
                                    mine = True   # popped here: see the end
                                    self._watching = False
                                    call.result = got
                                    call.done = True   # before reading call.lock
                                    lock = call.lock
                                    if lock is not None:
                                        try:  # noqa: SIM105 - as in _take_answer
                                            lock.release()
                                        except RuntimeError:
                                            pass
                                got = _NONE
                    else:
                        # Through a local: an instance attribute called as a method
                        # (``self._send_until(...)``) is looked up by the generic path,
                        # about 200 instructions more.
                        send_until = self._send_until
                        try:
                            send_until(frame, call.deadline, ended)
                        except (WriteTimedOut, ConnectionLost) as exc:
                            self._write_failed(call, exc)
                        else:
                            role.sending = None
                            if role.holder is not call:   # taken over while the write blocked
                                self._claim_after_write(call)
                except BaseException as exc:
                    self._interrupted_send(call, exc)
                    raise
        else:
            call = self._open(method, params, timeout, progress, reset_timeout_on_progress,
                              cancellable, attended=True)
            spare = None   # a call of the general path is never given back
        # From here until the call is settled, any exception (Ctrl-C above all) abandons it.
        role = self._role
        try:
            # (``or role.holder is call``: a call the exchange settled still holds the role,
            # which the lead's ``finally`` gives back; tested only for a settled call.)
            while not call.done or role.holder is call:
                if role.holder is call:
                    # Lead: read frames as the holder of the reader role until the call is
                    # settled or its deadline passes, then give the role back. Written here
                    # rather than in a method of its own: a sequential call leads once,
                    # and the frame and the method's lookup cost about 700 instructions.
                    # No locals set up before the loop (the transport, time.monotonic):
                    # the loop usually runs once, and each costs more to store than it
                    # saves there. Waits are cut into slices of MAIN_THREAD_SLICE on the
                    # main thread only (so that a simulated Ctrl-C is noticed), but asking
                    # which thread this is costs about 580 instructions (its identifier is
                    # a large integer, made and compared by the generic path) and the first
                    # wait usually ends with the answer: so the first wait longer than a
                    # slice is sliced on any thread without asking, and only a later one
                    # asks. A leader on another thread whose answer takes longer than a
                    # slice wakes once, empty-handed, and then waits whole as before.
                    # What the exchange read is routed as this loop's first read, whose
                    # slice it took.
                    first = got is _NONE
                    receive = self._receive   # a local: see send_until above
                    try:
                        while not call.done and not call.answered:
                            # This thread reads for the call: should the loop end by its
                            # test (not by a break), the answer was taken by this thread
                            # (while it holds the role nobody else reads; an error set by
                            # another thread, a close's, keeps the call from reuse).
                            mine = True
                            if got is not _NONE:
                                items = got
                                got = _NONE
                            elif self._phase is not _OPEN:
                                mine = False
                                break
                            else:
                                now = time.monotonic()
                                remaining = call.deadline - now
                                if self._unattended:
                                    remaining = min(remaining,
                                                    self._expire_unattended(now) - now)
                                if remaining <= 0.0:   # a float: a specialised comparison
                                    if call.deadline <= now:
                                        mine = False
                                        break
                                    continue
                                if remaining > MAIN_THREAD_SLICE and (
                                        first or _get_ident() == _main_ident):
                                    first = False
                                    items = receive(MAIN_THREAD_SLICE)
                                else:
                                    items = receive(None if remaining == math.inf
                                                    else remaining)
                            if items:
                                rest = iter(items)
                                try:
                                    self._feed(rest)
                                except KeyboardInterrupt:
                                    # Ctrl-C lands between two bytecodes, maybe mid-batch:
                                    # route what is left of it (other callers' answers)
                                    # before giving up the role.
                                    self._feed(rest)
                                    raise
                            elif items is None:
                                self._on_eof()
                    except StreamError as exc:
                        mine = False   # the loop ended without this thread's answer
                        self._lose(exc)
                    except Exception as exc:  # a bug in reading: the connection is not safe
                        mine = False
                        logger.error("server %r: reading failed", self.name, exc_info=True)
                        self._lose(ConnectionLost(
                            f"reading from server {self.name!r} failed: {exc!r}",
                            server=self.name))
                    finally:
                        # Give the role back. The usual case (this call holds it, has not
                        # asked for it, is not writing, and the background reader is
                        # parked) by two plain stores (``holder``, then the token: see
                        # Role), without the session's lock, which is
                        # taken (in _release_role) only when the reader must be woken: see
                        # _release_role for why that is safe under the GIL. No call sits
                        # between the store and the decision.
                        if role.parked and role.holder is call and role.want is not call \
                                and role.sending is None:
                            # holder first, then the token (a claim may take it), on
                            # one line: no trace function's line event falls between
                            role.holder = None; role.token = True  # noqa: E702
                            if role.long_park or EAGER_HANDBACK or self._pending \
                                    or self._phase is _CLOSED:
                                # decided again under the lock: another caller may have
                                # claimed the role meanwhile, and then the reader has
                                # nothing to read for it
                                self._release_role(call)
                            # else the sequential case: the reader's short sleep picks the
                            # role up
                        else:
                            self._release_role(call)
                else:
                    self._follow(call)
                if call.done:
                    break
                if call.answered:  # ordered: settled on the dispatcher after its progress
                    self._await_settled(call)
                    break
                if time.monotonic() >= call.deadline:
                    self._expire(call)
        except KeyboardInterrupt:
            self._abandon(call, "interrupted by the user (KeyboardInterrupt)")
            raise
        except BaseException as exc:  # never leave the call pending or the role held
            self._abandon(call, f"abandoned after {type(exc).__name__}")
            raise
        error = call.error
        if error is not None:
            raise error
        result = call.result
        if mine and call.lock is None and spare is not None:
            # A call of the usual path that went through whole goes back to the spare, for
            # this session's next call to take instead of a new object (no allocation, no
            # deallocation, fewer stores: docs/performance.md). The rule: this thread popped
            # it with its answer (``mine``: in the exchange's branch, or in a read of its
            # own lead, while no other thread reads), so no other thread is settling it or
            # will; it never made a waiter lock, so it never followed (no grant, no
            # wake-up, no reader's settling can reach it) and was neither ordered nor a
            # future's; the lead's ``finally`` gave the role back (holder, want and sending
            # are not this call); it returned normally (an error, a timeout or a Ctrl-C
            # leaves the call to whatever cancels or words them, and it is not reused). Its
            # params and result are let go here, not kept alive until the next call; the
            # result was read first, since once given back another thread may take it.
            call.result = call.params = None
            spare[0] = call
        return result

    def submit(self, method: str, params: dict[str, Any] | None = None, *,
               timeout: float | None = None, progress: ProgressCallback | None = None,
               reset_timeout_on_progress: bool | None = None,
               cancellable: bool = True) -> RequestFuture:
        """Send a request and return at once with a :class:`RequestFuture` for its result.

        The timeout still applies (the future fails with :class:`RequestTimeout` and the
        request is cancelled); ``future.cancel()`` cancels on the wire. With a ``progress``
        callback the future is settled on the dispatcher, after every progress callback for
        a notification that arrived before the response.
        """
        call = self._open(method, params, timeout, progress, reset_timeout_on_progress,
                          cancellable, attended=False)
        return call.future  # type: ignore[return-value]  # set by _open for unattended calls

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        """Send a notification (no answer). Raises like :meth:`request` when unusable."""
        self._check_usable(method, params)
        try:
            self._send_notice(notification_message(method, params), self._notice_bound)
        except WriteTimedOut as exc:
            bound = self._notice_bound
            raise RequestTimeout(
                f"{describe_call(method, params, self.name)}: could not be sent within "
                f"{bound:g} s because server {self.name!r} is not reading its input; "
                + ("nothing of it was sent" if not exc.written else
                   f"{exc.written} of its {exc.size} bytes were sent and the rest is being "
                   "sent (the connection is closed if that takes 5 s more)"),
                timeout=bound, server=self.name, method=method) from None
        except ConnectionLost as exc:
            self._lose_on_write(exc)
            self._check_usable(method, params)  # raises ClosedError or the loss
            raise

    def _open(self, method: str, params: Any, timeout: float | None,
              progress: ProgressCallback | None, reset: bool | None, cancellable: bool, *,
              attended: bool) -> Call:
        """Register and send one request; for an attended call, take the reader role if it
        is free (or ask the background reader for it when this is the only call)."""
        if self._phase is not _OPEN or self._pid != _current_pid:
            self._check_usable(method, params)   # raises unless the session is new
            if self._phase is Phase.NEW:
                self.start()
        if timeout is None:
            timeout = self._default_timeout
        elif not timeout > 0:
            raise ConfigError(f"{describe_call(method, params, self.name)}: timeout must be "
                              f"> 0 seconds (math.inf for none), not {timeout!r}",
                              server=self.name, method=method)
        if reset is None:
            reset = self._reset_on_progress
        rid = next(self._ids)
        if progress is not None or reset:
            params = _with_token(params, rid)
        if type(method) is str and (params is None or type(params) is dict):
            # The common case, encoded without building a Message (hot path).
            frame = serialize_request(rid, method, params)
        else:  # checks, raises TypeError
            frame = serialize(request_message(rid, method, params))
        # Settle through the dispatcher (after the progress callbacks) unless this thread is
        # the dispatcher: a callback there waiting on its own queue would never return.
        ordered = progress is not None and not self._dispatcher.on_thread()
        call = Call(rid, method, params, timeout, progress, reset, cancellable,
                    time.monotonic(), self._max_timeout, attended, ordered)
        pending = self._pending
        pending[call.key] = call
        # From the registration on, any exception (Ctrl-C above all, in the future's
        # making as in the write) takes the call out again: see _interrupted_send.
        try:
            if not attended:
                call.future = RequestFuture(lambda reason: self._cancel_future(call, reason),
                                            self._dispatcher.post, rid)
                self._unattended.add(call)
            if self._phase is not _OPEN:  # close()/loss may have swept before we registered:
                if pending.pop(call.key, None) is not None:  # never leave a call behind
                    self._unattended.discard(call)
                    self._check_usable(method, params)
                return call  # the sweep settled it
            return self._send(call, frame, attended)
        except BaseException as exc:
            self._interrupted_send(call, exc)
            raise

    def _send(self, call: Call, frame: bytes, attended: bool) -> Call:
        claimed = False
        if attended:
            # Claim a free role *before* writing, so the background reader (woken by a thread
            # switch inside our write) finds it taken instead of grabbing it. While we write,
            # ``sending`` says so: should the write block (a server that stopped reading
            # while its stdout is full), the background reader takes the role over after
            # HANDOFF_GRACE and drains stdout, so the write can finish.
            held = False
            try:
                for held in self._locking:  # noqa: B007 - taken Ctrl-C safe (see __init__)
                    break
                role = self._role
                if self._phase is not _CLOSED and role.take(call):  # the token, taken
                    role.sending = call
                    claimed = True
            finally:
                if held:
                    self._lock.release()
        try:
            self._send_until(frame, call.deadline)
        except (WriteTimedOut, ConnectionLost) as exc:
            self._write_failed(call, exc)
            return call
        if claimed:
            role.sending = None
            if role.holder is call:
                return call
        if attended:
            self._claim_after_write(call)
        elif self._role.holder is not None:
            self._transport.wake()  # let the reader include this deadline in its poll
        else:
            # The role is free: a sequential caller gave it back and left the background
            # reader in its short sleep (see _release_role), for its own next call to lead.
            # This call never leads, so nobody would read its answer until that sleep ends
            # (up to HANDOFF_GRACE): wake the reader now (or start it: the reader is absent
            # where the idle watch looks after an idle stdio session, and a future's answer,
            # progress and expiry need a reader).
            with self._lock:
                if self._role.holder is None:
                    self._unpark()
        return call

    def _write_failed(self, call: Call, exc: WriteTimedOut | ConnectionLost) -> None:
        """The write of ``call``'s request timed out or met a lost connection (``_send``'s,
        and ``_request``'s inlined copy of it)."""
        # `sending` is cleared only if it is this call's: another caller's blocked write
        # (this one waited for the lock) must stay marked for the background reader.
        if self._role.sending is call:
            self._role.sending = None
        if isinstance(exc, WriteTimedOut):
            self._release_role(call)
            self._write_timed_out(call, exc)
        else:
            self._lose_on_write(exc)  # fails this call too (it is pending)
            self._release_role(call)

    def _claim_after_write(self, call: Call) -> None:
        """An attended call's request is written and the call does not hold the reader
        role: take it if it is free, or ask the background reader for it when this is the
        only call in flight."""
        with self._lock:
            # The token taken, or else the background reader asked for the role.
            if not call.done and self._phase is not _CLOSED and not self._role.take(call) \
                    and self._role.holder is _BG and len(self._pending) == 1:
                self._role.want = call
        if self._role.want is call:
            self._transport.wake()

    def _check_usable(self, method: str | None, params: Any) -> None:
        if os.getpid() != self._pid:  # the slow, sure check (not the at-fork hook)
            raise UsedAfterFork(
                f"{self._what(method, params)}: this session was created in process "
                f"{self._pid} and cannot be used in the forked process {os.getpid()}; "
                f"create a new client in the child", server=self.name, method=method)
        phase = self._phase
        if phase >= Phase.CLOSING:
            raise ClosedError(f"{self._what(method, params)}: the client is closed; "
                              f"open a new one", server=self.name, method=method)
        if phase >= Phase.LOSING:
            raise self._after_loss(method, params)

    def _what(self, method: str | None, params: Any) -> str:
        if method is None:
            return f"using server {self.name!r}"
        return describe_call(method, params, self.name)

    def _describe(self, call: Call) -> str:
        return describe_call(call.method, call.params, self.name)

    # ------------------------------------------------------------------ waiting

    def _follow(self, call: Call) -> None:
        """Sleep until ``call`` is settled, granted the reader role, or its deadline passes."""
        main = threading.current_thread() is threading.main_thread()
        acquire = call.waiter().acquire  # before testing what we wait for
        while not call.done and self._role.holder is not call:
            remaining = call.deadline - time.monotonic()
            if remaining <= 0:
                break
            if main and remaining > MAIN_THREAD_SLICE:
                remaining = MAIN_THREAD_SLICE
            if remaining == math.inf:
                acquire()
            else:
                acquire(timeout=remaining)

    def _await_settled(self, call: Call) -> None:
        """``call``'s response arrived; wait for the dispatcher to settle it (after the
        progress callbacks queued before it). No deadline: the answer is in hand."""
        self._release_role(call)  # it may have been granted the role after its answer came
        slice_ = MAIN_THREAD_SLICE if threading.current_thread() is threading.main_thread() \
            else JOIN_TIMEOUT
        acquire = call.waiter().acquire  # before testing what we wait for
        while not call.done:
            acquire(timeout=slice_)

    def _settle_later(self, call: Call, result: Any, error: BaseException | None) -> None:
        """Reader: ``call`` (popped, ordered) got its response; settle it on the dispatcher."""
        call.result = result
        call.error = error
        call.answered = True
        self._answered.add(call)
        self._dispatcher.post_essential(lambda: self._settle(call))

    def _settle(self, call: Call) -> None:
        self._answered.discard(call)
        if not call.done:
            call.finish(call.result, call.error)

    def _settle_answered(self) -> None:
        """On close: settle answered calls whose settling the dispatcher did not run."""
        for call in list(self._answered):
            self._settle(call)

    def _release_role(self, call: Call) -> None:
        """Give the reader role back (if ``call`` holds it), under the session's lock.

        The background reader is woken at once when calls are still pending (it must read
        their responses) or when it is in a long sleep. Otherwise - the sequential case - it
        is left in its short sleep (at most HANDOFF_GRACE; with the reader absent, the idle
        watch's pause, up to MAX_WATCH_PAUSE): waking it on every call costs a
        thread switch per call, and most often the same caller claims the role again for its
        next call before that sleep ends. See docs/performance.md.

        A leader's usual give-back (its call holds the role, has not asked for it, is not
        writing, and the background reader is parked) is made without the lock, in
        :meth:`_request`, which calls this only when the background reader must be woken
        (or when the usual case does not hold). That is safe under the GIL because:

        - While ``holder`` is the call, no other thread changes it but the background
          reader taking over a blocked write: it grants only from itself (``holder`` is
          ``_BG``), and every claim needs the role's token, which the holder has (taken
          with or without the lock, it is given back only by its owner, ``holder = None``
          first; a takeover needs a holder, not ``None``). The takeover tests
          ``sending is holder`` under the lock and then stores ``holder = _BG``, while the
          call clears ``sending`` without the lock, so ``sending is None`` alone does not
          exclude a takeover whose test already passed (under a trace function, which
          can switch threads between those two lines). ``parked`` does: the reader stores
          ``parked = True`` only in the locked section where it decides to sleep, and every
          way out of that sleep stores ``parked = False`` (under the lock) before its next
          decision, so a reader between a takeover's test and its store is not parked. A
          reader seen parked there decides next after the call cleared ``sending``, so it
          cannot take the role over. Otherwise (the reader awake) the lock is taken here.
          An absent reader reads as parked (``start()`` stores it so, under the lock, and
          there is no thread to take anything over); it is started under the lock with
          ``parked`` cleared, and its first decision sees no holder seen writing before,
          so it cannot take a write over before two looks of its own.
        - ``want`` is set to the call only by the call's own thread; another call's
          ``want`` is not ours to clear.
        - Whether to wake the reader is decided *after* ``holder = None`` is stored, reading
          what the other threads store *before* they read ``holder``: a caller registers
          its call in ``_pending`` before it looks at the role, the close sets the phase
          and then wakes the reader itself, and the background reader stores
          ``long_park`` before it looks at ``holder`` again (``_bg_run``'s second look
          before a long sleep). Each such pair is a store then a load on both sides, so one
          of the two threads always sees the other's store: a role given back while a
          call waits or the reader sleeps long is never left unread. A caller that
          registered and found the role taken tries the token again under the lock
          (``_send``, ``_claim_after_write``), or is seen pending by the give-back. The
          background reader may see ``holder is None`` and then fail to take the token
          (a caller took it after that look, without the lock): it reads ``holder`` again
          and parks as for any holder (a short sleep if the caller has not stored itself
          yet), and that holder's give-back wakes it if the sleep is long.
        - No call sits between the store and that decision, and the wake-up itself runs
          here, under the lock. A Ctrl-C is raised only where a call returns on 3.11; on
          3.10 also at a taken jump (as in the locked path), so there one can land between
          the store and the decision. Either way, a Ctrl-C that leaves after ``holder =
          None`` (there, or while the wake-up waits for the lock) reaches the call's
          clean-up (``_abandon``), which gives the role back again here: that wakes the
          reader whenever the role is free and a reason to wake it holds, whoever freed the
          role. The lock-free give-back, when it finds a reason to wake the reader, calls
          this, which decides again under the lock in the same way (another caller may
          have claimed the role meanwhile, and then the reader has nothing to read for it).
        """
        role = self._role
        held = False
        try:  # Role.release, inlined
            for held in self._locking:  # noqa: B007 - taken Ctrl-C safe (see __init__)
                break
            if role.want is call:
                role.want = None
            role.free(call)
            if role.holder is None and (role.long_park or EAGER_HANDBACK or self._pending
                                        or self._phase is _CLOSED):
                self._unpark()
        finally:
            if held:
                self._lock.release()

    # ------------------------------------------------------------------ incoming frames

    def _take_answer(self, rid: int, result: Any) -> bool:
        """The transport's shortcut (see ``route_answers``): a plain result response for the
        integer id ``rid``, read alone, on the thread that holds the reader role. Settles the
        call exactly as :meth:`_feed` would and returns True; False when no call waits for
        ``rid``, so that the response comes back as a frame and :meth:`_feed` drops and logs
        it as before."""
        call = self._pending.pop(rid, None)
        if call is None:
            return False
        self._watching = False  # an answer: this speaks JSON-RPC (see _feed)
        if call.attended is False:
            self._unattended.discard(call)
        elif not call.ordered:
            # Call.finish for an attended call (no future), inlined: the usual answer.
            call.result = result
            call.done = True   # before reading call.lock (see session/_call.py)
            lock = call.lock
            if lock is not None:
                try:  # noqa: SIM105 - try/except is free on the hot path
                    lock.release()
                except RuntimeError:  # already released: a wake-up is pending anyway
                    pass
            return True
        if call.ordered:
            self._settle_later(call, result, None)
        else:
            call.finish(result, None)
        return True

    def _feed(self, items: Iterable[Message | Batch | ParseError | CallFailed]) -> None:
        """Route every decoded item; runs on whichever thread holds the reader role."""
        pending = self._pending
        for item in items:
            if type(item) is Message:
                if item.method is None:
                    # An answer, result or error: whatever it says, this speaks JSON-RPC,
                    # so it is no longer suspected of not being an MCP server.
                    self._watching = False
                    rid = item.id
                    if rid is None:
                        self._uncorrelated(item)
                        continue
                    value = rid.value  # an integer, or no call of ours (see __init__)
                    call = pending.pop(value, None) if type(value) is int else None
                    if call is None:
                        logger.debug("server %r: dropped a response to unknown or cancelled "
                                     "request %s", self.name, rid.raw)
                        continue
                    if call.attended is False:
                        self._unattended.discard(call)
                    error = item.error
                    if call.ordered:
                        self._settle_later(call, item.result if error is None else None,
                                           None if error is None
                                           else self._remote_error(call, error))
                    elif error is None:
                        call.finish(item.result, None)
                    else:
                        call.finish(None, self._remote_error(call, error))
                else:
                    self._incoming(item)
            elif isinstance(item, ParseError):
                self._garbage_line(item)
            elif isinstance(item, list):  # a Batch (2025-03-26)
                self._feed(item)
            elif isinstance(item, CallFailed):  # HTTP: an exchange failed without a reply
                self._call_failed(item)
            else:  # a Message subclass: route it the slow way
                self._feed([Message(item.id, item.method, item.params, item.result,
                                    item.error, item.extra)])

    def __repr__(self) -> str:
        phase = self._phase
        state = "closed" if phase >= Phase.CLOSING else ("lost" if phase >= Phase.LOSING
                                                        else "open")
        return f"<Session {self.name!r} {state} pending={len(self._pending)}>"


def _check_timeout(field: str, value: float) -> None:
    if not value > 0:
        raise ConfigError(f"{field} must be > 0 seconds (math.inf for none), not {value!r}")

