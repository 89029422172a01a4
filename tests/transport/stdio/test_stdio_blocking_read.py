"""The sole caller's blocking first read (``_blocking_read``): a tool call's exchange reads
its answer in ``read()`` itself, with no poll first; what ends that read when no answer
comes is a byte (``WAKE``, ``0xFF``) written into stdout's pipe by a close, a loss or the
idle watch thread, and taken out again by whichever read finds it.

Each test makes tool calls through a real client against a real server process (a small
JSON-lines server below) and checks what a poll-first read gave: the answer, however late
and however written; a deadline, a close from another thread, a simulated Ctrl-C and the
server's exit (a grandchild holding stdout) each end the wait on time; no wake-up byte
reaches a message; nothing is left behind."""

from __future__ import annotations

import _thread
import contextlib
import errno
import io
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import open_fds, wait_until

import mcpsync
from mcpsync.errors import ConnectionLost, MCPError, RequestTimeout
from mcpsync.transport.stdio import StdioTransport, _blocking_read
from mcpsync.transport.stdio._blocking_read import WAKE, BlockingRead

from .test_stdio_exchange_close import MUTE, _exchange_in_thread, _started

pytestmark = [pytest.mark.timeout(60),
              pytest.mark.skipif(sys.platform != "linux", reason="the blocking read needs "
                                 "/proc (Linux); elsewhere every read polls first")]

# A legacy-era server whose tools answer at once (echo), late (slow), never (never), in two
# writes with a pause inside the line (split), or not at all because it exits, leaving a
# grandchild that holds stdout open (leave); or (ask), once the file ``flag`` exists, write
# a log notification and a ping request of its own in one write, wait for the ping's answer
# and write the file ``done``; or (bye) once ``flag`` exists, write a log notification and
# exit.
SERVER = r'''
import json, os, subprocess, sys, time
out = sys.stdout.buffer
def send(msg):
    out.write(json.dumps(msg).encode() + b"\n"); out.flush()
for line in sys.stdin.buffer:
    msg = json.loads(line)
    rid, method = msg.get("id"), msg.get("method")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": "2024-11-05",
              "capabilities": {"tools": {}}, "serverInfo": {"name": "pauses", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": rid, "result": {"tools": [
            {"name": n, "inputSchema": {"type": "object"}}
            for n in ("echo", "slow", "never", "split", "leave", "ask", "bye")]}})
    elif method == "tools/call":
        name, args = msg["params"]["name"], msg["params"].get("arguments") or {}
        text = args.get("text", "")
        if name == "never":
            continue
        if name in ("ask", "bye"):
            until = time.monotonic() + 10
            while not os.path.exists(args["flag"]) and time.monotonic() < until:
                time.sleep(0.005)
        if name == "bye":
            send({"jsonrpc": "2.0", "method": "notifications/message",
                  "params": {"level": "info", "data": "bye"}})
            os._exit(0)
        if name == "ask":
            out.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/message",
                                  "params": {"level": "info", "data": "said"}}).encode()
                      + b"\n" + json.dumps({"jsonrpc": "2.0", "id": "p1",
                                            "method": "ping"}).encode() + b"\n")
            out.flush()
            for reply in sys.stdin.buffer:   # the client's notifications may come first
                if json.loads(reply).get("id") == "p1":
                    open(args["done"], "w").close()
                    break
            continue
        if name == "leave":
            subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
            os._exit(0)
        if name == "slow":
            time.sleep(args["seconds"])
        body = json.dumps({"jsonrpc": "2.0", "id": rid, "result": {
            "content": [{"type": "text", "text": text}]}}).encode() + b"\n"
        if name == "split":
            half = len(body) // 2
            out.write(body[:half]); out.flush()
            time.sleep(args["seconds"])
            out.write(body[half:]); out.flush()
        else:
            out.write(body); out.flush()
    elif rid is not None:
        send({"jsonrpc": "2.0", "id": rid, "result": {}})
'''

ARGV = [sys.executable, "-S", "-c", SERVER]
# The same server, staying 30 s after its stdin's end (until the close signals it).
STAYS = [sys.executable, "-S", "-c", SERVER + "\nimport time\ntime.sleep(30)\n"]


