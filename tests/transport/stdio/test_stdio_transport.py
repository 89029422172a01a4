"""The stdio transport against real subprocesses: framing, stderr, exit, teardown, fork."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import mcpsync_threads, open_fds

from mcpsync import jsonrpc
from mcpsync.errors import ConfigError, ConnectionLost
from mcpsync.jsonrpc import StreamError
from mcpsync.transport.stdio import StdioTransport, TransportClosed, _lifecycle as stdio, safe_name
from mcpsync.transport.stdio._stderr import excerpt

PY = sys.executable

ECHO = """
import sys
for line in sys.stdin.buffer:
    sys.stdout.buffer.write(line)
    sys.stdout.buffer.flush()
"""

STUBBORN = """
import signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
sys.stdout.write("ready\\n"); sys.stdout.flush()
sys.stdin.read()          # EOF does not make it leave
while True:
    time.sleep(1)
"""

GRANDCHILD = """
import subprocess, sys, time
# The grandchild inherits our stdout and stderr and keeps them open for a long time.
p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
sys.stdout.write('{"jsonrpc":"2.0","method":"grandchild","params":{"pid":%d}}\\n' % p.pid)
sys.stdout.flush()
sys.stdin.read()
"""


def script(tmp_path: Path, source: str, name: str = "server.py") -> list[str]:
    path = tmp_path / name
    path.write_text(source)
    return [PY, str(path)]


def note(method: str, params: object = None) -> jsonrpc.Message:
    return jsonrpc.notification(method, params)


def collect(t: StdioTransport, n: int, timeout: float = 10.0) -> list[object]:
    """Receive until ``n`` items arrived (or fail after ``timeout``)."""
    items: list[object] = []
    deadline = time.monotonic() + timeout
    while len(items) < n:
        left = deadline - time.monotonic()
        assert left > 0, f"only {len(items)} of {n} items arrived"
        got = t.receive(min(left, 1.0))
        assert got is not None, f"EOF after {len(items)} of {n} items"
        items.extend(got)
    return items


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:   # ENOENT on open, or ESRCH on read when reaped in between
        return False


@pytest.fixture
def echo(tmp_path: Path) -> Iterator[StdioTransport]:
    t = StdioTransport(script(tmp_path, ECHO), name="echo")
    t.start()
    yield t
    t.close()


# ---------------------------------------------------------------- framing


def test_round_trip_and_many_frames_per_read(echo: StdioTransport) -> None:
    echo.send(note("a", {"n": 1}))
    echo.send_bytes(b'{"jsonrpc":"2.0","method":"b"}')
    items = collect(echo, 2)
    assert [m.method for m in items] == ["a", "b"]  # type: ignore[attr-defined]
    assert items[0].params == {"n": 1}  # type: ignore[attr-defined]


def test_bad_line_is_returned_as_parse_error_and_reading_goes_on(echo: StdioTransport) -> None:
    echo.send_bytes(b"this is not json")
    echo.send(note("after"))
    items = collect(echo, 2)
    assert isinstance(items[0], jsonrpc.ParseError)
    assert items[1].method == "after"  # type: ignore[attr-defined]


def test_receive_times_out_with_empty_list(echo: StdioTransport) -> None:
    assert echo.receive(0) == []
    assert echo.receive(0.05) == []


@pytest.mark.timeout(20)
def test_wake_unblocks_a_receive_waiting_forever(echo: StdioTransport) -> None:
    result: list[object] = []
    reader = threading.Thread(target=lambda: result.append(echo.receive(None)))
    reader.start()
    time.sleep(0.05)  # let it block in poll (correctness does not depend on this)
    echo.wake()
    reader.join(5)
    assert not reader.is_alive()
    assert result == [[]]
    # The wake was consumed: the next receive times out normally, and data still flows.
    assert echo.receive(0) == []
    echo.send(note("still"))
    assert collect(echo, 1)[0].method == "still"  # type: ignore[attr-defined]


def test_eof_returns_none_after_a_last_unterminated_line(tmp_path: Path) -> None:
    argv = script(tmp_path, 'import sys; sys.stdout.write(\'{"jsonrpc":"2.0","method":"bye"}\')')
    t = StdioTransport(argv, name="eof")
    t.start()
    try:
        items: list[object] = []
        deadline = time.monotonic() + 10
        while True:
            got = t.receive(1.0)
            if got is None:
                break
            items.extend(got)
            assert time.monotonic() < deadline
        assert [m.method for m in items] == ["bye"]  # type: ignore[attr-defined]
        assert t.receive(0) is None
        assert t.wait_exit(5) == 0
    finally:
        t.close()


SIZES = """
import json, os, sys, time
READ, LIMIT = int(sys.argv[1]), int(sys.argv[2])

def frame(n, size):  # one notification line of exactly size bytes, newline included
    head = '{"jsonrpc":"2.0","method":"f","params":{"n":%d,"pad":"' % n
    return (head + "x" * (size - len(head) - 4) + '"}}\\n').encode()

