"""The two kinds of threads that run user code for a session.

- :class:`Dispatcher`: one thread, ``mcpsync-dispatch-<name>``, that runs notification and
  progress callbacks one at a time, in the order the reader saw them. The queue is unbounded
  on purpose: dropping would break ordering, and blocking would stall the reader (and with it
  every response). A backlog past :data:`BACKLOG_WARNING` is logged once.
- :class:`CallbackPool`: up to four threads, ``mcpsync-callback-<name>-<k>``, created on first
  use (a :class:`mcpsync._threads.LazyPool`), for server->client requests (sampling,
  elicitation, roots, ``ping``). They answer by
  writing to the server, which must never happen on the reader (a full stdin pipe would
  deadlock against a server blocked on its full stdout), and a callback may call back into
  the client, which must never happen on the dispatcher (it would wait behind itself).

The dispatcher also settles requests that have a progress callback (``post_essential``), so a
caller never sees its result before the progress that preceded it; those jobs are never
dropped. Both log a raising job at WARNING with its traceback and carry on.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Final

try:  # queue's own C class, without the heapq import of queue.py
    from _queue import SimpleQueue
except ImportError:  # an interpreter without CPython's _queue
    from queue import SimpleQueue

from mcpsync._threads import LazyPool, spawn

__all__ = ["BACKLOG_WARNING", "POOL_SIZE", "CallbackPool", "Dispatcher"]

BACKLOG_WARNING: Final = 10_000
POOL_SIZE: Final = 4

_STOP: Final[Any] = object()

Job = Callable[[], object]


class Dispatcher:
    """Runs jobs in order on one lazily started daemon thread."""

    def __init__(self, name: str, logger: logging.Logger) -> None:
        self._name = name
        self._logger = logger
        self._queue: SimpleQueue[Any] = SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._stopped = False
        self._drop = False
        self._warned = False

    def post(self, job: Job) -> None:
        """Queue ``job``; it runs after every job posted before it."""
        if self._thread is None:
            self._start()
        self._queue.put(job)
        if not self._warned and self._queue.qsize() > BACKLOG_WARNING:
            self._warned = True
            self._logger.warning(
                "server %r: more than %d notifications are waiting for their callbacks; a "
                "callback is slower than the server's notifications (the queue keeps growing)",
                self._name, BACKLOG_WARNING)

    def post_essential(self, job: Job) -> None:
        """Queue ``job`` like :meth:`post`, but it is never dropped: a stopped dispatcher
        runs it at once in the calling thread, and a backlog dropped by :meth:`stop` still
        runs it (it settles a caller's request, see ``Session._feed``)."""
        with self._lock:
            if not self._stopped:
                if self._thread is None:
                    self._start_locked()
                self._queue.put(_Essential(job))
                return
        job()

    def _start(self) -> None:
        with self._lock:
            self._start_locked()

    def _start_locked(self) -> None:
        if self._thread is not None or self._stopped:
            return
        self._thread = spawn(f"mcpsync-dispatch-{self._name}", self._run)

    def _run(self) -> None:
        get = self._queue.get
        while True:
            job = get()
            if job is _STOP:
                return
            if self._drop and type(job) is not _Essential:
                continue
            try:
                job()
            except Exception:
                self._logger.warning("server %r: a notification callback raised",
                                     self._name, exc_info=True)

    @property
    def thread(self) -> threading.Thread | None:
        return self._thread

    def on_thread(self) -> bool:
        """Whether the calling thread is this dispatcher's thread."""
        thread = self._thread
        return thread is not None and thread is threading.current_thread()

    def stop(self, timeout: float = 1.0) -> None:
        """Let queued jobs run for up to ``timeout`` seconds, drop what is still queued then,
        and end the thread."""
        with self._lock:
            self._stopped = True
            thread = self._thread
        if thread is None:
            return
        self._queue.put(_STOP)
        if thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive():  # a long backlog: skip the rest (a job already running
                self._drop = True  # in user code cannot be interrupted)
                thread.join(0.1)


class _Essential:
    """A job that :meth:`Dispatcher.stop` must not drop (it settles a request)."""

    __slots__ = ("_job",)

    def __init__(self, job: Job) -> None:
        self._job = job

    def __call__(self) -> object:
        return self._job()


class CallbackPool(LazyPool):
    """At most :data:`POOL_SIZE` threads ``mcpsync-callback-<name>-<k>``, started only when a
    job finds none idle; a raising callback is logged with the server's name."""

    def __init__(self, name: str, logger: logging.Logger, size: int = POOL_SIZE) -> None:
        def report(exc: Exception) -> None:
            logger.warning("server %r: a server-request callback raised", name, exc_info=exc)

        super().__init__(f"mcpsync-callback-{name}", size, on_error=report)
