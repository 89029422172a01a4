"""Policy rules beyond the callbacks: deny/allow globs, argument rules, budgets of calls,
wall time and cost in windows, approval globs — checked by the Manager against our demo
server, and by the policy's own decision function with a fake clock."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from mcpsync._budget_ledger import BudgetLedger
from mcpsync.errors import ApprovalRejected, BudgetExceeded, PolicyDenied
from mcpsync.manager import Manager
from mcpsync.policy import ArgumentRule, Budget, Policy, decide, tool_matches

from .test_manager import config

DEMO = [sys.executable, "-m", "mcpsync.demo", "--concurrency", "4"]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def shared() -> Iterator[Manager]:
    m = Manager()
    m.start_server(config("demo", DEMO))
    yield m
    m.close()


@pytest.fixture
def demo(shared: Manager) -> Iterator[Manager]:
    shared.set_policy(None)
    shared.reset_budgets()
    yield shared
    shared.set_policy(None)
    shared.reset_budgets()


def test_globs_name_server_slash_tool_or_a_bare_tool_name() -> None:
    assert tool_matches("files/delete*", "files", "delete_all")
    assert not tool_matches("files/delete*", "other", "delete_all")
    assert tool_matches("*/read_*", "x", "read_file") and not tool_matches("*/read_*", "x",
                                                                            "write")
    assert tool_matches("delete*", "any", "delete") and not tool_matches("delete*", "a",
                                                                         "undelete")


def test_policy_fields_are_checked() -> None:
    for bad in ({"deny": "files/*"}, {"deny": [""]}, {"allow": [3]},
                {"require_approval": "x"}, {"arguments": [{"tool": "a/b"}]},
                {"arguments": [{"tool": "a/b", "argument": "p", "glob": "*"}]},
                {"budgets": {"a": {"window": 5}}}, {"budgets": {"a": {"calls": -1}}},
                {"budgets": {"a": {"calls": 1, "window": 0}}},
                {"budgets": {"a": {"calls": 1, "per": 3}}}, {"cost": 3}):
        with pytest.raises((TypeError, ValueError)):
            Policy(**bad)
    policy = Policy(budgets={"a": 2, "b": {"calls": 1, "window": 60}, "*": Budget(seconds=3)})
    assert policy.budgets == {"a": 2, "b": {"calls": 1, "window": 60}, "*": Budget(seconds=3)}


def test_deny_wins_over_allow_and_hides_from_lists() -> None:
    policy = Policy(allow=["demo/*"], deny=["demo/fail"])
    ledger = BudgetLedger()
    assert policy.visible("demo", "echo") and not policy.visible("demo", "fail")
    assert not policy.visible("other", "echo")            # not named by an allow glob
    denied = decide(policy, ledger, "process", "demo", "fail", {})
    assert (denied.kind, denied.rule) == ("denied", "deny['demo/fail']")
    other = decide(policy, ledger, "process", "other", "echo", {})
    assert (other.kind, other.rule) == ("denied", "allow")
    assert decide(policy, ledger, "process", "demo", "echo", {}).kind == "send"
    # A callback never hides a tool: it may depend on the arguments.
    assert Policy(allow=lambda s, t, a: False).visible("demo", "echo")


def test_argument_rules_each_condition() -> None:
    rules = [{"tool": "files/write", "argument": "path", "matches": "/tmp/*"},
             {"tool": "*/mode", "argument": "m", "in": ["r", "w"]},
             {"tool": "*/flag", "argument": "on", "equals": True},
             {"tool": "*/note", "argument": "text", "max_length": 4},
             ArgumentRule("*/num", "n", check=lambda v: isinstance(v, int) and v % 2 == 0)]
    policy = Policy(arguments=rules)
    ledger = BudgetLedger()

    def kind(tool: str, args: Mapping[str, Any]) -> str:
        return decide(policy, ledger, "process", "files", tool, args).kind

    assert kind("write", {"path": "/tmp/a"}) == "send"
    assert kind("write", {"path": "/etc/passwd"}) == "denied"
    assert kind("write", {}) == "denied"                      # a missing argument is refused
    assert kind("write", {"path": 7}) == "denied"
    assert kind("mode", {"m": "r"}) == "send" and kind("mode", {"m": "x"}) == "denied"
    assert kind("flag", {"on": True}) == "send" and kind("flag", {"on": 1}) == "denied"
    assert kind("note", {"text": "abcd"}) == "send"
    assert kind("note", {"text": "abcde"}) == "denied"
    assert kind("num", {"n": 4}) == "send" and kind("num", {"n": 3}) == "denied"
    assert kind("read", {"path": "/etc/passwd"}) == "send"    # no rule names this tool
    refused = decide(policy, ledger, "process", "files", "write", {"path": "/etc/secret"})
    assert refused.rule == "arguments[0]" and "/etc/secret" not in refused.reason


def test_budget_windows_reset_and_say_when() -> None:
    clock = Clock()
    ledger = BudgetLedger(clock)
    policy = Policy(budgets={"demo/add": {"calls": 2, "window": 10}})
    for _ in range(2):
        assert decide(policy, ledger, "process", "demo", "add", {}).kind == "send"
    clock.now += 4
    spent = decide(policy, ledger, "process", "demo", "add", {})
    assert spent.kind == "budget" and spent.rule == "budgets['demo/add']"
    assert spent.retry_after == pytest.approx(6.0) and spent.left == {"calls": 0}
    # Another caller has its own use (the gateway's HTTP sessions).
    assert decide(policy, ledger, "session-2", "demo", "add", {}).kind == "send"
    clock.now += 6
    assert decide(policy, ledger, "process", "demo", "add", {}).kind == "send"


def test_wall_time_and_cost_budgets() -> None:
    clock = Clock()
    ledger = BudgetLedger(clock)
    policy = Policy(budgets={"demo": {"seconds": 1.0}, "*": {"cost": 10}},
                    cost=lambda s, t, a: float(a.get("n", 1)))
    first = decide(policy, ledger, "process", "demo", "slow", {"n": 4})
    assert first.kind == "send" and first.charge is not None
    ledger.finish(first.charge, 0.7)
    second = decide(policy, ledger, "process", "demo", "slow", {"n": 4})
    assert second.kind == "send" and second.charge is not None
    ledger.finish(second.charge, 0.5)
    spent = decide(policy, ledger, "process", "demo", "slow", {"n": 1})
    assert spent.kind == "budget" and spent.rule == "budgets['demo']"
    assert spent.retry_after is None and "does not reset" in spent.reason
    assert spent.left == {"seconds": 0.0}
    costly = decide(policy, ledger, "process", "other", "x", {"n": 3})
    assert costly.kind == "budget" and costly.rule == "budgets['*']"
    assert costly.left == {"cost": 2.0}
    assert decide(policy, ledger, "process", "other", "x", {"n": 2}).kind == "send"


@pytest.mark.timeout(30)
def test_manager_refuses_by_globs_and_arguments(demo: Manager) -> None:
    demo.set_policy(Policy(deny=["demo/fail"], allow=["demo/*"],
                           arguments=[{"tool": "demo/echo", "argument": "text",
                                       "matches": "ok*"}]))
    with pytest.raises(PolicyDenied) as info:
        demo.call_tool("demo", "fail")
    assert info.value.rule == "deny['demo/fail']" and info.value.local
    with pytest.raises(PolicyDenied) as info:
        demo.call_tool("demo", "echo", {"text": "nope"})
    assert info.value.rule == "arguments[0]" and "'text'" in str(info.value)
    assert demo.call_tool("demo", "echo", {"text": "okay"}).text == "okay"


@pytest.mark.timeout(30)
def test_manager_wall_time_budget_counts_the_call(demo: Manager) -> None:
    demo.set_policy(Policy(budgets={"demo/slow": {"seconds": 0.3}}))
    demo.call_tool("demo", "slow", {"seconds": 0.4, "steps": 1})
    with pytest.raises(BudgetExceeded) as info:
        demo.call_tool("demo", "slow", {"seconds": 0.01, "steps": 1})
    exc = info.value
    assert exc.rule == "budgets['demo/slow']" and exc.retry_after is None and exc.local
    assert demo.call_tool("demo", "echo", {"text": "other"}).text == "other"


@pytest.mark.timeout(30)
def test_manager_window_budget_gives_retry_after(demo: Manager) -> None:
    demo.set_policy(Policy(budgets={"*": {"calls": 1, "window": 0.5}}))
    demo.call_tool("demo", "echo", {"text": "1"})
    with pytest.raises(BudgetExceeded) as info:
        demo.call_tool("demo", "add", {"a": 1, "b": 1})
    retry = info.value.retry_after
    assert retry is not None and 0 < retry <= 0.5
    import time
    time.sleep(retry + 0.05)
    assert demo.call_tool("demo", "echo", {"text": "2"}).text == "2"


@pytest.mark.timeout(30)
def test_manager_approval_only_for_the_named_tools(demo: Manager) -> None:
    asked: list[str] = []

    def approve(server: str, tool: str, args: Mapping[str, Any]) -> bool:
        asked.append(tool)
        return False

    demo.set_policy(Policy(require_approval=["demo/add"], approve=approve,
                           budgets={"demo": 1}))
    assert demo.call_tool("demo", "echo", {"text": "free"}).text == "free"
    demo.reset_budgets()
    with pytest.raises(ApprovalRejected) as info:
        demo.call_tool("demo", "add", {"a": 1, "b": 2})
    assert info.value.rule == "require_approval['demo/add']" and asked == ["add"]
    assert demo.call_tool("demo", "echo", {"text": "still"}).text == "still"   # not counted
    demo.set_policy(Policy(require_approval=["demo/add"]))
    with pytest.raises(ApprovalRejected, match="no approve callback"):
        demo.call_tool("demo", "add", {"a": 1, "b": 2})
