"""Manager: project servers, parallel starts, readiness, routing, stderr, notifications, close.

Every server here is a real process: the demo server, or the small ``helper`` server below
(written to a temporary file), whose tools report its working directory, read files and
environment variables, write to stderr and crash on demand.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from helpers import DOCS
from http_peers.fault_server import FaultServer

from mcpsync.config import ServerConfig
from mcpsync.errors import (
    ClosedError,
    ConfigError,
    ConnectionLost,
    RemoteError,
    RequestTimeout,
    UnknownServer,
)
from mcpsync.manager import ManagedTool, Manager, Notification

HELPER = r'''
import os, signal, sys, time
from mcpsync.server import Server

mode = sys.argv[1] if len(sys.argv) > 1 else ""
if mode == "crash-at-start":
    sys.stderr.write("helper: crashing at start\n")
    sys.stderr.flush()
    sys.exit(7)
if mode == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)

server = Server("helper", "1.0")


@server.tool()
def cwd() -> str:
    """Report the working directory."""
    return os.getcwd()


@server.tool()
def getenv(name: str) -> str:
    """Report one environment variable."""
    return os.environ.get(name, "")


@server.tool()
def readfile(path: str) -> str:
    """Return a file's text."""
    with open(path, encoding="utf-8") as f:
        return f.read()


@server.tool()
def pid() -> int:
    """Report the process id."""
    return os.getpid()


@server.tool()
def crash(code: int = 3) -> str:
    """Exit at once, without answering."""
    os._exit(code)


@server.tool()
def stderr(text: str, repeat: int = 1) -> str:
    """Write text to stderr."""
    for _ in range(repeat):
        sys.stderr.write(text)
    sys.stderr.flush()
    return "ok"


server.serve()
if mode == "ignore-term":
    while True:        # stdin closed and SIGTERM ignored: only SIGKILL ends it
        time.sleep(1)
'''


RAW = r'''
import json, sys

