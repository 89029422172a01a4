"""The guard on the gateway's HTTP front, end to end through ``mcpsync gateway --config FILE
--http HOST:PORT`` with an ``mcpsync`` key: our client (``gateway=True``, legacy and
2026-07-28) and the official SDK's streamable-HTTP client as hosts, our demo server behind.

Seen: a denied tool hidden and refused -32010, an argument rule, a budget per legacy session
(two sessions, each its own), the 2026-07-28 hosts' budget by remote address (and by
principal behind a token verifier), a window that resets with ``retry_after``, approval
holds decided by a command hook (approved after a progress notification on the call's own
stream, rejected) whose summary names the caller, the official client through such a hold, a
held call withdrawn from the one shared desk when its session ends, several upstreams
counted per session, the session alive after each refusal, one traffic log naming each
session, a bridged gateway on the HTTP front, the gunicorn entry point reading the
``mcpsync`` key, and the web approver kept off the MCP port.
"""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import require_peer
from server.helpers import MODERN, modern_meta

import mcpsync
from gateway.front_http_helpers import DEMO, FEATURES, Command, post
from mcpsync import ServerConfig
from mcpsync.errors import ApprovalRejected, BudgetExceeded, PolicyDenied, RemoteError
from mcpsync.gateway import Gateway
from mcpsync.gateway._guard._hooks import guard_options
from mcpsync.server.http import AccessToken, WsgiServer

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
ERA_GUARD = [sys.executable, str(ROOT / "tests" / "gateway" / "peers" / "era_guard.py")]
RULES: dict[str, Any] = {
    "deny": ["demo/fail"],
    "arguments": [{"tool": "demo/echo", "argument": "text", "max_length": 8}],
    "budgets": {"demo/add": {"calls": 2, "window": 2}},
}


def guarded_config(tmp_path: Path, rules: dict[str, Any],
                   servers: dict[str, list[str]] | None = None) -> str:
    servers = servers or {"demo": DEMO}
    doc = {"mcpServers": {sid: {"command": argv[0], "args": argv[1:]}
                          for sid, argv in servers.items()},
           "mcpsync": rules}
    path = tmp_path / "guarded.json"
    path.write_text(json.dumps(doc))
    return str(path)


def host(url: str, era: str) -> mcpsync.Client:
    # validate_input=False: our client would refuse a hidden tool itself, before sending.
    return mcpsync.connect(ServerConfig(id="gw", url=url, gateway=True), era=era,
                           validate_input=False, timeout=30)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Command]:
    with Command(guarded_config(tmp_path, RULES), log=tmp_path / "gw.log") as command:
        yield command


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_denied_hidden_and_refused_and_arguments_checked(served: Command, era: str) -> None:
    with host(served.url, era) as client:
        assert client.era == era
        assert [t.name for t in client.list_tools()] == ["echo", "add", "slow"]   # fail hidden
        with pytest.raises(PolicyDenied) as denied:
            client.call_tool("fail", {"message": "x"})
        assert denied.value.rule == "deny['demo/fail']" and denied.value.local is False
        cause = denied.value.__cause__
        assert isinstance(cause, RemoteError) and cause.code == -32010
        assert cause.data["upstream"] == "demo" and cause.data["tool"] == "fail"
        assert client.call_tool("echo", {"text": "fits"}).text == "fits"     # alive
        with pytest.raises(PolicyDenied) as long:
            client.call_tool("echo", {"text": "far too long"})
        assert long.value.rule == "arguments[0]" and "far too long" not in str(long.value)
        assert client.call_tool("add", {"a": 1, "b": 2}).structured == {"sum": 3}


