"""A client that becomes unreachable without ``close()`` stops its server (a finalizer).

The notebook case: ``client = connect(...)`` re-run three times rebinds the name, and each old
client must take its server with it, with a ``ResourceWarning`` as an unclosed file gives.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import time
import warnings
import weakref

import pytest
from helpers import PEERS, require_peer, wait_child

import mcpsync

pytestmark = pytest.mark.timeout(60)

DEMO = [sys.executable, "-m", "mcpsync.demo"]
OFFICIAL = [sys.executable, str(PEERS / "official_stdio_server.py")]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def _wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        left = [pid for pid in pids if _alive(pid)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.02)


def test_rebinding_a_client_three_times_leaves_no_server(no_leaks: None) -> None:
    pids: list[int] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            client = mcpsync.connect(DEMO, name="notebook")
            assert client.pid is not None
            pids.append(client.pid)
            client.call_tool("echo", {"text": "in use"})
        del client
        start = time.monotonic()
        gc.collect()
        collected_in = time.monotonic() - start
        left = _wait_gone(pids, 5.0)
        gone_in = time.monotonic() - start
    print(f"gc.collect() {collected_in * 1000:.1f} ms; servers gone after {gone_in:.2f} s")
    assert left == [], f"servers still running 5 s after the clients became unreachable: {left}"
    # The finalizer hands the teardown over and returns at once: three teardowns in line
    # (each up to 4 s for a server that does not exit) would take far longer. The bound is
    # loose because a loaded 2-core machine can make gc.collect() itself slow.
    assert collected_in < 2.0
    messages = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert len([m for m in messages if "'notebook' was not closed" in m]) == 3, messages


def test_a_client_with_a_subscription_thread_is_collected(no_leaks: None) -> None:
    require_peer("mcp")
    client = mcpsync.connect(OFFICIAL)
    assert client.era == "modern"
    client.subscribe("memo://hello", lambda uri: None)   # a subscriptions/listen thread runs
    pid = client.pid
    ref = weakref.ref(client)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        del client
        gc.collect()
        assert ref() is None, "something of ours still holds the client"
        assert pid is not None and _wait_gone([pid], 5.0) == []


def test_a_closed_client_warns_nothing_when_collected(no_leaks: None) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with mcpsync.connect(DEMO) as client:
            client.call_tool("echo", {"text": "x"})
        del client
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_in_a_forked_child_the_finalizer_only_drops_references(no_leaks: None) -> None:
    client = mcpsync.connect(DEMO)
    try:
        pid = client.pid
        assert pid is not None
        child = os.fork()
        if child == 0:  # pragma: no cover - runs in the child
            code = 0
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    del client
                    gc.collect()
                    if caught:
                        code = 2
                if not _alive(pid):
                    code = 3
            except BaseException:
                code = 4
            os._exit(code)
        assert wait_child(child, "collecting a client inherited from the parent") == 0
        # The parent's server was not touched: the parent's client still works.
        assert client.call_tool("echo", {"text": "still here"}).text == "still here"
    finally:
        client.close()


_REENTRY = textwrap.dedent("""
    import gc, os, warnings
    from mcpsync.client import _finalizer

    warnings.simplefilter("ignore", ResourceWarning)
    closed, finalized, busy = [], [0], []

    class Resources:
        def close(self):
            closed.append(1)

    def collector_finalizes_a_client(phase, info):
        # What a collection does when it frees an abandoned client: run its finalizer, right
        # where the collection happens to start -- possibly inside the reaper's own submit.
        if phase == "start" and not busy and finalized[0] < 200:
            busy.append(1)
            try:
                finalized[0] += 1
                _finalizer._abandoned(Resources(), "nested", os.getpid())
            finally:
                busy.clear()

    gc.callbacks.append(collector_finalizes_a_client)
    threshold = gc.get_threshold()
    gc.set_threshold(1)  # collect at nearly every allocation, the reaper's thread object's too
    try:
        for _ in range(20):
            _finalizer._abandoned(Resources(), "outer", os.getpid())
            _finalizer._reaper.drain(5)
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(collector_finalizes_a_client)
    _finalizer._reaper.drain(5)
    print(len(closed), 20 + finalized[0])
""")


def test_a_finalizer_run_by_a_collection_inside_the_reaper_does_not_deadlock() -> None:
    proc = subprocess.run([sys.executable, "-c", _REENTRY], capture_output=True, text=True,
                          timeout=15, check=False)
    assert proc.returncode == 0, proc.stderr
    closed, expected = map(int, proc.stdout.split())
    assert expected > 20, "no collection ran inside the finalizer path: the test proves nothing"
    assert closed == expected  # every abandoned client's teardown ran, nested ones too