mode = sys.argv[1] if len(sys.argv) > 1 else ""
TOOLS = [{"name": n, "inputSchema": {"type": "object"}} for n in ("hello", "release", "gated")]
pending = []


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    msg = json.loads(line)
    method, rid = msg.get("method"), msg.get("id")
    if rid is None:
        continue
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "result": {
            "protocolVersion": msg["params"]["protocolVersion"],
            "serverInfo": {"name": "raw", "version": "1"}, "capabilities": {"tools": {}}}})
    elif method == "tools/list":
        if mode == "list-error":
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32603, "message": "no"}})
        else:
            pending.append(rid)   # answered when the tool "release" is called
    elif method == "tools/call":
        name = msg["params"]["name"]
        if name == "gated":
            send({"jsonrpc": "2.0", "id": rid, "error": {
                "code": -32011, "message": "approval rejected by the operator"}})
            continue
        if name == "release":
            for waiting in pending:
                send({"jsonrpc": "2.0", "id": waiting, "result": {"tools": TOOLS}})
            pending.clear()
        send({"jsonrpc": "2.0", "id": rid, "result": {
            "content": [{"type": "text", "text": "called " + name}]}})
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "not found"}})
'''


@pytest.fixture
def raw(tmp_path: Path) -> list[str]:
    """argv of a raw legacy server: tools/list waits until the tool "release" is called,
    the tool "gated" answers the gateway code -32011, mode "list-error" fails tools/list."""
    path = tmp_path / "raw_server.py"
    path.write_text(RAW, encoding="utf-8")
    return [sys.executable, str(path)]


def write_helper(directory: Path) -> list[str]:
    """Write the helper server into ``directory``; return its argv (append a mode)."""
    path = directory / "helper_server.py"
    path.write_text(HELPER, encoding="utf-8")
    return [sys.executable, str(path)]


@pytest.fixture
def helper(tmp_path: Path) -> list[str]:
    """argv prefix of the helper server (append a mode)."""
    return write_helper(tmp_path)


def config(server_id: str, argv: list[str], **kwargs: Any) -> ServerConfig:
    return ServerConfig(id=server_id, command=argv[0], args=argv[1:], **kwargs)


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Wait until ``predicate()`` holds (a state change, never a timing assertion)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie still answers kill(0); /proc tells it apart. The process may be reaped
    # between the two: opening gives ENOENT, a read of an open stat file ESRCH.
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().split(") ", 1)[1].startswith("Z")
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True


def child_pids() -> set[int]:
    """Living (non-zombie) child processes of this process (Linux; empty elsewhere)."""
    if not os.path.isdir("/proc"):
        return set()
    me = str(os.getpid())
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rsplit(") ", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[1] == me and fields[0] != "Z":
            found.add(int(entry))
    return found


class DictResolver:
    """A secret resolver over a dict; counts its calls."""

    def __init__(self, secrets: Mapping[str, Mapping[str, str]]) -> None:
        self.secrets = secrets
        self.calls = 0

    def resolve(self, ref: str) -> Mapping[str, str]:
        self.calls += 1
        return self.secrets[ref]


@pytest.fixture
def manager() -> Iterator[Manager]:
    m = Manager()
    yield m
    m.close()


# -- construction and lifetime ---------------------------------------------------------------

def test_thread_id_helpers_are_static_methods() -> None:
    assert Manager.thread_server_id("a", "b") == "a__b"
    assert Manager.split_thread_server_id("a__b") == ("a", "b")
    Manager().close()


def test_constructor_checks_configs(demo_argv: list[str]) -> None:
    with pytest.raises(ConfigError, match="id"):
        Manager(configs=[ServerConfig(command="x")])
    with pytest.raises(ConfigError, match="twice"):
        Manager(configs=[config("a", demo_argv), config("a", demo_argv)])
    with pytest.raises(ValueError):
        Manager(max_parallel_starts=0)
    with pytest.raises(ValueError, match="set_notification_handler"):
        Manager(connect_options={"notification_observer": print})


@pytest.mark.timeout(30)
def test_start_call_stop_and_state(no_leaks: None, manager: Manager,
                                   demo_argv: list[str]) -> None:
    manager.start_server(config("demo", demo_argv))
    assert manager.server_started("demo")
    tools = manager.list_tools("demo")       # waits for discovery
    assert [t.name for t in tools] == ["echo", "add", "slow", "fail"]
    assert manager.server_ready("demo")
    assert manager.server_ready_error("demo") is None
    result = manager.call_tool("demo", "echo", {"text": "hi"})
    assert result.text == "hi"
    caps = manager.capabilities("demo")
    assert caps is not None and "tools" in caps
    info = manager.server_info("demo")
    assert info is not None
    assert info.name == "mcpsync-demo" and info.version
    assert info.protocol_version and info.instructions and "demo" in info.instructions
    # raw is the whole handshake result, not only the implementation info
    assert "capabilities" in info.raw and "tools" in info.raw["capabilities"]
    assert ("supportedVersions" in info.raw) or ("protocolVersion" in info.raw)
    assert manager.client("demo").pid is not None
    pid = manager.client("demo").pid
    assert manager.stop_server("demo") is True
    assert pid is not None and wait_for(lambda: pid_gone(pid))
    assert not manager.server_started("demo")
    assert not manager.server_ready("demo")
    assert manager.server_ready_error("demo") is None
    assert manager.capabilities("demo") is None and manager.server_info("demo") is None
    assert manager.stop_server("demo") is False
    assert manager.stop_server("never-heard-of") is False


def test_unknown_ids(manager: Manager) -> None:
    for call in (lambda: manager.call_tool("nope", "t"), lambda: manager.list_prompts("nope"),
                 lambda: manager.get_prompt("nope", "p"), lambda: manager.list_resources("nope"),
                 lambda: manager.read_resource("nope", "file:///x"),
                 lambda: manager.server_stderr("nope"), lambda: manager.client("nope"),
                 lambda: manager.list_tools("nope")):
        with pytest.raises(UnknownServer) as info:
            call()
        assert isinstance(info.value, KeyError) and "nope" in str(info.value)
        assert "started: none" in str(info.value) and "start_server()" in str(info.value)
    assert not manager.server_started("nope") and not manager.server_ready("nope")
    assert manager.server_ready_error("nope") is None
    assert manager.capabilities("nope") is None and manager.server_info("nope") is None


def test_start_server_config_checks(manager: Manager, demo_argv: list[str]) -> None:
    with pytest.raises(ConfigError, match="id"):
        manager.start_server(ServerConfig(command=demo_argv[0], args=demo_argv[1:]))
    with pytest.raises(ConfigError, match="thread"):
        manager.start_server(config("t", demo_argv, scope="thread"))
    with pytest.raises(UnknownServer):
        manager.start_server("not-configured")


@pytest.mark.timeout(30)
def test_start_error_is_kept_and_cleared(manager: Manager, helper: list[str]) -> None:
    with pytest.raises(ConnectionLost) as info:
        manager.start_server(config("bad", [*helper, "crash-at-start"]))
    assert manager.server_ready_error("bad") is info.value
    assert not manager.server_started("bad") and not manager.server_ready("bad")
    manager.start_server(config("bad", helper))        # the next start works
    assert manager.server_ready_error("bad") is None
    assert manager.server_started("bad")
    # A restart that fails leaves the id stopped with the new start error ...
    with pytest.raises(ConnectionLost) as again:
        manager.start_server(config("bad", [*helper, "crash-at-start"]))
    assert manager.server_ready_error("bad") is again.value
    assert not manager.server_started("bad")
    # ... until the id is stopped: a stopped id has no error.
    assert manager.stop_server("bad") is False
    assert manager.server_ready_error("bad") is None


@pytest.mark.timeout(30)
def test_restart_is_idempotent_and_stops_the_old_process(no_leaks: None, manager: Manager,
                                                         helper: list[str]) -> None:
    manager.start_server(config("h", helper))
    first = int(manager.call_tool("h", "pid").text)
    manager.start_server(config("h", helper))
    assert pid_gone(first)              # stopped completely before the new start returned
    second = int(manager.call_tool("h", "pid").text)
    assert second != first and manager.server_started("h")
    assert manager.client("h").pid == second


@pytest.mark.timeout(60)
def test_start_all_twenty_in_parallel(tmp_path: Path, helper: list[str], demo_argv: list[str],
                                      no_leaks: None) -> None:
    before = child_pids()
    resolver = DictResolver({"ref": {"TOKEN": "abc"}})
    configs = [config(f"s{i:02d}", demo_argv) for i in range(17)]
    configs.append(config("bad", [*helper, "crash-at-start"]))
    configs.append(config("later", helper, secret_ref="ref",
                          env={"SECRET_PATH": "{{secret_file}}"}))
    configs.append(config("z-off", demo_argv, disabled=True))
    configs.append(config("z-thread", demo_argv, scope="thread"))
    configs.append(config("proj", demo_argv, scope="project"))
    m = Manager(resolver, configs=configs)
    try:
        results = m.start_all()
        assert set(results) == {c.id for c in configs} - {"z-off", "z-thread"}
        assert len(results) == 20
        assert isinstance(results["bad"], ConnectionLost)
        assert all(v is None for k, v in results.items() if k != "bad")
        assert not m.server_started("bad") and not m.server_ready("bad")
        assert m.server_ready_error("bad") is results["bad"]
        assert not m.server_started("z-off") and not m.server_started("z-thread")
        for server_id in results:
            if server_id != "bad":
                assert m.server_started(server_id)
                m.list_tools(server_id)               # discovery done
                assert m.server_ready(server_id) and m.server_ready_error(server_id) is None
        names = [t.name for t in m.tools(prefixed=True)]
        assert "s00__echo" in names and "later__crash" in names
        # One crashes later: its state changes and its secret file goes at once.
        secret = m.call_tool("later", "getenv", {"name": "SECRET_PATH"}).text
        assert os.path.isfile(secret)
        with pytest.raises(ConnectionLost):
            m.call_tool("later", "crash")
        # The file goes first, then its directory (on the watcher thread): wait for both.
        assert wait_for(lambda: not os.path.exists(os.path.dirname(secret)))
        assert not os.path.exists(secret)
        assert wait_for(lambda: not m.server_started("later"))
        assert not m.server_ready("later") and m.server_ready_error("later") is None
        assert not any(t.server_id == "later" for t in m.tools())
        assert m.server_started("s00")                # the others are unaffected
        assert m.call_tool("s16", "echo", {"text": "x"}).text == "x"
        assert m.stop_server("later") is False        # it was no longer running
        pids = [m.client(sid).pid for sid in results if sid not in ("bad", "later")]
    finally:
        m.close()
    assert len(pids) == 18 and all(pid is not None and pid_gone(pid) for pid in pids)
    assert child_pids() <= before             # no process of this test is left


# -- tools, routing ---------------------------------------------------------------------------

@pytest.mark.timeout(30)
def test_tools_order_prefix_and_resolve(manager: Manager, demo_argv: list[str],
                                        helper: list[str]) -> None:
    manager.start_server(config("b", demo_argv))
    manager.start_server(config("a", helper))
    manager.start_server(config("a__x", demo_argv))    # an id that contains the separator
    for sid in ("a", "b", "a__x"):
        manager.list_tools(sid)
    tools = manager.tools()
    assert [t.server_id for t in tools][:6] == ["a"] * 6
    assert [t.name for t in tools if t.server_id == "b"] == ["echo", "add", "slow", "fail"]
    assert [t.server_id for t in tools] == sorted(t.server_id for t in tools)
    assert all(isinstance(t, ManagedTool) and t.name == t.tool.name for t in tools)
    prefixed = manager.tools(prefixed=True)
    assert next(t.name for t in prefixed if t.server_id == "b") == "b__echo"
    assert len({t.name for t in prefixed}) == len(prefixed)
    assert manager.resolve_tool("b__echo") == ("b", "echo")
    assert manager.resolve_tool("a__x__echo") == ("a__x", "echo")   # the longest id wins
    assert manager.resolve_tool("a__cwd") == ("a", "cwd")
    with pytest.raises(UnknownServer):
        manager.resolve_tool("zzz__echo")


@pytest.mark.timeout(30)
def test_server_without_tools_is_ready(manager: Manager, tmp_path: Path) -> None:
    script = tmp_path / "empty.py"
    script.write_text("from mcpsync.server import Server\nServer('empty', '1').serve()\n",
                      encoding="utf-8")
    manager.start_server(config("empty", [sys.executable, str(script)]))
    assert manager.list_tools("empty") == []
    caps = manager.capabilities("empty")      # it offers tools (none), no resources/prompts
    assert caps is not None and "tools" in caps
    assert "resources" not in caps and "prompts" not in caps
    assert manager.server_ready("empty") and manager.server_ready_error("empty") is None
    assert manager.tools() == []


@pytest.mark.timeout(30)
def test_discovery_in_background_and_calls_meanwhile(no_leaks: None, manager: Manager,
                                                     raw: list[str]) -> None:
    manager.start_server(config("slowlist", raw))       # its tools/list waits for "release"
    discover = [t for t in threading.enumerate() if t.name == "mcpsync-discover-slowlist"]
    assert len(discover) == 1 and discover[0].daemon and discover[0].is_alive()
    assert manager.server_started("slowlist")
    assert not manager.server_ready("slowlist")
    assert manager.server_ready_error("slowlist") is None       # while discovery runs
    assert manager.tools() == []
    # A server still discovering is called anyway.
    assert manager.call_tool("slowlist", "hello").text == "called hello"
    manager.call_tool("slowlist", "release")
    assert [t.name for t in manager.list_tools("slowlist")] == ["hello", "release", "gated"]
    assert manager.server_ready("slowlist")
    assert [t.name for t in manager.tools()] == ["hello", "release", "gated"]
    discover[0].join(5)
    assert not discover[0].is_alive()


@pytest.mark.timeout(30)
def test_discovery_error_is_reported(manager: Manager, raw: list[str]) -> None:
    manager.start_server(config("broken", [*raw, "list-error"]))
    assert wait_for(lambda: manager.server_ready_error("broken") is not None)
    error = manager.server_ready_error("broken")
    assert isinstance(error, RemoteError) and error.code == -32603
    assert manager.server_started("broken") and not manager.server_ready("broken")
    assert manager.tools() == []


@pytest.mark.timeout(30)
def test_server_stderr_tail(manager: Manager, helper: list[str]) -> None:
    manager.start_server(config("err", helper))
    assert manager.server_stderr("err") == ""
    manager.call_tool("err", "stderr", {"text": "hello stderr\n"})
    assert wait_for(lambda: "hello stderr" in manager.server_stderr("err"))
    manager.call_tool("err", "stderr", {"text": "y" * 1024, "repeat": 100})
    # The stderr reader may lag behind the call's answer: wait until the first line has
    # been pushed out of the tail, which takes more than 64 KiB read after it.
    assert wait_for(lambda: "hello stderr" not in manager.server_stderr("err"))
    tail = manager.server_stderr("err")
    assert tail.endswith("y" * 100)
    assert 60 * 1024 <= len(tail.encode()) <= 64 * 1024   # only the last 64 KiB


@pytest.mark.timeout(30)
def test_crash_at_start_stderr_is_in_the_error(manager: Manager, helper: list[str]) -> None:
    with pytest.raises(ConnectionLost) as info:
        manager.start_server(config("bad", [*helper, "crash-at-start"]))
    assert "crashing at start" in getattr(info.value, "stderr_tail", "")


# -- notifications ----------------------------------------------------------------------------

def test_notification_level_and_text() -> None:
    msg = Notification("s", "notifications/message",
                       {"level": "warning", "data": {"a": "é", "b": [1, 2]}})
    assert msg.level == "warning"
    assert msg.text == '{"a":"é","b":[1,2]}'
    assert Notification("s", "notifications/message", {"level": "info", "data": "x y"}).text \
        == "x y"
    other = Notification("s", "notifications/progress", {"level": "info", "data": "x"})
    assert other.level == "" and other.text == ""
    assert Notification("s", "notifications/message", None).level == ""


@pytest.mark.timeout(30)
def test_notification_handler_before_and_after_start(demo_argv: list[str],
                                                     no_leaks: None) -> None:
    got: list[Notification] = []
    threads: set[str] = set()

    def handler(n: Notification) -> None:
        threads.add(threading.current_thread().name)
        got.append(n)

    with Manager(connect_options={"log_level": "debug"}) as m:
        m.set_notification_handler(handler)                 # before the start
        m.start_server(config("one", demo_argv))
        m.call_tool("one", "slow", {"seconds": 0.05, "steps": 3})
        # Notifications run on the dispatcher, so the call may return before the last one.
        assert wait_for(lambda: len(got) == 3)
        texts = [n.text for n in got if n.server_id == "one"]
        assert texts == ["slow: step 1/3", "slow: step 2/3", "slow: step 3/3"]
        assert all(n.method == "notifications/message" and n.level == "info" for n in got)
        assert got[0].params["logger"] == "mcpsync-demo"
        assert threading.current_thread().name not in threads   # the dispatcher, not ours

        m.start_server(config("two", demo_argv))
        later: list[Notification] = []
        m.set_notification_handler(later.append)            # after the starts: both servers
        m.call_tool("one", "slow", {"seconds": 0.02, "steps": 1})
        m.call_tool("two", "slow", {"seconds": 0.02, "steps": 2})
        assert wait_for(lambda: len(later) == 3)
        assert [(n.server_id, n.text) for n in later] == [
            ("one", "slow: step 1/1"), ("two", "slow: step 1/2"), ("two", "slow: step 2/2")]
        count = len(got)
        m.set_notification_handler(None)
        m.set_notification_handler(later.append)
        m.set_notification_handler(None)
        m.call_tool("two", "slow", {"seconds": 0.01, "steps": 1}, progress=lambda *a: None)
        m.call_tool("two", "echo", {"text": "flush"})   # anything queued before has run
        assert len(got) == count and len(later) == 3


@pytest.mark.timeout(30)
def test_handler_sees_progress_too_after_the_callers_callback(demo_argv: list[str],
                                                              no_leaks: None) -> None:
    got: list[Notification] = []
    seen_by_caller: list[float] = []
    with Manager() as m:
        m.set_notification_handler(got.append)
        m.start_server(config("one", demo_argv))
        m.call_tool("one", "slow", {"seconds": 0.02, "steps": 2},
                    progress=lambda p, total, msg: seen_by_caller.append(p))
        assert wait_for(lambda: sum(n.method == "notifications/progress" for n in got) == 2)
    assert len(seen_by_caller) == 2
    progress = [n for n in got if n.method == "notifications/progress"]
    assert [n.params["progress"] for n in progress] == seen_by_caller
    assert all("progressToken" in n.params for n in progress)   # params as sent


@pytest.mark.timeout(30)
def test_handler_exception_is_logged_and_delivery_goes_on(
        demo_argv: list[str], caplog: pytest.LogCaptureFixture) -> None:
    got: list[str] = []

    def handler(n: Notification) -> None:
        got.append(n.text)
        raise RuntimeError("handler broke")

    with Manager(connect_options={"log_level": "info"}) as m:
        m.set_notification_handler(handler)
        m.start_server(config("demo", demo_argv))
        with caplog.at_level(logging.ERROR, logger="mcpsync.manager"):
            result = m.call_tool("demo", "slow", {"seconds": 0.02, "steps": 2})
            # The record is written after the handler raised, on the dispatcher thread.
            assert wait_for(lambda: sum("notification handler raised" in r.getMessage()
                                        for r in caplog.records) == 2)
        assert not result.is_error
        assert got == ["slow: step 1/2", "slow: step 2/2"]


# -- close ------------------------------------------------------------------------------------

@pytest.mark.timeout(30)
def test_close_is_idempotent_and_later_calls_raise(demo_argv: list[str],
                                                   no_leaks: None) -> None:
    m = Manager()
    m.start_server(config("demo", demo_argv))
    pid = m.client("demo").pid
    m.close()
    m.close()
    assert pid is not None and pid_gone(pid)
    for call in (lambda: m.call_tool("demo", "echo"), lambda: m.tools(),
                 lambda: m.start_all(), lambda: m.server_started("demo"),
                 lambda: m.start_server(config("x", demo_argv)), lambda: m.stop_server("demo")):
        with pytest.raises(ClosedError):
            call()


@pytest.mark.timeout(40)
def test_close_with_a_server_ignoring_sigterm_stays_in_bound(
        helper: list[str], demo_argv: list[str], no_leaks: None) -> None:
    # Each stubborn server needs ~4 s (stdin closed, 2 s, SIGTERM ignored, 2 s, SIGKILL):
    # three of them one after the other would take 12 s, so this proves they stop at once.
    m = Manager()
    stubborn = ["stubborn", "stubborn2", "stubborn3"]
    for sid in stubborn:
        m.start_server(config(sid, [*helper, "ignore-term"]))
    m.start_server(config("demo", demo_argv))
    pids = [m.client(s).pid for s in (*stubborn, "demo")]
    began = time.monotonic()
    m.close()
    took = time.monotonic() - began
    assert took < 10.5, f"close() took {took:.1f} s"
    assert all(pid is not None and pid_gone(pid) for pid in pids)


@pytest.mark.timeout(40)
def test_close_names_stragglers_in_a_warning(helper: list[str], monkeypatch: pytest.MonkeyPatch,
                                             caplog: pytest.LogCaptureFixture,
                                             no_leaks: None) -> None:
    import mcpsync.manager._manager as manager_module

    monkeypatch.setattr(manager_module, "CLOSE_TIMEOUT", 0.5)   # the server needs ~4 s
    m = Manager()
    m.start_server(config("stubborn", [*helper, "ignore-term"]))
    pid = m.client("stubborn").pid
    with caplog.at_level(logging.WARNING, logger="mcpsync.manager"):
        began = time.monotonic()
        m.close()
        assert time.monotonic() - began < 3.0
    assert any("'stubborn'" in r.getMessage() and "still stopping" in r.getMessage()
               for r in caplog.records)
    assert pid is not None and wait_for(lambda: pid_gone(pid))   # it still ends


@pytest.mark.timeout(30)
def test_every_method_is_thread_safe(demo_argv: list[str], no_leaks: None) -> None:
    errors: list[BaseException] = []
    with Manager() as m:
        m.start_server(config("demo", demo_argv))

        def work(n: int) -> None:
            try:
                for i in range(5):
                    assert m.call_tool("demo", "echo", {"text": f"{n}-{i}"}).text == f"{n}-{i}"
                    m.tools()
                    m.server_ready("demo")
                    m.server_started("demo")
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(10)]
        for t in threads:
            t.start()
        restarter = threading.Thread(target=lambda: m.start_server(config("other", demo_argv)))
        restarter.start()
        for t in threads:
            t.join()
        restarter.join()
        assert not errors
        assert m.server_started("other")


# -- the docs ---------------------------------------------------------------------------------

_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
DOC = DOCS / "manager.md"


def _doc_blocks() -> list[str]:
    return [code for code in _BLOCK.findall(DOC.read_text(encoding="utf-8"))
            if not any(line.strip() == "..." for line in code.splitlines())]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("index", range(len(_doc_blocks())))
def test_docs_examples_run(index: int, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(_doc_blocks()[index], encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=50, cwd=tmp_path)
    assert proc.returncode == 0, f"block {index + 1} failed:\n{proc.stdout}\n{proc.stderr}"


# -- config files and start_all limits ---------------------------------------------------------

@pytest.mark.timeout(30)
def test_from_config_starts_nothing_then_start_all(tmp_path: Path, helper: list[str],
                                                   no_leaks: None) -> None:
    import json

    path = tmp_path / ".mcp.json"
    path.write_text(json.dumps({"mcpServers": {
        "demo": {"command": sys.executable, "args": ["-m", "mcpsync.demo"]},
        "where": {"command": helper[0], "args": [helper[1]], "cwd": "${workspaceFolder}"},
        "off": {"command": sys.executable, "args": ["-m", "mcpsync.demo"], "disabled": True},
        "per-thread": {"command": helper[0], "args": [helper[1]], "scope": "thread",
                       "cwd": "{{worktree_root}}"},
    }}), encoding="utf-8")
    m = Manager.from_config(path, workspace_folder=str(tmp_path), environ={})
    try:
        assert [c.id for c in m.configs] == ["demo", "where", "off", "per-thread"]
        m.configs.clear()                       # a copy
        assert len(m.configs) == 4
        assert not m.server_started("demo")     # nothing started yet
        assert m.start_all() == {"demo": None, "where": None}
        assert m.call_tool("where", "cwd").text == str(tmp_path)
        assert not m.server_started("off") and not m.server_started("per-thread")
        m.start_server("off")                   # disabled only means start_all skips it
        assert m.server_started("off")
        thread_cfg = next(c for c in m.configs if c.id == "per-thread")
        m.start_thread_server("per", "t1", replace_id(thread_cfg), worktree_root=tmp_path)
        assert m.call_tool("per__t1", "cwd").text == str(tmp_path)
    finally:
        m.close()


def replace_id(cfg: ServerConfig) -> ServerConfig:
    import dataclasses

    return dataclasses.replace(cfg, id="")


def test_start_all_runs_at_most_max_parallel_starts_at_once(
        monkeypatch: pytest.MonkeyPatch, no_leaks: None) -> None:
    configs = [ServerConfig(id=f"s{i:02d}", command="unused") for i in range(20)]
    m = Manager(configs=configs)
    lock = threading.Lock()
    state = {"now": 0, "peak": 0, "calls": 0}
    barrier = threading.Barrier(16)
    names: set[str] = set()

    def fake_start(config: ServerConfig) -> None:
        with lock:
            state["now"] += 1
            state["calls"] += 1
            first = state["calls"] <= 16
            state["peak"] = max(state["peak"], state["now"])
            names.add(threading.current_thread().name)
        try:
            if first:
                barrier.wait(10)        # only passes when 16 run at the same time
            if config.id == "s05":
                raise RuntimeError("s05 failed")
        finally:
            with lock:
                state["now"] -= 1

    monkeypatch.setattr(m, "_start_project", fake_start)
    try:
        results = m.start_all()
    finally:
        m.close()
    assert state["peak"] == 16 and state["calls"] == 20
    assert isinstance(results["s05"], RuntimeError)
    assert [k for k, v in results.items() if v is not None] == ["s05"]
    assert all(name.startswith("mcpsync-start-") for name in names)


SLOW_HANDSHAKE = r'''
import json, sys, time