@pytest.fixture
def client(no_leaks: None) -> Iterator[mcpsync.Client]:
    before = open_fds()
    with mcpsync.connect(ARGV) as c:
        _warm(c)
        yield c
    assert wait_until(lambda: open_fds() == before, 5), open_fds() - before


def _warm(c: mcpsync.Client) -> None:
    """The first tool call makes the blocking read (not the connect: a server never
    called pays nothing for it); the next ones use it."""
    assert _transport(c)._blocking is None
    assert c.call_tool("echo", {"text": "first"}).text == "first"
    assert _transport(c)._blocking is not None


def _transport(c: mcpsync.Client) -> StdioTransport:
    t = c._session._transport
    assert isinstance(t, StdioTransport)
    return t


def _count_injections(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Note when each wake-up byte is written (BlockingRead.inject, any instance)."""
    when: list[float] = []
    real = BlockingRead.inject

    def inject(self: BlockingRead) -> None:
        when.append(time.monotonic())
        real(self)

    monkeypatch.setattr(BlockingRead, "inject", inject)
    return when


def _watch_asleep(t: StdioTransport) -> bool:
    blocking = t._blocking
    assert blocking is not None
    return bool(blocking.gen.sleeping)


def test_back_to_back_calls_read_in_the_blocking_read_with_no_wake_up(
        client: mcpsync.Client, monkeypatch: pytest.MonkeyPatch) -> None:
    t = _transport(client)
    blocking = t._blocking
    assert blocking is not None
    reads = 0
    real = blocking.read

    def read(buffer: bytearray) -> int | None:
        nonlocal reads
        reads += 1
        return real(buffer)

    blocking.read = read
    injected = _count_injections(monkeypatch)
    for i in range(200):
        assert client.call_tool("echo", {"text": f"n{i}"}).text == f"n{i}"
    assert reads >= 190   # the exchange's read (a call or two may go the general way)
    # (A call of more than 0.05 s, on a loaded machine, may be woken once: not more.)
    assert len(injected) <= 2 and blocking.injected == 0 and blocking.blocked_on == 0


def test_a_late_answer_is_read_after_the_watch_wakes_the_read(
        client: mcpsync.Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """The answer comes after 0.4 s: the watch wakes the read once it was blocked on the
    call at two of its looks (0.05 to 0.1 s), the call's loop goes on polling, and the
    answer is read whole; the wake-up byte was taken out."""
    injected = _count_injections(monkeypatch)
    started = time.monotonic()
    assert client.call_tool("slow", {"seconds": 0.4, "text": "late"}).text == "late"
    assert 0.4 <= time.monotonic() - started < 2.0
    # (Woken again two looks later should its thread not have run by then: a loaded CPU.)
    assert 1 <= len(injected) <= 2, injected
    assert 0.04 <= injected[0] - started < 0.5
    blocking = _transport(client)._blocking
    assert blocking is not None and blocking.injected == 0
    assert client.call_tool("echo", {"text": "after"}).text == "after"


@pytest.mark.parametrize("asleep", [False, True])
def test_a_deadline_ends_a_blocked_read(client: mcpsync.Client, asleep: bool) -> None:
    """A call never answered ends at its deadline, also when the watch had stopped looking
    (nothing blocked for a while): the read that blocks then wakes it."""
    t = _transport(client)
    client.call_tool("echo", {"text": "warm"})
    if asleep:
        assert wait_until(lambda: _watch_asleep(t), 5)
    started = time.monotonic()
    with pytest.raises(RequestTimeout):
        client.call_tool("never", {}, timeout=0.5)
    assert 0.45 <= time.monotonic() - started < 1.5
    assert client.call_tool("echo", {"text": "still"}).text == "still"


def test_a_close_from_another_thread_ends_a_blocked_read(
        no_leaks: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server stays after its stdin's end (so no end of stdout ends the read: the
    close's wake-up byte does, at once, while the close goes on to signal the server)."""
    before = open_fds()
    c = mcpsync.connect(STAYS)
    _warm(c)
    injected = _count_injections(monkeypatch)
    # The watch's own wake-up left out: only the close's byte can end the read here.
    monkeypatch.setattr(BlockingRead, "wake_blocked", lambda self, blocked: None)
    got: list[BaseException] = []
    ended: list[float] = []

    def call() -> None:
        try:
            c.call_tool("never", {}, timeout=30)
        except BaseException as exc:   # checked below
            got.append(exc)
        ended.append(time.monotonic())

    caller = threading.Thread(target=call, name="test-caller")
    caller.start()
    t = _transport(c)
    blocking = t._blocking
    assert blocking is not None
    assert wait_until(lambda: blocking.blocked_on != 0, 5)
    started = time.monotonic()
    c.close()
    caller.join(5)
    assert not caller.is_alive()
    assert ended[0] - started < 0.5, ended[0] - started
    assert injected and 0 <= injected[0] - started < 0.5
    assert len(got) == 1 and isinstance(got[0], MCPError), got
    assert t._blocking is None and blocking.fd == -1   # closed with stdout
    assert wait_until(lambda: open_fds() == before, 5), open_fds() - before


def test_a_simulated_ctrl_c_reaches_a_blocked_read_on_the_main_thread(
        client: mcpsync.Client) -> None:
    """``_thread.interrupt_main()`` interrupts no system call: the watch's wake-up ends the
    read within 0.1 s, and the call's loop then sees the interrupt."""
    client.call_tool("echo", {"text": "warm"})   # the role is free: this call leads
    timer = threading.Timer(0.3, _thread.interrupt_main)
    started = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            client.call_tool("never", {}, timeout=30)
    finally:
        timer.cancel()
    assert time.monotonic() - started < 1.5
    assert client.call_tool("echo", {"text": "usable"}).text == "usable"


def _interrupt_when_blocked(t: StdioTransport, then: Any) -> threading.Thread:
    """A thread that waits for the main thread's call to block in the blocking read, makes a
    simulated Ctrl-C pending there (``interrupt_main``: no system call sees it, so the read
    goes on) and then calls ``then``, which makes the read return."""
    blocking = t._blocking
    assert blocking is not None
    syscall = f"/proc/self/task/{threading.main_thread().native_id}/syscall"
    read = {"x86_64": "0", "aarch64": "63"}.get(os.uname().machine)

    def in_read() -> bool:
        # The main thread inside read() itself (its system call's number), not just about
        # to be: a Ctrl-C made pending before would be raised before the read.
        with open(syscall) as f:
            return f.read().split()[0] == read

    def run() -> None:
        assert wait_until(lambda: blocking.blocked_on != 0, 10)
        if read is None:
            time.sleep(0.05)   # another kind of machine: very likely in the read by then
        else:
            assert wait_until(in_read, 10)
        _thread.interrupt_main()
        then()

    thread = threading.Thread(target=run, name="mcpsync-test-interrupter", daemon=True)
    thread.start()
    return thread


def _keep_read_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Note each StdioTransport._keep_read (the bytes a Ctrl-C would have cost)."""
    sizes: list[int] = []
    real = StdioTransport._keep_read

    def keep(self: StdioTransport, blocking: BlockingRead, n: int) -> None:
        sizes.append(n)
        real(self, blocking, n)

    monkeypatch.setattr(StdioTransport, "_keep_read", keep)
    return sizes


def test_what_a_blocked_read_returns_as_a_simulated_ctrl_c_comes_is_not_lost(
        no_leaks: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """A simulated Ctrl-C pending while the read blocks is raised as the read returns, after
    the read took the server's next bytes out of the pipe (here a log notification and a
    ping request of the server's, written only once the interrupt is pending; the watch's
    wake-up left out, so that only they end the read). They are decoded and held for the
    next read: the notification reaches the callback and the ping is answered (the server
    waits for that answer for ever), and no wake-up byte stays counted."""
    monkeypatch.setattr(BlockingRead, "wake_blocked", lambda self, blocked: None)
    kept = _keep_read_calls(monkeypatch)
    logs: list[Any] = []
    flag, done = tmp_path / "flag", tmp_path / "done"
    with mcpsync.connect(ARGV, on_log=lambda level, logger, data: logs.append(data)) as c:
        _warm(c)
        t = _transport(c)
        blocking = t._blocking
        assert blocking is not None
        thread = _interrupt_when_blocked(t, flag.touch)
        with pytest.raises(KeyboardInterrupt):
            c.call_tool("ask", {"flag": str(flag), "done": str(done)}, timeout=30)
        thread.join(10)
        assert kept and kept[0] > 0, "the read did not return as the interrupt came"
        assert wait_until(done.exists, 10), "the server's ping was never answered"
        assert wait_until(lambda: logs == ["said"], 10), logs
        assert c.call_tool("echo", {"text": "after"}).text == "after"
        assert blocking.held == [] and blocking.injected == 0


def test_what_a_server_said_before_its_exit_is_not_lost_to_a_simulated_ctrl_c(
        no_leaks: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """The same when the server exits right after what the read returned with: the held
    notification still reaches the callback, ahead of the end of the stream."""
    monkeypatch.setattr(BlockingRead, "wake_blocked", lambda self, blocked: None)
    kept = _keep_read_calls(monkeypatch)
    logs: list[Any] = []
    flag = tmp_path / "flag"
    with mcpsync.connect(ARGV, on_log=lambda level, logger, data: logs.append(data),
                         restart=None) as c:
        _warm(c)
        thread = _interrupt_when_blocked(_transport(c), flag.touch)
        with pytest.raises(KeyboardInterrupt):
            c.call_tool("bye", {"flag": str(flag)}, timeout=30)
        thread.join(10)
        assert kept and kept[0] > 0, "the read did not return as the interrupt came"
        assert wait_until(lambda: logs == ["bye"], 10), logs


def test_a_wake_up_byte_a_simulated_ctrl_c_comes_with_is_counted_back(
        client: mcpsync.Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same with nothing but a wake-up byte to end the read (written after the interrupt
    was made pending): it is taken out and counted back, not left counted for ever (every
    read would then look for such bytes, and drop the server's own 0xFF)."""
    monkeypatch.setattr(BlockingRead, "wake_blocked", lambda self, blocked: None)
    kept = _keep_read_calls(monkeypatch)
    t = _transport(client)
    blocking = t._blocking
    assert blocking is not None
    thread = _interrupt_when_blocked(t, blocking.inject)
    with pytest.raises(KeyboardInterrupt):
        client.call_tool("never", {}, timeout=30)
    thread.join(10)
    assert kept == [1]
    assert blocking.injected == 0 and blocking.held == []
    assert client.call_tool("echo", {"text": "after"}).text == "after"
    assert blocking.injected == 0


