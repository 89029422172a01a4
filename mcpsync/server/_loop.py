"""The threads and streams of ``Server.serve()``: reader, workers, drain, stdout protection.

Theory of operation:

- The reading role. Exactly one thread at a time reads stdin: the holder of the reading role
  (``_State.reading``), at first ``mcpsync-server-reader``. It hands lines to the bounded
  intake (``_server_intake``): at most ``max_queued`` requests (default 2 x concurrency) and
  ``max_queued_bytes`` (4 MiB) of lines wait for a worker, and as much again is read ahead
  undecoded; beyond that it stops reading and the pipe pushes back on the client. A
  cancellation for a running or queued request, and a response to a request a handler sent,
  are applied as soon as they are read, even while the queue is full (see ``_server_intake``).
  A thread blocked in a pipe read can be neither interrupted nor joined, so the thread that
  holds the role when ``serve()`` returns is never joined; it is a daemon, and it is always
  the one named ``mcpsync-server-reader``.
- Answering on the reader (``concurrency=1`` only). Handing each request to a worker costs two
  thread switches per call (wake the worker, then wait for the next line), most of a small
  call's time. So when the line just read is a request, nothing is queued and no handler
  runs, the holder answers it itself, in stream order; pipelined lines it has already read
  wait in the reader's 64 KiB buffer meanwhile, not in the queue. Cancellations must still be
  read while that handler runs, so the idle worker watches: it looks every ``WATCH_SECONDS``
  while calls are being answered this way, and a handler still running at two looks in a row
  has the reading role taken from it (the taker first places the buffered lines, applying
  their cancellations); the two threads swap names. A handler that sends the client a request
  (and waits for the answer) gives the role away at once. The common, short call thus has no
  wake-up at all on its path, sequential or pipelined; a long one has its cancellation read
  within ``2 x WATCH_SECONDS``. With ``concurrency > 1`` the reader never answers: the next
  request must be read while the first runs.
- Workers (``mcpsync-server-worker-<k>``) take frames from the queue and answer them. One
  worker (the default) answers in arrival order; N answer up to N at once, and responses may
  then leave out of order. Handlers never run on the thread that called ``serve()``, so that
  thread can notice ``stop`` within 100 ms whatever a handler does.
- The calling thread supervises. At end of input it lets the work already received finish, for
  at most 2 s; on ``stop`` it does not wait. It then sets every running handler's cancellation
  event, joins the threads (2 s at most; all but the one blocked in a read), and closes the
  write gate: nothing is written after ``serve()`` returns, even by a handler that ignored its
  cancellation.
- ``print()`` cannot corrupt the stream: ``sys.stdout`` points at ``sys.stderr`` while serving,
  and when serving the process's own stdout, fd 1 itself is pointed at fd 2 (after keeping a
  private duplicate for the protocol, written with ``os.write``), so child processes and C
  extensions cannot write into the stream either.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import IO

from mcpsync._threads import join_all, new_thread
from mcpsync.jsonrpc import FrameReader, FrameWriter, Message, StreamError, serialize
from mcpsync.server._context import _stderr
from mcpsync.server._intake import Intake, Item
from mcpsync.server._router import Dispatcher, Send

__all__ = ["DRAIN_SECONDS", "POLL_SECONDS", "WATCH_SECONDS", "run"]

POLL_SECONDS = 0.05
"""How often the supervisor looks at ``stop``: well inside the 100 ms docs/server.md promises."""
DRAIN_SECONDS = 2.0
"""How long running handlers get to finish when ``serve()`` returns."""
WATCH_SECONDS = 0.005
"""How often the idle worker looks at a handler the reader is running (see the module doc)."""
_WATCH_ROUNDS = 200
"""Looks with no call answered on the reader before the worker goes back to ``POLL_SECONDS``
(one second): an idle server does not wake 200 times a second."""

DispatcherFactory = Callable[[Send, Callable[[list[Message]], None]], Dispatcher]


class _FdWriter:
    """``os.write`` to the private duplicate of fd 1: what ``FrameWriter`` does for a stream,
    minus its lock and flush (the write gate already serialises the writes)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._error: StreamError | None = None

    def write_frame(self, data: bytes) -> None:
        if self._error is not None:
            raise self._error
        try:
            written = os.write(self._fd, data)
            if written < len(data):
                view = memoryview(data)
                while written < len(data):
                    more = os.write(self._fd, view[written:])
                    if not more:
                        raise OSError("the stream stopped accepting bytes")
                    written += more
        except OSError as exc:
            self._error = StreamError(f"writing to the stream failed: {exc}")
            raise self._error from exc