mode = sys.argv[1]
for line in sys.stdin:
    msg = json.loads(line)
    if msg.get("id") is None or mode == "silent":
        continue                     # server/discover is never answered: a legacy server
    if msg["method"] == "initialize":
        time.sleep(0.5)              # within the config's timeout, after the 5 s probe
        result = {"protocolVersion": msg["params"]["protocolVersion"],
                  "serverInfo": {"name": "slow", "version": "1"}, "capabilities": {}}
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}))
        sys.stdout.write("\n")
        sys.stdout.flush()
'''


@pytest.mark.timeout(40)
def test_handshake_timeout_is_the_config_timeout_plus_the_probe(tmp_path: Path,
                                                                no_leaks: None) -> None:
    """A legacy server that ignores the probe gets 5 s for it, then ``timeout`` for
    ``initialize``: the answer after 5.5 s in all is in time with ``timeout=2``, a silent
    one fails with ``timeout=0.5`` (both started at once, to pay the 5 s only once)."""
    script = tmp_path / "slow_handshake.py"
    script.write_text(SLOW_HANDSHAKE, encoding="utf-8")
    argv = [sys.executable, str(script)]
    with Manager(configs=[config("slow", [*argv, "answer"], timeout=2.0),
                          config("silent", [*argv, "silent"], timeout=0.5)]) as m:
        began = time.monotonic()
        results = m.start_all()
        took = time.monotonic() - began
        assert results["slow"] is None, results["slow"]
        assert isinstance(results["silent"], RequestTimeout), results["silent"]
        assert "0.5" in str(results["silent"])
        assert took >= 5.5 - 0.05, took     # the 5 s probe, then the config's 0.5 s
        assert m.server_started("slow") and m.server_info("slow") is not None
        assert m.list_tools("slow") == [] and m.server_ready("slow")
        assert not m.server_started("silent")
        assert m.server_ready_error("silent") is results["silent"]


PROMPTS_AND_RESOURCES = r'''
import json, sys

