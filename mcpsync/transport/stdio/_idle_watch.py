"""One thread that watches every idle stdio session: ``mcpsync-stdio-watch``.

A session reads its server's stdout on whichever thread needs an answer: a caller whose
call is the only one in flight reads its own answer (it *leads*), and a background reader
thread reads the rest (see ``mcpsync.session._engine``). A session used one call at a time
never needs that background reader, except to notice what the server says unasked while
nobody calls: a notification, a request, its exit. A thread per session only for that costs
a thread start per server, and at close a thread's wake-up, exit and join per server, which
was most of what closing many servers at once cost (``docs/performance.md``).

So where ``poll()`` exists, a stdio session starts no reader of its own: it registers its
server's stdout and pidfd here (:func:`watch`), and one thread polls every registered
session's descriptors. When one of them is ready, the thread asks the session what to do
(its ``on_ready``, called without any lock of this module held), which answers with a
number:

- ``KEEP`` (``0.0``): nothing to do (what made the poll return was read meanwhile);
- a positive number of seconds: leave this session's descriptors out of the poll that long
  (a caller holds the session's reader role, so what arrived is most likely that caller's
  answer, which it reads itself: a session called back to back would otherwise wake this
  thread on every answer);
- ``DROP`` (negative): let the session go (it started its own reader, or it is closing).

A session that started its reader calls :func:`unwatch` itself, as does a close before it
closes the descriptors: only this module's thread touches its ``poll()`` set and its map of
descriptors; other threads leave their changes in ``adds``/``removes`` under ``_lock`` and
wake it. What keeps it from asking a session about a descriptor that session has let go
(whose number may be another file's by then): :func:`unwatch` marks the watch ``left``
before the descriptors are closed, and the thread tests ``left`` before it asks; when the
wake-up is among a poll's results, the thread also takes the changes before it acts on the
others. An unwatch made while the session is being asked is the session's own to see (its
close changes its phase, under the session's lock, before it lets the watch go, and
``on_ready`` looks at the phase under that lock first). An event on a number that another
session registered since is asked of that session, which looks again (``on_ready`` polls
its own descriptors with no timeout before it acts): a wrong guess costs a look, never a
message.

The same thread wakes a session's blocked read: a transport whose sole caller's first read
blocks in ``read()`` itself rather than in a ``poll()`` (``StdioTransport.exchange``, see
``_blocking_read``: one system call and its Python fewer per call) hangs that read on the
session's watch (``IdleWatch.reader``). Such a read sees no deadline, no close and no Ctrl-C
simulated by ``_thread.interrupt_main()``; so while any watched read is blocked (its
``blocked_on``, the call's id, not 0), this thread looks at them every ``SCAN`` seconds and
wakes one found blocked on the same call at two looks in a row (``wake_blocked``): within
``2 * SCAN`` of the read's start, what the read's ``poll()`` waited at most (one
``MAIN_THREAD_SLICE``); the call's loop then polls, as before. When no read is blocked it
stops looking; a read that then blocks finds ``sleeping`` set and wakes it (the read stores
its id before it looks at ``sleeping``, the thread sets ``sleeping`` before it looks at the
ids: under the GIL one of the two sees the other's store). A watch let go, by
:func:`unwatch` (``StdioTransport.unwatch_idle``) or by its session's answer, or left by a
thread that ends by a bug, stops its reads from blocking (``stop()``: one blocked then is
woken and polls, as every later read does): nothing would wake them after that.

The thread starts with the first watch and ends once the last is let go: the
:func:`unwatch` that lets the last one go retires the generation (the next watch starts a
new one) and wakes its thread, which ends; :func:`join_ended`, called by a transport's close
with no lock held, joins the threads that ended. Modelled on the stderr hub (``_stderr``):
the same generations, the same wake-up pipe, the same care about a Ctrl-C while the thread
starts (a Ctrl-C after the thread began retires that generation at once).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import select
import threading
import time
from collections.abc import Callable, Sequence
from typing import Final, Protocol

from mcpsync._threads import new_thread

from ._wake_pipe import WakePipe

__all__ = ["DROP", "KEEP", "SCAN", "BlockingReader", "IdleWatch", "join_ended", "unwatch", "watch"]

KEEP: Final = 0.0
DROP: Final = -1.0

#: How often the thread looks at blocked reads while any is blocked: a read blocked at two
#: looks in a row is woken, so within two of these (the slice its poll() would have had).
SCAN: Final = 0.05

#: ``on_ready(force)``: what to do about a session whose descriptors are ready (see the
#: module's docstring). ``force`` is True only when the thread is ending by a bug: the
#: session must then start its own reader whatever the state.
OnReady = Callable[[bool], float]


class BlockingReader(Protocol):
    """A session's blocking read (see the module's docstring and ``_blocking_read``)."""

    blocked_on: int

    def wake_blocked(self, blocked: int) -> None:
        """Wake the read blocked on call ``blocked``, if it still is."""

    def stop(self) -> None:
        """No read blocks from now on; wake one blocked now."""

_log = logging.getLogger("mcpsync.transport.stdio")


class IdleWatch:
    """One session's registration: its descriptors and what to ask it. ``left`` is set
    (under ``_lock``) by :func:`unwatch`; ``gen`` is the generation that polls it."""

    __slots__ = ("dropped", "fds", "gen", "left", "on_ready", "reader")

    def __init__(self, fds: Sequence[int], on_ready: OnReady) -> None:
        self.fds = tuple(fds)
        self.on_ready = on_ready
        #: The session's blocking read, once its transport made one (see the module's
        #: docstring); read by the thread at each look.
        self.reader: BlockingReader | None = None
        self.gen: _Generation | None = None
        self.left = False
        #: Set by the thread as it stops polling this watch (its session's answer, an
        #: unwatch, its own end), before it looks at ``reader``: a reader hung on the watch
        #: after that looks at this and stops itself (``_open_blocking_read``).
        self.dropped = False


class _Generation(WakePipe):
    """One run of the thread ``mcpsync-stdio-watch``: its watches, wake-up pipe and the
    changes left for it. ``count`` is how many watches it holds that were not let go; the
    :func:`unwatch` that takes it to 0 retires the generation (no watch is added to it
    after that) and the thread ends at its next look at the changes."""

    def __init__(self, first: IdleWatch) -> None:
        self.first: IdleWatch | None = first
        self.adds: list[IdleWatch] = []
        self.removes: list[IdleWatch] = []
        self.count = 1
        self.retired = False
        # True while the thread waits with no look at blocked reads planned (see the
        # module's docstring): a read that blocks then wakes it (poke()).
        self.sleeping = False
        # Taken by the thread first thing, or by watch() when start() failed: whichever
        # takes it decides whether this generation runs (as the stderr hub's claim).
        self.claim = threading.Lock()
        self.wake_r = self.wake_w = -1
        self.thread = new_thread("mcpsync-stdio-watch", self._run)

    def request(self, queue: list[IdleWatch], watched: IdleWatch) -> None:
        """Under ``_lock``: leave a change for the thread and wake it (only the first change
        of a batch writes: the thread empties the pipe before it takes the batch)."""
        try:
            if not self.adds and not self.removes and not self.retired:
                with contextlib.suppress(OSError):
                    os.write(self.wake_w, b"x")
        finally:
            queue.append(watched)

    def wake(self) -> None:
        """Under ``_lock``: wake the thread (a retirement)."""
        with contextlib.suppress(OSError):
            os.write(self.wake_w, b"x")

    def poke(self) -> None:
        """A read is about to block while the thread looks at none: wake it, so that it
        looks (the thread clears ``sleeping`` once its poll returns). From any thread,
        rarely (a read after a pause of a look or more)."""
        with _lock:
            if self.sleeping and not self.retired:
                with contextlib.suppress(OSError):
                    os.write(self.wake_w, b"x")

    def _run(self) -> None:
        if not self.claim.acquire(False):  # start() failed and the generation was forgotten
            return
        first, self.first = self.first, None
        owners: dict[int, IdleWatch] = {}    # descriptor: its watch (paused ones too)
        paused: dict[IdleWatch, float] = {}  # left out of the poll until then
        # Each watched read: the call it was seen blocked on at the last look (0: none).
        seen: dict[IdleWatch, int] = {}
        next_look = 0.0   # when to look at the blocked reads next (0.0: not planned)
        poller = select.poll()
        try:
            poller.register(self.wake_r, select.POLLIN)
            if first is not None:
                self._add(first, owners, poller)
            while True:
                timeout = None
                now = time.monotonic()
                if paused:
                    for watched, until in list(paused.items()):
                        if until <= now:
                            del paused[watched]
                            if not watched.left:
                                for fd in watched.fds:
                                    poller.register(fd, select.POLLIN)
                    if paused:
                        timeout = max(0, math.ceil((min(paused.values()) - now) * 1000))
                if next_look and now >= next_look:
                    seen = self._look(owners, seen)
                    next_look = now + SCAN if seen else 0.0
                if not next_look:
                    # Nothing blocked at the last look: stop looking, unless a read blocked
                    # since (its id stored before it could see ``sleeping``).
                    self.sleeping = True
                    seen = self._look(owners, {})
                    if seen:
                        self.sleeping = False
                        next_look = now + SCAN
                if next_look:
                    wait = max(0, math.ceil((next_look - now) * 1000))
                    timeout = wait if timeout is None else min(timeout, wait)
                ready = poller.poll(timeout)
                if self.sleeping:
                    # Woken (by a poke, a change or a descriptor): look from now on.
                    self.sleeping = False
                    next_look = time.monotonic() + SCAN
                # The changes first: a watch let go since the poll began must not be asked
                # about its descriptors (their numbers may belong to another file by now).
                if any(fd == self.wake_r for fd, _ in ready):
                    with contextlib.suppress(OSError):  # emptied before the batch is taken
                        os.read(self.wake_r, 4096)
                    with _lock:
                        if self.retired:
                            return
                        adds, removes = self.adds, self.removes
                        self.adds, self.removes = [], []
                    for watched in removes:
                        self._drop(watched, owners, paused, poller)
                    for watched in adds:
                        self._add(watched, owners, poller)
                asked: set[IdleWatch] = set()
                for fd, _ in ready:
                    found = owners.get(fd)
                    if found is None or found.left or found in paused or found in asked:
                        continue
                    asked.add(found)
                    self._ask(found, owners, paused, poller)
        finally:
            self._end(owners)

    def _ask(self, watched: IdleWatch, owners: dict[int, IdleWatch],
             paused: dict[IdleWatch, float], poller: select.poll) -> None:
        """Ask a session what to do about its ready descriptors, and do it."""
        try:
            answer = watched.on_ready(False)
        except Exception:  # a bug in the session: it must read for itself from now on
            _log.error("the idle watch's look at a session failed", exc_info=True)
            answer = DROP
            try:
                watched.on_ready(True)
            except Exception:
                _log.error("a session left by the idle watch could not start its reader",
                           exc_info=True)
        if answer > 0:
            for fd in watched.fds:
                with contextlib.suppress(KeyError):
                    poller.unregister(fd)
            paused[watched] = time.monotonic() + answer
        elif answer < 0:
            self._drop(watched, owners, paused, poller)

    @staticmethod
    def _look(owners: dict[int, IdleWatch], seen: dict[IdleWatch, int]
              ) -> dict[IdleWatch, int]:
        """Wake each watched read blocked on the same call as at the last look (``seen``);
        return what is blocked now (empty: nothing, so stop looking)."""
        now_seen: dict[IdleWatch, int] = {}
        for watched in set(owners.values()):
            reader = watched.reader
            if reader is None or watched.left:
                continue
            blocked = reader.blocked_on
            if blocked:
                now_seen[watched] = blocked
                if seen.get(watched) == blocked:
                    # Woken once; noted as such, so that a read still blocked on it (its
                    # thread not run yet, or no byte could be written) is woken again
                    # two looks later, not at every look.
                    now_seen[watched] = -blocked
                    try:
                        reader.wake_blocked(blocked)
                    except Exception:  # a bug: the read waits for its answer as before
                        _log.error("waking a blocked read failed", exc_info=True)
        return now_seen

    @staticmethod
    def _add(watched: IdleWatch, owners: dict[int, IdleWatch],
             poller: select.poll) -> None:
        if watched.left:
            return
        for fd in watched.fds:
            owners[fd] = watched
            poller.register(fd, select.POLLIN)

    @staticmethod
    def _drop(watched: IdleWatch, owners: dict[int, IdleWatch],
              paused: dict[IdleWatch, float], poller: select.poll) -> None:
        _stop_reads(watched)
        was_paused = paused.pop(watched, None) is not None
        for fd in watched.fds:
            if owners.get(fd) is watched:
                del owners[fd]
                if not was_paused:
                    with contextlib.suppress(KeyError):
                        poller.unregister(fd)

    def _end(self, owners: dict[int, IdleWatch]) -> None:
        """The thread's last step: close the wake-up pipe. Should the thread end by a bug
        (not retired), each session still watched is told to read for itself."""
        global _current
        with _lock:
            crashed = not self.retired
            left = {id(w): w for w in (*owners.values(), *self.adds) if not w.left} \
                if crashed else {}
            self.adds, self.removes = [], []
            self.retired = True
            if _current is self:
                _current = None
            if self in _open:
                _open.remove(self)
            if crashed:
                _unjoined.append(self)
            self.close_wake_pipe()
        for watched in left.values():
            _stop_reads(watched)   # nothing looks at its reads any more
            try:
                watched.on_ready(True)
            except Exception:
                _log.error("a session left by the idle watch could not start its reader",
                           exc_info=True)


def _stop_reads(watched: IdleWatch) -> None:
    """A watch this thread lets go: its session's reads must not block any more. Marked
    ``dropped`` first, then ``reader`` looked at (a reader stores itself, then looks at
    ``dropped``): one of the two sees the other's store."""
    watched.dropped = True
    reader = watched.reader
    if reader is not None:
        try:
            reader.stop()
        except Exception:  # a bug: the read ends with its answer, or at the close
            _log.error("stopping a session's blocking reads failed", exc_info=True)


