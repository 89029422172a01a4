"""2026-07-28 input rounds on the wire: ``input_required``, the sealed ``requestState``, and
every way a client (or an attacker posing as one) can send it back wrong.

A round is answered with the pending ask in ``inputRequests`` and the answers so far sealed in
``requestState``; the retry carries the answer in ``inputResponses``. The state is bound to the
server, the method, the tool / prompt / URI and the arguments, expires after 10 minutes, and
opens only with one of the server's keys. Each refusal is -32602 with ``data.reason``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
from helpers import PEERS
from peers import feature_server

from mcpsync.protocol import META_CLIENT_CAPABILITIES
from mcpsync.server import Ask, Context, Server
from mcpsync.server._state import StateSealer
from server.helpers import PipeServer, modern_meta

KEY = "a shared secret of enough length"
ELICIT = {"elicitation": {}}


def meta(capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
    return modern_meta(**{META_CLIENT_CAPABILITIES: ELICIT if capabilities is None
                          else capabilities})


def call(ps: PipeServer, n: int, name: str, arguments: dict[str, Any] | None = None,
         **extra: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments or {}, "_meta": meta(),
                              **extra}
    return ps.request(n, "tools/call", params)


def first_round(ps: PipeServer, name: str = "ask_name",
                arguments: dict[str, Any] | None = None) -> dict[str, Any]:
    result = call(ps, 1, name, arguments)["result"]
    assert result["resultType"] == "input_required"
    return result


def test_a_round_trip_completes() -> None:
    with PipeServer(feature_server.build(state_keys=[KEY])) as ps:
        first = first_round(ps)
        (key, ask), = first["inputRequests"].items()
        assert ask["method"] == "elicitation/create"
        assert ask["params"]["message"] == "Your name?"
        assert "requestState" in first and "ttlMs" not in first   # never cached
        done = call(ps, 2, "ask_name", inputResponses={
            key: {"action": "accept", "content": {"name": "Zoe"}}},
            requestState=first["requestState"])["result"]
        assert done["resultType"] == "complete"
        assert done["content"] == [{"type": "text", "text": "hello Zoe"}]


def test_two_asks_take_two_rounds_and_the_state_grows() -> None:
    with PipeServer(feature_server.build(state_keys=[KEY])) as ps:
        first = first_round(ps, "ask_twice")
        second = call(ps, 2, "ask_twice", inputResponses={"ask-1": {
            "action": "accept", "content": {"v": "Al"}}},
            requestState=first["requestState"])["result"]
        assert second["resultType"] == "input_required"
        assert list(second["inputRequests"]) == ["ask-2"]
        third = call(ps, 3, "ask_twice", inputResponses={"ask-2": {
            "action": "accept", "content": {"v": "red"}}},
            requestState=second["requestState"])["result"]
        assert third["content"][0]["text"] == "Al likes red"


def _refused(reply: dict[str, Any], reason: str | None) -> str:
    error = reply["error"]
    assert error["code"] == -32602, reply
    if reason is not None:
        assert error["data"]["reason"] == reason, error
    return str(error["message"])


ANSWER = {"ask-1": {"action": "accept", "content": {"name": "Zoe"}}}


def test_tampered_state_is_refused() -> None:
    with PipeServer(feature_server.build(state_keys=[KEY])) as ps:
        state = first_round(ps)["requestState"]
        flipped = state[:-5] + ("A" if state[-5] != "A" else "B") + state[-4:]
        message = _refused(call(ps, 2, "ask_name", inputResponses=ANSWER,
                                requestState=flipped), "tampered-or-other-request")
        assert "without requestState" in message   # says how to start over
        _refused(call(ps, 3, "ask_name", inputResponses=ANSWER, requestState=42), "malformed")
        _refused(call(ps, 4, "ask_name", inputResponses=ANSWER,
                      requestState="x" * 70_000), "too-large")


def test_state_replayed_for_another_tool_or_other_arguments_is_refused() -> None:
    with PipeServer(feature_server.build(state_keys=[KEY])) as ps:
        state = first_round(ps)["requestState"]
        _refused(call(ps, 2, "ask_twice", inputResponses=ANSWER, requestState=state),
                 "tampered-or-other-request")
        llm = ps.request(3, "tools/call", {
            "name": "ask_llm", "arguments": {"question": "a"},
            "_meta": meta({"sampling": {}})})["result"]
        replay = ps.request(4, "tools/call", {
            "name": "ask_llm", "arguments": {"question": "b"}, "_meta": meta({"sampling": {}}),
            "inputResponses": {"ask-1": {"role": "assistant", "model": "m",
                                         "content": {"type": "text", "text": "t"}}},
            "requestState": llm["requestState"]})
        _refused(replay, "tampered-or-other-request")


def test_state_sealed_with_another_key_is_refused() -> None:
    with PipeServer(feature_server.build(state_keys=[KEY])) as ps:
        state = first_round(ps)["requestState"]
    with PipeServer(feature_server.build(state_keys=["another secret, also long"])) as other:
        _refused(call(other, 1, "ask_name", inputResponses=ANSWER, requestState=state),
                 "unknown-key")


def test_expired_state_is_refused() -> None:
    now = [1_000_000.0]
    server = feature_server.build(state_keys=[KEY])
    server._sealer = StateSealer("features", [KEY], clock=lambda: now[0])
    with PipeServer(server) as ps:
        state = first_round(ps)["requestState"]
        now[0] += 601
        _refused(call(ps, 2, "ask_name", inputResponses=ANSWER, requestState=state),
                 "expired")


def test_answers_are_taken_by_key_with_or_without_a_state() -> None:
    with PipeServer(feature_server.build(state_keys=[KEY])) as ps:
        # Answers are the client's word: without a state they are used, extra keys ignored.
        direct = call(ps, 1, "ask_name", inputResponses={
            **ANSWER, "unasked": {"x": 1}, "not-an-object": 5})["result"]
        assert direct["content"][0]["text"] == "hello Zoe"
        # A state with the answer under the wrong key: the handler simply asks again.
        state = first_round(ps)["requestState"]
        again = call(ps, 2, "ask_name", inputResponses={"other": {}},
                     requestState=state)["result"]
        assert again["resultType"] == "input_required"
        assert list(again["inputRequests"]) == ["ask-1"]
        refused = call(ps, 3, "ask_name", inputResponses=["not", "a", "map"])
        assert refused["error"]["code"] == -32602


def test_keyed_asks_and_several_asks_in_one_round() -> None:
    server = Server("multi", "1", state_keys=[KEY])
    runs: list[int] = []

    @server.tool()
    def plan(ctx: Context) -> str:
        runs.append(1)
        name = ctx.elicit("Name?", {"type": "object", "properties": {"n": {"type": "string"}}},
                          key="user_name")
        got = ctx.ask_all({"mood": Ask.elicit("Mood?"),
                           "idea": Ask.sample("An idea", max_tokens=10),
                           "roots": Ask.roots()})
        return (f"{(name.content or {}).get('n')} {got['mood'].action} "
                f"{got['idea'].text} {[r.uri for r in got['roots']]}")

    caps = {"elicitation": {}, "sampling": {}, "roots": {}}
    with PipeServer(server) as ps:
        def go(n: int, **extra: Any) -> dict[str, Any]:
            return dict(ps.request(n, "tools/call", {"name": "plan", "arguments": {},
                                                     "_meta": meta(caps), **extra})["result"])

        one = go(1)
        assert list(one["inputRequests"]) == ["user_name"]
        two = go(2, inputResponses={"user_name": {"action": "accept", "content": {"n": "Al"}}},
                 requestState=one["requestState"])
        assert {k: v["method"] for k, v in two["inputRequests"].items()} == {
            "mood": "elicitation/create", "idea": "sampling/createMessage",
            "roots": "roots/list"}
        three = go(3, requestState=two["requestState"], inputResponses={
            "mood": {"action": "decline"},
            "idea": {"role": "assistant", "model": "m",
                     "content": {"type": "text", "text": "fly"}},
            "roots": {"roots": [{"uri": "file:///r"}]}})
        assert three["content"][0]["text"] == "Al decline fly ['file:///r']"
    assert len(runs) == 3   # three rounds, not one per ask


def test_an_undeclared_capability_is_32021_with_the_capability_named() -> None:
    with PipeServer(feature_server.build()) as ps:
        reply = ps.request(1, "tools/call", {"name": "ask_name", "arguments": {},
                                             "_meta": meta({})})
        assert reply["error"]["code"] == -32021
        assert reply["error"]["data"] == {"requiredCapabilities": {"elicitation": {"form": {}}}}
        roots = ps.request(2, "tools/call", {"name": "roots", "arguments": {},
                                             "_meta": meta({"elicitation": {}})})
        assert roots["error"]["data"] == {"requiredCapabilities": {"roots": {}}}


class _Process:
    """A feature server as a real process, talked to line by line."""

    def __init__(self, key: str) -> None:
        env = {**os.environ, "MCPSYNC_STATE_KEY": key}
        self.proc = subprocess.Popen([sys.executable, str(PEERS / "feature_server.py")],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env)

    def request(self, n: int, params: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": n, "method": "tools/call",
                                          "params": params}).encode() + b"\n")
        self.proc.stdin.flush()
        return dict(json.loads(self.proc.stdout.readline()))

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        self.proc.wait(10)
        self.proc.stdout.close()


@pytest.mark.timeout(30)
def test_two_server_processes_sharing_a_key_resume_each_others_rounds() -> None:
    a, b = _Process(KEY), _Process(KEY)
    try:
        base = {"name": "ask_twice", "arguments": {}, "_meta": meta()}
        one = a.request(1, base)["result"]
        two = b.request(2, {**base, "inputResponses": {"ask-1": {
            "action": "accept", "content": {"v": "Kim"}}},
            "requestState": one["requestState"]})["result"]
        assert two["resultType"] == "input_required"
        three = a.request(3, {**base, "inputResponses": {"ask-2": {
            "action": "accept", "content": {"v": "green"}}},
            "requestState": two["requestState"]})["result"]
        assert three["content"][0]["text"] == "Kim likes green"
    finally:
        a.close()
        b.close()


def test_a_bad_key_fails_when_the_server_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="shorter than 16") as info:
        Server("x", "1", state_keys=["short"])
    assert "short" not in str(info.value).replace("shorter", "")
    monkeypatch.setenv("MCPSYNC_STATE_KEY", "tiny")
    with pytest.raises(ValueError, match="MCPSYNC_STATE_KEY"):
        Server("x", "1")


@pytest.mark.parametrize("modern", [True, False])
def test_an_ask_key_is_used_once_and_automatic_names_are_reserved(modern: bool) -> None:
    server = Server("keys", "1", state_keys=[KEY])

    @server.tool()
    def twice(ctx: Context) -> str:
        ctx.elicit("first?", key="k")
        ctx.elicit("second?", key="k")
        return "asked twice"

    @server.tool()
    def reserved(ctx: Context) -> str:
        ctx.elicit("name?", key="ask-1")
        return "asked"

    answer = {"action": "accept", "content": {}}
    import mcpsync

    with mcpsync.connect(server, era="modern" if modern else "legacy",
                         elicitation=lambda request: answer) as client:
        first = client.call_tool("twice")
        assert first.is_error and "'k' was already used" in first.content[0].text
        second = client.call_tool("reserved")
        assert second.is_error and "reserved for asks without a key" in second.content[0].text
