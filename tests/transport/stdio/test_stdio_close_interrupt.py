"""Ctrl-C while a stdio transport starts or closes leaves no server, descriptor or thread.

A close waits for the server politely (stdin closed, 2 s; SIGTERM, 2 s), and a user who
presses Ctrl-C during those waits wants out. Before, the interrupted close marked the
transport closed with the server still running and every descriptor open, so no later
close() could end them. Now the interrupted close ends the server at once (SIGTERM, a
quarter second, SIGKILL), reaps it and releases everything before the KeyboardInterrupt
goes on; if that is interrupted in turn, the next close() does it all again.

The tests raise the interrupt with a real SIGINT where the wait is long, and at each C
call's return (a profile hook, the one way to reach every such point) inside start() and
the close's steps, against real server processes.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import CodeType, FunctionType
from typing import Any

import pytest
from helpers import interrupt_at_return, open_fds, wait_until

import mcpsync
from mcpsync.transport.stdio import StdioTransport, _lifecycle, _stderr

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="counts /proc/self/fd")

ECHO = """
import sys
for line in sys.stdin.buffer:
    sys.stdout.buffer.write(line)
    sys.stdout.buffer.flush()
"""

# Answers the handshake, then ignores the end of its input: only a signal ends it.
STUBBORN = """
import json, sys, time
for line in sys.stdin:
    m = json.loads(line)
    if m.get("method") == "initialize":
        r = {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {},
             "serverInfo": {"name": "stubborn", "version": "1"}}
        print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": r}), flush=True)
    elif "id" in m:
        print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": {}}), flush=True)