out = sys.stdout.fileno()
def put(data):
    view = memoryview(data)
    while view:
        view = view[os.write(out, view):]

for n, size in enumerate([READ - 1, READ, READ + 1, 2 * READ, LIMIT - 64]):
    put(frame(n, size))
slow = frame(5, 301)
for i in range(0, len(slow), 7):  # one frame in many small writes, so in many reads
    put(slow[i:i + 7])
    time.sleep(0.002)
put(frame(6, 100)[:60])  # and the stream ends in the middle of a frame
"""


@pytest.mark.timeout(60)
def test_frames_around_the_read_buffer_size_arrive_whole(tmp_path: Path) -> None:
    from mcpsync.transport.stdio._transport import READ_SIZE

    sizes = [READ_SIZE - 1, READ_SIZE, READ_SIZE + 1, 2 * READ_SIZE,
             jsonrpc.MAX_FRAME_BYTES - 64, 301]
    argv = [*script(tmp_path, SIZES), str(READ_SIZE), str(jsonrpc.MAX_FRAME_BYTES)]
    t = StdioTransport(argv, name="sizes")
    t.start()
    try:
        items: list[object] = []
        deadline = time.monotonic() + 40
        while (got := t.receive(1.0)) is not None:
            items.extend(got)
            assert time.monotonic() < deadline
        assert t.receive(0) is None
    finally:
        t.close()
    # The frames of every size come whole and in order; the half frame at EOF comes as a
    # parse error, not glued to anything and not silently dropped.
    *frames, tail = items
    assert [m.params["n"] for m in frames] == list(range(6))  # type: ignore[attr-defined]
    envelope = len('{"jsonrpc":"2.0","method":"f","params":}\n')
    assert [len(json.dumps(m.params, separators=(",", ":"))) + envelope  # type: ignore[attr-defined]
            for m in frames] == sizes
    assert isinstance(tail, jsonrpc.ParseError)


def test_oversized_frame_is_a_stream_error(tmp_path: Path) -> None:
    code = 'import sys; sys.stdout.write("x" * 5000 + "\\n"); sys.stdout.flush(); sys.stdin.read()'
    argv = script(tmp_path, code)
    t = StdioTransport(argv, name="big", max_frame_bytes=1000)
    t.start()
    try:
        with pytest.raises(StreamError):
            collect(t, 1)
    finally:
        t.close()


def test_allow_batch_is_forwarded(echo: StdioTransport) -> None:
    assert echo.allow_batch is False
    echo.allow_batch = True
    echo.send_bytes(b'[{"jsonrpc":"2.0","method":"x"},{"jsonrpc":"2.0","method":"y"}]')
    (batch,) = collect(echo, 1)
    assert isinstance(batch, jsonrpc.Batch)
    assert [m.method for m in batch] == ["x", "y"]


@pytest.mark.timeout(60)
def test_concurrent_sends_never_interleave(echo: StdioTransport) -> None:
    # Frames larger than the 64 KiB pipe buffer force short writes.
    sizes = [10, 1000, 70_000, 200_000]
    threads = 6
    per_thread = 12
    received: list[object] = []
    done = threading.Event()

    def reader() -> None:
        received.extend(collect(echo, threads * per_thread, timeout=40))
        done.set()

    def writer(k: int) -> None:
        for i in range(per_thread):
            size = sizes[i % len(sizes)]
            echo.send(note("w", {"k": k, "i": i, "pad": chr(97 + k) * size}))

    r = threading.Thread(target=reader)
    r.start()
    ws = [threading.Thread(target=writer, args=(k,)) for k in range(threads)]
    for w in ws:
        w.start()
    for w in ws:
        w.join()
    r.join(45)
    assert done.is_set()
    seen = set()
    for m in received:
        assert isinstance(m, jsonrpc.Message), m
        k, i, pad = m.params["k"], m.params["i"], m.params["pad"]
        assert pad == chr(97 + k) * sizes[i % len(sizes)]
        seen.add((k, i))
    assert len(seen) == threads * per_thread


def test_send_to_a_dead_server_raises_transport_closed(tmp_path: Path) -> None:
    t = StdioTransport([PY, "-c", "pass"], name="dead")
    t.start()
    try:
        assert t.wait_exit(10) == 0
        with pytest.raises(TransportClosed) as info:
            for _ in range(3):  # the first write may land before the pipe is known broken
                t.send(note("x"))
        assert isinstance(info.value, ConnectionLost)
    finally:
        t.close()
    with pytest.raises(TransportClosed):
        t.send(note("x"))


# ---------------------------------------------------------------- process state


def test_returncode_and_wait_exit(tmp_path: Path) -> None:
    t = StdioTransport([PY, "-c", "import sys; sys.stdin.read(); sys.exit(3)"], name="rc")
    t.start()
    try:
        assert t.returncode() is None
        assert t.wait_exit(0.01) is None
        assert isinstance(t.pid, int)
        assert os.getsid(t.pid) == t.pid  # its own session, hence its own process group
        assert os.getpgid(t.pid) == t.pid
        t._close_stdin(1.0)
        assert t.wait_exit(10) == 3
        assert t.returncode() == 3
    finally:
        t.close()


def test_signal_exit_is_negative(tmp_path: Path) -> None:
    t = StdioTransport([PY, "-c", "import sys; sys.stdin.read()"], name="sig")
    t.start()
    try:
        assert t.pid is not None
        os.kill(t.pid, signal.SIGKILL)
        assert t.wait_exit(10) == -signal.SIGKILL
    finally:
        t.close()


def test_child_stderr_is_a_pipe_not_ours(tmp_path: Path) -> None:
    code = ("import os, sys; sys.stdout.write('{\"jsonrpc\":\"2.0\",\"method\":\"fd\","
            "\"params\":{\"err\":\"%s\"}}\\n' % os.readlink('/proc/self/fd/2'))")
    t = StdioTransport([PY, "-c", code], name="fd2")
    t.start()
    try:
        (m,) = collect(t, 1)
        assert m.params["err"].startswith("pipe:")  # type: ignore[attr-defined]
        assert m.params["err"] != os.readlink("/proc/self/fd/2")  # type: ignore[attr-defined]
    finally:
        t.close()


# ---------------------------------------------------------------- stderr


def test_stderr_lines_reach_callback_logger_ring_and_excerpt(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    code = (
        "import sys\n"
        "for i in range(30): sys.stderr.write('line %d \\xe9\\n' % i)\n"
        "sys.stderr.buffer.write(b'bad \\xff byte\\r\\npartial')\n"
        "sys.stderr.flush()\n"
    )
    lines: list[str] = []
    caplog.set_level(logging.DEBUG, logger="mcpsync.server.my_srv_1")
    t = StdioTransport(script(tmp_path, code), name="my srv:1", on_stderr=lines.append)
    t.start()
    assert t.wait_exit(10) == 0
    t.close()  # joins the stderr thread, which flushes the partial last line
    assert lines[:2] == ["line 0 \u00e9", "line 1 \u00e9"]
    assert lines[-2:] == ["bad \ufffd byte", "partial"]
    assert len(lines) == 32
    logged = [r.getMessage() for r in caplog.records if r.name == "mcpsync.server.my_srv_1"]
    assert logged == lines
    assert all(r.levelno == logging.DEBUG for r in caplog.records
               if r.name == "mcpsync.server.my_srv_1")
    tail = t.stderr_tail()
    assert tail.startswith("line 0") and tail.endswith("partial")
    ex = t.stderr_excerpt().split("\n")
    assert len(ex) == 20 and ex[-1] == "partial" and ex[0] == "line 12 \u00e9"


def test_stderr_thread_name_is_sanitised(tmp_path: Path) -> None:
    # With an on_stderr callback the drain has a thread of its own, named after the server.
    t = StdioTransport([PY, "-c", "import sys; sys.stdin.read()"], name="a b/c.d-e_f",
                       on_stderr=lambda line: None)
    t.start()
    try:
        names = {th.name for th in threading.enumerate()}
        assert "mcpsync-stdio-stderr-a_b_c_d-e_f" in names
        assert safe_name("ok-Name_9") == "ok-Name_9"
    finally:
        t.close()
    assert "mcpsync-stdio-stderr-a_b_c_d-e_f" not in {th.name for th in threading.enumerate()}


def test_without_on_stderr_the_shared_drain_thread_drains(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mcpsync.server")  # DEBUG would keep an own thread
    t = StdioTransport([PY, "-c", "import sys; sys.stdin.read()"], name="a b/c.d-e_f")
    t.start()
    try:
        names = {th.name for th in threading.enumerate()}
        assert "mcpsync-stderr" in names
        assert not any(n.startswith("mcpsync-stdio-stderr-") for n in names)
    finally:
        t.close()
    assert "mcpsync-stderr" not in {th.name for th in threading.enumerate()}


def test_callback_errors_are_logged_and_draining_goes_on(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    calls: list[str] = []

    def bad(line: str) -> None:
        calls.append(line)
        raise ValueError("boom")

    code = "import sys\nfor i in range(5): sys.stderr.write('e%d\\n' % i)\n"
    t = StdioTransport([PY, "-c", code], name="cb", on_stderr=bad)
    with caplog.at_level(logging.WARNING, logger="mcpsync.server.cb"):
        t.start()
        t.wait_exit(10)
        t.close()
    assert calls == [f"e{i}" for i in range(5)]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 5 and warnings[0].exc_info is not None


@pytest.mark.timeout(60)
def test_ten_megabytes_of_stderr_never_block_the_child(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "chunk = ('x' * 99 + '\\n') * 1000\n"
        "for _ in range(100): sys.stderr.write(chunk)\n"  # 10 MB
        "sys.stderr.write('the end\\n'); sys.stderr.flush()\n"
        "sys.stdout.write('{\"jsonrpc\":\"2.0\",\"method\":\"done\"}\\n'); sys.stdout.flush()\n"
        "sys.stdin.read()\n"
    )
    count = [0]

    def on_line(line: str) -> None:
        count[0] += 1

    t = StdioTransport(script(tmp_path, code), name="flood", on_stderr=on_line)
    t.start()
    try:
        (m,) = collect(t, 1, timeout=40)
        assert m.method == "done"  # type: ignore[attr-defined]
    finally:
        t.close()
    tail = t.stderr_tail()
    assert len(tail.encode()) == 65536  # the ring keeps exactly the newest 64 KiB
    assert tail.endswith("the end\n")
    assert count[0] == 100_001


def test_a_stderr_line_longer_than_one_read_comes_whole(tmp_path: Path) -> None:
    # 200 000 bytes is three reads of the drain's buffer: the pieces must be joined in order.
    code = ("import sys; sys.stderr.write('first\\n' + 'y' * 199_999 + 'z\\nlast\\n'); "
            "sys.stderr.flush()")
    lines: list[str] = []
    t = StdioTransport([PY, "-c", code], name="long", stderr_bytes=1 << 20,
                       on_stderr=lines.append)
    t.start()
    t.wait_exit(10)
    t.close()
    assert lines == ["first", "y" * 199_999 + "z", "last"]
    assert t.stderr_tail().endswith("z\nlast\n")


def test_stderr_ring_size_is_configurable(tmp_path: Path) -> None:
    code = "import sys; sys.stderr.write('a' * 5000 + 'END')"
    t = StdioTransport([PY, "-c", code], name="ring", stderr_bytes=100)
    t.start()
    t.wait_exit(10)
    t.close()
    assert t.stderr_tail() == "a" * 97 + "END"


# ---------------------------------------------------------------- teardown


def _ours() -> set[str]:
    return {th.name for th in mcpsync_threads()}


@pytest.mark.timeout(30)
def test_close_leaves_no_thread_process_or_fd(tmp_path: Path) -> None:
    before_fds = open_fds()
    before_threads = _ours()
    transports = [StdioTransport(script(tmp_path, ECHO), name=f"e{i}") for i in range(3)]
    for t in transports:
        t.start()
    pids = [t.pid for t in transports]
    transports[0].send(note("x"))
    collect(transports[0], 1)
    assert len(open_fds()) > len(before_fds)
    for t in transports:
        t.close()
    assert _ours() <= before_threads
    assert open_fds() <= before_fds
    assert not any(alive(p) for p in pids if p is not None)
    assert all(t.returncode() is not None for t in transports)


@pytest.mark.timeout(30)
def test_close_kills_a_server_ignoring_eof_and_sigterm(tmp_path: Path) -> None:
    before_fds = open_fds()
    t = StdioTransport(script(tmp_path, STUBBORN), name="stubborn")
    t.start()
    assert collect(t, 1)  # "ready" is not JSON, but it proves the handler is installed
    pid = t.pid
    assert pid is not None
    started = time.monotonic()
    t.close()
    elapsed = time.monotonic() - started
    assert elapsed < stdio.CLOSE_BOUND + 0.5
    assert elapsed >= stdio.STDIN_GRACE  # it really waited for a graceful exit first
    assert t.returncode() == -signal.SIGKILL
    assert not alive(pid)
    assert open_fds() <= before_fds
    assert not any(th.name.startswith("mcpsync-stdio-stderr-stubborn")
                   for th in threading.enumerate())


@pytest.mark.timeout(30)
def test_a_grandchild_holding_the_pipes_does_not_hang_close(tmp_path: Path) -> None:
    before_fds = open_fds()
    t = StdioTransport(script(tmp_path, GRANDCHILD), name="gc")
    t.start()
    (m,) = collect(t, 1)
    grandchild = m.params["pid"]  # type: ignore[attr-defined]
    assert alive(grandchild)
    started = time.monotonic()
    t.close()
    assert time.monotonic() - started < stdio.CLOSE_BOUND + 0.5
    assert t.returncode() == 0  # the server itself left on stdin EOF
    deadline = time.monotonic() + 5
    while alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not alive(grandchild)  # the orphan in the server's group was killed
    assert open_fds() <= before_fds
    assert not any(th.name == "mcpsync-stdio-stderr-gc" for th in threading.enumerate())


@pytest.mark.timeout(30)
def test_close_is_idempotent_and_thread_safe(echo: StdioTransport) -> None:
    errors: list[BaseException] = []

    def closer() -> None:
        try:
            echo.close()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    ths = [threading.Thread(target=closer) for _ in range(8)]
    for th in ths:
        th.start()
    for th in ths:
        th.join(10)
    assert not errors
    assert echo.closed
    echo.close()
    assert echo.returncode() == 0


@pytest.mark.timeout(30)
def test_close_unblocks_a_pending_receive(echo: StdioTransport) -> None:
    result: list[object] = []
    reader = threading.Thread(target=lambda: result.append(echo.receive(None)))
    reader.start()
    time.sleep(0.05)
    echo.close()
    reader.join(5)
    assert not reader.is_alive()
    assert result in ([None], [[]])
    assert echo.receive(0) is None


def test_close_before_start_is_fine() -> None:
    t = StdioTransport([PY, "-c", "pass"], name="never")
    t.close()
    assert t.closed
    assert t.receive(0) is None


# ---------------------------------------------------------------- fork safety


@pytest.mark.needs_pidfds(reads_status=False)
@pytest.mark.timeout(30)
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_close_in_a_forked_child_only_drops_references(echo: StdioTransport) -> None:
    assert echo.forked() is False
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 1
        try:
            code = 0 if echo.forked() and echo.returncode() is None else 2
            before = open_fds()
            echo.close()
            # stdin, stdout, stderr, two wake fds, the pidfd: all dropped (the shared stderr
            # drain's wake-up pipe was closed at the fork already)
            if len(before - open_fds()) < 6:
                code = 3
            if echo.receive(0) is not None:
                code = 4
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    # The parent's server was neither signalled nor cut off.
    assert echo.returncode() is None
    echo.send(note("after-fork"))
    assert collect(echo, 1)[0].method == "after-fork"  # type: ignore[attr-defined]


# ---------------------------------------------------------------- start errors


def test_environment_is_the_safe_set_plus_config(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCPSYNC_TEST_SECRET", "hunter2")
    monkeypatch.setenv("LC_MCPSYNC_TEST", "kept")
    monkeypatch.setenv("BASH_FUNC_x%%", "() { echo hi; }")
    code = ("import json, os, sys; sys.stdout.write(json.dumps({'jsonrpc': '2.0', "
            "'method': 'env', 'params': dict(os.environ)}) + '\\n')")

    def child_env(**kw: object) -> dict[str, str]:
        t = StdioTransport([PY, "-c", code], name="env", **kw)  # type: ignore[arg-type]
        t.start()
        try:
            (m,) = collect(t, 1)
            return dict(m.params)  # type: ignore[attr-defined]
        finally:
            t.close()

    env = child_env(env={"EXTRA": "1", "HOME": "/nowhere", "LANG": None})
    assert "MCPSYNC_TEST_SECRET" not in env and "BASH_FUNC_x%%" not in env
    assert env["EXTRA"] == "1" and env["HOME"] == "/nowhere" and "LANG" not in env
    assert env["LC_MCPSYNC_TEST"] == "kept"
    assert env["PATH"] == os.environ["PATH"]
    inherited = child_env(inherit_env=True, env={"EXTRA": "2"})
    assert inherited["MCPSYNC_TEST_SECRET"] == "hunter2" and inherited["EXTRA"] == "2"


def test_command_is_resolved_on_the_childs_path(tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    tool = bindir / "my-mcp-tool"
    tool.write_text(f"#!{PY}\nimport sys\nsys.stdout.write("
                    "'{\"jsonrpc\":\"2.0\",\"method\":\"found\"}\\n')\n")
    tool.chmod(0o755)
    t = StdioTransport(["my-mcp-tool"], name="tool", env={"PATH": str(bindir)})
    t.start()
    try:
        assert collect(t, 1)[0].method == "found"  # type: ignore[attr-defined]
    finally:
        t.close()
    # A command with a separator is relative to cwd.
    t = StdioTransport(["./bin/my-mcp-tool"], name="rel", cwd=str(tmp_path))
    t.start()
    try:
        assert collect(t, 1)[0].method == "found"  # type: ignore[attr-defined]
    finally:
        t.close()


def test_start_errors_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        StdioTransport(["no-such-mcp-command"], name="x", env={"PATH": "/nonexistent-dir"}).start()
    assert "no-such-mcp-command" in str(info.value) and "/nonexistent-dir" in str(info.value)
    assert info.value.server == "x"
    with pytest.raises(ConfigError, match="cwd"):
        StdioTransport([PY, "-c", "pass"], name="x", cwd=str(tmp_path / "missing")).start()
    not_exec = tmp_path / "plain.txt"
    not_exec.write_text("hello")
    with pytest.raises(ConfigError, match=r"plain\.txt"):
        StdioTransport([str(not_exec)], name="x").start()
    assert not any(th.name == "mcpsync-spawner" for th in threading.enumerate())


def test_programs_the_exec_wrapper_cannot_start_fail_as_without_it(tmp_path: Path) -> None:
    # Without "#!", execve() fails with ENOEXEC: Popen raises it here (setpriv's execvp would
    # instead have run the file through /bin/sh), so start() reports it as a ConfigError.
    no_shebang = tmp_path / "script"
    no_shebang.write_text("echo hello\n")
    no_shebang.chmod(0o755)
    assert not stdio._execs_directly(str(no_shebang), None)
    with pytest.raises(ConfigError, match="script"):
        StdioTransport([str(no_shebang)], name="x").start()
    shebang = tmp_path / "tool"
    shebang.write_text("#!/bin/sh\nexit 0\n")
    shebang.chmod(0o755)
    assert stdio._execs_directly("tool", str(tmp_path))  # relative to cwd, as the OS does
    # A "#!" naming a missing interpreter fails in execve(): Popen must report it here.
    broken = tmp_path / "broken"
    broken.write_text("#!/nonexistent/interpreter\n")
    broken.chmod(0o755)
    assert not stdio._execs_directly(str(broken), None)
    with pytest.raises(ConfigError, match="broken"):
        StdioTransport([str(broken)], name="x").start()
    assert stdio._execs_directly(sys.executable, None)  # an ELF binary (through a symlink)
    assert not stdio._execs_directly(str(tmp_path), None)  # a directory
    shebang.chmod(0o644)
    assert not stdio._execs_directly(str(shebang), None)  # not executable
    assert not any(th.name == "mcpsync-spawner" for th in threading.enumerate())


def test_start_twice_is_refused(echo: StdioTransport) -> None:
    with pytest.raises(RuntimeError):
        echo.start()


def test_json_helpers_are_importable() -> None:
    assert json.loads(jsonrpc.serialize(note("x")))["method"] == "x"


# ---------------------------------------------------------------- harder teardown


@pytest.mark.timeout(30)
@pytest.mark.parametrize("server", [STUBBORN, GRANDCHILD], ids=["stubborn", "grandchild"])
def test_teardown_without_pidfd_uses_the_popen_fallback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: str) -> None:
    monkeypatch.setattr(stdio, "_HAS_PIDFD", False)
    monkeypatch.setattr(stdio, "STDIN_GRACE", 0.3)  # the constants are patchable, for speed
    monkeypatch.setattr(stdio, "TERM_GRACE", 0.3)
    before_fds = open_fds()
    t = StdioTransport(script(tmp_path, server), name="fallback")
    t.start()
    assert t._pidfd == -1
    collect(t, 1)
    started = time.monotonic()
    t.close()
    assert time.monotonic() - started < stdio.CLOSE_BOUND + 0.5
    assert t.returncode() is not None
    assert open_fds() <= before_fds
    assert not any(th.name == "mcpsync-stdio-stderr-fallback" for th in threading.enumerate())


@pytest.mark.timeout(30)
def test_close_with_a_writer_stuck_on_a_full_pipe(tmp_path: Path) -> None:
    # The server never reads stdin, so a 4 MB frame blocks its sender inside os.write.
    t = StdioTransport([PY, "-c", "import time; time.sleep(60)"], name="stuck")
    t.start()
    errors: list[BaseException] = []

    def sender() -> None:
        try:
            t.send_bytes(b"x" * (4 << 20))
        except BaseException as exc:
            errors.append(exc)

    th = threading.Thread(target=sender)
    th.start()
    time.sleep(0.1)  # let it fill the pipe (the result does not depend on this)
    started = time.monotonic()
    t.close()
    assert time.monotonic() - started < stdio.CLOSE_BOUND + 0.5
    th.join(5)
    assert not th.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], TransportClosed)
    assert t.returncode() is not None


def test_stream_errors_are_sticky(tmp_path: Path) -> None:
    code = 'import sys; sys.stdout.write("y" * 3000 + "\\n"); sys.stdout.flush(); sys.stdin.read()'
    t = StdioTransport(script(tmp_path, code), name="sticky", max_frame_bytes=100)
    t.start()
    try:
        with pytest.raises(StreamError) as first:
            collect(t, 1)
        with pytest.raises(StreamError) as second:
            t.receive(0)
        assert second.value is first.value
        assert "100" in str(first.value)  # the message names the limit
    finally:
        t.close()


@pytest.mark.timeout(30)
def test_excerpt_after_exit_has_the_last_words(tmp_path: Path) -> None:
    # The drain runs on its own thread; once the server has exited, stderr_tail()/excerpt()
    # must include everything it wrote, or error messages would miss the cause of death.
    code = ("import sys\n"
            "sys.stderr.write('noise\\n' * 30000)\n"
            "sys.stderr.write('FATAL: boom\\n'); sys.stderr.flush(); sys.exit(7)\n")
    argv = script(tmp_path, code)
    for _ in range(5):
        t = StdioTransport(argv, name="dying")
        t.start()
        try:
            assert t.wait_exit(10) == 7
            assert t.stderr_excerpt().endswith("FATAL: boom")
            assert t.stderr_tail().endswith("FATAL: boom\n")
        finally:
            t.close()


@pytest.mark.timeout(30)
def test_excerpt_after_exit_does_not_wait_for_a_busy_callback(tmp_path: Path) -> None:
    code = ("import sys\n"
            "sys.stderr.write('first\\n'); sys.stderr.flush()\n"
            "sys.stdin.readline()\n"
            "sys.stderr.write('noise\\n' * 1000 + 'FATAL: boom\\n'); sys.stderr.flush()\n"
            "sys.exit(7)\n")
    entered = threading.Event()
    release = threading.Event()
    lines: list[str] = []

    def slow(line: str) -> None:
        lines.append(line)
        entered.set()
        release.wait(20)  # the drain thread is busy in user code

    t = StdioTransport(script(tmp_path, code), name="busy", on_stderr=slow)
    t.start()
    try:
        assert entered.wait(10)
        t.send_bytes(b"go")
        assert t.wait_exit(10) == 7
        assert t.stderr_excerpt().endswith("FATAL: boom")
        assert lines == ["first"]  # the callback is still busy with the first line
    finally:
        release.set()
        t.close()
    assert lines[-1] == "FATAL: boom" and len(lines) == 1002  # nothing lost, in order


# ---------------------------------------------------------------- without poll() (Windows path)


@pytest.fixture
def no_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run the transport as on Windows: a pump thread reads stdout, stderr reads block."""
    monkeypatch.setattr(stdio, "_USE_POLL", False)
    monkeypatch.setattr(stdio, "STDIN_GRACE", 0.3)
    monkeypatch.setattr(stdio, "TERM_GRACE", 0.3)


