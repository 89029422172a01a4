"""The user-facing client against the demo server: both eras, every pinned legacy version,
the result types, the properties, target parsing and option checks."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import threading
from typing import Any

import pytest
from helpers import ROOT

import mcpsync
from mcpsync.client import _client as client_mod
from mcpsync.protocol import LEGACY_VERSIONS

pytestmark = pytest.mark.timeout(60)

DEMO = [sys.executable, "-m", "mcpsync.demo"]


def _exercise(client: mcpsync.Client) -> None:
    names = [t.name for t in client.list_tools()]
    assert names == ["echo", "add", "slow", "fail"]
    assert client.call_tool("echo", {"text": "héllo"}).text == "héllo"
    added = client.call_tool("add", {"a": 1, "b": 2.5})
    if client.protocol_version in ("2024-11-05", "2025-03-26"):
        # No structuredContent (nor outputSchema) before 2025-06-18: the text carries it.
        assert added.structured is None and added.text == '{"sum":3.5}'
    else:
        assert added.structured == {"sum": 3.5}
    assert added.is_error is False
    failed = client.call_tool("fail", {"message": "nope"})
    assert failed.is_error is True and "nope" in failed.text
    with pytest.raises(mcpsync.ToolError) as info:
        client.call_tool("fail", raise_on_error=True)
    assert info.value.result.is_error and "calling tool 'fail'" in str(info.value)
    seen: list[tuple[Any, Any, Any]] = []
    done = client.call_tool("slow", {"seconds": 0.05, "steps": 3},
                            progress=lambda p, t, m: seen.append((p, t, m)))
    assert not done.is_error
    # Every progress callback has run by the time the call returns.
    assert [(p, t) for p, t, _ in seen] == [(1, 3), (2, 3), (3, 3)]
    if client.protocol_version != "2024-11-05":   # progress messages arrived in 2025-03-26
        assert [m for _, _, m in seen] == ["step 1/3", "step 2/3", "step 3/3"]


@pytest.mark.parametrize("era", ["auto", "legacy"])
def test_demo_in_both_eras(era: str, no_leaks: None) -> None:
    with mcpsync.connect(DEMO, era=era) as client:
        assert client.era == ("modern" if era == "auto" else "legacy")
        assert client.protocol_version == ("2026-07-28" if era == "auto" else "2025-11-25")
        assert client.server_info.name == "mcpsync-demo"
        assert client.server_info.protocol_version == client.protocol_version
        assert client.instructions and "demo" in client.instructions
        assert "tools" in client.capabilities
        _exercise(client)
    assert client.closed


@pytest.mark.parametrize("version", LEGACY_VERSIONS)
def test_demo_pinned_legacy_versions(version: str) -> None:
    with mcpsync.connect(DEMO, protocol_version=version) as client:
        assert (client.era, client.protocol_version) == ("legacy", version)
        _exercise(client)


def test_demo_pinned_modern() -> None:
    with mcpsync.connect(DEMO, era="modern", protocol_version="2026-07-28") as client:
        assert client.era == "modern"
        assert client.call_tool("add", {"a": 2, "b": 2}).structured == {"sum": 4}


def test_string_target_is_shlex_split_and_config_accepted() -> None:
    command = " ".join([sys.executable, "-m", "mcpsync.demo"])
    with mcpsync.connect(command, era="legacy", name="my demo") as client:
        assert client.name == "my demo"
        assert client.call_tool("echo", {"text": "x"}).text == "x"
    config = mcpsync.ServerConfig(command=sys.executable, args=["-m", "mcpsync.demo"],
                                  name="cfg", timeout=7)
    with mcpsync.connect(config, era="legacy") as client:
        assert client.name == "cfg"
        assert "cfg" in repr(client)


def test_http_only_options_are_refused_for_stdio(demo_argv: list[str]) -> None:
    with pytest.raises(mcpsync.ConfigError, match="headers"):
        mcpsync.connect(demo_argv, headers={"X-Test": "1"})


@pytest.mark.parametrize("options", [
    {"era": "ancient"}, {"protocol_version": "2020-01-01"}, {"timeout": 0},
    {"timeout": math.nan}, {"probe_timeout": -1}, {"max_pages": 0}, {"restart": "always"},
    {"log_level": "loud"}, {"era": "legacy", "protocol_version": "2026-07-28"},
    {"max_input_rounds": 0}, {"client_info": 5},
])
def test_bad_options_raise_config_error(options: dict[str, Any]) -> None:
    with pytest.raises(mcpsync.ConfigError):
        mcpsync.connect(DEMO, **options)


def test_missing_command_is_a_config_error(no_leaks: None) -> None:
    with pytest.raises(mcpsync.ConfigError):
        mcpsync.connect(["definitely-not-a-command-mcpsync"])


def test_close_is_idempotent_and_refuses_calls(no_leaks: None) -> None:
    client = mcpsync.connect(DEMO, era="legacy")
    client.close()
    client.close()
    with pytest.raises(mcpsync.ClosedError):
        client.call_tool("echo", {"text": "x"})


def test_atexit_hook_closes_clients_left_open(no_leaks: None) -> None:
    client = mcpsync.connect(DEMO, era="legacy")
    assert client in set(client_mod._open_clients)
    client_mod._close_open_clients()
    assert client.closed
    assert client not in set(client_mod._open_clients)


def test_ping_per_era() -> None:
    with mcpsync.connect(DEMO, era="legacy") as client:
        assert client.ping() is None
    with mcpsync.connect(DEMO) as client, pytest.raises(mcpsync.UnsupportedInThisEra):
        client.ping()


def test_capability_not_advertised_raises_without_round_trip() -> None:
    with mcpsync.connect(DEMO) as client:
        # Lists of what the server does not offer are empty; nothing is asked.
        assert client.list_resources() == []
        assert client.list_prompts() == []
        assert client.list_resource_templates() == []
        for call in (lambda: client.read_resource("x://y"),
                     lambda: client.get_prompt("p"), lambda: client.complete("p", ("a", "")),
                     lambda: client.subscribe("x://y", print)):
            with pytest.raises(mcpsync.CapabilityNotSupported):
                call()
        # The demo offers tools with listChanged: true, so this one is allowed.
        client.on_list_changed("tools", print).close()


def test_log_messages_reach_on_log_and_logging(caplog: pytest.LogCaptureFixture) -> None:
    seen: list[tuple[str, Any, Any]] = []
    for era in ("legacy", "auto"):
        seen.clear()
        with mcpsync.connect(DEMO, era=era, name=f"logs-{era}",
                             on_log=lambda lv, lg, d: seen.append((lv, lg, d))) as client:
            client.set_log_level("info")
            with caplog.at_level("INFO", logger="mcpsync.server"):
                client.call_tool("slow", {"seconds": 0.02, "steps": 2})
        assert [s[0] for s in seen] == ["info", "info"], era
        assert any(r.name == f"mcpsync.server.logs-{era}" for r in caplog.records)
    with pytest.raises(ValueError):
        client.set_log_level("loud")


def test_submit_returns_a_future_that_cancels_on_the_wire() -> None:
    with mcpsync.connect(DEMO) as client:
        future = client.submit_tool("add", {"a": 1, "b": 1})
        assert future.result(10).structured == {"sum": 2}
        slow = client.submit_tool("slow", {"seconds": 30, "steps": 2})
        assert slow.cancel() is True
        with pytest.raises(mcpsync.Cancelled):
            slow.result(5)
        assert client.call_tool("echo", {"text": "still fine"}).text == "still fine"


def test_timeout_then_still_usable() -> None:
    with mcpsync.connect(DEMO, era="legacy") as client:
        with pytest.raises(mcpsync.RequestTimeout):
            client.call_tool("slow", {"seconds": 30, "steps": 1}, timeout=0.2)
        assert client.call_tool("echo", {"text": "ok"}).text == "ok"


def test_quickstart_example_runs() -> None:
    root = ROOT
    env = dict(os.environ, PYTHONPATH=str(root))
    proc = subprocess.run([sys.executable, str(root / "examples" / "quickstart.py")],
                          capture_output=True, text=True, timeout=60, env=env, cwd=root)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "add  -> {'sum': 5}" in lines
    assert lines[-2:] == ["  progress 5/5: step 5/5", "slow -> done: 5 steps in 0.5 s"]


def test_used_after_fork() -> None:
    with mcpsync.connect(DEMO) as client:
        pid = os.fork()
        if pid == 0:   # the child: must refuse, and closing must not touch the parent's server
            code = 1
            try:
                client.call_tool("echo", {"text": "x"})
            except mcpsync.UsedAfterFork:
                client.close()
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert client.call_tool("echo", {"text": "parent"}).text == "parent"


@pytest.mark.timeout(30)
def test_fork_while_a_parent_thread_holds_the_clients_lock() -> None:
    """The child's close() takes no lock, so a lock held by a parent thread at the fork
    cannot hang it; ping() refuses with UsedAfterFork in either era."""
    with mcpsync.connect(DEMO) as client:
        held, release = threading.Event(), threading.Event()

        def hold() -> None:
            with client._state_lock:
                held.set()
                release.wait(10)

        holder = threading.Thread(target=hold, name="mcpsync-test-holder")
        holder.start()
        assert held.wait(5)
        try:
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    signal.alarm(5)          # a hang in the child fails the test, not the run
                    try:
                        client.ping()
                    except mcpsync.UsedAfterFork:
                        client.close()
                        code = 0 if client.closed else 2
                finally:
                    os._exit(code)
            _, status = os.waitpid(pid, 0)
        finally:
            release.set()
            holder.join()
        assert os.waitstatus_to_exitcode(status) == 0
        assert client.call_tool("echo", {"text": "parent"}).text == "parent"


@pytest.mark.timeout(30)
def test_on_connection_lost_is_called_once_when_the_server_dies_and_never_on_close() -> None:
    lost: list[BaseException] = []
    seen = threading.Event()

    def on_lost(error: BaseException) -> None:
        lost.append(error)
        seen.set()

    with mcpsync.connect(DEMO, on_connection_lost=on_lost, restart=None) as client:
        pid = client.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        assert seen.wait(10)        # no call needed: the reader sees the exit by itself
    assert len(lost) == 1 and isinstance(lost[0], mcpsync.ServerExited)
    assert lost[0].exit_code == -signal.SIGKILL

    closed: list[BaseException] = []
    with mcpsync.connect(DEMO, on_connection_lost=closed.append) as client:
        client.call_tool("echo", {"text": "x"})
    assert closed == []
