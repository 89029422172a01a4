"""The call pipeline's policy, driven round by round.

``call_flow`` is a generator: these tests play the wire themselves (send a result, throw an
error) and read what the flow decides at each step - when it hops off the dispatcher, which
params the next round carries, and when it gives up. The host is a small recording stand-in
for the client: the flow asks it only for its era, its ``_meta``, its callbacks and options,
and the three decisions that change client state.
"""

from __future__ import annotations

from typing import Any

import pytest

from mcpsync.client._callbacks import Callbacks
from mcpsync.client._flow import Call, Round, call_flow
from mcpsync.errors import ConnectionLost, InputRoundsExceeded, RemoteError


class _Options:
    """The two options the flow reads."""

    def __init__(self, restart: str | None, max_input_rounds: int) -> None:
        self.restart = restart
        self.max_input_rounds = max_input_rounds


class _Host:
    """What the flow sees of a client: one fixed session object per era."""

    def __init__(self, *, modern: bool = True, restart: str | None = "on_demand",
                 max_input_rounds: int = 10) -> None:
        self._name = "s"
        self._modern = modern
        self._meta: dict[str, Any] = {"v": "1"}
        self._callbacks = Callbacks()
        self._opts = _Options(restart, max_input_rounds)
        self.sessions: list[object] = [object()]
        self.contradicted = False
        self.redetected: list[object] = []

    def _live(self) -> Any:
        return self.sessions[-1]

    def _contradicts(self, exc: RemoteError, method: str, session: Any, *,
                     modern: bool) -> bool:
        return self.contradicted and not self.redetected

    def _redetect(self, used: Any, exc: RemoteError) -> None:
        self.redetected.append(used)
        self.sessions.append(object())
        self._modern = not self._modern

    def _adopt_version(self, exc: RemoteError) -> bool:
        self._meta = {"v": "2"}
        return True


def _call(host: _Host, **kw: Any) -> Call:
    return Call("tools/call", {"name": "t"},
                lambda: {"name": "t", "_meta": host._meta} if host._modern else {"name": "t"},
                **kw)


def _unsupported() -> RemoteError:
    return RemoteError("x", code=-32022, data={"supported": ["2026-07-28"]})


def test_a_complete_answer_ends_the_flow_with_no_hop() -> None:
    host = _Host()
    flow = call_flow(host, _call(host))
    first = next(flow)
    assert isinstance(first, Round) and first.session is host.sessions[0] and first.modern
    with pytest.raises(StopIteration) as stop:
        flow.send({"resultType": "complete", "content": []})
    assert stop.value.value == {"resultType": "complete", "content": []}


def test_a_version_retry_hops_resends_with_the_new_meta_and_happens_once() -> None:
    host = _Host()
    flow = call_flow(host, _call(host))
    next(flow)
    assert flow.throw(_unsupported()) is None          # a hop before the second round
    again = next(flow)
    assert isinstance(again, Round) and again.params == {"name": "t", "_meta": {"v": "2"}}
    with pytest.raises(RemoteError):                     # a second -32022 is the answer
        flow.throw(_unsupported())


def test_a_dropped_connection_is_sent_again_only_when_asked_and_restartable() -> None:
    for retry, restart, resent in [(True, "on_demand", True), (False, "on_demand", False),
                                   (True, None, False)]:
        host = _Host(restart=restart)
        flow = call_flow(host, _call(host, retry_on_drop=retry))
        sent = next(flow)
        if not resent:
            with pytest.raises(ConnectionLost):
                flow.throw(ConnectionLost("gone"))
            continue
        assert flow.throw(ConnectionLost("gone")) is None
        host.sessions.append(object())                 # the restart
        again = next(flow)
        assert isinstance(again, Round) and again.params == sent.params  # type: ignore[union-attr]
        assert again.session is host.sessions[-1]
        with pytest.raises(ConnectionLost):             # once per call
            flow.throw(ConnectionLost("gone again"))


def test_input_rounds_are_built_from_the_first_params_each_time() -> None:
    host = _Host()
    flow = call_flow(host, _call(host))
    next(flow)
    assert flow.send({"resultType": "input_required", "requestState": "one"}) is None
    second = next(flow)
    assert isinstance(second, Round) and second.params is not None
    assert second.params["requestState"] == "one"
    assert flow.send({"resultType": "input_required"}) is None
    third = next(flow)
    assert isinstance(third, Round) and third.params is not None
    assert "requestState" not in third.params            # not carried over from round two
    with pytest.raises(StopIteration):
        flow.send({"content": []})


def test_input_rounds_stop_at_the_limit() -> None:
    host = _Host(max_input_rounds=1)
    flow = call_flow(host, _call(host))
    next(flow)
    assert flow.send({"resultType": "input_required", "requestState": "a"}) is None
    next(flow)
    assert flow.send({"resultType": "input_required", "requestState": "b"}) is None
    with pytest.raises(InputRoundsExceeded):
        next(flow)


def test_a_contradiction_redetects_and_starts_over_in_the_new_era() -> None:
    host = _Host(modern=False)
    host.contradicted = True
    flow = call_flow(host, _call(host))
    first = next(flow)
    assert isinstance(first, Round) and not first.modern
    assert flow.throw(RemoteError("x", code=-32021)) is None
    again = next(flow)
    assert host.redetected == [first.session]
    assert isinstance(again, Round) and again.modern and again.session is host.sessions[-1]
    assert again.params == {"name": "t", "_meta": {"v": "1"}}   # built anew for the era
    with pytest.raises(RemoteError):                    # detected once: now an answer
        flow.throw(RemoteError("x", code=-32021))


def test_a_round_sent_by_the_caller_is_yielded_first_and_not_rebuilt() -> None:
    host = _Host()
    built: list[int] = []
    call = Call("tools/call", {"name": "t"}, lambda: built.append(1) or {"name": "t"})
    sent = Round(host.sessions[0], {"name": "t", "_meta": {"v": "1"}}, True)
    flow = call_flow(host, call, sent=sent)
    assert next(flow) is sent
    with pytest.raises(StopIteration):
        flow.send({"resultType": "complete"})
    assert not built