@pytest.mark.timeout(30)
@pytest.mark.usefixtures("no_poll")
def test_pump_mode_round_trip_wake_and_eof(tmp_path: Path) -> None:
    before_fds = open_fds()
    lines: list[str] = []
    code = ECHO + "sys.stderr.write('bye\\n')\n"
    t = StdioTransport(script(tmp_path, code), name="pump", on_stderr=lines.append)
    t.start()
    assert t._pump is not None and t._pump.thread.name == "mcpsync-stdio-pump-pump"
    t.send(note("a"))
    assert collect(t, 1)[0].method == "a"  # type: ignore[attr-defined]
    assert t.receive(0.01) == []
    result: list[object] = []
    reader = threading.Thread(target=lambda: result.append(t.receive(None)))
    reader.start()
    t.wake()
    reader.join(5)
    assert result == [[]]
    t._close_stdin(1.0)
    while (got := t.receive(5)) is not None:
        assert got == []
    assert t.wait_exit(5) == 0
    t.close()
    assert lines == ["bye"]
    assert open_fds() <= before_fds
    assert not any(th.name.endswith("-pump") for th in threading.enumerate()
                   if th.name.startswith("mcpsync-"))


@pytest.mark.timeout(30)
@pytest.mark.usefixtures("no_poll")
@pytest.mark.parametrize("server", [STUBBORN, GRANDCHILD], ids=["stubborn", "grandchild"])
def test_pump_mode_teardown(tmp_path: Path, server: str) -> None:
    before_fds = open_fds()
    t = StdioTransport(script(tmp_path, server), name="pumpdown")
    t.start()
    collect(t, 1)
    result: list[object] = []
    reader = threading.Thread(target=lambda: result.append(t.receive(None)))
    reader.start()
    started = time.monotonic()
    t.close()
    assert time.monotonic() - started < stdio.CLOSE_BOUND + 0.5
    reader.join(5)
    assert result in ([None], [[]])
    assert t.returncode() is not None
    assert open_fds() <= before_fds
    assert not [th.name for th in mcpsync_threads() if "pumpdown" in th.name]


