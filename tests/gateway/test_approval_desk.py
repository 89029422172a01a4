"""The approval desk with a callback approver: real threads, real clocks.

Approve, reject, time out, no approver, a full desk, progress, a digest that does not match,
arguments changed while held, a ticket submitted twice, and close while held.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import pytest

from mcpsync.gateway._guard._approval import (
    ApprovalDesk,
    HeldCall,
    Verdict,
    call_digest,
    from_policy_callback,
)

RULE = "approval[files__delete*]"


class Outcome:
    """Collects a submit's verdict and progress; ``wait()`` returns the verdict."""

    def __init__(self) -> None:
        self.verdicts: queue.Queue[tuple[Verdict, str]] = queue.Queue()
        self.progress: list[tuple[float, str]] = []
        self.calls = 0

    def on_done(self, verdict: Verdict) -> None:
        self.calls += 1
        self.verdicts.put((verdict, threading.current_thread().name))

    def on_progress(self, elapsed: float, message: str) -> None:
        self.progress.append((elapsed, message))

    def wait(self, timeout: float = 10.0) -> tuple[Verdict, str]:
        return self.verdicts.get(timeout=timeout)


def submit(desk: ApprovalDesk, call: HeldCall) -> Outcome:
    out = Outcome()
    desk.submit(call, RULE, on_progress=out.on_progress, on_done=out.on_done)
    return out


def test_the_digest_is_canonical_json_of_upstream_tool_and_arguments() -> None:
    import hashlib
    import json
    args = {"b": [1, "é"], "a": {"y": None, "x": True}}
    expected = hashlib.sha256(json.dumps(["files", "delete", args], sort_keys=True,
                                         separators=(",", ":"),
                                         ensure_ascii=False).encode()).hexdigest()
    assert call_digest("files", "delete", args) == expected
    assert call_digest("files", "delete", {"a": {"x": True, "y": None}, "b": [1, "é"]}) \
        == expected
    assert call_digest("files", "delete", {**args, "b": [1, "e"]}) != expected
    assert call_digest("other", "delete", args) != expected
    with pytest.raises(ValueError, match="not JSON"):
        call_digest("files", "delete", {"x": float("nan")})


def test_an_approval_releases_the_call_from_a_desk_thread() -> None:
    seen: list[HeldCall] = []

    def approve(call: HeldCall) -> bool:
        seen.append(call)
        return True

    call = HeldCall.of("files", "delete", {"path": "/tmp/x"})
    with ApprovalDesk(approve) as desk:
        out = submit(desk, call)
        verdict, thread = out.wait()
    assert verdict.approved is True
    assert verdict.reason == "approved by the approval callback"
    assert verdict.rule == RULE
    assert verdict.digest == call.digest and verdict.ticket == call.ticket
    assert thread.startswith("mcpsync-gateway-approval-")
    assert seen == [call]
    assert verdict.covers("files", "delete", {"path": "/tmp/x"})
    assert not verdict.covers("files", "delete", {"path": "/etc/passwd"})


def test_a_rejection_and_a_verdict_with_its_own_reason() -> None:
    answers: list[bool | Verdict] = [False, Verdict(False, "not on a Friday", "")]
    with ApprovalDesk(lambda call: answers.pop(0)) as desk:
        first = submit(desk, HeldCall.of("files", "delete", {"path": "a"})).wait()[0]
        second = submit(desk, HeldCall.of("files", "delete", {"path": "b"})).wait()[0]
    assert (first.approved, first.reason) == (False, "rejected by the approval callback")
    assert (second.approved, second.reason, second.rule) == (False, "not on a Friday", RULE)
    assert not first.covers("files", "delete", {"path": "a"})


def test_no_approver_refuses_at_once_on_the_callers_thread() -> None:
    desk = ApprovalDesk(None)
    out = submit(desk, HeldCall.of("files", "delete", {}))
    verdict, thread = out.wait(timeout=0)
    assert thread == threading.current_thread().name
    assert not verdict.approved
    assert verdict.reason == "files/delete needs approval and no approver is configured"
    desk.close()


def test_no_decision_within_the_hold_time_is_a_refusal_with_progress() -> None:
    release = threading.Event()

    def slow(call: HeldCall) -> bool:
        release.wait(10)
        return True   # too late: must be ignored

    desk = ApprovalDesk(slow, hold_seconds=0.5, progress_every=0.12)
    started = time.monotonic()
    out = submit(desk, HeldCall.of("files", "delete", {"path": "a"}))
    verdict, _ = out.wait()
    took = time.monotonic() - started
    release.set()
    desk.close()
    assert not verdict.approved
    assert verdict.reason == "no decision within 0.5 s"
    assert 0.45 <= took < 3.0
    assert 3 <= len(out.progress) <= 4, out.progress
    elapsed = [e for e, _ in out.progress]
    assert elapsed == sorted(elapsed) and all(0.1 <= e < 0.5 for e in elapsed)
    assert "waiting for approval of files/delete" in out.progress[0][1]
    assert out.calls == 1


def test_an_approval_cannot_release_a_call_whose_arguments_changed_while_held() -> None:
    arguments: dict[str, Any] = {"path": "/tmp/x"}
    call = HeldCall.of("files", "delete", arguments)
    go = threading.Event()

    def approve(held: HeldCall) -> bool:
        go.wait(5)
        return True

    with ApprovalDesk(approve) as desk:
        out = submit(desk, call)
        arguments["path"] = "/"        # the caller's dict, mutated after it was held
        go.set()
        verdict, _ = out.wait()
    assert not verdict.approved
    assert "arguments changed while it was held" in verdict.reason


