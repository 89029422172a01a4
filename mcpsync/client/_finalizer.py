"""Stopping the server of a ``Client`` that nobody can reach any more.

Re-running a notebook cell ``client = connect(...)`` rebinds the name and drops the old client
without closing it; so does a function that returns without ``close()``. Like an unclosed file
or socket, such a client is closed when it is garbage-collected, with a ``ResourceWarning``
that names the server. Three rules make that work:

- nothing of ours keeps a client alive: the session, its threads and the subscription thread
  reach the client only through weak references (:func:`weak_method`), so a client is freed as
  soon as the caller drops it (or at the next ``gc.collect()`` when it sits in a cycle);
- the finalizer returns at once: closing can take seconds (the server gets 2 s to exit on end
  of input, then 2 s after SIGTERM), and a finalizer runs wherever the collector happens to
  run, maybe inside a caller's hot loop. It hands the teardown to the ``mcpsync-reaper``
  thread, which exits as soon as it has nothing left to close;
- in a forked child the finalizer only drops the child's references (the server belongs to
  the parent).

Something outside mcpsync may still hold a client: IPython keeps every displayed value in
``Out[n]`` (and ``_``, ``__``), so a client shown as a cell's result lives until that history is
cleared (``%reset out``). Close clients explicitly, or use ``with``.
"""

from __future__ import annotations

import atexit
import collections
import logging
import os
import threading
import warnings
import weakref
from collections.abc import Callable
from typing import Any, Protocol

from mcpsync._threads import new_thread

__all__ = ["Closable", "watch", "weak_method"]

_log = logging.getLogger("mcpsync.client")


class Closable(Protocol):
    """What the finalizer closes: the client's resources, never the client itself."""

    def close(self) -> None: ...


class _Reaper:
    """One short-lived daemon thread that closes abandoned clients, one after the other.

    :meth:`submit` runs inside the garbage collector, which can run again at any allocation,
    on the same thread. So nothing under the (non-reentrant) lock allocates: a collection
    started there would finalize another client, re-enter ``submit`` and wait for the lock
    its own thread holds. The thread object is built after the lock is released; a nested
    ``submit`` meanwhile only queues its teardown, which the thread being started runs.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: collections.deque[Callable[[], None]] = collections.deque()
        self._running = False  # a thread is running, or being started, for the queue
        self._thread: threading.Thread | None = None

    def submit(self, close: Callable[[], None]) -> None:
        with self._lock:
            self._queue.append(close)
            if self._running:
                return
            self._running = True
        try:
            reaper = new_thread("mcpsync-reaper", self._run)
            with self._lock:
                self._thread = reaper
            reaper.start()
        except BaseException:
            with self._lock:
                self._running = False
                self._thread = None
            raise

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    self._running = False
                    self._thread = None
                    return
                close = self._queue.popleft()
            try:
                close()
            except Exception:
                _log.warning("closing an abandoned client failed", exc_info=True)

    def drain(self, timeout: float) -> None:
        """At interpreter exit: let the teardowns already handed over finish (bounded)."""
        with self._lock:
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def reset_after_fork(self) -> None:
        # The parent's reaper thread does not exist in the child; its lock may be held.
        self._lock = threading.Lock()
        self._queue = collections.deque()
        self._running = False
        self._thread = None


_reaper = _Reaper()
atexit.register(_reaper.drain, 5.0)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reaper.reset_after_fork)


def _abandoned(resources: Closable, name: str, pid: int) -> None:
    """The finalizer: the client was garbage-collected without ``close()``."""
    if os.getpid() != pid:
        resources.close()  # forked child: the session only drops its copies of the pipes
        return
    if not getattr(resources, "warn", True):
        # A connect() that failed: the client was never the caller's to close, and its
        # constructor already closed the session. Closing again is harmless (it finishes a
        # close a second Ctrl-C cut short); a warning would blame the caller.
        _reaper.submit(resources.close)
        return
    warnings.warn(f"mcpsync client for server {name!r} was not closed; its server is being "
                  "stopped now. Call close() or use 'with connect(...) as client:'",
                  ResourceWarning, stacklevel=1)
    _reaper.submit(resources.close)


def watch(client: object, resources: Closable, name: str) -> weakref.finalize[Any, Any]:
    """Close ``resources`` (on the reaper thread) when ``client`` is collected unclosed.

    ``resources`` must not refer to ``client``. Call ``detach()`` on the result when the
    client is closed normally. Not run at interpreter exit: the exit hook closes clients.
    """
    finalizer = weakref.finalize(client, _abandoned, resources, name, os.getpid())
    finalizer.atexit = False
    return finalizer


def weak_method(method: Callable[..., Any], gone: Callable[[], Any]) -> Callable[..., Any]:
    """``method`` (a bound method) called through a weak reference to its object; once the
    object is gone, ``gone()`` is returned (or raises) instead."""
    ref = weakref.WeakMethod(method)

    def call(*args: Any) -> Any:
        bound = ref()
        if bound is None:
            return gone()
        return bound(*args)

    return call
