"""The server's exit read, waited for and reaped by pid: Linux without a pidfd that reads it.

On Linux 5.4 and later a server's pidfd reads its exit status without reaping it
(``waitid(P_PIDFD, fd, WEXITED | WNOHANG | WNOWAIT)``), and :mod:`._lifecycle` does
everything through it. Without one (a Python or kernel without ``pidfd_open``, a seccomp
filter that refuses it, or Linux 5.3, whose ``waitid`` refuses a pidfd with ``EINVAL``) the
same is done by pid here: ``waitid(P_PID, pid, WEXITED | WNOHANG | WNOWAIT)`` reads the
status and leaves the server unreaped on every Linux, so its pid, which is also its process
group's id, stays ours until the close has sent its last signal to the group.

Why a module of its own: every client import compiles ``_lifecycle``, and a machine whose
pidfds read the status never runs this. So it is loaded only by a transport that may need
it, and never by a close, a server's death, a timeout or a Ctrl-C recovery (an import there
could be cut short by the next Ctrl-C, and would slow the path down the first time):

- ``ProcessLifecycle.start()`` loads it *before* spawning (as it loads the Windows stdout
  pump), where Linux can read a status by pid and :func:`._lifecycle.pidfds_read_status`
  says this kernel's pidfds cannot: a Ctrl-C in that import leaves nothing to clean up.
  That question is asked once per process, without a child (see there);
- and *right after* the spawn, where the new server got no pidfd although the kernel has
  them (``pidfd_open`` failed with ``EMFILE``, say). That import can fail too: it needs a
  descriptor of its own (``EMFILE`` again, the usual case), or a Ctrl-C cuts it short.
  Without this module the owner's close (the client closes at once) would wait with
  ``Popen``, which reaps, and then send the group its leftovers' ``SIGKILL``, when the pid
  may be another process's. So ``start()`` kills the group there and then, while the server
  is surely unreaped, marks that the group's last signal went out (the close sends it no
  other once it has exited), and raises: an ``OSError`` naming the server (and, for
  ``EMFILE``, that the process is out of descriptors), or the ``KeyboardInterrupt``. The
  close then only waits for it and reaps it with ``Popen``: its signals go out only after
  a wait that found the server running, which reaped nothing, so none after that reap.
  What sends that ``killpg`` is built before the spawn, so no call returns between the
  failed import and the signal, and a second Ctrl-C cannot skip it (on 3.11 and later;
  3.10 also raises one as the handler begins, and that one leaves the close as it was
  before this guard: reaped by ``Popen``, then the leftovers' ``SIGKILL``).

Once loaded, ``_lifecycle._by_pid`` holds this module, and every transport of the process
uses it wherever it has no pidfd that reads the status, exactly as before the move. Where it
is not loaded (a machine whose pidfds work, or not Linux), each path that reached the by-pid
code before does this:

- ``_exit_status`` (``returncode()``, ``wait_exit()``), after its ``waitid`` on the pidfd
  fails with ``ECHILD`` (reaped by the close, whose status is stored first, or by someone
  outside with ``SIGCHLD`` ignored) or ``EBADF`` (the close closed the pidfd, after its
  reap and its last signal), or with no pidfd left (the close closed it): ``Popen.poll()``.
  That is what the read by pid answered too (``ECHILD`` by pid, the status stored, or the
  transport closed), except in one moment: a close that gave its server up after
  ``SIGKILL`` closes the pidfd before it marks itself closed, and a status asked in
  between is read by pid without reaping where this module is loaded, and reaped by
  ``Popen.poll()`` where it is not (after the close's last signal either way).
  ``EINVAL`` (no ``P_PIDFD``) cannot come from a kernel whose pidfds the question found
  working, and would get ``Popen.poll()`` too, which reaps;
- ``_wait_exited`` (the close's waits, ``wait_exit()``) without a pidfd: a server whose
  pidfd could not be opened has this module (loaded by ``start()``), or, where that load
  failed, was killed by ``start()`` with its last signal marked sent (above), and is waited
  for and reaped with ``Popen.wait()``; otherwise only a server the close gave up on after
  ``SIGKILL`` gets here (a ``wait_exit()`` after that
  close, or the close run again after a Ctrl-C that came after its first run closed the
  pidfd), and waits with ``Popen.wait()``, as on macOS, where the read by pid polled
  ``Popen.poll()`` (the transport closed) or read without reaping (the close run again);
- ``_reap`` without a pidfd, or after its ``waitid`` on the pidfd failed: ``Popen.wait()``
  (``ProcessLifecycle._reap_without_pidfd``). ``ECHILD`` (reaped by someone outside) then gives
  the same result as by pid (``Popen`` records 0). A close run again after a Ctrl-C that
  came after the reap through the pidfd never gets here, with this module or without: that
  reap is recorded (``_aside.pid_reaped``) and ``_reap`` returns at once, so neither ``Popen``
  nor ``waitpid`` looks at the pid, free by then. ``EINVAL`` of the final reap cannot
  come from such a kernel; were it to, the
  server would be left a zombie (``Popen`` holds its status and reaps no more) until the
  process ends;
- the discard (``_discard`` and ``_end_child``), when the new child's pidfd could not be
  opened (``EMFILE``, or a Ctrl-C raised as that call ended twice: after the first, it is
  opened once more): one ``killpg`` and one
  ``Popen.wait()``, bounded as before, with no try run again, as on macOS: a second Ctrl-C
  in that wait goes to the caller and may leave the child a zombie (see
  ``docs/processes.md``). A 5.3 kernel's ``EINVAL`` there cannot happen (the module is
  loaded on such a kernel).
"""

