"""Subscriptions and caching hints on the wire, in both eras.

Modern: ``subscriptions/listen`` is acknowledged with the filter honoured and the listen's id as
``subscriptionId``; only the kinds asked for arrive, each tagged with that id; a cancel ends it,
and it is never answered. Legacy: ``resources/subscribe`` for a URI nobody serves is -32002;
list changes go to every initialized connection. 2026-07-28 results carry ``ttlMs`` and
``cacheScope`` (a resource may override them); legacy results never do.
"""

from __future__ import annotations

from typing import Any

import pytest
from peers import feature_server

from mcpsync.protocol import META_SUBSCRIPTION_ID
from mcpsync.server import Server
from server.helpers import PipeServer, modern_meta


def notes(ps: PipeServer) -> list[Any]:
    return [m for m in ps.seen if "method" in m]


def test_a_listen_hears_only_what_it_asked_for_until_cancelled() -> None:
    with PipeServer(feature_server.build()) as ps:
        ps.send({"jsonrpc": "2.0", "id": "L", "method": "subscriptions/listen", "params": {
            "_meta": modern_meta(), "notifications": {
                "toolsListChanged": True, "resourceSubscriptions": ["memo://greeting"]}}})
        ack = ps.recv()
        assert ack == {"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                       "params": {"notifications": {"toolsListChanged": True,
                                                    "resourceSubscriptions": ["memo://greeting"]},
                                  "_meta": {META_SUBSCRIPTION_ID: "L"}}}
        ps.call(1, "add_extra", {"name": "x1"}, meta=modern_meta())
        assert ps.notification("notifications/tools/list_changed")["params"] == {
            "_meta": {META_SUBSCRIPTION_ID: "L"}}
        ps.call(2, "touch", {"uri": "memo://logo"}, meta=modern_meta())      # not listened to
        ps.call(3, "touch", {"uri": "memo://greeting"}, meta=modern_meta())
        assert ps.notification("notifications/resources/updated")["params"] == {
            "uri": "memo://greeting", "_meta": {META_SUBSCRIPTION_ID: "L"}}
        assert notes(ps) + [m for m in ps.quiet() if "method" in m] == []
        # Cancelled: nothing more for it, and never a response.
        ps.notify("notifications/cancelled", {"requestId": "L"})
        ps.call(5, "add_extra", {"name": "x2"}, meta=modern_meta())
        later = notes(ps) + ps.quiet()
        assert later == []
        assert not any(m.get("id") == "L" for m in ps.seen)


def test_a_flood_of_listens_is_bounded() -> None:
    from mcpsync.server._listen import MAX_LISTENS

    with PipeServer(feature_server.build()) as ps:
        for n in range(MAX_LISTENS):
            ps.send({"jsonrpc": "2.0", "id": n, "method": "subscriptions/listen", "params": {
                "_meta": modern_meta(), "notifications": {"toolsListChanged": True}}})
        refused = ps.request("one-more", "subscriptions/listen", {
            "_meta": modern_meta(), "notifications": {"toolsListChanged": True}})
        assert refused["error"]["code"] == -32600
        assert str(MAX_LISTENS) in refused["error"]["message"]
        ps.notify("notifications/cancelled", {"requestId": 0})
        ps.send({"jsonrpc": "2.0", "id": "again", "method": "subscriptions/listen", "params": {
            "_meta": modern_meta(), "notifications": {"toolsListChanged": True}}})
        ack = ps.notification("notifications/subscriptions/acknowledged")
        while ack["params"]["_meta"][META_SUBSCRIPTION_ID] != "again":
            ack = ps.notification("notifications/subscriptions/acknowledged")


def test_a_listen_without_a_filter_is_refused() -> None:
    with PipeServer(feature_server.build()) as ps:
        reply = ps.request(1, "subscriptions/listen", {"_meta": modern_meta()})
        assert reply["error"]["code"] == -32602


