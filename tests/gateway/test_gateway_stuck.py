"""An upstream that answers ``initialize`` and then nothing, beside the demo, behind one
gateway command: merged answers come from the demo within the time limit, calls to the demo
are not held, the stuck upstream's requests are cancelled and its late answer never reaches
the host."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import PEERS as TEST_PEERS

import mcpsync
from gateway.helpers_gw import GATEWAY, PEERS, RawHost, write_config

pytestmark = pytest.mark.timeout(90)

DEMO = [sys.executable, "-m", "mcpsync.demo"]
STUCK = [sys.executable, str(PEERS / "stuck_server.py")]
FEATURES = TEST_PEERS / "feature_server.py"


def _config(tmp_path: Path, *stuck_args: str) -> tuple[str, Path]:
    record = tmp_path / "stuck.log"
    record.touch()
    return write_config(tmp_path, {"demo": DEMO,
                                   "stuck": [*STUCK, str(record), *stuck_args]}), record


def _received(record: Path) -> list[Any]:
    return [json.loads(line) for line in record.read_text().splitlines()
            if line and not line.startswith("#")]


@pytest.mark.parametrize("era", ["auto", "legacy"])
def test_lists_come_from_the_demo_within_the_limit(tmp_path: Path, era: str) -> None:
    config, record = _config(tmp_path)
    argv = [*GATEWAY, config, "--merge-timeout", "1"]
    started = time.monotonic()
    with mcpsync.connect(argv, era=era, timeout=8) as client:
        opened = time.monotonic() - started
        assert client.era == ("modern" if era == "auto" else "legacy")
        assert client.server_info.name == "mcpsync-gateway"
        t0 = time.monotonic()
        names = {t.name for t in client.list_tools()}
        listed = time.monotonic() - t0
        assert {"demo__echo", "demo__add"} <= names
        assert not any(n.startswith("stuck__") for n in names)
        assert 0.9 <= listed < 4, listed
        assert client.list_prompts() is not None   # every merged list, not only tools
        # A call to the demo is not held while a merged list waits for the stuck upstream.
        pending = client.submit("tools/list", {})
        t0 = time.monotonic()
        assert client.call_tool("demo__add", {"a": 2, "b": 3}).structured == {"sum": 5}
        called = time.monotonic() - t0
        assert not pending.done()
        assert called < 0.8, called
        pending.result(timeout=5)
    got = _received(record)
    lists = [m["id"] for m in got if m.get("method") == "tools/list"]
    cancelled = [m["params"]["requestId"] for m in got
                 if m.get("method") == "notifications/cancelled"]
    assert len(lists) == 2 and set(lists) <= set(cancelled), (lists, cancelled)
    if era == "legacy":
        # initialize was answered; the one request that may not be cancelled was not.
        init = [m["id"] for m in got if m.get("method") == "initialize"]
        assert init and not set(init) & set(cancelled)
        assert opened < 4
    else:
        # The stuck upstream ignores server/discover too: the host still gets the demo's.
        discover = [m["id"] for m in got if m.get("method") == "server/discover"]
        assert discover and set(discover) <= set(cancelled)
        assert 0.9 <= opened < 6, opened


def test_the_late_answer_never_reaches_the_host(tmp_path: Path) -> None:
    config, record = _config(tmp_path, "--late", "1.5")
    host = RawHost(config, "--merge-timeout", "1")
    try:
        init = host.call('{"jsonrpc":"2.0","id":1,"method":"initialize","params":'
                         '{"protocolVersion":"2025-06-18","capabilities":{},'
                         '"clientInfo":{"name":"raw","version":"1"}}}')
        assert init["result"]["serverInfo"]["name"] == "mcpsync-gateway"
        host.send('{"jsonrpc":"2.0","method":"notifications/initialized"}')
        t0 = time.monotonic()
        listed = host.call('{"jsonrpc":"2.0","id":2,"method":"tools/list"}')
        took = time.monotonic() - t0
        assert listed["id"] == 2 and 0.9 <= took < 1.4, took
        names = [t["name"] for t in listed["result"]["tools"]]
        assert "demo__echo" in names and "stuck__late" not in names
        deadline = time.monotonic() + 10
        while "# answered late" not in record.read_text():
            assert time.monotonic() < deadline, "the stuck upstream never answered late"
            time.sleep(0.05)
        time.sleep(0.5)   # time for the gateway to read (and drop) it
        host.send('{"jsonrpc":"2.0","id":3,"method":"ping"}')
        frames = []
        while True:
            frame = json.loads(host.recv())
            frames.append(frame)
            if frame.get("id") == 3:
                break
        assert [f for f in frames if f.get("id") == 2] == [], frames
        assert host.close() == 0
    finally:
        if host.proc.poll() is None:
            host.proc.kill()
            host.proc.wait(5)
    stderr = b"".join(host.stderr).decode()
    assert "'stuck'" in stderr and "tools/list" in stderr and "within 1 s" in stderr, stderr
    sent = [m for m in _received(record) if m.get("method") == "notifications/cancelled"]
    assert len(sent) == 1 and "within 1 s" in sent[0]["params"]["reason"]


def test_one_deadlines_thread_joined_on_close(tmp_path: Path) -> None:
    config, _ = _config(tmp_path)
    frames: list[Any] = []

    def wait_for(count: int) -> None:
        deadline = time.monotonic() + 10
        while len(frames) < count and time.monotonic() < deadline:
            time.sleep(0.02)

    gw = mcpsync.Gateway(config, merge_timeout=0.5)
    try:
        gw.serve_host(lambda frame: frames.append(json.loads(frame)))
        gw.feed(b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":'
                b'{"protocolVersion":"2025-06-18","capabilities":{},'
                b'"clientInfo":{"name":"t","version":"1"}}}')
        wait_for(1)
        t0 = time.monotonic()
        for n in range(2, 6):   # four merged requests at once: still one timer thread
            gw.feed(b'{"jsonrpc":"2.0","id":%d,"method":"tools/list"}' % n)
        wait_for(5)
        took = time.monotonic() - t0
        assert sorted(f["id"] for f in frames) == [1, 2, 3, 4, 5]
        assert 0.45 <= took < 2, took
        timers = [t for t in threading.enumerate() if t.name == "mcpsync-gateway-deadlines"]
        assert len(timers) == 1 and timers[0].daemon
    finally:
        gw.close()
    assert not timers[0].is_alive()


def test_merge_timeout_must_be_positive(tmp_path: Path) -> None:
    config, _ = _config(tmp_path)
    for bad in (0, -1, float("nan"), True):
        with pytest.raises(ValueError, match="merge_timeout must be a number of seconds"):
            mcpsync.Gateway(config, merge_timeout=bad)


def test_a_listen_is_acknowledged_without_the_stuck_upstream(tmp_path: Path) -> None:
    record = tmp_path / "stuck.log"
    record.touch()
    config = write_config(tmp_path, {"feat": [sys.executable, str(FEATURES)],
                                     "stuck": [*STUCK, str(record)]})
    updated: list[str] = []
    got = threading.Event()

    def on_update(uri: str) -> None:
        updated.append(uri)
        got.set()

    with mcpsync.connect([*GATEWAY, config, "--merge-timeout", "1"], timeout=8) as client:
        assert client.era == "modern"
        # A prompt by a name not listed yet: the gateway lists feat's prompts first.
        assert client.get_prompt("feat__summarize", {"text": "hi"}).messages
        uri = "mcpgw://feat/memo://greeting"
        t0 = time.monotonic()
        client.subscribe(uri, on_update)
        acknowledged = time.monotonic() - t0
        assert 0.9 <= acknowledged < 4, acknowledged
        assert "feat__touch" in {t.name for t in client.list_tools()}
        client.call_tool("feat__touch", {"uri": "memo://greeting"})
        assert got.wait(5) and updated == [uri]
    got_lines = _received(record)
    listens = [m["id"] for m in got_lines if m.get("method") == "subscriptions/listen"]
    cancelled = [m["params"]["requestId"] for m in got_lines
                 if m.get("method") == "notifications/cancelled"]
    assert listens and set(listens) <= set(cancelled), (listens, cancelled)


@pytest.mark.parametrize("era", ["auto", "legacy"])
def test_a_call_by_a_name_not_listed_yet_lists_its_upstream_first(tmp_path: Path,
                                                                    era: str) -> None:
    # A host that kept the names of an earlier gateway calls before it lists.
    config, record = _config(tmp_path)
    with mcpsync.connect([*GATEWAY, config, "--merge-timeout", "1"], era=era,
                         timeout=8) as client:
        t0 = time.monotonic()
        assert client.call_tool("demo__add", {"a": 2, "b": 3}).structured == {"sum": 5}
        assert time.monotonic() - t0 < 0.9   # the demo answered its list: no time limit hit
        with pytest.raises(mcpsync.RemoteError, match="no tool named 'demo__nope'"):
            client.call_tool("demo__nope", {})
        t0 = time.monotonic()
        with pytest.raises(mcpsync.RemoteError, match="no tool named 'stuck__x'"):
            client.call_tool("stuck__x", {})
        assert 0.9 <= time.monotonic() - t0 < 4   # the stuck upstream's list ran out of time
        with pytest.raises(mcpsync.RemoteError, match="no tool named 'other__x'"):
            client.call_tool("other__x", {})   # no upstream has that prefix: refused at once
    lists = [m for m in _received(record) if m.get("method") == "tools/list"]
    assert len(lists) == 1   # only the call naming it made the gateway list the stuck one


def test_the_command_refuses_a_merge_timeout_not_above_zero(tmp_path: Path) -> None:
    config, _ = _config(tmp_path)
    done = subprocess.run([*GATEWAY, config, "--merge-timeout", "0"], capture_output=True,
                          timeout=30, stdin=subprocess.DEVNULL)
    assert done.returncode == 2
    assert b"--merge-timeout must be a number of seconds above 0" in done.stderr
    assert done.stdout == b""


def test_the_default_limit_answers_a_host_that_waits_eight_seconds(tmp_path: Path) -> None:
    config, _ = _config(tmp_path)
    with mcpsync.connect([*GATEWAY, config], era="legacy", timeout=8) as client:
        t0 = time.monotonic()
        names = {t.name for t in client.list_tools()}
        took = time.monotonic() - t0
    assert "demo__echo" in names
    assert 4.9 <= took < 7.5, took   # the default 5 s, not the host's 8


def test_discover_is_answered_before_the_hosts_era_probe_gives_up(tmp_path: Path) -> None:
    # Lists may wait 20 s here, but a discover past the client's 5 s probe would make it
    # fall back to the legacy handshake: discover is held to 3 s.
    config, _ = _config(tmp_path)
    t0 = time.monotonic()
    with mcpsync.connect([*GATEWAY, config, "--merge-timeout", "20"], timeout=8) as client:
        opened = time.monotonic() - t0
        assert client.era == "modern"
        assert client.server_info.name == "mcpsync-gateway"
    assert 2.9 <= opened < 4.9, opened
