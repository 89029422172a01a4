"""Manager fork safety: a forked child gets UsedAfterFork; the parent's servers live on."""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
from test_manager import DictResolver, config, write_helper

from mcpsync.errors import UsedAfterFork
from mcpsync.manager import Manager

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork() does not exist here")

# Exit codes of the child: each names the first check that failed.
OK, NO_ERROR, WRONG_MESSAGE, CLOSE_RAISED, HOOK_RAISED = 0, 11, 12, 13, 14


def _child(manager: Manager) -> int:
    """What runs in the forked child; returns its exit code."""
    parent = os.getppid()
    calls: list[Callable[[], object]] = [lambda: manager.call_tool("demo", "echo", {"text": "x"}),
             lambda: manager.tools(), lambda: manager.server_started("demo"),
             lambda: manager.start_all(), lambda: manager.stop_server("demo"),
             lambda: manager.set_notification_handler(None), lambda: manager.__enter__(),
             lambda: manager.server_stderr("demo"), lambda: manager.reset_budgets()]
    for call in calls:
        try:
            call()
        except UsedAfterFork as exc:
            expected = (f"this Manager belongs to process {parent}; create a new one in the "
                        "child")
            if str(exc) != expected:
                return WRONG_MESSAGE
        else:
            return NO_ERROR
    try:
        manager.close()          # only drops references
        manager.close()
    except BaseException:
        return CLOSE_RAISED
    try:
        import mcpsync.manager as module

        module._close_at_exit()   # the atexit hook: nothing in a child
    except BaseException:
        return HOOK_RAISED
    return OK


@pytest.mark.timeout(60)
def test_fork_with_a_live_manager(tmp_path: Path, demo_argv: list[str]) -> None:
    helper = write_helper(tmp_path)
    with Manager(DictResolver({"ref": {"K": "v"}})) as manager:
        manager.start_server(config("demo", demo_argv))
        manager.start_server(config("sec", helper, secret_ref="ref",
                                    env={"SECRET_PATH": "{{secret_file}}"}))
        secret = manager.call_tool("sec", "getenv", {"name": "SECRET_PATH"}).text
        demo_pid = manager.client("demo").pid
        with warnings.catch_warnings():
            # Python warns that forking a multi-threaded process may deadlock the child; the
            # child here touches no lock a parent thread could hold.
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:   # pragma: no cover - the child; its result is the exit code
            code = 99
            try:
                code = _child(manager)
            finally:
                sys.stdout.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == OK
        # The parent's servers were not signalled, their pipes not closed, the secret kept.
        assert manager.call_tool("demo", "echo", {"text": "still here"}).text == "still here"
        assert manager.client("demo").pid == demo_pid
        assert manager.server_started("sec") and os.path.exists(secret)
        assert manager.call_tool("sec", "readfile", {"path": secret}).text == "K=v\n"
    assert not os.path.exists(secret)
