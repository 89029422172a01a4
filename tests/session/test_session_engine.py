"""Session engine invariants against an in-process fake pull transport: exactly one reader at
any moment, and the rescue of a caller whose request write blocks while it holds the role."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from mcpsync import jsonrpc
from mcpsync.jsonrpc import Message
from mcpsync.session import Session

pytestmark = pytest.mark.timeout(30)


class FakeTransport:
    """Answers every request with its params; checks that receive() is never re-entered."""

    allow_batch = False

    def __init__(self, *, block_request: int = 0, delay: float = 0.0) -> None:
        self._delay = delay
        self._cond = threading.Condition()
        self._inbox: list[Message] = []
        self._woken = False
        self.readers = 0
        self.max_readers = 0
        self.reader_threads: set[str] = set()
        self.sent: list[dict[str, Any]] = []
        self._block_request = block_request
        self._requests = 0
        self.blocked_writer: str | None = None
        self._read_since_block = threading.Event()
        self.closed = False

    def send_bytes(self, frame: bytes) -> None:
        obj = json.loads(frame)
        if "id" in obj:
            self._requests += 1
        if "id" in obj and self._requests == self._block_request:
            # A server that reads its stdin only after its stdout was drained.
            self.blocked_writer = threading.current_thread().name
            self._read_since_block.clear()
            with self._cond:
                self._inbox.append(jsonrpc.notification("test/flood", {}))
                self._cond.notify_all()
            assert self._read_since_block.wait(10), "nobody read while the write was blocked"
        self.sent.append(obj)
        if "id" in obj:
            answer = jsonrpc.result(obj["id"], obj.get("params"))
            if self._delay:
                timer = threading.Timer(self._delay, self._deliver, args=(answer,))
                timer.daemon = True
                timer.start()
            else:
                self._deliver(answer)

    def _deliver(self, message: Message) -> None:
        with self._cond:
            self._inbox.append(message)
            self._cond.notify_all()

    def send(self, message: Message) -> None:
        self.send_bytes(jsonrpc.serialize(message))

    def receive(self, timeout: float | None) -> list[Any] | None:
        with self._cond:
            self.readers += 1
            self.max_readers = max(self.max_readers, self.readers)
            self.reader_threads.add(threading.current_thread().name)
            try:
                if not self._inbox and not self._woken and not self.closed:
                    self._cond.wait(timeout)
                self._woken = False
                if self.closed:
                    return None
                items, self._inbox = self._inbox, []
                if items:
                    self._read_since_block.set()
                return items
            finally:
                self.readers -= 1

    def wake(self) -> None:
        with self._cond:
            self._woken = True
            self._cond.notify_all()

    def returncode(self) -> int | None:
        return None

    def wait_exit(self, timeout: float) -> int | None:
        return None

    def stderr_tail(self) -> str:
        return ""

    def stderr_excerpt(self) -> str:
        return ""

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()


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
    assert "mcpsync-stdio-reader-fake" in transport.reader_threads


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
