"""The guard end to end: ``mcpsync gateway --config FILE`` with an ``mcpsync`` key, our
Manager (``gateway=True``) and the official SDK's client as hosts, our demo server, the
official SDK's server and the odd peer behind it.

Seen: denied tools hidden from lists and refused -32010, argument rules, budgets per tool,
per upstream and per process (the stdio front's one caller), a short window that resets,
``retry_after`` and what is left, approval without an approver (-32011 at once), the
official client through a hold a command hook approves or rejects, a call whose params hold
a key twice refused before it reaches the upstream (and passed untouched without a policy),
and the session alive after every refusal.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import PEERS, require_peer

from gateway.helpers_gw import GATEWAY, ODD, RawHost
from gateway.peers.odd_server import ODD_EXTRA, ODD_RESULT
from mcpsync import ServerConfig
from mcpsync.errors import (
    ApprovalRejected,
    BudgetExceeded,
    PolicyDenied,
    RemoteError,
    UnknownTool,
)
from mcpsync.manager import Manager

pytestmark = pytest.mark.timeout(90)

DEMO = [sys.executable, "-m", "mcpsync.demo"]
OFFICIAL = [sys.executable, str(PEERS / "official_stdio_server.py")]
INIT = ('{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":'
        '"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}')


def guarded_config(tmp_path: Path, servers: dict[str, list[str]], rules: dict[str, Any]) -> str:
    doc = {"mcpServers": {sid: {"command": argv[0], "args": argv[1:]}
                          for sid, argv in servers.items()},
           "mcpsync": rules}
    path = tmp_path / "guarded.json"
    path.write_text(json.dumps(doc))
    return str(path)


def _manager(config: str) -> Manager:
    # validate_input=False: our client would refuse a tool the list hides (UnknownTool)
    # before sending; these tests want the gateway's own answer.
    m = Manager(connect_options={"validate_input": False})
    m.start_server(ServerConfig(id="gw", command=GATEWAY[0], args=[*GATEWAY[1:], config],
                                gateway=True))
    return m


@pytest.fixture
def demo_guarded(tmp_path: Path) -> Iterator[Manager]:
    config = guarded_config(tmp_path, {"demo": DEMO}, {
        "deny": ["demo/fail"],
        "arguments": [{"tool": "demo/echo", "argument": "text", "max_length": 8},
                      {"tool": "demo/slow", "argument": "steps", "in": [1, 2]}],
        "budgets": {"demo/add": {"calls": 2, "window": 1.5}},
        "require_approval": ["demo/slow"],
    })
    m = _manager(config)
    try:
        yield m
    finally:
        m.close()


def test_pass_through_denies_hides_and_checks_arguments(demo_guarded: Manager) -> None:
    m = demo_guarded
    assert [t.name for t in m.list_tools("gw")] == ["echo", "add", "slow"]   # fail hidden
    with pytest.raises(PolicyDenied) as info:
        m.call_tool("gw", "fail", {"message": "x"})
    exc = info.value
    assert exc.local is False and exc.rule == "deny['demo/fail']"
    assert "the policy denies 'demo/fail'" in str(exc)
    assert isinstance(exc.__cause__, RemoteError) and exc.__cause__.code == -32010
    assert exc.__cause__.data == {"reason": "the policy denies 'demo/fail'",
                                  "rule": "deny['demo/fail']", "upstream": "demo",
                                  "tool": "fail"}
    with pytest.raises(PolicyDenied) as info:
        m.call_tool("gw", "echo", {"text": "far too long"})
    assert info.value.rule == "arguments[0]" and "longer than 8" in str(info.value)
    assert "far too long" not in str(info.value)          # the arguments are never quoted
    assert m.call_tool("gw", "echo", {"text": "fits"}).text == "fits"   # still alive
    with pytest.raises(ApprovalRejected) as held:
        m.call_tool("gw", "slow", {"seconds": 0.01, "steps": 1})
    assert held.value.local is False and held.value.rule == "require_approval['demo/slow']"
    with pytest.raises(PolicyDenied):                       # argument rules run first
        m.call_tool("gw", "slow", {"seconds": 0.01, "steps": 5})
    assert m.call_tool("gw", "add", {"a": 1, "b": 2}).structured == {"sum": 3}


def test_pass_through_tool_budget_resets_after_its_window(demo_guarded: Manager) -> None:
    m = demo_guarded
    m.list_tools("gw")
    started = time.monotonic()
    for _ in range(2):
        assert m.call_tool("gw", "add", {"a": 1, "b": 1}).structured == {"sum": 2}
    with pytest.raises(BudgetExceeded) as info:
        m.call_tool("gw", "add", {"a": 1, "b": 1})
    exc = info.value
    assert exc.local is False and exc.rule == "budgets['demo/add']"
    retry = exc.retry_after
    assert retry is not None and 0 < retry <= 1.5 - (time.monotonic() - started) + 0.1
    cause = exc.__cause__
    assert isinstance(cause, RemoteError) and cause.code == -32012
    assert cause.data["left"] == {"calls": 0} and "resets in" in cause.data["reason"]
    assert m.call_tool("gw", "echo", {"text": "other"}).text == "other"   # other tools go
    time.sleep(retry + 0.05)
    assert m.call_tool("gw", "add", {"a": 2, "b": 2}).structured == {"sum": 4}


def test_our_client_does_not_even_send_a_hidden_tool(tmp_path: Path) -> None:
    config = guarded_config(tmp_path, {"demo": DEMO}, {"deny": ["demo/fail"]})
    with Manager() as m:
        m.start_server(ServerConfig(id="gw", command=GATEWAY[0],
                                    args=[*GATEWAY[1:], config], gateway=True))
        m.list_tools("gw")
        with pytest.raises(UnknownTool, match="its tools: add, echo, slow"):
            m.call_tool("gw", "fail")


def test_several_upstreams_budgets_per_upstream_and_process(tmp_path: Path) -> None:
    require_peer("mcp")
    config = guarded_config(tmp_path, {"demo": DEMO, "official": OFFICIAL, "odd": ODD}, {
        "allow": ["demo/*", "official/*"],
        "deny": ["*/fail", "official/boom"],
        "budgets": {"official": 2, "*": {"calls": 6}},
    })
    with _manager(config) as m:
        names = {t.name for t in m.list_tools("gw")}
        assert {"demo__echo", "demo__add", "official__add", "official__echo"} <= names
        assert not names & {"demo__fail", "official__boom", "odd__odd"}   # hidden
        with pytest.raises(PolicyDenied) as info:       # prefixed names are still refused
            m.call_tool("gw", "official__boom")
        assert info.value.rule == "deny['official/boom']"
        with pytest.raises(PolicyDenied) as info:
            m.call_tool("gw", "odd__odd")
        assert info.value.rule == "allow"
        assert m.call_tool("gw", "official__echo", {"text": "1"}).text == "1"
        assert m.call_tool("gw", "official__add", {"a": 1, "b": 1}).structured == {"sum": 2.0}
        with pytest.raises(BudgetExceeded) as spent:
            m.call_tool("gw", "official__echo", {"text": "3"})
        assert spent.value.rule == "budgets['official']" and spent.value.retry_after is None
        for n in range(4):                               # the process budget: 6 in all
            assert m.call_tool("gw", "demo__echo", {"text": str(n)}).text == str(n)
        with pytest.raises(BudgetExceeded) as spent:
            m.call_tool("gw", "demo__echo", {"text": "7th"})
        assert spent.value.rule == "budgets['*']"
        cause = spent.value.__cause__
        assert isinstance(cause, RemoteError) and cause.data["left"] == {"calls": 0}
        assert "retry_after" not in cause.data           # no window: it does not reset
        assert len(m.list_tools("gw")) == len(names)     # the session is alive


def test_pass_through_list_is_rewritten_only_when_something_is_hidden(tmp_path: Path) -> None:
    for rules, expect_odd in (({"deny": ["odd/other*"]}, True), ({"deny": ["odd/odd"]}, False)):
        host = RawHost(guarded_config(tmp_path, {"odd": ODD}, rules))
        try:
            host.send(INIT)
            host.recv()
            host.send('{"jsonrpc":"2.0","method":"notifications/initialized"}')
            host.send('{"jsonrpc":"2.0","id":"a\\u0031","method":"tools/list"}')
            line = host.recv()
            if expect_odd:       # nothing hidden: the upstream's bytes, untouched
                assert line == (b'{"jsonrpc":"2.0","id":"a\\u0031","result":{"tools":[{"name":'
                                b'"odd","inputSchema":{"type":"object"},"x-unknown":1E0}]}}')
                host.send('{"method":"tools/call","id":7,"params":{"name":"odd"},'
                          '"jsonrpc":"2.0"}')
                assert host.recv() == (f'{{"jsonrpc":"2.0","id":7,"result":{ODD_RESULT},'
                                       f'{ODD_EXTRA}}}').encode()
            else:
                assert json.loads(line) == {"jsonrpc": "2.0", "id": "a1",
                                            "result": {"tools": []}}
                answer = host.call('{"jsonrpc":"2.0","id":8,"method":"tools/call",'
                                   '"params":{"name":"odd"}}')
                assert answer["error"]["code"] == -32010
                assert answer["error"]["data"]["rule"] == "deny['odd/odd']"
                pong = host.call('{"jsonrpc":"2.0","id":9,"method":"ping"}')
                assert pong == {"jsonrpc": "2.0", "id": 9, "result": {}}
        finally:
            assert host.close() == 0


# --- the official SDK as the host ----------------------------------------------------------

async def _official_host(argv: list[str], mode: str) -> dict[str, Any]:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters
    from mcp.shared.exceptions import MCPError

    params = StdioServerParameters(command=argv[0], args=argv[1:])
    seen: dict[str, Any] = {}
    async with Client(params, mode=mode, read_timeout_seconds=30) as client:
        seen["tools"] = [t.name for t in (await client.list_tools()).tools]
        for name, args in (("fail", {}), ("echo", {"text": "far too long"}),
                           ("add", {"a": 1, "b": 1}), ("add", {"a": 1, "b": 1})):
            try:
                result = await client.call_tool(name, args)
                seen.setdefault("answers", []).append(result.structured_content)
            except MCPError as exc:
                seen.setdefault("errors", []).append((exc.error.code, exc.error.data))
        seen["after"] = (await client.call_tool("echo", {"text": "alive"})).content[0].text
    return seen


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_official_sdk_client_hears_the_refusals(tmp_path: Path, mode: str) -> None:
    require_peer("mcp")
    anyio = require_peer("anyio")
    config = guarded_config(tmp_path, {"demo": DEMO}, {
        "deny": ["demo/fail"],
        "arguments": [{"tool": "demo/echo", "argument": "text", "max_length": 8}],
        "budgets": {"demo/add": {"calls": 1, "window": 30}},
    })
    seen = anyio.run(_official_host, [*GATEWAY, config], mode)
    assert seen["tools"] == ["echo", "add", "slow"]
    assert seen["answers"] == [{"sum": 2}]
    (denied, denied_data), (args, args_data), (budget, budget_data) = seen["errors"]
    assert (denied, denied_data["rule"]) == (-32010, "deny['demo/fail']")
    assert (args, args_data["rule"]) == (-32010, "arguments[0]")
    assert (budget, budget_data["rule"]) == (-32012, "budgets['demo/add']")
    assert 0 < budget_data["retry_after"] <= 30 and budget_data["left"] == {"calls": 0}
    assert seen["after"] == "alive"


# --- the config's mcpsync key ---------------------------------------------------------------

@pytest.mark.parametrize(("rules", "where"), [
    ({"deny": ["x"], "denny": ["y"]}, "mcpsync.denny: unknown key"),
    ({"deny": "demo/fail"}, "mcpsync.deny: expected a list of globs"),
    ({"budgets": {"demo": {"calls": "3"}}}, 'mcpsync.budgets["demo"].calls: expected an '
                                            'integer >= 0, got "3"'),
    ({"budgets": {"demo": {"calls": 3, "per": 60}}}, 'mcpsync.budgets["demo"].per: unknown'),
    ({"arguments": [{"tool": "demo/echo", "argument": "text", "like": "*"}]},
     "mcpsync.arguments[0].like: unknown key"),
    ({"arguments": [{"tool": "demo/echo", "argument": "text"}]},
     "mcpsync.arguments[0]: give at least one of"),
    ({"approval": {"hold_seconds": 0}}, "mcpsync.approval.hold_seconds: expected a number > 0"),
    (["deny"], "mcpsync: expected an object, got a list"),
])
def test_a_bad_mcpsync_key_fails_naming_the_file_and_the_key(tmp_path: Path, rules: Any,
                                                             where: str) -> None:
    config = guarded_config(tmp_path, {"demo": DEMO}, rules)
    proc = subprocess.run([*GATEWAY, config], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode != 0 and proc.stdout == ""
    assert f"{config}: {where}" in proc.stderr


def test_load_config_ignores_the_mcpsync_key(tmp_path: Path,
                                             caplog: pytest.LogCaptureFixture) -> None:
    from mcpsync.config_files import load_config

    config = guarded_config(tmp_path, {"demo": DEMO}, {"deny": ["demo/fail"]})
    with caplog.at_level("WARNING"):
        assert [c.id for c in load_config(config)] == ["demo"]
    assert not caplog.records


def test_wall_time_budget_counts_the_calls_answer_time(tmp_path: Path) -> None:
    config = guarded_config(tmp_path, {"demo": DEMO},
                            {"budgets": {"demo/slow": {"seconds": 0.3, "window": 30}}})
    with _manager(config) as m:
        m.call_tool("gw", "slow", {"seconds": 0.4, "steps": 1})
        with pytest.raises(BudgetExceeded) as info:
            m.call_tool("gw", "slow", {"seconds": 0.01, "steps": 1})
        cause = info.value.__cause__
        assert isinstance(cause, RemoteError) and cause.data["left"] == {"seconds": 0.0}
        assert "0.3 s of wall time" in cause.data["reason"]
        assert m.call_tool("gw", "echo", {"text": "free"}).text == "free"


@pytest.mark.parametrize("era", ["auto", "legacy"])
def test_our_client_alone_reads_the_refusals_of_a_gateway_server(tmp_path: Path,
                                                                 era: str) -> None:
    import mcpsync

    config = guarded_config(tmp_path, {"demo": DEMO},
                            {"deny": ["demo/fail"], "budgets": {"*": {"calls": 1,
                                                                      "window": 20}}})
    argv = [*GATEWAY[1:], config]
    with mcpsync.connect(ServerConfig(id="gw", command=GATEWAY[0], args=argv, gateway=True),
                         validate_input=False, era=era) as client:
        assert client.era == ("modern" if era == "auto" else "legacy")
        with pytest.raises(PolicyDenied) as denied:
            client.call_tool("fail")
        assert denied.value.rule == "deny['demo/fail']" and denied.value.local is False
        assert client.call_tool("echo", {"text": "one"}).text == "one"
        with pytest.raises(BudgetExceeded) as spent:
            client.call_tool("echo", {"text": "two"})
        assert spent.value.rule == "budgets['*']" and spent.value.server == "gw"
        assert spent.value.retry_after is not None and 0 < spent.value.retry_after <= 20
    # Without gateway=True the same answers are plain remote errors.
    with mcpsync.connect(ServerConfig(id="plain", command=GATEWAY[0], args=argv),
                         validate_input=False) as client:
        with pytest.raises(RemoteError) as plain:
            client.call_tool("fail")
        assert plain.value.code == -32010 and not isinstance(plain.value, PolicyDenied)
        assert plain.value.data["rule"] == "deny['demo/fail']"


def test_twenty_threads_race_for_a_budget_of_seven(tmp_path: Path) -> None:
    import threading

    config = guarded_config(tmp_path, {"demo": [*DEMO, "--concurrency", "8"]},
                            {"budgets": {"demo/echo": 7}})
    results: list[str] = []
    lock = threading.Lock()
    with _manager(config) as m:
        m.list_tools("gw")

        def call(k: int) -> None:
            try:
                got = m.call_tool("gw", "echo", {"text": str(k)}).text
                outcome = "sent" if got == str(k) else f"wrong {got!r}"
            except BudgetExceeded:
                outcome = "refused"
            with lock:
                results.append(outcome)
        threads = [threading.Thread(target=call, args=(k,), name=f"test-race-{k}")
                   for k in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert sorted(results) == ["refused"] * 13 + ["sent"] * 7
        assert m.call_tool("gw", "add", {"a": 1, "b": 1}).structured == {"sum": 2}


def test_the_traffic_log_shows_a_refused_call_that_never_reached_the_upstream(
        tmp_path: Path) -> None:
    log = tmp_path / "gateway.log"
    config = guarded_config(tmp_path, {"demo": DEMO}, {"deny": ["demo/fail"]})
    with Manager(connect_options={"validate_input": False}) as m:
        m.start_server(ServerConfig(id="gw", command=GATEWAY[0], gateway=True,
                                    args=[*GATEWAY[1:], config, "--log", str(log)]))
        with pytest.raises(PolicyDenied):
            m.call_tool("gw", "fail", {"message": "x"})
    records = [json.loads(line) for line in log.read_text().splitlines()]
    calls = [r for r in records if r.get("tool") == "fail"]
    assert [r["dir"] for r in calls] == ["host->gateway", "gateway->host"]
    assert (calls[1]["outcome"], calls[1]["code"]) == ("refused", -32010)
    assert "deny['demo/fail']" in calls[1]["message"]


def test_the_traffic_log_shows_a_held_call_that_was_refused(tmp_path: Path) -> None:
    # A call held for approval that no approver takes is refused at the end of its hold:
    # the log shows the host's call too (recorded when the hold ends), not only the refusal.
    log = tmp_path / "gateway.log"
    config = guarded_config(tmp_path, {"demo": DEMO}, {"require_approval": ["demo/slow"]})
    with Manager(connect_options={"validate_input": False}) as m:
        m.start_server(ServerConfig(id="gw", command=GATEWAY[0], gateway=True,
                                    args=[*GATEWAY[1:], config, "--log", str(log)]))
        with pytest.raises(ApprovalRejected):
            m.call_tool("gw", "slow", {"seconds": 0.01, "steps": 1})
    records = [json.loads(line) for line in log.read_text().splitlines()]
    calls = [r for r in records if r.get("tool") == "slow"]
    assert [r["dir"] for r in calls] == ["host->gateway", "gateway->host"], records
    assert (calls[1]["outcome"], calls[1]["code"]) == ("refused", -32011)


# --- a key twice in a call's params ----------------------------------------------------------

def _raw_session(host: RawHost) -> None:
    host.send(INIT)
    host.recv()
    host.send('{"jsonrpc":"2.0","method":"notifications/initialized"}')


@pytest.mark.parametrize("several", [False, True])
def test_a_key_twice_in_a_call_is_refused_and_never_reaches_the_upstream(
        tmp_path: Path, several: bool) -> None:
    # The rule sees the last "text" (short, allowed); an upstream keeping the first would
    # echo the long one. The gateway refuses both readings before anything is sent.
    servers = {"demo": DEMO, "odd": ODD} if several else {"demo": DEMO}
    echo = "demo__echo" if several else "echo"
    log = tmp_path / "gateway.log"
    host = RawHost(guarded_config(tmp_path, servers, {
        "arguments": [{"tool": "demo/echo", "argument": "text", "max_length": 8}]}),
        "--log", str(log))
    try:
        _raw_session(host)
        twice = host.call(f'{{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{{"name":'
                          f'"{echo}","arguments":{{"text":"far too long","text":"ok"}}}}}}')
        error = twice["error"]
        assert (twice["id"], error["code"]) == (5, -32010)
        assert error["data"]["rule"] == "duplicate-keys"
        assert error["data"]["reason"] == ("the arguments hold the key 'text' twice; a "
                                           "policy cannot judge them")
        assert "far too long" not in json.dumps(twice)
        deep = host.call(f'{{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{{"name":'
                         f'"{echo}","arguments":{{"text":"ok","x":[{{"a":1,"\\u0061":2}}]}}}}}}')
        assert deep["error"]["data"]["reason"].startswith("the arguments hold the key 'a' twice")
        named = host.call(f'{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":'
                          f'"{echo}","name":"{echo}","arguments":{{"text":"ok"}}}}}}')
        assert named["error"]["data"] == {
            "reason": "the call's params hold the key 'name' twice; a policy cannot judge "
                      "them", "rule": "duplicate-keys", "upstream": "demo", "tool": "echo"}
        fine = host.call(f'{{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{{"name":'
                         f'"{echo}","arguments":{{"text":"ok"}}}}}}')
        assert fine["result"]["content"][0]["text"] == "ok"        # the session is alive
    finally:
        assert host.close() == 0
    records = [json.loads(line) for line in log.read_text().splitlines()]
    sent = [r.get("id") for r in records if r.get("dir") == "gateway->upstream"
            and r.get("method") == "tools/call"]
    # only the clean call went to the upstream (with several, under the gateway's own id)
    assert len(sent) == 1 and (several or sent == [8]), records


def test_without_a_policy_a_key_twice_passes_through_untouched(tmp_path: Path) -> None:
    host = RawHost(guarded_config(tmp_path, {"demo": DEMO}, {}))
    try:
        _raw_session(host)
        answer = host.call('{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":'
                           '"echo","arguments":{"text":"first","text":"last"}}}')
        assert answer["result"]["content"][0]["text"] == "last"   # our server: last wins
    finally:
        assert host.close() == 0


# --- the official SDK's client as the host of an approval hold ------------------------------

#: A command hook approving ``add`` when its ``a`` is 1 and rejecting it otherwise.
APPROVE_A1 = """\
import json, sys
call = json.load(sys.stdin)
sys.exit(0 if call["arguments"]["a"] == 1 else 1)
"""


async def _official_held(argv: list[str], mode: str) -> dict[str, Any]:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters
    from mcp.shared.exceptions import MCPError

    params = StdioServerParameters(command=argv[0], args=argv[1:])
    seen: dict[str, Any] = {"answers": [], "errors": []}
    async with Client(params, mode=mode, read_timeout_seconds=30) as client:
        for a in (1, 2, 1):
            started = time.monotonic()
            try:
                result = await client.call_tool("add", {"a": a, "b": 1})
                seen["answers"].append(result.structured_content)
            except MCPError as exc:
                seen["errors"].append((exc.error.code, exc.error.message, exc.error.data))
            seen.setdefault("seconds", []).append(time.monotonic() - started)
        seen["after"] = (await client.call_tool("echo", {"text": "alive"})).content[0].text
    return seen


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_official_sdk_client_waits_out_an_approval_hold(tmp_path: Path, mode: str) -> None:
    require_peer("mcp")
    anyio = require_peer("anyio")
    hook = tmp_path / "hook.py"
    hook.write_text(APPROVE_A1, encoding="utf-8")
    config = guarded_config(tmp_path, {"demo": DEMO}, {
        "require_approval": ["demo/add"],
        "approval": {"approver": {"command": [sys.executable, str(hook)]},
                     "hold_seconds": 3},
    })
    seen = anyio.run(_official_held, [*GATEWAY, config], mode)
    assert seen["answers"] == [{"sum": 2}, {"sum": 2}]     # approved, then approved again
    ((code, message, data),) = seen["errors"]
    assert code == -32011
    assert data["rule"] == "require_approval['demo/add']"
    assert data["reason"] == "rejected by the command hook (exit status 1)"
    assert (data["upstream"], data["tool"]) == ("demo", "add")
    assert "rejected by the command hook" in message
    assert all(s < 3 for s in seen["seconds"])             # decided by the hook, not the clock
    assert seen["after"] == "alive"
