"""The threads and streams of ``Server.serve()``: reader, workers, drain, stdout protection.

Theory of operation:

- The reader thread (``mcpsync-server-reader``) reads lines and hands them to the bounded
  intake (``_server_intake``): at most ``max_queued`` requests (default 2 x concurrency) and
  ``max_queued_bytes`` (4 MiB) of lines wait for a worker, and as much again is read ahead
  undecoded; beyond that the reader stops reading and the pipe pushes back on the client. A
  cancellation for a running or queued request is applied by the reader as soon as it is read,
  even while the queue is full (see ``_server_intake``). The reader is a daemon and is never
  joined, because a thread blocked in a pipe read can be neither interrupted nor joined.
- Workers (``mcpsync-server-worker-<k>``) take frames from the queue and answer them. One
  worker (the default) answers in arrival order; N answer up to N at once, and responses may
  then leave out of order. Handlers always run on a worker, never on the thread that called
  ``serve()``, so that thread can notice ``stop`` within 100 ms whatever a handler does.
- The calling thread supervises. At end of input it lets the work already received finish, for
  at most 2 s; on ``stop`` it does not wait. It then sets every running handler's cancellation
  event, joins the workers (2 s at most), and closes the write gate: nothing is written after
  ``serve()`` returns, even by a handler that ignored its cancellation.
- ``print()`` cannot corrupt the stream: ``sys.stdout`` points at ``sys.stderr`` while serving,
  and when serving the process's own stdout, fd 1 itself is pointed at fd 2 (after keeping a
  private duplicate for the protocol), so child processes and C extensions cannot write into
  the stream either.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import IO

from mcpsync._threads import join_all, spawn
from mcpsync.jsonrpc import FrameReader, FrameWriter, Message, StreamError
from mcpsync.server._context import _stderr
from mcpsync.server._intake import Intake
from mcpsync.server._router import Dispatcher, Send

__all__ = ["DRAIN_SECONDS", "POLL_SECONDS", "run"]

POLL_SECONDS = 0.05
"""How often the supervisor looks at ``stop``: well inside the 100 ms docs/server.md promises."""
DRAIN_SECONDS = 2.0
"""How long running handlers get to finish when ``serve()`` returns."""

DispatcherFactory = Callable[[Send, Callable[[list[Message]], None]], Dispatcher]


class _WriteGate:
    """The only path to the output stream; closed once ``serve()`` is done.

    The check and the write happen under one lock, so once :meth:`close` returns no frame can
    start; a request's frame is also dropped here when its cancellation event is set by the
    time its turn comes (a cancel never waits for this lock, see ``_server_context``). A
    ``StreamError`` (the client went away) is recorded for the supervisor and swallowed here,
    so a handler's ``ctx.progress`` does not blow up in its face; the supervisor then ends
    ``serve()`` with that error.
    """

    def __init__(self, writer: FrameWriter, on_fatal: Callable[[StreamError], None]) -> None:
        self._writer = writer
        self._on_fatal = on_fatal
        self._lock = threading.Lock()
        self._closed = False

    def write(self, message: Message, cancelled: threading.Event | None = None, /) -> None:
        with self._lock:
            if self._closed or (cancelled is not None and cancelled.is_set()):
                return
            try:
                self._writer.write(message)
            except StreamError as exc:
                self._on_fatal(exc)

    def write_batch(self, messages: list[Message]) -> None:
        with self._lock:
            if self._closed:
                return
            try:
                self._writer.write_batch(messages)
            except StreamError as exc:
                self._on_fatal(exc)

    def close(self) -> None:
        with self._lock:
            self._closed = True


class _State:
    """What the reader, the workers and the supervisor share, under one lock.

    Three conditions share that lock so that each event wakes only who it concerns: ``cond``
    the supervisor (fatal error, end of input, the last unanswered frame answered); the
    intake's own conditions wake one idle worker per queued frame and the reader when room
    frees up. Nothing that can block (a write, a handler) runs while the lock is held.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.pending = 0  # frames queued or being answered
        self.eof = False
        self.fatal: StreamError | None = None
        self.stopping = threading.Event()

    def add_work(self, delta: int) -> None:
        """Under ``lock``: frames needing an answer entered (+) or left without one (-)."""
        self.pending += delta
        if self.pending == 0:
            self.cond.notify_all()  # the supervisor may be draining at end of input

    def set_fatal(self, exc: StreamError) -> None:
        with self.cond:
            if self.fatal is None:
                self.fatal = exc
            self.cond.notify_all()


