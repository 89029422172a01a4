"""Manager policy: allow → budget → approve, counting when sent, gateway codes."""

from __future__ import annotations

import pickle
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from mcpsync.errors import (
    ApprovalRejected,
    BudgetExceeded,
    MCPError,
    PolicyDenied,
    PolicyRefused,
    RemoteError,
    UnknownServer,
)
from mcpsync.manager import Manager
from mcpsync.policy import Policy

from .test_manager import RAW, config, wait_for


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Manager]:
    """One demo server and one raw gateway peer (twice: as gateway and not), for the module."""
    import sys

    path: Path = tmp_path_factory.mktemp("raw") / "raw_server.py"
    path.write_text(RAW, encoding="utf-8")
    raw = [sys.executable, str(path)]
    m = Manager()
    m.start_server(config("demo", [sys.executable, "-m", "mcpsync.demo", "--concurrency",
                                   "8"]))
    m.start_server(config("gw", raw, gateway=True))
    m.start_server(config("plain", raw))
    m.call_tool("gw", "release")
    m.call_tool("plain", "release")
    yield m
    m.close()


@pytest.fixture
def demo(shared: Manager) -> Iterator[Manager]:
    shared.set_policy(None)
    shared.reset_budgets()
    yield shared
    shared.set_policy(None)
    shared.reset_budgets()


class Recorder:
    """allow/approve callables that record the order they ran in."""

    def __init__(self, allow: bool = True, approve: bool = True) -> None:
        self.log: list[tuple[str, str, str, dict[str, Any]]] = []
        self.allow_answer = allow
        self.approve_answer = approve
        self.lock = threading.Lock()

    def allow(self, server: str, tool: str, args: Mapping[str, Any]) -> bool:
        with self.lock:
            self.log.append(("allow", server, tool, dict(args)))
        return self.allow_answer

    def approve(self, server: str, tool: str, args: Mapping[str, Any]) -> bool:
        with self.lock:
            self.log.append(("approve", server, tool, dict(args)))
        return self.approve_answer


