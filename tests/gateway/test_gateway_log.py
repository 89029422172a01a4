"""``mcpsync gateway --log FILE``: every message on its legs, redacted, readable by
``mcpsync inspect``."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import mcpsync
from gateway.helpers_gw import GATEWAY, write_config

pytestmark = pytest.mark.timeout(60)

DEMO = [sys.executable, "-m", "mcpsync.demo"]
SECRET = "Bearer sk-live-4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c"


@pytest.mark.parametrize("detail", ["summary", "full"])
def test_the_log_holds_each_leg_and_no_secret(tmp_path: Path, detail: str) -> None:
    log = tmp_path / "gateway.log"
    argv = [*GATEWAY, write_config(tmp_path, {"demo": DEMO}), "--log", str(log),
            "--log-detail", detail]
    with mcpsync.connect(argv, era="legacy") as client:
        assert client.call_tool("echo", {"text": SECRET}).text == SECRET
        assert client.call_tool("add", {"a": 1, "b": 2}).structured == {"sum": 3}
    assert stat.S_IMODE(os.stat(log).st_mode) == 0o600
    text = log.read_text()
    assert "sk-live" not in text
    records = [json.loads(line) for line in text.splitlines()]
    calls = [r for r in records if r.get("tool") == "echo"]
    assert [r["dir"] for r in calls] == ["host->gateway", "gateway->upstream",
                                         "upstream->gateway", "gateway->host"]
    assert {r["upstream"] for r in calls} == {"demo"}
    answer = calls[2]
    assert answer["kind"] == "response" and answer["outcome"] == "ok"
    assert answer["latency_ms"] >= 0
    if detail == "full":
        assert "payload" in calls[0]
    else:
        assert all("payload" not in r for r in records)
    done = subprocess.run([sys.executable, "-m", "mcpsync", "inspect", str(log), "--json"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert "echo" in json.dumps(summary) and "add" in json.dumps(summary)


def test_a_log_that_cannot_be_opened_is_a_usage_error(tmp_path: Path) -> None:
    argv = [*GATEWAY, write_config(tmp_path, {"demo": DEMO}), "--log",
            str(tmp_path / "missing-dir" / "gw.log")]
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 2
    assert "missing-dir" in done.stderr and done.stdout == ""


LEAKY = ("import sys\n"
         "for line in sys.stdin:\n"
         "    print('{broken token=' + 'ghp_' + 'A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8',\n"
         "          flush=True)\n"
         "    print('password=' + 'hunter2-stderr-' + 'secret', file=sys.stderr, flush=True)\n"
         "    sys.exit(1)\n")


def test_a_malformed_line_or_dying_upstream_leaves_no_secret_on_stderr(tmp_path: Path
                                                                      ) -> None:
    """The gateway's own warnings quote a line it could not read and an upstream's last
    stderr lines; both are redacted like the traffic log (the host keeps stderr in a file)."""
    from gateway.helpers_gw import RawHost

    host = RawHost(write_config(tmp_path, {"leaky": [sys.executable, "-c", LEAKY]}))
    try:
        token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
        host.send('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"token":"'
                  + token + '"')   # not JSON: cut short
        assert json.loads(host.recv())["error"]["code"] == -32700
        host.send('{"jsonrpc":"2.0","id":2,"method":"ping"}')
        assert "leaky" in json.loads(host.recv())["error"]["message"]   # it died on it
    finally:
        assert host.close() == 0
    err = b"".join(host.stderr).decode()
    assert "not a JSON-RPC message" in err and "last stderr lines" in err
    assert token not in err and "hunter2-stderr" not in err


def test_with_two_upstreams_each_leg_carries_its_own_id_and_answers_pair(
        tmp_path: Path) -> None:
    # With several upstreams the gateway gives each call an id of its own toward the
    # upstream: the host's legs must carry the host's id and the upstream's legs the
    # upstream's, so that every answer pairs with its own request, under concurrent calls.
    import threading

    log = tmp_path / "gateway.log"
    argv = [*GATEWAY, write_config(tmp_path, {"a": DEMO, "b": DEMO}), "--log", str(log)]
    failures: list[BaseException] = []
    with mcpsync.connect(argv, era="legacy") as client:
        tools = sorted(t.name for t in client.list_tools() if t.name.endswith("echo"))
        assert len(tools) == 2, tools

        def calls(n: int) -> None:
            try:
                for k in range(12):
                    text = f"{n}-{k}"
                    assert client.call_tool(tools[(n + k) % 2], {"text": text}).text == text
            except BaseException as exc:   # reported below
                failures.append(exc)
        threads = [threading.Thread(target=calls, args=(n,), name=f"mcpsync-test-{n}",
                                    daemon=True) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    assert not failures, failures
    records = [json.loads(line) for line in log.read_text().splitlines()]
    for request_leg, answer_leg in (("host->gateway", "gateway->host"),
                                    ("gateway->upstream", "upstream->gateway")):
        requests = {(r["upstream"] if request_leg[0] == "g" else None, r["id"]): r
                    for r in records if r["dir"] == request_leg and r["kind"] == "request"}
        answers = [r for r in records if r["dir"] == answer_leg and r["kind"] == "response"]
        assert len(requests) == len([r for r in records if r["dir"] == request_leg
                                     and r["kind"] == "request"])   # ids unique per leg
        assert len(answers) == len(requests), (request_leg, len(answers), len(requests))
        for answer in answers:
            request = requests[(answer["upstream"] if request_leg[0] == "g" else None,
                                answer["id"])]
            assert answer["method"] == request["method"], (answer, request)
            assert answer.get("tool") == request.get("tool"), (answer, request)
            assert answer["latency_ms"] >= 0, answer
        called = [r for r in answers if r["method"] == "tools/call"]
        assert len(called) == 96
        # the host calls the gateway's names, the gateway the upstream's own
        assert {r["tool"] for r in called} == (set(tools) if request_leg[0] == "h"
                                               else {"echo"})
    done = subprocess.run([sys.executable, "-m", "mcpsync", "inspect", str(log), "--json"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["tools"]
    assert sum(row["calls"] for row in rows) == 96
    assert sum(row["ok"] for row in rows) == 96


def test_with_two_upstreams_every_frame_has_its_record(tmp_path: Path) -> None:
    # With several upstreams the gateway answers some frames itself (ping, a method it does
    # not serve, a URI no upstream owns), drops some (an answer to nothing), sends some to
    # every upstream (a notification) and rewrites progress tokens: each frame has its
    # records, a notification to every upstream one on the host's leg, and a progress
    # notification carries the upstream's token upstream and the host's toward the host.
    from gateway.helpers_gw import RawHost

    log = tmp_path / "gateway.log"
    host = RawHost(write_config(tmp_path, {"a": DEMO, "b": DEMO}), "--log", str(log))
    try:
        init = host.call('{"jsonrpc":"2.0","id":1,"method":"initialize","params":{'
                         '"protocolVersion":"2025-06-18","capabilities":{},'
                         '"clientInfo":{"name":"t","version":"1"}}}')
        assert "result" in init
        host.send('{"jsonrpc":"2.0","method":"notifications/initialized"}')
        assert host.call('{"jsonrpc":"2.0","id":2,"method":"ping"}')["result"] == {}
        assert host.call('{"jsonrpc":"2.0","id":3,"method":"nothing/here"}')["error"]
        assert host.call('{"jsonrpc":"2.0","id":4,"method":"resources/read",'
                         '"params":{"uri":"nowhere://x"}}')["error"]
        host.send('{"jsonrpc":"2.0","id":99,"result":{}}')   # answers nothing: dropped
        host.send('{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}')
        tools = host.call('{"jsonrpc":"2.0","id":5,"method":"tools/list"}')["result"]["tools"]
        slow = next(t["name"] for t in tools if t["name"].endswith("slow"))
        host.send(json.dumps({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {
            "name": slow, "arguments": {"seconds": 0.05, "steps": 2},
            "_meta": {"progressToken": "tok"}}}))
        got: list[dict[str, object]] = []
        while not any(m.get("id") == 6 for m in got):   # progress, logs, then the answer
            got.append(json.loads(host.recv()))
        assert any(m.get("method") == "notifications/progress"
                   and m["params"]["progressToken"] == "tok" for m in got)   # type: ignore[index]
    finally:
        assert host.close() == 0
    records = [json.loads(line) for line in log.read_text().splitlines()]

    def legs(**match: object) -> list[tuple[str, object]]:
        return [(r["dir"], r.get("upstream")) for r in records
                if all(r.get(k) == v for k, v in match.items())]

    host_side = ("host->gateway", "gateway->host")
    for rid, method in ((2, "ping"), (3, "nothing/here"), (4, "resources/read")):
        # answered by the gateway: the host's two legs, no upstream's (ids there differ)
        assert legs(method=method) == [("host->gateway", None), ("gateway->host", None)]
        mine = [r for r in records if r["dir"] in host_side and r.get("id") == rid]
        assert [r["kind"] for r in mine] == ["request", "response"], (rid, records)
    assert [leg for leg in legs(id=99, kind="response") if leg[0] in host_side] == [
        ("host->gateway", None)]
    changed = legs(method="notifications/roots/list_changed")
    assert sorted(changed, key=str) == [("gateway->upstream", "a"), ("gateway->upstream", "b"),
                                        ("host->gateway", None)]
    progress = [r for r in records if r.get("method") == "notifications/progress"]
    assert progress
    by_leg: dict[str, list[dict[str, object]]] = {}
    for record in progress:
        by_leg.setdefault(record["dir"], []).append(record)
    assert set(by_leg) == {"upstream->gateway", "gateway->host"}
    assert len(by_leg["upstream->gateway"]) == len(by_leg["gateway->host"])
