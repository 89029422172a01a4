"""``Session.request`` forwards to ``Session._request``, the positional entry that
``Client.call_tool`` calls directly (CPython 3.11 does not specialise a call to a function
with keyword-only parameters, so such a call takes the general, slower frame set-up): every
argument must arrive in its place, and both entries must answer alike. ``_request``'s one
parameter more, ``tool``, is ``None`` from ``request``; given, the request line is written by
``_serialize_tool_call`` and must be the same bytes."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

import pytest

from mcpsync.errors import RequestTimeout
from mcpsync.session import Session

from .helpers import peer_session, record_lines_written

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def peer(no_leaks: None) -> Iterator[Session]:
    yield from peer_session()


def test_request_forwards_every_argument_in_its_place(peer: Session,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[Any, ...]] = []

    def spy(*args: Any) -> Any:
        seen.append(args)
        return "answer"

    monkeypatch.setattr(peer, "_request", spy)

    def progress(done: float, total: float | None, message: str | None) -> None:
        """Never called: the spy answers."""

    assert peer.request("m") == "answer"
    assert peer.request("m", {"a": 1}, timeout=2.5, progress=progress,
                        reset_timeout_on_progress=True, cancellable=False) == "answer"
    assert seen == [("m", None, None, None, None, True, None),
                    ("m", {"a": 1}, 2.5, progress, True, False, None)]


def test_the_positional_entry_has_request_parameters_in_order() -> None:
    """``_request`` takes ``request``'s parameters in ``request``'s order, then ``tool``, all
    positional and without defaults (so that CPython can make the call inline)."""
    public = [p.name for p in inspect.signature(Session.request).parameters.values()]
    entry = inspect.signature(Session._request).parameters.values()
    assert [p.name for p in entry] == [*public, "tool"]
    assert all(p.kind is p.POSITIONAL_OR_KEYWORD and p.default is p.empty for p in entry)


def test_both_entries_answer_alike(peer: Session) -> None:
    assert peer.request("echo", {"n": 1}) == {"n": 1}
    assert peer._request("echo", {"n": 2}, None, None, None, True, None) == {"n": 2}
    assert peer._request("echo", None, 5.0, None, None, True, None) == {}
    with pytest.raises(RequestTimeout):
        peer._request("ignore", None, 0.05, None, None, True, None)
    with pytest.raises(RequestTimeout):
        peer.request("ignore", timeout=0.05)
    assert peer._request("echo", {"n": 3}, None, None, None, True, None) == {"n": 3}


def test_a_tool_entry_writes_the_same_line(peer: Session,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``tool`` given, the frame written is byte for byte what ``request`` writes for
    the same params (the peer answers any method it does not know with an error, which is
    what each call raises alike)."""
    frames = record_lines_written(peer, monkeypatch)
    for params in ({"name": "echo", "arguments": {"text": "hi"}},
                   {"name": "é\n\u2028", "arguments": {}},
                   {"name": "echo", "arguments": {"nested": [1, {"a": None}], "f": 1.5}}):
        outcomes = []
        for tool in (params["name"], None):
            try:
                outcomes.append(peer._request("tools/call", params, 5.0, None, None, True,
                                              tool))
            except Exception as exc:  # the peer's error for tools/call, the same both ways
                outcomes.append(type(exc))
        assert outcomes[0] == outcomes[1]
        first, second = frames[-2:]
        assert first.replace(b'"id":' + _id(first), b"") \
            == second.replace(b'"id":' + _id(second), b"")


def _id(frame: bytes) -> bytes:
    return frame.split(b'"id":', 1)[1].split(b",", 1)[0]
