"""The discard of a server whose pidfd could not be opened, on a kernel whose pidfds work.

There the by-pid module is not loaded, so the discard (of a server whose ``start()`` a Ctrl-C
interrupted) is one ``SIGKILL`` to its group and one ``Popen.wait(DISCARD_WAIT)``, with no
try run again. ``Popen.wait()`` with a timeout never blocks in the kernel: it polls with
``waitpid(WNOHANG)`` and short sleeps until the timeout. These tests hold that wait to its
bound in the cases that could make it long: a server ``SIGKILL`` does not reach (the signal
refused), a stopped server, and a server reaped by the kernel itself (``SIGCHLD``
ignored, so ``waitpid`` fails with ``ECHILD``).
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import child_state as state, end_child, wait_until

import mcpsync
from mcpsync.transport.stdio import _lifecycle as stdio

pytestmark = [pytest.mark.timeout(60),
              pytest.mark.needs_pidfds(reads_status=True)]

#: The discard's bound in these tests, and what the wait may take beyond it (a sleep of
#: ``Popen.wait()``'s poll, a loaded machine).
BOUND = 0.5
SLACK = 2.0


def _no_pidfd(monkeypatch: pytest.MonkeyPatch) -> list[float | None]:
    """The server's pidfd cannot be opened, and the by-pid module is not loaded (a kernel
    whose pidfds work). Returns the timeout of every ``Popen.wait()`` made meanwhile."""
    def pidfd_open(pid: int, flags: int = 0) -> int:
        raise OSError(errno.EMFILE, "Too many open files")

    waits: list[float | None] = []
    wait = subprocess.Popen.wait

    def spy(self: subprocess.Popen[bytes], timeout: float | None = None) -> int:
        waits.append(timeout)
        return wait(self, timeout)

    monkeypatch.setattr(os, "pidfd_open", pidfd_open)
    monkeypatch.setattr(stdio, "_by_pid", None)
    monkeypatch.setattr(stdio, "DISCARD_WAIT", BOUND)
    monkeypatch.setattr(subprocess.Popen, "wait", spy)
    return waits


def _server() -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "30"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)


def _stat_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def test_a_server_the_sigkill_does_not_reach_is_given_up_at_the_bound(
        no_leaks: None, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """``killpg`` refused (a server run as another user): the server keeps running, and the
    discard gives it up once ``Popen.wait()`` reaches the bound, with the warning."""
    waits = _no_pidfd(monkeypatch)
    proc = _server()
    try:
        def refused(pid: int, sig: int) -> None:
            raise PermissionError(errno.EPERM, "Operation not permitted")

        monkeypatch.setattr(os, "killpg", refused)
        caplog.set_level(logging.WARNING)
        began = time.monotonic()
        stdio._discard(proc)
        took = time.monotonic() - began
        assert BOUND <= took < BOUND + SLACK, took
        assert waits == [BOUND]   # one wait, bounded
        assert proc.returncode is None and state(proc.pid) == "running"
        assert any(str(proc.pid) in r.getMessage() and "did not exit" in r.getMessage()
                   for r in caplog.records)
        assert proc.stdin is not None and proc.stdin.closed
    finally:
        monkeypatch.undo()
        end_child(proc.pid)
        proc.returncode = proc.returncode if proc.returncode is not None else -9


def test_a_stopped_server_is_killed_and_reaped(
        no_leaks: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stopped server (``SIGSTOP``) is ended by ``SIGKILL`` all the same: the wait reaps it
    at once."""
    waits = _no_pidfd(monkeypatch)
    proc = _server()
    try:
        os.kill(proc.pid, signal.SIGSTOP)
        assert wait_until(lambda: _stat_state(proc.pid) == "T", 10)
        began = time.monotonic()
        stdio._discard(proc)
        assert time.monotonic() - began < BOUND
        assert proc.returncode == -signal.SIGKILL and state(proc.pid) == "reaped"
        assert waits == [BOUND]
    finally:
        end_child(proc.pid)


def test_a_server_reaped_by_the_kernel_is_not_waited_for() -> None:
    """``SIGCHLD`` ignored: the kernel reaps the killed server itself, and ``waitpid`` fails
    with ``ECHILD``, which ``Popen`` takes as the end (status 0): the discard returns at once.
    In a fresh interpreter, so that no other child of the test process is reaped that way."""
    code = (
        "import errno, os, signal, subprocess, time\n"
        "from mcpsync.transport.stdio import _lifecycle as stdio\n"
        "def pidfd_open(pid, flags=0):\n"
        "    raise OSError(errno.EMFILE, 'Too many open files')\n"
        "os.pidfd_open = pidfd_open\n"
        f"stdio.DISCARD_WAIT = {BOUND}\n"
        "signal.signal(signal.SIGCHLD, signal.SIG_IGN)\n"
        "proc = subprocess.Popen(['sleep', '30'], stdin=subprocess.PIPE,\n"
        "                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,\n"
        "                        start_new_session=True)\n"
        "began = time.monotonic()\n"
        "stdio._discard(proc)\n"
        f"print(time.monotonic() - began < {BOUND}, proc.returncode, stdio._by_pid)\n"
        "try:\n"
        "    os.kill(proc.pid, 0)\n"
        "    print('still there')\n"
        "except ProcessLookupError:\n"
        "    print('gone')\n")
    root = Path(mcpsync.__file__).parents[1]   # this tree's package, in the child too
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False, timeout=30, cwd=root)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert done.stdout.split() == ["True", "0", "None", "gone"], done.stdout