class _StreamWriter:
    """A caller's ``stdout`` stream, through ``FrameWriter`` (short writes, flush, errors)."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._writer = FrameWriter(stream)

    def write_frame(self, data: bytes) -> None:
        self._writer.write_frame(data[:-1])


class _WriteGate:
    """The only path to the output stream; closed once ``serve()`` is done.

    The check and the write happen under one lock, so once :meth:`close` returns no frame can
    start; a request's frame is also dropped here when its cancellation event is set by the
    time its turn comes (a cancel never waits for this lock, see ``_server_context``). A
    ``StreamError`` (the client went away) is recorded for the supervisor and swallowed here,
    so a handler's ``ctx.progress`` does not blow up in its face; the supervisor then ends
    ``serve()`` with that error. Frames are serialised before the lock is taken, so a value
    that is not JSON raises (``TypeError``/``ValueError``) to the sender and nothing is written.
    ``on_request`` is told when a handler sends the client a request: it will wait for the
    answer, which someone must be reading.
    """

    def __init__(self, writer: _FdWriter | _StreamWriter,
                 on_fatal: Callable[[StreamError], None]) -> None:
        self._put = writer.write_frame
        self._on_fatal = on_fatal
        self.on_request: Callable[[], None] = _nothing
        self._lock = threading.Lock()
        self._closed = False

    def write(self, message: Message, cancelled: threading.Event | None = None, /) -> None:
        data = serialize(message) + b"\n"
        if message.method is not None and message.id is not None:
            self.on_request()
        with self._lock:
            if self._closed or (cancelled is not None and cancelled.is_set()):
                return
            try:
                self._put(data)
            except StreamError as exc:
                self._on_fatal(exc)

    def write_batch(self, messages: list[Message]) -> None:
        if not messages:
            raise ValueError("a batch holds at least one message")
        data = b"[" + b",".join(serialize(m) for m in messages) + b"]\n"
        with self._lock:
            if self._closed:
                return
            try:
                self._put(data)
            except StreamError as exc:
                self._on_fatal(exc)

    def close(self, wait: float = 1.0) -> None:
        """No frame starts after this returns. A write already in progress (a client that
        stopped reading its stdin) is given ``wait`` seconds, then left to finish on its own
        thread, which may complete it after ``serve()`` has returned: waiting for it would
        let that client keep ``serve()`` from ever returning."""
        self._closed = True   # checked under the lock by every write that has not begun
        # Taken through a starmap read by a for loop, so that a Ctrl-C as acquire() returns
        # cannot leave the lock taken (and every later write waiting for it for ever).
        for ok in itertools.starmap(self._lock.acquire, ((True, wait),)):
            if ok:
                self._lock.release()


def _nothing() -> None:
    """The write gate's ``on_request`` until the loop is built."""