def test_the_servers_exit_ends_a_blocked_read_while_a_grandchild_holds_stdout(
        no_leaks: None) -> None:
    """The server exits and leaves a grandchild holding stdout: no end of the stream comes,
    the watch wakes the read and the call's loop sees the exit through the pidfd."""
    before = open_fds()
    c = mcpsync.connect(ARGV)
    t = _transport(c)
    try:
        _warm(c)
        assert t._blocking is not None
        started = time.monotonic()
        with pytest.raises(ConnectionLost):
            c.call_tool("leave", {}, timeout=20)
        assert time.monotonic() - started < 3.0
    finally:
        c.close()
    assert wait_until(lambda: open_fds() == before, 5), open_fds() - before
    assert t._blocking is None


def test_a_wake_up_byte_inside_a_line_is_taken_out(client: mcpsync.Client) -> None:
    """The answer's line written in two halves 0.4 s apart, and a wake-up byte written
    between them (as one that comes late would be): it lands inside the line, and the line
    still decodes to the answer."""
    t = _transport(client)
    blocking = t._blocking
    assert blocking is not None
    text = "é" * 3000 + "x" * 3000
    got: list[Any] = []
    caller = threading.Thread(
        target=lambda: got.append(client.call_tool("split", {"seconds": 0.4, "text": text})),
        name="test-caller")
    caller.start()
    time.sleep(0.2)   # the first half written and read
    blocking.inject()
    caller.join(10)
    assert len(got) == 1 and got[0].text == text
    assert blocking.injected == 0


