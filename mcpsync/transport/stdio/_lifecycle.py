"""The server process's life: start it, watch for its exit, shut it down, drop it after fork.

This is the cold half of :class:`~mcpsync.transport.stdio.StdioTransport`, kept apart from
the hot half (writing frames and reading stdout, in ``_transport``) so that each can be read
on its own. It is a mixin rather than a collaborator object because both halves share the
same state: the pipe descriptors, the locks that keep a descriptor from being closed under a
write or a ``poll()``, and the ``_closing``/``_rx_done`` flags that the I/O paths check on
every call. A collaborator would put one more attribute hop on those paths; a base class
puts none (methods and attributes are looked up exactly as before). What only this half
reads (the spawn's options, the close's bookkeeping, the stderr drain, the exit status) is
kept in a slotted :class:`Aside` instead (``_aside``): one hop on these cold paths, so that
the transport itself holds few enough attributes for CPython to keep them inline.

What lives here:

- :meth:`~ProcessLifecycle.start`: resolve the command, spawn it on the single
  ``mcpsync-spawner`` thread (see ``_spawner``) with a safe environment (see ``_env``), make
  the pipes non-blocking and set up the ``poll()`` set (stdout, the wake-up pipe, and a
  ``pidfd`` where the OS has one), start the stderr drain (see ``_stderr``);
- exit watching: :meth:`~ProcessLifecycle.returncode`, :meth:`~ProcessLifecycle.wait_exit`,
  waiting on the ``pidfd`` without reaping (without one that reads the status, on Linux,
  by pid: ``_by_pid``, which ``start()`` loads where it may be needed);
- the stderr ring as error messages quote it;
- :meth:`~ProcessLifecycle.close`: the shutdown sequence of the MCP stdio transport, bounded
  in time, and its fork-safe variant.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import io
import itertools
import logging
import operator
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import mcpsync
from mcpsync.transport.stdio import _spawner

from ...errors import ConfigError
from ..base import safe_name
from . import _idle_watch
from ._env import build_env, resolve_argv
from ._idle_watch import IdleWatch
from ._stderr import StderrDrain, excerpt
from ._writer import FrameFinisher

# The stdout pump is Windows only: start() loads its module where poll() is missing. The
# annotation below names it through the package attribute that loads it, so that
# typing.get_type_hints() resolves it with the module unloaded.
if TYPE_CHECKING:
    import mcpsync.transport.stdio._blocking_read
    import mcpsync.transport.stdio._pump

    from ...jsonrpc import StreamError
    from ._by_pid import Functions

__all__ = ["Aside", "ExitWatch", "ProcessLifecycle"]

# Grace periods of the shutdown sequence. Module constants so that tests may patch them.
STDIN_GRACE = 2.0
TERM_GRACE = 2.0
KILL_WAIT = 0.5
INTERRUPTED_GRACE = 0.25  # SIGTERM to SIGKILL when a close() is interrupted
JOIN_TIMEOUT = 1.0
CLOSE_BOUND = 5.0
#: How long stderr_tail() lets the drain catch up after the server exited.
STDERR_SETTLE = 0.5

_IS_WINDOWS = os.name == "nt"
_HAS_PIDFD = hasattr(os, "pidfd_open")
#: ``waitid(P_PIDFD, ...)`` can read a server's exit status through its pidfd and leave it
#: unreaped (``WNOWAIT``): Linux 5.4+ (a 5.3 kernel has pidfds but fails this with EINVAL,
#: and the status is then read by pid, below).
_CAN_PEEK = _HAS_PIDFD and hasattr(os, "P_PIDFD")
_PEEK_FLAGS = (os.WEXITED | os.WNOHANG | os.WNOWAIT) if _CAN_PEEK else 0
#: Without such a pidfd (none, one that ``pidfd_open`` failed to make, or a 5.3 kernel's),
#: Linux reads the status by pid and leaves the child unreaped just as well:
#: ``waitid(P_PID, pid, WEXITED | WNOHANG | WNOWAIT)``, on every kernel (``_by_pid``). Only
#: on Linux: ``os.waitid`` exists on macOS only from CPython 3.13 (earlier versions left it
#: out over problems with the API in old macOS versions), and we cannot test macOS here;
#: there, and on the BSDs, ``Popen`` reaps, as before (see
#: :meth:`ProcessLifecycle._exit_status`).
_CAN_PEEK_PID = (sys.platform.startswith("linux") and hasattr(os, "waitid")
                 and hasattr(os, "WNOWAIT"))
#: The ``_by_pid`` module once :func:`_load_by_pid` loaded it, else None (not loaded: every
#: by-pid step then falls back as ``_by_pid``'s docstring lists). A machine whose pidfds read
#: the status never loads it. Typed by a protocol that only the type checker reads.
_by_pid: Functions | None = None
#: :func:`pidfds_read_status`'s answer, once asked (a property of the kernel).
_pidfd_peeks: bool | None = None
#: Wait on pipes with poll(); without it (Windows) a pump thread reads stdout (see _pump).
_USE_POLL = hasattr(select, "poll") and not _IS_WINDOWS
_MAX_POLL_MS = 2**31 - 1  # poll() takes a C int of milliseconds
_MAX_POLL_S = _MAX_POLL_MS / 1000


def _poll_ms(timeout: float) -> int:
    """Seconds to poll() milliseconds, rounded up (so a wait never ends early), clamped."""
    if timeout >= _MAX_POLL_S:
        return _MAX_POLL_MS
    return max(0, int(timeout * 1000 + 0.999))


def pidfds_read_status() -> bool:
    """True when this process's pidfds read a child's exit status without reaping it
    (``waitid(P_PIDFD, fd, WEXITED | WNOHANG | WNOWAIT)``, Linux 5.4 and later).

    A property of the kernel (and of the filters around this process), not of a child, so it
    is asked once per process, without one: a pidfd on this process itself, and a ``waitid``
    on it. A kernel that can wait on pidfds fails that with ``ECHILD`` (this process is
    not its own child); Linux 5.3, which has pidfds but no ``P_PIDFD``, fails it with
    ``EINVAL``, and so does any kernel that does not know the id type. ``pidfd_open``
    failing (no such system call, a seccomp filter) means no as well. Anything but
    ``ECHILD`` is taken as no: reading by pid works on every Linux kernel, so a wrong no
    costs only the import of ``_by_pid``, a wrong yes a zombie or a lost status.

    The descriptor is stored by a ``for`` loop over the C iterator that opens it, before any
    Ctrl-C can land (see :meth:`ProcessLifecycle.start`), and closed in a ``finally``; a
    Ctrl-C leaves the question unanswered, for the next start() to ask again."""
    global _pidfd_peeks
    known = _pidfd_peeks
    if known is not None:
        return known
    answer = False
    if _CAN_PEEK:
        fd = -1
        try:
            for fd in map(os.pidfd_open, (os.getpid(),)):  # noqa: B007
                break
            os.waitid(os.P_PIDFD, fd, _PEEK_FLAGS)
        except ChildProcessError:
            answer = True
        except OSError:
            pass
        finally:
            if fd >= 0:
                os.close(fd)
    _pidfd_peeks = answer
    return answer


def _load_by_pid() -> None:
    """Load ``_by_pid`` (from :meth:`ProcessLifecycle.start` only: never on a close, a
    death, a timeout or a Ctrl-C's recovery) and make every transport use it where it has
    no pidfd that reads the status. ``import_module`` first, as the client's lazy loaders
    do: after an import that a Ctrl-C cut short in another thread, the module is loaded
    again rather than read half-built."""
    global _by_pid
    _by_pid = cast("Functions", importlib.import_module("mcpsync.transport.stdio._by_pid"))


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


#: How long the discard waits for a SIGKILLed child to exit, per try (as long as the close
#: waits after SIGTERM, :data:`TERM_GRACE`): a child that SIGKILL cannot end (``killpg``
#: refused with EPERM, a process in uninterruptible sleep) must not hold the thread that
#: discards it, the spawner thread above all (every later start() queues behind it).
DISCARD_WAIT = 2.0

# What _discard hands each try: a plain list, made without any call (a Ctrl-C can land as
# a Python function begins, and anything called before _discard's try would be one more
# place where it escapes before the SIGKILL).
#: ``ending[_PIDFD]``: the pidfd that reads the status (Linux 5.4+), or -1.
_PIDFD = 0
#: ``ending[_BY_PID]``: without one, the ``_by_pid`` module that reads it by pid (Linux,
#: where it is loaded); None: ``Popen.wait()``.
_BY_PID = 1
#: ``ending[_REAPED]``: what the reap by pid returned, once it ran (the pid is not to be
#: waited for again), else None.
_REAPED = 2

_discard_log = logging.getLogger(__name__)


def _discard(proc: subprocess.Popen[bytes]) -> None:
    """Kill and reap a child that nobody will own (its start() was interrupted).

    This runs after a Ctrl-C, where another is likely. Where the kernel reads an exit status
    without reaping (a pidfd on Linux 5.4+; by pid on any Linux, where ``start()`` loaded
    ``_by_pid``), every step may be run again and is, up to three times in all (as an
    interrupted close's ending is): a Ctrl-C during it is swallowed twice (the caller
    re-raises the first one anyway), and the third goes on. The child is then reaped as
    :meth:`ProcessLifecycle._reap` reaps, never by ``Popen.wait()`` (a Ctrl-C inside that
    can leave ``Popen``'s waitpid lock held for good, or lose the status). The pidfd is
    opened first, while the child is surely unreaped; the pipes and the pidfd are closed
    whatever happens. Nothing is called before the ``try``, and a Ctrl-C raised as the
    pidfd's opening begins (the ``map()`` call's end, before it opened anything) is
    swallowed too, and the pidfd opened once more: the one place left where a Ctrl-C
    escapes before the SIGKILL is this function's own start. (Should that second opening
    fail or be cut short too, the child is ended by pid where ``_by_pid`` is loaded; on a
    machine whose pidfds work it is not, and the child is then ended as elsewhere, below,
    with no try run again: see ``_by_pid``.)

    Each try waits at most :data:`DISCARD_WAIT` for the exit after SIGKILL, then gives up
    with a warning naming the pid, as the close gives up: the child is left to
    ``subprocess``'s own reaping (``Popen.__del__``). No Ctrl-C can cut a wait short on
    the spawner thread, which runs this for a caller that stopped waiting.

    Elsewhere (macOS, the BSDs) this is one ``killpg`` and one ``Popen.wait()`` (with the
    same bound), as before, and a Ctrl-C in the wait goes to the caller with nothing run
    again: after a Ctrl-C inside ``Popen.wait()`` the child may be reaped with its status
    lost (``returncode`` still ``None``), so a second try would signal a pid that may no
    longer be ours, and ``Popen``'s waitpid lock may be held for good, so its ``wait()``
    would block until the bound. That Ctrl-C can leave the child a zombie, which
    ``Popen.__del__`` hands to ``subprocess._active``.
    """
    pidfd = -1
    # _end_child clears [_PIDFD] when the kernel refuses waitid on it (5.3), and [_BY_PID]
    # when it falls back to Popen.wait(); with neither, nothing is retried.
    ending: list[Any] = [-1, _by_pid, None]
    try:
        if _CAN_PEEK:
            # A for loop over a C iterator stores the number before any Ctrl-C can land
            # (see start()), so the finally below always finds it.
            try:
                for pidfd in map(os.pidfd_open, (proc.pid,)):  # noqa: B007
                    break
            except OSError:
                pidfd = -1
            except KeyboardInterrupt:
                # A Ctrl-C here lands as the map() call ends, before anything was opened
                # (the caller re-raises the first one anyway): open it once more, so that the
                # child is ended through a pidfd, with the retries below. The child is not
                # reaped yet (only this function reaps it); reaped by someone outside, it
                # gives ESRCH. Failing again (or a second Ctrl-C), it is ended by pid, or,
                # with _by_pid not loaded, by Popen.wait() as on macOS (no retries).
                try:
                    for pidfd in map(os.pidfd_open, (proc.pid,)):  # noqa: B007
                        break
                except (OSError, KeyboardInterrupt):
                    pidfd = -1
            ending[_PIDFD] = pidfd
        # Three tries written out, as in _cut_short; the retries only where the status is
        # read without reaping.
        try:
            ended = _end_child(proc, ending)
        except KeyboardInterrupt:
            if ending[_PIDFD] < 0 and ending[_BY_PID] is None:
                raise
            try:
                ended = _end_child(proc, ending)
            except KeyboardInterrupt:
                if ending[_PIDFD] < 0 and ending[_BY_PID] is None:
                    raise
                ended = _end_child(proc, ending)
        if not ended:
            _discard_log.warning(
                "a server process (pid %d) did not exit within %.0f s of its SIGKILL (sent, "
                "or refused by the system); left to subprocess's own reaping", proc.pid,
                DISCARD_WAIT)
    finally:
        # Each close in the finally of the one before: a Ctrl-C as one returns skips none
        # of the others.
        try:
            if proc.stdin is not None:
                proc.stdin.close()
        finally:
            try:
                if proc.stdout is not None:
                    proc.stdout.close()
            finally:
                try:
                    if proc.stderr is not None:
                        proc.stderr.close()
                finally:
                    if pidfd >= 0:
                        os.close(pidfd)


def _end_child(proc: subprocess.Popen[bytes], ending: list[Any]) -> bool:
    """One try of :func:`_discard`: SIGKILL the child's group (until its status is stored,
    which comes before its reap, so a freed pid is never signalled), wait (at most
    :data:`DISCARD_WAIT`), reap: through ``ending[_PIDFD]``; without one (-1; set so here
    when the kernel refuses ``waitid`` on it) by pid, with the module in
    ``ending[_BY_PID]``; else with ``Popen.wait()``, as before. False when the child was
    still running at the bound (given up: neither read nor reaped)."""
    pidfd = ending[_PIDFD]
    if proc.returncode is None:
        try:
            if _IS_WINDOWS:  # pragma: no cover
                proc.kill()
            else:
                os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
    if pidfd >= 0 and proc.returncode is None:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        poller.poll(_poll_ms(DISCARD_WAIT))   # SIGKILLed: not long, unless it cannot die
        try:
            info = os.waitid(os.P_PIDFD, pidfd, _PEEK_FLAGS)
        except OSError:   # a kernel without waitid on pidfds (5.3): by pid, or Popen's way
            ending[_PIDFD] = pidfd = -1
        else:
            if info is None:
                return False   # still running after SIGKILL: given up
            if proc.returncode is None:   # stored before the reap (see ProcessLifecycle._reap)
                proc.returncode = (info.si_status if info.si_code == os.CLD_EXITED
                                   else -info.si_status)
    if pidfd < 0:
        by_pid = ending[_BY_PID]
        if by_pid is not None and not by_pid.end_child(proc, ending):
            return False
        if ending[_BY_PID] is None:
            try:
                proc.wait(DISCARD_WAIT)
            except subprocess.TimeoutExpired:
                return False
        return True
    try:  # noqa: SIM105
        os.waitid(os.P_PIDFD, pidfd, os.WEXITED | os.WNOHANG)
    except OSError:
        pass   # ECHILD: reaped already, by a try cut short as waitid returned
    return True


class Aside:
    """What a stdio transport keeps that its calls never read: the spawn's options, the
    lifecycle's and the close's bookkeeping, the stderr drain, the finisher, the exit status.

    Kept out of the transport itself so that a used transport holds fewer attributes than
    CPython 3.11 keeps inline in an instance (29 at most; the class's shared keys hold 30
    names): beyond that its instance dict is a real dict, every attribute load on it takes
    the slower, hinted lookup (about 17 instructions more each; a sequential call makes
    about twenty on the transport), and no method looked up on it is specialised. Made in
    ``StdioTransport.__init__`` before anything else, so that a close (or a Ctrl-C's
    recovery) at any point finds every one of these set."""

    __slots__ = ("blocking_tried", "claimed_at", "close_lock", "cwd",
                 "die_with_parent", "env", "finisher", "holds_spawner", "idle",
                 "inherit_env", "interrupted", "leftovers_killed", "logger", "on_full",
                 "on_stderr", "owner_pid", "pid_reaped", "safe", "started", "status",
                 "stderr", "stderr_bytes", "stdin_closed_at", "stdin_grace", "stuck",
                 "wake_lock")

    def __init__(self, name: str, env: dict[str, str | None], inherit_env: bool,
                 cwd: str | None, stderr_bytes: int,
                 on_stderr: Callable[[str], None] | None, die_with_parent: bool) -> None:
        # The spawn's options (start() reads them once).
        self.safe = safe = safe_name(name)
        self.env = env
        self.inherit_env = inherit_env
        self.cwd = cwd
        self.stderr_bytes = stderr_bytes
        self.on_stderr = on_stderr
        self.die_with_parent = die_with_parent
        self.logger = logging.getLogger(f"mcpsync.server.{safe}")
        self.owner_pid = os.getpid()   # forked() compares it with the current pid
        self.started = False
        self.close_lock = threading.Lock()
        self.wake_lock = threading.Lock()   # close() must not close the pipe under wake()
        self.stuck: StreamError | None = None   # why _write_stuck closed stdin
        self.stderr: StderrDrain | None = None
        self.holds_spawner = False   # the spawner thread's reference, let go by the close
        self.finisher: FrameFinisher | None = None
        self.stdin_grace = STDIN_GRACE   # looked up now, so that it stays patchable
        self.stdin_closed_at = 0.0   # when close_input() closed stdin (0: it did not)
        self.interrupted = False   # see ProcessLifecycle.interrupted()
        #: When ``_exit_watch.claim_close()`` took the close over.
        self.claimed_at = 0.0
        #: The exit status read through the pidfd without reaping (see
        #: ``ProcessLifecycle._exit_status``), once the server has exited; ``None`` before.
        self.status: int | None = None
        #: The close's SIGKILL to the group's leftovers went out: a close cut short by
        #: Ctrl-C after its reap runs _release again, and must not signal the reaped (free)
        #: pid a second time. Set by start() too, when it killed the group of a server that
        #: has neither a pidfd nor the by-pid module (see start()).
        self.leftovers_killed = False
        #: What the close's reap returned, once it ran: by pid, ``waitpid``'s pair; through
        #: the pidfd, ``waitid``'s result (or ``(pid, 0)`` for either's ``ECHILD``). A close
        #: run again after a Ctrl-C must not wait for that (free) pid a second time, by pid
        #: above all: another child of ours may have its number.
        self.pid_reaped: object = None
        #: The session's registration with the idle watch (see ``watch_idle``), and what
        #: to call when a write finds stdin's pipe full (the session starts its reader).
        self.idle: IdleWatch | None = None
        self.on_full: Callable[[], None] | None = None
        #: Whether the first exchange tried to make the blocking read (``_blocking_read``).
        self.blocking_tried = False


class ProcessLifecycle:
    """Mixin of :class:`StdioTransport`: starting, watching and stopping its server process.

    It holds no state of its own; the attributes below are set by ``StdioTransport.__init__``
    and declared here only for the type checker. What only this half reads (and the calls
    never do) is kept in ``_aside`` (:class:`Aside`).
    """

    name: str
    argv: list[str]
    pid: int | None
    _aside: Aside
    _proc: subprocess.Popen[bytes] | None
    _closing: bool
    _closed: bool
    _rx_done: bool
    _write_lock: threading.Lock
    _rx_lock: threading.Lock
    _exchanging: int
    _stdin_fd: int
    _stdout_fd: int
    _stderr_fd: int
    _wake_r: int
    _wake_w: int
    _pidfd: int
    _poller: Any
    _rx_buf: bytearray
    _read_into: Callable[[bytearray], int | None]
    _pump: mcpsync.transport.stdio._pump.StdoutPump | None
    _blocking: mcpsync.transport.stdio._blocking_read.BlockingRead | None

    if TYPE_CHECKING:
        def wake(self) -> None:
            """Defined by the transport: unblocks a pending ``receive()``."""

        def _exchange_ended(self, timeout: float) -> bool:
            """Defined by the transport: waits for every ``exchange()``'s read to end."""

    def _open_blocking_read(self) -> None:
        """Give exchange() its blocking first read (see ``_blocking_read``), hung on the
        session's idle watch, whose thread wakes it when it stays blocked. Tried once, by
        the first exchange that finds the session watched (not at start, so that a server
        never called pays nothing); where it cannot be had (no ``/proc``, no descriptor,
        not even for the module's import), every read polls first, as before."""
        aside = self._aside
        aside.blocking_tried = True
        idle = aside.idle
        gen = idle.gen if idle is not None else None
        if idle is None or idle.left or idle.dropped or gen is None or gen.retired \
                or self._rx_done or self._closing:
            return
        try:
            # Loaded here, by the first tool call, not with the client (a module less in
            # the client's import: docs/performance.md, "Import").
            from ._blocking_read import open_blocking_read

            blocking = open_blocking_read(self._stdout_fd)
        except Exception as exc:   # the import failed (out of descriptors, say)
            aside.logger.debug("server %r: no blocking read (%s); every read polls",
                               self.name, exc)
            return
        if blocking is None:
            return
        blocking.gen = gen
        blocking.read_into(self._rx_buf)
        idle.reader = blocking
        self._blocking = blocking
        # Stored, then ``left`` and ``dropped`` looked at: unwatch_idle() stores ``left``
        # and the watch's thread ``dropped`` before each looks at the reader, so one of
        # each pair sees the other's store.
        if idle.left or idle.dropped or gen.retired:
            blocking.stop()

    def _stop_blocking_read(self) -> None:
        """No blocking read from now on (the idle watch lets the session go: nothing would
        wake one); one blocked now is woken, and goes on polling. The object stays until the
        close, which closes it; every read takes out its wake-up bytes until then."""
        blocking = self._blocking
        if blocking is not None:
            blocking.stop()

    def _close_blocking_read(self, *, after_fork: bool = False) -> None:
        """The close's: the blocking open of stdout, once no exchange can be reading (a
        forked child's copy: at once, writing nothing)."""
        blocking = self._blocking
        if blocking is not None:
            self._blocking = None
            blocking.close(after_fork=after_fork)

    def forked(self) -> bool:
        """True in a process forked from the one that started this transport."""
        return os.getpid() != self._aside.owner_pid

    # ------------------------------------------------------------------ start

    def start(self) -> None:
        """Resolve the command, spawn the server on the spawner thread, start the stderr drain.

        Raises :class:`ConfigError` naming the command (and the ``PATH`` searched) when it
        cannot be found or executed, or when ``cwd`` does not exist.
        """
        if self._aside.started:
            raise RuntimeError(f"the stdio transport for {self.name!r} was already started")
        self._aside.started = True
        if not _USE_POLL:
            # Windows pipes (no poll()): a pump thread reads stdout. Its module loads here,
            # before anything is spawned, so a Ctrl-C in the import leaves nothing to clean
            # up, and never on POSIX (import_module first, as the client's lazy loaders do).
            importlib.import_module("mcpsync.transport.stdio._pump")
        if _CAN_PEEK_PID and _by_pid is None and not pidfds_read_status():
            # Linux, where this kernel's pidfds cannot read an exit status (none, or 5.3's):
            # the status is read by pid. Loaded here, before anything is spawned, for the
            # same reason as the pump; the close, a death, a timeout and a Ctrl-C's recovery
            # never import.
            _load_by_pid()
        child_env = build_env(self._aside.env, inherit_env=self._aside.inherit_env)
        try:
            argv = resolve_argv(self.argv, child_env, cwd=self._aside.cwd)
        except ConfigError as exc:
            exc.server = self.name
            raise
        die = self._aside.die_with_parent and _spawner.HAS_DEATH_SIGNAL
        wrappable = die and _execs_directly(argv[0], self._aside.cwd)
        kwargs: dict[str, Any] = {}
        if _IS_WINDOWS:  # pragma: no cover - best-effort, untested on this CI
            kwargs["creationflags"] = getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)
        else:
            kwargs["start_new_session"] = True

        def _popen() -> subprocess.Popen[bytes]:
            # On the spawner thread: the death signal follows the thread that forks.
            full_argv, extra = argv, kwargs
            if die:
                wrapper = _spawner.die_with_parent_wrapper() if wrappable else None
                if wrapper is not None:  # vfork() path: setpriv sets it, then execs argv
                    full_argv = [*wrapper, *argv]
                elif (preexec := _spawner.die_with_parent_preexec()) is not None:
                    extra = {**kwargs, "preexec_fn": preexec}
            return subprocess.Popen(
                full_argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, bufsize=0, close_fds=True, env=child_env,
                cwd=self._aside.cwd, **extra)

        # What kills the new server's group should it get no pidfd and the by-pid module
        # then fail to load (below): built here, before the spawn, so that no call returns
        # into this frame between that failure and the kill (a second Ctrl-C could land
        # there). map() is lazy: nothing is sent until that recovery reads it, and the
        # list's one slot gets the pid (by a store, no call) right after the spawn. So is
        # what opens its pidfd, read right after that store.
        doomed = [-1]
        kill = map(operator.not_, map(os.killpg, doomed, (signal.SIGKILL,))) \
            if _CAN_PEEK_PID else None
        opening = map(os.pidfd_open, doomed) if _HAS_PIDFD else None
        try:
            proc = _spawner.spawn(_popen, discard=_discard)
        except (OSError, subprocess.SubprocessError) as exc:
            path = child_env.get("PATH", "")
            raise ConfigError(
                f"starting server {self.name!r}: cannot run {self.argv[0]!r} ({exc}); "
                f'PATH searched: "{path}"', server=self.name) from exc
        doomed[0] = proc.pid
        self._aside.holds_spawner = True
        self._proc = proc
        self.pid = proc.pid
        # The descriptors made here are stored by a ``for`` loop over a C iterator that
        # makes them: a Ctrl-C is raised where a call returns into Python code, and here none
        # does before the store, so close() always finds them (``x = os.pipe()`` could lose
        # both to a Ctrl-C landing as pipe() returned, with nobody left to close them). The
        # pidfd, or the by-pid module, comes first: a server with neither would be reaped by
        # its close before its group's last signal.
        if opening is not None:
            try:
                for self._pidfd in opening:
                    break
            except OSError:
                self._pidfd = -1
        if self._pidfd < 0 and kill is not None and _by_pid is None:
            # The kernel has pidfds that work, but this server got none (EMFILE, say): its
            # status is read by pid (``kill`` is built where _CAN_PEEK_PID: Linux).
            try:
                _load_by_pid()
            except BaseException as exc:
                # The import needs a descriptor too (EMFILE again), or a Ctrl-C cut it short.
                # The close would then wait with Popen, which reaps, and signal the group
                # after that, when its pid may be another process's: end the group here,
                # while the server is surely unreaped, and mark its last signal sent.
                # The mark is stored by a for loop over the C iterators built before the
                # spawn, which send the signal and make the True: from the handler's start
                # to the mark no call returns into Python code, so no second Ctrl-C lands
                # before the kill (on 3.11 and later; 3.10 also checks for one as a handler
                # begins).
                try:
                    for self._aside.leftovers_killed in kill:
                        break
                except OSError:   # not expected of our own unreaped child
                    self._aside.leftovers_killed = True
                if isinstance(exc, OSError):
                    why = ("this process is out of file descriptors (close other "
                           "connections, or raise the limit: ulimit -n)"
                           if exc.errno in (errno.EMFILE, errno.ENFILE) else exc)
                    raise OSError(exc.errno, f"starting server {self.name!r}: {why}; the "
                                  "server was killed") from exc
                raise
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        self._stdin_fd = proc.stdin.fileno()
        self._stdout_fd = proc.stdout.fileno()
        # receive() reads through the pipe's own file object (a FileIO: bufsize=0), which
        # is closed with stdout (_close_fd): its readinto() costs about 200 instructions
        # less per read than os.readv() of the same descriptor into the same buffer.
        self._read_into = cast("io.FileIO", proc.stdout).readinto
        self._stderr_fd = proc.stderr.fileno()
        if _USE_POLL:
            os.set_blocking(self._stdout_fd, False)  # receive() reads before it polls
            os.set_blocking(self._stdin_fd, False)  # a full pipe must not block a write
            for self._wake_r, self._wake_w in itertools.starmap(os.pipe, ((),)):
                break
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
            from ._pump import StdoutPump  # loaded at the top of start()

            self._pump = StdoutPump(self._stdout_fd, name=self._aside.safe,
                                    read_size=len(self._rx_buf))  # as receive() reads
            self._pump.start()
        self._rx_done = False
        aside = self._aside
        aside.stderr = StderrDrain(self._stderr_fd, name=aside.safe, logger=aside.logger,
                                   ring_bytes=aside.stderr_bytes, on_stderr=aside.on_stderr,
                                   use_poll=_USE_POLL,
                                   closer=lambda: self._close_fd("_stderr_fd", proc.stderr))
        aside.stderr.start()

    # ------------------------------------------------------------------ process state

    def returncode(self) -> int | None:
        """The exit status (negative: killed by that signal), or ``None``; never blocks.

        On Linux (with a pidfd, or by pid without one) the server is left unreaped until
        the close (see :meth:`_exit_status`); elsewhere (macOS, the BSDs), and once the
        transport is closed, ``Popen.poll()`` reaps. Once known, the status is an attribute
        read."""
        proc = self._proc
        if proc is None or self.forked():
            return None
        status = self._aside.status
        if status is not None:
            return status
        return self._exit_status(proc)

    def wait_exit(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` seconds for the server to exit and return its status, or
        ``None`` if it is still running. On Linux the server is left unreaped, as by
        :meth:`returncode` (with a pidfd, or by pid without one); elsewhere (macOS, the
        BSDs) this reaps it, through ``Popen``."""
        proc = self._proc
        if proc is None or self.forked():
            return None
        status = self._aside.status
        if status is not None:
            return status
        if proc.returncode is None:
            self._wait_exited(timeout)
        return self._exit_status(proc)

    def _exit_status(self, proc: subprocess.Popen[bytes]) -> int | None:
        """The server's exit status, or ``None`` while it runs, *without reaping it* where a
        pidfd allows: only the close reaps, after its last ``killpg()``.

        Why: the close signals the server's process group by the server's pid, and its last
        signal (SIGKILL to the group's leftovers) comes after the server has exited. While
        the server is an unreaped zombie its pid, and so the group id, stays ours; reaped
        earlier (the session's loss handling and the gateway ask for the status as soon as
        a server dies), the number is free as soon as no process is left in the server's
        group and session, and the kernel may give it to an unrelated process that leads a
        group of its own, which that signal would then kill. So the status is read with
        ``waitid(P_PIDFD, ..., WNOWAIT)`` and kept in ``_aside.status`` (an exited process's
        status never changes; it is read once).

        A transport never closed keeps its exited server a zombie until it is garbage
        collected: ``Popen.__del__`` then reaps it (or, still running, hands it to
        ``subprocess._active``, which the next ``Popen`` anywhere in the process polls).
        No finalizer closes a bare transport; a client's does (``client/_finalizer``), and
        the session and the gateway close the transport of a server that died.

        Without such a pidfd (Linux before 5.3, a ``pidfd_open`` that failed, or 5.3,
        whose kernel refuses ``waitid`` on a pidfd) the status is read by pid the same way
        (``_by_pid.pid_status``). Elsewhere (macOS, the
        BSDs) this is ``Popen.poll()``, which reaps, as before: the window stays there, and
        it would stay even if this did not reap, because the close itself can only wait for
        the exit by reaping (``Popen.wait()``) before it signals the leftovers. Windows has
        no process groups to signal: the close ends the server through its process handle,
        which ``Popen`` keeps open (and the pid with it) until it is collected.
        """
        pidfd = self._pidfd
        if pidfd >= 0 and _CAN_PEEK and proc.returncode is None:
            try:
                info = os.waitid(os.P_PIDFD, pidfd, _PEEK_FLAGS)
            except OSError:
                # ECHILD: reaped meanwhile, by the close or by someone outside (SIGCHLD
                # ignored); EINVAL: a kernel without P_PIDFD (read by pid then); EBADF: the
                # close closed the pidfd. Read below: Popen knows (or finds out, reaping as
                # before).
                pass
            else:
                if self._pidfd != pidfd:
                    # The close closed the pidfd meanwhile (it forgets the number before
                    # closing it, and only then can the number be another file's, or another
                    # server's pidfd): the answer may not be ours. The close has sent its
                    # signals and reaped the server (or given it up) by then.
                    return proc.poll()
                if info is None:
                    return None
                # Popen's convention: the exit code, or minus the signal that killed it.
                status = info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
                self._aside.status = status
                return status
        # By pid where start() loaded _by_pid; else Popen.poll(): macOS and the BSDs, and on
        # a machine whose pidfds work the paths that get here, where it answers as the read
        # by pid did (see _by_pid).
        by_pid = _by_pid
        if by_pid is None:
            return proc.poll()
        return by_pid.pid_status(self, proc)

    def _wait_exited(self, timeout: float) -> bool:
        """Wait for exit *without reaping* where a pidfd allows it (so the pid, and with it
        the process group id, cannot be reused while we still signal the group)."""
        proc = self._proc
        assert proc is not None
        if proc.returncode is not None or self._aside.status is not None:
            return True
        pidfd = self._pidfd
        if pidfd >= 0:
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)
            return bool(poller.poll(_poll_ms(timeout)))
        by_pid = _by_pid
        if by_pid is not None:   # Linux: by pid, not reaping (see _by_pid)
            return by_pid.wait_exited(self, proc, timeout)
        try:
            proc.wait(min(timeout, _MAX_POLL_S))
        except subprocess.TimeoutExpired:
            return False
        return True

    def _reap(self, proc: subprocess.Popen[bytes], timeout: float) -> None:
        """Reap the exited server (waiting up to ``timeout`` for the exit), for the close.

        On Linux this never calls ``Popen.wait()`` or ``Popen.poll()``: CPython's
        ``Popen._wait`` takes its waitpid lock with ``acquire(False)`` and enters its
        ``try`` only after that returns, so a Ctrl-C landing as ``acquire`` returns leaves
        the lock held for good (every later ``wait()`` and ``poll()`` of that ``Popen``
        then gives up or spins, and the server stays a zombie); and a Ctrl-C as
        ``os.waitpid`` returns in its ``_try_wait`` loses the status (``Popen`` then
        records 0 from the ``ECHILD`` of its next try). Instead: wait on the pidfd, read
        the status without reaping into ``_aside.status`` (as :meth:`_exit_status` reads it),
        store it as ``proc.returncode``, and only then reap, with ``waitid(P_PIDFD, ...,
        WEXITED)`` (without a pidfd, by pid: ``_by_pid.reap``).

        ``returncode`` is stored *before* the reap. No call returns between the two, so no
        Ctrl-C lands there; were one to, it would leave an exited, unreaped server that
        ``Popen`` believes reaped: that zombie keeps its pid ours (nothing can be given that
        number), and the close run again after the Ctrl-C (``_cut_short``, or the owner's
        next :meth:`close`) comes back here and reaps it through the pidfd, which the close
        closes only after this. Stored after the reap, a Ctrl-C between would leave
        ``Popen`` believing the child unreaped, and its ``poll()``, ``__del__`` or
        ``subprocess._cleanup`` could later ``waitpid()`` the freed number, by then perhaps
        another child of ours, and take that child's status.
        Each step can be run again, up to the reap: once that has run, what it returned is
        in ``_aside.pid_reaped``, stored by the ``for`` loop over the C iterator that makes the
        call (``map()``), so that no Ctrl-C lands between the reap and the record (see
        ``start()``), and every later run returns at once. Without that record, a close cut
        short after the reap (a Ctrl-C as the pidfd's ``os.close()`` returns, say) would
        come back here with the pidfd closed and reap by pid, ``waitpid`` on a pid that is
        free by then and may be another child's, whose status would be taken. The pidfd
        reap of an already reaped server fails (``ECHILD``: reaped by someone outside),
        which is recorded too.

        Without a pidfd (Linux before 5.3, a ``pidfd_open`` that failed), or where the
        kernel refuses ``waitid`` on one (5.3: ``EINVAL``), the same is done by pid
        (``_by_pid.reap``, through :meth:`_reap_without_pidfd`).
        """
        if self._aside.pid_reaped is not None:
            return   # reaped by a run of this that a Ctrl-C cut short after the reap
        pidfd = self._pidfd
        if pidfd < 0 or not _CAN_PEEK:
            self._reap_without_pidfd(proc, timeout)
            return
        if proc.returncode is None:
            if self._aside.status is None:
                # The caller saw the exit on the pidfd: the first look finds the status;
                # the wait is for a close run again after a Ctrl-C.
                try:
                    info = os.waitid(os.P_PIDFD, pidfd, _PEEK_FLAGS)
                    if info is None:
                        poller = select.poll()
                        poller.register(pidfd, select.POLLIN)
                        poller.poll(_poll_ms(timeout))
                        info = os.waitid(os.P_PIDFD, pidfd, _PEEK_FLAGS)
                except OSError:   # EINVAL (5.3); ECHILD, reaped by someone outside
                    self._reap_without_pidfd(proc, timeout)
                    return
                if info is None:
                    return   # still running after SIGKILL: given up (the caller says so)
                self._aside.status = (info.si_status if info.si_code == os.CLD_EXITED
                                      else -info.si_status)
            if proc.returncode is None:   # else Popen reaped it
                proc.returncode = self._aside.status
        try:
            for self._aside.pid_reaped in map(os.waitid, (os.P_PIDFD,), (pidfd,),
                                              (os.WEXITED | os.WNOHANG,)):
                break
        except ChildProcessError:   # ECHILD: reaped already, by someone outside
            self._aside.pid_reaped = (proc.pid, 0)
        except OSError:
            # EINVAL: a 5.3 kernel, whose status was read by pid (see _exit_status); it is
            # reaped by pid too.
            self._reap_without_pidfd(proc, timeout)

    def _reap_without_pidfd(self, proc: subprocess.Popen[bytes], timeout: float) -> None:
        """:meth:`_reap` without a pidfd that reads the status: by pid (``_by_pid.reap``)
        where ``start()`` loaded ``_by_pid``; else (macOS, the BSDs, and the few paths that
        get here on a machine whose pidfds work: see ``_by_pid``) ``Popen.wait(timeout)``.

        wait(), not poll(): poll() gives up at once when another thread is reaping (a
        reader asking for the exit code, say, holds Popen's waitpid lock), and the server
        would then look unreaped, its hold on the spawner thread never let go.
        try/except rather than contextlib.suppress() here and in the other steps every
        server's close runs: the same, without making a suppress object each time."""
        by_pid = _by_pid
        if by_pid is not None:
            by_pid.reap(self, proc, timeout)
            return
        try:  # noqa: SIM105
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass

    def stderr_tail(self) -> str:
        """The whole stderr ring (newest ``stderr_bytes`` bytes), decoded with replacement.

        Once the server has exited this first lets the drain catch up (briefly), so that
        the last lines it wrote before dying are included.
        """
        drain = self._aside.stderr
        if drain is None:
            return ""
        proc = self._proc
        if proc is not None and (proc.returncode is not None or self._aside.status is not None):
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
        with self._aside.close_lock:
            if self._closed:
                return
            # Asked before anything changes: a Ctrl-C here (or as close() begins) leaves the
            # transport as it was, for the owner's next close() (a session makes one at once).
            forked = self._proc is not None and self.forked()
            self._closing = True
            self._rx_done = True
            if self._proc is None:
                self._closed = True
                return
            if forked:
                try:
                    self._drop_after_fork()
                finally:
                    self._closed = True
                return
            if self._aside.interrupted:   # the owner's close was interrupted before this one
                again = self._cut_short()
                if again is not None:
                    raise again   # a Ctrl-C during it: the caller gets one
                return
            try:
                self._shutdown()
            except BaseException:
                # Interrupted (Ctrl-C in one of the waits) or failed: the server must not
                # outlive the close, nor its descriptors and threads. Marked first, so that
                # should another Ctrl-C skip the ending, the next close() cuts short too.
                self._aside.interrupted = True
                self._cut_short()
                raise
            self._closed = True

    def interrupted(self) -> None:
        """Make the next :meth:`close` end the server at once, as a close interrupted by
        Ctrl-C does: for an owner whose own part of the close was interrupted (a session
        joining its reader, say), so that the user who pressed Ctrl-C does not wait for the
        polite shutdown."""
        self._aside.interrupted = True

    def _cut_short(self) -> KeyboardInterrupt | None:
        """The end of an interrupted close: SIGTERM the server's group, a quarter of a
        second, SIGKILL, and :meth:`_release` (the leftovers' SIGKILL, then the reap), each
        wait short. ``subprocess.run`` gives a child a quarter of a second after a Ctrl-C
        too, and then kills it; the child
        there got the terminal's SIGINT, a server here (in a session of its own) did not,
        so SIGTERM comes first.

        A Ctrl-C during this starts it over without the grace, three times in all (every
        step allows being run again); returned is the first such Ctrl-C, or None. Only once
        it is done is the transport closed: cut short three times, it is left not closed,
        and its next :meth:`close` runs it again.
        """
        # Three tries written out: a loop's back edge is where a pending Ctrl-C is raised too,
        # outside any try; between these statements none is.
        try:
            self._end_now(first=True)
            return None
        except KeyboardInterrupt as exc:   # Ctrl-C again: start over, without the grace
            caught = exc
        try:
            self._end_now(first=False)
            return caught
        except KeyboardInterrupt:
            pass
        try:  # noqa: SIM105 - suppress()'s __enter__ would be a call outside the try
            self._end_now(first=False)
        except KeyboardInterrupt:
            pass
        return caught

    def _end_now(self, *, first: bool) -> None:
        """One try of :meth:`_cut_short`; the grace before SIGKILL on the first only."""
        self.wake()   # a receive() must let go of stdout (no pidfd may wake it)
        deadline = time.monotonic() + KILL_WAIT + JOIN_TIMEOUT
        exited = self._wait_exited(0)
        if not exited and first:
            self._signal_group(kill=False)
            exited = self._wait_exited(INTERRUPTED_GRACE)
        if not exited:
            self._signal_group(kill=True)
            exited = self._wait_exited(KILL_WAIT)
        self._release(deadline, exited=exited, stdin_closed=False)
        self._closed = True

    def close_input(self) -> None:
        """Begin the shutdown without waiting: close the server's stdin now, if no write
        holds it. Safe from any thread; a no-op once closing, or in a forked child.

        The server sees EOF and starts exiting while the caller goes on; :meth:`close` then
        waits for that exit, counting the stdin grace from this moment. Closing many servers
        this way first, and only then waiting for each, lets them all exit at once instead
        of one after another. A write in progress keeps stdin open: :meth:`close` deals with
        it as before.
        """
        if self._proc is None or self._closing or self.forked():
            return
        if self._stdin_fd >= 0 and self._close_stdin(timeout=0):
            self._aside.stdin_closed_at = time.monotonic()

    def _shutdown(self) -> None:
        now = time.monotonic()
        deadline = now + CLOSE_BOUND

        def left(step: float) -> float:
            return max(0.0, min(step, deadline - time.monotonic()))

        # Unblock a receive() in progress; it returns None from now on. stdout stays open
        # (unread) until the server is gone, so one that writes a last line while shutting
        # down gets no EPIPE out of it.
        self.wake()
        # "the client SHOULD initiate shutdown by first closing the input stream to the child
        # process (the server)" - unless a writer is stuck in a full pipe; then the signals
        # below will break its write. close_input() may have closed it already: the grace
        # then runs from that moment.
        stdin_closed = self._close_stdin(timeout=0.2)
        grace = self._aside.stdin_grace
        if self._aside.stdin_closed_at:
            grace = max(0.0, grace - (now - self._aside.stdin_closed_at))
        exited = self._wait_exited(left(grace)) if stdin_closed else False
        # "wait for the server to exit, or send SIGTERM if the server does not exit within a
        # reasonable time"
        if not exited:
            self._signal_group(kill=False)
            exited = self._wait_exited(left(TERM_GRACE))
        # "send SIGKILL if the server does not exit within a reasonable time after SIGTERM"
        if not exited:
            self._signal_group(kill=True)
            exited = self._wait_exited(max(left(KILL_WAIT), 0.05))
        self._release(deadline, exited=exited, stdin_closed=stdin_closed)

    def _release(self, deadline: float, *, exited: bool, stdin_closed: bool) -> None:
        """The end of the shutdown, once the server exited (or was given up after SIGKILL):
        kill its group's orphans, reap it, join the threads and close every descriptor,
        each wait bounded by ``deadline``."""
        proc = self._proc
        assert proc is not None

        def left(step: float) -> float:
            return max(0.0, min(step, deadline - time.monotonic()))

        # The idle watch lets stdout and the pidfd go before they are closed below (marked
        # let go now, which its thread tests before it asks the session: see _idle_watch).
        idle = self._aside.idle
        if idle is not None:
            _idle_watch.unwatch(idle)
        # The leader is gone (not yet reaped, with a pidfd or by pid on Linux, so its pid is
        # still the group's): anything left in its group is an orphan of the server, which
        # must not outlive close(). The reap comes only after this last signal, which is
        # sent once: a Ctrl-C after the reap below starts this over (see _cut_short), and by
        # then the pid may be another process's.
        if not self._aside.leftovers_killed:
            self._signal_group(kill=True, leftovers_only=True)
            self._aside.leftovers_killed = True
        if exited:
            self._reap(proc, left(JOIN_TIMEOUT) or 0.05)
        if not stdin_closed:
            self._close_stdin(timeout=left(JOIN_TIMEOUT))
        finisher = self._aside.finisher
        if finisher is not None:  # it sees _closing within a WRITE_SLICE
            finisher.join(left(JOIN_TIMEOUT) or 0.05)
        drain = self._aside.stderr
        if drain is not None:
            drain.stop(timeout=left(JOIN_TIMEOUT) or 0.05)  # closes the stderr pipe
        if drain is None or drain.release():
            # Also after the drain's own close of it, which a Ctrl-C may have cut short (a
            # second stop() does not close it again): no thread reads the pipe any more.
            self._close_fd("_stderr_fd", proc.stderr)
        # stdout and the wake-up pipe are closed only when no receive() or exchange() can be
        # using them (a descriptor number closed under a poll() could be reused by then).
        # receive() reads under the read lock; exchange() reads without it, and says so by
        # the count _exchanging, to which it adds its 1 before it looks at _rx_done: stored
        # (by close() or claim_close()) before this looks at the count, so that one of the
        # two sees the other's store. An exchange still reading is woken and waited for
        # within the same bound; one that has not ended by then keeps stdout, the wake-up
        # pipe and the pidfd open, as a receive() that keeps the lock keeps the first two.
        # Kept for good: a later close() returns at once and nothing else closes them
        # (that exchange's thread is stuck, or was stopped inside it), as stdout and the
        # wake-up pipe stay open after a receive() that kept the lock.
        pump = self._pump
        if pump is None or pump.join(left(JOIN_TIMEOUT) or 0.05):
            # Else an escaped grandchild holds stdout: the daemon pump keeps its descriptor.
            # The lock is taken as _close_stdin takes the write lock, so that a Ctrl-C as
            # acquire() returns cannot leave it held (a later close() would wait for it).
            took = ended = False
            for took in itertools.starmap(  # noqa: B007 - `took` is the point
                    self._rx_lock.acquire, ((True, left(JOIN_TIMEOUT) or 0.05),)):
                break
            if took:
                try:
                    ended = not self._exchanging or self._exchange_ended(
                        left(JOIN_TIMEOUT) or 0.05)
                    if ended:
                        self._close_fd("_stdout_fd", proc.stdout)
                        self._close_blocking_read()
                        with self._aside.wake_lock:
                            self._close_raw("_wake_w")
                        self._close_raw("_wake_r")
                finally:
                    self._rx_lock.release()
        # The pidfd: once every exchange was seen to end above (an exchange that adds its 1
        # after that sees _rx_done and polls nothing). Else (the read lock not taken within
        # the bound: a receive() stuck in its poll) while the count is 0, closed under that
        # receive() as it always was.
        if ended or not self._exchanging:
            self._close_raw("_pidfd")
        if idle is not None:
            # The watch thread, if this was the last session it watched (no lock held here
            # that it could wait for).
            _idle_watch.join_ended(left(JOIN_TIMEOUT) or 0.05)
        if proc.returncode is None:
            self._aside.logger.warning("server %r (pid %s) could not be reaped after SIGKILL; "
                                       "given up", self.name, proc.pid)
        elif self._aside.holds_spawner:
            self._aside.holds_spawner = False
            _spawner.release()

    def hurry(self) -> None:
        """Make :meth:`close` send SIGTERM right after closing stdin (no 2 s grace): for a
        program that never answered the handshake, which has no MCP shutdown to honour."""
        self._aside.stdin_grace = min(self._aside.stdin_grace, 0.05)

    def _close_raw(self, attr: str) -> None:
        fd = getattr(self, attr)
        if fd >= 0:
            # A store, not setattr(): a Ctrl-C is raised where a call returns, and none
            # returns between forgetting the number and closing it, so neither is done
            # without the other (a number closed twice could be another file's by then).
            vars(self)[attr] = -1
            os.close(fd)

    def _close_stdin(self, timeout: float) -> bool:
        # The write lock is taken as send_bytes_until takes it (a starmap read by a for loop),
        # so that a Ctrl-C as acquire() returns cannot leave it taken: every writer waits
        # for it before it looks at _closing, and would wait for ever.
        ok = False
        for ok in itertools.starmap(self._write_lock.acquire,  # noqa: B007 - `ok` is the point
                                    ((True, timeout),)):
            break
        if not ok:
            return False
        try:
            proc = self._proc
            self._close_fd("_stdin_fd", proc.stdin if proc is not None else None)
        finally:
            self._write_lock.release()
        return True

    def _close_fd(self, attr: str, fileobj: Any) -> None:
        # The pipe's file object is closed even when ``attr`` was never set (a start() cut
        # short by Ctrl-C before it stored the number): closing a closed one does nothing.
        if getattr(self, attr) >= 0:
            setattr(self, attr, -1)
        if fileobj is not None:
            try:  # noqa: SIM105 - see _release
                fileobj.close()
            except OSError:
                pass

    def _signal_group(self, *, kill: bool, leftovers_only: bool = False) -> None:
        """SIGTERM (or SIGKILL) the server's process group; ``leftovers_only`` says that the
        leader has exited and only its orphans are meant. Windows has no groups to signal:
        TerminateProcess (nothing for leftovers).

        The leftovers are signalled without asking first whether the group has members
        (``killpg(pid, 0)``, one system call per server): with a pidfd the leader is still
        unreaped here (neither the pidfd's watch nor :meth:`returncode` and
        :meth:`wait_exit` reap; see :meth:`_exit_status`), so the group has a member and the
        question said yes; so it is without one on Linux, where the status is read by pid.
        Elsewhere those two reap with ``Popen.poll()`` (and the close with
        ``Popen.wait()``), and an empty group fails the signal (ESRCH, ignored here)
        exactly as it failed the question."""
        proc = self._proc
        if proc is None:
            return
        if _IS_WINDOWS:  # pragma: no cover - best-effort, untested on this CI
            if not leftovers_only and proc.returncode is None:
                with contextlib.suppress(OSError):
                    proc.kill()
            return
        sig = signal.SIGKILL if kill else signal.SIGTERM
        try:  # noqa: SIM105 - see _release
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

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
        self._close_blocking_read(after_fork=True)   # the child's copy: nothing written
        with self._aside.wake_lock:
            self._close_raw("_wake_w")
        if proc is not None:
            # Keep Popen.__del__ from trying to reap a child that is not ours.
            proc.returncode = 0 if proc.returncode is None else proc.returncode
        if self._aside.stderr is not None:
            self._aside.stderr.abandon()
        self._proc = None
        self._aside.holds_spawner = False


# ExitWatch (and its _Watched) live in _exit_watch: only the Manager's close of many servers
# uses them, and a client's import need not compile them.
if TYPE_CHECKING:
    from ._exit_watch import ExitWatch as ExitWatch, _Watched as _Watched
else:
    def __getattr__(name: str) -> Any:
        """``ExitWatch`` and ``_Watched``, importable from here as before, loaded on first
        access (PEP 562). Nothing reads a missing name of this module on a connection."""
        if name in ("ExitWatch", "_Watched"):
            import importlib

            return getattr(importlib.import_module("mcpsync.transport.stdio._exit_watch"),
                           name)
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        """``ExitWatch`` and ``_Watched`` too, so that ``dir()`` and ``help()`` list them."""
        return sorted({*globals(), "ExitWatch", "_Watched"})