def test_policy_checks_its_fields() -> None:
    with pytest.raises(TypeError):
        Policy(allow="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Policy(budgets={"demo": -1})
    with pytest.raises(ValueError):
        Policy(budgets={"demo": 1.5})  # type: ignore[dict-item]
    budgets = {"demo": 1}
    policy = Policy(budgets=budgets)
    budgets["demo"] = 99
    assert policy.budgets == {"demo": 1}      # a private copy
    with pytest.raises(TypeError):
        Manager(policy="strict")  # type: ignore[arg-type]


@pytest.mark.timeout(30)
def test_allow_runs_first_and_refuses_locally(demo: Manager) -> None:
    rec = Recorder(allow=False)
    demo.set_policy(Policy(allow=rec.allow, approve=rec.approve, budgets={"demo": 0}))
    with pytest.raises(PolicyDenied) as info:
        demo.call_tool("demo", "echo", {"text": "secret-ish"})
    exc = info.value
    assert [entry[0] for entry in rec.log] == ["allow"]        # budget and approve never ran
    assert rec.log[0][1:] == ("demo", "echo", {"text": "secret-ish"})
    assert exc.local is True and exc.gateway_code == -32010
    assert exc.server == "demo" and exc.tool == "echo" and exc.rule == "allow"
    assert "'demo'" in str(exc) and "'echo'" in str(exc) and "allow" in str(exc)
    assert "secret-ish" not in str(exc)                        # arguments are never quoted
    assert isinstance(exc, MCPError) and isinstance(exc, PolicyRefused)
    assert not isinstance(exc, RemoteError)                    # never a server's error
    copy = pickle.loads(pickle.dumps(exc))
    assert (copy.tool, copy.rule, copy.local) == ("echo", "allow", True)


@pytest.mark.timeout(30)
def test_budget_runs_before_approve_and_counts_when_sent(demo: Manager) -> None:
    rec = Recorder()
    demo.set_policy(Policy(allow=rec.allow, approve=rec.approve,
                           budgets={"demo/echo": 2, "demo": 3}))
    demo.call_tool("demo", "echo", {"text": "1"})
    assert [e[0] for e in rec.log] == ["allow", "approve"]
    demo.call_tool("demo", "echo", {"text": "2"})
    with pytest.raises(BudgetExceeded) as info:
        demo.call_tool("demo", "echo", {"text": "3"})
    assert [e[0] for e in rec.log][-1] == "allow"              # approve not asked
    exc = info.value
    assert exc.rule == "budgets['demo/echo']" and exc.gateway_code == -32012 and exc.local
    assert exc.tool == "echo" and exc.server == "demo"
    # A failed call counts: it was sent. The server-wide budget of 3 is then spent.
    result = demo.call_tool("demo", "fail")
    assert result.is_error
    with pytest.raises(BudgetExceeded) as info:
        demo.call_tool("demo", "add", {"a": 1, "b": 2})
    assert info.value.rule == "budgets['demo']"
    demo.reset_budgets()
    assert demo.call_tool("demo", "echo", {"text": "again"}).text == "again"


@pytest.mark.timeout(30)
def test_approve_refusal_is_not_counted(demo: Manager) -> None:
    rec = Recorder(approve=False)
    demo.set_policy(Policy(allow=rec.allow, approve=rec.approve, budgets={"demo": 1}))
    for _ in range(3):
        with pytest.raises(ApprovalRejected) as info:
            demo.call_tool("demo", "echo", {"text": "x"})
    exc = info.value
    assert exc.rule == "approve" and exc.gateway_code == -32011 and exc.local
    assert [e[0] for e in rec.log] == ["allow", "approve"] * 3
    rec.approve_answer = True
    demo.call_tool("demo", "echo", {"text": "x"})              # the budget of 1 is still free
    with pytest.raises(BudgetExceeded):
        demo.call_tool("demo", "echo", {"text": "x"})


@pytest.mark.timeout(30)
def test_approve_exception_propagates_and_releases(demo: Manager) -> None:
    def approve(server: str, tool: str, args: Mapping[str, Any]) -> bool:
        raise RuntimeError("the approval UI crashed")

    demo.set_policy(Policy(approve=approve, budgets={"demo": 1}))
    with pytest.raises(RuntimeError):
        demo.call_tool("demo", "echo", {"text": "x"})
    demo.set_policy(Policy(budgets={"demo": 1}))
    demo.call_tool("demo", "echo", {"text": "x"})              # nothing was counted


def test_unknown_server_comes_before_the_policy(demo: Manager) -> None:
    rec = Recorder()
    demo.set_policy(Policy(allow=rec.allow))
    with pytest.raises(UnknownServer):
        demo.call_tool("nope", "echo")
    assert rec.log == []


@pytest.mark.timeout(60)
def test_budget_under_twenty_threads(demo: Manager) -> None:
    approvals = threading.Semaphore(0)
    asked: list[int] = []
    lock = threading.Lock()

    def approve(server: str, tool: str, args: Mapping[str, Any]) -> bool:
        with lock:
            asked.append(int(args["text"]))
        approvals.acquire()            # blocks like a human would, until the test releases
        return int(args["text"]) % 2 == 0

    demo.set_policy(Policy(approve=approve, budgets={"demo/echo": 6}))
    outcomes: dict[int, Any] = {}

    def call(n: int) -> None:
        try:
            outcomes[n] = demo.call_tool("demo", "echo", {"text": str(n)}).text
        except MCPError as exc:
            outcomes[n] = type(exc).__name__

    threads = [threading.Thread(target=call, args=(n,)) for n in range(20)]
    for t in threads:
        t.start()
    # While 6 calls wait for approval (budget reserved), the other 14 are refused at once.
    def settled() -> bool:
        with lock:
            return len(asked) == 6 and \
                sum(v == "BudgetExceeded" for v in outcomes.values()) == 14

    assert wait_for(settled)
    with lock:
        assert len(asked) == 6
    for _ in range(6):
        approvals.release()
    for t in threads:
        t.join(10)
    assert len(outcomes) == 20
    approved = [n for n in asked if n % 2 == 0]
    rejected = [n for n in asked if n % 2 == 1]
    assert sorted(n for n, v in outcomes.items() if v == str(n)) == sorted(approved)
    assert sum(v == "ApprovalRejected" for v in outcomes.values()) == len(rejected)
    # Rejections gave their reservations back: exactly that many calls are left.
    demo.set_policy(Policy(budgets={"demo/echo": 6}))
    sent = 0
    while True:
        try:
            demo.call_tool("demo", "echo", {"text": "more"})
        except BudgetExceeded:
            break
        sent += 1
    assert sent == len(rejected)


@pytest.mark.timeout(60)
def test_many_threads_never_exceed_a_budget(demo: Manager) -> None:
    demo.set_policy(Policy(budgets={"demo": 7}))
    results: list[str] = []
    lock = threading.Lock()

    def call(n: int) -> None:
        try:
            demo.call_tool("demo", "echo", {"text": str(n)})
            outcome = "sent"
        except BudgetExceeded:
            outcome = "refused"
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=call, args=(n,)) for n in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert sorted(results) == ["refused"] * 13 + ["sent"] * 7