from __future__ import annotations

import os
import subprocess
import time
from typing import TYPE_CHECKING, Any

from mcpsync.transport.stdio import _lifecycle

if TYPE_CHECKING:
    from typing import Protocol

    class Functions(Protocol):
        """What ``_lifecycle`` calls of this module (``_lifecycle._by_pid``'s type), for the
        type checker only: ``_lifecycle`` does not load the module to type it by, and
        ``Any`` would check no call. (The loader casts the module to it rather than import
        it with a ``from`` the checker would hold to it: that costs the client import
        0.4 M instructions uncached.)"""

        def end_child(self, proc: subprocess.Popen[bytes], ending: list[Any]) -> bool: ...

        def pid_status(self, t: _lifecycle.ProcessLifecycle,
                       proc: subprocess.Popen[bytes]) -> int | None: ...

        def wait_exited(self, t: _lifecycle.ProcessLifecycle, proc: subprocess.Popen[bytes],
                        timeout: float) -> bool: ...

        def reap(self, t: _lifecycle.ProcessLifecycle, proc: subprocess.Popen[bytes],
                 timeout: float) -> None: ...

__all__ = ["end_child", "pid_status", "reap", "wait_exited"]

#: Read the status, leave the child unreaped, never block.
_PID_PEEK_FLAGS = os.WEXITED | os.WNOHANG | os.WNOWAIT


def end_child(proc: subprocess.Popen[bytes], ending: list[Any]) -> bool:
    """``_lifecycle._end_child`` without a pidfd that reads the status: the status read by
    pid without reaping (polled with short sleeps, as ``Popen.wait(timeout)`` polls, for at
    most ``_lifecycle.DISCARD_WAIT``), stored, and only then the child reaped by pid, once
    (a pid reaped is free, and may be another child's by the next try). Clears
    ``ending[_BY_PID]`` when the child is not there to read (reaped by someone outside,
    ``SIGCHLD`` ignored): then ``Popen.wait()`` finds out, as before. False when it was
    still running at the bound."""
    if proc.returncode is None:
        deadline = time.monotonic() + _lifecycle.DISCARD_WAIT
        delay = 0.0005
        while True:
            try:
                # SIGKILLed: not long. A Ctrl-C meanwhile leaves the child as it was.
                info = os.waitid(os.P_PID, proc.pid, _PID_PEEK_FLAGS)
            except OSError:   # ECHILD
                ending[_lifecycle._BY_PID] = None
                return True
            if info is not None or proc.returncode is not None:
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False   # still running after SIGKILL: given up
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, 0.05)
        if proc.returncode is None:   # stored before the reap (see ProcessLifecycle._reap)
            proc.returncode = (info.si_status if info.si_code == os.CLD_EXITED
                               else -info.si_status)
    if ending[_lifecycle._REAPED] is None:
        # Stored by the for loop before any Ctrl-C can land (see ProcessLifecycle.start): a
        # try run again never waits for this pid a second time.
        try:
            for ending[_lifecycle._REAPED] in map(os.waitpid, (proc.pid,), (os.WNOHANG,)):
                break
        except OSError:   # ECHILD: not ours any more
            ending[_lifecycle._REAPED] = (proc.pid, 0)
    return True


