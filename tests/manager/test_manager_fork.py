"""Manager fork safety: a forked child gets UsedAfterFork; the parent's servers live on."""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import wait_child

from mcpsync.client import Client
from mcpsync.errors import UsedAfterFork
from mcpsync.manager import Manager

from .test_manager import DictResolver, config, write_helper

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
        import mcpsync.manager._manager as module

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


# -- a Client carried into a child; fresh ones made in the child work -----------------------

# Exit codes of the second child.
CLIENT_NO_ERROR, CLIENT_CLOSE_RAISED, FRESH_CLIENT_FAILED, FRESH_MANAGER_FAILED = 21, 22, 23, 24


def _fresh_ones_work(demo_argv: list[str]) -> int:
    """In the child: a new Client and a new Manager start servers and call tools."""
    from mcpsync.client import connect

    try:
        with connect(demo_argv) as client:
            if client.call_tool("echo", {"text": "child client"}).text != "child client":
                return FRESH_CLIENT_FAILED
    except BaseException:
        return FRESH_CLIENT_FAILED
    try:
        with Manager() as fresh:
            fresh.start_server(config("child", demo_argv))
            if fresh.call_tool("child", "echo", {"text": "child"}).text != "child":
                return FRESH_MANAGER_FAILED
            if [t.name for t in fresh.list_tools("child")] != ["echo", "add", "slow", "fail"]:
                return FRESH_MANAGER_FAILED
    except BaseException:
        return FRESH_MANAGER_FAILED
    return OK


def _client_child(client: Client, demo_argv: list[str]) -> int:
    calls: list[Callable[[], object]] = [
        lambda: client.call_tool("echo", {"text": "x"}), lambda: client.list_tools(),
        lambda: client.__enter__()]
    for call in calls:
        try:
            call()
        except UsedAfterFork as exc:
            # "...created in process N and cannot be used in the forked process M; create a
            # new client in the child" (a session call) or "...in another process" (enter)
            if "process" not in str(exc):
                return WRONG_MESSAGE
        else:
            return CLIENT_NO_ERROR
    try:
        client.close()           # only drops references
    except BaseException:
        return CLIENT_CLOSE_RAISED
    return _fresh_ones_work(demo_argv)


def _fork(child: Callable[[], int]) -> int:
    """Fork, run ``child()`` there, and return its exit code (the child never returns)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:   # pragma: no cover - the child; its result is the exit code
        code = 99
        try:
            code = child()
        finally:
            sys.stdout.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@pytest.mark.timeout(60)
def test_fork_with_a_live_client_and_fresh_ones_in_the_child(demo_argv: list[str]) -> None:
    from mcpsync.client import connect

    with connect(demo_argv) as client:
        assert client.call_tool("echo", {"text": "before"}).text == "before"
        pid = client.pid
        assert _fork(lambda: _client_child(client, demo_argv)) == OK
        # The parent's client is untouched: same process, same pipes, still answering.
        assert client.pid == pid and not client.closed
        assert client.call_tool("echo", {"text": "after"}).text == "after"


@pytest.mark.timeout(60)
def test_a_fresh_manager_in_the_child_of_a_live_one_works(demo_argv: list[str]) -> None:
    with Manager() as manager:
        manager.start_server(config("demo", demo_argv))
        pid = manager.client("demo").pid

        def child() -> int:
            try:
                manager.tools()
            except UsedAfterFork:
                pass
            else:
                return NO_ERROR
            manager.close()
            return _fresh_ones_work(demo_argv)

        assert _fork(child) == OK
        assert manager.client("demo").pid == pid
        assert manager.call_tool("demo", "echo", {"text": "parent"}).text == "parent"


@pytest.mark.timeout(60)
def test_fork_while_another_thread_holds_the_managers_lock(demo_argv: list[str]) -> None:
    """A parent thread inside a Manager method at the fork (simulated by holding its lock):
    the child's close(), repr() and methods must not wait for a lock nobody will release."""
    import threading

    with Manager() as manager:
        manager.start_server(config("demo", demo_argv))
        held, release = threading.Event(), threading.Event()

        def hold() -> None:
            with manager._lock:
                held.set()
                release.wait(30)

        holder = threading.Thread(target=hold, name="test-holder", daemon=True)
        holder.start()
        assert held.wait(10)

        def child() -> int:
            try:
                manager.server_started("demo")
            except UsedAfterFork:
                pass
            else:
                return NO_ERROR
            repr(manager)
            manager.close()
            return OK

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
            if pid == 0:   # pragma: no cover - the child
                code = 99
                try:
                    code = child()
                finally:
                    os._exit(code)
            assert wait_child(pid, "the Manager's lock") == OK
        finally:
            release.set()
            holder.join(10)
        assert manager.call_tool("demo", "echo", {"text": "ok"}).text == "ok"
