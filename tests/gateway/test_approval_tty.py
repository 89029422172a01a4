"""The terminal approver against a real pseudo-terminal: the test types the answer.

The approver is handed the pty's slave path in place of ``/dev/tty`` and opens it itself,
as it opens the controlling terminal in the command; the test reads the prompt from the
master side and types ``y`` or ``n`` there, like a person at the keyboard.
"""

from __future__ import annotations

import os
import queue
import select
import time
from collections.abc import Iterator

import pytest

from mcpsync.gateway._guard._approval import ApprovalDesk, HeldCall, Verdict
from mcpsync.gateway._guard._approvers import TtyApprover

RULE = "approval[files__*]"
SECRET = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"


class Pty:
    def __init__(self) -> None:
        self.master, self.slave = os.openpty()
        self.path = os.ttyname(self.slave)
        self.seen = b""

    def read_until(self, marker: bytes, timeout: float = 10.0) -> str:
        deadline = time.monotonic() + timeout
        while marker not in self.seen:
            left = deadline - time.monotonic()
            assert left > 0, f"no {marker!r} on the terminal; it shows {self.seen!r}"
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                self.seen += os.read(self.master, 4096)
        return self.seen.decode("utf-8", "replace")

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def close(self) -> None:
        os.close(self.master)
        os.close(self.slave)


@pytest.fixture
def pty() -> Iterator[Pty]:
    terminal = Pty()
    yield terminal
    terminal.close()


def held(desk: ApprovalDesk, call: HeldCall) -> queue.Queue[Verdict]:
    out: queue.Queue[Verdict] = queue.Queue()
    desk.submit(call, RULE, on_progress=None, on_done=out.put)
    return out


def test_typing_y_approves_and_the_summary_is_redacted(pty: Pty) -> None:
    call = HeldCall.of("files", "delete", {"path": "/tmp/x", "token": "hunter2",
                                           "note": f"use {SECRET}"})
    with ApprovalDesk(TtyApprover(pty.path)) as desk:
        out = held(desk, call)
        screen = pty.read_until(b"[y/N] ")
        pty.type("y\n")
        verdict = out.get(timeout=10)
    assert verdict.approved and verdict.reason == f"approved on {pty.path}"
    for shown in ("upstream:  files", "tool:      delete", "/tmp/x", call.digest):
        assert shown in screen
    assert "hunter2" not in screen and SECRET not in screen
    assert "[redacted]" in screen


@pytest.mark.parametrize("answer", ["n\n", "\n", "yes please\n"])
def test_anything_but_y_rejects(pty: Pty, answer: str) -> None:
    with ApprovalDesk(TtyApprover(pty.path)) as desk:
        out = held(desk, HeldCall.of("files", "delete", {"path": "a"}))
        pty.read_until(b"[y/N] ")
        pty.type(answer)
        verdict = out.get(timeout=10)
    assert not verdict.approved and verdict.reason == f"rejected on {pty.path}"
    assert "rejected" in pty.read_until(b"rejected")


def test_no_answer_in_time_refuses_and_says_so_on_the_terminal(pty: Pty) -> None:
    with ApprovalDesk(TtyApprover(pty.path), hold_seconds=0.6) as desk:
        out = held(desk, HeldCall.of("files", "delete", {"path": "a"}))
        pty.read_until(b"[y/N] ")
        verdict = out.get(timeout=10)
        assert "refused" in pty.read_until(b"refused")
    assert not verdict.approved and verdict.reason == "no decision within 0.6 s"


def test_questions_take_turns_and_y_answers_the_one_shown(pty: Pty) -> None:
    first = HeldCall.of("files", "delete", {"path": "first"})
    second = HeldCall.of("files", "delete", {"path": "second"})
    with ApprovalDesk(TtyApprover(pty.path)) as desk:
        one = held(desk, first)
        pty.read_until(b"[y/N] ")
        two = held(desk, second)
        time.sleep(0.3)
        assert "second" not in pty.seen.decode()   # not shown while the first waits
        pty.type("n\n")
        assert not one.get(timeout=10).approved
        pty.read_until(b'"second"')
        pty.read_until(b"[y/N] ", timeout=10)
        pty.type("y\n")
        assert two.get(timeout=10).approved


def test_a_missing_terminal_fails_at_start_naming_it(tmp_path: object) -> None:
    with pytest.raises(OSError, match="cannot open /nonexistent/tty"):
        ApprovalDesk(TtyApprover("/nonexistent/tty"))


def test_keys_typed_before_the_question_do_not_answer_it(pty: Pty) -> None:
    pty.type("y\n")   # typed ahead, before any call was held
    with ApprovalDesk(TtyApprover(pty.path), hold_seconds=0.8) as desk:
        out = held(desk, HeldCall.of("files", "delete", {"path": "a"}))
        pty.read_until(b"[y/N] ")
        verdict = out.get(timeout=10)
    assert not verdict.approved and verdict.reason == "no decision within 0.8 s"