_lock = threading.Lock()
_current: _Generation | None = None
# Every generation whose wake-up pipe is open (the current one, and a retired one whose
# thread has not ended yet): a forked child closes their pipes.
_open: list[_Generation] = []
# Retired generations whose thread nobody joined yet (see join_ended).
_unjoined: list[_Generation] = []


def watch(fds: Sequence[int], on_ready: OnReady) -> IdleWatch:
    """Watch ``fds`` (a session's stdout, and its server's pidfd where there is one) for
    readability, asking ``on_ready`` what to do when one is ready; starts the thread if
    none runs (``Thread.start()`` waits for it to begin; nothing else here waits for it)."""
    global _current
    watched = IdleWatch(fds, on_ready)
    with _lock:
        gen = _current
        if gen is None:
            gen = _Generation(watched)
            watched.gen = gen
            try:
                _open.append(gen)
                gen.open_wake_pipe()
                gen.thread.start()
            except BaseException:
                # As the stderr hub: a thread that runs takes the claim first thing; taken
                # here, no thread ever runs this generation, so it is forgotten.
                watched.left = True   # the caller never gets it back: nobody would unwatch
                if gen.claim.acquire(False):
                    watched.gen = None
                    _forget(gen)
                else:
                    # The thread runs already, with this watch as its only one: retire it,
                    # as the unwatch of its last watch does.
                    gen.count = 0
                    gen.retired = True
                    _unjoined.append(gen)
                    gen.wake()
                raise
            _current = gen
        else:
            watched.gen = gen
            gen.count += 1
            gen.request(gen.adds, watched)
    return watched


