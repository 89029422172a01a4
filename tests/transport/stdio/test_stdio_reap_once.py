"""A stdio close cut short by a Ctrl-C after its reap, and run again, does not reap twice.

The close reaps its server through the pidfd and records what that returned
(``_pid_reaped``); a Ctrl-C after that (as the release goes on, or as the pidfd's
``os.close()`` returns) makes the close run its ending again, which comes back to
``_reap``. Once reaped, the pid is free and may be another process's: the run again must not
wait for it in any way, neither through the pidfd, nor by pid, nor through ``Popen``. These
tests interrupt real closes at those two moments and watch every wait made about the server
afterwards.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from helpers import child_state as state, open_fds

from mcpsync.transport.stdio import StdioTransport, _lifecycle as stdio, _spawner

pytestmark = [pytest.mark.timeout(60),
              pytest.mark.needs_pidfds(reads_status=True)]

# Exits 3 at the end of its input (the close's first step).
EXITS = r'''
import sys
sys.stdin.buffer.read()
sys.exit(3)
'''

_RELEASE = stdio.ProcessLifecycle._release.__code__
_CLOSE_RAW = stdio.ProcessLifecycle._close_raw.__code__


def _after_the_reap(t: StdioTransport) -> Callable[[FrameType, str, Any], bool]:
    """The first C call's return in ``_release`` once the reap is recorded: the pidfd is
    still open."""
    def at(frame: FrameType, event: str, arg: Any) -> bool:
        return frame.f_code is _RELEASE and t._aside.pid_reaped is not None
    return at


def _as_the_pidfd_closes(t: StdioTransport) -> Callable[[FrameType, str, Any], bool]:
    """The return of the ``os.close()`` of the pidfd (after the reap): the pidfd is gone."""
    def at(frame: FrameType, event: str, arg: Any) -> bool:
        return (frame.f_code is _CLOSE_RAW and frame.f_locals.get("attr") == "_pidfd"
                and getattr(arg, "__name__", None) == "close")
    return at


@pytest.mark.parametrize("moment", [_after_the_reap, _as_the_pidfd_closes],
                         ids=["pidfd-open", "pidfd-closed"])
@pytest.mark.parametrize("by_pid", [False, True], ids=["popen", "by-pid-loaded"])
def test_a_close_run_again_after_its_reap_waits_for_nothing(
        no_leaks: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        moment: Callable[[StdioTransport], Callable[[FrameType, str, Any], bool]],
        by_pid: bool) -> None:
    """Interrupted once the reap is recorded, the close runs its ending again (and raises
    the KeyboardInterrupt): it must end closed, with the server's real status, and without
    a single ``waitid``, ``waitpid``, ``Popen.wait()`` or ``Popen.poll()`` about the server
    after the reap. ``by-pid-loaded``: a process that loaded the by-pid module (another
    server got no pidfd), where a second reap would go by pid.

    Without ``_reap``'s early return on ``_pid_reaped`` three of the four cases fail: with
    the pidfd open, the run again reaps through it once more (``ECHILD``, and the record is
    overwritten); with it closed, ``Popen.wait()`` is asked. The fourth (pidfd closed, by-pid
    module loaded) is guarded twice: ``_by_pid.reap`` looks at ``_pid_reaped`` itself."""
    monkeypatch.setattr(stdio, "_by_pid", None)   # restored (unloaded, usually) after
    if by_pid:
        stdio._load_by_pid()   # what a start() whose server got no pidfd does
    path = tmp_path / "server.py"
    path.write_text(EXITS)
    before = open_fds()
    t = StdioTransport([sys.executable, str(path)], name="reap-once")
    t.start()
    pid, proc, pidfd = t.pid, t._proc, t._pidfd
    try:
        assert pid is not None and proc is not None and pidfd >= 0
    except BaseException:   # the finally below is not reached from here: close it now, or
        t.close()           # its threads fail the tests that wait for earlier ones' to end
        raise
    waits: list[str] = []
    watching = [False]

    def spy(name: str, real: Callable[..., Any],
            about: Callable[..., bool]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            if watching[0] and about(*args):
                waits.append(f"{name}{args[1:] if name.startswith('Popen') else args}")
            return real(*args)
        return call

    monkeypatch.setattr(os, "waitid", spy(
        "waitid", os.waitid,
        lambda idtype, ident, *_: (idtype == os.P_PIDFD and ident == pidfd)
        or (idtype == os.P_PID and ident == pid)))
    monkeypatch.setattr(os, "waitpid", spy("waitpid", os.waitpid,
                                           lambda p, *_: p == pid))
    for name in ("wait", "poll"):
        monkeypatch.setattr(subprocess.Popen, name, spy(
            f"Popen.{name}", getattr(subprocess.Popen, name),
            lambda self, *_: self is proc))
    at = moment(t)
    first_record: list[object] = []

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        if event == "c_return" and not first_record and at(frame, event, arg):
            assert t._aside.pid_reaped is not None
            first_record.append(t._aside.pid_reaped)
            watching[0] = True
            raise KeyboardInterrupt

    try:
        sys.setprofile(hook)
        try:
            with pytest.raises(KeyboardInterrupt):
                t.close()
        finally:
            sys.setprofile(None)
        watching[0] = False
        assert first_record, "the close was never interrupted after its reap"
        assert t.closed
        assert waits == [], "the close run again waited for the reaped server again"
        assert t._aside.pid_reaped is first_record[0]   # the first reap's record, untouched
        assert proc.returncode == 3
        assert state(pid) == "reaped"
        assert not t._aside.holds_spawner
        assert open_fds() <= before
    finally:   # a failure must not leave a zombie or a held spawner to later tests
        sys.setprofile(None)
        watching[0] = False
        if state(pid) != "reaped":
            os.kill(-pid, 9)
            os.waitpid(pid, 0)
        if t._aside.holds_spawner:
            t._aside.holds_spawner = False
            _spawner.release()