def test_a_wake_up_byte_left_in_the_pipe_is_taken_out_by_the_next_read(
        client: mcpsync.Client) -> None:
    """Written when no read was blocked (a wake-up that came late): the next call's read
    finds it before the answer and drops it."""
    t = _transport(client)
    blocking = t._blocking
    assert blocking is not None
    client.call_tool("echo", {"text": "warm"})
    assert all(blocking.inject() for _ in range(3))   # (the idle watch may see them first)
    assert client.call_tool("echo", {"text": "clean"}).text == "clean"
    assert wait_until(lambda: blocking.injected == 0, 5)
    assert client.call_tool("echo", {"text": "again"}).text == "again"


def test_take_drops_only_as_many_bytes_as_were_written() -> None:
    r, w = os.pipe()
    try:
        st = os.fstat(r)
        blocking = BlockingRead(io.FileIO(os.dup(r), "r", closefd=False), (st.st_dev, st.st_ino))
        try:
            blocking.injected = 2
            assert blocking.take(b"a" + WAKE + b"b" + WAKE + b"c" + WAKE) == b"abc" + WAKE
            assert blocking.injected == 0
            blocking.injected = 1
            assert blocking.take(b"no byte") == b"no byte" and blocking.injected == 1
        finally:
            blocking.close()
    finally:
        os.close(r)
        os.close(w)


