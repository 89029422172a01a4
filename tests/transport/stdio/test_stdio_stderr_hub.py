"""The shared stderr drain ``mcpsync-stderr`` (the hub), with real server processes.

Every stdio server without an ``on_stderr`` callback (or a logger at DEBUG when it starts)
has its stderr pipe drained by one shared thread (one generation at a time; an ending one
may overlap briefly with the next). What must hold: each server's ring gets its own bytes, a
flooding server neither blocks nor starves the others, a pipe at EOF is let go by the hub
by itself, an escaped grandchild holding a pipe does not keep ``close()`` (or the hub) alive,
a slow ``on_stderr`` of one server does not stop the others' draining, closes from many
threads at once and from the hub thread itself end without deadlock, Ctrl-C in ``stop()``
still closes the pipe, a forked child starts afresh, and when the last server is closed no
thread and no descriptor is left.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import open_fds, wait_child

from mcpsync.transport.stdio import StdioTransport, _stderr
from mcpsync.transport.stdio._stderr import StderrDrain, active_hub_thread

_real_new_thread = _stderr.new_thread

pytestmark = pytest.mark.timeout(60)

PY = sys.executable

# Writes "<tag> <n>" lines to stderr, then answers each stdin line on stdout; exits at EOF.
TALKER = r'''
import sys
tag, lines = sys.argv[1], int(sys.argv[2])
for n in range(lines):
    sys.stderr.write(f"{tag} {n}\n")
sys.stderr.flush()
for line in sys.stdin.buffer:
    sys.stdout.buffer.write(line)
    sys.stdout.buffer.flush()
'''

# Floods stderr (8 MiB, far more than a pipe holds), then says so on stdout; exits at EOF.
FLOODER = r'''
import sys
chunk = "f" * 4095 + "\n"
for _ in range(2048):
    sys.stderr.write(chunk)
sys.stderr.flush()
sys.stdout.write('{"jsonrpc":"2.0","method":"flooded"}\n'); sys.stdout.flush()
sys.stdin.read()
'''

# Closes its stderr and keeps running, answering on stdout.
CLOSES_STDERR = r'''
import os, sys
sys.stderr.write("bye stderr\n"); sys.stderr.flush()
os.close(2)
sys.stdout.write('{"jsonrpc":"2.0","method":"closed"}\n'); sys.stdout.flush()
sys.stdin.read()
'''

# A grandchild that leaves the server's process group keeps stderr open for a long time.
ESCAPED = r'''
import subprocess, sys
p = subprocess.Popen([sys.executable, "-c", "import os, time; os.setsid(); time.sleep(60)"])
sys.stdout.write('{"jsonrpc":"2.0","method":"gc","params":{"pid":%d}}\n' % p.pid)
sys.stdout.flush()
sys.stdin.read()
'''


def script(tmp_path: Path, source: str, name: str) -> str:
    path = tmp_path / name
    path.write_text(source)
    return str(path)


def wait_for(predicate: object, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def ours() -> list[str]:
    return [t.name for t in threading.enumerate() if "stderr" in t.name]


def receive_one(t: StdioTransport, timeout: float = 10.0) -> object:
    deadline = time.monotonic() + timeout
    while True:
        got = t.receive(min(1.0, max(0.0, deadline - time.monotonic())))
        assert got is not None, "EOF"
        if got:
            return got[0]
        assert time.monotonic() < deadline, "nothing arrived"


@pytest.fixture(autouse=True)
def _servers_not_logged_at_debug() -> Iterator[None]:
    """A server whose logger is enabled for DEBUG when it starts keeps a drain thread of its
    own: pin the servers' loggers (and this module's) above DEBUG, so that these tests see
    the shared thread however the suite is run (``pytest --log-level=DEBUG`` enables every
    logger)."""
    logs = [logging.getLogger(name) for name in ("mcpsync.server", "test.hub")]
    levels = [log.level for log in logs]
    for log in logs:
        log.setLevel(logging.INFO)
    yield
    for log, level in zip(logs, levels, strict=True):
        log.setLevel(level)


def settle_hub() -> None:
    """A test before this one may have left its hub thread ending: wait until it is gone."""
    wait_for(lambda: not ours(), "the threads of earlier tests to end")


def test_many_servers_share_one_thread_and_each_ring_gets_its_own_lines(
        tmp_path: Path) -> None:
    settle_hub()
    before = open_fds()
    path = script(tmp_path, TALKER, "talker.py")
    transports = [StdioTransport([PY, path, f"s{i}", "50"], name=f"s{i}") for i in range(12)]
    for t in transports:
        t.start()
    try:
        assert ours() == ["mcpsync-stderr"]
        for i, t in enumerate(transports):
            wait_for(lambda t=t, i=i: t.stderr_tail().endswith(f"s{i} 49\n"), f"s{i}'s lines")
            assert t.stderr_tail() == "".join(f"s{i} {n}\n" for n in range(50))
    finally:
        # Closed from many threads at once, some of them twice.
        threads = [threading.Thread(target=t.close) for t in transports + transports[:4]]
        for th in threads:
            th.start()
        for th in threads:
            th.join(20)
    assert not any(th.is_alive() for th in threads)
    assert ours() == []
    assert active_hub_thread() is None
    assert open_fds() <= before


def test_a_flooding_server_neither_blocks_nor_starves_the_others(tmp_path: Path) -> None:
    settle_hub()
    before = open_fds()
    flooder = StdioTransport([PY, script(tmp_path, FLOODER, "flood.py")], name="flood")
    talkers = [StdioTransport([PY, script(tmp_path, TALKER, "talker.py"), f"t{i}", "3"],
                              name=f"t{i}") for i in range(3)]
    flooder.start()
    for t in talkers:
        t.start()
    try:
        # The flooder wrote 8 MiB to stderr: it only gets to stdout if it was drained.
        assert receive_one(flooder) is not None
        assert len(flooder.stderr_tail()) == 65536
        for i, t in enumerate(talkers):
            wait_for(lambda t=t, i=i: t.stderr_tail().endswith(f"t{i} 2\n"), f"t{i}'s lines")
    finally:
        for t in [flooder, *talkers]:
            t.close()
    assert ours() == []
    assert open_fds() <= before


def test_a_pipe_at_eof_is_let_go_by_the_hub_itself(tmp_path: Path) -> None:
    settle_hub()
    before = open_fds()
    keeper = StdioTransport([PY, script(tmp_path, TALKER, "talker.py"), "k", "1"], name="k")
    closer = StdioTransport([PY, script(tmp_path, CLOSES_STDERR, "closes.py")], name="c")
    keeper.start()
    closer.start()
    try:
        assert receive_one(closer) is not None  # stderr closed, the server still runs
        drain = closer._aside.stderr
        assert drain is not None
        wait_for(lambda: drain._exited, "the hub to let the pipe go at EOF")
        assert closer.returncode() is None
        assert closer.stderr_tail() == "bye stderr\n"
        assert ours() == ["mcpsync-stderr"]  # still draining the keeper
    finally:
        closer.close()
        assert ours() == ["mcpsync-stderr"]
        keeper.close()
    assert ours() == []
    assert open_fds() <= before


def test_the_thread_ends_with_its_last_pipe_and_a_new_one_starts_after(
        tmp_path: Path) -> None:
    """Every polled pipe at EOF: the hub thread ends by itself, though the transport is still
    open; the next server starts a new one; closing both leaves nothing."""
    settle_hub()
    before = open_fds()
    closer = StdioTransport([PY, script(tmp_path, CLOSES_STDERR, "closes.py")], name="c")
    closer.start()
    try:
        assert receive_one(closer) is not None
        wait_for(lambda: not ours(), "the hub thread to end by itself")
        assert active_hub_thread() is None and closer.returncode() is None
        later = StdioTransport([PY, script(tmp_path, TALKER, "talker.py"), "n", "1"], name="n")
        later.start()
        try:
            assert ours() == ["mcpsync-stderr"]
            wait_for(lambda: later.stderr_tail() == "n 0\n", "the new server's line")
        finally:
            closer.close()  # the ended generation's drain: nothing to hand over
            assert ours() == ["mcpsync-stderr"]
            later.close()
    finally:
        closer.close()
    assert ours() == []
    assert closer.stderr_tail() == "bye stderr\n"
    assert open_fds() <= before


def test_an_escaped_grandchild_holding_stderr_does_not_hold_the_hub(tmp_path: Path) -> None:
    settle_hub()
    before = open_fds()
    escaped = StdioTransport([PY, script(tmp_path, ESCAPED, "escaped.py")], name="esc")
    other = StdioTransport([PY, script(tmp_path, TALKER, "talker.py"), "o", "1"], name="o")
    escaped.start()
    other.start()
    grandchild = 0
    try:
        m = receive_one(escaped)
        grandchild = m.params["pid"]  # type: ignore[attr-defined]
        started = time.monotonic()
        escaped.close()  # the pipe is still open (the grandchild holds it): handed over
        assert time.monotonic() - started < 5.0
        assert escaped._aside.stderr is not None and escaped._aside.stderr._exited
        assert ours() == ["mcpsync-stderr"]
        wait_for(lambda: other.stderr_tail() == "o 0\n", "the other server's line")
        started = time.monotonic()
        other.close()
        assert time.monotonic() - started < 5.0
    finally:
        escaped.close()
        other.close()
        if grandchild:
            os.kill(grandchild, 9)
    assert ours() == []
    assert open_fds() <= before


def test_a_slow_on_stderr_keeps_its_own_thread_and_stalls_no_one_else(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    settle_hub()
    before = open_fds()
    release = threading.Event()
    seen: list[str] = []

    def slow(line: str) -> None:
        seen.append(line)
        if len(seen) == 1:
            release.wait(20)  # the user's callback blocks
        if len(seen) == 2:
            raise RuntimeError("a callback that raises")

    caplog.set_level(logging.WARNING)
    path = script(tmp_path, TALKER, "talker.py")
    stuck = StdioTransport([PY, path, "stuck", "3"], name="stuck", on_stderr=slow)
    flooder = StdioTransport([PY, script(tmp_path, FLOODER, "flood.py")], name="flood")
    stuck.start()
    flooder.start()
    try:
        assert "mcpsync-stdio-stderr-stuck" in ours() and "mcpsync-stderr" in ours()
        wait_for(lambda: seen == ["stuck 0"], "the callback to block")
        assert receive_one(flooder) is not None  # drained by the hub meanwhile
        release.set()
        wait_for(lambda: seen == ["stuck 0", "stuck 1", "stuck 2"], "the other lines")
        assert any("on_stderr callback raised" in r.getMessage() for r in caplog.records)
    finally:
        release.set()
        stuck.close()
        flooder.close()
    assert ours() == []
    assert open_fds() <= before


# Answers each stdin line on stdout after writing "<tag> <n>" lines to stderr.
LATE_TALKER = r'''
import sys
tag, lines = sys.argv[1], int(sys.argv[2])
for line in sys.stdin.buffer:
    for n in range(lines):
        sys.stderr.write(f"{tag} {n}\n")
    sys.stderr.flush()
    sys.stdout.buffer.write(line)
    sys.stdout.buffer.flush()
'''


def test_close_from_the_hub_thread_itself_does_not_deadlock(tmp_path: Path) -> None:
    """A logging handler runs on the hub thread when its logger was set to DEBUG after the
    server started: one that closes the transport makes stop() run there, which must neither
    join its own thread nor wait for itself."""
    settle_hub()
    before = open_fds()
    t = StdioTransport([PY, script(tmp_path, LATE_TALKER, "talker.py"), "h", "2"],
                       name="hubclose")
    done = threading.Event()

    class Closer(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if threading.current_thread().name == "mcpsync-stderr" and not done.is_set():
                t.close()
                done.set()

    logger = t._aside.logger
    handler = Closer(level=logging.DEBUG)
    old_level = logger.level
    logger.addHandler(handler)
    try:
        t.start()
        assert t._aside.stderr is not None and t._aside.stderr.thread is active_hub_thread()
        logger.setLevel(logging.DEBUG)   # only now: the lines are logged on the hub
        t.send_bytes(b'{"jsonrpc":"2.0","method":"go"}')
        assert done.wait(20)
        assert t.closed
        wait_for(lambda: not ours(), "the hub thread to end by itself")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
        t.close()
    wait_for(lambda: open_fds() <= before, "the pipe to be closed")


def test_ctrl_c_while_stop_waits_still_closes_the_pipe(tmp_path: Path) -> None:
    """A real SIGINT while stop() waits for the hub (held up here by a logging handler that
    blocks): stop() raises KeyboardInterrupt, the hub lets the pipe go and closes it once it
    can, and the thread still ends with the last drain."""
    settle_hub()
    before = open_fds()
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    closed: list[int] = []
    log = logging.getLogger("test.hub.ctrlc")
    release = threading.Event()
    blocking = threading.Event()

    class Blocker(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage() == "block":
                blocking.set()
                release.wait(20)

    handler = Blocker(level=logging.DEBUG)
    log.addHandler(handler)

    def closer(fd: int) -> Callable[[], None]:
        def close() -> None:
            os.close(fd)
            closed.append(fd)
        return close

    first = StderrDrain(r1, name="one", logger=log, closer=closer(r1))
    second = StderrDrain(r2, name="two", logger=log, closer=closer(r2))
    main = threading.get_ident()

    def ctrl_c() -> None:
        time.sleep(0.2)
        signal.pthread_kill(main, signal.SIGINT)

    firing = threading.Thread(target=ctrl_c, name="test-ctrl-c")
    try:
        first.start()
        second.start()
        log.setLevel(logging.DEBUG)  # after start(): the drains are on the hub
        os.write(w1, b"block\nlast words\n")
        assert blocking.wait(10)  # the hub thread is held in the handler
        firing.start()
        with pytest.raises(KeyboardInterrupt):
            first.stop(timeout=10)  # w1 is still open: a hand-over, interrupted
        assert r1 not in closed  # the hub cannot have let it go yet
        release.set()
        wait_for(lambda: r1 in closed, "the hub to close the interrupted drain's pipe")
        assert first.tail() == "block\nlast words\n"
        second.stop()
        assert closed == [r1, r2]
        assert active_hub_thread() is None and ours() == []
    finally:
        release.set()
        firing.join(10)
        log.removeHandler(handler)
        os.close(w1)
        os.close(w2)
    assert open_fds() <= before


def test_a_forked_child_starts_a_hub_of_its_own(tmp_path: Path) -> None:
    settle_hub()
    path = script(tmp_path, TALKER, "talker.py")
    parent = StdioTransport([PY, path, "p", "1"], name="parent")
    parent.start()
    try:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            code = 1
            try:
                parent.close()  # only drops the child's copies
                child = StdioTransport([PY, path, "c", "1"], name="child")
                child.start()
                deadline = time.monotonic() + 10
                while child.stderr_tail() != "c 0\n" and time.monotonic() < deadline:
                    time.sleep(0.01)
                ok = child.stderr_tail() == "c 0\n"
                child.close()
                code = 0 if ok and active_hub_thread() is None else 2
            finally:
                os._exit(code)
        assert wait_child(pid, "a hub in a forked child") == 0
        wait_for(lambda: parent.stderr_tail() == "p 0\n", "the parent's line")
        assert parent.returncode() is None
    finally:
        parent.close()
    assert ours() == []


def test_without_poll_each_drain_has_its_own_thread(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    settle_hub()
    r, w = os.pipe()
    drain = StderrDrain(r, name="nopoll", logger=logging.getLogger("test.hub"),
                        use_poll=False, closer=lambda: os.close(r))
    drain.start()
    assert ours() == ["mcpsync-stdio-stderr-nopoll"]
    os.write(w, b"x\n")
    os.close(w)  # EOF ends the blocking reads
    wait_for(lambda: drain.tail() == "x\n", "the line")
    drain.stop()
    assert ours() == []
    assert _stderr._hub is None


class _StartsThenInterrupted(threading.Thread):
    """A thread whose start() really starts it, then raises KeyboardInterrupt: what a
    Ctrl-C in ``Thread.start()``'s wait for the new thread does."""

    def start(self) -> None:
        super().start()
        raise KeyboardInterrupt