time.sleep(60)
"""

def _codes(*owners: object) -> set[CodeType]:
    """The code of every function defined in each class (or the function itself)."""
    found: set[CodeType] = set()
    for owner in owners:
        if isinstance(owner, FunctionType):
            found.add(owner.__code__)
            continue
        for value in vars(owner).values():
            value = getattr(value, "__func__", value)
            if isinstance(value, FunctionType):
                found.add(value.__code__)
    return found


# Every call made by the transport's start and close, its stderr drain and the shared
# stderr thread's bookkeeping (the profile hook sees only calls made directly by these).
STEPS = _codes(_lifecycle.ProcessLifecycle, _stderr.StderrDrain, _stderr._Hub,
               _stderr._join_hub, _stderr._forget, StdioTransport.wake)

# A drain on the shared stderr thread, or with a thread of its own (an on_stderr callback).
MODES = {"shared-stderr": {}, "own-stderr": {"on_stderr": lambda line: None}}


@pytest.fixture
def echo(tmp_path: Path) -> list[str]:
    path = tmp_path / "echo.py"
    path.write_text(ECHO)
    return [sys.executable, str(path)]


@pytest.fixture
def stubborn(tmp_path: Path) -> list[str]:
    path = tmp_path / "stubborn.py"
    path.write_text(STUBBORN)
    return [sys.executable, str(path)]


@pytest.fixture
def sigint_soon() -> Iterator[Callable[[], None]]:
    """Call it to have a real SIGINT sent to this process 0.3 s later (the main thread gets
    it): after the server is up, so that a slow start cannot take the interrupt."""
    timers: list[threading.Timer] = []

    def arm() -> None:
        timer = threading.Timer(0.3, os.kill, args=(os.getpid(), signal.SIGINT))
        timers.append(timer)
        timer.start()

    yield arm
    for timer in timers:
        timer.cancel()
        timer.join()


def assert_released(t: StdioTransport, fds_before: set[int]) -> None:
    """The server reaped, every descriptor of the transport closed, the transport closed."""
    assert t.closed
    proc = t._proc
    assert proc is None or proc.returncode is not None, "the server is still running"
    # A stderr pipe the drain's thread was still reading when the close was interrupted is
    # closed by that thread on its way out, a moment later (never under it).
    wait_until(lambda: open_fds() == fds_before, 5)
    assert open_fds() == fds_before, f"descriptors left open: {open_fds() - fds_before}"


def test_real_sigint_while_close_waits_ends_the_server(
        stubborn: list[str], sigint_soon: Callable[[], None], no_leaks: None) -> None:
    before = open_fds()
    t = StdioTransport(stubborn, name="stubborn")
    t.start()
    sigint_soon()
    with pytest.raises(KeyboardInterrupt):
        t.close()   # waits 2 s for an exit that never comes: the SIGINT lands there
    assert_released(t, before)
    assert t._proc is not None and t._proc.returncode == -signal.SIGTERM
    t.close()   # a no-op now


def test_real_sigint_while_a_client_closes_ends_the_server(
        stubborn: list[str], sigint_soon: Callable[[], None], no_leaks: None) -> None:
    before = open_fds()
    client = mcpsync.connect(stubborn, name="stubborn")
    transport = client._transport
    assert isinstance(transport, StdioTransport)
    sigint_soon()
    with pytest.raises(KeyboardInterrupt):
        client.close()
    assert_released(transport, before)
    client.close()
    # no_leaks: the session's reader and every other thread of the client have ended


@pytest.mark.parametrize("mode", MODES)
def test_ctrl_c_at_any_return_in_start_leaves_nothing_after_close(
        mode: str, echo: list[str], no_leaks: None) -> None:
    options: dict[str, Any] = MODES[mode]
    interrupted: list[str] = []
    nth = 0
    while True:
        before = open_fds()
        t = StdioTransport(echo, name="echo", **options)
        seen: list[str] = []
        try:
            with interrupt_at_return(STEPS, nth, seen):
                t.start()
        except KeyboardInterrupt:
            assert seen
        t.close()
        assert_released(t, before)
        if not seen:   # no call left to interrupt: every return was tried
            break
        interrupted += seen
        nth += 1
    assert "fileno" in interrupted and "set_blocking" in interrupted


@pytest.mark.needs_pidfds(reads_status=False)
@pytest.mark.parametrize("mode", MODES)
def test_ctrl_c_at_any_return_in_close_still_releases_everything(
        mode: str, echo: list[str], no_leaks: None) -> None:
    options: dict[str, Any] = MODES[mode]
    interrupted: list[str] = []
    nth = 0
    while True:
        before = open_fds()
        t = StdioTransport(echo, name="echo", **options)
        t.start()
        seen: list[str] = []
        try:
            with interrupt_at_return(STEPS, nth, seen):
                t.close()
        except KeyboardInterrupt:
            assert seen
        if seen == ["getpid"]:   # in forked(), asked before anything changes
            assert not t.closed and not t._closing
            t.close()            # the owner's next close (a session's, at once) does it all
        assert_released(t, before)   # else without a second close()
        if not seen:
            break
        interrupted += seen
        nth += 1
    assert {"poll", "close", "killpg"} <= set(interrupted), interrupted


@pytest.mark.parametrize("again", [1, 3])
def test_a_ctrl_c_during_the_cut_short_ending(
        again: int, stubborn: list[str], monkeypatch: pytest.MonkeyPatch,
        no_leaks: None) -> None:
    """More Ctrl-Cs inside the interrupted close's own ending: once, and it starts over and
    finishes; three times (every attempt), and the transport is left not closed, for the
    next close() to end the server and release everything."""
    before = open_fds()
    t = StdioTransport(stubborn, name="stubborn")
    t.start()
    monkeypatch.setattr(t._aside, "stdin_grace", 0.0)   # the first wait ends at once
    waits = {"left": 1 + again}
    real_wait = t._wait_exited

    def wait(timeout: float) -> bool:   # Ctrl-C in the close's first wait, then `again` more
        if waits["left"] > 0:
            waits["left"] -= 1
            raise KeyboardInterrupt
        return real_wait(timeout)

    monkeypatch.setattr(t, "_wait_exited", wait)
    with pytest.raises(KeyboardInterrupt):
        t.close()
    monkeypatch.undo()
    if again < 3:
        assert_released(t, before)
        return
    assert not t.closed
    assert t._proc is not None and t._proc.returncode is None
    t.close()
    assert_released(t, before)


ESCAPER = """
import os, sys, time
if os.fork() == 0:          # a grandchild in a session of its own keeps stdout open
    os.setsid()
    sys.stderr.write("escaped\\n")
    sys.stderr.flush()
    time.sleep(8)
    os._exit(0)
for line in sys.stdin:
    pass
