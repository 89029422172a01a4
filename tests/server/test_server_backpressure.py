"""``mcpsync.Server`` back-pressure: a flood of pipelined requests is held back by the pipe.

The server queues at most ``max_queued`` requests and ``max_queued_bytes`` of lines, reads as
much again ahead, and then stops reading. Answers stay correct and in order, and a cancellation
for a running handler is still seen while the queue is full.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from helpers import DOCS

from mcpsync.server import Context, Server

from .helpers import (
    PipeServer,
    _LineReader,
    initialize_params,
    json_lines,
    run_script,
)

FLOOD_BYTES = 10 * 1000 * 1000


def _peak_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM in /proc/<pid>/status")


def _echo(rid: int, text: str) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                       "params": {"name": "echo", "arguments": {"text": text}}}).encode() + b"\n"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/<pid>/status")
@pytest.mark.timeout(120)
def test_ten_megabytes_pipelined_stay_under_60_mb_resident() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "mcpsync.demo"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": initialize_params("2025-11-25")}
        proc.stdin.write(json.dumps(init).encode() + b"\n")
        proc.stdin.flush()
        reader = _LineReader(proc.stdout.fileno())
        assert json.loads(reader.readline(10) or b"null")["id"] == 0
        lines, size = [], 0
        while size < FLOOD_BYTES:   # small requests: parsed, they cost ~30x their size
            line = _echo(len(lines) + 1, f"t{len(lines) + 1}" + "x" * 80)
            lines.append(line)
            size += len(line)
        stdin = proc.stdin

        def flood() -> None:
            stdin.write(b"".join(lines))
            stdin.flush()

        writer = threading.Thread(target=flood, name="test-flood", daemon=True)
        writer.start()
        for rid in range(1, len(lines) + 1):
            raw = reader.readline(30)
            assert raw is not None, f"no answer to request {rid}"
            message = json.loads(raw)
            assert message["id"] == rid   # in order
            assert message["result"]["content"][0]["text"] == f"t{rid}" + "x" * 80
        writer.join(10)
        peak = _peak_kib(proc.pid)
        print(f"{len(lines)} requests, {size} bytes: server peak {peak / 1024:.1f} MiB")
        assert peak < 60 * 1024, f"the server peaked at {peak / 1024:.0f} MiB resident"
    finally:
        proc.stdin.close()
        proc.wait(10)
        proc.stdout.close()


def _wait_until(pred: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _blocking_server(**kwargs: Any) -> tuple[Server, threading.Event, list[str]]:
    """``block`` runs until cancelled or released; ``seen`` gets "started", "cancelled"."""
    server = Server("t", "1", concurrency=1, **kwargs)
    release = threading.Event()
    seen: list[str] = []

    @server.tool()
    def block(ctx: Context) -> str:
        seen.append("started")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if ctx.cancelled.wait(0.01):
                seen.append("cancelled")
                return "cancelled"
            if release.is_set():
                return "released"
        return "never cancelled"

    @server.tool()
    def echo(text: str) -> str:
        return text

    return server, release, seen


def test_a_cancel_reaches_the_running_handler_while_the_queue_is_full(no_leaks: None) -> None:
    server, _release, seen = _blocking_server(max_queued=2)
    with PipeServer(server) as ps:
        ps.initialize()
        ps.send({"jsonrpc": "2.0", "id": "b", "method": "tools/call",
                 "params": {"name": "block"}})
        assert _wait_until(lambda: seen == ["started"])
        for i in range(20):   # 2 fill the queue, the rest wait behind them
            ps.send_raw(_echo(i, f"e{i}"))
        started = time.monotonic()
        ps.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                 "params": {"requestId": "b"}})
        answers = [ps.recv(timeout=5) for _ in range(20)]
        elapsed = time.monotonic() - started
    assert seen == ["started", "cancelled"]
    # No answer for the cancelled call; every other one, in order, correct.
    assert [a["id"] for a in answers] == list(range(20))
    assert [a["result"]["content"][0]["text"] for a in answers] == [f"e{i}" for i in range(20)]
    assert elapsed < 2, f"the cancellation took {elapsed:.2f} s to reach the handler"


def test_a_flood_is_pushed_back_through_the_pipe(no_leaks: None) -> None:
    limit = 64 * 1024
    server, release, _seen = _blocking_server(max_queued=2, max_queued_bytes=limit)
    with PipeServer(server) as ps:
        ps.initialize()
        ps.send({"jsonrpc": "2.0", "id": "b", "method": "tools/call",
                 "params": {"name": "block"}})
        lines = [_echo(i, "x" * 1000) for i in range(2000)]   # 2 MB
        written = [0]

        def flood() -> None:
            for line in lines:
                ps.send_raw(line)   # blocks once the server stops reading
                written[0] += len(line)

        writer = threading.Thread(target=flood, name="test-flood", daemon=True)
        writer.start()
        time.sleep(1.0)
        held = written[0]
        print(f"the writer was held back after {held} of {sum(map(len, lines))} bytes")
        # queue + look-ahead + what the pipe holds (64 KiB on Linux) + the line in flight
        assert held <= 2 * limit + 64 * 1024 + 3 * len(lines[0]) + 65536, held
        assert writer.is_alive()
        release.set()
        first = ps.recv(timeout=10)
        answers = [ps.recv(timeout=10) for _ in lines]
        writer.join(10)
    assert first["id"] == "b" and first["result"]["content"][0]["text"] == "released"
    assert [a["id"] for a in answers] == list(range(len(lines)))


@pytest.mark.parametrize("field", ["max_queued", "max_queued_bytes"])
@pytest.mark.parametrize("value", [0, -1, 1.5, True])
def test_bad_bounds_are_refused(field: str, value: Any) -> None:
    with pytest.raises(ValueError, match=f"{field} must be a positive integer"):
        Server("t", "1", **{field: value})


def test_default_bounds_follow_concurrency() -> None:
    server = Server("t", "1", concurrency=3)
    assert server.max_queued == 6
    assert server.max_queued_bytes == 4 * 1024 * 1024


def test_the_bounded_server_in_docs_server_md_runs() -> None:
    doc = (DOCS / "server.md").read_text()
    block = doc.split("```python\n  # bounded_server.py", 1)[1].split("```", 1)[0]
    source = textwrap.dedent("  # bounded_server.py" + block)
    lines = [{"jsonrpc": "2.0", "id": 0, "method": "initialize",
              "params": initialize_params("2025-11-25")}]
    lines += [json.loads(_echo(i, f"e{i}")) for i in range(1, 101)]
    proc = run_script(source, lines)
    assert proc.returncode == 0, proc.stderr.decode()
    out = json_lines(proc.stdout)
    assert {m["id"] for m in out} == set(range(101))
    assert all(m["result"]["content"][0]["text"] == f"e{m['id']}" for m in out[1:])
