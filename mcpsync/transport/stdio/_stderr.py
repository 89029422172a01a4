"""The stderr drain of a stdio server: a ring of the newest bytes and a line splitter.

A server that writes to a full stderr pipe blocks, so stderr is always drained, however much
arrives, into a bounded ring (newest bytes kept). Lines are logged at DEBUG and handed to the
user's ``on_stderr``. Stderr is never an error signal: it only feeds error messages.

Where ``poll()`` exists and no ``on_stderr`` is set, one thread drains every server's pipe:
``mcpsync-stderr``, the hub, started with the first drain; it ends when it has let its last
pipe go, and the ``stop()`` that finds it ended joins it. The next drain starts a new one,
which may run for a moment alongside an ending one's last steps. A thread per server costs a
thread start and, at close, a thread end (about 45 us each with the kernel's part on a small
VM), which is most of what closing many servers costs. The hub polls every pipe and its own
wake-up pipe, reads at most one chunk per pipe per turn (a flooding server cannot starve the
others), and lets a pipe go by itself at EOF, so that ``stop()`` after the server exited
finds nothing left to hand over.

A drain with an ``on_stderr`` callback keeps a thread of its own, ``mcpsync-stdio-stderr-<name>``:
the callback is the user's code, and one that blocks (on a lock, a full queue, a slow
terminal) must not stop the other servers' pipes from being drained, since a server blocked
on a full stderr pipe stops answering. So does a drain whose logger is enabled for DEBUG
when it starts (its lines are logged on the draining thread, through the user's handlers);
a logger set to DEBUG only later logs from the shared thread. Without ``poll()`` (Windows
pipes) each drain has its own thread too, making blocking reads. Either way the thread
waits with ``poll()`` on the pipe *and* a stop descriptor where it can, so it ends on
request even when an escaped grandchild keeps the pipe open forever; the hub does the same
with its wake-up pipe.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import select
import threading
import time
from collections.abc import Callable

from mcpsync._threads import new_thread

from ._wake_pipe import WakePipe

__all__ = ["EXCERPT_BYTES", "EXCERPT_LINES", "StderrDrain", "active_hub_thread", "excerpt"]

EXCERPT_LINES = 20
EXCERPT_BYTES = 4096
_READ_SIZE = 65536
_readv = getattr(os, "readv", None)
_FINAL_READS = 16  # at stop, read at most this many more chunks (1 MiB)


def excerpt(text: str, *, lines: int = EXCERPT_LINES, max_bytes: int = EXCERPT_BYTES) -> str:
    """The last ``lines`` lines of ``text``, cut to at most ``max_bytes`` UTF-8 bytes (the
    newest end is kept)."""
    tail = "\n".join(text.rstrip("\n").split("\n")[-lines:])
    raw = tail.encode("utf-8", "replace")
    if len(raw) > max_bytes:
        tail = raw[-max_bytes:].decode("utf-8", "ignore")
    return tail


class StderrDrain:
    """Drains one stderr pipe: on the shared hub thread ``mcpsync-stderr``, or, with an
    ``on_stderr`` callback, a logger enabled for DEBUG at ``start()``, or without ``poll()``,
    on a thread of its own ``mcpsync-stdio-stderr-<name>``.

    ``stop()`` lets the pipe go after a last non-blocking drain (the hub lets it go by
    itself at EOF) and waits for that; the pipe is closed through ``closer`` once no thread
    can touch it any more.
    """

    def __init__(self, fd: int, *, name: str, logger: logging.Logger, ring_bytes: int = 65536,
                 on_stderr: Callable[[str], None] | None = None, use_poll: bool = True,
                 closer: Callable[[], None] | None = None) -> None:
        self._fd = fd
        self._ring = bytearray()
        self._ring_bytes = max(1, ring_bytes)
        self._partial = bytearray()
        self._lock = threading.Lock()
        self._io_lock = threading.Lock()
        # Set once the draining thread has taken the last of the pipe (under _io_lock, except
        # on the no-poll() thread, whose reads settle() never shares): settle() then reads
        # no more. Nobody waits for it, so it is a flag, not an Event (an Event is a
        # Condition, two locks and a deque made per server and freed at its close).
        self._done = False
        self._backlog: list[bytes] = []
        # Reads go into one buffer (under _io_lock) and only the bytes read are copied out:
        # os.read(fd, 64 KiB) would allocate 64 KiB per chunk and shrink it again. It is made
        # by the read after the first that returns bytes (see _read_chunk): most servers
        # write nothing to stderr, and their only read is the one that finds EOF as they
        # exit, so a buffer made here would be zero-filled at start and freed at close for
        # nothing.
        self._view: memoryview | None = None
        self._bufs: list[bytearray] | None = None
        self._brought = False  # a read brought bytes: the next one makes the buffer
        # Without poll() (Windows pipes) the thread does plain blocking reads: stop() can then
        # only join with a timeout, and settle() cannot read ahead. Best-effort.
        self._use_poll = use_poll
        if use_poll:
            # Non-blocking, because settle() may empty the pipe between our poll() and read().
            os.set_blocking(fd, False)
        self._logger = logger
        self._on_stderr = on_stderr
        self._stopped = False
        self._closer = closer
        self._released = False   # the closer was taken (see release())
        # A thread of its own whose start() a Ctrl-C cut short may begin after stop(): it
        # checks in under _exit_lock first, and one that stop() abandoned touches nothing.
        self._checked_in = False
        self._abandoned = False
        self._exit_lock = threading.Lock()
        self._exited = False
        self._close_at_exit = False
        self._let_go_done = False
        self._left = False  # stop() has left the hub (under the hub's lock)
        # On the hub: made by a stop() that hands the pipe over, set once the hub has let it
        # go. With a thread of its own: the stop pipe, the thread, and stop() joins that
        # thread.
        self._hub: _Hub | None = None
        self._gone: threading.Event | None = None
        self._thread: threading.Thread | None = None
        self._stop_r = self._stop_w = -1
        self._name = name
        self._shared = use_poll and on_stderr is None

    @property
    def thread(self) -> threading.Thread | None:
        """The thread draining this pipe: the hub's or its own (``None`` before start)."""
        if self._hub is not None:
            return self._hub.thread
        return self._thread

    def start(self) -> None:
        # Each line is logged on the thread that drains it: a logger enabled for DEBUG runs
        # its handlers there, and a slow one must hold up no other server's pipe either.
        if self._shared and not self._logger.isEnabledFor(logging.DEBUG):
            _join_hub(self)  # sets self._hub, under the hub's lock, before anything can fail
            return
        # Stored by the loop, with no call returning in between (see release()).
        for self._stop_r, self._stop_w in itertools.starmap(os.pipe, ((),)):
            break
        self._thread = new_thread(f"mcpsync-stdio-stderr-{self._name}", self._run)
        self._thread.start()

    def tail(self) -> str:
        """The whole ring, decoded with replacement."""
        with self._lock:
            data = bytes(self._ring)
        return data.decode("utf-8", "replace")

    def stop(self, timeout: float = 1.0) -> None:
        """Ask the drain to finish (it drains what is readable now) and wait for it.

        The descriptors (the stop pipe, and the stderr pipe through ``closer``) are closed as
        soon as no thread can use them: here when the wait succeeds, otherwise by the
        draining thread on its way out (when ``stop()`` is called from ``on_stderr`` or on
        the hub thread, when an escaped grandchild keeps a blocking read going, or when the
        wait is interrupted). A descriptor is never closed while a thread may still use it,
        since its number could be reused by then.
        """
        hub = self._hub
        stopping = exited = False
        # From the moment _stopped is set, the finally below sees the stop through: a Ctrl-C
        # anywhere after it still leaves the hub (or wakes the own thread) and has the pipe
        # closed, here or by the draining thread on its way out.
        try:
            with self._exit_lock:
                if self._stopped:
                    return
                self._stopped = stopping = True
                exited = self._exited
            if hub is not None:
                hub.leave(self, asked=not exited, timeout=timeout)
            else:
                self._stop_own(timeout)
        finally:
            if stopping:
                self._stopped_by(hub, exited)

    def _stop_own(self, timeout: float) -> None:
        """stop() of a drain with a thread of its own: wake the thread and join it."""
        with contextlib.suppress(OSError):  # the pipe is ours and empty
            os.write(self._stop_w, b"x")
        thread = self._thread
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            thread.join(timeout)

    def _stopped_by(self, hub: _Hub | None, exited: bool) -> None:
        """The end of stop(), also when it was interrupted: close the descriptors now if no
        thread can touch them any more, else leave that to the draining thread's exit.

        On the hub, usually the server has exited and the hub has let the pipe go at EOF
        already: then nothing was handed over, the pipe is just closed. Otherwise (an
        escaped grandchild holds the pipe, or the server still runs) stop() asked the hub to
        drain what is readable now and let go, and waited for that; once the hub has let go
        of its last pipe its thread has ended, and was joined there."""
        if hub is not None:
            if not self._left:  # interrupted before leaving: leave, without waiting
                hub.leave(self, asked=not exited, timeout=0)
            running = True
        else:
            with self._exit_lock:
                thread = self._thread
                # Started (its ident is set before start() returns) or checked in: it drains
                # the pipe and closes it. Neither (a start() that a Ctrl-C cut short): it may
                # still begin, and then leaves at once.
                running = self._checked_in or (thread is not None and thread.ident is not None)
                if thread is not None and not running:
                    self._abandoned = True
            if running and not self._exited:  # interrupted before the wake-up, maybe
                with contextlib.suppress(OSError):
                    os.write(self._stop_w, b"x")
        with self._exit_lock:
            if running and not self._exited:  # the thread closes them on its way out
                self._close_at_exit = True
                return
        self._close_fds()

    def release(self) -> bool:
        """After :meth:`stop`: if closing the descriptors is left to the caller's thread (the
        hub let the pipe go, or the own thread ended or never began, and no draining thread
        was told to close them on its way out), close whatever of them is still open and
        return True, so that the owner may close the stderr pipe again: a Ctrl-C may have cut
        the drain's own close short. False when a draining thread closes them."""
        with self._exit_lock:
            if not self._stopped or self._close_at_exit:
                return False
            if self._released:
                return True
            if self._hub is not None:
                free = self._exited
            else:
                free = self._thread is None or self._abandoned or self._exited
        if free:
            self._close_fds()
        return free

    def _close_fds(self) -> None:
        # Each number is forgotten by a store and closed in the next call, with no call
        # returning in between (where a Ctrl-C is raised): run again, this closes only what
        # is still open, never a number twice.
        for attr in ("_stop_r", "_stop_w"):
            fd = getattr(self, attr)
            if fd >= 0:
                vars(self)[attr] = -1
                os.close(fd)
        closer, self._closer = self._closer, None
        self._released = True
        if closer is not None:
            with self._io_lock:  # never under a settle() that is polling the pipe
                closer()

    def _exit(self) -> None:
        """Last thing the thread does: close the descriptors if stop() left that to us."""
        with self._exit_lock:
            self._exited = True
            close = self._close_at_exit
            gone = self._gone
        if gone is not None:
            gone.set()
        if close:
            self._close_fds()

    def abandon(self) -> None:
        """In a forked child (where no draining thread exists): close our copies of the stop
        pipe, and nothing else (the hub is forgotten at the fork)."""
        self._stopped = True
        self._hub = None
        for fd in (self._stop_r, self._stop_w):
            if fd >= 0:
                os.close(fd)
        self._stop_r = self._stop_w = -1

    def _run(self) -> None:
        with self._exit_lock:
            if self._abandoned:   # stop() came first and closed the pipes: not ours now
                return
            self._checked_in = True
        if not self._use_poll:
            try:
                while self._read_once():
                    pass
            finally:
                self._done = True
                self._flush_partial()
                self._exit()
            return
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        poller.register(self._stop_r, select.POLLIN)
        try:
            while True:
                ready = poller.poll()
                if any(fd == self._stop_r for fd, _ in ready):
                    self._drain_now()
                    return
                if not self._read_once():
                    return
        finally:
            self._hand_over()
            self._exit()

    def _hand_over(self) -> None:
        """Take what settle() read ahead and mark the drain done (under the I/O lock), then
        turn that backlog and the last partial line into log lines."""
        with self._io_lock:
            backlog = self._take_backlog()
            self._done = True
        for chunk in backlog:
            self._lines(chunk)
        self._flush_partial()

    def _let_go(self, *, final: bool) -> None:
        """On the hub thread, once it no longer polls the pipe: with ``final`` (stop() asked)
        read what is already there first; then hand over what settle() read ahead, flush
        the last partial line, and let ``stop()`` (or the hub, for it) close the pipe."""
        if self._let_go_done:
            return
        self._let_go_done = True
        try:
            if final:
                self._drain_now()
            self._hand_over()
        except Exception:
            self._logger.warning("draining stderr failed; the pipe is let go", exc_info=True)
        finally:
            self._done = True  # already, unless something above raised
            self._exit()

    def _read_guarded(self) -> bool:
        """``_read_once()`` on the hub: whatever goes wrong with one pipe is logged and that
        pipe let go (False), so the other servers' pipes are drained on."""
        try:
            return self._read_once()
        except Exception:
            self._logger.warning("draining stderr failed; the pipe is let go", exc_info=True)
            return False

    def _drain_now(self) -> None:
        """On stop: take what is already in the pipe, without waiting for more. Bounded, so
        that an escaped grandchild flooding the pipe cannot keep the thread alive."""
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        for _ in range(_FINAL_READS):
            if not poller.poll(0) or not self._read_once():
                return

    def _read_once(self) -> bool:
        """Read one chunk into the ring, then split it into lines. False at EOF."""
        # The read and the ring update happen under one lock, shared with settle(), so the
        # ring always holds the pipe's bytes in order.
        with self._io_lock:
            backlog = self._take_backlog()
            try:
                data = self._read_chunk()
            except BlockingIOError:  # settle() took it first
                data = None
            except OSError:
                data = b""
            if data:
                self._store(data)
        for chunk in backlog:
            self._lines(chunk)
        if data:
            self._lines(data)
        return data != b""

    def _read_chunk(self) -> bytes:
        """One read of the pipe (``b""`` at EOF), under ``_io_lock``: into the drain's buffer
        where ``os.readv`` exists and an earlier read brought bytes, else a plain
        ``os.read``."""
        bufs, view, readv = self._bufs, self._view, _readv
        if bufs is None or view is None or readv is None:
            if not self._brought or readv is None:
                # The first reads, or no os.readv (Windows: always). Once one brought bytes,
                # the server writes to stderr: later reads go into a buffer of our own. The
                # buffer is made by the next read, before its readv, not here between the
                # read and the return: a Ctrl-C there (in a settle() on the caller's thread)
                # would lose the bytes just read, and the window is kept as short as the
                # plain read's own.
                data = os.read(self._fd, _READ_SIZE)
                if data:
                    self._brought = True
                return data
            # Made and set under _io_lock, as every read runs, so two threads never make
            # one each.
            buf = bytearray(_READ_SIZE)
            self._view = view = memoryview(buf)
            self._bufs = bufs = [buf]
        return view[:readv(self._fd, bufs)].tobytes()

    def _take_backlog(self) -> list[bytes]:
        if not self._backlog:
            return []
        chunks = list(self._backlog)
        self._backlog.clear()
        return chunks

    def _store(self, data: bytes) -> None:
        with self._lock:
            ring = self._ring
            ring += data
            if len(ring) > self._ring_bytes:
                del ring[: len(ring) - self._ring_bytes]

    def settle(self, timeout: float) -> None:
        """Make sure what the server already wrote is in the ring (at most ``timeout`` s).

        Called once the server has exited, so that an error message quotes its last words
        even though the drain thread may be busy in ``on_stderr``. Whatever is still in the
        pipe is read here into the ring; its lines are left to the drain thread, in order.
        """
        if self._stopped or self._done or not self._use_poll:
            return
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        deadline = time.monotonic() + timeout
        while time.monotonic() <= deadline:
            with self._io_lock:
                if self._done or self._stopped or not poller.poll(0):
                    return
                try:
                    data = self._read_chunk()
                except OSError:
                    return
                if not data:
                    return
                self._store(data)
                self._backlog.append(data)

    def _lines(self, data: bytes) -> None:
        if self._on_stderr is None and not self._logger.isEnabledFor(logging.DEBUG):
            self._partial.clear()  # nobody wants lines: keep only the ring
            return
        part = self._partial
        part += data
        if b"\n" not in data:
            if len(part) > self._ring_bytes:
                self._emit(bytes(part[: self._ring_bytes]))
                part.clear()
            return
        *lines, rest = bytes(part).split(b"\n")
        part.clear()
        part += rest
        for line in lines:
            self._emit(line)

    def _flush_partial(self) -> None:
        if self._partial:
            self._emit(bytes(self._partial))
            self._partial.clear()

    def _emit(self, raw: bytes) -> None:
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        line = raw[: self._ring_bytes].decode("utf-8", "replace")
        self._logger.debug("%s", line)
        callback = self._on_stderr
        if callback is None:
            return
        try:
            callback(line)
        except Exception:
            self._logger.warning("on_stderr callback raised; stderr draining goes on",
                                 exc_info=True)


