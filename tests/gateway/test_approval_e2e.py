"""Approval holds end to end: ``mcpsync gateway --config FILE`` in front of our demo server,
with the config's ``mcpsync.approval`` naming the web page or a command hook.

Seen through the command: the page's secret address on stderr and never on stdout, a held
call's progress on the host's token every 5 s, the call released by a POST from the page,
the same arguments held again as a new ticket, the first approval replayed (409, nothing
released), a rejection and a timeout answered -32011 with the approver's reason in
``error.data``; and our Manager as the host, hearing the hook's rejection as
``ApprovalRejected`` while its session goes on.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from gateway.helpers_gw import RawHost
from gateway.test_guard_command import INIT, _manager, guarded_config
from mcpsync.errors import ApprovalRejected
from mcpsync.gateway import call_digest
from mcpsync.manager import Manager

pytestmark = pytest.mark.timeout(90)

DEMO = [sys.executable, "-m", "mcpsync.demo"]
_URL = re.compile(rb"approve or reject held tool calls at (http://127\.0\.0\.1:\d+/[^/\s]+/)")


def _call(i: int, args: dict[str, Any], token: str | None = None) -> str:
    params: dict[str, Any] = {"name": "add", "arguments": args}
    if token is not None:
        params["_meta"] = {"progressToken": token}
    return json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": params})


def _page_url(host: RawHost) -> str:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for line in list(host.stderr):
            found = _URL.search(line)
            if found:
                return found.group(1).decode()
        time.sleep(0.05)
    raise AssertionError(f"no approval page announced; stderr: {b''.join(host.stderr)!r}")


def _held(url: str, count: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 20
    while True:
        held: list[dict[str, Any]] = requests.get(url + "held.json", timeout=5).json()["held"]
        if len(held) == count or time.monotonic() > deadline:
            return held
        time.sleep(0.05)


def _answer(host: RawHost, i: int, seen: list[bytes]) -> Any:
    while True:
        line = host.recv()
        seen.append(line)
        message = json.loads(line)
        if message.get("id") == i:
            return message


def test_the_web_page_approves_and_rejects_calls_held_by_the_command(tmp_path: Path) -> None:
    config = guarded_config(tmp_path, {"demo": DEMO}, {
        "require_approval": ["demo/add"],
        "approval": {"approver": {"web": {"port": 0}}, "hold_seconds": 20},
    })
    host = RawHost(config)
    stdout: list[bytes] = []
    try:
        url = _page_url(host)
        token = url.rstrip("/").rsplit("/", 1)[1]
        host.send(INIT)
        stdout.append(host.recv())
        host.send('{"jsonrpc":"2.0","method":"notifications/initialized"}')

        started = time.monotonic()
        host.send(_call(1, {"a": 2, "b": 3}, token="t1"))
        (first,) = _held(url, 1)
        assert (first["upstream"], first["tool"]) == ("demo", "add")
        assert first["digest"] == call_digest("demo", "add", {"a": 2, "b": 3})
        progress = json.loads(host.recv())     # the desk's first beat, after 5 s
        stdout.append(json.dumps(progress).encode())
        assert progress["method"] == "notifications/progress"
        assert progress["params"]["progressToken"] == "t1"
        assert "waiting for approval of demo/add" in progress["params"]["message"]
        assert 4.9 < time.monotonic() - started < 15
        approve = {k: first[k] for k in ("ticket", "digest", "csrf")} | {"decision": "approve"}
        assert requests.post(url + "decide", data=approve, timeout=5).status_code == 200
        answer = _answer(host, 1, stdout)
        assert answer["result"]["structuredContent"] == {"sum": 5}

        host.send(_call(2, {"a": 2, "b": 3}))        # the same arguments: a new ticket
        (second,) = _held(url, 1)
        assert second["digest"] == first["digest"] and second["ticket"] != first["ticket"]
        replay = requests.post(url + "decide", data=approve, timeout=5)
        assert replay.status_code == 409 and "already decided" in replay.text
        assert len(_held(url, 1)) == 1                # still held: the replay released nothing
        reject = {k: second[k] for k in ("ticket", "digest", "csrf")} | {"decision": "reject"}
        assert requests.post(url + "decide", data=reject, timeout=5).status_code == 200
        refused = _answer(host, 2, stdout)
        assert refused["error"]["code"] == -32011
        assert refused["error"]["data"]["reason"] == "rejected by the web approver"
        assert refused["error"]["data"]["rule"] == "require_approval['demo/add']"

        root = url.rsplit("/", 2)[0]
        assert requests.get(root + "/", timeout=5).status_code == 403
    finally:
        code = host.close()
    assert code == 0
    assert not any(token.encode() in line for line in stdout), "the page's token reached MCP"


def test_a_command_hook_decides_and_a_slow_one_times_out(tmp_path: Path) -> None:
    hook = tmp_path / "hook.py"
    hook.write_text(
        "import json, sys, time\n"
        "call = json.load(sys.stdin)\n"
        "print('hook output that must not reach the host')\n"
        "a = call['arguments']['a']\n"
        "if a == 3:\n"
        "    time.sleep(60)\n"
        "sys.exit(0 if a == 1 else 1)\n", encoding="utf-8")
    config = guarded_config(tmp_path, {"demo": DEMO}, {
        "require_approval": ["demo/add"],
        "approval": {"approver": {"command": [sys.executable, str(hook)]},
                     "hold_seconds": 2},
    })
    manager: Manager = _manager(config)
    try:
        assert manager.call_tool("gw", "add", {"a": 1, "b": 1}).structured == {"sum": 2}
        with pytest.raises(ApprovalRejected) as rejected:
            manager.call_tool("gw", "add", {"a": 2, "b": 1})
        assert rejected.value.rule == "require_approval['demo/add']"
        assert "rejected by the command hook (exit status 1)" in str(rejected.value)
        started = time.monotonic()
        with pytest.raises(ApprovalRejected) as late:
            manager.call_tool("gw", "add", {"a": 3, "b": 1})
        assert "no decision within 2 s" in str(late.value)
        assert 1.8 <= time.monotonic() - started < 10
        assert manager.call_tool("gw", "add", {"a": 1, "b": 5}).structured == {"sum": 6}
    finally:
        manager.close()


@pytest.mark.parametrize("servers", [["demo"], ["demo", "more"]])
def test_a_held_call_the_host_cancels_leaves_the_page_and_is_never_answered(
        tmp_path: Path, servers: list[str]) -> None:
    config = guarded_config(tmp_path, {sid: DEMO for sid in servers}, {
        "require_approval": ["demo/add"],
        "approval": {"approver": {"web": {"port": 0}}, "hold_seconds": 20},
    })
    name = "add" if len(servers) == 1 else "demo__add"
    host = RawHost(config)
    try:
        url = _page_url(host)
        host.send(INIT)
        host.recv()
        host.send('{"jsonrpc":"2.0","method":"notifications/initialized"}')
        listed = host.call('{"jsonrpc":"2.0","id":0,"method":"tools/list"}')
        assert name in {t["name"] for t in listed["result"]["tools"]}
        host.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                              "params": {"name": name, "arguments": {"a": 1, "b": 2}}}))
        (held,) = _held(url, 1)
        started = time.monotonic()
        host.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled",
                              "params": {"requestId": 1, "reason": "not any more"}}))
        assert _held(url, 0) == [] and time.monotonic() - started < 5
        approve = {k: held[k] for k in ("ticket", "digest", "csrf")} | {"decision": "approve"}
        late = requests.post(url + "decide", data=approve, timeout=5)
        assert late.status_code == 409        # nothing left to approve
        # The next answer the host hears is its ping's: the cancelled call got none.
        assert host.call('{"jsonrpc":"2.0","id":2,"method":"ping"}')["id"] == 2
        # and a new call with the same arguments is held anew, as a new ticket
        host.send(json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                              "params": {"name": name, "arguments": {"a": 1, "b": 2}}}))
        (again,) = _held(url, 1)
        assert again["ticket"] != held["ticket"]
        approve = {k: again[k] for k in ("ticket", "digest", "csrf")} | {"decision": "approve"}
        assert requests.post(url + "decide", data=approve, timeout=5).status_code == 200
        answer = json.loads(host.recv())
        assert answer["id"] == 3 and answer["result"]["structuredContent"] == {"sum": 3}
    finally:
        code = host.close()
    assert code == 0