def test_ctrl_c_while_the_hub_thread_starts_leaves_it_known_and_its_pipes_open(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Interrupted in the hub thread's start(), the thread runs anyway: it must be the hub
    (its wake-up pipe open, the drain handed to it), so that close() lets the pipe go through
    it instead of closing the pipe under it; then the thread ends, and no descriptor is left."""
    settle_hub()
    before = open_fds()
    started: list[threading.Thread] = []

    def new_thread(name: str, target: Callable[[], None]) -> threading.Thread:
        thread = _StartsThenInterrupted(target=target, name=name, daemon=True)
        started.append(thread)
        return thread

    monkeypatch.setattr(_stderr, "new_thread", new_thread)
    path = script(tmp_path, TALKER, "talker.py")
    t = StdioTransport([PY, path, "late", "0"], name="interrupted")
    failures: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook",
                        lambda args: failures.append(args.exc_value))  # type: ignore[arg-type]
    try:
        with pytest.raises(KeyboardInterrupt):
            t.start()
        monkeypatch.undo()
        assert len(started) == 1 and started[0].name == "mcpsync-stderr"
        hub = _stderr._hub
        assert hub is not None and hub.thread is started[0]
        assert t._aside.stderr is not None and t._aside.stderr.thread is hub.thread
        os.fstat(hub.wake_r)  # still open: the running thread polls it
        os.fstat(hub.wake_w)
        other = StdioTransport([PY, path, "other", "1"], name="other")
        other.start()  # joins the same hub, which drains its pipe
        try:
            assert other._aside.stderr is not None and other._aside.stderr.thread is hub.thread
            wait_for(lambda: other.stderr_tail() == "other 0\n", "the other server's line")
        finally:
            other.close()
    finally:
        t.close()
    wait_for(lambda: not started[0].is_alive(), "the hub thread to end")
    assert ours() == [] and active_hub_thread() is None
    assert failures == []
    assert open_fds() <= before


class _InterruptedBeforeStarting(threading.Thread):
    """A thread whose start() raises KeyboardInterrupt before it creates the thread: what a
    Ctrl-C at the signal check ``Thread.start()`` passes before ``_start_new_thread`` does."""

    def start(self) -> None:
        raise KeyboardInterrupt


def test_ctrl_c_before_the_hub_thread_exists_forgets_that_hub(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Interrupted before its thread was created, a hub would never drain anything: it must be
    forgotten (its wake-up pipe closed, the drain unhooked and its pipe closed by close()),
    and the next server must get a hub that runs and drains its stderr."""
    settle_hub()
    before = open_fds()
    made: list[threading.Thread] = []

    def new_thread(name: str, target: Callable[[], None]) -> threading.Thread:
        thread = _InterruptedBeforeStarting(target=target, name=name, daemon=True)
        made.append(thread)
        return thread

    monkeypatch.setattr(_stderr, "new_thread", new_thread)
    path = script(tmp_path, TALKER, "talker.py")
    t = StdioTransport([PY, path, "late", "0"], name="never")
    try:
        with pytest.raises(KeyboardInterrupt):
            t.start()
        monkeypatch.setattr(_stderr, "new_thread", _real_new_thread)
        assert len(made) == 1 and made[0].ident is None
        assert _stderr._hub is None and _stderr._open_hubs == []
        assert t._aside.stderr is None or t._aside.stderr._hub is None
        other = StdioTransport([PY, path, "other", "1"], name="other")
        other.start()
        try:
            hub = _stderr._hub
            assert hub is not None and hub.thread.ident is not None
            wait_for(lambda: other.stderr_tail() == "other 0\n", "the other server's line")
        finally:
            other.close()
    finally:
        t.close()
    wait_for(lambda: active_hub_thread() is None, "the hub thread to end")
    assert ours() == []
    assert open_fds() <= before


class _StartsThenFails(threading.Thread):
    """A thread whose start() creates the thread and then raises an ordinary exception (what a
    signal handler raising, say, ``TimeoutError`` in start()'s wait does); the thread runs
    only once ``go`` is set, so that start() has failed before it takes its first step."""

    go = threading.Event()

    def run(self) -> None:
        self.go.wait(10)
        super().run()

    def start(self) -> None:
        super().start()
        raise TimeoutError("raised by a signal handler")


def test_a_start_that_fails_after_creating_the_hub_thread_leaves_no_reader_behind(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """start() fails after it created the thread, before that thread ran: the hub is
    forgotten, and when the thread does run it must touch nothing (the descriptors it was
    given are closed by then, and their numbers may belong to someone else's pipe)."""
    settle_hub()
    before = open_fds()
    made: list[threading.Thread] = []
    _StartsThenFails.go.clear()

    def new_thread(name: str, target: Callable[[], None]) -> threading.Thread:
        thread = _StartsThenFails(target=target, name=name, daemon=True)
        made.append(thread)
        return thread

    monkeypatch.setattr(_stderr, "new_thread", new_thread)
    path = script(tmp_path, TALKER, "talker.py")
    t = StdioTransport([PY, path, "late", "0"], name="failed")
    try:
        with pytest.raises(TimeoutError):
            t.start()
        monkeypatch.setattr(_stderr, "new_thread", _real_new_thread)
        assert _stderr._hub is None and _stderr._open_hubs == []
    finally:
        t.close()
    r, w = os.pipe()  # likely reuses the numbers the forgotten hub was given
    try:
        os.write(w, b"someone else's data")
        _StartsThenFails.go.set()
        made[0].join(5)
        assert not made[0].is_alive()
        os.set_blocking(r, False)
        assert os.read(r, 100) == b"someone else's data"  # nothing read it away
    finally:
        os.close(r)
        os.close(w)
    assert ours() == [] and active_hub_thread() is None
    assert open_fds() <= before


def test_a_slow_debug_log_handler_keeps_its_own_thread_and_stalls_no_one_else(
        tmp_path: Path) -> None:
    """A server whose logger is enabled for DEBUG when it starts has each stderr line logged
    through the user's handlers: one that blocks must not stop the draining of another
    server, which floods its stderr and only then answers on stdout."""
    settle_hub()
    release = threading.Event()
    blocking = threading.Event()

    class Slow(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            blocking.set()
            release.wait(20)

    quiet = StdioTransport(["/bin/sh", "-c", "echo hello >&2; read x"], name="slowlog")
    log = logging.getLogger(quiet._aside.logger.name)
    handler = Slow(level=logging.DEBUG)
    log.addHandler(handler)
    level = log.level
    log.setLevel(logging.DEBUG)
    chatty = StdioTransport([PY, script(tmp_path, FLOODER, "flooder.py")], name="chatty")
    try:
        quiet.start()
        assert blocking.wait(10)   # its drain thread is held in the handler
        chatty.start()
        assert getattr(receive_one(chatty, timeout=10), "method", None) == "flooded"
        assert quiet._aside.stderr is not None and quiet._aside.stderr.thread is not None
        assert quiet._aside.stderr.thread.name == "mcpsync-stdio-stderr-slowlog"
        drain = chatty._aside.stderr
        assert drain is not None and drain.thread is active_hub_thread()
    finally:
        release.set()
        log.removeHandler(handler)
        log.setLevel(level)
        quiet.close()
        chatty.close()
    assert ours() == []


class _InterruptedOnceStopped:
    """A drain's exit lock that raises KeyboardInterrupt as it is released once ``stop()``
    has marked the drain stopped: a Ctrl-C that lands just after that, the first moment
    one can."""

    def __init__(self, drain: StderrDrain) -> None:
        self._lock = threading.Lock()
        self._drain = drain
        self.fired = False

    def __enter__(self) -> None:
        self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()
        if self._drain._stopped and not self.fired and threading.current_thread() is \
                threading.main_thread():
            self.fired = True
            raise KeyboardInterrupt


@pytest.mark.parametrize("own_thread", [False, True])
def test_ctrl_c_right_after_stop_began_still_closes_the_pipe(own_thread: bool) -> None:
    """Interrupted the moment stop() has marked the drain stopped (so a second stop() does
    nothing), the drain still leaves its thread and its pipe is closed, with the writer
    still open (no EOF to end it)."""
    settle_hub()
    before = open_fds()
    r, w = os.pipe()
    closed: list[int] = []

    def closer() -> None:
        os.close(r)
        closed.append(r)

    drain = StderrDrain(r, name="stopping", logger=logging.getLogger("test.hub.stopping"),
                        on_stderr=(lambda line: None) if own_thread else None, closer=closer)
    try:
        drain.start()
        lock = _InterruptedOnceStopped(drain)
        drain._exit_lock = lock  # type: ignore[assignment]
        with pytest.raises(KeyboardInterrupt):
            drain.stop()
        assert lock.fired
        drain.stop()   # stopped already: nothing to do
        wait_for(lambda: closed == [r], "the pipe to be closed")
        wait_for(lambda: not ours(), "the drain's thread to end")
    finally:
        os.close(w)
    assert open_fds() <= before


def test_a_child_forked_while_a_generation_ends_closes_its_wake_up_pipe() -> None:
    """A fork while the hub thread is letting its last pipe go (the generation has ended,
    its wake-up pipe is not closed yet): the child closes its copies of that pipe too."""
    settle_hub()
    r, w = os.pipe()
    log = logging.getLogger("test.hub.forkend")
    release = threading.Event()
    blocking = threading.Event()

    class Blocker(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            blocking.set()
            release.wait(20)

    handler = Blocker(level=logging.DEBUG)
    log.addHandler(handler)
    drain = StderrDrain(r, name="forkend", logger=log, closer=lambda: os.close(r))
    try:
        drain.start()
        log.setLevel(logging.DEBUG)   # after start(): the drain is on the hub
        hub = _stderr._hub
        assert hub is not None
        os.write(w, b"no newline")
        os.close(w)   # EOF: the hub's last pipe; its last partial line blocks in the handler
        assert blocking.wait(10)
        assert _stderr._hub is None and hub.ended   # the generation has ended...
        wake = (hub.wake_r, hub.wake_w)
        os.fstat(wake[0])                           # ...and its wake-up pipe is open
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            code = 1
            try:
                still_open = 0
                for fd in wake:
                    try:
                        os.fstat(fd)
                        still_open += 1
                    except OSError:
                        pass
                code = 0 if still_open == 0 else 2
            finally:
                os._exit(code)
        assert wait_child(pid, "a child forked while a generation ends") == 0
    finally:
        release.set()
        log.removeHandler(handler)
        log.setLevel(logging.NOTSET)
    drain.stop()
    wait_for(lambda: not ours(), "the hub thread to end")


@pytest.mark.parametrize("own_thread", [False, True])
def test_a_silent_pipe_is_never_given_a_read_buffer(own_thread: bool) -> None:
    """A server that writes nothing to stderr (most do) costs no 64 KiB buffer: the only
    read, the one that finds EOF, is a plain read; the drain lets go and closes the pipe as
    before."""
    settle_hub()
    before = open_fds()
    r, w = os.pipe()
    closed: list[int] = []

    def closer() -> None:
        os.close(r)
        closed.append(r)

    drain = StderrDrain(r, name="silent", logger=logging.getLogger("test.hub.silent"),
                        on_stderr=(lambda line: None) if own_thread else None, closer=closer)
    drain.start()
    os.close(w)   # EOF
    wait_for(lambda: drain._exited, "the drain to let the pipe go at EOF")
    drain.stop()
    assert closed == [r]
    assert drain._bufs is None and drain._view is None
    assert drain.tail() == ""
    wait_for(lambda: not ours(), "the drain's thread to end")
    assert open_fds() <= before


@pytest.mark.parametrize("own_thread", [False, True])
def test_the_buffer_is_made_once_after_a_read_brings_bytes(own_thread: bool) -> None:
    """Once stderr brings bytes the drain reads into a buffer of its own from then on: made
    once (under the I/O lock, with settle() reading beside the draining thread from four
    threads; here the settle() threads do most of the reading, and either may make it), and
    the ring holds every byte in the order written."""
    settle_hub()
    before = open_fds()
    r, w = os.pipe()
    lines: list[str] = []
    drain = StderrDrain(r, name="talks", logger=logging.getLogger("test.hub.talks"),
                        ring_bytes=1 << 20,
                        on_stderr=lines.append if own_thread else None,
                        closer=lambda: os.close(r))
    made: list[int] = []
    stop = threading.Event()

    def settler() -> None:
        while not stop.is_set():
            drain.settle(0.001)
            bufs = drain._bufs
            if bufs is not None and id(bufs[0]) not in made:
                made.append(id(bufs[0]))

    settlers = [threading.Thread(target=settler, name=f"test-settle-{n}") for n in range(4)]
    expected = b"".join(b"line %d\n" % n for n in range(2000))
    try:
        drain.start()
        for thread in settlers:
            thread.start()
        for start in range(0, len(expected), 700):
            os.write(w, expected[start:start + 700])
            time.sleep(0.0005)
        wait_for(lambda: drain.tail().encode() == expected, "every byte in the ring")
    finally:
        stop.set()
        for thread in settlers:
            thread.join(10)
        os.close(w)
    wait_for(lambda: drain._exited, "the drain to let the pipe go at EOF")
    drain.stop()
    assert drain._bufs is not None and len(made) == 1 and id(drain._bufs[0]) == made[0]
    if own_thread:
        assert lines == [f"line {n}" for n in range(2000)]
    wait_for(lambda: not ours(), "the drain's thread to end")
    assert open_fds() <= before


def test_settle_reads_into_the_buffer_the_draining_thread_made() -> None:
    """The buffer made by the draining thread (no settle() running), then used by a
    settle() on another thread while the draining thread is held in ``on_stderr``: the
    same buffer, no second one, and every line in order once the thread goes on."""
    settle_hub()
    before = open_fds()
    r, w = os.pipe()
    lines: list[str] = []
    held = threading.Event()
    go_on = threading.Event()

    def on_stderr(line: str) -> None:
        lines.append(line)
        if line == "second":   # the read that made the buffer brought it
            held.set()
            go_on.wait(10)

    drain = StderrDrain(r, name="made", logger=logging.getLogger("test.hub.made"),
                        on_stderr=on_stderr, closer=lambda: os.close(r))
    try:
        drain.start()
        os.write(w, b"first\n")      # a plain read, by the draining thread
        wait_for(lambda: lines == ["first"], "the first line")
        assert drain._bufs is None
        os.write(w, b"second\n")     # the next read makes the buffer, on that thread
        assert held.wait(10)
        bufs = drain._bufs
        assert bufs is not None
        buf = bufs[0]
        assert bytes(buf[:7]) == b"second\n"
        os.write(w, b"third\n")      # the draining thread is held: settle() reads it
        drain.settle(1.0)
        assert drain.tail() == "first\nsecond\nthird\n"
        assert drain._bufs is bufs and bufs[0] is buf
        assert bytes(buf[:6]) == b"third\n"   # read into the thread's buffer
        assert lines == ["first", "second"]
    finally:
        go_on.set()
        os.close(w)
    wait_for(lambda: drain._exited, "the drain to let the pipe go at EOF")
    drain.stop()
    assert lines == ["first", "second", "third"]
    wait_for(lambda: not ours(), "the drain's thread to end")
    assert open_fds() <= before


def test_a_ctrl_c_as_the_buffer_is_made_loses_no_byte(monkeypatch: pytest.MonkeyPatch) -> None:
    """The buffer is made at the start of the read after the first that brought bytes, before
    that read: a Ctrl-C while it is made (in a settle() on the caller's thread) loses no byte
    already read, and the next settle() makes it and reads on."""
    r, w = os.pipe()
    drain = StderrDrain(r, name="ki", logger=logging.getLogger("test.ki"),
                        closer=lambda: None)
    real = bytearray

    def interrupted(*args: object) -> bytearray:
        if args == (_stderr._READ_SIZE,):
            monkeypatch.undo()
            raise KeyboardInterrupt
        return real(*args)   # type: ignore[arg-type]

    hits = 0
    monkeypatch.setattr(_stderr, "bytearray", interrupted, raising=False)
    try:
        for chunk in (b"one\n", b"two\n"):
            os.write(w, chunk)
            try:
                drain.settle(1.0)
            except KeyboardInterrupt:
                hits += 1
        drain.settle(1.0)
        assert hits == 1
        assert drain.tail() == "one\ntwo\n"
    finally:
        os.close(w)
        os.close(r)