def test_each_legacy_session_has_its_own_budget_which_resets(served: Command) -> None:
    with host(served.url, "legacy") as one, host(served.url, "legacy") as two:
        started = time.monotonic()
        for n in range(2):
            assert one.call_tool("add", {"a": n, "b": 1}).structured == {"sum": n + 1}
        with pytest.raises(BudgetExceeded) as spent:
            one.call_tool("add", {"a": 9, "b": 9})
        retry = spent.value.retry_after
        assert spent.value.rule == "budgets['demo/add']"
        assert retry is not None and 0 < retry <= 2 - (time.monotonic() - started) + 0.1
        cause = spent.value.__cause__
        assert isinstance(cause, RemoteError) and cause.data["left"] == {"calls": 0}
        # The other session's budget is its own: two calls more.
        for n in range(2):
            assert two.call_tool("add", {"a": n, "b": 2}).structured == {"sum": n + 2}
        with pytest.raises(BudgetExceeded):
            two.call_tool("add", {"a": 0, "b": 0})
        assert one.call_tool("echo", {"text": "alive"}).text == "alive"
        time.sleep(retry + 0.05)
        assert one.call_tool("add", {"a": 5, "b": 5}).structured == {"sum": 10}


def test_modern_hosts_share_a_budget_by_their_address(served: Command) -> None:
    with host(served.url, "modern") as one, host(served.url, "modern") as two:
        assert one.call_tool("add", {"a": 1, "b": 1}).structured == {"sum": 2}
        assert two.call_tool("add", {"a": 2, "b": 2}).structured == {"sum": 4}
        # Both come from 127.0.0.1: one budget, now spent, for either host.
        for client in (one, two):
            with pytest.raises(BudgetExceeded) as spent:
                client.call_tool("add", {"a": 0, "b": 0})
            assert spent.value.retry_after is not None and 0 < spent.value.retry_after <= 2
        assert two.call_tool("echo", {"text": "alive"}).text == "alive"
        time.sleep(spent.value.retry_after + 0.05)
        assert one.call_tool("add", {"a": 3, "b": 3}).structured == {"sum": 6}
        # A legacy session from the same address has a budget of its own.
        with host(served.url, "legacy") as legacy:
            assert legacy.call_tool("add", {"a": 4, "b": 4}).structured == {"sum": 8}


def test_behind_a_token_verifier_each_principal_has_its_own_budget(tmp_path: Path) -> None:
    config = guarded_config(tmp_path, {"budgets": {"*": {"calls": 1}}})
    where: list[str] = []

    def verify(token: str) -> AccessToken | None:
        name = {"alice-token": "alice", "bob-token": "bob"}.get(token)
        return None if name is None else AccessToken(client_id="app", subject=name,
                                                     audience=(where[0],))

    gateway = Gateway(config, **guard_options(config))
    app = gateway.wsgi_app(token_verifier=verify)
    server = WsgiServer(app, "127.0.0.1", 0, name="test-guard-http")
    server.start()
    try:
        where.append(server.url + "/mcp")

        def call(token: str, n: int) -> Any:
            body = {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {
                "name": "echo", "arguments": {"text": str(n)}, "_meta": modern_meta()}}
            status, _, reply = post(server.port, body, {
                "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call",
                "Mcp-Name": "echo", "Authorization": f"Bearer {token}"})
            assert status == 200
            return reply

        assert call("alice-token", 1)["result"]["content"][0]["text"] == "1"
        refused = call("alice-token", 2)["error"]
        assert refused["code"] == -32012 and refused["data"]["rule"] == "budgets['*']"
        assert call("bob-token", 3)["result"]["content"][0]["text"] == "3"
    finally:
        app.close()
        server.close()
        gateway.close()


# --- approval holds --------------------------------------------------------------------------