@pytest.mark.timeout(30)
def test_close_from_inside_on_stderr(tmp_path: Path) -> None:
    # A callback that closes its own connection (e.g. on a fatal line) must neither deadlock
    # nor leak: the stderr thread closes its descriptors itself on the way out.
    before_fds = open_fds()
    holder: list[StdioTransport] = []
    closed = threading.Event()

    def on_line(line: str) -> None:
        if line == "FATAL" and not closed.is_set():
            holder[0].close()
            closed.set()

    code = "import sys\nsys.stderr.write('FATAL\\n'); sys.stderr.flush()\nsys.stdin.read()\n"
    t = StdioTransport([PY, "-c", code], name="selfclose", on_stderr=on_line)
    holder.append(t)
    t.start()
    assert closed.wait(10)
    assert t.closed and t.returncode() == 0
    drain = t._aside.stderr
    assert drain is not None and drain.thread is not None
    drain.thread.join(5)
    assert not drain.thread.is_alive()
    assert open_fds() <= before_fds


def test_huge_and_infinite_timeouts_are_accepted(echo: StdioTransport) -> None:
    echo.send(note("inf"))
    assert echo.receive(math.inf)[0].method == "inf"  # type: ignore[index, union-attr]
    echo.send(note("big"))
    assert echo.receive(1e12)[0].method == "big"  # type: ignore[index, union-attr]
    assert echo.wait_exit(0) is None


