"""The single ``mcpsync-spawner`` thread that forks every server process.

Linux's ``PR_SET_PDEATHSIG`` fires when the *thread* that forked the child exits, not the
process. Forking from a caller's thread (or a pool's) would kill the server as soon as that
thread ends. So every child is forked by one daemon thread that starts on demand, lives while
any child it spawned is still held by a transport, and ends (and is joined) when the last one
is released.

Each thread generation has its own job queue: a job is never picked up by a thread that is
about to exit, which would tie the new child's life to a dead thread.

How the death signal is set: a ``preexec_fn`` makes ``subprocess`` give up ``vfork()`` for a
full ``fork()`` of this (large) process, whose at-fork hooks then run Python in the child:
about 2.3 ms per spawn on the benchmark VM. Where util-linux's ``setpriv`` can do it
(``setpriv --pdeathsig TERM -- <argv>``: no Python in the child, one extra exec of a small C
program, about 0.9 ms), the child is started through it on the ``vfork()`` path instead;
:func:`die_with_parent_wrapper` probes for it once. The ``prctl`` preexec stays the fallback.
"""

from __future__ import annotations

import collections
import functools
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from mcpsync._threads import new_thread

__all__ = [
    "EXEC_WRAPPER",
    "HAS_DEATH_SIGNAL",
    "JOIN_TIMEOUT",
    "active_thread",
    "die_with_parent_preexec",
    "die_with_parent_wrapper",
    "release",
    "spawn",
]

T = TypeVar("T")

#: How long the last ``release()`` waits for the spawner thread to end.
JOIN_TIMEOUT = 1.0

_PR_SET_PDEATHSIG = 1


def _load_prctl() -> Callable[[], Any] | None:
    """Resolve ``libc.prctl`` *before* any fork, so the child runs no import and no lookup.

    The returned callable is a ``functools.partial`` over the ctypes function: in the child
    it converts two small ints and makes the system call, nothing else. glibc's
    ``libc.so.6`` is tried by name first: ``ctypes.util.find_library`` runs ``ldconfig`` in a
    subprocess, which is left for other C libraries.
    """
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # here, not at import: most processes never need it (setpriv does the job)
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        import ctypes.util
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so", use_errno=True)
        except OSError:
            return None
    try:
        prctl = libc.prctl
    except AttributeError:
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    import signal

    return functools.partial(prctl, _PR_SET_PDEATHSIG, int(signal.SIGTERM))


_prctl: list[Callable[[], Any] | None] = []   # empty: not resolved yet; else [prctl or None]

#: Whether this platform has a parent-death signal at all (Linux's ``PR_SET_PDEATHSIG``),
#: known without loading ``ctypes``: where ``setpriv`` sets it, the preexec is never needed.
HAS_DEATH_SIGNAL = sys.platform.startswith("linux")


def die_with_parent_preexec() -> Callable[[], Any] | None:
    """The ``preexec_fn`` that makes the child get SIGTERM when the spawner (hence the
    process) dies, or ``None`` where the platform has no such thing.

    Resolved on the first call (on the spawner thread, before its fork), not at import, and
    only when ``setpriv`` cannot start the server: loading ``ctypes`` costs several
    milliseconds.
    """
    if not _prctl:
        _prctl.append(_load_prctl())   # two racing first calls make equal partials
    return _prctl[0]


#: Use ``setpriv --pdeathsig`` where it works (tests set this to False to force the preexec).
EXEC_WRAPPER = True
#: Where ``setpriv`` is looked for: fixed system paths, never the (child's or our) ``PATH``.
_SETPRIV_PATHS = ("/usr/bin/setpriv", "/bin/setpriv")
_wrapper_probe: list[list[str] | None] = []  # empty: not probed yet; else [prefix or None]


def _probe_setpriv() -> list[str] | None:
    """The ``setpriv`` prefix if one here knows ``--pdeathsig`` (util-linux 2.33+) and execs.

    Run once, on the spawner thread (it spawns a short-lived probe child).
    """
    if not sys.platform.startswith("linux"):
        return None
    for path in _SETPRIV_PATHS:
        if not os.access(path, os.X_OK):
            continue
        prefix = [path, "--pdeathsig", "TERM", "--"]
        try:
            done = subprocess.run([*prefix, path, "--version"], stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  env={"LC_ALL": "C"}, close_fds=True, timeout=5)
        except (OSError, subprocess.SubprocessError):
            continue
        if done.returncode == 0:
            return prefix
    return None


def die_with_parent_wrapper() -> list[str] | None:
    """The argv prefix that sets ``PR_SET_PDEATHSIG(SIGTERM)`` and execs the server, keeping
    ``subprocess`` on its ``vfork()`` path; ``None`` where there is none (use the preexec).

    Call it on the spawner thread: the first call probes ``setpriv`` by running it once.
    """
    if not EXEC_WRAPPER:
        return None
    if not _wrapper_probe:
        _wrapper_probe.append(_probe_setpriv())
    return _wrapper_probe[0]