class _State:
    """What the threads and the supervisor share, under one lock.

    Three conditions share that lock so that each event wakes only who it concerns: ``cond``
    the supervisor (fatal error, end of input, the last unanswered frame answered after end
    of input); the intake's own conditions wake one idle worker per queued frame and the
    reader when room frees up. Nothing that can block (a write, a handler) runs while the
    lock is held. ``reading`` is the holder of the reading role; ``inline`` says it is
    answering a request itself, the ``inline_seq``-th one; ``handoff`` that its handler wants
    the role taken at once; ``watching`` that the idle worker looks every ``WATCH_SECONDS``.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.pending = 0  # frames queued or being answered
        self.eof = False
        self.fatal: StreamError | None = None
        self.stopping = threading.Event()
        self.reading: threading.Thread | None = None
        self.inline = False
        self.inline_seq = 0
        self.handoff = False
        self.watching = False
        self.seen_seq = -1  # the inline_seq the watching worker saw at its last look
        self.quiet_looks = 0

    def add_work(self, delta: int) -> None:
        """Under ``lock``: frames needing an answer entered (+) or left without one (-)."""
        self.pending += delta
        if self.pending == 0 and self.eof:
            self.cond.notify_all()  # the supervisor is draining at end of input

    def set_fatal(self, exc: StreamError) -> None:
        with self.cond:
            if self.fatal is None:
                self.fatal = exc
            self.cond.notify_all()


@contextlib.contextmanager
def _protected_stdout(stdout: IO[bytes] | None) -> Iterator[_FdWriter | _StreamWriter]:
    """Yield the protocol's output, with ``print()`` and fd 1 diverted to stderr."""
    saved = sys.stdout
    with contextlib.suppress(Exception):
        saved.flush()
    private_fd: int | None = None
    writer: _FdWriter | _StreamWriter
    if stdout is None:
        private_fd = os.dup(1)  # not inheritable: children never get the protocol stream
        os.dup2(2, 1)
        writer = _FdWriter(private_fd)
    else:
        writer = _StreamWriter(stdout)
    sys.stdout = sys.stderr
    try:
        yield writer
    finally:
        # Text buffered into the real stdout object meanwhile (sys.__stdout__ held directly)
        # is flushed while fd 1 still points at stderr, so it cannot land after the protocol.
        for text_stream in (saved, sys.__stdout__):
            with contextlib.suppress(Exception):
                if text_stream is not None:
                    text_stream.flush()
        sys.stdout = saved
        if private_fd is not None:
            os.dup2(private_fd, 1)
            os.close(private_fd)


def run(make_dispatcher: DispatcherFactory, *, stdin: IO[bytes] | None,
        stdout: IO[bytes] | None, stop: threading.Event | None, concurrency: int,
        max_frame_bytes: int, max_queued: int, max_queued_bytes: int) -> None:
    """Serve until end of input, ``stop``, or a fatal stream error (raised)."""
    in_stream: IO[bytes] = stdin if stdin is not None else sys.stdin.buffer
    state = _State()
    inline = concurrency == 1
    with _protected_stdout(stdout) as out:
        gate = _WriteGate(out, state.set_fatal)
        dispatcher = make_dispatcher(gate.write, gate.write_batch)
        reader = FrameReader(in_stream, max_frame_bytes=max_frame_bytes, allow_batch=True)
        work = Intake(dispatcher, state.lock, max_queued=max_queued,
                      max_queued_bytes=max_queued_bytes, on_work=state.add_work)
        loop = _Loop(dispatcher, work, state, reader, inline=inline)
        gate.on_request = loop.handoff_now
        threads = [new_thread(f"mcpsync-server-worker-{k}", loop.thread_main)
                   for k in range(1, concurrency + 1)]
        first_reader = new_thread("mcpsync-server-reader", loop.thread_main)
        state.reading = first_reader
        threads.append(first_reader)
        for thread in threads:  # the reader last: no frame is answered before every worker exists
            thread.start()
        try:
            _supervise(state, stop)
        finally:
            with state.lock:
                state.stopping.set()
                work.wake_all()  # idle workers leave now, not at their next look
                # The holder of the reading role may be blocked in a read: never joined.
                blocked = state.reading if not state.inline else None
                if state.inline and state.reading is not None:
                    # Nobody reads any more; the handler on the reader is a worker's now,
                    # and is named as one (the idle worker, about to leave, takes the name).
                    holder = state.reading
                    other = next(t for t in threads if t is not holder)
                    holder.name, other.name = other.name, holder.name
            dispatcher.cancel_all()
            alive = join_all([t for t in threads if t is not blocked],
                             time.monotonic() + DRAIN_SECONDS)
            gate.close()
            stuck = [w.name for w in alive]
            if stuck:
                _stderr(f"{', '.join(stuck)} still running a handler {DRAIN_SECONDS:g} s after "
                        "cancellation; its output is discarded")
    if state.fatal is not None:
        _stderr(f"stopped serving: {state.fatal}")
        raise state.fatal


def _supervise(state: _State, stop: threading.Event | None) -> None:
    """Wait for ``stop``, a fatal error, or end of input with the received work answered."""
    drain_deadline: float | None = None
    with state.cond:
        while True:
            if stop is not None and stop.is_set():
                return
            if state.fatal is not None:
                return
            if state.eof:
                now = time.monotonic()
                if drain_deadline is None:
                    drain_deadline = now + DRAIN_SECONDS
                if state.pending == 0 or now >= drain_deadline:
                    return
            state.cond.wait(POLL_SECONDS)