def test_excerpt_is_the_last_20_lines_within_4_kib() -> None:
    text = "".join(f"{i:04d} " + "\u00e9" * 300 + "\n" for i in range(40))
    ex = excerpt(text)
    assert len(ex.encode()) <= 4096
    assert ex.endswith("0039 " + "\u00e9" * 300)
    assert "0019" not in ex  # never more than 20 lines
    short = "\n".join(f"l{i}" for i in range(30))
    assert excerpt(short).split("\n") == [f"l{i}" for i in range(10, 30)]


ESCAPED_FLOODER = """
import os, subprocess, sys
# The grandchild leaves the server's process group (so close() cannot signal it), keeps
# stdout and stderr, and floods stderr until the pipe breaks.
flood = "import os, sys\\nos.setsid()\\nwhile True: sys.stderr.write('z' * 4096)"
p = subprocess.Popen([sys.executable, "-c", flood])
sys.stdout.write('{"jsonrpc":"2.0","method":"gc","params":{"pid":%d}}\\n' % p.pid)
sys.stdout.flush()
sys.stdin.read()
"""


@pytest.mark.timeout(30)
def test_an_escaped_grandchild_flooding_stderr_does_not_hang_close(tmp_path: Path) -> None:
    before_fds = open_fds()
    t = StdioTransport(script(tmp_path, ESCAPED_FLOODER), name="flooder")
    t.start()
    (m,) = collect(t, 1)
    grandchild = m.params["pid"]  # type: ignore[attr-defined]
    try:
        deadline = time.monotonic() + 10
        while len(t.stderr_tail()) < 65536:  # the flood is on and the ring is full
            assert time.monotonic() < deadline
            time.sleep(0.01)
        started = time.monotonic()
        t.close()
        assert time.monotonic() - started < stdio.CLOSE_BOUND + 0.5
        assert not any(th.name == "mcpsync-stdio-stderr-flooder" for th in threading.enumerate())
        assert open_fds() <= before_fds
        assert len(t.stderr_tail()) == 65536
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(grandchild, signal.SIGKILL)


