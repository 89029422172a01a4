"""The stdio transport: one server subprocess, its pipes, and their teardown.

This is a *pull* transport. The session engine owns the reader role and calls
:meth:`StdioTransport.receive` from one thread at a time (its background reader, or a caller
reading its own response); the transport starts no stdout thread of its own (except where
pipes cannot be polled, on Windows: see ``_pump``). What it does own:

- locked writes, one frame per write, each by a deadline (see ``_writer``: stdin is
  non-blocking, so a server that stops reading cannot hold a caller past its timeout);
- reads of stdout into one reused buffer, decoded into frames;
- the process itself, inherited from ``_lifecycle``: spawning on the single
  ``mcpsync-spawner`` thread with a safe environment and a resolved command, the stderr
  drain (on the shared ``mcpsync-stderr`` thread, or a ``mcpsync-stdio-stderr-<name>`` of
  its own: see ``_stderr``), event-driven exit detection (``pidfd`` +
  ``poll`` where the OS has it) and the shutdown sequence of the MCP stdio transport,
  bounded in time.

This module keeps the per-call paths (``send_bytes`` and ``receive``) and their helpers, so
that what runs on every request can be read, and timed, in one place.

Thread contract: ``send``/``send_bytes`` are safe from any number of threads; ``receive`` is
called by one thread at a time; ``wake`` and ``close`` are safe from any thread, and ``close``
is idempotent and unblocks a pending ``receive``. ``exchange`` (the session's) is called by
the holder of its reader role only; its read takes no read lock, and ``receive`` and
``close`` wait for it by the count it adds to instead (see there).
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import math
import os
import select
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, NoReturn

from ...jsonrpc import (
    _LONG_TEXT,
    MAX_FRAME_BYTES,
    MISSING,
    AnswerSink,
    Batch,
    FrameDecoder,
    Message,
    ParseError,
    StreamError,
    _scan_once,
    _u_escape,
    serialize as _serialize,
)
from ..base import ReadBroke, TransportClosed, fuses, safe_name, takes_lines
from . import _idle_watch
from ._lifecycle import _MAX_POLL_MS, _MAX_POLL_S, Aside, ProcessLifecycle
from ._writer import FINISH_GRACE, FrameFinisher, WriteTimedOut, pour

if TYPE_CHECKING:
    from ._blocking_read import BlockingRead

__all__ = ["StdioTransport", "TransportClosed", "WriteTimedOut", "safe_name"]


#: One read takes up to this much of stdout: a response rarely needs two reads.
READ_SIZE = 256 * 1024


def _unstarted_read(buffer: bytearray, /) -> int | None:
    """``StdioTransport._read_into`` before ``start()`` gave it stdout's ``readinto``:
    receive() reads nothing then (it returns ``None`` first), so this is never called."""
    raise OSError(errno.EBADF, "the server's stdout is not open")


#: _other_ready's answer when receive() is to go on and read stdout.
_READ: Final = object()

#: Most receive() calls that poll without trying a read first, after reads found nothing.
_MAX_SKIP = 16

#: How long receive() waits for an exchange's read to end (see _exchange_ended) before it
#: returns ``[]`` (its callers then call it again): the exchange polls one slice at most,
#: and a blocking read is woken at once (a wake-up byte, written again every ``SCAN``).
_EXCHANGE_WAIT = 1.0

_floor = math.floor

# Arguments of the write lock's acquire(), for starmap (see send_bytes_until): try without
# waiting; wait for ever.
_NOWAIT = (False,)
_FOREVER = (True, -1.0)



class StdioTransport(ProcessLifecycle):
    """A server subprocess speaking newline-delimited JSON-RPC on its stdin/stdout.

    ``argv`` is the command (resolved at :meth:`start` against the child's ``PATH``);
    ``name`` is the display name used in errors, thread and logger names. ``env`` goes on top
    of a safe default environment (``None`` values remove keys), or on top of the whole
    parent environment with ``inherit_env``. ``max_frame_bytes`` bounds one stdout line;
    ``stderr_bytes`` is the size of the stderr ring; ``on_stderr`` gets each stderr line on
    the stderr thread; ``die_with_parent`` (Linux) makes the kernel SIGTERM the server when
    this process dies without closing it.

    Nothing happens until :meth:`start`; :meth:`close` must be called once done (the client
    does it), and is the only way the spawner thread's reference is released.
    """

    kind = "stdio"   # the session names its reader thread after it: mcpsync-stdio-reader-<name>

    def __init__(
        self,
        argv: Sequence[str],
        *,
        name: str,
        env: Mapping[str, str | None] | None = None,
        inherit_env: bool = False,
        cwd: str | None = None,
        max_frame_bytes: int = MAX_FRAME_BYTES,
        stderr_bytes: int = 65536,
        on_stderr: Callable[[str], None] | None = None,
        die_with_parent: bool = True,
    ) -> None:
        self.argv = list(argv)
        self.name = name
        self.pid = None
        # First: what the calls never read (the spawn's options, the lifecycle's and the
        # close's bookkeeping) lives there, so that this instance keeps its attributes
        # inline (see Aside); made before anything else, so that a close finds all of it.
        self._aside = Aside(name, dict(env) if env else {}, inherit_env, cwd, stderr_bytes,
                            on_stderr, die_with_parent)
        self._decoder = FrameDecoder(max_frame_bytes=max_frame_bytes)
        self._proc = None
        self._closing = False
        self._closed = False
        # True when receive() has nothing more to give: before start, at EOF, on a stream
        # error (kept in _rx_error, which is sticky) and once close() began. One flag keeps
        # the hot path to a single check.
        self._rx_done = True
        self._rx_error: StreamError | None = None
        self._write_lock = threading.Lock()
        #: Each next() is ``_write_lock.acquire(False)``, made from C: ``for ok in it: break``
        #: takes the lock and stores the result with no call returning in between, so a
        #: Ctrl-C cannot come after the lock was taken and before the taker knows it.
        self._try_write_lock = itertools.starmap(self._write_lock.acquire,
                                                 itertools.repeat(_NOWAIT))
        self._rx_lock = threading.Lock()
        #: Each next() is a blocking ``_rx_lock.acquire()`` made from C, returning True;
        #: receive() takes the lock by ``for held in self._rx_locking: break`` inside a
        #: ``try`` whose ``finally`` releases it if ``held``: as Ctrl-C safe as ``with``,
        #: and cheaper per call (as the session's own lock, see ``Session.__init__``).
        self._rx_locking = itertools.starmap(self._rx_lock.acquire, itertools.repeat(()))
        #: How many exchange() calls are inside the ``try`` around their read (non-zero
        #: while one may read): it reads without the read lock (see there), and receive()
        #: and the close wait for this to be 0 instead of for that lock. A count, not a
        #: flag: each exchange adds and takes away its own 1, so one that leaves (taken
        #: over) never clears what another one still reading added.
        self._exchanging = 0
        self._stdin_fd = -1
        self._stdout_fd = -1
        self._stderr_fd = -1
        self._wake_r = -1
        self._wake_w = -1
        self._pidfd = -1
        self._poller = None
        # stdout is read into this one buffer (os.readv) and only the bytes read are copied
        # out: an os.read(fd, READ_SIZE) allocates READ_SIZE bytes on every call, which is
        # beyond malloc's mmap threshold, and on some heap layouts each read then maps and
        # unmaps (or grows and trims) that much memory: about 14 us of page faults per call.
        self._rx_buf = bytearray(READ_SIZE)
        self._rx_view = memoryview(self._rx_buf)
        # receive()'s read: stdout's file object's readinto() once started (see
        # ProcessLifecycle.start); before that receive() reads nothing (_rx_done).
        self._read_into = _unstarted_read
        # stdout is non-blocking (poll platforms): receive() tries a read before polling
        # unless recent tries found nothing (then it skips the next _skip_eager tries).
        self._skip_eager = 0
        self._eager_misses = 0
        self._pump = None
        #: exchange()'s blocking first read and its wake-ups (see _blocking_read), once
        #: started where it can be had; None: every read polls first.
        self._blocking: BlockingRead | None = None

    # ------------------------------------------------------------------ properties

    @property
    def allow_batch(self) -> bool:
        """Whether JSON arrays are accepted as frames (2025-03-26); forwarded to the decoder."""
        return self._decoder.allow_batch

    @allow_batch.setter
    def allow_batch(self, value: bool) -> None:
        self._decoder.allow_batch = value

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has run (a transport is never reopened)."""
        return self._closed

    def route_answers(self, answer: AnswerSink | None) -> None:
        """Hand plain result responses read alone (one line in one read, an integer id)
        straight to ``answer(id, result)`` while it returns True, instead of as frames from
        :meth:`receive`; ``None`` stops it. The session's shortcut from the read buffer to
        the waiting call; ``answer`` runs in :meth:`receive`, on the reading thread."""
        self._decoder.answer = answer

    # ------------------------------------------------------------------ the idle watch

    def watch_idle(self, on_ready: Callable[[bool], float],
                   on_full: Callable[[], None]) -> bool:
        """Have the shared watch thread (``_idle_watch``) watch stdout and the server's
        exit for the session, so that it needs no reader thread while idle: ``on_ready``
        is asked what to do when either is ready, and ``on_full`` is called when a write
        finds stdin's pipe full (a reader must then drain stdout, see ``_write_rest``).
        False, and nothing watched, where that cannot be done (no ``poll()``: the pump
        thread reads stdout; not started; closing): the session keeps a reader of its own.
        """
        if self._pump is not None or self._poller is None or self._rx_done \
                or self._closing or self._aside.idle is not None:
            return False
        fds = (self._stdout_fd,) if self._pidfd < 0 else (self._stdout_fd, self._pidfd)
        self._aside.on_full = on_full
        self._aside.idle = _idle_watch.watch(fds, on_ready)
        return True

    def unwatch_idle(self) -> None:
        """Stop the idle watch (the session started its reader, or is closing), and with it
        the blocking read, which only the watch's thread wakes (see ``_blocking_read``)."""
        idle = self._aside.idle
        if idle is not None:
            self._aside.on_full = None
            # Let go first (``left`` stored), then the blocking read looked at: the first
            # exchange stores it before it looks at ``left`` (_open_blocking_read), so one
            # of the two sees the other's store and no read blocks unwatched.
            _idle_watch.unwatch(idle)
            self._stop_blocking_read()

    def idle_ready(self) -> bool:
        """Whether stdout is readable (or at EOF) or the server has exited, now: a poll
        that does not wait, for the session's answer to the idle watch (what woke the
        watch may have been read by a caller since). A poll object of its own: the
        transport's is polled by readers, and ``poll()`` refuses two polls at once."""
        idle = self._aside.idle
        if idle is None or self._closing:
            return False
        poller = select.poll()
        for fd in idle.fds:
            poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))

    # ------------------------------------------------------------------ writing

    def send(self, message: Message) -> None:
        """Write one message as one frame. Thread-safe; raises :class:`TransportClosed`."""
        self.send_bytes(_serialize(message))

    def send_bytes(self, frame: bytes) -> None:
        """Write one pre-serialised frame (without its newline), waiting as long as it takes
        (until :meth:`close`). See :meth:`send_bytes_until`."""
        self.send_bytes_until(frame, math.inf)

    @takes_lines   # it takes ``ended=True`` (the session looks for the mark)
    def send_bytes_until(self, frame: bytes, deadline: float, ended: bool = False) -> None:
        """Write one pre-serialised frame (without its newline) under the write lock, by
        ``deadline`` (a ``time.monotonic()`` value; ``math.inf``: no limit). With ``ended``
        true, ``frame`` is the whole line, its newline already at its end: the session's
        tool calls are serialised so, and appending the newline here would copy the line
        once more (about 460 instructions per call).

        The whole frame goes out before the lock is released, so frames from different
        threads never interleave. The usual case is one ``os.write``. When the server does
        not read its stdin and the pipe is full, raises ``WriteTimedOut`` at the deadline:
        with ``written == 0`` when nothing of the frame went out (still waiting for the lock,
        or for room in the pipe); otherwise a finisher thread writes the rest of the frame and
        tears the connection down if that is not done ``FINISH_GRACE`` seconds later (see
        ``_writer``). Raises :class:`TransportClosed` when the pipe is closed or broken.
        """
        data = frame if ended else frame + b"\n"
        lock = self._write_lock
        # Ctrl-C is raised where a call returns: after `ok = lock.acquire()`, it can leave the
        # lock taken with nobody to release it, and every later write would wait for it
        # for ever. So the lock is taken by a starmap() over acquire, read by a for loop: the
        # result is in `ok` before any call returns into this frame (and none returns
        # between the loop and the try), and `ok` is True exactly when this call must
        # release the lock (or, on a partial write, hand it over; then `rest` says who owns
        # it). `with lock:` would be as safe, but the lock must outlive this call when a
        # finisher thread takes a frame over.
        rest: list[bool] | None = None
        for ok in self._try_write_lock:  # noqa: B007 - the point is `ok`
            break
        try:
            try:
                if not ok:
                    for ok in itertools.starmap(  # noqa: B007 - as above
                            lock.acquire, (self._lock_wait(deadline, data),)):
                        break
                    if not ok:
                        raise WriteTimedOut(0, len(data))
                fd = self._stdin_fd
                if fd < 0 or self._closing:
                    raise self._closed_error()
                try:
                    written = os.write(fd, data)
                except BlockingIOError:  # the pipe is full: the server is not reading
                    written = 0
            except OSError as exc:  # BrokenPipeError: the server is gone
                raise self._broken(exc) from exc
            if written != len(data):
                rest = [True]
                self._write_rest(fd, data, written, deadline, rest)
                return
        except BaseException:
            if ok and (rest is None or rest[0]):
                if rest is not None and 0 < written < len(data):
                    # Ctrl-C as _write_rest began: the frame's tail must still go out, or
                    # the server would read the next frame glued to this half (as there).
                    self._finish_later(fd, memoryview(data), written, deadline)
                else:
                    lock.release()
            raise
        lock.release()

    @staticmethod
    def _lock_wait(deadline: float, data: bytes) -> tuple[bool, float]:
        """The arguments of ``acquire`` for a wait for the write lock until ``deadline``;
        raises ``WriteTimedOut`` when it has passed."""
        if deadline == math.inf:
            return _FOREVER
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise WriteTimedOut(0, len(data))
        return True, min(remaining, threading.TIMEOUT_MAX)

    def _closed_error(self) -> TransportClosed:
        closed = TransportClosed(f"writing to server {self.name!r}: the transport is closed",
                                 server=self.name)
        # A frame the server would not read made us close stdin: that is the reason, and the
        # session must report it even if this write, not the reader, meets the closed pipe.
        closed.reason = self._aside.stuck
        return closed

    def _broken(self, exc: OSError) -> TransportClosed:
        broken = TransportClosed(f"writing to server {self.name!r}: the pipe is closed ({exc})",
                                 server=self.name)
        broken.reason = self._aside.stuck
        return broken

    def _write_rest(self, fd: int, data: bytes, written: int, deadline: float,
                    owned: list[bool]) -> None:
        """The slow path of a write (the pipe was full), entered holding the write lock: wait
        for room until ``deadline``; then release the lock, or hand it to a finisher. From
        its first statement on, this method owns the lock (``owned[0]`` becomes False, so
        that the caller does not release it too); an exception before that (Ctrl-C as the
        call begins) leaves the release to the caller."""
        handed = False
        view = None
        try:
            owned[0] = False
            on_full = self._aside.on_full
            if on_full is not None:
                # No reader may be draining stdout (the session reads with its callers
                # and the idle watch only): start one, or this write may never finish.
                on_full()
            view = memoryview(data)
            try:
                if self._pump is not None:  # pragma: no cover - no poll() (Windows): stdin blocks
                    while written < len(data):
                        written += os.write(fd, view[written:])
                    return
                written = pour(fd, view, written, deadline, lambda: self._closing)
            except OSError as exc:
                raise self._broken(exc) from exc
            if written == len(data):
                return
            if self._closing:
                raise TransportClosed(f"writing to server {self.name!r}: the transport was "
                                      "closed during the write", server=self.name)
            if written:
                self._finish_later(fd, view, written, deadline)
                handed = True
            raise WriteTimedOut(written, len(data))
        except (TransportClosed, WriteTimedOut):
            raise
        except BaseException:
            # Ctrl-C (say) in the middle of a frame: the rest must still go out, or the
            # server would read the next frame glued to this half of it.
            if not handed and 0 < written < len(data):
                self._finish_later(fd, view or memoryview(data), written, deadline)
                handed = True
            raise
        finally:
            if not handed:
                self._write_lock.release()

    def _finish_later(self, fd: int, view: memoryview, written: int, deadline: float) -> None:
        grace = time.monotonic() + FINISH_GRACE
        finisher = FrameFinisher(
            name=self._aside.safe, fd=fd, view=view, written=written,
            until=grace if deadline == math.inf else max(deadline + FINISH_GRACE, grace),
            lock=self._write_lock, stop=lambda: self._closing, on_stuck=self._write_stuck)
        self._aside.finisher = finisher
        finisher.start()

    def _write_stuck(self, why: str) -> None:
        """Finisher thread, write lock held: a frame cannot be finished. The stream is lost:
        stdin is closed (later writes fail at once) and the reader raises the error next."""
        error = StreamError(f"writing to server {self.name!r}: a request could not be "
                            f"finished ({why}); the server is not reading its input, so the "
                            "connection is closed", server=self.name)
        self._aside.logger.warning("%s", error)
        # The error first: closing stdin makes the server exit, and a reader that then meets
        # EOF must report why the connection ended, not "the server closed its output".
        self._rx_error = error
        self._aside.stuck = error
        proc = self._proc
        self._close_fd("_stdin_fd", proc.stdin if proc is not None else None)
        self._rx_done = True
        self.wake()

    # ------------------------------------------------------------------ reading

    def receive(self, timeout: float | None) -> list[Message | Batch | ParseError] | None:
        """Wait up to ``timeout`` seconds (``None``: forever) for stdout and decode what came.

        Returns the decoded items (``[]`` on timeout or :meth:`wake`), or ``None`` at EOF and
        after :meth:`close`. Raises ``StreamError`` on an oversized frame or an I/O error.
        One thread at a time.
        """
        if self._pump is not None:
            return self._receive_pumped(timeout)
        held = False
        try:
            for held in self._rx_locking:  # noqa: B007 - Ctrl-C safe (see __init__)
                break
            if self._exchanging and not self._exchange_ended(_EXCHANGE_WAIT):
                # A caller's exchange() may still read (the count is not 0): this thread
                # took the reader role over as that caller's write ended (see exchange()).
                # Nothing is read meanwhile.
                return []
            if self._rx_done:
                if self._rx_error is not None:
                    raise self._rx_error
                return None
            # (``not``, not ``== 0``: the comparison would not be specialised here, an
            # EXTENDED_ARG sits between it and its jump; the same test for an int.)
            if not self._skip_eager:
                # Read first, poll only if nothing is there: on one CPU the server usually
                # answers while our request is being written, and this saves the poll.
                # stdout's FileIO.readinto(): None where os.readv() raises BlockingIOError
                # (the OSError CPython makes for EAGAIN is cleared in C, not raised into
                # Python: a miss still costs about 7,000 instructions, docs/performance.md,
                # "The eager read's miss, measured"), and about 200 instructions less per read.
                # Called through a local: an instance attribute called as a method is
                # looked up by the generic path (the transport's instance dict is a real
                # dict), about 200 instructions more.
                read_into = self._read_into
                try:
                    n = read_into(self._rx_buf)
                except (OSError, ValueError) as exc:  # ValueError: stdout's file closed
                    self._fail_rx(StreamError(f"reading from server {self.name!r}: {exc}",
                                              server=self.name), exc)
                if n is None:
                    # Nothing yet (the usual case when the server runs on another CPU): back
                    # off, so that a miss costs at most one failed read every _MAX_SKIP calls.
                    self._eager_misses = min(self._eager_misses * 2 + 1, _MAX_SKIP)
                    self._skip_eager = self._eager_misses
                else:
                    self._eager_misses = 0
                    if n:  # _got, inlined for the usual read
                        try:
                            data = self._rx_view[:n].tobytes()
                            if (blocking := self._blocking) is not None and blocking.injected:
                                return self._taken(blocking, data)   # see _blocking_read
                            return self._decoder.feed(data)
                        except StreamError as exc:
                            self._fail_rx(exc, None)
                    return self._got(n)
            else:
                self._skip_eager -= 1
            if timeout is None:
                ready = self._poller.poll()
            elif timeout < _MAX_POLL_S:
                # max(0, int(timeout * 1000 + 0.999)), the same value for every timeout at
                # about a third of the cost (max() parses its arguments as keywords, int()
                # is a class call): natively, a fifth to a half of the reads come after this poll.
                # (1000.0, not 1000: a float times a float is a specialised operation.)
                ms = _floor(timeout * 1000.0 + 0.999)
                ready = self._poller.poll(ms if ms > 0 else 0)
            else:  # math.inf, or beyond what poll() takes: a spurious [] in 24 days is fine
                ready = self._poller.poll(_MAX_POLL_MS)
            if not ready:
                return []
            if len(ready) != 1 or ready[0][0] != self._stdout_fd:
                # Not the usual wake-up (stdout alone readable): the wake-up pipe, the
                # pidfd, or more than one. Decided in a method of its own, so that the usual
                # one costs two subscripts and a comparison (about 250 instructions less
                # than the loop over the list), and so that the jump past this branch is
                # short enough for CPython 3.11 to specialise that comparison.
                stop = self._other_ready(ready)
                if stop is not _READ:
                    return stop  # type: ignore[no-any-return]
            elif self._closing:
                return None
            read_into = self._read_into   # a local: see above
            try:
                n = read_into(self._rx_buf)
            except (OSError, ValueError) as exc:  # ValueError: stdout's file closed
                self._fail_rx(StreamError(f"reading from server {self.name!r}: {exc}",
                                          server=self.name), exc)
            if n is None:  # pragma: no cover - poll() said readable
                return []
            if n:  # _got, inlined for the usual read
                try:
                    data = self._rx_view[:n].tobytes()
                    if (blocking := self._blocking) is not None and blocking.injected:
                        return self._taken(blocking, data)   # see _blocking_read
                    return self._decoder.feed(data)
                except StreamError as exc:
                    self._fail_rx(exc, None)
            return self._got(n)
        finally:
            if held:
                self._rx_lock.release()

    @fuses(send_bytes_until, receive)
    def exchange(self, line: bytes, call: Any, role: Any, timeout: float) -> Any:
        """A sole caller's tool call: its request ``line`` written (the newline at its end)
        and the first read made, in one call instead of :meth:`send_bytes_until` and then
        :meth:`receive`: two frames less per call, and the session's first-read
        bookkeeping. Only the session calls this, for a call that holds its reader role;
        ``call`` and ``role`` are its ``Call`` and ``Role`` (their ``id``, ``deadline``,
        ``holder`` and ``sending`` are read; ``role.sending`` is cleared after the write,
        as the session clears it after :meth:`send_bytes_until`).

        The write is :meth:`send_bytes_until`'s (``ended``), the same statements in the same
        order: the same write lock and wait by ``call.deadline``, the same
        ``WriteTimedOut`` and :class:`TransportClosed`, :meth:`_write_rest` and the
        finisher for a full pipe, the same hand-over on Ctrl-C. Then, only when the write
        went out at once and ``call`` still holds the role, one read is made: in the
        blocking read of ``_blocking_read`` once the session has one (no poll; ended by the
        answer, or by a wake-up byte: the idle watch's after 0.05 to 0.1 s, about
        ``timeout``, a close's at once), else as :meth:`receive` makes it (read first or
        poll first by the same back-off, at most ``timeout`` seconds of poll); either way
        without the read lock: taking and releasing it
        cost about 700 to 800 instructions per call more than the count that replaces it,
        of a call of about 51,000 to 54,000. What the lock gave the read is kept by
        ``_exchanging``, a count of the exchanges that may be reading: each adds 1 before
        the role and ``_rx_done`` are looked at, and its ``finally`` takes that 1 away.
        The close (``_release``) and the exit watch's finish look at it after storing
        ``_rx_done``, wake the poll and wait for it to be 0 before they close stdout, the
        wake-up pipe and the pidfd; a :meth:`receive` (a reader that took the role over as
        this write ended) looks at it after taking the read lock, and wakes and waits the
        same way before it reads. Under the GIL, of two threads that each store one
        attribute and then load the other's, one sees the other's store: so either this
        read is not made, or they wait for it (docs/performance.md, "The exchange's read
        without the read lock").

        A count rather than a flag, because two exchanges can be inside that ``try`` at
        once: a caller whose role was taken over while its thread waited for the CPU after
        its write, and the next caller, which claimed the role given up meanwhile and
        reads. A flag cleared by the first one to leave (it returns ``False``) would be
        clear while the other still polls, and a close would then close the descriptors
        under that poll; each exchange adding and taking away its own 1 cannot.
        ``self._exchanging += 1`` and ``-= 1`` are each a load, an ``int`` addition made in
        C and a store, with no call and no jump between the load and the store. On 3.10 to
        3.13 the interpreter looks for a pending signal (Ctrl-C) or a request to hand the
        GIL to another thread only at calls, backward jumps and a function's entry (3.10
        also as an exception handler is entered): so no other thread's ``+=`` or ``-=``
        can come between the load and the store, and no ``KeyboardInterrupt`` is raised
        after the addition and before the store. Free-threaded builds are not supported
        (as for the whole package, see ``mcpsync.session._engine``): there this would need
        an atomic counter. Returns:

        - ``False``: the role was taken over while the write blocked (the session claims it
          again, as after :meth:`send_bytes_until`);
        - ``[]`` when the write had to wait (for the lock or for room: the session's loop
          then reads by its own deadline), or nothing came within ``timeout``;
        - a ``dict``: the read was exactly one line, a plain result response whose integer
          id is ``call.id`` and whose result is an object, with nothing buffered before it:
          that result, for the session to settle the call with (``FrameDecoder.feed``'s
          usual case, its tests copied here: a frame and the answer hook less per call);
        - otherwise what :meth:`receive` would have returned for the same read (the
          decoder's frames, the answer hook run for other calls' answers; ``None`` at EOF
          or once closed). A read that failed with a ``StreamError`` is made sticky and
          reported as ``[]``: the session's next :meth:`receive` raises it, as it would
          have. Any other error of the read is raised as :class:`ReadBroke` from it.
        """
        deadline = call.deadline
        lock = self._write_lock
        # The write: send_bytes_until's, line for line (see there for the lock's idiom).
        rest: list[bool] | None = None
        waited = False
        for ok in self._try_write_lock:  # noqa: B007 - the point is `ok`
            break
        try:
            try:
                if not ok:
                    for ok in itertools.starmap(  # noqa: B007 - as above
                            lock.acquire, (self._lock_wait(deadline, line),)):
                        break
                    if not ok:
                        raise WriteTimedOut(0, len(line))
                    waited = True
                fd = self._stdin_fd
                if fd < 0 or self._closing:
                    raise self._closed_error()
                try:
                    written = os.write(fd, line)
                except BlockingIOError:  # the pipe is full: the server is not reading
                    written = 0
            except OSError as exc:  # BrokenPipeError: the server is gone
                raise self._broken(exc) from exc
            if written != len(line):
                rest = [True]
                self._write_rest(fd, line, written, deadline, rest)
        except BaseException:
            if ok and (rest is None or rest[0]):
                if rest is not None and 0 < written < len(line):
                    self._finish_later(fd, memoryview(line), written, deadline)
                else:
                    lock.release()
            raise
        if rest is None:
            lock.release()
        role.sending = None
        if waited or rest is not None or self._pump is not None:
            # No read here: the session's loop reads by its own deadline (or claims the
            # role again when it was taken over while the write blocked).
            return [] if role.holder is call else False
        # The read: receive()'s, with ``timeout`` a finite slice, without the read lock.
        # ``_exchanging`` counts it as one that may be under way: its 1 is added before
        # ``holder`` and ``_rx_done`` are looked at, and taken away by the ``finally``
        # whatever happens. A close stores ``_rx_done`` before it looks at the count, and a
        # reader that took the role over stores ``holder`` before its receive() looks at
        # it: under the GIL one of the two sides sees the other's store, so either this
        # read is not made, or the close (``_release``) and the receive wait, having woken
        # the poll, until the count is 0 (docs/performance.md, "The exchange's read
        # without the read lock"). Why ``+=`` is one step here: see the docstring.
        # Bytes the blocking read returned and nothing has taken yet (see _keep_read).
        raw: int | None = 0
        try:
            self._exchanging += 1
            if role.holder is not call:
                return False   # taken over while the write blocked
            if self._rx_done:
                return []   # the session's next receive() says what it is (EOF, an error)
            n = None
            blocking = self._blocking
            if blocking is not None:
                # The blocking read (see _blocking_read): no poll. The call's id is stored
                # before ``enabled`` is looked at (stop() clears that, then looks at the id)
                # and before the watch's ``sleeping`` is (the watch sets that, then looks at
                # the ids): of each pair, one sees the other's store. Inside the ``try``: a
                # Ctrl-C at poke()'s call leaves no id behind.
                try:
                    blocking.blocked_on = call.id
                    if blocking.enabled:
                        if blocking.gen.sleeping:
                            blocking.gen.poke()
                        # The count is stored by the loop with no call returning in between
                        # (where a pending exception is raised): one that came during the
                        # wait (a simulated Ctrl-C, which no system call sees) is raised by
                        # the next call, with ``raw`` naming the bytes read (_keep_read).
                        for raw in blocking.reads:
                            n = raw
                            break
                except (OSError, ValueError) as exc:  # ValueError: closed
                    self._fail_rx(StreamError(f"reading from server {self.name!r}: {exc}",
                                              server=self.name), exc)
                finally:
                    blocking.blocked_on = 0
            if n is None:
                # No blocking read (none made, or stopped): read first or poll first.
                if blocking is None and not self._aside.blocking_tried:
                    # The first exchange of a session its idle watch looks after: make the
                    # blocking read (once; the next exchange uses it), and read as before.
                    self._open_blocking_read()
                if not self._skip_eager:
                    read_into = self._read_into   # a local: see receive()
                    try:
                        n = read_into(self._rx_buf)
                    except (OSError, ValueError) as exc:  # ValueError: stdout's file closed
                        self._fail_rx(StreamError(f"reading from server {self.name!r}: {exc}",
                                                  server=self.name), exc)
                    if n is None:   # receive()'s back-off
                        self._eager_misses = min(self._eager_misses * 2 + 1, _MAX_SKIP)
                        self._skip_eager = self._eager_misses
                    else:
                        self._eager_misses = 0
                else:
                    self._skip_eager -= 1
            if n is None:
                ms = _floor(timeout * 1000.0 + 0.999)
                ready = self._poller.poll(ms if ms > 0 else 0)
                if not ready:
                    return []
                if len(ready) != 1 or ready[0][0] != self._stdout_fd:
                    stop = self._other_ready(ready)
                    if stop is not _READ:
                        return stop
                elif self._closing:
                    return None
                read_into = self._read_into
                try:
                    n = read_into(self._rx_buf)
                except (OSError, ValueError) as exc:
                    self._fail_rx(StreamError(f"reading from server {self.name!r}: {exc}",
                                              server=self.name), exc)
                if n is None:  # pragma: no cover - poll() said readable
                    return []
            if n:
                data = self._rx_view[:n].tobytes()
                raw = 0   # from here the bytes are in ``data``
                if blocking is not None and blocking.injected:
                    if blocking.held:   # frames a Ctrl-C left (_keep_read) come first
                        if self._closing:
                            return None
                        try:
                            return self._taken(blocking, data)
                        except StreamError as exc:
                            self._fail_rx(exc, None)
                    data = blocking.take(data)   # a wake-up's byte (see _blocking_read)
                    if not data:
                        # Woken: closed (as the poll's wake-up says it), or the session's
                        # loop decides (its deadline, the server's exit, a Ctrl-C).
                        return None if self._closing else []
                    n = len(data)
                dec = self._decoder
                # FrameDecoder.feed's usual case, for this call's answer alone (the same
                # tests in the same order; tests/transport/stdio/test_stdio_exchange.py holds the
                # two copies to the same decision for every shape of line).
                if not dec._buf and dec._error is None and 0 < n - 1 <= dec._max \
                        and (cut := data.partition(b"\n"))[1] and not cut[2]:
                    try:
                        text = cut[0].decode()
                        del cut
                        obj, end = _scan_once(text, 0)
                    except Exception:  # as feed(): not UTF-8, not JSON...
                        obj = None
                        text = ""
                        end = -1
                    if type(obj) is dict and end == len(text) and (
                            "\\" not in text or (
                                "\\u" not in text if end < _LONG_TEXT
                                else _u_escape(text) is None)) and len(obj) == 3:
                        rid = obj.get("id")
                        if type(rid) is int and rid and rid == call.id \
                                and obj.get("jsonrpc") == "2.0":
                            res = obj.get("result", MISSING)
                            if type(res) is dict:
                                return res
                try:
                    return dec.feed(data)
                except StreamError as exc:
                    self._fail_rx(exc, None)
            return self._got(n)
        except StreamError:
            return []   # sticky (_fail_rx): the session's next receive() raises it
        except Exception as exc:   # a bug: the session loses the connection
            raise ReadBroke(f"reading from server {self.name!r}") from exc
        except BaseException:
            # A Ctrl-C (or another exception set from outside) raised as the blocking read
            # returned: what it read is decoded and held for the next read, not lost.
            if raw and blocking is not None:
                self._keep_read(blocking, raw)
            raise
        finally:
            # The first statement here, so that a Ctrl-C cannot leave this exchange's 1 in
            # the count (a close would then wait for it in vain): on 3.11 and later none is
            # raised between the end of the read and this store (no call returns before
            # it). On 3.10 a pending signal may be raised as a handler is entered, this
            # ``finally`` too; the ``except`` clauses in front are entered first when the
            # read raised, and take such a signal there, so only a second one within those
            # few bytecodes gets through. The read lock's ``finally: if held: release()``
            # had the same exposure.
            self._exchanging -= 1

    def _exchange_ended(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for every :meth:`exchange`'s read to end (the count
        ``_exchanging`` back to 0), having woken its poll; True once it has. For
        :meth:`receive` and the close, which find the count non-zero only in a race (a
        role taken over, a close) and so rarely that a sleep of a fraction of a millisecond
        between two looks costs nothing: the exchange takes no lock that could be waited
        on instead, which is what it saves."""
        self.wake()
        deadline = time.monotonic() + timeout
        again = time.monotonic() + _idle_watch.SCAN
        while self._exchanging:
            now = time.monotonic()
            if now >= deadline:
                return False
            if now >= again:
                # A blocking read's wake-up byte may not have been written (no descriptor
                # to be had for its writer, say): try again, as the watch's looks do.
                self.wake()
                again = now + _idle_watch.SCAN
            time.sleep(0.0005)
        return True

    def _other_ready(self, ready: list[tuple[int, int]]) -> Any:
        """What :meth:`receive` does after a poll that found something other than stdout
        alone readable: ``_READ`` to go on and read stdout, else what to return."""
        readable = exited = False
        for fd, _ in ready:
            if fd == self._stdout_fd:
                readable = True
            elif fd == self._wake_r:
                self._drain_wake()
            else:
                exited = True  # the pidfd: the server process has exited
        if self._closing:
            return None
        if not readable:
            if exited:
                # The server is gone and everything it wrote has been read; stdout is not
                # at EOF only because an escaped grandchild holds it. That is the end.
                return self._end()
            return []
        return _READ

    def _got(self, n: int) -> list[Message | Batch | ParseError] | None:
        """Decode the ``n`` bytes just read into the buffer (0: EOF). Under ``_rx_lock``
        (from :meth:`receive`), or inside an :meth:`exchange`'s read, which takes no lock:
        there the reader role and ``_exchanging`` keep every other reader out."""
        try:
            if n:
                data = self._rx_view[:n].tobytes()
                if (blocking := self._blocking) is not None and blocking.injected:
                    return self._taken(blocking, data)   # see _blocking_read
                return self._decoder.feed(data)
            return self._end()
        except StreamError as exc:
            self._fail_rx(exc, None)

    def _taken(self, blocking: BlockingRead, data: bytes) -> list[Message | Batch | ParseError]:
        """What a read got, while ``blocking.injected`` is not 0: the frames a Ctrl-C left
        held (:meth:`_keep_read`), then ``data`` decoded without the wake-up bytes in it
        (see ``_blocking_read``). Raises ``StreamError`` as the decoder does."""
        held = blocking.take_held()   # first: its count is not a byte for take()
        data = blocking.take(data)
        frames = self._decoder.feed(data) if data else []
        return held + frames if held else frames

    def _keep_read(self, blocking: BlockingRead, n: int) -> None:
        """An exception came as the blocking read returned its ``n`` bytes, before anything
        took them: a simulated Ctrl-C (``_thread.interrupt_main()``) or an exception set in
        this thread from outside, which no system call sees, is raised at the first call
        that returns after the read (on 3.10, at a step before that, still after the
        count is stored). Whatever the server said in them is decoded now and
        held on ``blocking`` for the next read, whichever thread makes it (:meth:`_taken`),
        and a wake-up byte written so that one comes by: the next call's, or the reader
        the idle watch starts for a session left idle. Else a request of the server's that
        came then would never be answered, and a wake-up byte read then never counted back."""
        data = self._rx_view[:n].tobytes()
        if blocking.injected:
            data = blocking.take(data)
        if data:
            try:
                frames = self._decoder.feed(data)
            except StreamError as exc:
                with contextlib.suppress(StreamError):
                    self._fail_rx(exc, None)   # sticky: the session's next receive() raises it
                return
            if frames:
                if not blocking.held:
                    blocking.injected += 1   # counted while frames are held: every read looks
                blocking.held = blocking.held + frames
        if blocking.held:
            # (Also when only a byte was read: it may have been the one written for frames
            # held by an earlier such Ctrl-C.) Where none can be written (no descriptor),
            # the frames go out with the next read's bytes: the next call's answer, or
            # whatever the server says next.
            blocking.inject()

    def _end(self) -> list[Message | Batch | ParseError] | None:
        """EOF on stdout. Under ``_rx_lock``, or inside an :meth:`exchange`'s read (which
        the reader role and ``_exchanging`` keep the only reader, see :meth:`_got`). A
        write that could not be finished closed the stream on purpose: its error is the
        reason, so it is raised rather than a plain EOF. Frames a Ctrl-C left held
        (:meth:`_keep_read`) come first."""
        self._rx_done = True
        if self._rx_error is not None:
            raise self._rx_error
        frames = self._decoder.finish()
        blocking = self._blocking
        if blocking is not None and blocking.held:
            return blocking.take_held() + frames
        return frames or None

    def _receive_pumped(self, timeout: float | None
                        ) -> list[Message | Batch | ParseError] | None:
        """receive() where the pump thread reads stdout (no poll() on this platform)."""
        pump = self._pump
        assert pump is not None
        with self._rx_lock:
            if self._rx_done:
                if self._rx_error is not None:
                    raise self._rx_error
                return None
            item = pump.get(None if timeout is None or timeout >= _MAX_POLL_S else timeout)
            if self._closing:
                return None
            if item is None:
                return []
            try:
                if isinstance(item, OSError):
                    self._fail_rx(StreamError(f"reading from server {self.name!r}: {item}",
                                              server=self.name), item)
                if item:
                    return self._decoder.feed(item)
                return self._end()
            except StreamError as exc:
                self._fail_rx(exc, None)

    def _fail_rx(self, error: StreamError, cause: BaseException | None) -> NoReturn:
        """Make ``error`` sticky and raise it: the stream cannot be resynchronised."""
        if error.server is None:
            error.server = self.name
        self._rx_error = error
        self._rx_done = True
        if cause is not None:
            raise error from cause
        raise error

    def _drain_wake(self) -> None:
        with contextlib.suppress(OSError):
            os.read(self._wake_r, 4096)

    def wake(self) -> None:
        """Make a ``receive()`` blocked in another thread return ``[]`` promptly, and an
        ``exchange()`` blocked in its read (see ``_blocking_read``)."""
        if self._pump is not None:
            self._pump.wake()
            return
        blocking = self._blocking
        if blocking is not None and blocking.blocked_on:
            blocking.inject()
        with self._aside.wake_lock:  # close() must not close the pipe under this write
            fd = self._wake_w
            if fd >= 0:
                # A full pipe means a wake is already pending; a broken one, that we close.
                with contextlib.suppress(OSError):
                    os.write(fd, b"\0")

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("running" if self._proc else "new")
        return f"<StdioTransport {self.name!r} pid={self.pid} {state}>"

