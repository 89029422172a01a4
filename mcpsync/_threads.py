"""The one place mcpsync starts threads: named, daemon, and easy to join on close.

Every thread the library starts must carry a ``mcpsync-`` name (so a thread dump, a leak
check or a user's ``threading.enumerate()`` tells ours apart), must be a daemon (so a server
that never answers cannot keep the interpreter alive at exit) and must be joined when its
owner closes. Written at each site, those three rules drift; here they are enforced once:

- :func:`new_thread` builds an unstarted thread and :func:`spawn` a started one; both refuse a
  name without the ``mcpsync-`` prefix.
- :func:`join_all` joins a set of threads against one deadline, so ``close()`` waits at most
  its budget however many threads there are (not a budget per thread).
- :class:`LazyPool` is a small pool whose threads start only when a job finds none idle, for
  work that must not run on the thread that hands it over (a reader, a dispatcher).
- :func:`run_parallel` runs one function over many items with a deadline for the whole run;
  ``concurrent.futures`` threads are not daemons and cannot be abandoned after a deadline.
  Only the Manager uses it, so it is defined in ``_parallel`` (its threads start through
  :func:`spawn`), which this module loads when ``run_parallel`` is first read from it.

Nothing here sits on a call's path: a thread is created when a connection, a pool or a
stuck write needs one, never per message.
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Final

try:  # queue's own C class, without the heapq import of queue.py
    from _queue import SimpleQueue
except ImportError:  # an interpreter without CPython's _queue
    from queue import SimpleQueue

if TYPE_CHECKING:
    from mcpsync._parallel import run_parallel as run_parallel

__all__ = ["PREFIX", "LazyPool", "held_here", "join_all", "new_thread", "run_parallel", "spawn"]

#: The prefix of every thread name mcpsync uses.
PREFIX: Final = "mcpsync-"

_log = logging.getLogger("mcpsync.threads")
_STOP: Final[Any] = object()


def new_thread(name: str, target: Callable[..., object], *args: Any) -> threading.Thread:
    """An unstarted daemon thread called ``name`` running ``target(*args)``.

    For owners that create the thread with themselves and start it later; others use
    :func:`spawn`. Raises ``ValueError`` for a name that does not start with ``mcpsync-``.
    """
    if not name.startswith(PREFIX) or len(name) == len(PREFIX):
        raise ValueError(f"thread name {name!r} must start with {PREFIX!r} and say what the "
                         f"thread is for (for example 'mcpsync-stdio-pump-demo')")
    return threading.Thread(target=target, args=args, name=name, daemon=True)


def spawn(name: str, target: Callable[..., object], *args: Any) -> threading.Thread:
    """Start a daemon thread called ``name`` running ``target(*args)`` and return it."""
    started = new_thread(name, target, *args)
    started.start()
    return started


def join_all(threads: Iterable[threading.Thread | None],
             deadline: float | None) -> list[threading.Thread]:
    """Join ``threads`` until ``deadline`` (a ``time.monotonic()`` instant; ``None`` waits
    as long as it takes) and return those still alive.

    The calling thread and threads never started are skipped (joining either would raise),
    so an owner can close itself from one of its own threads.
    """
    me = threading.current_thread()
    alive: list[threading.Thread] = []
    for each in threads:
        if each is None or each is me or each.ident is None:
            continue
        each.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        if each.is_alive():
            alive.append(each)
    return alive


def _log_job_error(exc: Exception) -> None:
    _log.warning("a background job raised", exc_info=exc)


class LazyPool:
    """At most ``size`` daemon threads ``<name>-1`` .. ``<name>-<size>``, each started only
    when a job is submitted and no thread is idle.

    Jobs run in submission order as threads free up. A job that raises is passed to
    ``on_error`` (by default logged at WARNING with its traceback) and the thread carries on.
    """

    def __init__(self, name: str, size: int, *,
                 on_error: Callable[[Exception], object] = _log_job_error) -> None:
        new_thread(name, _noop)  # refuses a bad name now, not on the first submit
        if size < 1:
            raise ValueError(f"a pool needs at least one thread, not {size}")
        self._name = name
        self._size = size
        self._on_error = on_error
        self._queue: SimpleQueue[Any] = SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idle = 0  # idle threads minus jobs waiting for one (negative: a backlog)
        self._lock = threading.Lock()
        self._stopped = False

    def submit(self, job: Callable[[], object]) -> bool:
        """Run ``job`` on a pool thread; ``False`` (and nothing runs) once stopped."""
        with self._lock:
            if self._stopped:
                return False
            self._queue.put(job)
            if self._idle == 0 and len(self._threads) < self._size:
                self._threads.append(spawn(f"{self._name}-{len(self._threads) + 1}", self._run))
            else:
                self._idle -= 1  # an idle thread, or the next to finish, takes this job
        return True

    def _run(self) -> None:
        get = self._queue.get
        while True:
            job = get()
            if job is _STOP:
                return
            try:
                job()
            except Exception as exc:
                self._on_error(exc)
            with self._lock:
                self._idle += 1

    @property
    def threads(self) -> list[threading.Thread]:
        """The threads started so far."""
        with self._lock:
            return list(self._threads)

    def stop(self, timeout: float = 1.0) -> list[threading.Thread]:
        """Refuse new jobs, end every thread after its current job and the jobs queued before
        the stop, waiting up to ``timeout`` seconds in all; return the threads still alive
        (stuck in a job, which cannot be interrupted)."""
        with self._lock:
            self._stopped = True
            threads = list(self._threads)
        if not threads:   # never used (most sessions' callback pools): nothing to end
            return []
        for _ in threads:
            self._queue.put(_STOP)
        return join_all(threads, time.monotonic() + timeout)


def _noop() -> None:
    """The target of the name check in :class:`LazyPool` (that thread is never started)."""


def held_here(lock: threading.RLock) -> bool:
    """Whether the calling thread holds ``lock``. An RLock has no public way to tell;
    ``threading.Condition`` asks it the same way (both its C and its Python version)."""
    is_owned: Callable[[], bool] = lock._is_owned  # type: ignore[attr-defined]
    return is_owned()


if not TYPE_CHECKING:   # the type checker sees the import at the top
    def __getattr__(name: str) -> Any:
        """``run_parallel``, importable from here as before, loaded on first access (PEP
        562): a client's import need not compile it."""
        if name == "run_parallel":
            return importlib.import_module("mcpsync._parallel").run_parallel
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        """``run_parallel`` too, so that ``dir()`` and ``help()`` list it (PEP 562)."""
        return sorted({*globals(), "run_parallel"})