HOOK = """\
import json, sys, time
call = json.load(sys.stdin)
with open(sys.argv[1], "a") as seen:
    seen.write(json.dumps(call) + "\\n")
a = call["arguments"]["a"]
if a == 1:
    time.sleep(5.6)      # long enough for the desk's first progress beat (every 5 s)
sys.exit(0 if a in (1, 4) else 1)
"""


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_a_command_hook_approves_and_rejects_held_calls(tmp_path: Path, era: str) -> None:
    hook = tmp_path / "hook.py"
    hook.write_text(HOOK, encoding="utf-8")
    summaries = tmp_path / "summaries.jsonl"
    config = guarded_config(tmp_path, {
        "require_approval": ["demo/add"],
        "approval": {"approver": {"command": [sys.executable, str(hook), str(summaries)]},
                     "hold_seconds": 15},
    })
    with Command(config, log=tmp_path / "gw.log") as served, \
            host(served.url, era) as client:
        beats: list[tuple[float, str | None]] = []
        started = time.monotonic()
        done = client.call_tool("add", {"a": 1, "b": 1},
                                progress=lambda p, total, message: beats.append((p, message)))
        assert done.structured == {"sum": 2}
        assert 5.5 <= time.monotonic() - started < 14
        assert len(beats) == 1 and 4.9 <= beats[0][0] < 6
        assert "waiting for approval of demo/add" in str(beats[0][1])
        with pytest.raises(ApprovalRejected) as rejected:
            client.call_tool("add", {"a": 2, "b": 1})
        assert rejected.value.rule == "require_approval['demo/add']"
        assert "rejected by the command hook (exit status 1)" in str(rejected.value)
        assert client.call_tool("echo", {"text": "alive"}).text == "alive"   # not held
        assert client.call_tool("add", {"a": 4, "b": 1}).structured == {"sum": 5}
    seen = [json.loads(line) for line in summaries.read_text().splitlines()]
    assert [s["arguments"]["a"] for s in seen] == [1, 2, 4]
    callers = {s["caller"] for s in seen}
    assert len(callers) == 1
    (caller,) = callers
    if era == "legacy":   # the session id itself is never shown, only a digest of it
        assert caller.startswith("session ") and len(caller) == len("session ") + 12
    else:
        assert caller == "address 127.0.0.1"


# --- the official SDK's streamable-HTTP client ------------------------------------------

async def _official_host(url: str, mode: str) -> dict[str, Any]:
    from mcp import Client
    from mcp.shared.exceptions import MCPError

    seen: dict[str, Any] = {"errors": [], "answers": []}
    async with Client(url, mode=mode, read_timeout_seconds=30) as client:
        seen["tools"] = [t.name for t in (await client.list_tools()).tools]
        for name, args in (("fail", {}), ("echo", {"text": "far too long"}),
                           ("add", {"a": 1, "b": 1}), ("add", {"a": 2, "b": 2}),
                           ("add", {"a": 3, "b": 3})):
            try:
                result = await client.call_tool(name, args)
                seen["answers"].append(result.structured_content)
            except MCPError as exc:
                seen["errors"].append((exc.error.code, exc.error.data))
        seen["after"] = (await client.call_tool("echo", {"text": "alive"})).content[0].text
    return seen


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_the_official_client_hears_the_refusals_over_http(served: Command, mode: str) -> None:
    require_peer("mcp")
    anyio = require_peer("anyio")
    seen = anyio.run(_official_host, served.url, mode)
    assert seen["tools"] == ["echo", "add", "slow"]
    assert seen["answers"] == [{"sum": 2}, {"sum": 4}]
    (denied, denied_data), (args, args_data), (budget, budget_data) = seen["errors"]
    assert (denied, denied_data["rule"]) == (-32010, "deny['demo/fail']")
    assert (args, args_data["rule"]) == (-32010, "arguments[0]")
    assert (budget, budget_data["rule"]) == (-32012, "budgets['demo/add']")
    assert 0 < budget_data["retry_after"] <= 2 and budget_data["left"] == {"calls": 0}
    assert seen["after"] == "alive"


#: A command hook approving ``add`` when its ``a`` is 1 and rejecting it otherwise.
APPROVE_A1 = """\
import json, sys
call = json.load(sys.stdin)
sys.exit(0 if call["arguments"]["a"] == 1 else 1)
"""