def test_a_digest_that_does_not_match_the_arguments_is_refused() -> None:
    forged = HeldCall("files", "delete", {"path": "/"},
                      call_digest("files", "delete", {"path": "/tmp/x"}), "process")
    with ApprovalDesk(lambda call: True) as desk:
        verdict, _ = submit(desk, forged).wait()
    assert not verdict.approved and "digest does not match" in verdict.reason


def test_each_held_call_is_its_own_ticket_and_is_decided_once() -> None:
    asked: list[str] = []

    def approve_first_only(call: HeldCall) -> bool:
        asked.append(call.ticket)
        return len(asked) == 1

    first = HeldCall.of("files", "delete", {"path": "a"})
    second = HeldCall.of("files", "delete", {"path": "a"})
    assert first.digest == second.digest and first.ticket != second.ticket
    with ApprovalDesk(approve_first_only) as desk:
        one = submit(desk, first).wait()[0]
        two = submit(desk, second).wait()[0]
        again = submit(desk, first).wait()[0]     # the approved ticket, replayed
    assert one.approved and not two.approved
    assert not again.approved and "submitted before" in again.reason
    assert asked == [first.ticket, second.ticket]


def test_the_desk_holds_at_most_max_held_calls() -> None:
    release = threading.Event()
    desk = ApprovalDesk(lambda call: release.wait(10), max_held=2)
    outs = [submit(desk, HeldCall.of("files", "delete", {"n": n})) for n in range(3)]
    refused, thread = outs[2].wait(timeout=1)
    assert not refused.approved and "2 calls are already waiting" in refused.reason
    assert thread == threading.current_thread().name
    assert len(desk.held()) == 2
    release.set()
    assert all(o.wait()[0].approved for o in outs[:2])
    desk.close()


def test_close_refuses_what_is_held_and_joins_the_threads() -> None:
    release = threading.Event()
    desk = ApprovalDesk(lambda call: release.wait(10), hold_seconds=30)
    out = submit(desk, HeldCall.of("files", "delete", {}))
    deadline = time.monotonic() + 5
    while not desk.held() and time.monotonic() < deadline:
        time.sleep(0.01)
    release.set()   # the callback returns once asked; close must not wait 30 s anyway
    started = time.monotonic()
    desk.close()
    verdict, _ = out.wait(timeout=0)
    assert time.monotonic() - started < 5
    assert out.calls == 1
    after = submit(desk, HeldCall.of("files", "delete", {})).wait(timeout=0)[0]
    assert not after.approved and "closing" in after.reason
    assert isinstance(verdict, Verdict)


def test_close_while_a_call_is_held_answers_it_as_refused() -> None:
    block = threading.Event()
    desk = ApprovalDesk(lambda call: block.wait(3), hold_seconds=30)
    out = submit(desk, HeldCall.of("files", "delete", {}))
    while not desk.held():
        time.sleep(0.01)
    desk.close(timeout=0.2)   # the callback is still blocked: its thread is left to end
    verdict, _ = out.wait(timeout=0)
    block.set()
    assert not verdict.approved
    assert verdict.reason == "the gateway closed while the call was held"


def test_a_callback_that_raises_or_answers_nonsense_is_a_refusal() -> None:
    def boom(call: HeldCall) -> bool:
        raise RuntimeError("secret-ish detail")

    with ApprovalDesk(boom) as desk:
        verdict = submit(desk, HeldCall.of("files", "delete", {})).wait()[0]
    assert not verdict.approved and "RuntimeError" in verdict.reason
    assert "secret-ish" not in verdict.reason
    with ApprovalDesk(lambda call: "yes") as desk:  # type: ignore[arg-type,return-value]
        verdict = submit(desk, HeldCall.of("files", "delete", {})).wait()[0]
    assert not verdict.approved and "not True or False" in verdict.reason


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="hold_seconds"):
        ApprovalDesk(None, hold_seconds=0)
    with pytest.raises(ValueError, match="max_held"):
        ApprovalDesk(None, max_held=0)


def test_a_policy_style_callback_decides_with_upstream_tool_and_arguments() -> None:
    seen: list[tuple[str, str, dict[str, Any]]] = []

    def approve(server: str, tool: str, args: dict[str, Any]) -> bool:
        seen.append((server, tool, args))
        return args.get("path") == "ok"

    with ApprovalDesk(from_policy_callback(approve)) as desk:
        yes = submit(desk, HeldCall.of("files", "delete", {"path": "ok"})).wait()[0]
        no = submit(desk, HeldCall.of("files", "delete", {"path": "no"})).wait()[0]
    assert yes.approved and not no.approved
    assert seen == [("files", "delete", {"path": "ok"}), ("files", "delete", {"path": "no"})]


def test_a_held_calls_repr_names_the_arguments_without_their_values() -> None:
    call = HeldCall.of("files", "login", {"user": "ann", "password": "hunter2"})
    text = repr(call)
    assert "hunter2" not in text and "ann" not in text
    assert "password" in text and "'files'" in text and call.digest[:12] in text
