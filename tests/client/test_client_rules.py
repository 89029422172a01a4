"""Client rules proved against real server processes: futures, progress ordering,
per-call reset-on-progress, Ctrl-C cancelling on the wire, 50 threads at once, a
server killed under many pending calls, asyncio, error attributes and logging hygiene.

``peers/wire_server.py`` writes to stderr every message that reached it, so the tests read
the wire from the server's side through ``client.stderr_tail()``.
"""

from __future__ import annotations

import _thread
import asyncio
import concurrent.futures
import json
import logging
import math
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import PEERS

import mcpsync

pytestmark = pytest.mark.timeout(60)

WIRE = [sys.executable, str(PEERS / "wire_server.py")]
SCRIPTED = [sys.executable, str(PEERS / "scripted_server.py")]
DEMO = [sys.executable, "-m", "mcpsync.demo"]


def wait_for(check: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def stderr_lines(client: mcpsync.Client, prefix: str) -> list[str]:
    return [line for line in client.stderr_tail().splitlines() if line.startswith(prefix)]


# -- futures -------------------------------------------------------------------

def test_submit_tool_resolves_to_a_call_tool_result(no_leaks: None) -> None:
    with mcpsync.connect(DEMO) as client:
        future = client.submit_tool("add", {"a": 2, "b": 3})
        assert isinstance(future, concurrent.futures.Future)
        assert isinstance(future.request_id, int)
        result = future.result(10)
        assert isinstance(result, mcpsync.CallToolResult)
        assert result.structured == {"sum": 5}
        assert future.cancel() is False          # already done
        assert not future.cancelled()
        failed = client.submit_tool("fail", raise_on_error=True)
        with pytest.raises(mcpsync.ToolError) as info:
            failed.result(10)
        assert info.value.result.is_error
        assert str(info.value).startswith("calling tool 'fail' on server ")
        assert client.submit_tool("fail").result(10).is_error   # not raised by default
        raw = client.submit("tools/call", {"name": "echo", "arguments": {"text": "r"}})
        assert raw.result(10)["content"][0]["text"] == "r"


def test_future_cancel_cancels_on_the_wire(no_leaks: None) -> None:
    with mcpsync.connect(WIRE, name="wire") as client:
        future = client.submit_tool("hang")
        rid = future.request_id
        assert wait_for(lambda: bool(stderr_lines(client, f"got tools/call hang {rid}")))
        assert future.cancel() is True
        assert future.cancelled()
        with pytest.raises(mcpsync.Cancelled) as info:
            future.result(5)
        assert isinstance(info.value, concurrent.futures.CancelledError)
        assert info.value.server == "wire" and info.value.method == "tools/call"
        assert str(info.value).startswith("calling tool 'hang' on server 'wire': ")
        assert wait_for(lambda: bool(stderr_lines(client, f"cancelled {rid} ")))
        assert client.call_tool("echo", {"text": "usable"}).text == "usable"


def test_submit_tool_validates_output_like_call_tool() -> None:
    with mcpsync.connect([*SCRIPTED, "modern"]) as client:
        client.list_tools()
        assert client.submit_tool("u", {"structured": {"n": 1}}).result(10).structured == {
            "n": 1}
        with pytest.raises(mcpsync.OutputValidationError, match="outputSchema at n"):
            client.submit_tool("u", {"structured": {"n": "x"}}).result(10)


def test_submit_tool_runs_the_input_required_loop(no_leaks: None) -> None:
    threads: list[str] = []
    first_read = threading.Event()

    def elicit(request: Any) -> dict[str, Any]:
        threads.append(threading.current_thread().name)
        # The second round is not sent before the test has read the first one's id (else
        # a fast server lets the caller read the second round's id as the "first").
        first_read.wait(10)
        return {"action": "accept", "content": {"name": "Ada"}}

    with mcpsync.connect([*SCRIPTED, "modern"], elicitation=elicit) as client:
        future = client.submit_tool("t", {"mode": "one-round"})
        first = future.request_id   # the first round's, or None once it was answered
        first_read.set()
        result = future.result(10)
        assert json.loads(result.text) == {"who": {"action": "accept",
                                                   "content": {"name": "Ada"}}}
        assert future.request_id is not None and future.request_id != first  # a new round
        assert threads and threads[0].startswith("mcpsync-input-")
        # Bounded like the blocking call.
        bounded = client.submit_tool("t", {"mode": "rounds"})
        with pytest.raises(mcpsync.InputRoundsExceeded) as info:
            bounded.result(10)
        assert info.value.method == "tools/call" and info.value.server


def test_submitted_future_works_with_asyncio() -> None:
    with mcpsync.connect(DEMO) as client:
        async def main() -> Any:
            blocking = client.call_tool("echo", {"text": "in loop"}).text  # blocks, no error
            awaited = await asyncio.wrap_future(client.submit_tool("add", {"a": 1, "b": 1}))
            return blocking, awaited.structured

        assert asyncio.run(main()) == ("in loop", {"sum": 2})


# -- progress ordering and reset per call ----------------------------------

@pytest.mark.parametrize("how", ["call_tool", "submit_tool"])
def test_every_progress_callback_has_run_when_the_call_returns(how: str) -> None:
    seen: list[float] = []

    def progress(done: float, total: float | None, message: str | None) -> None:
        time.sleep(0.005)        # slower than the server: the answer arrives first
        seen.append(done)

    with mcpsync.connect(WIRE, name="wire") as client:
        for _ in range(3):
            seen.clear()
            if how == "call_tool":
                result = client.call_tool("progress", {"n": 20}, progress=progress)
            else:
                result = client.submit_tool("progress", {"n": 20}, progress=progress).result(10)
            assert result.text == "done"
            assert seen == [float(i) for i in range(1, 21)]


def test_reset_timeout_on_progress_is_overridable_per_call() -> None:
    with mcpsync.connect(DEMO, era="legacy") as client:
        with pytest.raises(mcpsync.RequestTimeout):
            client.call_tool("slow", {"seconds": 1.2, "steps": 12}, timeout=0.4)
        result = client.call_tool("slow", {"seconds": 1.2, "steps": 12}, timeout=0.4,
                                  reset_timeout_on_progress=True)
        assert not result.is_error
    with (mcpsync.connect(DEMO, era="legacy", reset_timeout_on_progress=True) as client,
          pytest.raises(mcpsync.RequestTimeout)):
        client.call_tool("slow", {"seconds": 1.2, "steps": 12}, timeout=0.4,
                         reset_timeout_on_progress=False)


# -- Ctrl-C, many threads, a dead server -------------------------------------

@pytest.mark.parametrize("with_progress", [False, True])
def test_ctrl_c_cancels_on_the_wire_and_the_client_stays_usable(with_progress: bool) -> None:
    assert threading.current_thread() is threading.main_thread()
    with mcpsync.connect(WIRE, name="wire") as client:
        def interrupt() -> None:
            wait_for(lambda: bool(stderr_lines(client, "got tools/call hang")))
            _thread.interrupt_main()

        timer = threading.Thread(target=interrupt, name="test-interrupter")
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            client.call_tool("hang", timeout=30,
                             progress=(lambda *a: None) if with_progress else None)
        timer.join()
        rid = stderr_lines(client, "got tools/call hang")[0].split()[-1]
        assert wait_for(lambda: bool(stderr_lines(client, f"cancelled {rid} interrupted")))
        assert client.call_tool("echo", {"text": "still here"}).text == "still here"


def test_fifty_threads_at_once_through_call_tool() -> None:
    with mcpsync.connect(DEMO) as client:
        barrier = threading.Barrier(50)
        results: dict[int, str] = {}
        errors: list[BaseException] = []

        def work(i: int) -> None:
            try:
                barrier.wait(10)
                results[i] = client.call_tool("echo", {"text": f"t{i}"}).text
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(i,), name=f"test-{i}")
                   for i in range(50)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not errors
        assert results == {i: f"t{i}" for i in range(50)}


