"""``Session.request`` forwards to ``Session._request``, the positional entry that
``Client.call_tool`` calls directly (CPython 3.11 does not specialise a call to a function
with keyword-only parameters, so such a call takes the general, slower frame set-up): every
argument must arrive in its place, and both entries must answer alike."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

import pytest

from mcpsync.errors import RequestTimeout
from mcpsync.session import Session

from .helpers import peer_session

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
    assert seen == [("m", None, None, None, None, True),
                    ("m", {"a": 1}, 2.5, progress, True, False)]


def test_the_positional_entry_has_request_parameters_in_order() -> None:
    """``_request`` takes ``request``'s parameters in ``request``'s order, all positional and
    without defaults (so that CPython can make the call inline)."""
    public = [p.name for p in inspect.signature(Session.request).parameters.values()]
    entry = inspect.signature(Session._request).parameters.values()
    assert [p.name for p in entry] == public
    assert all(p.kind is p.POSITIONAL_OR_KEYWORD and p.default is p.empty for p in entry)


def test_both_entries_answer_alike(peer: Session) -> None:
    assert peer.request("echo", {"n": 1}) == {"n": 1}
    assert peer._request("echo", {"n": 2}, None, None, None, True) == {"n": 2}
    assert peer._request("echo", None, 5.0, None, None, True) == {}
    with pytest.raises(RequestTimeout):
        peer._request("ignore", None, 0.05, None, None, True)
    with pytest.raises(RequestTimeout):
        peer.request("ignore", timeout=0.05)
    assert peer._request("echo", {"n": 3}, None, None, None, True) == {"n": 3}
