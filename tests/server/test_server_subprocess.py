"""``serve()`` on the process's real stdin/stdout, and the demo, in subprocesses."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import pytest
from helpers import DOCS

from .helpers import _LineReader, initialize_params, json_lines, run_script

NOISY_SERVER = r'''
import os, subprocess, sys
from mcpsync.server import Server

server = Server("noisy", "1")

@server.tool()
def noisy() -> str:
    print("print() from a tool")
    sys.stdout.write("sys.stdout.write from a tool\n")
    os.write(1, b"os.write(1) from a tool\n")
    sys.__stdout__.write("sys.__stdout__ from a tool\n")  # buffered, flushed to stderr
    subprocess.run(["sh", "-c", "echo child process output"], check=True)
    return "clean"

server.serve()
print("AFTER serve() returned")
'''


def init_msg(id: Any = 0, version: str = "2025-11-25") -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id, "method": "initialize",
            "params": initialize_params(version)}


def call_msg(id: Any, name: str, arguments: Any = None, meta: Any = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments or {}}
    if meta is not None:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}


@pytest.mark.timeout(30)
def test_print_and_child_output_cannot_corrupt_the_real_stdout() -> None:
    proc = run_script(NOISY_SERVER, [init_msg(), call_msg(1, "noisy"), call_msg(2, "noisy")])
    assert proc.returncode == 0, proc.stderr.decode()
    *protocol, last = proc.stdout.splitlines()
    assert last == b"AFTER serve() returned"  # fd 1 and sys.stdout restored on return
    replies = [json.loads(line) for line in protocol]  # every other line is a JSON frame
    assert [r["id"] for r in replies] == [0, 1, 2]
    assert replies[1]["result"]["content"] == [{"type": "text", "text": "clean"}]
    err = proc.stderr.decode()
    for noise in ("print() from a tool", "sys.stdout.write from a tool",
                  "os.write(1) from a tool", "child process output",
                  "sys.__stdout__ from a tool"):
        assert err.count(noise) == 2, (noise, err)


@pytest.mark.timeout(30)
def test_demo_answers_at_end_of_input_and_exits_zero(demo_argv: list[str]) -> None:
    lines = [init_msg(), {"jsonrpc": "2.0", "id": "lv", "method": "logging/setLevel",
                          "params": {"level": "info"}},
             call_msg(1, "echo", {"text": "hi"}), call_msg(2, "add", {"a": 1, "b": 2}),
             call_msg(3, "fail"), call_msg(4, "slow", {"seconds": 0.01, "steps": 2},
                                           meta={"progressToken": "p"})]
    data = b"".join(json.dumps(m).encode() + b"\n" for m in lines)
    proc = subprocess.run(demo_argv, input=data, capture_output=True, timeout=20, check=False)
    assert proc.returncode == 0, proc.stderr.decode()
    out = json_lines(proc.stdout)
    by_id = {m["id"]: m for m in out if "id" in m}
    assert by_id[0]["result"]["serverInfo"]["name"] == "mcpsync-demo"
    assert by_id[0]["result"]["instructions"]
    assert by_id[1]["result"]["content"] == [{"type": "text", "text": "hi"}]
    assert by_id[2]["result"] == {"content": [{"type": "text", "text": '{"sum":3}'}],
                                  "structuredContent": {"sum": 3}}
    assert by_id[3]["result"] == {"content": [{"type": "text",
                                               "text": "RuntimeError: this tool always fails"}],
                                  "isError": True}
    progress = [m["params"] for m in out if m.get("method") == "notifications/progress"]
    assert progress == [
        {"progressToken": "p", "progress": 1, "total": 2, "message": "step 1/2"},
        {"progressToken": "p", "progress": 2, "total": 2, "message": "step 2/2"}]
    logs = [m["params"] for m in out if m.get("method") == "notifications/message"]
    assert [entry["level"] for entry in logs] == ["info", "info"]


def test_demo_tool_list(demo_argv: list[str]) -> None:
    data = (json.dumps(init_msg()) + "\n"
            + json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}) + "\n").encode()
    proc = subprocess.run(demo_argv, input=data, capture_output=True, timeout=20, check=False)
    tools = {t["name"]: t for t in json_lines(proc.stdout)[1]["result"]["tools"]}
    assert list(tools) == ["echo", "add", "slow", "fail"]
    assert tools["echo"]["inputSchema"]["required"] == ["text"]
    assert tools["add"]["outputSchema"] == {
        "type": "object", "properties": {"sum": {"type": "number"}}, "required": ["sum"]}
    assert tools["slow"]["inputSchema"]["properties"] == {
        "seconds": {"type": "number", "default": 2.0},
        "steps": {"type": "integer", "default": 10}}
    assert tools["fail"]["inputSchema"]["properties"]["message"]["default"] == (
        "this tool always fails")


class Demo:
    """The demo as a live subprocess, for tests that must talk to it while it works."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        assert self.proc.stdout is not None
        self.lines = _LineReader(self.proc.stdout.fileno())

    def send(self, *messages: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in messages))
        self.proc.stdin.flush()

    def recv(self, timeout: float = 10.0) -> Any:
        line = self.lines.readline(timeout)
        return None if line is None else json.loads(line)

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            code = self.proc.wait(10)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            for stream in (self.proc.stdout, self.proc.stderr):
                if stream is not None:
                    stream.close()
        return code