class _Job:
    __slots__ = ("claim", "discard", "done", "error", "fn", "result")

    def __init__(self, fn: Callable[[], Any], discard: Callable[[Any], object] | None) -> None:
        self.fn = fn
        self.discard = discard
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        #: Who was first, of a caller that stopped waiting (a second Ctrl-C: "caller") and
        #: the spawner thread done with the job ("spawner"); each appends its name, and
        #: ``claim[0]`` decides who discards the child: the other one. An append is one
        #: atomic C call, with no Python code before it in which a Ctrl-C could land (a
        #: ``with lock:`` runs ``Condition.__enter__``, where one can), and whatever lands
        #: after it finds the claim made.
        self.claim: list[str] = []


class _Worker:
    """One generation of the spawner thread, with its own queue."""

    def __init__(self, cond: threading.Condition) -> None:
        self.cond = cond
        self.jobs: collections.deque[_Job] = collections.deque()
        self.stopping = False
        self.thread = new_thread("mcpsync-spawner", self._run)

    def _run(self) -> None:
        while True:
            with self.cond:
                while not self.jobs and not self.stopping:
                    self.cond.wait()
                if not self.jobs:
                    return
                job = self.jobs.popleft()
            run = not job.claim   # else nobody waits for it any more: no fork at all
            if run:
                try:
                    job.result = job.fn()
                except BaseException as exc:  # handed to the caller, who re-raises it
                    job.error = exc
            job.claim.append("spawner")   # after the result is stored: see spawn()
            job.done.set()
            if run and job.claim[0] == "caller":   # it stopped waiting first
                self._discard(job)

    @staticmethod
    def _discard(job: _Job) -> None:
        """Kill and reap the child of a job whose caller stopped waiting for it (see
        :func:`spawn`): nobody else ever will. ``discard`` must be bounded in time (the
        stdio transport's gives up after a few seconds on a server that SIGKILL cannot
        end): here no Ctrl-C can cut it short, and every later job waits behind it."""
        if job.error is None and job.discard is not None:
            try:
                job.discard(job.result)
            except BaseException:   # a thread of ours; nothing to hand it to
                import logging  # here: only ever needed for this

                logging.getLogger(__name__).warning(
                    "a server forked for a caller that was interrupted could not be "
                    "discarded", exc_info=True)


class _State:
    def __init__(self) -> None:
        self.cond = threading.Condition(threading.Lock())
        self.worker: _Worker | None = None
        self.live = 0


_state = _State()


def _reset_after_fork() -> None:
    """In a forked child the spawner thread does not exist; start afresh."""
    global _state
    _state = _State()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def spawn(fn: Callable[[], T], discard: Callable[[T], object] | None = None) -> T:
    """Run ``fn`` (which forks a child) on the spawner thread and return its result.

    On success the caller holds one reference and must call :func:`release` once the child
    is reaped; on failure the reference is dropped here and the error re-raised. If the
    caller is interrupted (Ctrl-C) while waiting, the spawn is let finish and its result is
    passed to ``discard`` (which should kill and reap the child) before re-raising. If a
    second Ctrl-C cuts that wait short, the job is claimed as abandoned (``_Job.claim``):
    the spawner thread then discards the child itself when the fork ends (or skips a fork
    not begun), so that no server is left running with nobody to end it. Claimed after the
    spawner thread was done with the job, the caller discards it itself, as after one
    Ctrl-C.
    """
    state = _state
    job = _Job(fn, discard)
    queued = False
    try:
        with state.cond:
            worker = state.worker
            if worker is None:
                worker = _Worker(state.cond)
                worker.thread.start()
                state.worker = worker
            # Counted and marked before the job is queued: a Ctrl-C is raised as a call
            # returns, and one as append() returned would otherwise leave a queued job (a
            # child forked later) that nobody waits for, discards or releases.
            state.live += 1
            queued = True
            worker.jobs.append(job)
            state.cond.notify_all()
        job.done.wait()
    except BaseException:
        if queued:
            try:
                try:
                    while not job.done.wait(0.05):  # the fork is already under way; let it end
                        pass
                except BaseException:
                    # Another Ctrl-C: the spawner thread discards the child, unless it was
                    # done with the job first (then it no longer looks), and this does.
                    job.claim.append("caller")
                    if job.claim[0] == "caller":
                        raise
                if job.error is None and discard is not None:
                    discard(job.result)
            finally:
                release()   # also when another Ctrl-C cuts the wait or the discard short
        raise
    if job.error is not None:
        release()
        raise job.error
    result: T = job.result
    return result


def release() -> None:
    """Drop one reference; the last one stops the spawner thread and joins it."""
    state = _state
    with state.cond:
        if state.live <= 0:
            return
        state.live -= 1
        worker = state.worker
        if state.live or worker is None:
            return
        worker.stopping = True
        state.worker = None
        state.cond.notify_all()
    if worker.thread is not threading.current_thread():
        worker.thread.join(JOIN_TIMEOUT)


def active_thread() -> threading.Thread | None:
    """The current spawner thread, if any (for tests and diagnostics)."""
    worker = _state.worker
    return worker.thread if worker is not None else None
