"""A :class:`Server` answering an in-process client (``mcpsync.connect(server)``).

The same router and intake as ``serve()`` (so the same eras, answers, cancellation and
back-pressure), minus what only a pipe needs: no reader thread (the client's writing thread
offers each frame to the intake itself) and no stdout guard, since nothing here writes to
stdout and a notebook's ``print()`` must keep working. The workers are named
``mcpsync-memory-worker-<server>-<k>``, are daemons, and are joined by :meth:`MemoryPeer.close`
(for at most 2 s: a handler that ignores its cancellation is left behind, and whatever it
sends after that is dropped).
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable

from mcpsync._threads import spawn
from mcpsync.jsonrpc import Message, serialize
from mcpsync.server._context import _stderr
from mcpsync.server._intake import Intake
from mcpsync.server._loop import DRAIN_SECONDS, POLL_SECONDS
from mcpsync.server._router import Dispatcher, Send
from mcpsync.transport.base import safe_name

__all__ = ["MemoryPeer"]

DispatcherFactory = Callable[[Send, Callable[[list[Message]], None]], Dispatcher]


class MemoryPeer:
    """One in-process connection to a server: its intake, its workers, its way back."""

    def __init__(self, make_dispatcher: DispatcherFactory,
                 deliver: Callable[[bytes | None], None], *, name: str, concurrency: int,
                 max_queued: int, max_queued_bytes: int) -> None:
        self._deliver = deliver
        self._lock = threading.Lock()          # the intake's lock
        self._write_lock = threading.Lock()    # the way back: closed once, checked per frame
        self._closed = False
        self._stopping = threading.Event()
        self._dispatcher = make_dispatcher(self._send, self._send_batch)
        self._intake = Intake(self._dispatcher, self._lock, max_queued=max_queued,
                              max_queued_bytes=max_queued_bytes, on_work=_ignore)
        safe = safe_name(name)
        self._workers = [spawn(f"mcpsync-memory-worker-{safe}-{k}", self._work)
                         for k in range(1, concurrency + 1)]

    def write(self, frame: bytes) -> None:
        """The client wrote ``frame``: queue it (waiting while the server is flooded)."""
        self._intake.offer(frame, self._stopping, POLL_SECONDS)

    def close(self) -> None:
        """Cancel every running handler, join the workers, then drop whatever comes later."""
        self._stopping.set()
        self._dispatcher.cancel_all()
        deadline = time.monotonic() + DRAIN_SECONDS
        for worker in self._workers:
            if worker is not threading.current_thread():
                worker.join(max(0.0, deadline - time.monotonic()))
        with self._write_lock:
            self._closed = True
        stuck = [w.name for w in self._workers if w.is_alive()]
        if stuck:
            _stderr(f"{', '.join(stuck)} still running a handler {DRAIN_SECONDS:g} s after "
                    "cancellation; its output is discarded")

    def _send(self, message: Message, cancelled: threading.Event | None = None, /) -> None:
        frame = serialize(message)   # outside the lock: a bad value raises before anything
        with self._write_lock:
            if self._closed or (cancelled is not None and cancelled.is_set()):
                return
            self._deliver(frame)

    def _send_batch(self, messages: list[Message]) -> None:
        frame = b"[" + b",".join(serialize(m) for m in messages) + b"]"
        with self._write_lock:
            if not self._closed:
                self._deliver(frame)

    def _work(self) -> None:
        intake = self._intake
        stopping = self._stopping
        while not stopping.is_set():
            got = intake.take(POLL_SECONDS)
            if got is None:
                continue
            item, calls = got
            try:
                self._dispatcher.handle(item, calls)
            except Exception as exc:  # the router guards requests itself; a last resort
                _stderr("a worker failed:\n"
                        + "".join(traceback.format_exception(exc)).rstrip())
            finally:
                with self._lock:
                    intake.finished()


def _ignore(delta: int) -> None:
    """No supervisor counts unanswered frames here: the client's close ends the peer."""