class _Hub(WakePipe):
    """One generation of the shared drain thread ``mcpsync-stderr``: the pipes it polls, its
    wake-up pipe, and the changes other threads left for it.

    Only the hub's own thread touches its ``poll()`` set and its map of drains; other threads
    append to ``adds``/``removes`` under ``_hub_lock`` and wake it. The thread ends by itself
    as it lets its last pipe go (at that pipe's EOF, or when its ``stop()`` asked), with no
    change pending: it marks the generation ``ended`` under the lock *before* that drain is
    marked let go, so the ``stop()`` that finds its drain let go also finds the generation
    ended, and joins the thread. An ended generation is never given a new drain (the next
    one starts a new generation), so a drain is never handed to a thread that is exiting.
    Closing one server or many thus costs no wake-up of the hub beyond the EOFs it drains.
    """

    def __init__(self, first: StderrDrain) -> None:
        # The drain that starts the generation is polled from the start: no request, no
        # wake-up, no lock taken by the new thread.
        self.first: StderrDrain | None = first
        self.adds: list[StderrDrain] = []
        self.removes: list[StderrDrain] = []
        self.ended = False
        # Taken by the thread first thing, or by _join_hub when start() failed: whichever
        # takes it decides whether this generation runs (see _join_hub).
        self.claim = threading.Lock()
        # Made by open_wake_pipe() (WakePipe), once the hub is in ``_open_hubs``, so that
        # whatever happens after (a Ctrl-C included) leaves the pipe where a close finds it.
        self.wake_r = self.wake_w = -1
        self.thread = new_thread("mcpsync-stderr", self._run)

    def request(self, queue: list[StderrDrain], drain: StderrDrain) -> None:
        """Under ``_hub_lock``: leave a change for the hub thread. Only the first change of
        a batch writes to the wake-up pipe; the hub empties that pipe *before* it takes the
        batch, so a change is never left behind with its wake-up already consumed. A full
        wake-up pipe is readable already: nothing is lost when a write fails. The change is
        left even when a Ctrl-C lands just after the write."""
        try:
            if not self.adds and not self.removes:
                with contextlib.suppress(OSError):
                    os.write(self.wake_w, b"x")
        finally:
            queue.append(drain)

    def leave(self, drain: StderrDrain, *, asked: bool, timeout: float) -> None:
        """``drain.stop()`` is done with the hub: with ``asked`` (the pipe is still polled),
        have the hub drain what is readable now and let the pipe go, and wait for that. If
        the generation has ended (this was its last pipe, or a later one has gone since),
        join its thread. All within ``timeout`` seconds; on the hub thread itself (a logging
        handler that closes a transport) nothing is waited for."""
        deadline = time.monotonic() + timeout
        gone = None
        if asked:
            with drain._exit_lock:  # only a hand-over needs an event to wait on
                if not drain._exited:
                    gone = drain._gone = threading.Event()
        with _hub_lock:
            if drain._left:  # a second try after an interrupted one: nothing to wait for
                return
            if asked:
                self.request(self.removes, drain)
            drain._left = True  # after the request: an interrupted one is tried again
        if self.thread is threading.current_thread():
            return
        if gone is not None:
            gone.wait(timeout)
        if self.ended:
            self.thread.join(max(0.0, deadline - time.monotonic()))

    def _last_gone(self, drains: dict[int, StderrDrain]) -> bool:
        """Before a drain is let go: True, and the generation ended, if it was the last."""
        global _hub
        with _hub_lock:
            if drains or self.adds:
                return False
            self.ended = True
            if _hub is self:
                _hub = None
            return True

    def _run(self) -> None:
        global _hub
        if not self.claim.acquire(False):  # start() failed and the hub was forgotten
            return
        first, self.first = self.first, None
        drains: dict[int, StderrDrain] = {}
        try:
            poller = select.poll()
            poller.register(self.wake_r, select.POLLIN)
            if first is not None:
                drains[first._fd] = first
                poller.register(first._fd, select.POLLIN)
            woken = False
            while True:
                if woken:
                    woken = False
                    with contextlib.suppress(OSError):  # empty it before taking the batch
                        os.read(self.wake_r, 4096)
                    with _hub_lock:
                        adds, removes = self.adds, self.removes
                        self.adds, self.removes = [], []
                else:
                    adds = removes = []
                for drain in adds:
                    drains[drain._fd] = drain
                    poller.register(drain._fd, select.POLLIN)
                for drain in removes:  # stop() asked: a last bounded drain, then let go
                    if drains.get(drain._fd) is drain:
                        poller.unregister(drain._fd)
                        del drains[drain._fd]
                        last = self._last_gone(drains)
                        drain._let_go(final=True)
                        if last:
                            return
                    else:  # never added (a Ctrl-C before its add was left): let it go
                        drain._let_go(final=False)
                for fd, _ in poller.poll():
                    ready = drains.get(fd)
                    if ready is None:
                        woken = woken or fd == self.wake_r
                        continue
                    # One read (64 KiB at most) per pipe per turn: a flood from one server
                    # cannot starve the others.
                    if not ready._read_guarded():  # EOF: the server closed stderr
                        poller.unregister(fd)
                        del drains[fd]
                        last = self._last_gone(drains)
                        ready._let_go(final=False)
                        if last:
                            return
        finally:
            # Normally nothing is left. Should this thread die, no drain may wait for it.
            with _hub_lock:
                left = {id(d): d for d in (*drains.values(), *self.adds, *self.removes)}
                if first is not None:
                    left[id(first)] = first
                self.adds, self.removes = [], []
                self.ended = True
                if _hub is self:
                    _hub = None
                _open_hubs.remove(self)
                self.close_wake_pipe()
            for drain in left.values():
                drain._let_go(final=False)