def send(rid, result=None, error=None):
    msg = {"jsonrpc": "2.0", "id": rid}
    msg.update({"result": result} if error is None else {"error": error})
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()

for line in sys.stdin:
    msg = json.loads(line)
    rid, method, params = msg.get("id"), msg.get("method"), msg.get("params") or {}
    if rid is None:
        continue
    if method == "initialize":
        send(rid, {"protocolVersion": params["protocolVersion"],
                   "serverInfo": {"name": "pr", "title": "Prompts", "version": "2"},
                   "instructions": "prompts and resources",
                   "capabilities": {"prompts": {}, "resources": {}}})
    elif method == "prompts/list":
        send(rid, {"prompts": [{"name": "greet", "arguments": [{"name": "who"}]}]})
    elif method == "prompts/get":
        who = params.get("arguments", {}).get("who", "?")
        send(rid, {"messages": [{"role": "user",
                                 "content": {"type": "text", "text": "hello " + who}}]})
    elif method == "resources/list":
        send(rid, {"resources": [{"uri": "memo://a", "name": "a"}]})
    elif method == "resources/read":
        send(rid, {"contents": [{"uri": params["uri"], "text": "read " + params["uri"]}]})
    else:
        send(rid, error={"code": -32601, "message": "Method not found"})
'''


@pytest.mark.timeout(30)
def test_prompts_resources_and_legacy_server_info_by_id(manager: Manager,
                                                         tmp_path: Path) -> None:
    """Calls by id reach the server; a server without tools is ready with none; ``raw`` is
    the whole ``initialize`` result as sent."""
    script = tmp_path / "pr.py"
    script.write_text(PROMPTS_AND_RESOURCES, encoding="utf-8")
    manager.start_server(config("pr", [sys.executable, str(script)]))
    assert [p.name for p in manager.list_prompts("pr")] == ["greet"]
    prompt = manager.get_prompt("pr", "greet", {"who": "you"})
    assert prompt.messages[0].content.text == "hello you"     # type: ignore[union-attr]
    assert [r.uri for r in manager.list_resources("pr")] == ["memo://a"]
    assert manager.read_resource("pr", "memo://a").contents[0].text == "read memo://a"
    info = manager.server_info("pr")
    assert info is not None and (info.name, info.title, info.version) == ("pr", "Prompts", "2")
    assert info.instructions == "prompts and resources"
    assert set(info.raw) == {"protocolVersion", "serverInfo", "instructions", "capabilities"}
    assert info.raw["serverInfo"] == {"name": "pr", "title": "Prompts", "version": "2"}
    assert info.protocol_version == info.raw["protocolVersion"]
    assert manager.list_tools("pr") == [] and manager.server_ready("pr")


@pytest.mark.timeout(30)
def test_an_http_server_has_no_stderr_and_no_process(manager: Manager,
                                                     fault_server: FaultServer) -> None:
    manager.start_server(ServerConfig(id="web", url=fault_server.url))
    assert manager.server_started("web")
    assert manager.server_stderr("web") == ""
    assert manager.client("web").pid is None
    assert manager.call_tool("web", "add", {"a": 1, "b": 2}).structured == {"sum": 3}
    names = [t.name for t in manager.list_tools("web")]
    assert "add" in names and manager.server_ready("web")
    assert manager.stop_server("web") is True and not manager.server_started("web")
