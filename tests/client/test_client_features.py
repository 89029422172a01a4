"""Pagination, caching, the input-required loop, result types, version retries, server→client
requests and their error codes, completion: the scripted peer produces each case on demand."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from helpers import PEERS

import mcpsync
from mcpsync.client._cache import ListCache
from mcpsync.client._callbacks import Callbacks, apply_schema_defaults

pytestmark = pytest.mark.timeout(60)

SCRIPTED = str(PEERS / "scripted_server.py")


def argv(mode: str) -> list[str]:
    return [sys.executable, SCRIPTED, mode]


def sent(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


@pytest.mark.parametrize("mode", ["legacy", "modern"])
def test_empty_string_cursor_is_not_the_end(mode: str) -> None:
    with mcpsync.connect(argv(mode)) as client:
        assert [t.name for t in client.list_tools()] == ["t", "u"]


@pytest.mark.parametrize("mode", ["legacy", "endless-pages"])
def test_too_many_pages(mode: str) -> None:
    era = "legacy" if mode == "legacy" else "auto"
    with (mcpsync.connect(argv("endless-pages"), era=era, max_pages=5) as client,
          pytest.raises(mcpsync.TooManyPages, match="5 pages")):
        client.list_tools()


def test_modern_lists_are_cached_per_ttl_and_legacy_lists_are_not(tmp_path: Path) -> None:
    for mode, expected in (("modern", 2), ("legacy", 4)):
        log = tmp_path / f"{mode}.log"
        era = "legacy" if mode == "legacy" else "auto"
        with mcpsync.connect(argv(mode), era=era, env={"SCRIPTED_LOG": str(log)}) as client:
            client.list_tools()
            client.list_tools()
        assert [m.get("method") for m in sent(log)].count("tools/list") == expected


def test_list_cache_unit() -> None:
    now = [0.0]
    cache = ListCache(clock=lambda: now[0])
    cache.put("tools/list", None, {"tools": [], "ttlMs": 1000})
    cache.put("prompts/list", None, {"prompts": []})                   # no ttl: not kept
    cache.put("resources/list", None, {"resources": [], "ttlMs": 5000, "cacheScope": "private"})
    assert cache.get("tools/list", None) is not None
    assert cache.get("prompts/list", None) is None
    now[0] = 1.0
    assert cache.get("tools/list", None) is None                       # expired
    cache.drop_private()
    assert cache.get("resources/list", None) is None


def test_input_rounds_are_bounded() -> None:
    with mcpsync.connect(argv("modern"), max_input_rounds=3) as client:
        with pytest.raises(mcpsync.InputRoundsExceeded):
            client.call_tool("t", {"mode": "rounds"})
        assert client.call_tool("t", {"x": 1}).structured is None   # still usable


def test_input_round_echoes_state_with_a_new_id(tmp_path: Path) -> None:
    log = tmp_path / "log"
    asked: list[Any] = []

    def elicit(req: Any) -> dict[str, Any]:
        asked.append(req)
        return {"action": "accept", "content": {}}

    with (mcpsync.connect(argv("modern"), elicitation=elicit, max_input_rounds=2,
                          env={"SCRIPTED_LOG": str(log)}) as client,
          pytest.raises(mcpsync.InputRoundsExceeded)):
        client.call_tool("t", {"mode": "two-rounds"})
    calls = [m for m in sent(log) if m.get("method") == "tools/call"]
    assert len(calls) == 3
    assert len({c["id"] for c in calls}) == 3                           # a new id per round
    assert "requestState" not in calls[0]["params"]
    assert calls[1]["params"]["requestState"] == "r1"
    assert calls[1]["params"]["inputResponses"] == {
        "who": {"action": "accept", "content": {"name": "X"}}}          # SEP-1034 default
    assert "inputResponses" not in calls[2]["params"]                   # round 2 asked nothing
    assert "requestState" not in calls[2]["params"]                     # and gave no state
    assert calls[2]["params"]["arguments"] == {"mode": "two-rounds"}
    assert asked[0].message == "name?"


def test_undeclared_input_request_is_a_protocol_error() -> None:
    with (mcpsync.connect(argv("modern")) as client,   # no elicitation callback
          pytest.raises(mcpsync.ProtocolError, match="did not declare")):
        client.call_tool("t", {"mode": "two-rounds"})


def test_unknown_result_type_is_a_protocol_error() -> None:
    with (mcpsync.connect(argv("modern")) as client,
          pytest.raises(mcpsync.ProtocolError, match="mystery")):
        client.call_tool("t", {"mode": "weird"})


def test_version_error_later_is_retried_once(tmp_path: Path) -> None:
    log = tmp_path / "log"
    with mcpsync.connect(argv("modern"), env={"SCRIPTED_LOG": str(log)}) as client:
        result = client.call_tool("t", {"mode": "version-later"})
        assert not result.is_error
    assert [m.get("method") for m in sent(log)].count("tools/call") == 2


def test_url_elicitation_required_carries_the_elicitations() -> None:
    with mcpsync.connect(argv("legacy"), era="legacy") as client:
        with pytest.raises(mcpsync.URLElicitationRequired) as info:
            client.call_tool("t", {"mode": "url-required"})
        assert info.value.elicitations[0]["elicitationId"] == "e1"


def test_legacy_server_requests_get_the_right_answers() -> None:
    completed = threading.Event()

    class Elicit:
        supports_url = False

        def __call__(self, req: Any) -> dict[str, Any]:
            raise AssertionError("url mode was not declared; never called")

        def on_complete(self, elicitation_id: str) -> None:
            assert elicitation_id == "e"
            completed.set()

    def reject(req: Any) -> dict[str, Any]:
        raise mcpsync.Rejected("no thanks")

    with mcpsync.connect(argv("legacy"), era="legacy", elicitation=Elicit(),
                         sampling=reject) as client:
        answers = json.loads(client.call_tool("t", {"mode": "ask"}).text)
        assert completed.wait(5)
    ping, bogus, url, sample = answers
    assert ping["result"] == {}
    assert bogus["error"]["code"] == -32601
    assert url["error"]["code"] == -32602
    assert sample["error"] == {"code": -1, "message": "rejected by user"}


def test_url_mode_elicitation_when_declared() -> None:
    class Elicit:
        supports_url = True

        def __call__(self, req: Any) -> dict[str, Any]:
            assert req.mode == "url" and req.url == "https://x" and req.elicitation_id == "e"
            return {"action": "accept"}

    with mcpsync.connect(argv("legacy"), era="legacy", elicitation=Elicit(),
                         sampling=lambda r: {"oops": 1}) as client:
        answers = json.loads(client.call_tool("t", {"mode": "ask"}).text)
    assert answers[2]["result"] == {"action": "accept"}
    assert answers[3]["result"] == {"oops": 1}


def test_callback_exception_becomes_32603_without_traceback() -> None:
    def broken(req: Any) -> dict[str, Any]:
        raise RuntimeError("kaput")

    with mcpsync.connect(argv("legacy"), era="legacy", sampling=broken) as client:
        answers = json.loads(client.call_tool("t", {"mode": "ask"}).text)
    assert answers[3]["error"]["code"] == -32603
    assert answers[3]["error"]["message"] == "kaput"


def test_capabilities_follow_the_callbacks() -> None:
    class Sampler:
        supports_tools = True

        def __call__(self, req: Any) -> dict[str, Any]:
            return {}

    cb = Callbacks(sampling=Sampler(), elicitation=lambda r: {}, roots=[])
    assert cb.capabilities(modern=False) == {"sampling": {"tools": {}},
                                             "elicitation": {"form": {}},
                                             "roots": {"listChanged": True}}
    assert cb.capabilities(modern=True)["roots"] == {}
    assert Callbacks().capabilities(modern=True) == {}
    with pytest.raises(mcpsync.RemoteError) as info:
        Callbacks().handle_request("roots/list", {})
    assert info.value.code == -32601
    assert Callbacks().handle_request("ping", {}) == {}


def test_sep1034_defaults() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string", "default": "x"},
                                               "b": {"type": "integer", "default": 3},
                                               "c": {"type": "string"}}}
    assert apply_schema_defaults(schema, {"b": 5}) == {"a": "x", "b": 5}
    assert apply_schema_defaults(None, None) == {}


def test_set_roots_notifies_legacy_servers(tmp_path: Path) -> None:
    log = tmp_path / "log"
    with mcpsync.connect(argv("legacy"), era="legacy", roots=[],
                         env={"SCRIPTED_LOG": str(log)}) as client:
        client.set_roots(["file:///a"])
        client.ping()   # ordered after the notification on the same pipe
    assert "notifications/roots/list_changed" in [m.get("method") for m in sent(log)]


def test_complete_builds_refs_and_arguments() -> None:
    with mcpsync.connect(argv("legacy"), era="legacy") as client:
        got = client.complete("review", ("lang", "py"), {"code": "x"})
        params = json.loads(got.values[0])
        assert params["ref"] == {"type": "ref/prompt", "name": "review"}
        assert params["argument"] == {"name": "lang", "value": "py"}
        assert params["context"] == {"arguments": {"code": "x"}}
        params = json.loads(client.complete("file:///{p}", {"name": "p", "value": ""}).values[0])
        assert params["ref"] == {"type": "ref/resource", "uri": "file:///{p}"}


def test_legacy_subscribe_is_reference_counted(tmp_path: Path) -> None:
    log = tmp_path / "log"
    with mcpsync.connect(argv("legacy"), era="legacy", env={"SCRIPTED_LOG": str(log)}) as client:
        one = client.subscribe("a://1", lambda uri: None)
        two = client.subscribe("a://1", lambda uri: None)
        one.close()
        two.close()
        two.close()
    wire = [m.get("method") for m in sent(log)]
    assert wire.count("resources/subscribe") == 1
    assert wire.count("resources/unsubscribe") == 1


@pytest.mark.parametrize("mode", ["legacy", "modern"])
def test_output_validation_uses_the_cached_schema(mode: str) -> None:
    era = "legacy" if mode == "legacy" else "auto"
    with mcpsync.connect(argv(mode), era=era) as client:
        # Before any listing nothing is validated (tools are never listed just to validate).
        assert client.call_tool("u", {"structured": {"n": "x"}}).structured == {"n": "x"}
        client.list_tools()
        assert client.call_tool("u", {"structured": {"n": 1}}).structured == {"n": 1}
        with pytest.raises(mcpsync.OutputValidationError, match="outputSchema at n") as info:
            client.call_tool("u", {"structured": {"n": "x"}})
        assert info.value.result.structured == {"n": "x"}
        with pytest.raises(mcpsync.OutputValidationError, match="no structuredContent"):
            client.call_tool("u", {})
        client.call_tool("t", {"structured": {"n": "x"}})   # t has no outputSchema
    with mcpsync.connect(argv(mode), era=era, validate_output=False) as client:
        client.list_tools()
        assert client.call_tool("u", {"structured": {"n": "x"}}).structured == {"n": "x"}


def test_unhandled_notifications_reach_on_notification(tmp_path: Path) -> None:
    got: list[tuple[str, Any]] = []
    done = threading.Event()

    def on_notification(method: str, params: Any) -> None:
        got.append((method, params))
        done.set()

    log = tmp_path / "log"
    with mcpsync.connect(argv("modern"), on_notification=on_notification,
                         env={"SCRIPTED_LOG": str(log)}) as client:
        client.list_tools()
        client.list_tools()                          # served from the ttl cache
        client.call_tool("t", {"mode": "notify"})    # also sends tools/list_changed
        assert done.wait(5)
        # list_changed came after the custom notification, on the same in-order dispatcher.
        watch = threading.Event()
        for _ in range(250):
            if client._cache.get("tools/list", None) is None:
                break
            watch.wait(0.02)
        client.list_tools()                          # fetched again after list_changed
    assert got == [("notifications/custom", {"n": 1})]
    assert [m.get("method") for m in sent(log)].count("tools/list") == 4


def test_error_messages_say_what_we_were_doing() -> None:
    with mcpsync.connect([sys.executable, "-m", "mcpsync.demo"], name="demo",
                         era="legacy") as client:
        with pytest.raises(mcpsync.RemoteError) as info:
            client.call_tool("nope")
        assert str(info.value).startswith("calling tool 'nope' on server 'demo': ")
        assert info.value.server == "demo" and info.value.method == "tools/call"


def test_input_rounds_unit_driven_by_a_list() -> None:
    from mcpsync.client._input_required import run_input_rounds

    answers = [
        {"resultType": "input_required", "requestState": {"opaque": [1, 2]}},   # no requests
        {"resultType": "input_required", "inputRequests": {
            "r": {"method": "roots/list"}}},                                     # no state
        {"content": [], "resultType": "complete"},
    ]
    sent_params: list[dict[str, Any]] = []

    def send(params: dict[str, Any]) -> Any:
        sent_params.append(params)
        return answers.pop(0)

    first = {"resultType": "input_required", "requestState": "abc"}
    original = {"name": "t", "arguments": {"k": 1}}
    final = run_input_rounds("tools/call", original, first, send=send,
                             callbacks=Callbacks(roots=["file:///r"]), max_rounds=10)
    assert final == {"content": [], "resultType": "complete"}
    assert sent_params[0] == {**original, "requestState": "abc"}
    assert sent_params[1] == {**original, "requestState": {"opaque": [1, 2]}}
    assert sent_params[2] == {**original, "inputResponses": {"r": {"roots": [
        {"uri": "file:///r"}]}}}
    assert original == {"name": "t", "arguments": {"k": 1}}    # never mutated
    with pytest.raises(mcpsync.ProtocolError):
        run_input_rounds("tools/list", {}, {"resultType": "input_required"}, send=send,
                         callbacks=Callbacks(), max_rounds=10)


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_notification_observer_sees_every_notification_after_our_handling(
        era: str, caplog: pytest.LogCaptureFixture) -> None:
    seen: list[tuple[str, Any]] = []
    logged: list[Any] = []
    progress: list[float] = []

    def observer(method: str, params: Any) -> None:
        seen.append((method, params))
        raise RuntimeError("observer bug")      # logged; delivery goes on

    argv = [sys.executable, "-m", "mcpsync.demo"]
    with mcpsync.connect(argv, era=era, log_level="info", notification_observer=observer,
                         on_log=lambda level, logger, data: logged.append(data)) as client:
        client.call_tool("slow", {"seconds": 0.01, "steps": 2},
                         progress=lambda p, total, msg: progress.append(p))
        client.call_tool("echo", {"text": "flush"})
    methods = [m for m, _ in seen]
    assert methods.count("notifications/progress") == 2
    assert methods.count("notifications/message") == 2
    assert len(progress) == 2 and len(logged) == 2     # the client's own handling still ran
    message = next(p for m, p in seen if m == "notifications/message")
    assert message["level"] == "info" and message["logger"] == "mcpsync-demo"  # as sent
    assert "observer bug" in caplog.text
