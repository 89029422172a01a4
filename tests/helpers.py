"""Helpers shared by every test area: where things are, peers that may be missing, leak probes.

Test modules import these by name (``from helpers import require_peer``); ``tests/`` is on
``sys.path`` through pyproject's ``pythonpath``. Fixtures live in ``conftest.py`` and in the
peer packages it registers, not here.
"""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import CodeType, FrameType, ModuleType
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parent
"""The ``tests/`` folder; test files sit at different depths below it, so paths start here."""
ROOT = TESTS.parent
"""The repository: ``docs/``, ``examples/`` and the packages."""
DOCS = ROOT / "docs"
PEERS = TESTS / "peers"
"""The stdio peer scripts (``scripted_server.py``, ``official_stdio_server.py``, ...)."""

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require_peer(module: str) -> ModuleType:
    """Import a test peer, failing under CI and skipping elsewhere when it is missing."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - depends on the environment
        if IN_CI:
            pytest.fail(f"test peer {module!r} is missing in CI: {exc}")
        pytest.skip(f"test peer {module!r} is not installed")
        raise  # unreachable; keeps type checkers happy


def probe_pidfds() -> tuple[bool, bool]:
    """What this process's kernel lets it do with pidfds, asked as the stdio transport asks
    (``pidfds_read_status()`` in ``transport/stdio/_lifecycle.py``): whether a pidfd on this
    process opens, and whether a ``waitid(P_PIDFD, ..., WNOWAIT)`` on it fails with
    ``ECHILD`` (Linux 5.4 and later; 5.3 says ``EINVAL``). A Python that has
    ``os.pidfd_open`` may still run on a kernel without the call (``ENOSYS``) or under a
    seccomp filter that refuses it (``EPERM``): the transport then falls back (to no pidfd,
    or to reading the status by pid), and a test of the pidfd paths must skip exactly
    then, not fail over a missing capability. Not cached: a test may patch ``os``; see
    :func:`pidfds_open` and :func:`pidfds_read_status` for the cached answers."""
    if not hasattr(os, "pidfd_open"):
        return False, False
    try:
        fd = os.pidfd_open(os.getpid())
    except OSError:
        return False, False
    try:
        if not hasattr(os, "P_PIDFD"):
            return True, False
        os.waitid(os.P_PIDFD, fd, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True, True
    except OSError:
        return True, False
    finally:
        os.close(fd)
    return True, False   # waitid said nothing: not a kernel that knows we are not its child


_PIDFDS: list[tuple[bool, bool]] = []   # the kernel's answer, asked once


def _pidfds() -> tuple[bool, bool]:
    if not _PIDFDS:
        _PIDFDS.append(probe_pidfds())
    return _PIDFDS[0]


def pidfds_open() -> bool:
    """A pidfd opens here (``pidfd_open`` on this process works): servers get one."""
    return _pidfds()[0]


def pidfds_read_status() -> bool:
    """Pidfds read a child's exit status here (the transport's own question): the by-pid
    module is not loaded, and the status is read through the pidfd."""
    return _pidfds()[1]


def require_pidfds(*, reads_status: bool) -> None:
    """Skip a test that needs pidfds (that open, or that also read a status) where this
    kernel refuses them; under CI on Linux, fail instead (as :func:`require_peer`): a CI
    machine whose sandbox refuses pidfds would pass by skipping every pidfd path."""
    if (pidfds_read_status() if reads_status else pidfds_open()):
        return
    what = ("pidfds that read an exit status (pidfd_open and waitid(P_PIDFD))"
            if reads_status else "pidfds (pidfd_open)")
    if IN_CI and sys.platform.startswith("linux"):
        pytest.fail(f"this kernel or sandbox refuses {what} in CI")
    pytest.skip(f"this kernel or sandbox refuses {what}")


def mcpsync_threads() -> list[threading.Thread]:
    """Threads of ours that should be gone after close (a server's stdin reader excepted)."""
    return [
        t for t in threading.enumerate()
        if t.name.startswith("mcpsync-") and not t.name.startswith("mcpsync-server-reader")
    ]


def wait_no_threads(before: set[threading.Thread], timeout: float = 5.0) -> list[str]:
    """Wait until no mcpsync thread beyond ``before`` is alive; return the names left over."""
    deadline = time.monotonic() + timeout
    while True:
        extra = [t for t in mcpsync_threads() if t not in before and t.is_alive()]
        if not extra or time.monotonic() > deadline:
            return [t.name for t in extra]
        time.sleep(0.01)


def wait_until(predicate: Callable[[], bool], seconds: float = 10.0) -> bool:
    """Poll ``predicate`` until it holds (True) or ``seconds`` pass (False)."""
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def one_listen(client: Any, wanted: dict[str, Any]) -> Any:
    """Exactly one subscription listen is left on ``client`` (an ended one is forgotten once
    its end is seen), the current one, asking for ``wanted``; return it."""
    subs = client._subs
    assert wait_until(lambda: len(subs._listens) == 1), f"listens left open: {subs._listens}"
    assert subs._listen is subs._listens[0]
    assert subs._listen.filter == wanted
    assert not subs._listen.future.done()
    return subs._listen


def wait_child(pid: int, what: str, timeout: float = 15.0) -> int:
    """The exit code of forked child ``pid``; a child still running after ``timeout`` (hung
    on a lock it inherited, say) is killed and the test fails, naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"the child hung on {what}")
        time.sleep(0.02)


def child_state(pid: int) -> str:
    """``"running"``, ``"zombie"`` (exited, not reaped: the pid is still ours) or
    ``"reaped"``, for a child of this process, asked without reaping it."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return "reaped"
    return "running" if info is None else "zombie"


def kill_child(pid: int) -> bool:
    """``SIGKILL`` to the process group of child ``pid`` (a stdio server leads its own) if
    the child is not reaped yet (running or a zombie), without reaping it; False, and no
    signal, once it is reaped: its pid may be another process's by then, while an unreaped
    child's cannot. For a test's ``finally``, before the transport's own close reaps: a
    server deaf to ``SIGTERM`` and to its stdin's end outlives a test that failed before
    the close ended it, and the test run too (its death signal is ``SIGTERM``). ``os.kill``
    of the negative pid, not ``os.killpg``, which tests patch to record the library's
    signals."""
    if child_state(pid) == "reaped":
        return False
    try:
        os.kill(-pid, signal.SIGKILL)
    except ProcessLookupError:   # not a group's leader (nor in one): the child alone
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:   # reaped meanwhile by another thread: nothing to end
            return False
    return True


def end_child(pid: int) -> None:
    """After a test: a child that is not reaped yet (running or a zombie) is killed with its
    process group and reaped, so that no later test finds it."""
    if kill_child(pid):
        os.waitpid(pid, 0)


def release_given_up(transport: Any) -> None:
    """A stdio transport whose close gave its server up after ``SIGKILL`` (closed, the
    server not reaped) keeps the server, and the spawner reference that holds the spawner
    thread, for the process's owner: here the test. The server is reaped (killed first with
    :func:`kill_child`; else this waits up to 10 s for it) and the reference released, as
    the close does for a server it reaped. Nothing for any other transport."""
    proc = transport._proc
    if not transport.closed or proc is None or proc.returncode is not None:
        return
    proc.wait(10)
    if transport._aside.holds_spawner:
        from mcpsync.transport.stdio import _spawner

        transport._aside.holds_spawner = False
        _spawner.release()


def open_fds() -> set[int]:
    """The process's open file descriptors (empty off Linux, where /proc is missing)."""
    return {int(fd) for fd in os.listdir("/proc/self/fd")} if sys.platform == "linux" else set()


@contextmanager
def interrupt_at_return(codes: set[CodeType], nth: int, seen: list[str], *,
                        qualified: bool = False) -> Iterator[None]:
    """Raise KeyboardInterrupt as the ``nth`` C call made directly by ``codes`` returns
    (counting from 0), once; ``seen`` gets the name of the call interrupted (with
    ``qualified``, as ``"<function>: <call>"``)."""
    count = 0

    def hook(frame: FrameType, event: str, arg: object) -> None:
        nonlocal count
        if event == "c_return" and frame.f_code in codes:
            count += 1
            if count == nth + 1:
                name = getattr(arg, "__name__", repr(arg))
                seen.append(f"{frame.f_code.co_name}: {name}" if qualified else name)
                raise KeyboardInterrupt

    sys.setprofile(hook)
    try:
        yield
    finally:
        sys.setprofile(None)


def first_import_interrupted(module: str, use: str, setup: str, after: str = "") -> list[str]:
    """In a fresh interpreter that has run ``setup``: evaluate ``use`` (whose first run
    imports the lazily loaded ``module``) while a Ctrl-C stops that import as the module's
    body starts, after a pause in which another thread, evaluating ``use`` too, waits on the
    module lock; then once more; then run ``after``. Returns the printed lines: "interrupted",
    the other thread's result (or the repr of what it raised) as a list, the result again.

    A bare ``from module import name`` in the other thread would read the name from the
    failed, half-built module (ImportError); a loader that imports the module first works."""
    probe = (f"{setup}\n"
             "import sys, threading, time\n"
             "entered = threading.Event()\n"
             "got = []\n"
             "def other():\n"
             "    entered.wait(10)\n"
             "    try:\n"
             f"        got.append({use})\n"
             "    except BaseException as exc:\n"
             "        got.append(repr(exc))\n"
             "def trace(frame, event, arg):\n"
             f"    if event == 'call' and frame.f_globals.get('__name__') == {module!r}:\n"
             "        sys.settrace(None)\n"
             "        entered.set()\n"
             "        time.sleep(0.3)   # the other thread waits on the module lock\n"
             "        raise KeyboardInterrupt\n"
             "t = threading.Thread(target=other, name='mcpsync-test-other', daemon=True)\n"
             "t.start()\n"
             "sys.settrace(trace)\n"
             "try:\n"
             f"    {use}\n"
             "except KeyboardInterrupt:\n"
             "    print('interrupted')\n"
             "finally:\n"
             "    sys.settrace(None)\n"
             "t.join(10)\n"
             "print(got)\n"
             f"print({use})\n"
             f"{after}\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=False, timeout=60)
    assert done.returncode == 0, (done.stdout, done.stderr)
    return done.stdout.split("\n")


def assert_nothing_held(session: Any, where: str) -> None:
    """After a Ctrl-C on a stdio session's call path (``where`` names the point): once a
    background reader that was woken has finished (at most 5 s), no call is left pending and
    no lock or reader role is left held: the session's lock and the transport's write lock
    are free, no exchange's read is counted, the role is free or the background
    reader's, and with no holder the read lock is free too (only the holder reads)."""
    from mcpsync.session._role import BG
    from mcpsync.transport.stdio import StdioTransport

    deadline = time.monotonic() + 5
    while session._pending and time.monotonic() < deadline:
        time.sleep(0.01)
    transport = session._transport
    assert isinstance(transport, StdioTransport)
    assert not session._lock.locked(), f"Ctrl-C at {where} kept the session's lock"
    assert not transport._write_lock.locked(), f"Ctrl-C at {where} kept the write lock"
    assert transport._exchanging == 0, \
        f"Ctrl-C at {where} left the exchange's read counted ({transport._exchanging})"
    with session._lock:
        holder = session._role.holder
        if holder is None:
            assert not transport._rx_lock.locked(), f"Ctrl-C at {where} kept the read lock"
        assert holder is None or holder is BG, where
        assert session._role.sending is None and session._role.want is None, where
    assert not session._pending, f"Ctrl-C at {where} left a call pending"
