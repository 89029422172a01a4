"""The blocking first read of a sole caller's call: one system call, and its Python, fewer.

A call that a single caller makes over stdio writes its request and then reads the answer
on its own thread (``StdioTransport.exchange``). Reading from a non-blocking pipe takes a
``poll()`` first, to wait; the poll is what lets the wait end at the call's deadline, at a
close from another thread, or when the server exits while a grandchild of it holds stdout
open. On a VM whose kernel entries are costly, that one poll and the Python around it were
about a fifth of the client's CPU per call (``docs/performance.md``, "The poll before each
read, taken out of the sequential tool call"). A read that blocks in ``read()`` itself needs
no poll, but nothing ends its wait but data or the end of the stream.

So the first read of that call blocks in ``read()``, on a second, blocking open of stdout's
pipe (``/proc/self/fd/N``: its own file status flags, so stdout's own descriptor stays
non-blocking for every other reader), and whatever must end the wait writes one byte into
the pipe: :data:`WAKE`, ``0xFF``, which never occurs in UTF-8 and so in no message a server
may send. The read returns with it; every read of stdout takes these bytes out of what it
read while :attr:`BlockingRead.injected` says some were written and not yet read back (a
count: where in the stream the byte lands does not matter, even inside a line the server is
still writing). What writes the byte:

- whatever wakes a poll through the transport's ``wake()``: a close, a loss, a reader
  taking the role over (again every ``SCAN`` while the read stays blocked, should a write
  have failed);
- the idle watch thread (``_idle_watch``), when a read stayed blocked on the same call for
  one to two of its looks (``SCAN``, 0.05 s): the wait a poll would have had
  (``MAIN_THREAD_SLICE``), after which the call's loop goes on polling, with its deadline,
  the server's exit through the pidfd and a simulated Ctrl-C seen as before;
- :meth:`BlockingRead.stop`, when the idle watch lets the session go (nothing would wake a
  blocked read after that, so none blocks from then on). Should no descriptor be had for
  it at that moment, a thread of its own (``mcpsync-stdio-wake-<fd>``) writes it again
  every ``SCAN`` until the read ended or the close.

A byte written just after its read returned (the watch looked as the answer came) stays in
the pipe; in a session left idle, that makes the watch start the session's reader thread,
which takes it out and from then on reads in every read by polling (no blocking read).

The object lives until the transport's close, which closes it once no read can be in it;
the bytes are taken out by every read until then, :meth:`stop` or not. A real Ctrl-C on the
main thread interrupts the read itself (``EINTR``), as it interrupts a poll. A simulated one
(``_thread.interrupt_main()``, or an exception set in the thread from outside) interrupts
no system call: it is raised as the read returns, after the read took the server's bytes
out of the pipe, where a poll's was raised before its read. So the exchange takes its read
from :attr:`BlockingRead.reads` by a ``for`` loop, which stores the count before any call
returns, and its handler decodes those bytes and holds the frames in
:attr:`BlockingRead.held` (counted in ``injected``, and a byte written: the next read,
whichever thread makes it, gives them out first; ``StdioTransport._keep_read``).

Known limits: a ``fork()`` made by another thread while :meth:`inject` holds its writer (a few
microseconds) gives the child a writer of the pipe, so while that child lives the end of
the server's stdout is not seen, and the server's exit is seen through its pidfd instead,
as with a grandchild holding stdout. Frames held after a simulated Ctrl-C whose byte could
not be written (no descriptor) go out with the next bytes read, not at once. A simulated
Ctrl-C that comes in the microseconds after the read's bytes were taken (as with a poll)
still loses them. The pipe's
writer is opened only for the byte and closed at once: holding one would keep stdout from
reaching its end when the server exits. Where ``/proc`` is missing (macOS) or the second
open fails, there is no blocking read and every read polls first.
"""

from __future__ import annotations

import io
import itertools
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any, Final

from mcpsync._threads import new_thread

__all__ = ["WAKE", "BlockingRead", "open_blocking_read"]

#: The byte written into stdout's pipe to end a blocked read: never part of UTF-8.
WAKE: Final = b"\xff"

_PROC_FD: Final = "/proc/self/fd/"

#: How often :meth:`BlockingRead.stop`'s byte is written again when it could not be (the
#: idle watch's ``SCAN``).
_RETRY_S: Final = 0.05