def test_legacy_subscribe_and_list_changes() -> None:
    with PipeServer(feature_server.build()) as ps:
        ps.initialize()
        refused = ps.request(1, "resources/subscribe", {"uri": "memo://nothing"})["error"]
        assert (refused["code"], refused["data"]) == (-32002, {"uri": "memo://nothing"})
        assert ps.request(2, "resources/subscribe", {"uri": "memo://notes/a"})["result"] == {}
        ps.call(3, "touch", {"uri": "memo://notes/a"})
        assert ps.notification("notifications/resources/updated")["params"] == {
            "uri": "memo://notes/a"}
        assert ps.request(4, "resources/unsubscribe", {"uri": "memo://notes/a"})["result"] == {}
        ps.call(5, "touch", {"uri": "memo://notes/a"})
        assert notes(ps) + ps.quiet() == []
        ps.call(6, "add_extra", {"name": "y"})
        assert ps.notification("notifications/tools/list_changed") == {
            "jsonrpc": "2.0", "method": "notifications/tools/list_changed"}


def test_a_change_never_waits_for_a_client_that_does_not_read() -> None:
    import os
    import threading
    import time

    server = Server("deafclient", "1")
    r_in, w_in = os.pipe()
    r_out, w_out = os.pipe()
    stop = threading.Event()
    stdin, stdout = os.fdopen(r_in, "rb", buffering=0), os.fdopen(w_out, "wb", buffering=0)
    serving = threading.Thread(target=server.serve, kwargs={
        "stdin": stdin, "stdout": stdout, "stop": stop}, daemon=True)
    serving.start()
    try:
        os.write(w_in, b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{'
                       b'"protocolVersion":"2025-06-18","capabilities":{},'
                       b'"clientInfo":{"name":"x","version":"1"}}}\n')
        began = time.monotonic()
        for i in range(5000):   # far more announcements than the pipe holds: never read
            server.add_tool({"name": f"t{i}"}, lambda arguments, ctx: 1)
            server.notify_resource_updated(f"x://{i}")
        assert time.monotonic() - began < 5, "add_tool waited for the client"
        assert len(server.tools) == 5000
    finally:
        stop.set()
        os.close(w_in)

        def drain() -> None:   # let the blocked writer finish so serve() can return
            while os.read(r_out, 1 << 16):
                pass

        drainer = threading.Thread(target=drain, daemon=True)
        drainer.start()
        serving.join(10)
        assert not serving.is_alive()
        stdout.close()   # serve() is done: end of file for the drainer
        drainer.join(5)
        os.close(r_out)
        stdin.close()


def test_caching_hints_modern_only_and_per_resource() -> None:
    with PipeServer(feature_server.build()) as ps:
        meta = {"_meta": modern_meta()}
        for method in ("tools/list", "resources/list", "resources/templates/list",
                       "prompts/list", "server/discover"):
            result = ps.request(method, method, meta)["result"]
            assert (result["ttlMs"], result["cacheScope"]) == (60000, "public"), method
        logo = ps.request(1, "resources/read", {**meta, "uri": "memo://logo"})["result"]
        assert (logo["ttlMs"], logo["cacheScope"]) == (5000, "private")
        note = ps.request(2, "resources/read", {**meta, "uri": "memo://notes/a"})["result"]
        assert (note["ttlMs"], note["cacheScope"]) == (60000, "public")
        called = ps.call(3, "greet", {"name": "a"}, meta=modern_meta())["result"]
        assert "ttlMs" not in called
        ps.initialize()
        legacy = ps.request(4, "resources/read", {"uri": "memo://logo"})["result"]
        assert "ttlMs" not in legacy and "cacheScope" not in legacy


def test_server_options_set_the_default_hints() -> None:
    with PipeServer(feature_server.build(cache_ttl_ms=0, cache_scope="private")) as ps:
        result = ps.request(1, "tools/list", {"_meta": modern_meta()})["result"]
        assert (result["ttlMs"], result["cacheScope"]) == (0, "private")


def test_prompts_and_resources_added_or_removed_live_are_announced() -> None:
    server = feature_server.build()
    with PipeServer(server) as ps:
        ps.initialize()
        server.add_prompt(lambda: "hi", name="hello")
        assert ps.recv() == {"jsonrpc": "2.0", "method": "notifications/prompts/list_changed"}
        server.add_resource("memo://new", lambda: "new")
        assert ps.recv() == {"jsonrpc": "2.0",
                             "method": "notifications/resources/list_changed"}
        assert server.remove_resource("memo://notes/{name}")   # a template, by its text
        assert ps.recv()["method"] == "notifications/resources/list_changed"
        assert server.remove_prompt("hello")
        assert ps.recv()["method"] == "notifications/prompts/list_changed"
        assert not server.remove_prompt("hello")   # nothing removed: nothing announced
        listed = ps.request(1, "resources/list")["result"]["resources"]
        assert "memo://new" in [r["uri"] for r in listed]
        assert ps.seen == []


def test_completion_refs_in_each_spelling() -> None:
    server = Server("c", "1")

    @server.prompt()
    def p(arg: str) -> str:
        return arg

    @server.resource_template("x://{a}")
    def t(a: str) -> str:
        return a

    server.completion("p")(lambda argument, value, context: ["by-name"])
    server.completion({"type": "ref/resource", "uri": "x://{a}"})(
        lambda argument, value, context: {"values": ["by-ref"], "total": 7, "hasMore": True})
    with PipeServer(server) as ps:
        ps.initialize()
        one = ps.request(1, "completion/complete", {
            "ref": {"type": "ref/prompt", "name": "p"}, "argument": {"name": "arg",
                                                                    "value": ""}})
        two = ps.request(2, "completion/complete", {
            "ref": {"type": "ref/resource", "uri": "x://{a}"},
            "argument": {"name": "a", "value": ""}})
    assert one["result"] == {"completion": {"values": ["by-name"], "hasMore": False}}
    assert two["result"] == {"completion": {"values": ["by-ref"], "total": 7, "hasMore": True}}
    with pytest.raises(ValueError, match="exactly one"):
        server.completion("p", prompt="p")
    with pytest.raises(ValueError, match="ref/prompt"):
        server.completion({"type": "ref/other"})


def test_listen_uris_count_toward_the_subscription_bound() -> None:
    from mcpsync.server._listen import MAX_SUBSCRIPTIONS

    with PipeServer(feature_server.build()) as ps:
        too_many = [f"memo://notes/{i}" for i in range(MAX_SUBSCRIPTIONS + 1)]
        refused = ps.request("L", "subscriptions/listen", {
            "_meta": modern_meta(), "notifications": {"resourceSubscriptions": too_many}})
        assert refused["error"]["code"] == -32600
        assert str(MAX_SUBSCRIPTIONS) in refused["error"]["message"]


def test_stop_returns_while_an_announcement_is_stuck_on_a_client_that_does_not_read() -> None:
    import threading
    import time

    server = Server("stuck", "1")

    @server.resource_template("res://{x}")
    def read(x: str) -> str:
        return "v"

    stop = threading.Event()
    ps = PipeServer(server, stop=stop)
    try:
        ps.initialize()
        uris = [f"res://{i:04d}" + "a" * 1000 for i in range(200)]
        for n, uri in enumerate(uris):
            ps.request(n, "resources/subscribe", {"uri": uri})
        for uri in uris:   # about 200 KB of updates; the client reads none of them
            server.notify_resource_updated(uri)
        time.sleep(0.2)
        began = time.monotonic()
        stop.set()
        assert ps.wait(8), "serve() did not return after stop"
        assert time.monotonic() - began < 6
    finally:
        ps.quiet(0.5)   # read what was written, so the stuck writer can finish
        ps.close()
