"""The command-hook approver with real subprocesses (small Python scripts written per test).

Exit 0 approves, anything else rejects; the hook gets the digest as its last argument and a
redacted JSON summary on stdin; its stdout never reaches ours; a hook still running at the
hold time is killed with its children.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import time
from pathlib import Path

import pytest

from mcpsync.gateway._guard._approval import ApprovalDesk, HeldCall, Verdict
from mcpsync.gateway._guard._approvers import CommandApprover

RULE = "approval[files__*]"


def hook(tmp_path: Path, body: str) -> list[str]:
    script = tmp_path / "hook.py"
    script.write_text("import json, os, sys, time\n" + body, encoding="utf-8")
    return [sys.executable, str(script)]


def decide(approver: CommandApprover, call: HeldCall, hold: float = 20) -> Verdict:
    out: queue.Queue[Verdict] = queue.Queue()
    with ApprovalDesk(approver, hold_seconds=hold) as desk:
        desk.submit(call, RULE, on_progress=None, on_done=out.put)
        return out.get(timeout=hold + 10)


def test_exit_0_approves_and_the_hook_sees_digest_and_redacted_summary(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    seen = tmp_path / "seen.json"
    argv = hook(tmp_path, f"""
summary = json.load(sys.stdin)
json.dump({{"argv": sys.argv[1:], "summary": summary, "env": sorted(os.environ)}},
          open({str(seen)!r}, "w"))
print("this must not reach the MCP stream")
sys.exit(0)
""")
    call = HeldCall.of("files", "delete", {"path": "/tmp/x", "password": "hunter2"})
    os.environ["MCPSYNC_TEST_SECRET_ENV"] = "do-not-pass"
    try:
        verdict = decide(CommandApprover(argv), call)
    finally:
        del os.environ["MCPSYNC_TEST_SECRET_ENV"]
    assert verdict.approved and verdict.reason == "approved by the command hook"
    got = json.loads(seen.read_text())
    assert got["argv"] == [call.digest]
    assert got["summary"]["upstream"] == "files" and got["summary"]["tool"] == "delete"
    assert got["summary"]["digest"] == call.digest
    assert got["summary"]["arguments"] == {"path": "/tmp/x", "password": "[redacted]"}
    assert "MCPSYNC_TEST_SECRET_ENV" not in got["env"]
    assert "must not reach" not in capfd.readouterr().out


def test_a_nonzero_exit_rejects_naming_the_status(tmp_path: Path) -> None:
    verdict = decide(CommandApprover(hook(tmp_path, "sys.stdin.read(); sys.exit(3)")),
                     HeldCall.of("files", "delete", {}))
    assert not verdict.approved
    assert verdict.reason == "rejected by the command hook (exit status 3)"


def test_a_hook_that_does_not_read_stdin_still_decides(tmp_path: Path) -> None:
    verdict = decide(CommandApprover(hook(tmp_path, "sys.exit(0)")),
                     HeldCall.of("files", "delete", {"blob": "x" * 200_000}))
    assert verdict.approved


def test_a_hook_still_running_at_the_hold_time_is_killed_with_its_children(
        tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    argv = hook(tmp_path, f"""
import subprocess
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
open({str(pids)!r}, "w").write(f"{{os.getpid()}} {{child.pid}}")
time.sleep(60)
""")
    started = time.monotonic()
    verdict = decide(CommandApprover(argv), HeldCall.of("files", "delete", {}), hold=1.5)
    assert not verdict.approved and verdict.reason == "no decision within 1.5 s"
    assert time.monotonic() - started < 8
    hook_pid, child_pid = (int(p) for p in pids.read_text().split())
    deadline = time.monotonic() + 5
    while _alive(child_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child_pid), "the hook's child outlived the hold"
    assert not _alive(hook_pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:   # a zombie (killed, not yet reaped by init) counts as gone
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_hook_that_cannot_start_rejects_readably(tmp_path: Path) -> None:
    verdict = decide(CommandApprover([str(tmp_path / "missing-hook")]),
                     HeldCall.of("files", "delete", {}))
    assert not verdict.approved and "could not start" in verdict.reason
    assert "missing-hook" in verdict.reason


def test_long_values_are_cut_in_the_summary_without_half_a_secret(tmp_path: Path) -> None:
    seen = tmp_path / "seen.json"
    argv = hook(tmp_path, f"open({str(seen)!r}, 'w').write(sys.stdin.read())")
    secret = "ghp_" + "A1b2C3d4E5" * 4
    blob = "word " * 199 + "abc" + secret + " more" * 40_000   # the cut falls in the token
    call = HeldCall.of("files", "write", {"blob": blob})
    started = time.monotonic()
    assert decide(CommandApprover(argv), call).approved
    assert time.monotonic() - started < 5
    shown = json.loads(seen.read_text())["arguments"]["blob"]
    assert shown.endswith(f"... ({len(blob)} characters in all)")
    assert len(shown) < 1100 and "ghp_" not in shown and "A1b2" not in shown