@pytest.mark.timeout(30)
def test_demo_slow_is_cancelled_at_once_without_a_response(demo_argv: list[str]) -> None:
    demo = Demo(demo_argv)
    try:
        demo.send(init_msg())
        assert demo.recv()["id"] == 0
        demo.send(call_msg("s", "slow", {"seconds": 30, "steps": 3000},
                           meta={"progressToken": 1}))
        first = demo.recv()
        assert first["method"] == "notifications/progress"
        demo.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                   "params": {"requestId": "s"}},
                  {"jsonrpc": "2.0", "id": "after", "method": "ping"})
        # sequential demo: the ping is answered only once slow has returned, so a response
        # for "s" would have to come first; progress lines sent before the cancel may remain
        while True:
            message = demo.recv()
            if message.get("method") in ("notifications/progress", "notifications/message"):
                continue
            break
        assert message == {"jsonrpc": "2.0", "id": "after", "result": {}}
    finally:
        assert demo.close() == 0


@pytest.mark.timeout(30)
def test_multiplexing_with_concurrency_8(demo_argv: list[str]) -> None:
    demo = Demo([*demo_argv, "--concurrency", "8"])
    try:
        demo.send(init_msg())
        assert demo.recv()["id"] == 0
        demo.send({"jsonrpc": "2.0", "id": "warm", "method": "ping"})
        assert demo.recv()["id"] == "warm"
        started = time.monotonic()
        demo.send(*[call_msg(i, "slow", {"seconds": 0.05, "steps": 1}) for i in range(8)])
        ids: list[int] = []
        while len(ids) < 8:
            message = demo.recv()
            if "id" in message:  # skip slow's info logs
                ids.append(message["id"])
        ids.sort()
        elapsed = time.monotonic() - started
    finally:
        demo.close()
    assert ids == list(range(8))
    # a correctness check that the calls overlap (sequential would take 8 x 50 ms = 400 ms)
    assert elapsed < 0.3, f"8 concurrent 50 ms calls took {elapsed:.3f} s"


@pytest.mark.timeout(30)
def test_demo_oversized_frame_exits_1_with_one_line_on_stderr(demo_argv: list[str]) -> None:
    data = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"' + b"y" * 500 + b'"}}\n'
    proc = subprocess.run([*demo_argv, "--max-frame-bytes", "100"], input=data,
                          capture_output=True, timeout=20, check=False)
    assert proc.returncode == 1
    assert proc.stdout == b""
    err_lines = proc.stderr.decode().strip().splitlines()
    assert len(err_lines) == 1 and "100" in err_lines[0], err_lines


def test_demo_rejects_a_bad_concurrency(demo_argv: list[str]) -> None:
    proc = subprocess.run([*demo_argv, "--concurrency", "0"], input=b"", capture_output=True,
                          timeout=20, check=False)
    assert proc.returncode == 2
    assert b"concurrency" in proc.stderr


def test_server_module_runs_with_python_dash_m(demo_argv: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-m", "mcpsync.demo", "--help"], capture_output=True,
                          timeout=20, check=False)
    assert proc.returncode == 0 and b"--max-frame-bytes" in proc.stdout


@pytest.mark.timeout(30)
def test_the_example_in_docs_server_md_runs(tmp_path: Any) -> None:

    doc = (DOCS / "server.md").read_text()
    block = doc.split("```python\n# calc_server.py\n", 1)[1].split("```", 1)[0]
    script = tmp_path / "calc_server.py"
    script.write_text(block)
    lines = [init_msg(), call_msg(1, "add", {"a": 1, "b": 2}),
             call_msg(2, "count", {"to": 2}, meta={"progressToken": "c"})]
    data = b"".join(json.dumps(m).encode() + b"\n" for m in lines)
    proc = subprocess.run([sys.executable, str(script)], input=data, capture_output=True,
                          timeout=20, check=False)
    assert proc.returncode == 0, proc.stderr.decode()
    out = json_lines(proc.stdout)
    by_id = {m["id"]: m for m in out if "id" in m}
    assert by_id[0]["result"]["instructions"] == "Arithmetic on demand."
    assert by_id[1]["result"]["structuredContent"] == {"sum": 3}
    assert by_id[2]["result"]["content"] == [{"type": "text", "text": "counted to 2"}]
    assert [m["params"]["message"] for m in out
            if m.get("method") == "notifications/progress"] == ["1/2", "2/2"]
    # the server never sends a request of its own
    assert not [m for m in out if "method" in m and "id" in m]
    # and the client snippet beside it talks to that very file
    client = "import sys\n" + doc.split("```python\nimport sys\n", 1)[1].split("```", 1)[0]
    proc = subprocess.run([sys.executable, "-c", client], cwd=tmp_path, capture_output=True,
                          timeout=20, check=False)
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout.decode().strip() == "{'sum': 3}"