@pytest.mark.needs_pidfds(reads_status=False)
@pytest.mark.timeout(30)
def test_server_exit_is_eof_even_when_a_grandchild_holds_stdout(tmp_path: Path) -> None:
    # The server exits on its own; a grandchild keeps its stdout open. receive() must still
    # deliver everything the server wrote, then report the end (None), via the pidfd.
    code = ("import subprocess, sys\n"
            "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            "for i in range(50):\n"
            "    sys.stdout.write('{\"jsonrpc\":\"2.0\",\"method\":\"m%d\",'"
            "'\"params\":{\"g\":%d}}\\n' % (i, g.pid))\n"
            "sys.stdout.write('{\"jsonrpc\":\"2.0\",\"method\":\"last\"}')\n"  # no newline
            "sys.stdout.flush(); sys.exit(5)\n")
    t = StdioTransport(script(tmp_path, code), name="exits")
    t.start()
    grandchild = None
    try:
        items: list[object] = []
        deadline = time.monotonic() + 10
        while (got := t.receive(1.0)) is not None:
            items.extend(got)
            assert time.monotonic() < deadline, "no end reported"
        names = [m.method for m in items]  # type: ignore[attr-defined]
        assert names == [f"m{i}" for i in range(50)] + ["last"]
        grandchild = items[0].params["g"]  # type: ignore[attr-defined]
        assert alive(grandchild)  # the pipe really was still held open
        assert t.wait_exit(5) == 5
    finally:
        t.close()
    assert grandchild is not None
    deadline = time.monotonic() + 5
    while alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not alive(grandchild)  # close() killed what was left in the server's group


def test_close_reaps_the_server_while_another_thread_is_reaping_it(no_leaks: None) -> None:
    """Another thread asking for the exit code (a reader's ``wait_exit``) holds Popen's
    waitpid lock as close() reaps: close() must still see the server reaped and let go of the
    spawner thread (``Popen.poll()`` gives up at once under that lock; close() waits)."""
    t = StdioTransport([PY, "-c", "import sys; sys.stdin.read()"], name="reaped-twice")
    t.start()
    proc = t._proc
    assert proc is not None
    proc._waitpid_lock.acquire()   # as a concurrent proc.poll() or proc.wait() does
    releaser = threading.Timer(0.3, proc._waitpid_lock.release)
    releaser.start()
    try:
        t.close()
    finally:
        releaser.join()
    assert proc.returncode is not None
    assert not t._aside.holds_spawner