async def _official_held(url: str, mode: str) -> dict[str, Any]:
    from mcp import Client
    from mcp.shared.exceptions import MCPError

    seen: dict[str, Any] = {"answers": [], "errors": [], "seconds": []}
    async with Client(url, mode=mode, read_timeout_seconds=30) as client:
        for a in (1, 2, 1):
            started = time.monotonic()
            try:
                result = await client.call_tool("add", {"a": a, "b": 1})
                seen["answers"].append(result.structured_content)
            except MCPError as exc:
                seen["errors"].append((exc.error.code, exc.error.message, exc.error.data))
            seen["seconds"].append(time.monotonic() - started)
        seen["after"] = (await client.call_tool("echo", {"text": "alive"})).content[0].text
    return seen


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_the_official_client_waits_out_an_approval_hold_over_http(tmp_path: Path,
                                                                   mode: str) -> None:
    require_peer("mcp")
    anyio = require_peer("anyio")
    hook = tmp_path / "hook.py"
    hook.write_text(APPROVE_A1, encoding="utf-8")
    config = guarded_config(tmp_path, {
        "require_approval": ["demo/add"],
        "approval": {"approver": {"command": [sys.executable, str(hook)]},
                     "hold_seconds": 3},
    })
    with Command(config, log=tmp_path / "gw.log") as served:
        seen = anyio.run(_official_held, served.url, mode)
    assert seen["answers"] == [{"sum": 2}, {"sum": 2}]     # approved, then approved again
    ((code, message, data),) = seen["errors"]
    assert code == -32011
    assert data["rule"] == "require_approval['demo/add']"
    assert data["reason"] == "rejected by the command hook (exit status 1)"
    assert (data["upstream"], data["tool"]) == ("demo", "add")
    assert "rejected by the command hook" in message
    assert all(s < 3 for s in seen["seconds"])             # decided by the hook, not the clock
    assert seen["after"] == "alive"


# --- bridging, gunicorn's entry, the web approver's port -----------------------------------

def test_a_legacy_host_reaches_a_modern_server_through_http_bridge(tmp_path: Path) -> None:
    up_log = tmp_path / "up.jsonl"
    modern_only = [*ERA_GUARD, "--only", "modern", "--log", str(up_log), "--", *FEATURES]
    config = guarded_config(tmp_path, {"deny": ["feat/ask_twice"]}, {"feat": modern_only})
    with Command(config, "--bridge", log=tmp_path / "gw.log") as served, \
            host(served.url, "legacy") as client:
        assert client.server_info.name == "features"
        names = {t.name for t in client.list_tools()}
        assert "greet" in names and "ask_twice" not in names     # the policy applies too
        assert client.call_tool("greet", {"name": "x"}).text == "hello x"
        with pytest.raises(PolicyDenied):
            client.call_tool("ask_twice", {})
    frames = [json.loads(line) for line in up_log.read_text().splitlines()]
    assert "initialize" not in [f.get("method") for f in frames]   # spoken to in 2026-07-28
    assert any(f.get("method") == "tools/call" for f in frames)


def test_the_gunicorn_entry_point_applies_the_mcpsync_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mcpsync.gateway import wsgi

    monkeypatch.setenv("MCPSYNC_GATEWAY_CONFIG", guarded_config(tmp_path, RULES))
    app = wsgi()
    server = WsgiServer(app, "127.0.0.1", 0, name="test-guard-wsgi")
    server.start()
    try:
        with host(server.url + "/mcp", "legacy") as client:
            assert "fail" not in {t.name for t in client.list_tools()}
            with pytest.raises(PolicyDenied):
                client.call_tool("fail", {})
    finally:
        app.close()    # also closes the gateway wsgi() made
        server.close()