@contextlib.contextmanager
def _protected_stdout(stdout: IO[bytes] | None) -> Iterator[IO[bytes]]:
    """Yield the protocol's output stream, with ``print()`` and fd 1 diverted to stderr."""
    saved = sys.stdout
    with contextlib.suppress(Exception):
        saved.flush()
    private_fd: int | None = None
    stream: IO[bytes]
    if stdout is None:
        private_fd = os.dup(1)  # not inheritable: children never get the protocol stream
        os.dup2(2, 1)
        stream = open(private_fd, "wb", buffering=0, closefd=False)  # noqa: SIM115
    else:
        stream = stdout
    sys.stdout = sys.stderr
    try:
        yield stream
    finally:
        # Text buffered into the real stdout object meanwhile (sys.__stdout__ held directly)
        # is flushed while fd 1 still points at stderr, so it cannot land after the protocol.
        for text_stream in (saved, sys.__stdout__):
            with contextlib.suppress(Exception):
                if text_stream is not None:
                    text_stream.flush()
        sys.stdout = saved
        if private_fd is not None:
            with contextlib.suppress(Exception):
                stream.close()
            os.dup2(private_fd, 1)
            os.close(private_fd)


def run(make_dispatcher: DispatcherFactory, *, stdin: IO[bytes] | None,
        stdout: IO[bytes] | None, stop: threading.Event | None, concurrency: int,
        max_frame_bytes: int, max_queued: int, max_queued_bytes: int) -> None:
    """Serve until end of input, ``stop``, or a fatal stream error (raised)."""
    in_stream: IO[bytes] = stdin if stdin is not None else sys.stdin.buffer
    state = _State()
    with _protected_stdout(stdout) as out_stream:
        gate = _WriteGate(FrameWriter(out_stream), state.set_fatal)
        dispatcher = make_dispatcher(gate.write, gate.write_batch)
        reader = FrameReader(in_stream, max_frame_bytes=max_frame_bytes, allow_batch=True)
        work = Intake(dispatcher, state.lock, max_queued=max_queued,
                      max_queued_bytes=max_queued_bytes, on_work=state.add_work)
        workers = [spawn(f"mcpsync-server-worker-{k}", _work_loop, dispatcher, work, state)
                   for k in range(1, concurrency + 1)]
        # The reader starts last, so that no frame is answered before every worker exists.
        spawn("mcpsync-server-reader", _read_loop, reader, work, state)
        try:
            _supervise(state, stop)
        finally:
            state.stopping.set()
            dispatcher.cancel_all()
            alive = join_all(workers, time.monotonic() + DRAIN_SECONDS)
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


def _read_loop(reader: FrameReader, work: Intake, state: _State) -> None:
    """The reader thread: lines to the intake, which decodes them and applies cancels."""
    try:
        while not state.stopping.is_set():
            line = reader.read_line()
            if line is None or state.stopping.is_set():
                break
            work.offer(line, state.stopping, POLL_SECONDS)
    except StreamError as exc:
        state.set_fatal(exc)
    except Exception as exc:  # a bug of ours; surface it as the fatal stream error it becomes
        _stderr("the reader failed:\n" + "".join(traceback.format_exception(exc)).rstrip())
        fatal = StreamError(f"the server's reader failed: {type(exc).__name__}: {exc}")
        fatal.__cause__ = exc
        state.set_fatal(fatal)
    finally:
        with state.cond:
            state.eof = True
            state.cond.notify_all()


def _work_loop(dispatcher: Dispatcher, work: Intake, state: _State) -> None:
    """A worker: answer frames until ``serve()`` stops."""
    while not state.stopping.is_set():
        got = work.take(POLL_SECONDS)
        if got is None:
            continue
        item, calls = got
        try:
            dispatcher.handle(item, calls)
        except Exception as exc:  # dispatch guards requests itself; this is a last resort
            _stderr("a worker failed:\n" + "".join(traceback.format_exception(exc)).rstrip())
        finally:
            with state.lock:
                state.add_work(-1)

