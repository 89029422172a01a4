"""Legacy rules (2024-11-05 … 2025-11-25), era selection and batches."""

from __future__ import annotations

from typing import Any

import pytest

from mcpsync.server import Server

from .helpers import PipeServer, initialize_params, modern_meta


def make_server() -> Server:
    server = Server("legacy", "2.0", title="Legacy", instructions="be nice")
    for name in ("first", "second", "third"):
        server.register_tool({"name": name}, lambda args, ctx, name=name: name)
    return server


@pytest.fixture
def ps() -> Any:
    with PipeServer(make_server()) as pipe:
        yield pipe


@pytest.mark.parametrize("version", ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"])
def test_initialize_echoes_a_legacy_version(ps: PipeServer, version: str) -> None:
    reply = ps.initialize(version)
    assert reply["result"] == {
        "protocolVersion": version,
        "capabilities": {"tools": {"listChanged": True}, "logging": {}},
        "serverInfo": {"name": "legacy", "version": "2.0", "title": "Legacy"},
        "instructions": "be nice",
    }


@pytest.mark.parametrize("version", ["2026-07-28", "2099-01-01", "1.0"])
def test_initialize_answers_newest_legacy_otherwise(ps: PipeServer, version: str) -> None:
    assert ps.initialize(version)["result"]["protocolVersion"] == "2025-11-25"


@pytest.mark.parametrize("params", [None, [], {}, {"protocolVersion": 5},
                                    {"protocolVersion": "2025-11-25", "capabilities": []},
                                    {"protocolVersion": "2025-11-25", "capabilities": {}},
                                    {"protocolVersion": "2025-11-25", "capabilities": {},
                                     "clientInfo": {"version": "1"}}])
def test_initialize_with_bad_params_is_32602(ps: PipeServer, params: Any) -> None:
    reply = ps.request(1, "initialize", params)
    assert reply["error"]["code"] == -32602
    # and the server is still not initialized
    assert ps.request(2, "tools/list")["error"]["code"] == -32602


def test_second_initialize_is_32600(ps: PipeServer) -> None:
    ps.initialize()
    reply = ps.request(2, "initialize", initialize_params())
    assert reply["error"] == {"code": -32600, "message": "already initialized"}


def test_before_initialize_only_ping_is_answered_without_meta(ps: PipeServer) -> None:
    assert ps.request(1, "ping")["result"] == {}
    reply = ps.request(2, "tools/list")
    assert reply["error"]["code"] == -32602
    assert "missing _meta" in reply["error"]["message"]
    assert ps.request(3, "tools/call", {"name": "first"})["error"]["code"] == -32602


def test_initialized_notification_is_silent_and_not_required(ps: PipeServer) -> None:
    ps.request("i", "initialize", initialize_params())  # no notifications/initialized at all
    assert [t["name"] for t in ps.request(1, "tools/list")["result"]["tools"]] == [
        "first", "second", "third"]
    ps.notify("notifications/initialized")
    assert ps.request(2, "ping") == {"jsonrpc": "2.0", "id": 2, "result": {}}
    assert ps.seen == []


def test_tools_list_in_registration_order_without_pagination(ps: PipeServer) -> None:
    ps.initialize()
    result = ps.request(1, "tools/list")["result"]
    assert list(result) == ["tools"]
    assert [t["name"] for t in result["tools"]] == ["first", "second", "third"]
    # One page, so no cursor was ever issued: any cursor is invalid.
    refused = ps.request(2, "tools/list", {"cursor": "x"})["error"]
    assert refused["code"] == -32602 and "cursor" in refused["message"]


def test_set_level(ps: PipeServer) -> None:
    ps.initialize()
    assert ps.request(1, "logging/setLevel", {"level": "debug"})["result"] == {}
    assert ps.request(2, "logging/setLevel", {"level": "loud"})["error"]["code"] == -32602
    assert ps.request(3, "logging/setLevel")["error"]["code"] == -32602


@pytest.mark.parametrize("method", ["server/discover", "subscriptions/listen", "no/such"])
def test_unknown_and_unoffered_methods_are_32601(ps: PipeServer, method: str) -> None:
    ps.initialize()
    assert ps.request(1, method, {})["error"]["code"] == -32601


def test_invalid_messages_and_serving_goes_on(ps: PipeServer) -> None:
    ps.initialize()
    ps.send_raw(b"{not json\n")
    assert ps.recv() == {"jsonrpc": "2.0", "id": None,
                         "error": {"code": -32700, "message": ps_last_message(ps)}}
    ps.send({"jsonrpc": "1.0", "id": 7, "method": "ping"})
    reply = ps.recv()
    assert reply["id"] == 7 and reply["error"]["code"] == -32600
    ps.send({"id": True, "method": "ping", "jsonrpc": "2.0"})
    reply = ps.recv()
    assert reply["id"] is None and reply["error"]["code"] == -32600
    ps.send_raw(b"42\n")
    reply = ps.recv()
    assert reply["id"] is None and reply["error"]["code"] == -32600
    assert ps.request(8, "ping")["result"] == {}


def ps_last_message(ps: PipeServer) -> Any:
    class Anything:
        def __eq__(self, other: object) -> bool:
            return isinstance(other, str) and "{not json" in other

    return Anything()


def test_modern_request_is_served_modern_even_after_initialize(ps: PipeServer) -> None:
    ps.initialize("2025-06-18")
    modern = ps.request(1, "tools/list", {"_meta": modern_meta()})["result"]
    legacy = ps.request(2, "tools/list")["result"]
    assert modern["resultType"] == "complete" and "ttlMs" in modern
    assert "resultType" not in legacy


# -- batches (2025-03-26 only) -------------------------------------------------------------

def req(id: Any, method: str, params: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
    if params is not None:
        out["params"] = params
    return out


def test_batch_answered_as_one_array_in_input_order(ps: PipeServer) -> None:
    ps.initialize("2025-03-26")
    ps.send([req(1, "ping"), {"jsonrpc": "2.0", "method": "notifications/x"},
             req(2, "tools/call", {"name": "second"}), {"bad": 1}, req(3, "no/such"),
             req(4, "initialize", initialize_params("2025-03-26"))])
    reply = ps.recv()
    assert isinstance(reply, list)
    assert [(r["id"], "result" in r) for r in reply] == [
        (1, True), (2, True), (None, False), (3, False), (4, False)]
    assert reply[1]["result"]["content"][0]["text"] == "second"
    assert reply[2]["error"]["code"] == -32600
    assert reply[3]["error"]["code"] == -32601
    assert reply[4]["error"]["code"] == -32600  # initialize inside a batch


def test_batch_of_notifications_gets_no_line(ps: PipeServer) -> None:
    ps.initialize("2025-03-26")
    ps.send([{"jsonrpc": "2.0", "method": "notifications/a"},
             {"jsonrpc": "2.0", "method": "notifications/b"}])
    assert ps.request(1, "ping")["result"] == {}
    assert ps.seen == []


def test_empty_batch_gets_one_error_object(ps: PipeServer) -> None:
    ps.initialize("2025-03-26")
    ps.send_raw(b"[]\n")
    reply = ps.recv()
    assert isinstance(reply, dict) and reply["id"] is None
    assert reply["error"]["code"] == -32600


def test_cancelled_batch_element_contributes_nothing(ps: PipeServer) -> None:
    ps.initialize("2025-03-26")
    ps.send([req(1, "ping"), req(2, "ping"), {"jsonrpc": "2.0",
             "method": "notifications/cancelled", "params": {"requestId": 2}}, req(3, "ping")])
    # the reader sees the cancel notice before element 2 is answered, so 2 is dropped
    assert [r["id"] for r in ps.recv()] == [1, 3]


@pytest.mark.parametrize("version", [None, "2024-11-05", "2025-06-18", "2025-11-25"])
def test_batch_outside_2025_03_26_is_one_error_with_null_id(ps: PipeServer,
                                                            version: str | None) -> None:
    if version is not None:
        ps.initialize(version)
    ps.send([req(1, "ping"), req(2, "ping")])
    reply = ps.recv()
    assert isinstance(reply, dict)
    assert reply["id"] is None and reply["error"]["code"] == -32600
    assert ps.request(3, "ping")["result"] == {}
    assert ps.seen == []


@pytest.mark.parametrize("version", ["2024-11-05", "2025-03-26", "2025-06-18"])
def test_output_schema_and_structured_content_only_from_2025_06_18(version: str) -> None:
    server = Server("s", "1")

    @server.tool(output_schema={"type": "object", "properties": {"n": {"type": "integer"}}})
    def count() -> dict[str, int]:
        return {"n": 1}

    with PipeServer(server) as ps:
        ps.initialize(version)
        (tool,) = ps.request(1, "tools/list")["result"]["tools"]
        called = ps.call(2, "count")["result"]
    old = version in ("2024-11-05", "2025-03-26")
    assert ("outputSchema" in tool) is not old
    assert ("structuredContent" in called) is not old
    assert called["content"] == [{"type": "text", "text": '{"n":1}'}]
