"""The replayed ``initialize`` after an upstream restart: whether it is answered, abandoned
(the restarted process dies too) or given up (no answer in time), its id is forgotten
afterwards. Left set, it sent every later answer of the upstream the slow way, and the
answer to a host call reusing the initialize's id was dropped as the replay's."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import pytest

from mcpsync import ServerConfig
from mcpsync._envelope import Envelope, parse_envelope
from mcpsync.gateway import _upstream
from mcpsync.gateway._upstream import Upstream

pytestmark = pytest.mark.timeout(60)

INIT = ('{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":'
        '"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}')
INITIALIZED = '{"jsonrpc":"2.0","method":"notifications/initialized"}'

# Answers everything; "die" exits. A process started after the first (the marker file
# exists) does what argv[2] says with the replayed initialize: answer it, exit, or ignore it.
PEER = r'''
import json, os, sys
marker, mode = sys.argv[1], sys.argv[2]
restarted = os.path.exists(marker)
open(marker, "a").close()
for line in sys.stdin:
    msg = json.loads(line)
    method = msg.get("method")
    if method == "initialize" and restarted and mode == "exit":
        sys.exit(3)
    if method == "initialize" and restarted and mode == "ignore":
        continue
    if method == "die":
        sys.exit(1)
    if "id" in msg:
        print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": {"m": method}}),
              flush=True)
'''


class _Host:
    """The gateway's side of an upstream: answers, refusals and failures, by id."""

    def __init__(self) -> None:
        self.answers: list[object] = []
        self.cond = threading.Condition()
        self.upstream: Upstream | None = None

    def on_line(self, upstream: Upstream, line: bytes) -> None:
        obj = json.loads(line)
        if "id" in obj and "method" not in obj:
            rid = obj["id"]
            key = ("int" if type(rid) is int else "str", rid)
            if upstream.answered(key) == -1.0:   # as the gateway does
                return
            self._add(rid)

    def on_down(self, upstream: Upstream, calls: list[Envelope], why: str) -> None:
        for call in calls:
            self._add(json.loads(call.id or "null"))

    def on_refused(self, upstream: Upstream, envelope: Envelope, why: str) -> None:
        self._add(json.loads(envelope.id or "null"))

    def _add(self, rid: object) -> None:
        with self.cond:
            self.answers.append(rid)
            self.cond.notify_all()

    def wait_for(self, rid: object, timeout: float = 20) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: rid in self.answers, timeout)


def _start(tmp_path: Path, mode: str) -> tuple[Upstream, _Host]:
    script = tmp_path / "peer.py"
    script.write_text(PEER)
    host = _Host()
    config = ServerConfig(id="p", command=sys.executable,
                          args=[str(script), str(tmp_path / "started"), mode])
    upstream = Upstream(config, on_line=host.on_line, on_down=host.on_down,
                        on_refused=host.on_refused, on_failed=lambda *a: None)
    upstream.start()
    upstream.submit(parse_envelope(INIT))
    assert host.wait_for(0)
    upstream.submit(parse_envelope(INITIALIZED))
    upstream.submit(parse_envelope('{"jsonrpc":"2.0","id":1,"method":"die"}'))
    assert host.wait_for(1)   # failed by the death
    return upstream, host


def _call(upstream: Upstream, rid: int) -> None:
    upstream.submit(parse_envelope(f'{{"jsonrpc":"2.0","id":{rid},"method":"tools/list"}}'))


def _close(upstream: Upstream) -> None:
    assert upstream.close(time.monotonic() + 15) == []


def test_an_answered_replay_is_forgotten(tmp_path: Path) -> None:
    upstream, host = _start(tmp_path, "answer")
    try:
        _call(upstream, 2)
        assert host.wait_for(2)
        assert upstream._replay_id is None
        # A host call that reuses the initialize's id gets its answer.
        _call(upstream, 0)
        with host.cond:
            assert host.cond.wait_for(lambda: host.answers.count(0) == 2, 20)
    finally:
        _close(upstream)


def test_a_replay_abandoned_by_a_second_death_is_forgotten(tmp_path: Path) -> None:
    upstream, host = _start(tmp_path, "exit")
    try:
        _call(upstream, 2)
        assert host.wait_for(2)   # refused or failed: the restarted process died too
        deadline = time.monotonic() + 10
        while upstream._replay_id is not None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert upstream._replay_id is None
        time.sleep(0.2)
        assert host.answers.count(2) == 1
    finally:
        _close(upstream)


def test_a_replay_given_up_is_forgotten_and_its_process_closed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_upstream, "REPLAY_TIMEOUT", 0.5)
    upstream, host = _start(tmp_path, "ignore")
    try:
        _call(upstream, 2)
        assert host.wait_for(2)   # refused: no answer to the replayed initialize in time
        assert upstream._replay_id is None
        deadline = time.monotonic() + 10
        while upstream.running and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not upstream.running   # not used without its handshake
        time.sleep(0.2)
        assert host.answers.count(2) == 1   # its closing did not fail the call again
    finally:
        _close(upstream)
