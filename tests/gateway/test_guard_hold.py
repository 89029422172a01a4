"""Held calls in the gateway, through the library (``Gateway(config, policy=...)``): the
call waits for the approver without blocking the host's reader or other calls, progress
reaches a host that sent a ``progressToken``, and a rejection answers -32011 with the
approver's reason.

The approval desk is its own module, built separately; here a small stand-in with the same
interface (``ApprovalDesk``, ``HeldCall``, ``call_digest``) decides on its own thread, so
what is tested is the guard's side: what it hands the desk and what it does with the verdict.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from gateway.test_guard_command import INIT, guarded_config
from mcpsync.gateway import Gateway
from mcpsync.policy import Policy

pytestmark = pytest.mark.timeout(60)

DEMO = [sys.executable, "-m", "mcpsync.demo", "--concurrency", "4"]


@dataclass(frozen=True)
class HeldCall:
    upstream: str
    tool: str
    arguments: Mapping[str, Any]
    digest: str
    caller: str


@dataclass(frozen=True)
class Verdict:
    approved: bool
    reason: str
    rule: str


def call_digest(upstream: str, tool: str, arguments: Mapping[str, Any]) -> str:
    text = json.dumps([upstream, tool, arguments], sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


class StandInDesk:
    """Decides each held call on its own thread, with progress every 50 ms meanwhile."""

    made: list[StandInDesk] = []

    def __init__(self, approver: Any, *, hold_seconds: float = 25.0,
                 progress_every: float = 5.0) -> None:
        self.approver = approver
        self.hold_seconds = hold_seconds
        self.submitted: list[tuple[HeldCall, str]] = []
        self.threads: list[threading.Thread] = []
        StandInDesk.made.append(self)

    def submit(self, call: HeldCall, rule: str, *,
               on_progress: Callable[[float, str], None] | None,
               on_done: Callable[[Verdict], None]) -> None:
        self.submitted.append((call, rule))
        if self.approver is None:
            on_done(Verdict(False, "no approver is configured", rule))
            return
        box: list[bool] = []
        decider = threading.Thread(target=lambda: box.append(bool(self.approver(call))),
                                   name="test-standin-approver", daemon=True)
        decider.start()

        def hold() -> None:
            started = time.monotonic()
            while decider.is_alive():
                decider.join(0.05)
                if decider.is_alive() and on_progress is not None:
                    on_progress(time.monotonic() - started, "waiting for approval")
            approved = bool(box and box[0])
            on_done(Verdict(approved, "approved by the test" if approved
                            else "rejected by the test", rule))
        holder = threading.Thread(target=hold, name="test-standin-hold", daemon=True)
        holder.start()
        self.threads += [decider, holder]

    def close(self) -> None:
        for thread in self.threads:
            thread.join(5)


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[StandInDesk]]:
    module = types.ModuleType("mcpsync.gateway._guard._approval")
    module.ApprovalDesk = StandInDesk   # type: ignore[attr-defined]
    module.HeldCall = HeldCall          # type: ignore[attr-defined]
    module.call_digest = call_digest    # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "mcpsync.gateway._guard._approval", module)
    StandInDesk.made.clear()
    yield StandInDesk


class PipeHost:
    """A host for an in-process gateway: two pipes, the gateway serving on a thread."""

    def __init__(self, gateway: Gateway) -> None:
        host_r, self._to_gw = os.pipe()
        self._from_gw, gw_w = os.pipe()
        self._gw_in: BinaryIO = os.fdopen(host_r, "rb")
        self._gw_out: BinaryIO = os.fdopen(gw_w, "wb")
        self._reader = os.fdopen(self._from_gw, "rb")
        self.gateway = gateway
        self.thread = threading.Thread(target=gateway.serve_stdio,
                                       args=(self._gw_in, self._gw_out),
                                       name="test-gateway-serve", daemon=True)
        self.thread.start()

    def send(self, frame: str) -> None:
        os.write(self._to_gw, frame.encode() + b"\n")

    def recv(self) -> Any:
        line = self._reader.readline()
        assert line, "the gateway closed its output"
        return json.loads(line)

    def close(self) -> None:
        os.close(self._to_gw)
        self.thread.join(15)
        assert not self.thread.is_alive()
        for stream in (self._gw_in, self._gw_out, self._reader):
            stream.close()


def _call(i: int, tool: str, args: dict[str, Any], token: Any = None) -> str:
    params: dict[str, Any] = {"name": tool, "arguments": args}
    if token is not None:
        params["_meta"] = {"progressToken": token}
    return json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": params})


def _serve(tmp_path: Path, policy: Policy) -> PipeHost:
    host = PipeHost(Gateway(guarded_config(tmp_path, {"demo": DEMO}, {}), policy=policy))
    host.send(INIT)
    assert host.recv()["id"] == 0
    host.send('{"jsonrpc":"2.0","method":"notifications/initialized"}')
    return host


def test_a_held_call_waits_without_blocking_others_and_reports_progress(
        tmp_path: Path, stand_in: type[StandInDesk]) -> None:
    decide = threading.Event()
    asked: list[tuple[str, str, dict[str, Any]]] = []

    def approve(server: str, tool: str, args: Mapping[str, Any]) -> bool:
        asked.append((server, tool, dict(args)))
        return decide.wait(20)

    host = _serve(tmp_path, Policy(require_approval=["demo/add"], approve=approve,
                                   budgets={"demo/add": 1}))
    try:
        host.send(_call(1, "add", {"a": 2, "b": 3}, token="tok-1"))
        host.send(_call(2, "echo", {"text": "meanwhile"}))
        seen = [host.recv() for _ in range(3)]
        # The echo was answered while the add is held; progress came on the host's token.
        answers = [m for m in seen if "id" in m]
        assert answers and answers[0]["id"] == 2
        assert answers[0]["result"]["content"][0]["text"] == "meanwhile"
        progress = [m for m in seen if m.get("method") == "notifications/progress"]
        assert progress and progress[0]["params"]["progressToken"] == "tok-1"
        assert progress[0]["params"]["message"] == "waiting for approval"
        desk = stand_in.made[0]
        call, rule = desk.submitted[0]
        assert rule == "require_approval['demo/add']"
        assert (call.upstream, call.tool, dict(call.arguments), call.caller) == (
            "demo", "add", {"a": 2, "b": 3}, "process")
        assert call.digest == call_digest("demo", "add", {"a": 2, "b": 3})
        decide.set()
        while True:
            message = host.recv()
            if message.get("id") == 1:
                break
            assert message["method"] == "notifications/progress"
        assert message["result"]["structuredContent"] == {"sum": 5}
        assert asked == [("demo", "add", {"a": 2, "b": 3})]
        # The approved call was counted: the tool's budget of 1 is now spent.
        host.send(_call(3, "add", {"a": 1, "b": 1}))
        spent = host.recv()
        assert spent["error"]["code"] == -32012
        assert spent["error"]["data"]["rule"] == "budgets['demo/add']"
    finally:
        host.close()


def test_a_rejected_call_is_answered_32011_and_not_counted(
        tmp_path: Path, stand_in: type[StandInDesk]) -> None:
    host = _serve(tmp_path, Policy(require_approval=["*/add"],
                                   approve=lambda s, t, a: a.get("a") == 1,
                                   budgets={"demo/add": 1}))
    try:
        host.send(_call(1, "add", {"a": 5, "b": 5}))
        rejected = host.recv()
        assert rejected["id"] == 1 and rejected["error"]["code"] == -32011
        assert rejected["error"]["data"] == {
            "reason": "rejected by the test", "rule": "require_approval['*/add']",
            "upstream": "demo", "tool": "add"}
        host.send(_call(2, "add", {"a": 1, "b": 5}))     # the budget of 1 is still free
        assert host.recv()["result"]["structuredContent"] == {"sum": 6}
    finally:
        host.close()


def test_no_approver_means_32011_at_once(tmp_path: Path,
                                         stand_in: type[StandInDesk]) -> None:
    host = _serve(tmp_path, Policy(require_approval=["demo/echo"]))
    try:
        host.send(_call(1, "echo", {"text": "x"}))
        answer = host.recv()
        assert answer["error"]["code"] == -32011
        assert answer["error"]["data"]["reason"] == "no approver is configured"
        host.send(_call(2, "add", {"a": 1, "b": 1}))
        assert host.recv()["result"]["structuredContent"] == {"sum": 2}
    finally:
        host.close()
