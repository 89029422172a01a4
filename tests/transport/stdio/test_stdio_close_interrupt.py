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
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import interrupt_at_return, open_fds

import mcpsync
from mcpsync.transport.stdio import StdioTransport, _lifecycle

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

CLOSE_STEPS = {f.__code__ for f in (
    _lifecycle.ProcessLifecycle.close, _lifecycle.ProcessLifecycle._shutdown,
    _lifecycle.ProcessLifecycle._release, _lifecycle.ProcessLifecycle._close_stdin,
    _lifecycle.ProcessLifecycle._wait_exited, _lifecycle.ProcessLifecycle._signal_group,
    _lifecycle.ProcessLifecycle._close_fd, _lifecycle.ProcessLifecycle._close_raw)}


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
def sigint_soon() -> Iterator[None]:
    """A real SIGINT to this process 0.3 s from now (the main thread gets it)."""
    timer = threading.Timer(0.3, os.kill, args=(os.getpid(), signal.SIGINT))
    timer.start()
    yield
    timer.cancel()
    timer.join()


def assert_released(t: StdioTransport, fds_before: set[int]) -> None:
    """The server reaped, every descriptor of the transport closed, the transport closed."""
    assert t.closed
    proc = t._proc
    assert proc is None or proc.returncode is not None, "the server is still running"
    assert open_fds() == fds_before, f"descriptors left open: {open_fds() - fds_before}"


def test_real_sigint_while_close_waits_ends_the_server(
        stubborn: list[str], sigint_soon: None, no_leaks: None) -> None:
    before = open_fds()
    t = StdioTransport(stubborn, name="stubborn")
    t.start()
    with pytest.raises(KeyboardInterrupt):
        t.close()   # waits 2 s for an exit that never comes: the SIGINT lands there
    assert_released(t, before)
    assert t._proc is not None and t._proc.returncode == -signal.SIGTERM
    t.close()   # a no-op now


def test_real_sigint_while_a_client_closes_ends_the_server(
        stubborn: list[str], sigint_soon: None, no_leaks: None) -> None:
    before = open_fds()
    client = mcpsync.connect(stubborn, name="stubborn")
    transport = client._transport
    assert isinstance(transport, StdioTransport)
    with pytest.raises(KeyboardInterrupt):
        client.close()
    assert_released(transport, before)
    client.close()
    # no_leaks: the session's reader and every other thread of the client have ended


def test_ctrl_c_at_any_return_in_start_leaves_nothing_after_close(
        echo: list[str], no_leaks: None) -> None:
    codes = {_lifecycle.ProcessLifecycle.start.__code__}
    interrupted: list[str] = []
    nth = 0
    while True:
        before = open_fds()
        t = StdioTransport(echo, name="echo")
        seen: list[str] = []
        try:
            with interrupt_at_return(codes, nth, seen):
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


def test_ctrl_c_at_any_return_in_close_still_releases_everything(
        echo: list[str], no_leaks: None) -> None:
    interrupted: list[str] = []
    nth = 0
    while True:
        before = open_fds()
        t = StdioTransport(echo, name="echo")
        t.start()
        seen: list[str] = []
        try:
            with interrupt_at_return(CLOSE_STEPS, nth, seen):
                t.close()
        except KeyboardInterrupt:
            assert seen
        assert_released(t, before)   # without a second close()
        if not seen:
            break
        interrupted += seen
        nth += 1
    assert {"poll", "close", "killpg"} <= set(interrupted), interrupted


def test_a_close_cut_short_twice_is_finished_by_the_next(
        stubborn: list[str], monkeypatch: pytest.MonkeyPatch, no_leaks: None) -> None:
    """A second Ctrl-C inside the interrupted close's own ending: the transport is not
    marked closed, and the next close() ends the server and releases everything."""
    before = open_fds()
    t = StdioTransport(stubborn, name="stubborn")
    t.start()
    monkeypatch.setattr(t, "_stdin_grace", 0.0)   # the first wait ends at once

    def first_wait(timeout: float) -> bool:   # Ctrl-C in the first wait
        monkeypatch.setattr(t, "_wait_exited", second_wait)
        raise KeyboardInterrupt

    def second_wait(timeout: float) -> bool:  # and again in the ending's first wait
        monkeypatch.undo()
        raise KeyboardInterrupt

    monkeypatch.setattr(t, "_wait_exited", first_wait)
    with pytest.raises(KeyboardInterrupt):
        t.close()
    assert not t.closed
    assert t._proc is not None and t._proc.returncode is None
    t.close()
    assert_released(t, before)
