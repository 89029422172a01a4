"""The stdio transport: one server subprocess, its pipes, and their teardown.

This is a *pull* transport. The session engine owns the reader role and calls
:meth:`StdioTransport.receive` from one thread at a time (its background reader, or a caller
reading its own response); the transport starts no stdout thread of its own (except where
pipes cannot be polled, on Windows: see ``_pump``). What it does own:

- spawning, on the single ``mcpsync-spawner`` thread (see ``_spawner``), with a safe
  environment and a resolved command (see ``_env``);
- the stderr drain thread ``mcpsync-stdio-stderr-<name>`` (see ``_stderr``);
- locked writes, one frame per write, each by a deadline (see ``_writer``: stdin is
  non-blocking, so a server that stops reading cannot hold a caller past its timeout);
- event-driven exit detection (``pidfd`` + ``poll`` where the OS has it);
- the shutdown sequence of the MCP stdio transport, bounded in time.

Thread contract: ``send``/``send_bytes`` are safe from any number of threads; ``receive`` is
called by one thread at a time; ``wake`` and ``close`` are safe from any thread, and ``close``
is idempotent and unblocks a pending ``receive``.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

from mcpsync.transport.stdio import _spawner

from ...errors import ConfigError
from ...jsonrpc import (
    MAX_FRAME_BYTES,
    Batch,
    FrameDecoder,
    Message,
    ParseError,
    StreamError,
    serialize as _serialize,
)
from ..base import TransportClosed, safe_name
from ._env import build_env, resolve_argv
from ._pump import StdoutPump
from ._stderr import StderrDrain, excerpt
from ._writer import FINISH_GRACE, FrameFinisher, WriteTimedOut, pour

__all__ = ["StdioTransport", "TransportClosed", "WriteTimedOut", "safe_name"]

# Grace periods of the shutdown sequence. Module constants so that tests may patch them.
STDIN_GRACE = 2.0
TERM_GRACE = 2.0
KILL_WAIT = 0.5
JOIN_TIMEOUT = 1.0
CLOSE_BOUND = 5.0
#: How long stderr_tail() lets the drain catch up after the server exited.
STDERR_SETTLE = 0.5

#: One read takes up to this much of stdout: a response rarely needs two reads.
READ_SIZE = 256 * 1024

_IS_WINDOWS = os.name == "nt"
_HAS_PIDFD = hasattr(os, "pidfd_open")
#: Wait on pipes with poll(); without it (Windows) a pump thread reads stdout (see _pump).
_USE_POLL = hasattr(select, "poll") and not _IS_WINDOWS
_MAX_POLL_MS = 2**31 - 1  # poll() takes a C int of milliseconds
_MAX_POLL_S = _MAX_POLL_MS / 1000
#: Most receive() calls that poll without trying a read first, after reads found nothing.
_MAX_SKIP = 16


def _poll_ms(timeout: float) -> int:
    """Seconds to poll() milliseconds, rounded up (so a wait never ends early), clamped."""
    if timeout >= _MAX_POLL_S:
        return _MAX_POLL_MS
    return max(0, int(timeout * 1000 + 0.999))


def _execs_directly(program: str, cwd: str | None) -> bool:
    """True when ``execve(program)`` will succeed as is: an executable regular file that is
    an ELF binary, or a ``#!`` script whose interpreter is executable.

    Only then may an exec wrapper start it: anything else must fail (or not) exactly as
    ``Popen`` does, with an ``OSError`` in this process (``setpriv`` would instead exit with
    a message on stderr, and its ``execvp`` would run a script without ``#!`` through
    ``/bin/sh``).
    """
    path = program if cwd is None else os.path.join(cwd, program)
    try:
        if not os.access(path, os.X_OK):
            return False
        with open(path, "rb") as f:
            head = f.read(256)
    except OSError:  # a directory, unreadable, gone
        return False
    if head[:4] == b"\x7fELF":
        return True
    if head[:2] != b"#!":
        return False
    words = head[2:].split(b"\n", 1)[0].split()
    if not words or (len(head) == 256 and b"\n" not in head):  # no interpreter, or cut off
        return False
    interpreter = os.fsdecode(words[0])
    return os.access(interpreter if cwd is None else os.path.join(cwd, interpreter), os.X_OK)


def _discard(proc: subprocess.Popen[bytes]) -> None:
    """Kill and reap a child that nobody will own (its start() was interrupted)."""
    with contextlib.suppress(OSError):
        if _IS_WINDOWS:  # pragma: no cover
            proc.kill()
        else:
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


class StdioTransport:
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
        self.pid: int | None = None
        self._safe = safe_name(name)
        self._env = dict(env) if env else {}
        self._inherit_env = inherit_env
        self._cwd = cwd
        self._stderr_bytes = stderr_bytes
        self._on_stderr = on_stderr
        self._die_with_parent = die_with_parent
        self._logger = logging.getLogger(f"mcpsync.server.{self._safe}")
        self._decoder = FrameDecoder(max_frame_bytes=max_frame_bytes)
        self._proc: subprocess.Popen[bytes] | None = None
        self._owner_pid = os.getpid()
        self._started = False
        self._closing = False
        self._closed = False
        # True when receive() has nothing more to give: before start, at EOF, on a stream
        # error (kept in _rx_error, which is sticky) and once close() began. One flag keeps
        # the hot path to a single check.
        self._rx_done = True
        self._rx_error: StreamError | None = None
        self._close_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._rx_lock = threading.Lock()
        self._wake_lock = threading.Lock()
        self._stdin_fd = -1
        self._stdout_fd = -1
        self._stderr_fd = -1
        self._wake_r = -1
        self._wake_w = -1
        self._pidfd = -1
        self._poller: Any = None
        # stdout is read into this one buffer (os.readv) and only the bytes read are copied
        # out: an os.read(fd, READ_SIZE) allocates READ_SIZE bytes on every call, which is
        # beyond malloc's mmap threshold, and on some heap layouts each read then maps and
        # unmaps (or grows and trims) that much memory: about 14 us of page faults per call.
        self._rx_buf = bytearray(READ_SIZE)
        self._rx_view = memoryview(self._rx_buf)
        self._rx_bufs = [self._rx_buf]
        # stdout is non-blocking (poll platforms): receive() tries a read before polling
        # unless recent tries found nothing (then it skips the next _skip_eager tries).
        self._skip_eager = 0
        self._eager_misses = 0
        self._pump: StdoutPump | None = None
        self._stderr: StderrDrain | None = None
        self._holds_spawner = False
        self._finisher: FrameFinisher | None = None
        self._stdin_grace = STDIN_GRACE

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

    def forked(self) -> bool:
        """True in a process forked from the one that started this transport."""
        return os.getpid() != self._owner_pid

    # ------------------------------------------------------------------ start

    def start(self) -> None:
        """Resolve the command, spawn the server on the spawner thread, start the stderr drain.

        Raises :class:`ConfigError` naming the command (and the ``PATH`` searched) when it
        cannot be found or executed, or when ``cwd`` does not exist.
        """
        if self._started:
            raise RuntimeError(f"the stdio transport for {self.name!r} was already started")
        self._started = True
        child_env = build_env(self._env, inherit_env=self._inherit_env)
        try:
            argv = resolve_argv(self.argv, child_env, cwd=self._cwd)
        except ConfigError as exc:
            exc.server = self.name
            raise
        preexec = _spawner.die_with_parent_preexec() if self._die_with_parent else None
        wrappable = preexec is not None and _execs_directly(argv[0], self._cwd)
        kwargs: dict[str, Any] = {}
        if _IS_WINDOWS:  # pragma: no cover - best-effort, untested on this CI
            kwargs["creationflags"] = getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)
        else:
            kwargs["start_new_session"] = True

        def _popen() -> subprocess.Popen[bytes]:
            # On the spawner thread: the death signal follows the thread that forks.
            full_argv, extra = argv, kwargs
            if preexec is not None:
                wrapper = _spawner.die_with_parent_wrapper() if wrappable else None
                if wrapper is not None:  # vfork() path: setpriv sets it, then execs argv
                    full_argv = [*wrapper, *argv]
                else:
                    extra = {**kwargs, "preexec_fn": preexec}
            return subprocess.Popen(
                full_argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, bufsize=0, close_fds=True, env=child_env,
                cwd=self._cwd, **extra)

        try:
            proc = _spawner.spawn(_popen, discard=_discard)
        except (OSError, subprocess.SubprocessError) as exc:
            path = child_env.get("PATH", "")
            raise ConfigError(
                f"starting server {self.name!r}: cannot run {self.argv[0]!r} ({exc}); "
                f'PATH searched: "{path}"', server=self.name) from exc
        self._holds_spawner = True
        self._proc = proc
        self.pid = proc.pid
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        self._stdin_fd = proc.stdin.fileno()
        self._stdout_fd = proc.stdout.fileno()
        self._stderr_fd = proc.stderr.fileno()
        if _HAS_PIDFD:
            try:
                self._pidfd = os.pidfd_open(proc.pid)
            except OSError:
                self._pidfd = -1
        if _USE_POLL:
            os.set_blocking(self._stdout_fd, False)  # receive() reads before it polls
            os.set_blocking(self._stdin_fd, False)  # a full pipe must not block a write
            self._wake_r, self._wake_w = os.pipe()
            os.set_blocking(self._wake_r, False)
            os.set_blocking(self._wake_w, False)
            poller = select.poll()
            poller.register(self._stdout_fd, select.POLLIN)
            poller.register(self._wake_r, select.POLLIN)
            if self._pidfd >= 0:
                # "When stdout reaches EOF *or the process exits*": with a grandchild holding
                # stdout open, only the pidfd says that the server is gone.
                poller.register(self._pidfd, select.POLLIN)
            self._poller = poller
        else:
            self._pump = StdoutPump(self._stdout_fd, name=self._safe, read_size=READ_SIZE)
            self._pump.start()
        self._rx_done = False
        self._stderr = StderrDrain(self._stderr_fd, name=self._safe, logger=self._logger,
                                   ring_bytes=self._stderr_bytes, on_stderr=self._on_stderr,
                                   use_poll=_USE_POLL,
                                   closer=lambda: self._close_fd("_stderr_fd", proc.stderr))
        self._stderr.start()

    # ------------------------------------------------------------------ writing

    def send(self, message: Message) -> None:
        """Write one message as one frame. Thread-safe; raises :class:`TransportClosed`."""
        self.send_bytes(_serialize(message))

    def send_bytes(self, frame: bytes) -> None:
        """Write one pre-serialised frame (without its newline), waiting as long as it takes
        (until :meth:`close`). See :meth:`send_bytes_until`."""
        self.send_bytes_until(frame, math.inf)

    def send_bytes_until(self, frame: bytes, deadline: float) -> None:
        """Write one pre-serialised frame (without its newline) under the write lock, by
        ``deadline`` (a ``time.monotonic()`` value; ``math.inf``: no limit).

        The whole frame goes out before the lock is released, so frames from different
        threads never interleave. The usual case is one ``os.write``. When the server does
        not read its stdin and the pipe is full, raises ``WriteTimedOut`` at the deadline:
        with ``written == 0`` when nothing of the frame went out (still waiting for the lock,
        or for room in the pipe); otherwise a finisher thread writes the rest of the frame and
        tears the connection down if that is not done ``FINISH_GRACE`` seconds later (see
        ``_writer``). Raises :class:`TransportClosed` when the pipe is closed or broken.
        """
        data = frame + b"\n"
        lock = self._write_lock
        if not lock.acquire(False) and not self._acquire_until(lock, deadline):
            raise WriteTimedOut(0, len(data))
        try:
            fd = self._stdin_fd
            if fd < 0 or self._closing:
                raise TransportClosed(f"writing to server {self.name!r}: the transport is closed",
                                      server=self.name)
            try:
                written = os.write(fd, data)
            except BlockingIOError:  # the pipe is full: the server is not reading
                written = 0
        except OSError as exc:  # BrokenPipeError: the server is gone
            lock.release()
            raise self._broken(exc) from exc
        except BaseException:
            lock.release()
            raise
        if written == len(data):
            lock.release()
            return
        self._write_rest(fd, data, written, deadline)

    @staticmethod
    def _acquire_until(lock: threading.Lock, deadline: float) -> bool:
        """Wait for the write lock until ``deadline``; False when it passed first."""
        if deadline == math.inf:
            return lock.acquire()
        remaining = deadline - time.monotonic()
        return remaining > 0 and lock.acquire(timeout=min(remaining, threading.TIMEOUT_MAX))

    def _broken(self, exc: OSError) -> TransportClosed:
        return TransportClosed(f"writing to server {self.name!r}: the pipe is closed ({exc})",
                               server=self.name)

    def _write_rest(self, fd: int, data: bytes, written: int, deadline: float) -> None:
        """The slow path of a write (the pipe was full), entered holding the write lock: wait
        for room until ``deadline``; then release the lock, or hand it to a finisher."""
        view = memoryview(data)
        handed = False
        try:
            try:
                if not _USE_POLL:  # pragma: no cover - Windows: stdin blocks, as it always did
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
                self._finish_later(fd, view, written, deadline)
                handed = True
            raise
        finally:
            if not handed:
                self._write_lock.release()

    def _finish_later(self, fd: int, view: memoryview, written: int, deadline: float) -> None:
        grace = time.monotonic() + FINISH_GRACE
        finisher = FrameFinisher(
            name=self._safe, fd=fd, view=view, written=written,
            until=grace if deadline == math.inf else max(deadline + FINISH_GRACE, grace),
            lock=self._write_lock, stop=lambda: self._closing, on_stuck=self._write_stuck)
        self._finisher = finisher
        finisher.start()

    def _write_stuck(self, why: str) -> None:
        """Finisher thread, write lock held: a frame cannot be finished. The stream is lost:
        stdin is closed (later writes fail at once) and the reader raises the error next."""
        error = StreamError(f"writing to server {self.name!r}: a request could not be "
                            f"finished ({why}); the server is not reading its input, so the "
                            "connection is closed", server=self.name)
        self._logger.warning("%s", error)
        # The error first: closing stdin makes the server exit, and a reader that then meets
        # EOF must report why the connection ended, not "the server closed its output".
        self._rx_error = error
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
        with self._rx_lock:
            if self._rx_done:
                if self._rx_error is not None:
                    raise self._rx_error
                return None
            if self._skip_eager == 0:
                # Read first, poll only if nothing is there: on one CPU the server usually
                # answers while our request is being written, and this saves the poll.
                try:
                    n = os.readv(self._stdout_fd, self._rx_bufs)
                except BlockingIOError:
                    # Nothing yet (the usual case when the server runs on another CPU): back
                    # off, so that a miss costs at most one failed read every _MAX_SKIP calls.
                    self._eager_misses = min(self._eager_misses * 2 + 1, _MAX_SKIP)
                    self._skip_eager = self._eager_misses
                except OSError as exc:
                    self._fail_rx(StreamError(f"reading from server {self.name!r}: {exc}",
                                              server=self.name), exc)
                else:
                    self._eager_misses = 0
                    return self._got(n)
            else:
                self._skip_eager -= 1
            if timeout is None:
                ready = self._poller.poll()
            elif timeout < _MAX_POLL_S:
                ready = self._poller.poll(max(0, int(timeout * 1000 + 0.999)))
            else:  # math.inf, or beyond what poll() takes: a spurious [] in 24 days is fine
                ready = self._poller.poll(_MAX_POLL_MS)
            if not ready:
                return []
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
            try:
                n = os.readv(self._stdout_fd, self._rx_bufs)
            except BlockingIOError:  # pragma: no cover - poll() said readable
                return []
            except OSError as exc:
                self._fail_rx(StreamError(f"reading from server {self.name!r}: {exc}",
                                          server=self.name), exc)
            return self._got(n)

    def _got(self, n: int) -> list[Message | Batch | ParseError] | None:
        """Decode the ``n`` bytes just read into the buffer (0: EOF). Under ``_rx_lock``."""
        try:
            if n:
                return self._decoder.feed(self._rx_view[:n].tobytes())
            return self._end()
        except StreamError as exc:
            self._fail_rx(exc, None)

    def _end(self) -> list[Message | Batch | ParseError] | None:
        """EOF on stdout. Under ``_rx_lock``. A write that could not be finished closed the
        stream on purpose: its error is the reason, so it is raised rather than a plain EOF."""
        self._rx_done = True
        if self._rx_error is not None:
            raise self._rx_error
        return self._decoder.finish() or None

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
        """Make a ``receive()`` blocked in another thread return ``[]`` promptly."""
        if self._pump is not None:
            self._pump.wake()
            return
        with self._wake_lock:  # close() must not close the pipe under this write
            fd = self._wake_w
            if fd >= 0:
                # A full pipe means a wake is already pending; a broken one, that we close.
                with contextlib.suppress(OSError):
                    os.write(fd, b"\0")

    # ------------------------------------------------------------------ process state

    def returncode(self) -> int | None:
        """The exit status (negative: killed by that signal), or ``None``; never blocks."""
        proc = self._proc
        if proc is None or self.forked():
            return None
        return proc.poll()

    def wait_exit(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` seconds for the server to exit; reap it and return its
        status, or ``None`` if it is still running."""
        proc = self._proc
        if proc is None or self.forked():
            return None
        if proc.returncode is not None:
            return proc.returncode
        if self._wait_exited(timeout):
            return proc.poll() if proc.returncode is None else proc.returncode
        return proc.poll()

    def _wait_exited(self, timeout: float) -> bool:
        """Wait for exit *without reaping* where a pidfd allows it (so the pid, and with it
        the process group id, cannot be reused while we still signal the group)."""
        proc = self._proc
        assert proc is not None
        if proc.returncode is not None:
            return True
        pidfd = self._pidfd
        if pidfd >= 0:
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)
            return bool(poller.poll(_poll_ms(timeout)))
        try:
            proc.wait(min(timeout, _MAX_POLL_S))
        except subprocess.TimeoutExpired:
            return False
        return True

    def stderr_tail(self) -> str:
        """The whole stderr ring (newest ``stderr_bytes`` bytes), decoded with replacement.

        Once the server has exited this first lets the drain catch up (briefly), so that
        the last lines it wrote before dying are included.
        """
        drain = self._stderr
        if drain is None:
            return ""
        proc = self._proc
        if proc is not None and proc.returncode is not None:
            drain.settle(STDERR_SETTLE)
        return drain.tail()

    def stderr_excerpt(self) -> str:
        """The last 20 stderr lines, at most 4 KiB: what error messages quote."""
        return excerpt(self.stderr_tail())

    # ------------------------------------------------------------------ teardown

    def close(self) -> None:
        """Shut the server down and release everything; idempotent and thread-safe.

        Follows the MCP stdio shutdown: close the server's stdin and wait (2 s); SIGTERM its
        process group and wait (2 s); SIGKILL the group and reap. Then the stderr thread is
        joined and every descriptor closed. The whole call is bounded by 5 s.

        In a forked child it only drops this process's copies of the descriptors: it never
        signals the parent's server or writes to its pipes.
        """
        with self._close_lock:
            if self._closed:
                return
            self._closing = True
            self._rx_done = True
            try:
                if self._proc is None:
                    return
                if self.forked():
                    self._drop_after_fork()
                    return
                self._shutdown()
            finally:
                self._closed = True

    def _shutdown(self) -> None:
        proc = self._proc
        assert proc is not None
        deadline = time.monotonic() + CLOSE_BOUND

        def left(step: float) -> float:
            return max(0.0, min(step, deadline - time.monotonic()))

        # Unblock a receive() in progress; it returns None from now on. stdout stays open
        # (unread) until the server is gone, so one that writes a last line while shutting
        # down gets no EPIPE out of it.
        self.wake()
        # "the client SHOULD initiate shutdown by first closing the input stream to the child
        # process (the server)" - unless a writer is stuck in a full pipe; then the signals
        # below will break its write.
        stdin_closed = self._close_stdin(timeout=0.2)
        exited = self._wait_exited(left(self._stdin_grace)) if stdin_closed else False
        # "wait for the server to exit, or send SIGTERM if the server does not exit within a
        # reasonable time"
        if not exited:
            self._signal_group(kill=False)
            exited = self._wait_exited(left(TERM_GRACE))
        # "send SIGKILL if the server does not exit within a reasonable time after SIGTERM"
        if not exited:
            self._signal_group(kill=True)
            exited = self._wait_exited(max(left(KILL_WAIT), 0.05))
        # The leader is gone (and, with a pidfd, not yet reaped): anything left in its group
        # is an orphan of the server, which must not outlive close().
        self._signal_group(kill=True, leftovers_only=True)
        if exited:
            proc.poll()
        if not stdin_closed:
            self._close_stdin(timeout=left(JOIN_TIMEOUT))
        finisher = self._finisher
        if finisher is not None:  # it sees _closing within a WRITE_SLICE
            finisher.join(left(JOIN_TIMEOUT) or 0.05)
        if self._stderr is not None:
            self._stderr.stop(timeout=left(JOIN_TIMEOUT) or 0.05)  # closes the stderr pipe
        else:
            self._close_fd("_stderr_fd", proc.stderr)
        # stdout and the wake-up pipe are closed only when no receive() can be using them
        # (a descriptor number closed under a poll() could be reused by then).
        pump = self._pump
        if pump is not None and not pump.join(left(JOIN_TIMEOUT) or 0.05):
            pass  # an escaped grandchild holds stdout: the daemon pump keeps its descriptor
        elif self._rx_lock.acquire(timeout=left(JOIN_TIMEOUT) or 0.05):
            try:
                self._close_fd("_stdout_fd", proc.stdout)
                with self._wake_lock:
                    self._close_raw("_wake_w")
                self._close_raw("_wake_r")
            finally:
                self._rx_lock.release()
        self._close_raw("_pidfd")
        if proc.returncode is None:
            self._logger.warning("server %r (pid %s) could not be reaped within %.0f s",
                                 self.name, proc.pid, CLOSE_BOUND)
        elif self._holds_spawner:
            self._holds_spawner = False
            _spawner.release()

    def hurry(self) -> None:
        """Make :meth:`close` send SIGTERM right after closing stdin (no 2 s grace): for a
        program that never answered the handshake, which has no MCP shutdown to honour."""
        self._stdin_grace = min(self._stdin_grace, 0.05)

    def _close_raw(self, attr: str) -> None:
        fd = getattr(self, attr)
        if fd >= 0:
            setattr(self, attr, -1)
            os.close(fd)

    def _close_stdin(self, timeout: float) -> bool:
        if not self._write_lock.acquire(timeout=timeout):
            return False
        try:
            proc = self._proc
            self._close_fd("_stdin_fd", proc.stdin if proc is not None else None)
        finally:
            self._write_lock.release()
        return True

    def _close_fd(self, attr: str, fileobj: Any) -> None:
        if getattr(self, attr) < 0:
            return
        setattr(self, attr, -1)
        with contextlib.suppress(OSError):
            fileobj.close()

    def _signal_group(self, *, kill: bool, leftovers_only: bool = False) -> None:
        """SIGTERM (or SIGKILL) the server's process group; with ``leftovers_only``, only if
        the group still has members. Windows has no groups to signal: TerminateProcess."""
        proc = self._proc
        if proc is None:
            return
        if _IS_WINDOWS:  # pragma: no cover - best-effort, untested on this CI
            if not leftovers_only and proc.returncode is None:
                with contextlib.suppress(OSError):
                    proc.kill()
            return
        sig = signal.SIGKILL if kill else signal.SIGTERM
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if leftovers_only:
                os.killpg(proc.pid, 0)  # raises ProcessLookupError when the group is empty
            os.killpg(proc.pid, sig)

    def _drop_after_fork(self) -> None:
        """Forked child: close our copies of the descriptors, signal nothing, write nothing."""
        proc = self._proc
        for attr, obj in (("_stdin_fd", proc.stdin if proc else None),
                          ("_stdout_fd", proc.stdout if proc else None),
                          ("_stderr_fd", proc.stderr if proc else None)):
            if getattr(self, attr) >= 0:
                setattr(self, attr, -1)
                if obj is not None:
                    with contextlib.suppress(OSError):
                        obj.close()
        for attr in ("_wake_r", "_pidfd"):
            self._close_raw(attr)
        with self._wake_lock:
            self._close_raw("_wake_w")
        if proc is not None:
            # Keep Popen.__del__ from trying to reap a child that is not ours.
            proc.returncode = 0 if proc.returncode is None else proc.returncode
        if self._stderr is not None:
            self._stderr.abandon()
        self._proc = None
        self._holds_spawner = False

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("running" if self._proc else "new")
        return f"<StdioTransport {self.name!r} pid={self.pid} {state}>"

