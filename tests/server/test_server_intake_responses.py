"""The intake hands the client's responses to the dispatcher at once, never queued.

A handler that asked the client something holds a worker until the answer arrives, so an
answer queued behind requests could wait for itself. These tests drive the real ``Intake``
with a minimal dispatcher that records what reaches it, including with the queue and the
look-ahead in use.
"""

from __future__ import annotations

import json
import threading
from typing import Any, cast

from mcpsync.jsonrpc import Message
from mcpsync.server._intake import Intake
from mcpsync.server._router import Dispatcher


class _Recorder:
    """The three dispatcher calls the intake makes, recorded in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def track(self, message: Message) -> None:
        self.events.append(("track", message.id.value if message.id else None))

    def cancel_notice(self, params: Any) -> bool:
        self.events.append(("cancel", params.get("requestId")))
        return False

    def deliver_response(self, message: Message) -> None:
        self.events.append(("answer", message.id.value if message.id else None))


def _intake(recorder: _Recorder, *, max_queued: int = 8) -> Intake:
    return Intake(cast(Dispatcher, recorder), threading.Lock(), max_queued=max_queued,
                  max_queued_bytes=1 << 20, on_work=lambda delta: None)


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode()


def _request(rid: int) -> bytes:
    return _line({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                  "params": {"name": "echo", "arguments": {"text": "x"}}})


def _offer(intake: Intake, line: bytes) -> None:
    intake.offer(line, threading.Event(), 0.01)


def _drain(intake: Intake) -> list[Any]:
    taken = []
    while (got := intake.take(0.0)) is not None:
        item, _calls = got
        assert isinstance(item, Message) and item.id is not None
        taken.append(item.id.value)
    return taken


def test_a_response_goes_to_the_dispatcher_and_is_not_queued() -> None:
    recorder = _Recorder()
    intake = _intake(recorder)
    _offer(intake, _line({"jsonrpc": "2.0", "id": "s1", "result": {"action": "accept"}}))
    _offer(intake, _line({"jsonrpc": "2.0", "id": 7,
                          "error": {"code": -1, "message": "declined"}}))
    assert recorder.events == [("answer", "s1"), ("answer", 7)]
    assert intake.take(0.0) is None


def test_responses_overtake_requests_waiting_in_a_full_queue_and_look_ahead() -> None:
    recorder = _Recorder()
    intake = _intake(recorder, max_queued=1)
    for rid in (1, 2, 3):  # 1 fills the queue; 2 and 3 wait in the look-ahead, undecoded
        _offer(intake, _request(rid))
    assert recorder.events == [("track", 1)]
    # A result holding a nested "method" key must still be recognised as a response.
    _offer(intake, _line({"jsonrpc": "2.0", "id": "s1",
                          "result": {"content": {"method": "x", "data": [1]}}}))
    _offer(intake, _line({"id": "s2", "jsonrpc": "2.0", "result": "method"}))
    _offer(intake, _request(4))
    assert recorder.events == [("track", 1), ("answer", "s1"), ("answer", "s2")]
    assert _drain(intake) == [1, 2, 3, 4]  # the requests kept their order
    assert recorder.events[3:] == [("track", 2), ("track", 3), ("track", 4)]


def test_a_request_in_the_look_ahead_is_not_decoded_early() -> None:
    recorder = _Recorder()
    intake = _intake(recorder, max_queued=1)
    _offer(intake, _request(1))
    # Unusual spacing: not plainly a call, so decoded on arrival, found to be a request,
    # and kept in its place.
    _offer(intake, b'{"jsonrpc": "2.0", "id": 2, "method" : "ping"}')
    assert recorder.events == [("track", 1)]
    assert _drain(intake) == [1, 2]


def test_a_response_inside_a_batch_is_delivered_when_the_batch_is_decoded() -> None:
    recorder = _Recorder()
    intake = _intake(recorder)
    batch = [{"jsonrpc": "2.0", "id": "s1", "result": {}},
             {"jsonrpc": "2.0", "id": 5, "method": "ping"}]
    _offer(intake, _line(batch))  # type: ignore[arg-type]
    assert recorder.events == [("answer", "s1"), ("track", 5)]
    got = intake.take(0.0)
    assert got is not None and got[1] == [None, None]  # the recorder tracks nothing


def test_an_error_without_id_is_no_answer_to_anything() -> None:
    recorder = _Recorder()
    intake = _intake(recorder)
    _offer(intake, _line({"jsonrpc": "2.0", "id": None,
                          "error": {"code": -32700, "message": "parse error"}}))
    assert recorder.events == []
    assert intake.take(0.0) is None
