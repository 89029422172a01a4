"""The single spawner thread and die-with-parent, against real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from mcpsync import jsonrpc
from mcpsync.transport.stdio import StdioTransport, _spawner

PY = sys.executable
ECHO = [PY, "-c", "import sys\nfor l in sys.stdin.buffer:\n"
        "    sys.stdout.buffer.write(l); sys.stdout.buffer.flush()"]
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="PR_SET_PDEATHSIG is Linux-only")


def spawner_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "mcpsync-spawner"]


def echo_once(t: StdioTransport, method: str) -> None:
    t.send(jsonrpc.notification(method))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        got = t.receive(1.0)
        assert got is not None, "the server died"
        if got:
            assert got[0].method == method  # type: ignore[union-attr]
            return
    raise AssertionError("no echo")


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:   # ENOENT on open, or ESRCH on read when reaped in between
        return False


def wait_gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.mark.timeout(30)
def test_one_spawner_thread_lives_exactly_as_long_as_its_children() -> None:
    assert spawner_threads() == [], "an earlier test left a stdio server open"
    a = StdioTransport(ECHO, name="a")
    b = StdioTransport(ECHO, name="b")
    a.start()
    first = _spawner.active_thread()
    assert first is not None and first.daemon and first.name == "mcpsync-spawner"
    b.start()
    assert spawner_threads() == [first]  # both children came from the same thread
    a.close()
    assert first.is_alive()  # b still lives, so its forking thread must too
    echo_once(b, "b-still-alive")
    b.close()
    assert not first.is_alive()  # the last close joined it
    assert spawner_threads() == []
    # Started again on demand, as a new generation.
    c = StdioTransport(ECHO, name="c")
    c.start()
    second = _spawner.active_thread()
    assert second is not None and second is not first
    c.close()
    assert spawner_threads() == []


@pytest.fixture(params=["wrapper", "preexec"])
def mechanism(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test with each way of setting the death signal (setpriv, or the prctl preexec)."""
    if request.param == "wrapper" and _spawner_wrapper() is None:
        pytest.skip("no setpriv with --pdeathsig on this machine")
    monkeypatch.setattr(_spawner, "EXEC_WRAPPER", request.param == "wrapper")
    return str(request.param)


def _spawner_wrapper() -> list[str] | None:
    """Probe setpriv on the spawner thread, as start() does."""
    result = _spawner.spawn(_spawner.die_with_parent_wrapper)
    _spawner.release()
    return result


@pytest.mark.timeout(30)
def test_servers_started_from_a_short_lived_thread_outlive_it(mechanism: str) -> None:
    transports: list[StdioTransport] = []

    def starter() -> None:
        for i in range(3):
            t = StdioTransport(ECHO, name=f"short-{i}")  # die_with_parent=True by default
            t.start()
            transports.append(t)

    th = threading.Thread(target=starter)
    th.start()
    th.join()
    assert not th.is_alive() and len(transports) == 3
    try:
        for t in transports:
            assert t.returncode() is None
            echo_once(t, "alive")  # PDEATHSIG did not fire with the starting thread
    finally:
        for t in transports:
            t.close()


def test_spawn_errors_propagate_and_release_the_thread() -> None:
    def boom() -> None:
        raise OSError(2, "no such thing")

    with pytest.raises(OSError, match="no such thing"):
        _spawner.spawn(boom)
    assert spawner_threads() == [] or not spawner_threads()[0].is_alive()
    # The job ran on the spawner thread, not on ours.
    names: list[str] = []
    assert _spawner.spawn(lambda: names.append(threading.current_thread().name)) is None
    assert names == ["mcpsync-spawner"]
    _spawner.release()
    assert spawner_threads() == []


HOLDER = textwrap.dedent("""
    import json, sys, time
    from mcpsync.transport.stdio import StdioTransport
    # The server outlives stdin EOF: only a signal can end it.
    server = "import sys, time; sys.stdin.read(); time.sleep(60)"
    if sys.argv[2] == "preexec":
        from mcpsync.transport.stdio import _spawner
        _spawner.EXEC_WRAPPER = False
    t = StdioTransport([sys.executable, "-c", server], name="held",
                       die_with_parent=sys.argv[1] == "1")
    t.start()
    # Until the server program runs: the signal is set in the child on its way there
    # (setpriv's prctl, or the preexec_fn's), and a parent that dies before that instant
    # leaves it unset (docs/processes.md).
    # (With setpriv, its own command line names the server too: compare the start.)
    want = [sys.executable.encode(), b"-c", server.encode()]
    for _ in range(2000):
        with open(f"/proc/{t.pid}/cmdline", "rb") as f:
            if f.read().split(b"\\0")[:3] == want:
                break
        time.sleep(0.005)
    else:
        sys.exit("the server program never started")
    print(json.dumps({"pid": t.pid}), flush=True)
    sys.stdin.read()
""")


