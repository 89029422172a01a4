"""``mcpsync.connect(server)``: a ``mcpsync.Server`` served in this process over the in-memory
transport, in both eras, with no subprocess and no stdout redirection."""

from __future__ import annotations

import io
import json
import sys
import threading
import time
from typing import Any

import pytest
from helpers import open_fds

import mcpsync
from mcpsync.demo import build_server
from mcpsync.errors import ClosedError, RemoteError, RequestTimeout, ToolError
from mcpsync.server import Context, Server

pytestmark = pytest.mark.timeout(60)


def _memory_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("mcpsync-memory-")]


@pytest.mark.parametrize(("era", "expected"), [("legacy", "legacy"), ("modern", "modern"),
                                               ("auto", "modern")])
def test_both_eras_list_and_call(no_leaks: None, era: str, expected: str) -> None:
    server = build_server()
    with mcpsync.connect(server, era=era) as client:
        assert client.era == expected
        assert client.server_info.name == "mcpsync-demo"
        assert [tool.name for tool in client.list_tools()] == ["echo", "add", "slow", "fail"]
        assert client.call_tool("echo", {"text": "héllo"}).text == "héllo"
        assert client.call_tool("add", {"a": 2, "b": 3}).structured == {"sum": 5}
        names = _memory_threads()
        assert "mcpsync-memory-reader-mcpsync-demo" in names
        assert "mcpsync-memory-worker-mcpsync-demo-1" in names
    assert _memory_threads() == []


def test_legacy_protocol_version_pinned(no_leaks: None) -> None:
    with mcpsync.connect(build_server(), protocol_version="2025-03-26") as client:
        assert (client.era, client.protocol_version) == ("legacy", "2025-03-26")
        assert client.call_tool("echo", {"text": "x"}).text == "x"


def test_progress_reaches_the_callback_before_the_result(no_leaks: None) -> None:
    seen: list[tuple[float, Any, Any]] = []
    with mcpsync.connect(build_server()) as client:
        result = client.call_tool("slow", {"seconds": 0.05, "steps": 5},
                                  progress=lambda p, t, m: seen.append((p, t, m)))
    assert result.text == "done: 5 steps in 0.05 s"
    assert [p for p, _, _ in seen] == [1, 2, 3, 4, 5]
    assert seen[-1] == (5, 5, "step 5/5")


def test_a_timed_out_call_is_cancelled_in_the_server(no_leaks: None) -> None:
    server = Server("cancel-me", "1")
    cancelled = threading.Event()

    @server.tool()
    def wait(ctx: Context) -> str:
        if ctx.cancelled.wait(10):
            cancelled.set()
        return "late"

    with mcpsync.connect(server) as client:
        started = time.monotonic()
        with pytest.raises(RequestTimeout, match="cancel-me") as info:
            client.call_tool("wait", {}, timeout=0.2)
        assert time.monotonic() - started < 2
        assert "cancelled" in str(info.value)
        assert cancelled.wait(5), "the handler never saw its cancellation"
    assert _memory_threads() == []


def test_future_cancel_reaches_the_handler(no_leaks: None) -> None:
    server = Server("futures", "1")
    cancelled = threading.Event()
    running = threading.Event()

    @server.tool()
    def wait(ctx: Context) -> str:
        running.set()
        if ctx.cancelled.wait(10):
            cancelled.set()
        return "late"

    with mcpsync.connect(server) as client:
        future = client.submit_tool("wait", {})
        assert running.wait(5)
        assert future.cancel()
        assert cancelled.wait(5)


def test_errors_tool_error_and_unknown_tool(no_leaks: None) -> None:
    with mcpsync.connect(build_server()) as client:
        result = client.call_tool("fail", {"message": "boom"})
        assert result.is_error and "boom" in result.text
        with pytest.raises(ToolError, match="boom"):
            client.call_tool("fail", {"message": "boom"}, raise_on_error=True)
        with pytest.raises(RemoteError, match="nope"):
            client.call_tool("nope", {})
        assert client.call_tool("echo", {"text": "still usable"}).text == "still usable"
    with pytest.raises(ClosedError):
        client.call_tool("echo", {"text": "x"})


def test_fifty_threads_at_once(no_leaks: None) -> None:
    server = build_server(concurrency=4)
    errors: list[BaseException] = []
    with mcpsync.connect(server) as client:

        def worker(k: int) -> None:
            try:
                for j in range(20):
                    text = f"{k}-{j}"
                    assert client.call_tool("echo", {"text": text}).text == text
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(k,), name=f"caller-{k}")
                   for k in range(50)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert not any(thread.is_alive() for thread in threads)
        assert len([n for n in _memory_threads() if "-worker-" in n]) == 4
    assert errors == []


def test_no_thread_or_fd_left_after_many_connections(no_leaks: None) -> None:
    server = build_server()
    with mcpsync.connect(server) as client:   # warm up imports and lazy objects
        client.call_tool("echo", {"text": "x"})
    fds = open_fds()
    threads = {t.name for t in threading.enumerate()}
    for _ in range(10):
        with mcpsync.connect(server, era="modern") as client:
            client.call_tool("echo", {"text": "x"})
    assert open_fds() == fds
    assert {t.name for t in threading.enumerate()} <= threads


def test_print_in_a_handler_goes_to_the_real_stdout(capfd: pytest.CaptureFixture[str]) -> None:
    """No stdout guard: sys.stdout and fd 1 are left as they are (a notebook keeps its output)."""
    server = Server("printer", "1")

    @server.tool()
    def shout(text: str) -> str:
        print("from the handler:", text)
        return text.upper()

    stdout_before = sys.stdout
    with mcpsync.connect(server) as client:
        assert sys.stdout is stdout_before
        assert client.call_tool("shout", {"text": "hi"}).text == "HI"
    out, err = capfd.readouterr()
    assert "from the handler: hi" in out
    assert "from the handler" not in err


def test_the_same_server_still_serves_afterwards(no_leaks: None) -> None:
    server = build_server()
    with mcpsync.connect(server) as client:
        assert client.call_tool("echo", {"text": "first"}).text == "first"
    # Registering and serving are still open: connect() is not serve().
    server.register_tool({"name": "later"}, lambda arguments, ctx: "ok")
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/list",
               "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                                    "io.modelcontextprotocol/clientCapabilities": {}}}}
    stdin = io.BytesIO(json.dumps(request).encode() + b"\n")
    stdout = io.BytesIO()
    server.serve(stdin=stdin, stdout=stdout)
    answer = json.loads(stdout.getvalue().splitlines()[0])
    assert answer["id"] == 1
    assert [t["name"] for t in answer["result"]["tools"]] == ["echo", "add", "slow", "fail",
                                                               "later"]


def test_every_connection_serves_the_live_registry(no_leaks: None) -> None:
    server = Server("growing", "1")
    server.register_tool({"name": "one"}, lambda arguments, ctx: "1")
    with mcpsync.connect(server, name="first") as first:
        server.register_tool({"name": "two"}, lambda arguments, ctx: "2")
        with mcpsync.connect(server, name="second") as second:
            assert [t.name for t in first.list_tools()] == ["one", "two"]
            assert [t.name for t in second.list_tools()] == ["one", "two"]
            assert "mcpsync-memory-reader-second" in _memory_threads()