def pid_status(t: _lifecycle.ProcessLifecycle, proc: subprocess.Popen[bytes]) -> int | None:
    """``ProcessLifecycle._exit_status`` by pid: ``waitid(P_PID, pid, ...WNOWAIT)`` reads
    the status and leaves the server unreaped, as through a pidfd; once ``Popen`` has the
    status, ``Popen.poll()``.

    A pid is not a pidfd: once reaped, the number may be another child's. Only the close
    reaps, and it stores the status in ``Popen.returncode`` before (see :func:`reap`), so
    ``returncode`` is looked at again after the read: set, the read may have found another
    process, and the close's status is the answer.

    Once the transport is closed (a server the close gave up on after SIGKILL, say),
    ``Popen.poll()`` reaps, as before: the close has sent its last signal."""
    if proc.returncode is not None or t._closed:
        return proc.poll()
    try:
        info = os.waitid(os.P_PID, proc.pid, _PID_PEEK_FLAGS)
    except OSError:
        # ECHILD: reaped, by the close (its status stored first) or by someone outside
        # (SIGCHLD ignored). Popen knows (or finds out, reaping as before).
        return proc.poll()
    if proc.returncode is not None:   # the close reaped meanwhile: see above
        return proc.returncode
    if info is None:
        return None
    status = info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
    t._aside.status = status
    return status


def wait_exited(t: _lifecycle.ProcessLifecycle, proc: subprocess.Popen[bytes],
                timeout: float) -> bool:
    """``ProcessLifecycle._wait_exited`` without a pidfd: the status read by pid (not
    reaping, see :func:`pid_status`) with short sleeps between, as ``Popen.wait(timeout)``
    itself polls (0.5 ms doubling up to 50 ms), but never through ``Popen``'s waitpid lock,
    which a Ctrl-C can leave held for good. True once the server has exited."""
    deadline = time.monotonic() + timeout
    delay = 0.0005
    while pid_status(t, proc) is None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        time.sleep(min(delay, remaining))
        delay = min(delay * 2, 0.05)
    return True


def reap(t: _lifecycle.ProcessLifecycle, proc: subprocess.Popen[bytes], timeout: float) -> None:
    """``ProcessLifecycle._reap`` without a pidfd that reads the status: the same steps by
    pid. Wait for the exit and read the status without reaping (:func:`wait_exited`), store
    it as ``proc.returncode``, and only then reap, with ``waitpid(pid, WNOHANG)``, never
    through ``Popen``.

    A pid reaped is free, and may be another child's (another server's) by the time a
    close cut short by Ctrl-C runs this again; so the reap runs once: what it returns is
    stored (``_aside.pid_reaped``) by the ``for`` loop over the C iterator that makes the call,
    before any Ctrl-C can land (see ``ProcessLifecycle.start``). ``_aside.status`` set means the
    status was read from the unreaped server; nothing but this reaps it after that
    (``Popen`` takes the stored ``returncode`` as the end), so the reap finds it.

    Where the server is not there to read (``ECHILD``: reaped by someone outside, with
    ``SIGCHLD`` ignored) ``Popen`` finds out, as before.
    """
    if proc.returncode is None:
        if t._aside.status is None and not wait_exited(t, proc, timeout):
            return   # still running after SIGKILL: given up (the caller says so)
        if proc.returncode is None:   # else Popen has it (reaped outside, see above)
            proc.returncode = t._aside.status
    if t._aside.status is not None and t._aside.pid_reaped is None:
        try:
            for t._aside.pid_reaped in map(os.waitpid, (proc.pid,), (os.WNOHANG,)):
                break
        except OSError:   # ECHILD: not ours any more
            t._aside.pid_reaped = (proc.pid, 0)
