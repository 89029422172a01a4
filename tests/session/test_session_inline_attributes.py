"""A session holds few enough attributes for CPython 3.11 to keep them inline in the
instance (29 at most; beyond that its instance dict is a real dict, and every attribute load
on it, two dozen per sequential call, takes the slower hinted lookup). What its calls never
read is kept in ``session._aside`` (``Aside``) instead."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mcpsync.session import Session
from mcpsync.session._base import Aside

from .helpers import peer_session

pytestmark = pytest.mark.timeout(60)

#: The most attributes CPython 3.11 and 3.12 keep inline in an instance.
INLINE_MAX = 29


@pytest.fixture
def peer(no_leaks: None) -> Iterator[Session]:
    yield from peer_session()


def test_a_used_session_holds_no_more_attributes_than_are_kept_inline(peer: Session) -> None:
    assert peer.request("echo", {"n": 1}) == {"n": 1}
    submitted = peer.submit("echo", {"n": 2})
    assert submitted.result(5) == {"n": 2}
    # vars() makes the instance dict real: asked last, after the calls.
    names = vars(peer)
    assert len(names) <= INLINE_MAX, sorted(names)
    assert type(peer._aside) is Aside


def test_the_aside_holds_what_was_moved(peer: Session) -> None:
    aside = peer._aside
    assert aside.close_done is False and aside.garbage == 0 and aside.first_garbage is None
    assert aside.lost_cause is None and not aside.loss_settled.is_set()
    assert aside.observe_progress is False and aside.on_lost is None
    peer.close()
    assert aside.close_done is True and aside.on_lost is None
