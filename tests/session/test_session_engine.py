"""Session engine invariants over the in-memory transport with an echoing peer: exactly one
reader at any moment, and the rescue of a caller whose request write blocks while it holds the
role."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from mcpsync import jsonrpc
from mcpsync.jsonrpc import Batch, Message, ParseError
from mcpsync.session import Session
from mcpsync.transport.base import CallFailed
from mcpsync.transport.memory import MemoryTransport

pytestmark = pytest.mark.timeout(30)


class EchoPeer:
    """Answers every request with its params, after ``delay`` s; request number
    ``block_request`` is taken only once the client has read something since (a server that
    reads its stdin only after its stdout was drained)."""

    def __init__(self, deliver: Callable[[bytes | None], None], *, block_request: int = 0,
                 delay: float = 0.0) -> None:
        self._deliver = deliver
        self._delay = delay
        self._block_request = block_request
        self._requests = 0
        self.sent: list[dict[str, Any]] = []
        self.blocked_writer: str | None = None
        self.read_since_block = threading.Event()
        self._timers: list[threading.Timer] = []

    def write(self, frame: bytes) -> None:
        obj = json.loads(frame)
        if "id" in obj:
            self._requests += 1
        if "id" in obj and self._requests == self._block_request:
            self.blocked_writer = threading.current_thread().name
            self.read_since_block.clear()
            self._deliver(jsonrpc.serialize(jsonrpc.notification("test/flood", {})))
            assert self.read_since_block.wait(10), "nobody read while the write was blocked"
        self.sent.append(obj)
        if "id" in obj:
            answer = jsonrpc.serialize(jsonrpc.result(obj["id"], obj.get("params")))
            if self._delay:
                timer = threading.Timer(self._delay, self._deliver, args=(answer,))
                timer.daemon = True
                timer.start()
            else:
                self._deliver(answer)

    def close(self) -> None:
        pass


class FakeTransport(MemoryTransport):
    """The in-memory transport to an :class:`EchoPeer`, checking that ``receive()`` is never
    re-entered and recording which threads read."""

    def __init__(self, *, block_request: int = 0, delay: float = 0.0) -> None:
        self.peer: EchoPeer | None = None

        def open_peer(deliver: Callable[[bytes | None], None]) -> EchoPeer:
            self.peer = EchoPeer(deliver, block_request=block_request, delay=delay)
            return self.peer

        super().__init__(open_peer, name="fake")
        self._count_lock = threading.Lock()
        self.readers = 0
        self.max_readers = 0
        self.reader_threads: set[str] = set()
        self.frames_read: dict[str, int] = {}   # thread name -> frames its receive() returned
        self.start()

    @property
    def blocked_writer(self) -> str | None:
        assert self.peer is not None
        return self.peer.blocked_writer

    def receive(self, timeout: float | None
                ) -> list[Message | Batch | ParseError | CallFailed] | None:
        with self._count_lock:
            self.readers += 1
            self.max_readers = max(self.max_readers, self.readers)
            self.reader_threads.add(threading.current_thread().name)
        try:
            items = super().receive(timeout)
            if items and self.peer is not None:
                self.peer.read_since_block.set()
            if items:
                name = threading.current_thread().name
                self.frames_read[name] = self.frames_read.get(name, 0) + len(items)
            return items
        finally:
            with self._count_lock:
                self.readers -= 1


def test_exactly_one_reader_at_any_moment(no_leaks: None) -> None:
    transport = FakeTransport(delay=0.0005)
    session = Session(transport, name="fake")
    session.start()
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            for j in range(200):
                assert session.request("m", {"k": k, "j": j}) == {"k": k, "j": j}
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,), name=f"w{k}") for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    # Sequential calls from the main thread read their own responses.
    for j in range(50):
        session.request("m", {"seq": j})
    session.close()
    assert not errors
    assert transport.max_readers == 1
    assert "MainThread" in transport.reader_threads  # the leader read its own response
    assert "mcpsync-memory-reader-fake" in transport.reader_threads


def test_sole_caller_takes_the_role_from_the_background_reader(no_leaks: None) -> None:
    transport = FakeTransport(delay=0.001)
    session = Session(transport, name="fake")
    session.start()
    try:
        for j in range(20):
            assert session.request("m", {"j": j}) == {"j": j}
        assert "MainThread" in transport.reader_threads
    finally:
        session.close()


def test_a_sole_caller_answered_by_the_background_reader_gets_the_role_back(
        no_leaks: None) -> None:
    # The peer answers inside the write, so the answer is there before the caller asks the
    # background reader for the role: the reader reads it and settles the call. It must
    # then give the role up, or every later call would ask again and be answered by it
    # again (two thread hops per call); instead the caller's next calls read their own.
    transport = FakeTransport()
    session = Session(transport, name="fake")
    session.start()
    try:
        assert session.request("m", {"warm": 1}) == {"warm": 1}
        for _ in range(3):
            time.sleep(0.1)   # idle beyond HANDOFF_GRACE: the background reader takes over
            before = dict(transport.frames_read)
            for j in range(20):
                assert session.request("m", {"j": j}) == {"j": j}
            led = transport.frames_read.get("MainThread", 0) - before.get("MainThread", 0)
            assert led >= 18, transport.frames_read
        # And it still reads what arrives between calls, with the role given up.
        seen = threading.Event()
        session._on_notification = lambda message: seen.set()
        assert transport.peer is not None
        transport.peer._deliver(jsonrpc.serialize(jsonrpc.notification("test/n", {})))
        assert seen.wait(5)
    finally:
        session.close()


def test_a_blocked_write_while_holding_the_role_is_rescued(no_leaks: None) -> None:
    """The second call finds the role free and claims it before writing; its write only
    completes once stdout is read, so the background reader must take the role over."""
    transport = FakeTransport(block_request=2, delay=0.001)
    seen: list[str] = []
    session = Session(transport, name="fake",
                      on_notification=lambda m: seen.append(m.method or ""))
    session.start()
    try:
        assert session.request("m", {"x": 1}, timeout=10) == {"x": 1}
        assert session.request("m", {"x": 2}, timeout=10) == {"x": 2}
        assert transport.blocked_writer == "MainThread"
        assert transport.max_readers == 1
    finally:
        session.close()
    assert seen == ["test/flood"]


def test_progress_params_are_copied_not_mutated(no_leaks: None) -> None:
    transport = FakeTransport()
    session = Session(transport, name="fake")
    session.start()
    try:
        params: dict[str, Any] = {"a": 1, "_meta": {"k": "v"}}
        echoed = session.request("m", params, progress=lambda *a: None)
        assert params == {"a": 1, "_meta": {"k": "v"}}
        assert echoed["_meta"] == {"k": "v", "progressToken": 1}
        plain = session.request("m", params)
        assert plain == params  # no token without a progress callback
    finally:
        session.close()


class _DecoyPeer:
    """Answers each request with decoys first: a result, an invalid response and a progress
    notification, each naming the request's integer id as a string; then the real answer."""

    def __init__(self, deliver: Callable[[bytes | None], None]) -> None:
        self._deliver = deliver

    def write(self, frame: bytes) -> None:
        obj = json.loads(frame)
        rid = obj.get("id")
        if rid is None:
            return
        text = json.dumps(str(rid))
        self._deliver(b'{"jsonrpc":"2.0","id":%s,"result":"decoy"}' % text.encode())
        self._deliver(b'{"jsonrpc":"2.0","id":%s,"result":1,"error":{"code":1,"message":"x"}}'
                      % text.encode())
        self._deliver(json.dumps({"jsonrpc": "2.0", "method": "notifications/progress",
                                  "params": {"progressToken": str(rid), "progress": 1}}).encode())
        self._deliver(jsonrpc.serialize(jsonrpc.result(rid, "right")))

    def close(self) -> None:
        pass


def test_an_id_that_is_a_string_never_settles_the_call_of_that_number(no_leaks: None) -> None:
    """The in-flight table is keyed by the integer id itself: a response, an invalid
    response or a progress notification naming "1" (a string) is not for call 1. (A string
    never equals an integer key; this pins the behaviour, while the parser already refuses
    the ids that would, ``true`` and ``1.0``.)"""
    seen: list[tuple[float, Any, Any]] = []
    transport = MemoryTransport(_DecoyPeer, name="decoy")
    transport.start()
    with Session(transport, name="decoy") as session:
        session.start()
        for _ in range(3):
            assert session.request("echo", {}) == "right"
        assert session.request("echo", {}, progress=lambda *a: seen.append(a)) == "right"
        assert session.submit("echo", {}).result(5) == "right"
        assert not session._pending
    assert seen == []
