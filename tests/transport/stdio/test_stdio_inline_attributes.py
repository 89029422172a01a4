"""A stdio transport holds few enough attributes for CPython 3.11 to keep them inline in the
instance (29 at most; beyond that its instance dict is a real dict, every attribute load on
it, about twenty per sequential call, takes the slower hinted lookup, and no method looked up
on it is specialised). What its calls never read is kept in ``transport._aside``
(``Aside``) instead, from ``__init__`` on, so that a close at any point finds it."""

from __future__ import annotations

import sys

import pytest
from helpers import PEERS

import mcpsync
from mcpsync.transport.stdio import StdioTransport
from mcpsync.transport.stdio._lifecycle import Aside

pytestmark = pytest.mark.timeout(60)

#: The most attributes CPython 3.11 and 3.12 keep inline in an instance.
INLINE_MAX = 29

FEATURES = [sys.executable, str(PEERS / "feature_server.py")]


def test_a_used_transport_holds_no_more_attributes_than_are_kept_inline(
        no_leaks: None) -> None:
    with mcpsync.connect(FEATURES) as client:
        assert client.call_tool("greet", {"name": "ada"}).text == "hello ada"
        t = client._session._transport
        assert isinstance(t, StdioTransport)
        assert client.call_tool("greet", {"name": "bob"}).text == "hello bob"
        # vars() makes the instance dict real: asked after the calls.
        names = vars(t)
        assert len(names) <= INLINE_MAX, sorted(names)
    # The close sets what it records (the exit status, the reap, the leftovers' signal):
    # on the aside, not on the transport.
    assert t.closed
    names = vars(t)
    assert len(names) <= INLINE_MAX, sorted(names)
    aside = t._aside
    assert type(aside) is Aside and not hasattr(aside, "__dict__")
    assert aside.started and not aside.holds_spawner and aside.pid_reaped is not None
    assert aside.leftovers_killed and not aside.interrupted


def test_the_aside_is_there_before_start(no_leaks: None) -> None:
    t = StdioTransport([sys.executable, "-c", "pass"], name="never started",
                       env={"A": "1"}, cwd="/", stderr_bytes=123, die_with_parent=False)
    aside = t._aside
    assert aside.safe == "never_started" and aside.logger.name == "mcpsync.server.never_started"
    assert aside.env == {"A": "1"} and aside.cwd == "/" and aside.stderr_bytes == 123
    assert aside.die_with_parent is False and aside.inherit_env is False
    assert aside.started is False and aside.stderr is None and aside.finisher is None
    assert aside.status is None and aside.pid_reaped is None and aside.stuck is None
    assert len(vars(t)) <= INLINE_MAX, sorted(vars(t))
    t.close()   # never started: the close finds what it needs
    assert t.closed and t.returncode() is None