def test_server_killed_mid_call_fails_every_pending_call_at_once(no_leaks: None) -> None:
    with mcpsync.connect(WIRE, name="wire") as client:
        errors: list[BaseException] = []
        ended: list[float] = []

        def hang() -> None:
            try:
                client.call_tool("hang", timeout=30)
            except BaseException as exc:
                errors.append(exc)
            ended.append(time.monotonic())

        threads = [threading.Thread(target=hang, name=f"test-hang-{i}") for i in range(5)]
        for t in threads:
            t.start()
        assert wait_for(lambda: len(stderr_lines(client, "got tools/call hang")) == 5)
        died = time.monotonic()
        with pytest.raises(mcpsync.ServerExited) as info:
            client.call_tool("die")
        for t in threads:
            t.join(10)
        assert len(errors) == 5 and max(ended) - died < 5   # not their 30 s timeouts
        for exc in [*errors, info.value]:
            assert isinstance(exc, mcpsync.ServerExited)
            assert exc.exit_code == 3 and exc.maybe_executed
            assert "dying line 29" in exc.stderr_tail
            assert exc.server == "wire" and exc.method == "tools/call"
            assert "dying line 29" in str(exc) and "exited with code 3" in str(exc)
        assert str(errors[0]).startswith("calling tool 'hang' on server 'wire': ")
        assert str(info.value).startswith("calling tool 'die' on server 'wire': ")
        with pytest.raises(mcpsync.ServerExited):   # legacy: the session state is gone
            client.call_tool("echo", {"text": "x"})


# -- errors and logging hygiene --------------------------------------------

