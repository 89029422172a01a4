"""When the by-pid module (``_by_pid``: the exit status read, waited for and reaped by pid)
is loaded: by ``start()`` only, before the spawn where this kernel's pidfds cannot read a
status, right after it where the new server got no pidfd; never by a plain connection on a
machine whose pidfds work, nor by a close, a server's death or a Ctrl-C's recovery.

Whether pidfds read a status is asked once per process, of the kernel, without a child
(:func:`pidfds_read_status`); its answers to each kernel are checked with ``os`` patched,
and its real answer on this one.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from typing import Any

import pytest
from helpers import child_state as state, open_fds, pidfds_open, probe_pidfds, wait_until

from mcpsync.transport.stdio import StdioTransport, _by_pid, _lifecycle as stdio

from ._start_sweep import KILLPG_RECORDED, PROC

pytestmark = [pytest.mark.timeout(60),
              pytest.mark.skipif(not stdio._CAN_PEEK_PID, reason="reads a status by pid: Linux")]

EXITS_NOW = ["sh", "-c", "exit 3"]


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """The question not asked yet, the module not in use (as a new process starts)."""
    monkeypatch.setattr(stdio, "_pidfd_peeks", None)
    monkeypatch.setattr(stdio, "_by_pid", None)


def _waitid_failing(monkeypatch: pytest.MonkeyPatch, code: int) -> list[int]:
    """``os.waitid`` on a pidfd fails with ``code``; returns the pid of each pidfd it was
    given."""
    given: list[int] = []

    def waitid(idtype: int, ident: int, options: int) -> Any:
        assert idtype == os.P_PIDFD and options & os.WNOWAIT and options & os.WNOHANG
        with open(f"/proc/self/fdinfo/{ident}") as f:   # a pidfd of which process
            given.append(next(int(line.split()[1]) for line in f if line.startswith("Pid:")))
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "waitid", waitid)
    return given


@pytest.mark.skipif(not stdio._CAN_PEEK, reason="needs pidfd_open and P_PIDFD")
@pytest.mark.needs_pidfds(reads_status=False)   # the pidfd on our own pid is real
@pytest.mark.parametrize(("code", "answer"), [(errno.ECHILD, True), (errno.EINVAL, False),
                                              (errno.EPERM, False)])
def test_the_question_is_answered_by_waitid_on_our_own_pidfd(
        fresh: None, monkeypatch: pytest.MonkeyPatch, code: int, answer: bool) -> None:
    """ECHILD (Linux 5.4+: we are not our own child) says yes; EINVAL (5.3: no P_PIDFD) and
    anything else say no. The pidfd asked is our own process's, and it is closed."""
    before = open_fds()
    given = _waitid_failing(monkeypatch, code)
    assert stdio.pidfds_read_status() is answer
    assert given == [os.getpid()]
    assert open_fds() <= before
    # Asked once per process: the answer is kept.
    monkeypatch.setattr(os, "pidfd_open", lambda *a: pytest.fail("asked twice"))
    assert stdio.pidfds_read_status() is answer