time.sleep(60)
"""


def test_an_interrupted_close_wakes_a_reader_without_a_pidfd(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_leaks: None) -> None:
    """Without a pidfd (an older kernel), a receive() waiting on stdout that an escaped
    grandchild holds open is woken only by the wake-up pipe: the cut-short ending wakes it
    before it takes the read lock, so stdout and the wake-up pipe are closed, not left."""
    monkeypatch.setattr(_lifecycle, "_HAS_PIDFD", False)
    server = tmp_path / "escaper.py"
    server.write_text(ESCAPER)
    before = open_fds()
    t = StdioTransport([sys.executable, str(server)], name="escaper")
    t.start()
    assert wait_until(lambda: "escaped" in t.stderr_tail(), 5)   # out of the server's group
    got: list[object] = []
    reader = threading.Thread(target=lambda: got.append(t.receive(None)), name="test-reader")
    reader.start()
    assert wait_until(lambda: t._rx_lock.locked(), 5)   # the reader is in receive()
    time.sleep(0.3)   # and past its first look at `_closing`, asleep in poll()
    assert reader.is_alive() and not got
    seen: list[str] = []   # Ctrl-C at the close's first call, before its own wake()
    with pytest.raises(KeyboardInterrupt), interrupt_at_return(
            {_lifecycle.ProcessLifecycle._shutdown.__code__}, 0, seen):
        t.close()
    assert seen == ["monotonic"]
    reader.join(5)
    assert not reader.is_alive() and got == [None]
    assert t._stdout_fd == -1 and t._wake_r == -1 and t._wake_w == -1
    assert_released(t, before)


def test_more_ctrl_c_at_the_start_of_each_try_of_the_ending(
        stubborn: list[str], monkeypatch: pytest.MonkeyPatch, no_leaks: None) -> None:
    """A second Ctrl-C as the cut-short ending begins (its first call, the wake-up) starts
    it over all the same; the server is ended and everything released."""
    before = open_fds()
    t = StdioTransport(stubborn, name="stubborn")
    t.start()
    monkeypatch.setattr(t._aside, "stdin_grace", 0.0)
    real_wake = t.wake
    wakes = {"n": 0}

    def wake() -> None:
        wakes["n"] += 1
        if wakes["n"] == 2:   # the first is _shutdown's; the second opens the ending
            raise KeyboardInterrupt
        real_wake()

    monkeypatch.setattr(t, "wake", wake)
    monkeypatch.setattr(t, "_signal_group", lambda **kw: (_ for _ in ()).throw(
        KeyboardInterrupt) if not kw.get("kill") and wakes["n"] == 1 else
        StdioTransport._signal_group(t, **kw))
    with pytest.raises(KeyboardInterrupt):
        t.close()   # Ctrl-C at the polite SIGTERM, then at the ending's wake-up
    monkeypatch.undo()
    assert wakes["n"] >= 3
    assert_released(t, before)


def test_after_interrupted_a_ctrl_c_during_the_ending_is_raised(
        stubborn: list[str], monkeypatch: pytest.MonkeyPatch, no_leaks: None) -> None:
    """The owner's close was interrupted (interrupted()); a Ctrl-C during the ending that
    close() then runs reaches the caller, as the user pressed it."""
    before = open_fds()
    t = StdioTransport(stubborn, name="stubborn")
    t.start()
    t.interrupted()
    real_wait = t._wait_exited
    calls = {"n": 0}

    def wait(timeout: float) -> bool:
        calls["n"] += 1
        if calls["n"] == 1:
            raise KeyboardInterrupt
        return real_wait(timeout)

    monkeypatch.setattr(t, "_wait_exited", wait)
    with pytest.raises(KeyboardInterrupt):
        t.close()
    monkeypatch.undo()
    assert_released(t, before)


def test_a_ctrl_c_as_the_shared_stderr_thread_is_made_leaves_no_pipe(
        echo: list[str], monkeypatch: pytest.MonkeyPatch, no_leaks: None) -> None:
    """A Ctrl-C inside the hub's construction (here: as its thread object is made): the
    hub's wake-up pipe does not exist yet, so nothing is lost; the close releases the rest
    and the next transport gets a working hub."""
    real = _stderr.new_thread
    once: list[bool] = []

    def new_thread(name: str, target: Any, *args: Any) -> threading.Thread:
        if name == "mcpsync-stderr" and not once:
            once.append(True)
            raise KeyboardInterrupt
        return real(name, target, *args)

    monkeypatch.setattr(_stderr, "new_thread", new_thread)
    before = open_fds()
    t = StdioTransport(echo, name="echo")
    with pytest.raises(KeyboardInterrupt):
        t.start()
    t.close()
    assert_released(t, before)
    assert not _stderr._open_hubs
    again = StdioTransport(echo, name="echo")
    again.start()
    again.close()
    assert_released(again, before)


def test_a_drain_thread_whose_start_was_cut_short_touches_nothing(
        echo: list[str], monkeypatch: pytest.MonkeyPatch, no_leaks: None) -> None:
    """A stderr thread of the server's own (an ``on_stderr`` callback) whose start() a Ctrl-C
    cut short before it began: it begins after the close and leaves at once, without polling
    the descriptors the close released (their numbers may be another file's by then)."""
    late: list[threading.Thread] = []
    errors: list[str] = []
    monkeypatch.setattr(threading, "excepthook",
                        lambda a: errors.append(f"{a.thread}: {a.exc_value!r}"))
    gate = threading.Event()

    class CutShort(threading.Thread):
        def start(self) -> None:   # Ctrl-C before the thread began; it begins later
            late.append(self)
            threading.Thread(target=lambda: (gate.wait(5), threading.Thread.start(self)),
                             name="test-late-start").start()
            raise KeyboardInterrupt

    monkeypatch.setattr(_stderr, "new_thread",
                        lambda name, target, *a: CutShort(target=target, args=a, name=name,
                                                          daemon=True))
    before = open_fds()
    t = StdioTransport(echo, name="echo", on_stderr=lambda line: None)
    with pytest.raises(KeyboardInterrupt):
        t.start()
    t.close()
    assert_released(t, before)
    gate.set()
    assert late and wait_until(lambda: late[0].ident is not None and not late[0].is_alive(), 5)
    assert not errors, errors


def test_a_late_drain_thread_still_delivers_the_servers_last_lines(
        monkeypatch: pytest.MonkeyPatch, no_leaks: None) -> None:
    """A normal close (no Ctrl-C) whose join of the server's own stderr thread gives up
    before that thread got the CPU (a loaded machine): the thread still drains the pipe
    and delivers what the server wrote, and closes it on its way out."""
    class Late(threading.Thread):
        def run(self) -> None:
            time.sleep(1.5)   # longer than the close's join of it
            super().run()

    monkeypatch.setattr(_stderr, "new_thread",
                        lambda name, target, *a: Late(target=target, args=a, name=name,
                                                      daemon=True))
    lines: list[str] = []
    before = open_fds()
    server = "import sys; sys.stderr.write('fatal: config missing\\nbye\\n')"
    t = StdioTransport([sys.executable, "-c", server], name="late", on_stderr=lines.append)
    t.start()
    assert wait_until(lambda: t.returncode() is not None, 5)
    t.close()
    drain = t._aside.stderr
    assert drain is not None and drain._thread is not None
    drain._thread.join(5)
    assert lines == ["fatal: config missing", "bye"]
    assert_released(t, before)


def test_the_owner_never_closes_the_stderr_pipes_the_thread_closes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_leaks: None) -> None:
    """A Ctrl-C in the join of a server's own stderr thread leaves the pipes to that thread;
    the interrupted close's ending must not close them too (a number closed twice may be
    another file's by then). Each descriptor is closed exactly once."""
    server = tmp_path / "escaper.py"
    server.write_text(ESCAPER)   # its grandchild holds stderr open: the thread keeps reading
    closes: list[int] = []
    real_close = os.close

    class Os:
        def __getattr__(self, name: str) -> Any:
            return getattr(os, name)

        def close(self, fd: int) -> None:
            closes.append(fd)
            real_close(fd)

    monkeypatch.setattr(_stderr, "os", Os())
    lines: list[str] = []
    t = StdioTransport([sys.executable, str(server)], name="esc", on_stderr=lines.append)
    t.start()
    assert wait_until(lambda: "escaped" in lines, 5)   # out of the server's group now
    monkeypatch.setattr(t._aside, "stdin_grace", 0.0)
    drain = t._aside.stderr
    assert drain is not None and drain._thread is not None
    stop_pipe = (drain._stop_r, drain._stop_w)
    thread = drain._thread

    def join(timeout: float | None = None) -> None:
        raise KeyboardInterrupt

    # The thread, told to stop, ends and closes the pipes: hold it there (between reading a
    # number and closing it) while the interrupted close's ending asks the drain to release.
    in_close = threading.Event()

    def slow_vars(obj: object) -> dict[str, Any]:
        if threading.current_thread() is thread and not in_close.is_set():
            in_close.set()
            time.sleep(0.3)
        return vars(obj)

    real_release = drain.release

    def release() -> bool:
        in_close.wait(2)
        return real_release()

    # Woken by the stop byte, the thread would otherwise race the close: under load it could
    # drain and exit between the write and the close's is_alive() (no join, no Ctrl-C), or
    # between the interrupted join and the close's ending (which then finds it exited and
    # closes the pipes itself, correctly, but not the case this test is about). Hold it
    # until the interrupted close has left the closing to it.
    real_drain_now = drain._drain_now

    def held_drain_now() -> None:
        wait_until(lambda: drain._close_at_exit, 5)
        real_drain_now()

    monkeypatch.setattr(_stderr, "vars", slow_vars, raising=False)
    monkeypatch.setattr(drain, "release", release)
    monkeypatch.setattr(drain, "_drain_now", held_drain_now)
    monkeypatch.setattr(thread, "join", join)
    with pytest.raises(KeyboardInterrupt):
        t.close()
    monkeypatch.setattr(thread, "join", threading.Thread.join.__get__(thread))
    thread.join(10)
    assert drain._close_at_exit
    assert sorted(fd for fd in closes if fd in stop_pipe) == sorted(stop_pipe)