def test_client_errors_carry_server_method_and_prefix() -> None:
    with mcpsync.connect(DEMO, name="demo", era="legacy") as client:
        with pytest.raises(mcpsync.RequestTimeout) as timeout:
            client.call_tool("slow", {"seconds": 5, "steps": 1}, timeout=0.1)
        with pytest.raises(mcpsync.RemoteError) as remote:
            client.call_tool("nope")
        with pytest.raises(mcpsync.CapabilityNotSupported) as capability:
            client.get_prompt("p")
        with pytest.raises(mcpsync.ConfigError) as config:
            client.call_tool("add", {"a": 1, "b": 2}, timeout=-1)
    assert str(timeout.value).startswith("calling tool 'slow' on server 'demo': ")
    assert str(remote.value).startswith("calling tool 'nope' on server 'demo': ")
    assert str(config.value).startswith("calling tool 'add' on server 'demo': ")
    assert "on server 'demo'" in str(capability.value)
    for exc in (timeout.value, remote.value, config.value):
        assert exc.server == "demo" and exc.method == "tools/call"
    assert capability.value.server == "demo" and capability.value.method == "prompts/get"
    with pytest.raises(mcpsync.ClosedError) as closed:
        client.call_tool("add", {"a": 1, "b": 2})
    assert closed.value.server == "demo"
    assert str(closed.value).startswith("calling tool 'add' on server 'demo': ")


def test_logging_only_under_mcpsync_with_a_null_handler(
        caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    package = logging.getLogger("mcpsync")
    assert any(isinstance(h, logging.NullHandler) for h in package.handlers)
    root_handlers = list(logging.getLogger().handlers)
    caplog.set_level(logging.DEBUG)
    with mcpsync.connect(DEMO, name="log demo", era="legacy", log_level="debug") as client:
        client.call_tool("slow", {"seconds": 0.05, "steps": 2})
        with pytest.raises(mcpsync.RequestTimeout):
            client.call_tool("slow", {"seconds": 5, "steps": 1}, timeout=0.1)
    names = {record.name for record in caplog.records}
    assert names, "expected some DEBUG records"
    assert all(n == "mcpsync" or n.startswith("mcpsync.") for n in names), names
    assert "mcpsync.server.log_demo" in names     # server log, name sanitised
    assert list(logging.getLogger().handlers) == root_handlers   # root untouched
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""   # never print


def test_infinite_timeout_per_call_is_accepted() -> None:
    with mcpsync.connect(DEMO, era="legacy") as client:
        assert client.call_tool("echo", {"text": "x"}, timeout=math.inf).text == "x"


# -- the handshake's requests are never cancelled --------------------------------

def test_timed_out_initialize_is_not_cancelled_and_closes_the_connection(
        tmp_path: Path, no_leaks: None) -> None:
    log = tmp_path / "log"
    with pytest.raises(mcpsync.RequestTimeout) as info:
        mcpsync.connect([*SCRIPTED, "silent-init"], era="legacy", timeout=0.3,
                        env={"SCRIPTED_LOG": str(log)})
    assert info.value.method == "initialize"
    methods = [json.loads(line).get("method") for line in log.read_text().splitlines()]
    assert methods == ["initialize"]          # no notifications/cancelled, no probe


@pytest.mark.parametrize(("version", "batches"), [("2025-03-26", True), ("2025-06-18", False)])
def test_arrays_are_accepted_only_after_2025_03_26(version: str, batches: bool) -> None:
    with mcpsync.connect(DEMO, protocol_version=version) as client:
        assert client.protocol_version == version
        assert client._session.allow_batch is batches


def test_ctrl_c_while_waiting_on_a_submitted_future_cancels_it() -> None:
    assert threading.current_thread() is threading.main_thread()
    with mcpsync.connect(WIRE, name="wire") as client:
        waiting = threading.Event()

        def interrupt() -> None:
            waiting.wait(5)
            wait_for(lambda: bool(stderr_lines(client, "got tools/call hang")))
            # The interrupt must land inside future.result(), not in the lines before it
            # (a simulated Ctrl-C is raised wherever the main thread happens to be).
            time.sleep(0.2)
            _thread.interrupt_main()   # a notebook's "interrupt kernel": no real signal

        timer = threading.Thread(target=interrupt, name="test-interrupter")
        timer.start()
        future = client.submit_tool("hang", timeout=30)
        rid = future.request_id
        with pytest.raises(KeyboardInterrupt):
            waiting.set()
            future.result()
        timer.join()
        assert future.cancelled()
        assert wait_for(lambda: bool(stderr_lines(client, f"cancelled {rid} interrupted")))
        with pytest.raises(TimeoutError):   # a bounded wait still times out on time
            client.submit_tool("hang").result(0.3)
        assert client.call_tool("echo", {"text": "usable"}).text == "usable"