def _start_holder(tmp_path: Path, die_with_parent: bool, mechanism: str = "wrapper"
                  ) -> tuple[subprocess.Popen[str], int]:
    path = tmp_path / "holder.py"
    path.write_text(HOLDER)
    holder = subprocess.Popen([PY, str(path), "1" if die_with_parent else "0", mechanism],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None
    server_pid = json.loads(holder.stdout.readline())["pid"]
    return holder, server_pid


@linux_only
@pytest.mark.timeout(30)
def test_die_with_parent_kills_the_server_when_its_client_process_dies(
        tmp_path: Path, mechanism: str) -> None:
    holder, server_pid = _start_holder(tmp_path, die_with_parent=True, mechanism=mechanism)
    assert alive(server_pid)
    holder.kill()  # no close(), no atexit: only the kernel can clean up
    holder.wait()
    assert wait_gone(server_pid)


@linux_only
@pytest.mark.timeout(30)
def test_die_with_parent_false_leaves_the_server_running(tmp_path: Path) -> None:
    holder, server_pid = _start_holder(tmp_path, die_with_parent=False)
    holder.kill()
    holder.wait()
    try:
        time.sleep(0.3)  # PDEATHSIG would have been delivered at once; give it a chance
        assert alive(server_pid)
    finally:
        os.killpg(server_pid, signal.SIGKILL)
    assert wait_gone(server_pid)


@linux_only
def test_the_preexec_is_a_pre_resolved_prctl() -> None:
    preexec = _spawner.die_with_parent_preexec()
    assert preexec is not None
    # A partial over the ctypes function: calling it in the child runs no Python code of ours.
    assert preexec.func.__name__ == "prctl"  # type: ignore[attr-defined]
    assert preexec.args == (1, int(signal.SIGTERM))  # type: ignore[attr-defined]


@linux_only
@pytest.mark.timeout(30)
def test_the_wrapper_execs_the_server_itself_on_the_vfork_path() -> None:
    wrapper = _spawner_wrapper()
    if wrapper is None:
        pytest.skip("no setpriv with --pdeathsig on this machine")
    assert wrapper[0] in ("/usr/bin/setpriv", "/bin/setpriv")  # never looked up on PATH
    assert wrapper[1:] == ["--pdeathsig", "TERM", "--"]
    t = StdioTransport(ECHO, name="wrapped")
    t.start()
    try:
        assert t._proc is not None and t._proc.args == [*wrapper, *ECHO]
        echo_once(t, "through-setpriv")
        # The same pid now runs the server itself: setpriv exec'd it (no extra process).
        assert os.path.realpath(f"/proc/{t.pid}/exe") == os.path.realpath(PY)
    finally:
        t.close()
    assert spawner_threads() == []


def test_die_with_parent_false_uses_neither_wrapper_nor_preexec() -> None:
    t = StdioTransport(ECHO, name="plain", die_with_parent=False)
    t.start()
    try:
        assert t._proc is not None and t._proc.args == ECHO
        echo_once(t, "plain")
    finally:
        t.close()


@pytest.mark.timeout(30)
@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                    reason="needs to interrupt the main thread")
def test_an_interrupted_spawn_discards_its_child() -> None:
    # Ctrl-C while the spawner forks: the child must not be orphaned.
    main = threading.main_thread().ident
    assert main is not None
    discarded: list[str] = []

    def fork_slowly() -> str:
        signal.pthread_kill(main, signal.SIGINT)  # the caller is waiting for us
        time.sleep(0.2)
        return "child"

    with pytest.raises(KeyboardInterrupt):
        _spawner.spawn(fork_slowly, discard=discarded.append)
    assert discarded == ["child"]
    assert spawner_threads() == []