def test_an_inject_into_a_descriptor_that_is_now_another_file_writes_nothing() -> None:
    """The descriptor's number taken by another pipe (closed and reused): the device and
    inode differ, so nothing is written there."""
    r, w = os.pipe()
    other_r, other_w = os.pipe()
    try:
        st = os.fstat(r)
        blocking = BlockingRead(io.FileIO(os.dup(other_r), "r", closefd=False),
                                (st.st_dev, st.st_ino))
        try:
            blocking.inject()
            assert blocking.injected == 0
            os.set_blocking(other_r, False)
            with pytest.raises(BlockingIOError):
                os.read(other_r, 10)
        finally:
            blocking.close()
    finally:
        for fd in (r, w, other_r, other_w):
            os.close(fd)


def test_without_proc_every_read_polls_first(
        no_leaks: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """Where the second open cannot be had (no ``/proc``, as on macOS), there is no blocking
    read, and calls, a deadline and a close work as they do with a poll."""
    monkeypatch.setattr(_blocking_read, "_PROC_FD", str(tmp_path / "nothing") + "/")
    before = open_fds()
    with mcpsync.connect(ARGV) as c:
        assert c.call_tool("echo", {"text": "polled"}).text == "polled"
        assert c.call_tool("echo", {"text": "polled"}).text == "polled"
        assert _transport(c)._blocking is None and _transport(c)._aside.blocking_tried
        started = time.monotonic()
        with pytest.raises(RequestTimeout):
            c.call_tool("never", {}, timeout=0.3)
        assert time.monotonic() - started < 1.5
    assert wait_until(lambda: open_fds() == before, 5), open_fds() - before


def _slow_call_blocked(client: mcpsync.Client, seconds: float
                       ) -> tuple[threading.Thread, list[Any], BlockingRead]:
    """``slow`` (answered after ``seconds``, text "a") called on a thread of its own, once
    its read is blocked: the thread, the list its result lands in, the blocking read."""
    blocking = _transport(client)._blocking
    assert blocking is not None
    got: list[Any] = []
    slow = threading.Thread(
        target=lambda: got.append(client.call_tool("slow", {"seconds": seconds, "text": "a"})),
        name="test-slow")
    slow.start()
    assert wait_until(lambda: blocking.blocked_on != 0, 5)
    return slow, got, blocking


def test_a_future_while_a_call_is_blocked_both_are_answered(client: mcpsync.Client) -> None:
    """A future submitted while a call is blocked in its read (the session may start its
    reader for it, which ends the blocking reads): both get their answers, the blocked
    call on time."""
    started = time.monotonic()
    slow, got, blocking = _slow_call_blocked(client, 0.6)
    future = client.submit_tool("echo", {"text": "b"})
    assert future.result(10).text == "b"
    slow.join(10)
    assert [r.text for r in got] == ["a"] and time.monotonic() - started < 3.0
    assert blocking.blocked_on == 0
    assert client.call_tool("echo", {"text": "c"}).text == "c"


def test_letting_the_session_go_wakes_a_blocked_read_and_ends_the_blocking_reads(
        no_leaks: None) -> None:
    """When the idle watch lets the session go (it started its reader thread), nothing would
    wake a blocked read any more: the one blocked is woken at once and returns (the call's
    loop then polls), no read blocks from then on, and the descriptor stays open until the
    close, which closes it."""
    before = open_fds()
    t = _started(MUTE, blocking=True)
    blocking = t._blocking
    assert blocking is not None
    try:
        thread, got = _exchange_in_thread(t, 10.0)
        assert wait_until(lambda: blocking.blocked_on != 0, 5)
        started = time.monotonic()
        t.unwatch_idle()
        thread.join(5)
        # (Nothing else would end it: the server writes nothing, and the watch no longer
        # looks at the session.)
        assert not thread.is_alive() and got == [[]], got
        assert time.monotonic() - started < 2.0
        assert t._blocking is blocking and not blocking.enabled and blocking.fd >= 0
        assert blocking.injected == 0
        # Every later exchange polls (here: nothing comes within its slice).
        thread, got = _exchange_in_thread(t, 0.05)
        thread.join(5)
        assert got == [[]] and blocking.blocked_on == 0
    finally:
        t.close()
    assert blocking.fd == -1 and t._blocking is None
    assert wait_until(lambda: open_fds() == before, 5), open_fds() - before


@pytest.mark.parametrize("ends", ["read", "close"])
def test_a_wake_up_that_finds_no_descriptor_as_the_watch_lets_go_is_written_again(
        no_leaks: None, monkeypatch: pytest.MonkeyPatch, ends: str) -> None:
    """The watch lets the session go while a read is blocked, at a moment when no
    descriptor can be had for the byte that ends it (here: that one open fails): nothing
    else looks at that read, so a thread of its own writes the byte again every 50 ms once
    descriptors are back, and the read ends; or, when the byte can never be written, the
    close ends the read and stops that thread (the fixture checks that no thread is left)."""
    t = _started(MUTE, blocking=True)
    blocking = t._blocking
    assert blocking is not None
    real_open = os.open
    fail = [True]

    def emfile_for_the_pipe(path: Any, *args: Any, **kwargs: Any) -> int:
        if fail[0] and str(path).startswith("/proc/self/fd/"):
            raise OSError(errno.EMFILE, "Too many open files")
        return real_open(path, *args, **kwargs)

    try:
        thread, got = _exchange_in_thread(t, 30.0)
        assert wait_until(lambda: blocking.blocked_on != 0, 5)
        monkeypatch.setattr(_blocking_read.os, "open", emfile_for_the_pipe)
        t.unwatch_idle()
        assert blocking.injected == 0 and blocking.retry is not None
        assert blocking.retry.name.startswith("mcpsync-stdio-wake-")
        time.sleep(0.2)
        assert thread.is_alive() and blocking.blocked_on != 0   # nothing written yet
        if ends == "read":
            started = time.monotonic()
            fail[0] = False   # descriptors are back
            thread.join(5)
            assert not thread.is_alive() and got == [[]], got
            assert time.monotonic() - started < 2.0
            assert wait_until(lambda: not blocking.retry.is_alive(), 5)   # type: ignore[union-attr]
            assert blocking.injected == 0
    finally:
        t.close()
        thread.join(5)
        assert not thread.is_alive()
    retry = blocking.retry
    assert retry is not None and not retry.is_alive()


def test_two_callers_at_once_both_get_their_answers(client: mcpsync.Client) -> None:
    """A second caller while the first is blocked in its read: each gets its own answer
    (the lead, woken by the watch, reads on by polling and hands the other's over)."""
    slow, got, _ = _slow_call_blocked(client, 0.4)
    assert client.call_tool("echo", {"text": "b"}, timeout=10).text == "b"
    slow.join(10)
    assert [r.text for r in got] == ["a"]
    assert client.call_tool("echo", {"text": "c"}).text == "c"


def test_a_stray_wake_up_byte_is_taken_out_after_the_session_started_its_reader(
        client: mcpsync.Client) -> None:
    """A wake-up byte written after its read returned (the watch looked just as the answer
    came) stays in the pipe of an idle session: the watch sees stdout readable and starts
    the session's reader, which ends the blocking reads; the byte is still taken out, and
    the next call's answer is read whole."""
    t = _transport(client)
    blocking = t._blocking
    assert blocking is not None
    assert blocking.inject()
    assert wait_until(lambda: not blocking.enabled, 5)   # the reader started
    assert wait_until(lambda: blocking.injected == 0, 5)
    assert client.call_tool("echo", {"text": "whole"}, timeout=5).text == "whole"
    assert client.call_tool("echo", {"text": "again"}, timeout=5).text == "again"


def test_a_real_sigint_interrupts_a_blocked_read_on_the_main_thread(
        client: mcpsync.Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real SIGINT interrupts the read itself (EINTR), as it interrupted the poll: the
    call ends with KeyboardInterrupt (the watch's wake-up left out, so that nothing else
    could end the read), and the session stays usable."""
    import signal

    client.call_tool("echo", {"text": "warm"})
    monkeypatch.setattr(BlockingRead, "wake_blocked", lambda self, blocked: None)
    blocking = _transport(client)._blocking
    assert blocking is not None
    main = threading.main_thread().ident
    assert main is not None and threading.current_thread().ident == main
    sent: list[float] = []

    def interrupt() -> None:
        assert wait_until(lambda: blocking.blocked_on != 0, 5)
        sent.append(time.monotonic())
        signal.pthread_kill(main, signal.SIGINT)

    timer = threading.Thread(target=interrupt, name="test-sigint")
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            client.call_tool("never", {}, timeout=30)
        ended = time.monotonic()
    finally:
        timer.join(5)
    assert sent and ended - sent[0] < 1.0
    assert blocking.blocked_on == 0
    assert client.call_tool("echo", {"text": "usable"}).text == "usable"


@pytest.mark.parametrize("imported", [False, True])
def test_out_of_descriptors_at_the_first_tool_call_leaves_the_reads_polling(
        no_leaks: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        imported: bool) -> None:
    """No descriptor to be had at the first tool call, for the module's import or (already
    imported) for the blocking open: the call is answered, and every read polls."""
    import logging
    import resource

    if not imported:   # restored at teardown
        monkeypatch.delitem(sys.modules, "mcpsync.transport.stdio._blocking_read")
    c = mcpsync.connect(ARGV)
    try:
        t = _transport(c)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        fillers: list[int] = []
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (len(open_fds()) + 8, hard))
            with contextlib.suppress(OSError):
                while True:
                    fillers.append(os.open("/dev/null", os.O_RDONLY))
            with caplog.at_level(logging.DEBUG, logger="mcpsync.server"):
                assert c.call_tool("echo", {"text": "no fd"}).text == "no fd"
        finally:
            for fd in fillers:
                os.close(fd)
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        assert t._blocking is None and t._aside.blocking_tried
        said = [r.getMessage() for r in caplog.records if "no blocking read" in r.getMessage()]
        assert len(said) == (0 if imported else 1), said   # the import's failure, logged
        assert c.call_tool("echo", {"text": "polls"}).text == "polls"
        assert t._blocking is None
    finally:
        c.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_childs_close_drops_its_copy_of_the_blocking_open(
        client: mcpsync.Client) -> None:
    t = _transport(client)
    blocking = t._blocking
    assert blocking is not None
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 1
        try:
            fd = blocking.fd
            t.close()
            code = 0 if blocking.fd == -1 and fd not in open_fds() else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert blocking.fd >= 0 and client.call_tool("echo", {"text": "parent"}).text == "parent"


def test_an_inject_after_the_close_writes_nothing() -> None:
    r, w = os.pipe()
    try:
        st = os.fstat(r)
        blocking = BlockingRead(io.FileIO(os.dup(r), "r", closefd=False), (st.st_dev, st.st_ino))
        blocking.close()
        assert blocking.inject() is False and blocking.injected == 0
        os.set_blocking(r, False)
        with pytest.raises(BlockingIOError):
            os.read(r, 10)
    finally:
        os.close(r)
        os.close(w)
