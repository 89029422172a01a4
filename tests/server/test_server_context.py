"""The handler context: cancellation, progress, logging."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from mcpsync._threads import spawn
from mcpsync.jsonrpc import RequestId
from mcpsync.server import Context, Server
from mcpsync.server._context import _Call, _Cancellation

from .helpers import PipeServer, modern_meta


class Tools:
    """A server whose tools let a test steer the handler from outside."""

    def __init__(self) -> None:
        self.server = Server("t", "1")
        self.running = threading.Event()
        self.release = threading.Event()
        self.cancel_seen = threading.Event()
        self.ran: list[str] = []
        self.ctx: Context | None = None
        self.hold_thread: threading.Thread | None = None

        @self.server.tool()
        def hold(ctx: Context) -> str:
            self.ctx = ctx
            self.hold_thread = threading.current_thread()
            self.running.set()
            while not self.release.is_set():
                if ctx.cancelled.wait(0.01):
                    self.cancel_seen.set()
                    ctx.progress(99)  # after the cancel: must not be written
                    ctx.log("emergency", "after cancel")
                    return "cancelled result"
            return "held"

        @self.server.tool()
        def record(name: str) -> str:
            self.ran.append(name)
            return name

        @self.server.tool()
        def report(ctx: Context, values: list[float], message: str | None = None) -> str:
            self.ctx = ctx
            for v in values:
                ctx.progress(v, 10, message)
            return "reported"

        @self.server.tool()
        def shout(ctx: Context, level: str) -> str:
            for name in ("debug", "info", "warning", "error"):
                ctx.log(name, {"at": name}, logger="test")
            ctx.log(level, "custom")
            return "logged"

        @self.server.tool()
        def about(ctx: Context) -> dict[str, Any]:
            return {"id": ctx.request_id.value, "version": ctx.protocol_version,
                    "meta": ctx.meta, "cancelled": ctx.cancelled.is_set()}


@pytest.fixture
def tools() -> Tools:
    return Tools()


def call_msg(id: Any, name: str, arguments: Any = None, meta: Any = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments or {}}
    if meta is not None:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}


@pytest.mark.parametrize("modern", [False, True])
def test_cancel_in_flight_sets_the_event_and_nothing_more_is_written(tools: Tools,
                                                                     modern: bool) -> None:
    meta = modern_meta(log_level="debug", progressToken="tok") if modern else {
        "progressToken": "tok"}
    with PipeServer(tools.server) as ps:
        if not modern:
            ps.initialize()
            ps.request("lvl", "logging/setLevel", {"level": "debug"})
        ps.send(call_msg("h", "hold", meta=meta))
        assert tools.running.wait(5)
        ps.notify("notifications/cancelled", {"requestId": "h", "reason": "test"})
        assert tools.cancel_seen.wait(5)
        # sequential dispatch: the ping is answered after the cancelled handler returned,
        # so if anything had been written for "h" it would come first
        assert ps.request("p", "ping" if not modern else "server/discover",
                          {"_meta": modern_meta()} if modern else None)["id"] == "p"
        assert ps.seen == []


def _wait_reading_role_moved(tools: Tools) -> None:
    """``hold`` runs on the thread that read it; the idle worker takes the reading role (and
    the reader's name) within about 10 ms. Until then nothing more is read, and a request the
    reader reads once ``hold`` returns is answered at once, before its cancellation is read."""
    deadline = time.monotonic() + 5
    while tools.hold_thread is None or tools.hold_thread.name == "mcpsync-server-reader":
        assert time.monotonic() < deadline, "the reading role never left the busy handler"
        time.sleep(0.002)
    time.sleep(0.05)   # the new reader reads the lines already in the pipe


def test_cancel_of_a_queued_request_drops_it(tools: Tools) -> None:
    with PipeServer(tools.server) as ps:
        ps.initialize()
        ps.send(call_msg(1, "hold"))
        assert tools.running.wait(5)
        # "hold" began on the reader thread; once it runs a few ms the idle worker takes over
        # reading (and the names swap). Only then is request 2 read while a handler runs, so
        # that it is queued (read earlier, it could be answered before its cancel is read).
        deadline = time.monotonic() + 5
        while tools.hold_thread.name == "mcpsync-server-reader":
            assert time.monotonic() < deadline, "the worker never took over reading"
            time.sleep(0.005)
        ps.send(call_msg(2, "record", {"name": "queued"}))
        ps.notify("notifications/cancelled", {"requestId": 2})
        _wait_reading_role_moved(tools)
        tools.release.set()
        assert ps.response_to(1)["result"]["content"][0]["text"] == "held"
        assert ps.request(3, "ping")["result"] == {}
        assert ps.seen == []
    assert tools.ran == []


def test_unknown_finished_and_initialize_cancels_are_ignored(tools: Tools) -> None:
    with PipeServer(tools.server) as ps:
        ps.send_raw(b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":'
                    b'"2025-11-25","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}\n'
                    b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":'
                    b'{"requestId":0}}\n')
        assert ps.recv()["result"]["protocolVersion"] == "2025-11-25"
        assert ps.call(1, "record", {"name": "a"})["result"]["content"][0]["text"] == "a"
        ps.notify("notifications/cancelled", {"requestId": 1})  # finished
        ps.notify("notifications/cancelled", {"requestId": "never"})
        ps.notify("notifications/cancelled", {"requestId": True})
        ps.notify("notifications/cancelled", {})
        assert ps.call(2, "record", {"name": "b"})["result"]["content"][0]["text"] == "b"
    assert tools.ran == ["a", "b"]


def test_cancel_keys_keep_int_and_string_ids_apart(tools: Tools) -> None:
    with PipeServer(tools.server) as ps:
        ps.initialize()
        ps.send(call_msg(1, "hold"))
        assert tools.running.wait(5)
        ps.notify("notifications/cancelled", {"requestId": "1"})  # a different id
        _wait_reading_role_moved(tools)
        tools.release.set()
        assert ps.response_to(1)["result"]["content"][0]["text"] == "held"
    assert not tools.cancel_seen.is_set()


def test_context_attributes(tools: Tools) -> None:
    with PipeServer(tools.server) as ps:
        ps.initialize("2025-06-18")
        legacy = ps.call("x", "about", meta={"progressToken": 5})["result"]["content"][0]
        meta = modern_meta(custom=1)
        modern = ps.call(7, "about", meta=meta)["result"]["content"][0]
    assert json.loads(legacy["text"]) == {"id": "x", "version": "2025-06-18",
                                          "meta": {"progressToken": 5}, "cancelled": False}
    assert json.loads(modern["text"]) == {"id": 7, "version": "2026-07-28", "meta": meta,
                                          "cancelled": False}


def test_a_handler_changing_its_context_changes_nothing_for_the_next_call() -> None:
    """``ctx.meta`` and ``ctx.client_capabilities`` are the handler's own copies (made when
    first read), so one call cannot change what the session declared for the next."""
    server = Server("t", "1")

    @server.tool()
    def meddle(ctx: Context) -> dict[str, Any]:
        seen = {"caps": dict(ctx.client_capabilities), "meta": dict(ctx.meta)}
        ctx.client_capabilities["roots"] = {"forged": True}
        ctx.client_capabilities.pop("sampling", None)
        ctx.meta["progressToken"] = "forged"
        return seen

    with PipeServer(server) as ps:
        ps.request(0, "initialize", {"protocolVersion": "2025-06-18",
                                     "capabilities": {"sampling": {}},
                                     "clientInfo": {"name": "c", "version": "1"}})
        ps.notify("notifications/initialized")
        first = ps.call(1, "meddle", meta={"progressToken": 1})["result"]["content"][0]
        second = ps.call(2, "meddle")["result"]["content"][0]
    first, second = json.loads(first["text"]), json.loads(second["text"])
    assert first == {"caps": {"sampling": {}}, "meta": {"progressToken": 1}}
    assert second == {"caps": {"sampling": {}}, "meta": {}}


# -- progress ------------------------------------------------------------------------------

def test_progress_only_with_a_token(tools: Tools) -> None:
    with PipeServer(tools.server) as ps:
        ps.initialize()
        ps.call(1, "report", {"values": [1, 2]})
        assert ps.seen == []
        ps.call(2, "report", {"values": [1, 2.5], "message": "m"}, meta={"progressToken": 42})
        assert ps.seen == [
            {"jsonrpc": "2.0", "method": "notifications/progress",
             "params": {"progressToken": 42, "progress": 1, "total": 10, "message": "m"}},
            {"jsonrpc": "2.0", "method": "notifications/progress",
             "params": {"progressToken": 42, "progress": 2.5, "total": 10, "message": "m"}},
        ]


def test_progress_message_is_omitted_under_2024_11_05(tools: Tools) -> None:
    with PipeServer(tools.server) as ps:
        ps.initialize("2024-11-05")
        ps.call(1, "report", {"values": [1], "message": "m"}, meta={"progressToken": "t"})
        assert ps.seen == [{"jsonrpc": "2.0", "method": "notifications/progress",
                            "params": {"progressToken": "t", "progress": 1, "total": 10}}]


def test_progress_must_increase(tools: Tools, capsys: pytest.CaptureFixture[str]) -> None:
    with PipeServer(tools.server) as ps:
        ps.initialize()
        ps.call(1, "report", {"values": [1, 3, 3, 2, 4]}, meta={"progressToken": "t"})
        assert [n["params"]["progress"] for n in ps.seen] == [1, 3, 4]
    err = capsys.readouterr().err
    assert err.count("not greater than the last value sent") == 2


def test_nothing_is_sent_after_the_response(tools: Tools) -> None:
    with PipeServer(tools.server) as ps:
        ps.initialize()
        ps.call(1, "report", {"values": [1]}, meta={"progressToken": "t"})
        assert tools.ctx is not None
        tools.ctx.progress(5)
        tools.ctx.log("emergency", "late")
        assert ps.request(2, "ping")["result"] == {}
        assert ps.seen == []


# -- logging -------------------------------------------------------------------------------

def logged(ps: PipeServer) -> list[tuple[str, Any]]:
    return [(n["params"]["level"], n["params"]["data"]) for n in ps.seen
            if n.get("method") == "notifications/message"]


def test_legacy_logs_nothing_until_asked_then_follows_set_level(tools: Tools) -> None:
    with PipeServer(tools.server) as ps:
        ps.initialize()
        ps.call(0, "shout", {"level": "emergency"})
        assert logged(ps) == []   # no level asked for: no log message at all
        ps.request("lv", "logging/setLevel", {"level": "info"})
        ps.call(1, "shout", {"level": "notice"})
        assert logged(ps) == [("info", {"at": "info"}), ("warning", {"at": "warning"}),
                              ("error", {"at": "error"}), ("notice", "custom")]
        assert ps.seen[0]["params"]["logger"] == "test"
        ps.request(2, "logging/setLevel", {"level": "error"})
        ps.call(3, "shout", {"level": "critical"})
        assert logged(ps) == [("error", {"at": "error"}), ("critical", "custom")]


def test_modern_logs_only_when_the_request_opts_in(tools: Tools) -> None:
    with PipeServer(tools.server) as ps:
        ps.call(1, "shout", {"level": "emergency"}, meta=modern_meta())
        assert logged(ps) == []
        ps.call(2, "shout", {"level": "debug"}, meta=modern_meta(log_level="warning"))
        assert logged(ps) == [("warning", {"at": "warning"}), ("error", {"at": "error"})]


def test_unknown_level_in_ctx_log_is_the_handlers_bug(tools: Tools) -> None:
    with PipeServer(tools.server) as ps:
        ps.initialize()
        result = ps.call(1, "shout", {"level": "loud"})["result"]
    assert result["isError"] is True
    assert result["content"][0]["text"].startswith("ValueError: unknown log level 'loud'")


# -- the cancellation event (a threading.Event whose condition is made on the first wait) --

def _waiters(event: threading.Event, count: int) -> tuple[list[threading.Thread], list[bool]]:
    results: list[bool] = []
    threads = [spawn(f"mcpsync-test-waiter-{k}", lambda: results.append(event.wait(10)))
               for k in range(count)]
    return threads, results


def test_cancellation_is_an_event_that_wakes_every_waiter() -> None:
    event = _Cancellation()
    assert isinstance(event, threading.Event) and not event.is_set()
    assert event.wait(0.01) is False
    threads, results = _waiters(event, 3)
    deadline = time.monotonic() + 5
    while event._cond is None or len(event._cond._waiters) < 3:  # type: ignore[attr-defined]
        assert time.monotonic() < deadline, "the waiters never blocked"
        time.sleep(0.001)
    started = time.monotonic()
    event.set()
    for thread in threads:
        thread.join(5)
    assert results == [True, True, True]
    assert time.monotonic() - started < 2   # woken by set, not by their 10 s timeout
    assert event.is_set() and event.wait() is True
    event.clear()
    assert not event.is_set() and event.wait(0.01) is False


def test_cancellation_set_before_any_wait_builds_no_condition() -> None:
    call = _Call(RequestId.of(1), "tools/call")
    call.cancel()
    assert call.cancelled.is_set() and call.cancelled.wait(5) is True
    assert call.cancelled._cond is None   # type: ignore[attr-defined]


def test_cancellation_loses_no_wake_up_when_set_races_the_first_wait() -> None:
    """Set and the first wait start together, many times: every waiter must see the set."""
    for _ in range(300):
        event = _Cancellation()
        threads, results = _waiters(event, 2)
        event.set()
        for thread in threads:
            thread.join(5)
        assert results == [True, True]