def _closed_read(buf: bytearray) -> int | None:
    raise ValueError("the blocking read was closed")


class BlockingRead:
    """The blocking open of one transport's stdout, and the state of its blocked read.

    ``enabled``: reads may block in :attr:`read` (cleared by :meth:`stop`); ``blocked_on``
    is the id of the call whose read blocks there (0: none), set by the reading thread
    around the read; ``injected`` counts the :data:`WAKE` bytes written and not yet taken
    out; ``gen`` is the idle watch's generation (its ``sleeping`` flag and ``poke()``).
    ``lock`` keeps :meth:`inject` and :meth:`close` apart: no byte is written, nor any
    writer opened, through a descriptor number after the close let it go.
    """

    __slots__ = ("_buf", "_read", "blocked_on", "closed", "enabled", "fd", "file", "gen",
                 "held", "injected", "lock", "pipe_id", "reads", "retry")

    def __init__(self, file: io.FileIO, pipe_id: tuple[int, int]) -> None:
        # The file does not own the descriptor (closefd=False): close() closes it, once,
        # under the lock.
        self.file = file
        self.fd = file.fileno()
        #: The reads, into the transport's buffer (:meth:`read_into`), as an endless
        #: iterator: the exchange takes one by a ``for`` loop, so that the count is stored
        #: with no call returning in between (see ``StdioTransport.exchange``), at no
        #: more cost than a call. Empty until :meth:`read_into`.
        self.reads: Iterator[int | None] = iter(())
        self._buf: bytearray | None = None
        # The file's readinto(): blocks until data or the end of the stream (0).
        self.read = file.readinto
        #: Frames decoded from what a blocked read returned as an exception came (a
        #: simulated Ctrl-C): given out by the next read, before what it read (see
        #: ``StdioTransport._keep_read``). While not empty, one more is counted in
        #: ``injected``, so that every read looks here.
        self.held: list[Any] = []
        self.pipe_id = pipe_id
        self.enabled = True
        self.blocked_on = 0
        self.injected = 0
        self.lock = threading.Lock()
        self.gen: Any = None
        #: The thread that writes :meth:`stop`'s byte again when it could not be written,
        #: and what tells it the close came (see :meth:`_retry_wake`).
        self.retry: threading.Thread | None = None
        self.closed: threading.Event | None = None

    @property
    def read(self) -> Callable[[bytearray], int | None]:
        """The read made by :attr:`reads` (replaced by the close, and by tests that watch
        it): one ``readinto(buffer)``."""
        return self._read

    @read.setter
    def read(self, read: Callable[[bytearray], int | None]) -> None:
        self._read = read
        if self._buf is not None:
            self.reads = itertools.starmap(read, itertools.repeat((self._buf,)))

    def read_into(self, buffer: bytearray) -> None:
        """Make :attr:`reads` read into ``buffer`` (the transport's, for its life)."""
        self._buf = buffer
        self.read = self._read

    def wake_blocked(self, blocked: int) -> None:
        """From the idle watch thread: wake the read if it is still blocked on call
        ``blocked`` (a read that ended meanwhile would only find one byte more to drop)."""
        if self.blocked_on == blocked:
            self.inject()

    def stop(self) -> None:
        """No read blocks from now on (nothing would wake it), and one blocked now is woken
        (it then polls, as every later read does). The bytes still outstanding are taken out
        by the reads as before."""
        self.enabled = False
        blocked = self.blocked_on
        if blocked and not self.inject():
            self._retry_wake(blocked)

    def take_held(self) -> list[Any]:
        """The frames a Ctrl-C left held (``StdioTransport._keep_read``), handed out once,
        with the one counted for them in :attr:`injected` taken back."""
        held = self.held
        if held:
            self.held = []
            self.injected -= 1
        return held

    def _retry_wake(self, blocked: int) -> None:
        """:meth:`stop`'s byte could not be written (no descriptor to be had): nothing
        else looks at this read any more (the watch let the session go), so a thread of
        its own writes it again every ``_RETRY_S`` until the read blocked on call
        ``blocked`` has ended, or the close. The close joins it. Where no thread can be
        started either, the read ends with its answer or the close."""
        closed = threading.Event()

        def run() -> None:
            while not closed.wait(_RETRY_S):
                if self.blocked_on != blocked or self.inject():
                    return

        thread = new_thread(f"mcpsync-stdio-wake-{self.fd}", run)
        # Under the lock, as the close sets ``closed`` and lets the descriptor go: either
        # the close comes after and finds the thread to stop and join, or it came before
        # and there is nothing to wake.
        with self.lock:
            if self.fd < 0 or self.retry is not None:
                return
            self.closed = closed
            self.retry = thread
        try:
            thread.start()
        except RuntimeError:   # out of threads
            self.retry = None

    def inject(self) -> bool:
        """Write one :data:`WAKE` into stdout's pipe (any thread); False when none could be
        written (a close let the descriptor go, the pipe is full: a reader wakes anyway, or
        no descriptor was to be had). The writer is a new open of the pipe through this
        object's own descriptor, checked to be the same pipe (device and inode) before
        anything is written, under ``lock``, which the close takes before it lets the
        descriptor go. Non-blocking, and never a controlling terminal."""
        with self.lock:
            fd = self.fd
            if fd < 0:
                return False
            try:
                # Stored by the loop with no call returning in between (where a Ctrl-C is
                # raised): a writer left open would keep stdout from ever reaching its end.
                for writer in itertools.starmap(  # noqa: B007 - `writer` is the point
                        os.open, ((f"{_PROC_FD}{fd}",
                                   os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY),)):
                    break
            except OSError:
                return False
            try:
                st = os.fstat(writer)
                if (st.st_dev, st.st_ino) != self.pipe_id:
                    return False
                # Counted before it is written, so that the reader it wakes sees it counted.
                self.injected += 1
                try:
                    os.write(writer, WAKE)
                except OSError:
                    self.injected -= 1
                    return False
                return True
            finally:
                os.close(writer)

    def take(self, data: bytes) -> bytes:
        """``data`` as read from stdout, without the wake bytes it holds (at most
        :attr:`injected` of them). Called while that is not 0."""
        found = data.count(WAKE)
        if not found:
            return data
        drop = min(found, self.injected)
        self.injected -= drop
        return data.replace(WAKE, b"", drop)

    def close(self, *, after_fork: bool = False) -> None:
        """Close the blocking open (once no read can be in it: the transport's close
        waits for every exchange to end first). ``after_fork``: a forked child's copy, its
        lock not taken (a thread of the parent may have held it as the process forked)."""
        self.enabled = False
        self.read = _closed_read
        if after_fork:
            self._close_fd()   # (a retry thread of the parent's is not in the child)
            return
        with self.lock:
            closed = self.closed
            if closed is not None:
                closed.set()
            self._close_fd()
        retry = self.retry
        # (Not one a Ctrl-C kept from starting: it has no ident, and cannot be joined.)
        if retry is not None and retry.ident is not None \
                and retry is not threading.current_thread():
            retry.join(1.0)   # it only waits on ``closed`` and takes the lock

    def _close_fd(self) -> None:
        fd = self.fd
        if fd >= 0:
            # Forgotten by a store before it is closed (no call returns in between): a
            # Ctrl-C never leaves it closed and still named, to be closed again later.
            self.fd = -1
            self.file.close()   # closefd=False: marks the file closed, closes nothing
            os.close(fd)


def open_blocking_read(stdout_fd: int) -> BlockingRead | None:
    """A blocking second open of the pipe read by ``stdout_fd``, or None where there is
    none to be had (no ``/proc``; any error). Opened non-blocking (an open of a pipe with no
    writer left would wait otherwise), then made blocking: its own flags, not stdout's."""
    try:
        st = os.fstat(stdout_fd)
        # Stored by the loop with no call returning in between (where a Ctrl-C is raised).
        for fd in itertools.starmap(  # noqa: B007 - `fd` is the point
                os.open, ((f"{_PROC_FD}{stdout_fd}",
                           os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC),)):
            break
    except OSError:
        return None
    # The same pipe as stdout_fd's: opened through its own link while the caller (an
    # exchange, counted in ``_exchanging``) keeps the close from closing it.
    try:
        os.set_blocking(fd, True)
        # closefd=False: the descriptor has one owner, this function until it returns and
        # then the BlockingRead (see its close()).
        file = io.FileIO(fd, "r", closefd=False)
        return BlockingRead(file, (st.st_dev, st.st_ino))
    except BaseException as exc:
        os.close(fd)
        if isinstance(exc, OSError):
            return None
        raise