@pytest.mark.timeout(30)
def test_gateway_codes_map_only_for_gateway_servers(demo: Manager) -> None:
    with pytest.raises(ApprovalRejected) as info:
        demo.call_tool("gw", "gated", {"x": 1})
    exc = info.value
    assert exc.local is False and exc.gateway_code == -32011
    assert exc.server == "gw" and exc.tool == "gated"
    assert "approval rejected by the operator" in exc.rule
    assert isinstance(exc.__cause__, RemoteError) and exc.__cause__.code == -32011
    with pytest.raises(RemoteError) as plain:
        demo.call_tool("plain", "gated")
    assert plain.value.code == -32011
    assert not isinstance(plain.value, PolicyRefused)
    # Other codes from a gateway stay what they are.
    assert demo.call_tool("gw", "hello").text == "called hello"


def test_gateway_mapping_of_each_code() -> None:
    from mcpsync.policy import gateway_refusal

    for code, cls in ((-32010, PolicyDenied), (-32011, ApprovalRejected),
                      (-32012, BudgetExceeded)):
        refusal = gateway_refusal(RemoteError("x", code=code, remote_message="why"), "s", "t")
        assert type(refusal) is cls and refusal is not None and refusal.local is False
        assert refusal.rule == "why" and refusal.tool == "t" and refusal.server == "s"
    assert gateway_refusal(RemoteError("x", code=-32013), "s", "t") is None


@pytest.mark.timeout(30)
def test_a_refusal_never_reaches_the_server(tmp_path: Path) -> None:
    """Refused calls of the helper's ``crash`` tool: had one been sent, the server would be
    gone. ``approve`` runs on the caller's thread."""
    from .test_manager import write_helper

    helper = write_helper(tmp_path)
    threads: list[str] = []

    def approve(server: str, tool: str, args: Mapping[str, Any]) -> bool:
        threads.append(threading.current_thread().name)
        return False

    with Manager() as m:
        m.start_server(config("h", helper))
        pid = m.client("h").pid
        for policy, error in ((Policy(allow=lambda s, t, a: t != "crash"), PolicyDenied),
                              (Policy(budgets={"h/crash": 0}), BudgetExceeded),
                              (Policy(approve=approve), ApprovalRejected)):
            m.set_policy(policy)
            with pytest.raises(error) as info:
                m.call_tool("h", "crash", {"code": 5})
            assert info.value.local is True and not isinstance(info.value, RemoteError)
        assert threads == [threading.current_thread().name]
        m.set_policy(None)
        assert m.server_started("h") and m.client("h").pid == pid
        assert m.call_tool("h", "pid").text == str(pid)


@pytest.mark.timeout(30)
def test_a_call_approved_after_a_restart_goes_to_the_new_server(tmp_path: Path) -> None:
    """approve() may wait for a human; if the server was restarted meanwhile, the approved
    call reaches the server running now, not the stopped one."""
    from .test_manager import write_helper

    helper = write_helper(tmp_path)
    asked, answer = threading.Event(), threading.Event()

    def approve(server: str, tool: str, args: Mapping[str, Any]) -> bool:
        asked.set()
        return answer.wait(20)

    with Manager(policy=Policy(approve=approve)) as m:
        m.start_server(config("h", helper))
        old = m.client("h").pid
        got: list[Any] = []
        caller = threading.Thread(target=lambda: got.append(m.call_tool("h", "pid").text))
        caller.start()
        assert asked.wait(10)
        m.start_server(config("h", helper))          # restarted while the human decides
        new = m.client("h").pid
        answer.set()
        caller.join(20)
        assert new != old and got == [str(new)]
