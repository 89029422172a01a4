"""``serve()``: ending, threads, draining, dispatch order, stdout protection.

In-process over ``os.pipe()`` pairs; the subprocess side is in test_server_subprocess.py.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

import pytest

from mcpsync.jsonrpc import StreamError
from mcpsync.server import Context, Server

from .helpers import PipeServer


def make_server(**kwargs: Any) -> Server:
    server = Server("t", "1", **kwargs)

    @server.tool()
    def echo(text: str) -> str:
        return text

    return server


def test_end_of_input_returns_none_after_answering_what_was_received(no_leaks: None) -> None:
    with PipeServer(make_server()) as ps:
        ps.initialize()
        for i in range(5):
            ps.send({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                     "params": {"name": "echo", "arguments": {"text": str(i)}}})
        ps.eof()
        replies = [ps.recv() for _ in range(5)]
        assert ps.recv() is None  # nothing more after serve() returned
        assert ps.wait()
    assert ps.error is None
    assert [r["result"]["content"][0]["text"] for r in replies] == ["0", "1", "2", "3", "4"]


@pytest.mark.timeout(10)
def test_stop_is_noticed_while_the_client_sends_nothing(no_leaks: None) -> None:
    stop = threading.Event()
    with PipeServer(make_server(), stop=stop) as ps:
        ps.initialize()
        started = time.monotonic()
        stop.set()
        assert ps.wait(2.0), "serve() did not return after stop"
        elapsed = time.monotonic() - started
    assert ps.error is None
    assert elapsed < 1.0, f"stop took {elapsed:.3f} s (rule: noticed within 100 ms)"


@pytest.mark.timeout(10)
def test_stop_cancels_running_handlers_and_their_output_is_dropped(no_leaks: None) -> None:
    server = Server("t", "1")
    running = threading.Event()
    saw_cancel = threading.Event()

    @server.tool()
    def wait(ctx: Context) -> str:
        running.set()
        if ctx.cancelled.wait(5):
            saw_cancel.set()
        ctx.progress(1)
        return "late"

    stop = threading.Event()
    with PipeServer(server, stop=stop) as ps:
        ps.initialize()
        ps.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                 "params": {"name": "wait", "_meta": {"progressToken": 1}}})
        assert running.wait(5)
        stop.set()
        assert ps.wait(3)
        assert saw_cancel.is_set()
        ps.eof()
        assert ps.recv(2) is None  # nothing at all was written for the request


@pytest.mark.timeout(15)
def test_handlers_that_ignore_cancellation_get_two_seconds_then_are_abandoned(
        capsys: pytest.CaptureFixture[str]) -> None:
    server = Server("t", "1")
    release = threading.Event()
    running = threading.Event()

    @server.tool()
    def stubborn() -> str:
        running.set()
        release.wait(10)
        return "too late"

    stop = threading.Event()
    with PipeServer(server, stop=stop) as ps:
        ps.initialize()
        ps.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                 "params": {"name": "stubborn"}})
        assert running.wait(5)
        started = time.monotonic()
        stop.set()
        assert ps.wait(5)
        waited = time.monotonic() - started
        release.set()
        ps.eof()
        assert ps.recv(1) is None  # the late result is never written
    assert 1.5 < waited < 4.0, waited
    assert "mcpsync-server-worker-1 still running" in capsys.readouterr().err


def test_reader_and_worker_threads_are_named_daemons_and_workers_are_joined(
        no_leaks: None) -> None:
    names: list[tuple[str, bool]] = []
    server = Server("t", "1", concurrency=3)

    @server.tool()
    def threads() -> str:
        names.extend((t.name, t.daemon) for t in threading.enumerate()
                     if t.name.startswith("mcpsync-server"))
        return "ok"

    with PipeServer(server) as ps:
        ps.initialize()
        ps.call(1, "threads")
    assert ("mcpsync-server-reader", True) in names
    for k in (1, 2, 3):
        assert (f"mcpsync-server-worker-{k}", True) in names
    # no_leaks checks that the workers are gone once serve() returned


def test_sequential_by_default_in_arrival_order() -> None:
    server = Server("t", "1")
    active = 0
    most = 0
    lock = threading.Lock()

    @server.tool()
    def step(n: int) -> int:
        nonlocal active, most
        with lock:
            active += 1
            most = max(most, active)
        time.sleep(0.005)
        with lock:
            active -= 1
        return n

    with PipeServer(server) as ps:
        ps.initialize()
        for i in range(10):
            ps.send({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                     "params": {"name": "step", "arguments": {"n": i}}})
        ids = [ps.recv()["id"] for _ in range(10)]
    assert ids == list(range(10))
    assert most == 1


@pytest.mark.timeout(10)
def test_concurrency_runs_handlers_at_once_and_may_answer_out_of_order() -> None:
    server = Server("t", "1", concurrency=2)
    barrier = threading.Barrier(2, timeout=5)
    first_done = threading.Event()

    @server.tool()
    def meet(n: int) -> int:
        barrier.wait()  # breaks (BrokenBarrierError → isError) unless both run at once
        if n == 0:
            first_done.wait(5)  # hold the first back so the second answers first
        else:
            first_done.set()
        return n

    with PipeServer(server) as ps:
        ps.initialize()
        for i in range(2):
            ps.send({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                     "params": {"name": "meet", "arguments": {"n": i}}})
        replies = [ps.recv(), ps.recv()]
    assert [r["id"] for r in replies] == [1, 0]
    assert all(not r["result"].get("isError") for r in replies)


@pytest.mark.timeout(10)
def test_reader_keeps_reading_while_the_dispatcher_is_busy() -> None:
    server = Server("t", "1")
    release = threading.Event()

    @server.tool()
    def block() -> str:
        release.wait(5)
        return "released"

    with PipeServer(server) as ps:
        ps.initialize()
        ps.send({"jsonrpc": "2.0", "id": "b", "method": "tools/call",
                 "params": {"name": "block"}})
        for i in range(200):  # beyond a pipe buffer: held in the look-ahead, not in the pipe
            ps.send({"jsonrpc": "2.0", "id": i, "method": "ping", "params": {"pad": "x" * 512}})
        release.set()
        first = ps.recv()
        rest = [ps.recv()["id"] for _ in range(200)]
    assert first["id"] == "b"
    assert rest == list(range(200))


def test_print_goes_to_stderr_while_serving_and_stdout_is_restored() -> None:
    server = Server("t", "1")
    during: list[bool] = []
    before = sys.stdout

    @server.tool()
    def talk() -> str:
        during.append(sys.stdout is sys.stderr)
        print("this must not reach the protocol stream")
        return "ok"

    with PipeServer(server) as ps:
        ps.initialize()
        reply = ps.call(1, "talk")
        ps.eof()
        assert ps.wait()
    assert reply["result"]["content"] == [{"type": "text", "text": "ok"}]
    assert during == [True]
    assert sys.stdout is before


def test_stray_responses_and_unknown_notifications_are_ignored() -> None:
    with PipeServer(make_server()) as ps:
        ps.initialize()
        ps.send({"jsonrpc": "2.0", "id": 99, "result": {}})
        ps.send({"jsonrpc": "2.0", "id": 98, "error": {"code": 1, "message": "x"}})
        ps.notify("notifications/whatever", {"x": 1})
        ps.notify("notifications/cancelled", {"requestId": 12345})
        ps.send({"jsonrpc": "2.0", "id": "p", "method": "ping"})
        assert ps.recv() == {"jsonrpc": "2.0", "id": "p", "result": {}}


def test_our_own_failures_answer_32603(capsys: pytest.CaptureFixture[str]) -> None:
    server = Server("t", "1")

    @server.tool(output_schema={"type": "object"})
    def not_json() -> Any:
        return {"x": object()}

    @server.tool()
    def bad_block() -> Any:
        return [{"type": "text", "text": float("nan")}]

    with PipeServer(server) as ps:
        ps.initialize()
        a = ps.call(1, "not_json")
        b = ps.call(2, "bad_block")
        c = ps.request(3, "ping")
    for reply in (a, b):
        assert reply["error"]["code"] == -32603
        assert len(reply["error"]["message"]) < 200
    assert c["result"] == {}
    err = capsys.readouterr().err
    assert "Traceback" in err and "field 'text' must be a string" in err


@pytest.mark.timeout(10)
def test_oversized_frame_is_fatal(capsys: pytest.CaptureFixture[str]) -> None:
    with PipeServer(make_server(max_frame_bytes=1000)) as ps:
        ps.initialize()
        ps.send_raw(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"p":"' + b"x" * 5000
                    + b'"}}\n')
        assert ps.wait(5)
    assert isinstance(ps.error, StreamError)
    lines = [line for line in capsys.readouterr().err.splitlines() if "stopped serving" in line]
    assert len(lines) == 1 and "1000" in lines[0]


@pytest.mark.timeout(10)
def test_broken_output_pipe_is_fatal() -> None:
    with PipeServer(make_server()) as ps:
        ps.initialize()
        import os
        os.close(ps.reader.fd)
        ps.reader.fd = os.open(os.devnull, os.O_RDONLY)  # keep close() happy
        ps.send({"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert ps.wait(5)
        assert isinstance(ps.error, StreamError)


@pytest.mark.timeout(10)
def test_end_of_input_waits_for_running_work_then_cancels_it(
        monkeypatch: pytest.MonkeyPatch, no_leaks: None) -> None:
    from mcpsync.server import _loop as _server_loop

    monkeypatch.setattr(_server_loop, "DRAIN_SECONDS", 0.3)
    server = Server("t", "1")
    running = threading.Event()
    cancelled = threading.Event()

    @server.tool()
    def quick() -> str:
        time.sleep(0.1)  # still running when input ends: must be answered
        return "quick"

    @server.tool()
    def forever(ctx: Context) -> str:
        running.set()
        if ctx.cancelled.wait(10):
            cancelled.set()
        return "never written"

    with PipeServer(server) as ps:
        ps.initialize()
        ps.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "quick"}})
        ps.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                 "params": {"name": "forever"}})
        ps.eof()
        assert ps.recv()["id"] == 1
        assert running.wait(5)
        assert ps.wait(5)
        assert cancelled.is_set()  # the end of serve() set its event
        assert ps.recv() is None  # and its late result was not written
    assert ps.error is None