def test_the_web_approver_never_shares_the_mcp_port(tmp_path: Path) -> None:
    config = guarded_config(tmp_path, {"require_approval": ["demo/add"],
                                       "approval": {"approver": {"web": {"port": 48731}}}})
    done = subprocess.run([sys.executable, "-m", "mcpsync", "gateway", "--config", config,
                           "--http", "127.0.0.1:48731"], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode != 0 and done.stdout == ""
    assert "give the approval page a port of its own" in done.stderr


# --- every core of the front is made from the configured gateway ---------------------------

def test_every_option_of_the_gateway_reaches_the_fronts_cores(tmp_path: Path) -> None:
    """A new ``Gateway`` option must either go into each core as it is or be handed over
    (the guard, the inspector, ``on_frame``); this fails when one is forgotten."""
    handed_over = {"policy", "approver", "hold_seconds", "inspector", "on_frame"}
    options = set(inspect.signature(Gateway.__init__).parameters) - {"self", "config"}
    config = guarded_config(tmp_path, RULES)
    seen: list[str] = []
    gateway = Gateway(config, **guard_options(config), bridge=True,
                      on_frame=lambda d, u, env, latency: seen.append(d))
    try:
        assert set(gateway._core_options) == options - handed_over
        core = gateway._new_core()
        try:
            assert core._core_options == gateway._core_options
            assert core.on_frame is gateway.on_frame and core.inspector is gateway.inspector
            assert core._guard is not None and gateway._guard is not None
            assert core._guard.guard is gateway._guard.guard      # one ledger and policy
            assert core._guard._desk is gateway._guard._desk      # one approval desk
        finally:
            core.close()
    finally:
        gateway.close()


def test_one_log_for_every_session_and_each_record_names_its_session(tmp_path: Path) -> None:
    log = tmp_path / "traffic.log"
    config = guarded_config(tmp_path, {"deny": ["demo/fail"]})
    with Command(config, "--log", str(log), log=tmp_path / "gw.log") as served:
        with host(served.url, "legacy") as one, host(served.url, "legacy") as two:
            for client, text in ((one, "one"), (two, "two")):
                assert client.call_tool("echo", {"text": text}).text == text
                with pytest.raises(PolicyDenied):
                    client.call_tool("fail", {})
        assert served.close() == 0
    records = [json.loads(line) for line in log.read_text().splitlines()]
    answers = [r for r in records if r.get("dir") == "gateway->host" and r.get("tool")]
    by_session: dict[str, list[tuple[str, str]]] = {}
    for r in answers:
        by_session.setdefault(r["session"], []).append((r["tool"], r["outcome"]))
    assert len(by_session) == 2
    assert all(re.fullmatch("[0-9a-f]{12}", tag) for tag in by_session)   # a digest, not the id
    assert all(seen == [("echo", "ok"), ("fail", "refused")] for seen in by_session.values())


def test_a_sessions_held_call_leaves_the_shared_desk_when_the_session_ends(
        tmp_path: Path) -> None:
    """Two legacy sessions hold calls on the one desk; ending one session withdraws its
    held call at once (the approver's hold time is 30 s), the other's stays held."""
    import threading

    asked: list[str] = []
    let_go = threading.Event()

    def approver(call: Any) -> bool:
        asked.append(call.caller)
        let_go.wait(30)
        return True

    config = guarded_config(tmp_path, {})
    policy = mcpsync.Policy(require_approval=["demo/add"])
    gateway = Gateway(config, policy=policy, approver=approver, hold_seconds=30)
    app = gateway.wsgi_app()
    server = WsgiServer(app, "127.0.0.1", 0, name="test-guard-desk")
    server.start()
    results: dict[str, Any] = {}
    clients: list[mcpsync.Client] = []
    try:
        url = server.url + "/mcp"
        clients += [host(url, "legacy"), host(url, "legacy")]

        def call(n: int) -> None:
            try:
                results[str(n)] = clients[n].call_tool("add", {"a": n, "b": 1}).structured
            except mcpsync.MCPError as exc:
                results[str(n)] = exc
        threads = [threading.Thread(target=call, args=(n,), name=f"test-held-{n}")
                   for n in range(2)]
        for t in threads:
            t.start()
        desk = gateway._guard._desk   # type: ignore[union-attr]
        deadline = time.monotonic() + 20
        while len(desk.held()) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(desk.held()) == 2 and len(set(asked)) == 2   # one desk, two callers
        first = next(r for r in app._live if r.core is not None
                     and r.core._guard._tickets)   # type: ignore[union-attr]
        started = time.monotonic()
        first.cancel_all()                       # the session ends (as on DELETE or expiry)
        while len(desk.held()) > 1 and time.monotonic() < started + 5:
            time.sleep(0.02)
        assert len(desk.held()) == 1 and time.monotonic() - started < 5
        let_go.set()
        for t in threads:
            t.join(30)
        ended, going = sorted(results.values(), key=lambda r: isinstance(r, dict))
        assert isinstance(ended, mcpsync.MCPError)     # its session is gone, and its call
        assert going in ({"sum": 1}, {"sum": 2})       # the other session's call went on
    finally:
        for client in clients:
            client.close()
        let_go.set()
        app.close()
        server.close()
        gateway.close()


def test_several_upstreams_count_per_session_on_the_http_front(tmp_path: Path) -> None:
    config = guarded_config(tmp_path, {"deny": ["b/fail"], "budgets": {"*": {"calls": 2}}},
                            {"a": DEMO, "b": DEMO})
    with Command(config, log=tmp_path / "gw.log") as served, \
            host(served.url, "legacy") as one, host(served.url, "legacy") as two:
        names = {t.name for t in one.list_tools()}
        assert "a__fail" in names and "b__fail" not in names
        with pytest.raises(PolicyDenied) as denied:
            one.call_tool("b__fail", {})
        assert denied.value.rule == "deny['b/fail']"
        assert one.call_tool("a__echo", {"text": "1"}).text == "1"
        assert one.call_tool("b__echo", {"text": "2"}).text == "2"
        with pytest.raises(BudgetExceeded) as spent:
            one.call_tool("a__add", {"a": 1, "b": 1})
        assert spent.value.rule == "budgets['*']" and spent.value.retry_after is None
        two.list_tools()       # each session's core learns the prefixed names from a list
        assert two.call_tool("b__add", {"a": 1, "b": 1}).structured == {"sum": 2}  # its own
        assert len(one.list_tools()) == len(names)                       # still alive


def test_secrets_dir_reaches_each_sessions_upstream_on_the_http_front(tmp_path: Path) -> None:
    import hashlib
    import os
    import secrets

    value = "sk-" + secrets.token_urlsafe(24)
    directory = tmp_path / "secrets"
    (directory / "vault").mkdir(parents=True, mode=0o700)
    fd = os.open(directory / "vault" / "app", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"API_KEY": value}, f)
    config = tmp_path / "gateway.json"
    config.write_text(json.dumps({"mcpServers": {"peer": {
        "command": sys.executable, "args": [str(ROOT / "tests/gateway/peers/secret_server.py")],
        "env": {"SECRET_FILE": "{{secret_file}}"}, "secret_ref": "vault/app"}},
        "mcpsync": {"deny": ["peer/nothing"]}}))
    log = tmp_path / "gw.log"
    with Command(str(config), "--secrets-dir", str(directory), log=log) as served:
        seen = []
        for _ in range(2):   # two legacy sessions: two processes, each with its own file
            with host(served.url, "legacy") as client:
                seen.append(json.loads(client.call_tool("seen", {}).text))
        assert served.close() == 0
    assert [s["api_key_sha256"] for s in seen] == [hashlib.sha256(value.encode()).hexdigest()] * 2
    assert seen[0]["pid"] != seen[1]["pid"] and seen[0]["path"] != seen[1]["path"]
    assert all(s["mode"] == 0o600 and not Path(s["path"]).exists() for s in seen)
    assert value not in log.read_text()


def test_an_ended_sessions_budget_use_is_forgotten(tmp_path: Path) -> None:
    """Each legacy session counts under its own id, which is never used again once the
    session ends: the gateway forgets that use then, rather than keep every session's."""
    policy = mcpsync.Policy(budgets={"demo/add": mcpsync.Budget(calls=5)})
    gateway = Gateway(guarded_config(tmp_path, {}), policy=policy)
    app = gateway.wsgi_app()
    server = WsgiServer(app, "127.0.0.1", 0, name="test-guard-forget")
    server.start()
    ledger = gateway._guard.guard.ledger   # type: ignore[union-attr]
    try:
        url = server.url + "/mcp"
        with host(url, "legacy") as one, host(url, "legacy") as two:
            for client in (one, two):
                assert client.call_tool("add", {"a": 1, "b": 1}).structured == {"sum": 2}
            assert ledger.callers() == 2
        deadline = time.monotonic() + 10       # closing a client DELETEs its session
        while ledger.callers() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ledger.callers() == 0
    finally:
        app.close()
        server.close()
        gateway.close()
