"""Manager thread scope: ids, worktree placeholders, spawn-key restarts, per-thread tools."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from mcpsync.config import ServerConfig
from mcpsync.errors import ConfigError, UnknownServer
from mcpsync.manager import Manager, split_thread_server_id, thread_server_id

from .test_manager import config, pid_gone, wait_for, write_helper


@pytest.fixture
def helper(tmp_path: Path) -> list[str]:
    return write_helper(tmp_path)


@pytest.fixture
def manager() -> Iterator[Manager]:
    m = Manager()
    yield m
    m.close()


@pytest.mark.parametrize(("integration", "thread"), [
    ("git", "t1"), ("a_b", "c_d"), ("x", "1"), ("my-int", "thread.42")])
def test_thread_server_id_round_trip(integration: str, thread: str) -> None:
    server_id = thread_server_id(integration, thread)
    assert server_id == f"{integration}__{thread}"
    assert split_thread_server_id(server_id) == (integration, thread)
    assert Manager.split_thread_server_id(server_id) == (integration, thread)


@pytest.mark.parametrize(("integration", "thread"), [
    ("", "t"), ("g", ""), ("a__b", "t"), ("g", "t__1"), ("g_", "t"), ("g", "_t"),
    ("__", "t")])
def test_thread_server_id_refuses_ambiguous_parts(integration: str, thread: str) -> None:
    with pytest.raises(ValueError):
        thread_server_id(integration, thread)


@pytest.mark.parametrize("bad", ["", "plain", "a__b__c", "a___b", "a____b", "__b", "a__",
                                 "a_b__"])
def test_split_refuses_anything_else(bad: str) -> None:
    with pytest.raises(ValueError):
        split_thread_server_id(bad)


@pytest.mark.timeout(40)
def test_two_threads_on_two_worktrees(no_leaks: None, manager: Manager, helper: list[str],
                                      demo_argv: list[str], tmp_path: Path) -> None:
    wt1 = tmp_path / "wt1"
    wt2 = tmp_path / "wt2"
    wt1.mkdir()
    wt2.mkdir()
    manager.start_server(config("proj", demo_argv))
    template = ServerConfig(command=helper[0], args=[*helper[1:]], cwd="{{worktree_root}}",
                            env={"ROOT": "{{worktree_root}}/x"})
    manager.start_thread_server("git", "t1", template, worktree_root=wt1)
    manager.start_thread_server("git", "t2", template, worktree_root=str(wt2))
    manager.start_thread_server("lint", "t1", template, worktree_root=wt1)
    assert manager.call_tool("git__t1", "cwd").text == str(wt1)
    assert manager.call_tool("git__t2", "cwd").text == str(wt2)
    assert manager.call_tool("git__t2", "getenv", {"name": "ROOT"}).text == f"{wt2}/x"
    assert manager.thread_server_started("git", "t1")
    assert manager.thread_server_started("git", "t2")
    assert not manager.thread_server_started("git", "t3")
    # A thread server is not a project server.
    assert not manager.server_started("git__t1")
    assert manager.server_ready_error("git__t1") is None
    for sid in ("proj", "git__t1", "git__t2", "lint__t1"):
        manager.list_tools(sid)
    assert {t.server_id for t in manager.tools()} == {"proj"}
    t1 = manager.thread_tools("t1")
    assert [t.server_id for t in t1][:4] == ["proj"] * 4          # project tools first
    assert {t.server_id for t in t1} == {"proj", "git__t1", "lint__t1"}
    assert [t.server_id for t in t1] == ["proj"] * 4 + ["git__t1"] * 6 + ["lint__t1"] * 6
    t2 = manager.thread_tools("t2", prefixed=True)
    assert "git__t2__cwd" in [t.name for t in t2]
    assert manager.resolve_tool("git__t2__cwd") == ("git__t2", "cwd")

    pids = {sid: manager.client(sid).pid for sid in ("git__t1", "lint__t1", "git__t2")}
    assert sorted(manager.stop_thread_servers("t1")) == ["git__t1", "lint__t1"]
    for sid in ("git__t1", "lint__t1"):
        pid = pids[sid]
        assert pid is not None and wait_for(partial(pid_gone, pid))
    assert not manager.thread_server_started("git", "t1")
    assert manager.thread_server_started("git", "t2")
    with pytest.raises(UnknownServer):
        manager.call_tool("git__t1", "cwd")
    assert manager.stop_thread_servers("t1") == []
    assert manager.call_tool("git__t2", "cwd").text == str(wt2)


@pytest.mark.timeout(30)
def test_same_spawn_key_restarts(no_leaks: None, manager: Manager, helper: list[str],
                                 tmp_path: Path) -> None:
    template = ServerConfig(command=helper[0], args=helper[1:], cwd="{{worktree_root}}")
    manager.start_thread_server("git", "t1", template, worktree_root=tmp_path)
    first = int(manager.call_tool("git__t1", "pid").text)
    other = tmp_path / "moved"
    other.mkdir()
    manager.start_thread_server("git", "t1", template, worktree_root=other)
    assert pid_gone(first)
    assert manager.call_tool("git__t1", "cwd").text == str(other)
    assert int(manager.call_tool("git__t1", "pid").text) != first
    assert manager.stop_server("git__t1") is True


def test_thread_config_checks(manager: Manager, helper: list[str], tmp_path: Path) -> None:
    base = ServerConfig(command=helper[0], args=helper[1:])
    with pytest.raises(ConfigError, match="project"):
        manager.start_thread_server("git", "t1", ServerConfig(
            command="x", scope="project"), worktree_root=tmp_path)
    with pytest.raises(ConfigError, match="differs"):
        manager.start_thread_server("git", "t1", ServerConfig(id="other", command="x"),
                                    worktree_root=tmp_path)
    with pytest.raises(ConfigError, match="worktree_root"):
        manager.start_thread_server("git", "t1", ServerConfig(
            command="x", args=["{{worktree_root}}"]))
    with pytest.raises(ConfigError, match="worktree_root"):
        manager.start_thread_server("git", "t1", ServerConfig(command="x",
                                                              cwd="{{worktree_root}}"))
    with pytest.raises(ConfigError, match="worktree_root"):
        manager.start_thread_server("git", "t1", ServerConfig(
            command="x", env={"ROOT": "{{worktree_root}}/src"}))
    with pytest.raises(ValueError):
        manager.start_thread_server("g__x", "t1", base)
    assert not manager.thread_server_started("git", "t1")


@pytest.mark.timeout(30)
def test_matching_id_and_thread_scope_are_accepted(manager: Manager, helper: list[str],
                                                   tmp_path: Path) -> None:
    cfg = ServerConfig(id="git__t9", command=helper[0], args=helper[1:], scope="thread",
                       cwd=os.fspath(tmp_path))
    manager.start_thread_server("git", "t9", cfg)
    assert manager.thread_server_started("git", "t9")
    # The project config list is not touched, and a project start of a thread id is refused.
    assert manager.configs == []
    with pytest.raises(ConfigError):
        manager.start_server(ServerConfig(id="git__t9", command=helper[0], args=helper[1:]))


@pytest.mark.timeout(40)
def test_stop_thread_servers_stops_them_in_parallel(no_leaks: None, manager: Manager,
                                                    helper: list[str]) -> None:
    # Each of these needs ~4 s to stop (stdin closed, 2 s, SIGTERM ignored, 2 s, SIGKILL):
    # one after the other they would take 12 s or more, so finishing in 10 s proves they
    # are stopped at once. A server of another thread is left running.
    integrations = ["a", "b", "c"]
    for integration in integrations:
        manager.start_thread_server(integration, "slow", config("", [*helper, "ignore-term"]))
    manager.start_thread_server("a", "other", config("", helper))
    pids = [manager.client(thread_server_id(i, "slow")).pid for i in integrations]
    began = time.monotonic()
    stopped = manager.stop_thread_servers("slow")
    took = time.monotonic() - began
    assert took < 10.0, f"stop_thread_servers() took {took:.1f} s"
    assert stopped == ["a__slow", "b__slow", "c__slow"]
    assert all(pid is not None and pid_gone(pid) for pid in pids)
    assert manager.thread_server_started("a", "other")
    assert not any(manager.thread_server_started(i, "slow") for i in integrations)
