"""``mcpsync.Server`` while a write is blocked because the client does not read its stdout.

A response larger than the pipe buffer blocks its worker in ``write`` until the client reads.
A cancellation that arrives meanwhile must neither wait for that write (the reader would then
hold the loop's lock, and the worker could not report the broken pipe under it: a deadlock)
nor let a frame whose write had not begun slip out after it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any

import pytest

from mcpsync.server import Context, Server

from .helpers import PipeServer, _LineReader, initialize_params

_BIG_SERVER = textwrap.dedent("""
    from mcpsync.server import Server

    server = Server("big", "1")

    @server.tool()
    def big() -> str:
        return "x" * (1 << 20)  # far larger than a pipe buffer

    server.serve()
""")


def _line(message: Any) -> bytes:
    return json.dumps(message).encode() + b"\n"


@pytest.mark.timeout(30)
def test_a_cancel_during_a_blocked_write_does_not_deadlock_the_server() -> None:
    proc = subprocess.Popen([sys.executable, "-c", _BIG_SERVER], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(_line({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                "params": initialize_params("2025-06-18")}))
        answer = _LineReader(proc.stdout.fileno()).readline(10)
        assert answer is not None and json.loads(answer)["id"] == 0
        proc.stdin.write(_line({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        proc.stdin.write(_line({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                "params": {"name": "big", "arguments": {}}}))
        time.sleep(0.5)  # the worker is now blocked writing 1 MiB that nobody reads
        proc.stdin.write(_line({"jsonrpc": "2.0", "method": "notifications/cancelled",
                                "params": {"requestId": 1}}))
        time.sleep(0.3)  # the reader has applied the cancel by now
        proc.stdout.close()  # the client goes away: the blocked write fails with EPIPE
        proc.stdin.close()
        started = time.monotonic()
        code = proc.wait(10)
        elapsed = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stderr is not None
        stderr = proc.stderr.read().decode()
        proc.stderr.close()
    assert code != 0, "serve() should end with the broken pipe it met"
    assert "stopped serving" in stderr and "Broken pipe" in stderr, stderr
    assert elapsed < 3.0, f"the server took {elapsed:.2f} s to notice its client had gone"


@pytest.mark.timeout(30)
def test_a_cancel_drops_a_frame_still_waiting_behind_a_blocked_write(no_leaks: None) -> None:
    server = Server("t", "1", concurrency=2)
    about_to_report = threading.Event()
    reported = threading.Event()

    @server.tool()
    def big() -> str:
        return "x" * (1 << 20)

    @server.tool()
    def reporter(ctx: Context) -> str:
        about_to_report.set()
        ctx.progress(1, 2)  # waits for the gate while big's answer blocks the pipe
        reported.set()
        ctx.cancelled.wait(10)
        return "after the cancel"

    with PipeServer(server) as ps:
        ps.initialize()
        ps.send({"jsonrpc": "2.0", "id": "big", "method": "tools/call",
                 "params": {"name": "big"}})
        time.sleep(0.5)  # big's worker is blocked writing; we read nothing yet
        ps.send({"jsonrpc": "2.0", "id": "r", "method": "tools/call",
                 "params": {"name": "reporter", "_meta": {"progressToken": "p"}}})
        assert about_to_report.wait(5)
        time.sleep(0.3)  # the progress frame is queued behind the blocked write
        ps.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                 "params": {"requestId": "r"}})
        time.sleep(0.3)  # the reader applies it without waiting for any write
        assert not reported.is_set()
        started = time.monotonic()
        first = ps.recv(timeout=10)  # now read: big's answer goes out, then nothing for r
        assert reported.wait(5)
        ps.eof()
        rest = []
        while (message := ps.recv(timeout=10)) is not None:
            rest.append(message)
        elapsed = time.monotonic() - started
    assert ps.error is None
    assert first["id"] == "big" and len(first["result"]["content"][0]["text"]) == 1 << 20
    assert rest == [], f"written for the cancelled request: {rest}"
    assert elapsed < 5.0


@pytest.mark.timeout(30)
def test_the_answers_stay_complete_and_in_order_across_many_pipelined_calls() -> None:
    """The intake decodes outside its lock and wakes one worker per frame: nothing is lost."""
    proc = subprocess.Popen([sys.executable, "-m", "mcpsync.demo"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, bufsize=0)
    assert proc.stdin is not None and proc.stdout is not None
    count = 3000
    try:
        proc.stdin.write(_line({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                "params": initialize_params("2025-06-18")}))
        proc.stdin.write(_line({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        flood = b"".join(_line({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                                "params": {"name": "echo", "arguments": {"text": f"t{i}"}}})
                         for i in range(1, count + 1))
        writer = threading.Thread(target=proc.stdin.write, args=(flood,), daemon=True)
        writer.start()
        reader = _LineReader(proc.stdout.fileno())
        answers = [json.loads(reader.readline(10) or b"null") for _ in range(count + 1)]
        writer.join(10)
        proc.stdin.close()
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    assert [a["id"] for a in answers] == list(range(count + 1))
    assert [a["result"]["content"][0]["text"] for a in answers[1:]] == [
        f"t{i}" for i in range(1, count + 1)]
