"""Subscriptions when the server dies: a change that restarts it must not wait on itself.

Subscribing (``subscribe``, ``on_list_changed``, ``watch_task``) and closing one of several
handles open a new ``subscriptions/listen``; on a modern client whose server was killed,
sending it restarts the server, and the restart re-opens the subscriptions. That happens on
the thread already making the change, which must finish its change on the new server, leave
exactly one listen open with the union of the handles, and not hang. Each server here is a
real process killed with SIGKILL; each test has a timeout so that a hang fails. The races
around it: another thread restarting the server during a change, the client closed from
another thread during a restarting change, and Ctrl-C during one (the re-opening then stays
due and the next change does it). The same happens under a legacy ``resources/subscribe``
that makes the client detect the era again, shown with the loopback fault server.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import PEERS, one_listen, wait_until

import mcpsync

pytestmark = pytest.mark.timeout(30)

FEATURES = [sys.executable, str(PEERS / "feature_server.py")]
EXTENSIONS = Path(__file__).parents[1] / "server" / "peers_http" / "extensions_server.py"


def _kill(client: mcpsync.Client) -> int:
    """SIGKILL the server and wait until the client noticed, so the next change meets a
    dead session (and restarts it) rather than racing the death."""
    pid = client.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while client._session.lost is None:
        assert time.monotonic() < deadline, "the client never noticed its server died"
        time.sleep(0.01)
    return pid


def _wire_free(subs: Any) -> bool:
    """Nobody holds the change lock: another thread takes it at once."""
    taken = threading.Event()

    def take() -> None:
        with subs._wire:
            taken.set()

    taker = threading.Thread(target=take, name="test-take-wire", daemon=True)
    taker.start()
    return taken.wait(5)


def _touched(client: mcpsync.Client, uri: str, heard: threading.Event) -> None:
    heard.clear()
    assert client.call_tool("touch", {"uri": uri}).text == "touched"
    assert heard.wait(10), f"no notification for {uri} from the restarted server"


def test_subscribe_on_a_killed_modern_server_restarts_it(no_leaks: None) -> None:
    greeting, logo = threading.Event(), threading.Event()
    with mcpsync.connect(FEATURES) as client:
        assert client.era == "modern"
        client.subscribe("memo://greeting", lambda uri: greeting.set())
        first = _kill(client)
        client.subscribe("memo://logo", lambda uri: logo.set())
        assert client.pid != first
        one_listen(client, {"resourceSubscriptions": ["memo://greeting", "memo://logo"]})
        _touched(client, "memo://greeting", greeting)
        _touched(client, "memo://logo", logo)
        assert len(client._aside.restarts) == 1


def test_on_list_changed_on_a_killed_modern_server_restarts_it(no_leaks: None) -> None:
    greeting, tools = threading.Event(), threading.Event()
    with mcpsync.connect(FEATURES) as client:
        client.subscribe("memo://greeting", lambda uri: greeting.set())
        first = _kill(client)
        client.on_list_changed("tools", lambda kind: tools.set())
        assert client.pid != first
        one_listen(client, {"toolsListChanged": True,
                             "resourceSubscriptions": ["memo://greeting"]})
        client.call_tool("add_extra", {"name": "extra"})
        assert tools.wait(10)
        _touched(client, "memo://greeting", greeting)


def test_closing_one_of_two_handles_on_a_killed_modern_server(no_leaks: None) -> None:
    greeting = threading.Event()
    with mcpsync.connect(FEATURES) as client:
        client.subscribe("memo://greeting", lambda uri: greeting.set())
        logo = client.subscribe("memo://logo", lambda uri: None)
        first = _kill(client)
        logo.close()
        assert logo.closed and client.pid != first
        one_listen(client, {"resourceSubscriptions": ["memo://greeting"]})
        _touched(client, "memo://greeting", greeting)


def test_watch_task_on_a_killed_modern_server(tmp_path: Path, no_leaks: None) -> None:
    (tmp_path / "skills").mkdir()
    done = threading.Event()
    with mcpsync.connect([sys.executable, str(EXTENSIONS), str(tmp_path / "skills")],
                         era="modern") as client:
        client.list_tools()
        client.on_list_changed("tools", lambda kind: None)
        first = _kill(client)
        # The new server never heard of the old task: the watch fails, and says why, but
        # the list-changed watch is open again on the new server all the same.
        with pytest.raises(mcpsync.CapabilityNotSupported, match="did not acknowledge"):
            client.watch_task("a-task-of-the-dead-server", lambda task: None)
        assert client.pid != first
        one_listen(client, {"toolsListChanged": True})
        future = client.submit_tool("slow_sum", {"a": 1, "b": 2, "seconds": 1.0})
        deadline = time.monotonic() + 10
        while future.task is None:
            assert time.monotonic() < deadline, "the task was not created"
            time.sleep(0.01)
        task_id = future.task.task_id

        def heard(task: dict[str, Any]) -> None:
            if task["status"] == "completed":
                done.set()

        client.watch_task(task_id, heard)
        assert done.wait(10)
        assert future.result(10).text == "3"


def test_a_restart_by_another_thread_during_a_change(no_leaks: None) -> None:
    """One thread subscribes while another finds the server dead and restarts it: whichever
    order they meet in, one listen with both URIs is left, and the old handle still hears."""
    greeting = threading.Event()
    with mcpsync.connect(FEATURES) as client:
        client.subscribe("memo://greeting", lambda uri: greeting.set())
        first = _kill(client)
        errors: list[BaseException] = []

        def call() -> None:
            try:
                client.call_tool("greet", {"name": "x"})
            except BaseException as exc:
                errors.append(exc)

        caller = threading.Thread(target=call)
        caller.start()
        client.subscribe("memo://logo", lambda uri: None)
        caller.join()
        assert not errors and client.pid != first
        assert len(client._aside.restarts) == 1
        one_listen(client, {"resourceSubscriptions": ["memo://greeting", "memo://logo"]})
        _touched(client, "memo://greeting", greeting)


def test_legacy_subscribe_on_a_killed_server_fails_at_once(no_leaks: None) -> None:
    """A legacy server is not restarted: the change fails (it does not hang), and closing
    the old handle afterwards needs no server."""
    with mcpsync.connect(FEATURES, era="legacy") as client:
        assert client.era == "legacy"
        old = client.subscribe("memo://greeting", lambda uri: None)
        _kill(client)
        with pytest.raises(mcpsync.ServerExited, match="exited earlier"):
            client.subscribe("memo://logo", lambda uri: None)
        client.on_list_changed("tools", lambda kind: None).close()   # nothing to send
        old.close()
        assert old.closed and not client._subs._by_uri


@pytest.mark.parametrize("delay", [0.0, 0.03, 0.06, 0.3])
def test_close_from_another_thread_while_a_subscribe_restarts_the_server(
        delay: float, no_leaks: None) -> None:
    """The client closed at some point of a subscribe's restart: the subscribe ends (with
    its handle or an error), and nothing is left running."""
    client = mcpsync.connect(FEATURES)
    try:
        client.subscribe("memo://greeting", lambda uri: None)
        _kill(client)
        closer = threading.Timer(delay, client.close)
        closer.start()
        with contextlib.suppress(mcpsync.MCPError):   # ClosedError, or a failed restart
            client.subscribe("memo://logo", lambda uri: None)
        closer.join()
        assert wait_until(lambda: not client._subs.listening)
    finally:
        client.close()


@pytest.mark.parametrize("delay", [0.0, 0.05, 0.3])
def test_ctrl_c_during_a_subscribe_that_restarts_the_server(
        delay: float, no_leaks: None) -> None:
    """Ctrl-C at some point of a subscribe's restart (mostly its handshake: the rest is
    short): the subscribe ends, and the next change leaves one listen with every handle's
    URI, which the old handle still hears."""
    import _thread

    assert threading.current_thread() is threading.main_thread()
    greeting = threading.Event()
    with mcpsync.connect(FEATURES) as client:
        client.subscribe("memo://greeting", lambda uri: greeting.set())
        _kill(client)
        timer = threading.Timer(delay, _thread.interrupt_main)
        try:
            timer.start()
            client.subscribe("memo://logo", lambda uri: None)
            time.sleep(1)   # the interrupt may come after the subscribe ended
        except (KeyboardInterrupt, mcpsync.MCPError):
            pass
        finally:
            timer.join()
        client.subscribe("memo://notes/a", lambda uri: None)
        assert {"memo://greeting", "memo://notes/a"} <= set(client._subs._by_uri)
        one_listen(client, {"resourceSubscriptions": sorted(client._subs._by_uri)})
        _touched(client, "memo://greeting", greeting)


def test_ctrl_c_after_the_restart_leaves_the_reopening_to_the_next_change(
        no_leaks: None) -> None:
    """Ctrl-C just after the subscribe's own listen went out on the restarted server (made
    certain here by raising it there): the subscribe leaves at once without re-opening, the
    re-opening stays due, and the next change does it, with every handle in one listen."""
    greeting = threading.Event()
    with mcpsync.connect(FEATURES) as client:
        client.subscribe("memo://greeting", lambda uri: greeting.set())
        subs = client._subs
        first = _kill(client)
        real = subs._submit_listen

        def interrupted(params: dict[str, Any]) -> Any:
            subs._submit_listen = real
            real(params).cancel()   # restarts the server, which marks the re-opening due
            raise KeyboardInterrupt

        subs._submit_listen = interrupted
        with pytest.raises(KeyboardInterrupt):
            client.subscribe("memo://logo", lambda uri: None)
        assert client.pid != first
        assert subs._reopen_due and subs._listen is None
        assert not subs._wire._is_owned()   # type: ignore[attr-defined]  # nor any other thread
        assert list(subs._by_uri) == ["memo://greeting"]
        client.on_list_changed("tools", lambda kind: None)
        assert not subs._reopen_due
        one_listen(client, {"toolsListChanged": True,
                             "resourceSubscriptions": ["memo://greeting"]})
        _touched(client, "memo://greeting", greeting)


def test_a_legacy_subscribe_that_redetects_the_era(fault_server: Any) -> None:
    """The other way a change re-opens under itself: a legacy ``resources/subscribe``
    answered with a modern-only error (-32022) makes the client detect the era again, on
    the subscribing thread, which then re-opens as a listen on the modern session."""
    from http_peers.fault_server import (
        MODERN_VERSION,
        SERVER_INFO,
        SERVER_INFO_KEY,
        Scripted,
        result,
        rpc_error,
    )

    server = fault_server
    server.faults.era = "legacy"
    with mcpsync.connect(server.url, timeout=5) as client:
        assert client.era == "legacy"
        client.subscribe("memo://a", lambda uri: None)
        server.faults.era = "modern"
        server.faults.script.append(rpc_error(
            400, -32022, "Unsupported protocol version",
            {"supported": [MODERN_VERSION], "requested": client.protocol_version},
            match="resources/subscribe"))
        server.faults.script.append(result({
            "resultType": "complete", "supportedVersions": [MODERN_VERSION],
            "capabilities": {"tools": {"listChanged": False},
                             "resources": {"subscribe": True}},
            "ttlMs": 0, "cacheScope": "private", "_meta": {SERVER_INFO_KEY: SERVER_INFO}},
            match="server/discover"))
        ack = ('data: {"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged",'
               '"params":{"notifications":{"resourceSubscriptions":["memo://a"]}}}\n\n')
        server.faults.script.append(Scripted(200, [], None, "text/event-stream",
                                             "subscriptions/listen", sse_events=[ack]))
        # Sent again in the modern era, resources/subscribe does not exist there; the
        # subscription it already had is re-opened as a listen all the same.
        with pytest.raises(mcpsync.RemoteError, match="Method not found"):
            client.subscribe("memo://b", lambda uri: None)
        assert list(client._subs._by_uri) == ["memo://a"]
        assert client.era == "modern"
        listens = [r for r in server.requests
                   if r.method == "POST" and r.rpc_method == "subscriptions/listen"]
        assert [r.json["params"]["notifications"]["resourceSubscriptions"]
                for r in listens] == [["memo://a"]]
        assert not client._subs._reopen_due
        assert not client._subs._wire._is_owned()   # type: ignore[attr-defined]


def test_ctrl_c_anywhere_around_the_change_lock_never_leaves_it_held(no_leaks: None) -> None:
    """Real SIGINTs, every 50 us, while the main thread takes and leaves the change lock in
    remove() and reopen() over and over: wherever a KeyboardInterrupt lands, the lock is
    free afterwards (a lock taken and released in Python code could stay held for good,
    and every later change, and every restart with something subscribed, would hang)."""
    from mcpsync.client._subscriptions import Subscription, Subscriptions

    assert threading.current_thread() is threading.main_thread()
    subs = Subscriptions(name="s", thread_name="mcpsync-listen-s",
                         request=lambda method, params: {},
                         submit_listen=lambda params: None, era=lambda: "modern",
                         capabilities=lambda: {}, ack_timeout=lambda: 1.0)
    subs.close()   # the changes then stop short of the wire, around the lock only
    main = threading.main_thread().ident
    assert main is not None
    stop = threading.Event()

    def pester() -> None:
        while not stop.is_set():
            signal.pthread_kill(main, signal.SIGINT)
            time.sleep(0.00005)

    # Ctrl-C's KeyboardInterrupt, but only inside the loop below (each disarms until the
    # loop re-arms), so that none lands in the test's own bookkeeping.
    armed = [False]

    def interrupt(signum: int, frame: object) -> None:
        if armed[0]:
            armed[0] = False
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, interrupt)
    pesterer = threading.Thread(target=pester, name="test-sigint", daemon=True)
    interrupts = 0
    try:
        pesterer.start()
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            try:
                armed[0] = True
                for _ in range(200):
                    handle = Subscription(subs, uri="memo://a", kind=None,
                                          callback=lambda uri: None)
                    subs._by_uri["memo://a"] = [handle]
                    subs.reopen()
                    handle.close()
                armed[0] = False
            except KeyboardInterrupt:
                interrupts += 1
    finally:
        armed[0] = False
        stop.set()
        pesterer.join()
        signal.signal(signal.SIGINT, previous)
    assert interrupts > 100
    assert _wire_free(subs)


def test_a_restart_with_nothing_left_subscribed_during_the_last_close(no_leaks: None) -> None:
    """Another thread's restart re-opens (finds nothing subscribed) between the last
    handle's removal and its unsubscribing: the listen still ends, not left open."""
    with mcpsync.connect(FEATURES) as client:
        subs = client._subs
        handle = client.subscribe("memo://greeting", lambda uri: None)
        live = subs._listen
        assert live is not None
        real_drop = subs._drop

        def drop_then_another_thread_reopens(dropped: Any) -> bool:
            last = real_drop(dropped)
            other = threading.Thread(target=subs.reopen, name="test-reopen")
            other.start()
            other.join()
            return last

        subs._drop = drop_then_another_thread_reopens   # type: ignore[method-assign,assignment]
        try:
            handle.close()
        finally:
            del subs._drop
        assert live.superseded
        assert wait_until(lambda: not subs.listening), f"listens left open: {subs._listens}"


def test_ctrl_c_during_the_reopening_leaves_it_due(no_leaks: None) -> None:
    """Ctrl-C while re-opening after a restart (made certain here by raising it there): the
    re-opening stays due, the lock is free, and the next change re-opens every handle."""
    greeting = threading.Event()
    with mcpsync.connect(FEATURES) as client:
        client.subscribe("memo://greeting", lambda uri: greeting.set())
        subs = client._subs
        _kill(client)

        def interrupted() -> Any:
            del subs._sync_modern
            raise KeyboardInterrupt

        subs._sync_modern = interrupted   # type: ignore[method-assign]
        with pytest.raises(KeyboardInterrupt):
            subs.reopen()
        assert subs._reopen_due and subs._listen is None and _wire_free(subs)
        client.on_list_changed("tools", lambda kind: None)
        assert not subs._reopen_due
        one_listen(client, {"toolsListChanged": True,
                             "resourceSubscriptions": ["memo://greeting"]})
        _touched(client, "memo://greeting", greeting)
