"""Faults at the client level: a server killed mid-call, modern restarts, use from inside a
running asyncio loop, servers started from a short-lived thread, and nothing left after close."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import time
from typing import Any

import pytest
from helpers import PEERS, open_fds

import mcpsync

pytestmark = pytest.mark.timeout(60)

DEMO = [sys.executable, "-m", "mcpsync.demo"]
SCRIPTED = str(PEERS / "scripted_server.py")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); look at its state.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _kill_during(client: mcpsync.Client, call: Any) -> BaseException:
    pid = client.pid
    assert pid is not None
    timer = threading.Timer(0.3, os.kill, (pid, signal.SIGKILL))
    timer.start()
    try:
        call()
    except BaseException as exc:
        return exc
    finally:
        timer.join()
    raise AssertionError("the call survived its server")


def test_legacy_server_killed_mid_call(no_leaks: None) -> None:
    with mcpsync.connect(DEMO, era="legacy") as client:
        exc = _kill_during(client, lambda: client.call_tool("slow", {"seconds": 30}))
        assert isinstance(exc, mcpsync.ServerExited)
        assert exc.exit_code == -signal.SIGKILL
        assert exc.maybe_executed
        # Legacy session state is gone: later calls fail at once, and say so.
        with pytest.raises(mcpsync.ServerExited, match="exited earlier"):
            client.call_tool("echo", {"text": "x"})


def test_modern_server_restarts_on_demand(no_leaks: None) -> None:
    with mcpsync.connect(DEMO) as client:
        assert client.era == "modern"
        first = client.pid
        exc = _kill_during(client, lambda: client.call_tool("slow", {"seconds": 30}))
        assert isinstance(exc, mcpsync.ConnectionLost) and exc.maybe_executed
        assert client.call_tool("echo", {"text": "back"}).text == "back"
        assert client.pid != first and client.era == "modern"
        assert first is not None and not _alive(first)


def test_modern_restart_limit_and_restart_none() -> None:
    with mcpsync.connect(DEMO) as client:
        for _ in range(3):
            _kill_during(client, lambda: client.call_tool("slow", {"seconds": 30}))
            client.call_tool("echo", {"text": "again"})
        _kill_during(client, lambda: client.call_tool("slow", {"seconds": 30}))
        with pytest.raises(mcpsync.ServerExited, match="3 times"):
            client.call_tool("echo", {"text": "x"})
    with mcpsync.connect(DEMO, restart=None) as client:
        _kill_during(client, lambda: client.call_tool("slow", {"seconds": 30}))
        with pytest.raises(mcpsync.ServerExited):
            client.call_tool("echo", {"text": "x"})


def test_retry_on_drop_resends_after_restart() -> None:
    with mcpsync.connect([sys.executable, SCRIPTED, "modern"]) as client:
        pid = client.pid
        with pytest.raises(mcpsync.ServerExited):
            client.call_tool("t", {"mode": "exit"})
        # The scripted server exits on "exit" every time; an ordinary call is retried.
        result = client.call_tool("t", {"x": 1}, retry_on_drop=True)
        assert not result.is_error and client.pid != pid


def test_usable_inside_a_running_event_loop() -> None:
    async def main() -> str:
        with mcpsync.connect(DEMO) as client:
            # Blocking calls straight from a coroutine (as in a notebook cell) just work...
            text = client.call_tool("echo", {"text": "in loop"}).text
            # ...and so does handing them to a worker thread.
            other = await asyncio.to_thread(client.call_tool, "echo", {"text": "thread"})
            return text + "/" + other.text

    assert asyncio.run(main()) == "in loop/thread"


def test_servers_started_from_a_short_lived_thread_survive_it(no_leaks: None) -> None:
    clients: list[mcpsync.Client] = []
    thread = threading.Thread(target=lambda: clients.append(mcpsync.connect(DEMO)))
    thread.start()
    thread.join()
    assert not thread.is_alive() and clients
    client = clients[0]
    try:
        assert client.pid is not None and _alive(client.pid)
        assert client.call_tool("echo", {"text": "alive"}).text == "alive"
    finally:
        client.close()


def test_many_threads_share_one_client() -> None:
    with mcpsync.connect(DEMO) as client:
        results: list[str] = []
        lock = threading.Lock()

        def work(i: int) -> None:
            text = client.call_tool("echo", {"text": str(i)}).text
            with lock:
                results.append(text)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results, key=int) == [str(i) for i in range(16)]


@pytest.mark.parametrize("era", ["auto", "legacy"])
def test_nothing_left_after_close(era: str, no_leaks: None) -> None:
    before = open_fds()
    client = mcpsync.connect(DEMO, era=era)
    pid = client.pid
    client.call_tool("echo", {"text": "x"})
    client.close()
    assert pid is not None
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _alive(pid)
    assert open_fds() <= before


def test_close_from_another_thread_fails_pending_calls() -> None:
    client = mcpsync.connect(DEMO)
    timer = threading.Timer(0.3, client.close)
    timer.start()
    with pytest.raises(mcpsync.ConnectionLost):
        client.call_tool("slow", {"seconds": 30})
    timer.join()
    assert client.closed


@pytest.mark.parametrize("with_progress", [False, True])
def test_ctrl_c_cancels_the_call_and_the_client_stays_usable(with_progress: bool) -> None:
    import _thread

    assert threading.current_thread() is threading.main_thread()
    with mcpsync.connect(DEMO, era="legacy") as client:
        timer = threading.Timer(0.3, _thread.interrupt_main)
        timer.start()
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            client.call_tool("slow", {"seconds": 30, "steps": 300},
                             progress=(lambda *a: None) if with_progress else None)
        timer.join()
        assert time.monotonic() - started < 20   # interrupted, not finished
        assert client.call_tool("echo", {"text": "still here"}).text == "still here"


def test_threads_finding_a_dead_server_restart_it_once() -> None:
    with mcpsync.connect(DEMO) as client:
        first = client.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while client._session.lost is None and time.monotonic() < deadline:
            time.sleep(0.01)   # wait for the death to be noticed; the calls below all see it
        pids: list[int | None] = []
        errors: list[BaseException] = []

        def work() -> None:
            try:
                client.call_tool("echo", {"text": "x"})
                pids.append(client.pid)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert len(set(pids)) == 1 and pids[0] != first
        assert len(client._aside.restarts) == 1
