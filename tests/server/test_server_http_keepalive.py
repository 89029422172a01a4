"""The app's ticker over real loopback HTTP: keep-alive comments on a quiet handler's event
stream (so a client that left is noticed: a 2026-07-28 call is cancelled, a legacy one
detaches and stays resumable), idle legacy sessions expiring, and the ticker thread's life.

The app is an :class:`McpApp` with a short ``keep_alive`` on the built-in ``WsgiServer``, read
with raw ``http.client`` so that comments are visible.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from mcpsync.server import Context, Server
from mcpsync.server.http import WsgiServer
from mcpsync.server.http._app import McpApp

from .helpers import MODERN, modern_meta
from .test_server_http_resume import frames, open_request, resume, session

INTERVAL = 0.1


def keepalive_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("mcpsync-http-keepalive-")]


def wait_for(check: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Wait for a condition of the app (not a blind sleep): True once it holds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.01)
    return check()


def build() -> tuple[Server, dict[str, Any]]:
    server = Server("keepalive-test", "1.0")
    seen: dict[str, Any] = {"release": threading.Event(), "cancelled": threading.Event(),
                            "finished": threading.Event()}

    @server.tool()
    def quiet(ctx: Context, seconds: float = 1.0) -> str:
        """One progress event, then silence for ``seconds``, then the answer."""
        ctx.progress(1, 2)
        seen["release"].wait(seconds)
        return "quiet done"

    @server.tool()
    def waits(ctx: Context) -> str:
        """One progress event, then silence until cancelled or released (at most 30 s)."""
        ctx.progress(1, 2)
        started = time.monotonic()
        while not seen["release"].is_set() and time.monotonic() - started < 30:
            if ctx.cancelled.wait(0.02):
                seen["cancelled"].set()
                return "cancelled"
        seen["was_cancelled"] = ctx.cancelled.is_set()
        seen["finished"].set()
        return "released"

    @server.tool()
    def hello() -> str:
        return "hello"

    return server, seen


class App:
    """An McpApp served by WsgiServer on a loopback port (what ``open_request`` needs)."""

    def __init__(self, server: Server, **options: Any) -> None:
        self.app = McpApp(server._dispatcher_factory(), name="ka", keep_alive=INTERVAL,
                          **options)
        self.http = WsgiServer(self.app, "127.0.0.1", 0, name="ka")
        self.http.start()
        self.port = int(self.http.url.rsplit(":", 1)[1].split("/")[0])

    def post(self, body: Any, headers: dict[str, str] | None = None,
             host: str | None = None) -> tuple[int, dict[str, str], bytes]:
        status, sse = open_request(self, "POST", body, headers)   # type: ignore[arg-type]
        data = sse.response.read()
        hdrs = dict(sse.response.getheaders())
        sse.close()
        return status, hdrs, data

    def close(self) -> None:
        self.app.close()
        self.http.close()


@pytest.fixture
def served() -> Iterator[tuple[App, dict[str, Any]]]:
    server, seen = build()
    s = App(server)
    yield s, seen
    seen["release"].set()
    s.close()


def modern_call(name: str, **arguments: Any) -> tuple[dict[str, Any], dict[str, str]]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": name, "arguments": arguments,
                       "_meta": {**modern_meta(), "progressToken": 1}}}
    return body, {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": name}


def legacy_call(name: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": name, "arguments": {}, "_meta": {"progressToken": 7}}}


def test_a_quiet_handler_gets_keep_alives_at_the_interval(served: Any) -> None:
    s, _ = served
    body, hdrs = modern_call("quiet", seconds=1.0)
    status, sse = open_request(s, "POST", body, hdrs)
    assert status == 200
    first = sse.next()
    assert first is not None and json.loads(first["data"])["method"] == "notifications/progress"
    assert wait_for(lambda: len(keepalive_threads()) == 1)    # started by this stream
    assert keepalive_threads()[0].daemon
    comments, stamps = 0, []
    while (e := sse.next()) is not None:
        if "comment" in e:
            comments += 1
            stamps.append(time.monotonic())
        else:
            result = json.loads(e["data"])
    sse.close()
    assert result["result"]["content"][0]["text"] == "quiet done"
    # One second of silence at 0.1 s: about ten, never more than one per interval.
    assert 5 <= comments <= 11, comments
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert min(gaps) > INTERVAL * 0.6, gaps
    s.close()
    assert keepalive_threads() == []      # stopped and joined by close()


def test_a_modern_client_that_leaves_a_quiet_handler_cancels_it(served: Any) -> None:
    s, seen = served
    body, hdrs = modern_call("waits")
    _, sse = open_request(s, "POST", body, hdrs)
    assert sse.next() is not None            # the progress event: the reply is a stream
    left = time.monotonic()
    sse.close()
    # The handler writes nothing more: only a failed keep-alive can tell it.
    assert seen["cancelled"].wait(5)
    assert time.monotonic() - left < 20 * INTERVAL


def test_a_legacy_client_that_leaves_a_quiet_handler_detaches_and_resumes(served: Any) -> None:
    s, seen = served
    hdrs = session(s)
    _, sse = open_request(s, "POST", legacy_call("waits"), hdrs)
    primer = sse.next()
    assert primer is not None and primer["data"] == ""
    progress = sse.next()
    assert progress is not None and "id" in progress
    sse.close()
    app = s.app
    assert wait_for(lambda: any(e._detached for e in list(app._live)))   # noticed
    seen["release"].set()
    assert seen["finished"].wait(10)
    assert seen["was_cancelled"] is False and not seen["cancelled"].is_set()
    status, resumed = resume(s, hdrs, progress["id"])   # type: ignore[arg-type]
    got = frames(resumed.rest())
    resumed.close()
    assert status == 200 and got[-1]["result"]["content"][0]["text"] == "released"


def test_no_ticker_for_an_app_that_never_streamed(served: Any) -> None:
    s, _ = served
    for _ in range(3):
        body, hdrs = modern_call("hello")
        status, _, data = s.post(body, hdrs)
        assert status == 200 and json.loads(data)["result"]["content"][0]["text"] == "hello"
    assert s.app._ticker is None and keepalive_threads() == []


def ping(rid: int = 5) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": "ping"}


def test_idle_sessions_expire_but_not_one_with_an_open_stream() -> None:
    server, _ = build()
    s = App(server, session_idle_timeout=0.3)
    try:
        idle, streaming = session(s), session(s)   # type: ignore[arg-type]
        status, stream = open_request(s, "GET", headers={**streaming,   # type: ignore[arg-type]
                                                         "Accept": "text/event-stream"})
        assert status == 200 and stream.next() is not None    # open (its priming event)
        sessions = s.app._sessions
        assert wait_for(lambda: idle["Mcp-Session-Id"] not in sessions, 5)
        assert streaming["Mcp-Session-Id"] in sessions
        status, _, data = s.post(ping(), idle)
        assert status == 404 and "unknown or ended session" in data.decode()
        status, _, data = s.post(ping(), streaming)
        assert status == 200 and json.loads(data)["result"] == {}
        stream.close()    # no stream now: the second session expires too
        assert wait_for(lambda: streaming["Mcp-Session-Id"] not in sessions, 5)
        assert s.post(ping(), streaming)[0] == 404
    finally:
        s.close()
    assert keepalive_threads() == []


def test_sessions_never_expire_with_none() -> None:
    server, _ = build()
    s = App(server, session_idle_timeout=None)
    try:
        hdrs = session(s)   # type: ignore[arg-type]
        assert s.app._ticker is None      # nothing to expire, nothing streamed
        assert s.post(ping(), hdrs)[0] == 200
    finally:
        s.close()


def test_bad_settings_are_refused() -> None:
    server, _ = build()
    with pytest.raises(ValueError, match="session_idle_timeout"):
        McpApp(server._dispatcher_factory(), session_idle_timeout=0)
    with pytest.raises(ValueError, match="keep_alive"):
        McpApp(server._dispatcher_factory(), keep_alive=0)


def test_the_ticker_sleeps_until_a_deadline_instead_of_polling(
        served: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    s, _ = served
    looks = []
    real = s.app._next_expiry

    def counted() -> float | None:
        looks.append(time.monotonic())
        return real()

    monkeypatch.setattr(s.app, "_next_expiry", counted)
    session(s)            # starts the ticker: this session expires in 30 minutes
    assert wait_for(lambda: bool(looks))
    time.sleep(1.0)       # what is measured: how often the ticker wakes when nothing is due
    assert len(looks) <= 3, len(looks)


def test_serve_http_passes_session_idle_timeout() -> None:
    from .test_server_http_app import Served

    server, _ = build()
    s = Served(server, session_idle_timeout=0.2)
    try:
        hdrs = session(s)
        assert s.post(ping(), hdrs)[0] == 200
        time.sleep(1.0)   # idle on purpose: any request would make the session active
        status, _, data = s.post(ping(), hdrs)
        assert status == 404 and "unknown or ended session" in data.decode()
    finally:
        s.close()


def test_gunicorn_gthread_takes_keep_alives_from_the_ticker_thread(tmp_path: Any) -> None:
    from server.peers_http.gunicorn_run import Gunicorn

    with Gunicorn(tmp_path / "gunicorn.log",
                  "server.peers_http.gunicorn_keepalive_app:application") as served:
        body, hdrs = modern_call("quiet")
        status, sse = open_request(served, "POST", body, hdrs)   # type: ignore[arg-type]
        assert status == 200
        events = sse.rest()
        sse.close()
    comments = sum(1 for e in events if "comment" in e)
    assert 5 <= comments <= 11, comments
    assert frames(events)[-1]["result"]["content"][0]["text"] == "quiet done"