class _Loop:
    """What every serving thread runs: read while holding the reading role, else work."""

    def __init__(self, dispatcher: Dispatcher, work: Intake, state: _State,
                 reader: FrameReader, *, inline: bool) -> None:
        self._dispatcher = dispatcher
        self._work = work
        self._state = state
        self._reader = reader
        self._inline = inline

    def thread_main(self) -> None:
        state = self._state
        me = threading.current_thread()
        stopping = state.stopping
        while not stopping.is_set():
            if state.reading is me:
                if not self._read_one(me):
                    return
            else:
                self._work_one(me)

    # -- the reading role ------------------------------------------------------------------

    def _read_one(self, me: threading.Thread) -> bool:
        """Read and place one line; False once reading is over (end of input, an error)."""
        state = self._state
        work = self._work
        reader = self._reader
        try:
            line = reader.read_line()
            if line is None or state.stopping.is_set():
                self._end_of_input()
                return False
            if self._inline and work.idle():  # the lone request: answered here
                item = work.claim(line)
                if item is not None:
                    self._answer_here(me, item)
            else:
                work.offer(line, state.stopping, POLL_SECONDS)
            return True
        except StreamError as exc:
            state.set_fatal(exc)
        except Exception as exc:  # a bug of ours; surface it as the fatal stream error it becomes
            _stderr("the reader failed:\n" + "".join(traceback.format_exception(exc)).rstrip())
            fatal = StreamError(f"the server's reader failed: {type(exc).__name__}: {exc}")
            fatal.__cause__ = exc
            state.set_fatal(fatal)
        self._end_of_input()
        return False

    def _end_of_input(self) -> None:
        state = self._state
        with state.cond:
            state.eof = True
            state.reading = None
            state.cond.notify_all()

    def _answer_here(self, me: threading.Thread, item: Item) -> None:
        """Answer a request on the thread that read it (the idle worker watches meanwhile)."""
        state = self._state
        work = self._work
        with state.lock:
            if state.stopping.is_set():
                return
            work.begin()
            state.inline = True
            state.inline_seq += 1
            if not state.watching:
                work.wake_idle()  # the first call in a while: the worker starts watching
        try:
            self._dispatcher.handle(*item)
        except Exception as exc:  # dispatch guards requests itself; this is a last resort
            _stderr("a worker failed:\n" + "".join(traceback.format_exception(exc)).rstrip())
        finally:
            with state.lock:
                work.finished()
                if state.reading is me:
                    state.inline = False
                    state.handoff = False
                # else the worker took the reading role over: this thread is the worker now

    def handoff_now(self) -> None:
        """A handler sent the client a request: if it runs on the reader, give the reading
        role away now, so that the answer is read while the handler waits for it."""
        if not self._inline:
            return
        state = self._state
        with state.lock:
            if state.inline and state.reading is threading.current_thread() and not state.handoff:
                state.handoff = True
                self._work.wake_idle()

    # -- the worker ------------------------------------------------------------------------

    def _work_one(self, me: threading.Thread) -> None:
        state = self._state
        work = self._work
        got = work.take(WATCH_SECONDS if state.watching else POLL_SECONDS)
        if got is None:
            if self._inline:
                self._look(me)
            return
        try:
            self._dispatcher.handle(*got)
        except Exception as exc:  # dispatch guards requests itself; this is a last resort
            _stderr("a worker failed:\n" + "".join(traceback.format_exception(exc)).rstrip())
        finally:
            with state.lock:
                work.finished()

    def _look(self, me: threading.Thread) -> None:
        """The idle worker's look at the reader: take the reading role from a handler that
        has run since the last look (or asked for it), else keep or stop watching."""
        state = self._state
        with state.lock:
            seq = state.inline_seq
            if (state.inline and not state.stopping.is_set() and state.reading is not None
                    and state.reading is not me
                    and (state.handoff or seq == state.seen_seq)):
                holder = state.reading
                state.reading = me
                state.inline = False
                state.handoff = False
                # Names follow roles: the thread that may block in a read is the reader.
                holder.name, me.name = me.name, holder.name
            elif seq != state.seen_seq or state.inline:
                state.watching = True
                state.quiet_looks = 0
            else:
                state.quiet_looks += 1
                if state.quiet_looks >= _WATCH_ROUNDS:
                    state.watching = False
            state.seen_seq = seq