def unwatch(watched: IdleWatch) -> None:
    """Let ``watched`` go: its descriptors are not polled, nor its session asked, once the
    thread takes the change, which it does before it acts on any poll's result. Safe from
    any thread, under the session's lock too; never waits. Idempotent."""
    global _current
    with _lock:
        if watched.left:
            return
        watched.left = True
        gen = watched.gen
        if gen is None or gen not in _open or gen.retired:
            return   # never polled, or a forked child's copy of the parent's state
        gen.count -= 1
        if gen.count == 0:
            gen.retired = True
            if _current is gen:
                _current = None
            _unjoined.append(gen)
            gen.wake()
        else:
            gen.request(gen.removes, watched)


def join_ended(timeout: float) -> None:
    """Join the threads of retired generations (not the calling thread): for a close, with
    no lock held, so that a closed client leaves no watch thread behind."""
    here = threading.current_thread()
    with _lock:
        gens = [gen for gen in _unjoined if gen.thread is not here]
        for gen in gens:
            _unjoined.remove(gen)
    deadline = time.monotonic() + timeout
    try:
        for gen in gens:
            if gen.thread.ident is not None:   # started
                gen.thread.join(max(0.0, deadline - time.monotonic()))
    finally:   # one still running (the join timed out or was interrupted): for a later join
        with _lock:
            _unjoined.extend(gen for gen in gens if gen.thread.is_alive())


def active_watch_thread() -> threading.Thread | None:
    """The watch thread of the current generation, if any (for tests and diagnostics)."""
    gen = _current
    return gen.thread if gen is not None else None


def _forget(gen: _Generation) -> None:
    """Under ``_lock``: a generation that will never run: close its wake-up pipe."""
    if gen in _open:
        _open.remove(gen)
    gen.close_wake_pipe()


def _reset_after_fork() -> None:
    """In a forked child no watch thread exists: forget every generation, close this
    process's copies of their wake-up pipes, and start afresh with a new lock."""
    global _current, _lock
    _current = None
    _lock = threading.Lock()
    gens = list(_open)
    _open.clear()
    _unjoined.clear()
    for gen in gens:
        gen.close_wake_pipe(after_fork=True)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)