@pytest.mark.skipif(not stdio._CAN_PEEK, reason="needs pidfd_open and P_PIDFD")
def test_no_pidfd_to_open_says_no(fresh: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """``pidfd_open`` refused (no such system call, a seccomp filter): no, and waitid is
    never asked."""
    def refused(pid: int, flags: int = 0) -> int:
        assert pid == os.getpid()
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(os, "pidfd_open", refused)
    given = _waitid_failing(monkeypatch, errno.ECHILD)
    assert stdio.pidfds_read_status() is False
    assert given == []


def test_without_pidfd_support_the_answer_is_no(
        fresh: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stdio, "_CAN_PEEK", False)
    monkeypatch.setattr(os, "pidfd_open", lambda *a: pytest.fail("asked the kernel"))
    assert stdio.pidfds_read_status() is False


@pytest.mark.needs_pidfds(reads_status=True)
def test_this_kernel_says_yes(fresh: None) -> None:
    """This machine's kernel (5.4 or later) reads a status through a pidfd: the real
    question, unpatched, says yes (its waitid failed with ECHILD)."""
    before = open_fds()
    assert stdio.pidfds_read_status() is True
    assert open_fds() <= before


def _refused(code: int) -> Any:
    def pidfd_open(pid: int, flags: int = 0) -> int:
        raise OSError(code, os.strerror(code))
    return pidfd_open


@pytest.mark.parametrize("kernel", ["this", "5.3", "no pidfd_open", "seccomp"])
def test_the_tests_ask_what_start_asks(
        fresh: None, monkeypatch: pytest.MonkeyPatch, kernel: str) -> None:
    """The tests' own probe (``helpers.probe_pidfds``, behind the ``needs_pidfds`` mark)
    answers as :func:`pidfds_read_status` does, on this kernel and on simulated ones
    (``waitid`` refusing ``P_PIDFD``, ``pidfd_open`` missing or refused by a filter), so
    that a pidfd test skips exactly where ``start()`` falls back to reading by pid; a pidfd
    opens in all but the last two."""
    # Asked before anything is patched: the first ask fills the tests' once-per-run cache,
    # which every needs_pidfds mark reads, so it must not be filled on a simulated kernel.
    opens_here = pidfds_open()
    if kernel == "5.3":
        _waitid_failing(monkeypatch, errno.EINVAL)
    elif kernel == "no pidfd_open":
        monkeypatch.setattr(os, "pidfd_open", _refused(errno.ENOSYS), raising=False)
    elif kernel == "seccomp":
        monkeypatch.setattr(os, "pidfd_open", _refused(errno.EPERM), raising=False)
    opens, reads = probe_pidfds()
    assert reads is stdio.pidfds_read_status()
    if kernel in ("this", "5.3"):   # the real pidfd_open: opens where it opened unpatched
        assert opens is opens_here
    else:
        assert not opens and not reads
    if kernel == "5.3":
        assert not reads


def _start_and_close(argv: list[str]) -> tuple[StdioTransport, int]:
    t = StdioTransport(argv, name="loading")
    t.start()
    assert t.pid is not None
    return t, t.pid


@pytest.mark.parametrize("answer", [
    pytest.param(True, marks=pytest.mark.needs_pidfds(reads_status=True)), False])
def test_start_loads_the_module_only_when_pidfds_cannot_read_a_status(
        fresh: None, no_leaks: None, monkeypatch: pytest.MonkeyPatch, answer: bool) -> None:
    monkeypatch.setattr(stdio, "_pidfd_peeks", answer)
    t, pid = _start_and_close(EXITS_NOW)
    try:
        assert (stdio._by_pid is _by_pid) is (not answer)
        assert t.wait_exit(10) == 3
        assert state(pid) == "zombie"     # read without reaping, either way
        t.close()
        assert state(pid) == "reaped" and t.returncode() == 3
    finally:
        t.close()


def test_a_server_that_gets_no_pidfd_loads_the_module_after_its_spawn(
        fresh: None, no_leaks: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel's pidfds work, but this server's pidfd cannot be opened (EMFILE): its
    status is read by pid, the module loaded by start() right after the spawn."""
    monkeypatch.setattr(stdio, "_pidfd_peeks", True)

    def pidfd_open(pid: int, flags: int = 0) -> int:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(os, "pidfd_open", pidfd_open)
    before = open_fds()
    t, pid = _start_and_close(EXITS_NOW)
    try:
        assert t._pidfd < 0 and stdio._by_pid is _by_pid
        assert wait_until(lambda: t.returncode() is not None)
        assert t.returncode() == 3 and state(pid) == "zombie"
        t.close()
        assert state(pid) == "reaped" and t.returncode() == 3 and not t._aside.holds_spawner
    finally:
        t.close()
    assert open_fds() <= before


def _run(code: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False, timeout=60)
    assert done.returncode == 0, (done.stdout, done.stderr)
    return done.stdout.split()


# A child of this process that is not reaped yet, and our open descriptors, from /proc.
_CHECKS = "\nimport os, sys\n" + PROC


@pytest.mark.needs_pidfds(reads_status=True)
def test_a_connection_whose_server_dies_does_not_load_it() -> None:
    """On this machine (pidfds read a status): connect, call, the server killed, its
    status read, the connection closed: the module is never loaded."""
    code = _CHECKS + (
        "import signal, time, mcpsync\n"
        "from mcpsync.transport.stdio import _lifecycle\n"
        "with mcpsync.connect([sys.executable, '-m', 'mcpsync.demo']) as client:\n"
        "    client.call_tool('add', {'a': 1, 'b': 2})\n"
        "    transport = client._session._transport\n"
        "    os.kill(client.pid, signal.SIGKILL)\n"
        "    deadline = time.monotonic() + 10\n"
        "    while transport.returncode() is None and time.monotonic() < deadline:\n"
        "        time.sleep(0.01)\n"
        "    print(transport.returncode())\n"
        "print(_lifecycle.pidfds_read_status(), _lifecycle._by_pid,\n"
        "      'mcpsync.transport.stdio._by_pid' in sys.modules, len(children()))\n")
    assert _run(code) == [str(-signal.SIGKILL), "True", "None", "False", "0"]


def test_a_real_server_without_pidfds_is_read_and_reaped_by_pid() -> None:
    """No pidfd support at all (switched off as the code sees it): the question says no,
    start() loads the module, and a real server is called, killed, its status read, the
    client closed and the server reaped by pid, with no process or descriptor left. (That
    the status is read without reaping until the close: test_stdio_reap_by_pid.)"""
    code = _CHECKS + (
        "import signal, time, mcpsync\n"
        "from mcpsync.transport.stdio import _lifecycle\n"
        "_lifecycle._HAS_PIDFD = _lifecycle._CAN_PEEK = False\n"
        "before = fds()\n"
        "client = mcpsync.connect([sys.executable, '-m', 'mcpsync.demo'])\n"
        "print('mcpsync.transport.stdio._by_pid' in sys.modules, _lifecycle._by_pid is not None)\n"
        "print(client.call_tool('add', {'a': 1, 'b': 2}).structured['sum'])\n"
        "transport = client._session._transport\n"
        "pid = client.pid\n"
        "os.kill(pid, signal.SIGKILL)\n"
        "deadline = time.monotonic() + 10\n"
        "while transport.returncode() is None and time.monotonic() < deadline:\n"
        "    time.sleep(0.01)\n"
        "print(transport.returncode(), transport._pidfd)\n"
        "client.close()\n"
        "print(transport._aside.pid_reaped is not None)   # reaped by pid, not through Popen\n"
        "try:\n"
        "    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)\n"
        "    print('not reaped')\n"
        "except ChildProcessError:\n"
        "    print('reaped')\n"
        "print(len(children()), sorted(fds() - before))\n")
    assert _run(code) == ["True", "True", "3", str(-signal.SIGKILL), "-1", "True",
                          "reaped", "0", "[]"]


def test_a_ctrl_c_in_the_first_import_from_start_leaves_nothing_behind() -> None:
    """The module's first import, from start(), interrupted as its body begins: start()
    raises KeyboardInterrupt before anything was spawned (no process, no descriptor left),
    the module is not kept half-built, and the next start() loads it and works."""
    code = _CHECKS + (
        "from mcpsync.transport.stdio import StdioTransport, _lifecycle\n"
        "_lifecycle._pidfd_peeks = False   # as on a kernel whose pidfds cannot read it\n"
        "name = 'mcpsync.transport.stdio._by_pid'\n"
        "def trace(frame, event, arg):\n"
        "    if event == 'call' and frame.f_globals.get('__name__') == name:\n"
        "        sys.settrace(None)\n"
        "        raise KeyboardInterrupt\n"
        "before = fds()\n"
        "t = StdioTransport(['sh', '-c', 'exit 3'], name='interrupted')\n"
        "sys.settrace(trace)\n"
        "try:\n"
        "    t.start()\n"
        "    print('not interrupted')\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted')\n"
        "finally:\n"
        "    sys.settrace(None)\n"
        "t.close()\n"
        "print(t.pid, len(children()), sorted(fds() - before), name in sys.modules,\n"
        "      _lifecycle._by_pid)\n"
        "t = StdioTransport(['sh', '-c', 'exit 3'], name='again')\n"
        "t.start()\n"
        "print(t.wait_exit(10), _lifecycle._by_pid is sys.modules[name])\n"
        "t.close()\n"
        "print(len(children()), sorted(fds() - before))\n")
    assert _run(code) == ["interrupted", "None", "0", "[]", "False", "None", "3", "True",
                          "0", "[]"]


_KILLPG_RECORDED = "import signal\n" + KILLPG_RECORDED


@pytest.mark.needs_pidfds(reads_status=True)
def test_a_server_whose_pidfd_and_module_both_fail_with_emfile_is_never_signalled_reaped(
        ) -> None:
    """The descriptor table is full: the new server's pidfd_open fails with EMFILE, and so
    does the import of the module that would read it by pid. start() kills the group then,
    while the server is unreaped, and raises an error naming the server and the cause; the
    close that follows reaps it through Popen and sends the group no signal after that
    (none at all: its last one went out from start())."""
    code = _CHECKS + _KILLPG_RECORDED + (
        "import errno, resource\n"
        "from mcpsync.transport.stdio import StdioTransport, _lifecycle\n"
        "assert _lifecycle.pidfds_read_status()\n"
        "before = fds()\n"
        "filled = []\n"
        "def pidfd_open(pid, flags=0):\n"
        "    try:   # the table full: what failed pidfd_open fails the next open too\n"
        "        while True:\n"
        "            filled.append(os.open('/dev/null', os.O_RDONLY))\n"
        "    except OSError:\n"
        "        pass\n"
        "    raise OSError(errno.EMFILE, 'Too many open files')\n"
        "os.pidfd_open = pidfd_open\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))\n"
        "t = StdioTransport(['sh', '-c', 'sleep 30'], name='full')\n"
        "try:\n"
        "    t.start()\n"
        "    print('started')\n"
        "except OSError as exc:\n"
        "    print(exc.errno == errno.EMFILE, 'out of file descriptors' in str(exc),\n"
        "          'ulimit -n' in str(exc),\n"
        "          \"'full'\" in str(exc), isinstance(exc.__cause__, OSError))\n"
        "finally:\n"
        "    for fd in filled:\n"
        "        os.close(fd)\n"
        "    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))\n"
        "print(_lifecycle._by_pid, ','.join(sent) or '-')\n"
        "t.close()\n"
        "print(t.returncode(), ','.join(sent) or '-', len(children()), sorted(fds() - before))\n")
    assert _run(code) == ["True", "True", "True", "True", "True", "None", "SIGKILL:ours",
                          str(-signal.SIGKILL), "SIGKILL:ours", "0", "[]"]


@pytest.mark.needs_pidfds(reads_status=True)
def test_a_ctrl_c_in_the_import_after_the_spawn_ends_the_server_before_any_reap() -> None:
    """A server that got no pidfd, and a Ctrl-C in the module's import right after its
    spawn: start() raises it after killing the group (the server still unreaped), and the
    close after it sends no signal to the reaped pid; nothing is left behind, and the next
    start() loads the module."""
    code = _CHECKS + _KILLPG_RECORDED + (
        "import errno\n"
        "from mcpsync.transport.stdio import StdioTransport, _lifecycle\n"
        "assert _lifecycle.pidfds_read_status()\n"
        "def pidfd_open(pid, flags=0):\n"
        "    raise OSError(errno.EMFILE, 'Too many open files')\n"
        "os.pidfd_open = pidfd_open\n"
        "name = 'mcpsync.transport.stdio._by_pid'\n"
        "def trace(frame, event, arg):\n"
        "    if event == 'call' and frame.f_globals.get('__name__') == name:\n"
        "        sys.settrace(None)\n"
        "        raise KeyboardInterrupt\n"
        "before = fds()\n"
        "t = StdioTransport(['sh', '-c', 'sleep 30'], name='interrupted')\n"
        "sys.settrace(trace)\n"
        "try:\n"
        "    t.start()\n"
        "    print('not interrupted')\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted')\n"
        "finally:\n"
        "    sys.settrace(None)\n"
        "t.close()\n"
        "print(t.returncode(), ','.join(sent) or '-', len(children()), sorted(fds() - before),\n"
        "      _lifecycle._by_pid)\n"
        "t = StdioTransport(['sh', '-c', 'exit 3'], name='again')\n"
        "t.start()\n"
        "print(t.wait_exit(10), _lifecycle._by_pid is sys.modules[name])\n"
        "t.close()\n"
        "print(len(children()), sorted(fds() - before))\n")
    assert _run(code) == ["interrupted", str(-signal.SIGKILL), "SIGKILL:ours", "0", "[]",
                          "None", "3", "True", "0", "[]"]