_hub_lock = threading.Lock()
_hub: _Hub | None = None
# Every generation whose wake-up pipe is open (under _hub_lock): the current one, and one
# that has ended but whose thread has not closed its pipe yet (so for a moment two
# generations' threads may run at once). A forked child closes them all.
_open_hubs: list[_Hub] = []


def _join_hub(drain: StderrDrain) -> None:
    """Register ``drain`` with the current hub, starting one if there is none.

    ``drain._hub`` is set under the lock before the thread is started or the request left,
    so that no Ctrl-C can leave the drain polled by a hub it does not know of: its
    ``stop()`` would then close the pipe under the hub (whose poll() and reads would go to
    whatever file next got that descriptor number).
    """
    global _hub
    with _hub_lock:
        hub = _hub
        if hub is None:
            hub = _Hub(drain)
            drain._hub = hub
            try:
                _open_hubs.append(hub)
                hub.open_wake_pipe()
                hub.thread.start()
            except BaseException:
                # start() failed, or was interrupted (a Ctrl-C, or whatever a signal handler
                # raised) before or after it created the thread. The claim tells which: a
                # thread that runs takes it first thing. Taken here, no thread will ever run
                # this generation (one created but not yet run finds it taken and ends at
                # once), so it is forgotten; else the thread runs already and polls this
                # drain's pipe: it is the hub, and the drain is let go through it like any
                # other (closing the pipe under it would hand its reads to whatever file next
                # got that descriptor number).
                if hub.claim.acquire(False):
                    _forget(hub, drain)
                else:
                    _hub = hub
                raise
            _hub = hub
        else:
            drain._hub = hub
            hub.request(hub.adds, drain)


def _forget(hub: _Hub, drain: StderrDrain) -> None:
    """A hub that will never run (``_join_hub`` took its claim): close its wake-up pipe and
    unhook the drain, whose ``stop()`` then closes its own pipe. Under ``_hub_lock``."""
    drain._hub = None
    if hub in _open_hubs:   # not yet, when the Ctrl-C came as it was being added
        _open_hubs.remove(hub)
    hub.close_wake_pipe()


def _reset_after_fork() -> None:
    """In a forked child no hub thread exists: forget the hub, close this process's copies
    of the wake-up pipes (an ending generation's too), and start afresh (a new lock too: the
    parent's may have been held by another thread at the fork)."""
    global _hub, _hub_lock
    _hub = None
    _hub_lock = threading.Lock()
    hubs = list(_open_hubs)
    _open_hubs.clear()
    for hub in hubs:
        hub.close_wake_pipe(after_fork=True)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def active_hub_thread() -> threading.Thread | None:
    """The shared drain thread, if one is running (for tests and diagnostics)."""
    hub = _hub
    return hub.thread if hub is not None else None
