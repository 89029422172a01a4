"""The HTTP transport against the official ``mcp`` SDK's Streamable HTTP server (a real peer).

Both eras on one endpoint, JSON and SSE replies, stateful and stateless; a restart of the
server mid-session; server->client requests over the legacy POST stream.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest
import requests
from helpers import DOCS
from http_peers.fixtures import OfficialServer

import mcpsync
from mcpsync.errors import SessionExpired

pytestmark = pytest.mark.timeout(60)

MODES = ["json-stateless", "json-stateful", "sse-stateless", "sse-stateful"]


@pytest.mark.parametrize("mode", MODES)
def test_both_eras_and_auto_detection(
        mode: str, official_http_server_factory: Callable[[str], OfficialServer]) -> None:
    server = official_http_server_factory(mode)
    seen = {}
    for era in ("legacy", "modern", "auto"):
        with mcpsync.connect(server.url, era=era, timeout=10) as client:
            result = client.call_tool("add", {"a": 1, "b": 2})
            assert result.structured == {"sum": 3.0}
            names = {t.name for t in client.list_tools()}
            assert {"echo", "add", "slow"} <= names
            assert client.read_resource("memo://hello").text == "hello resource"
            assert client.get_prompt("review", {"code": "x=1"}).messages
            assert client.server_info.name == "official-http-peer"
            seen[era] = (client.era, client.protocol_version)
    assert seen["legacy"] == ("legacy", "2025-11-25")
    assert seen["modern"] == ("modern", "2026-07-28")
    assert seen["auto"] == ("modern", "2026-07-28")   # mcp 2.3 serves the modern era too


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_progress_and_logs_arrive_over_sse(
        era: str, official_http_server_factory: Callable[[str], OfficialServer]) -> None:
    server = official_http_server_factory("sse-stateful")
    logs: list[tuple[str, Any]] = []
    steps: list[float] = []
    with mcpsync.connect(server.url, era=era, timeout=10, log_level="info",
                         on_log=lambda level, _logger, data: logs.append((level, data))) as c:
        result = c.call_tool("slow", {"seconds": 0.1, "steps": 3},
                             progress=lambda p, _t, _m: steps.append(p))
        assert result.text == "slept 0.1"
        assert steps == [1, 2, 3]
        assert c.call_tool("chatty", {"text": "hi"}).text == "hi"
    assert ("info", "info: hi") in logs
    assert ("warning", "warning: hi") in logs


def test_legacy_server_requests_on_the_post_stream(
        official_http_server_factory: Callable[[str], OfficialServer]) -> None:
    server = official_http_server_factory("sse-stateful")
    asked: list[Any] = []

    def elicit(req: Any) -> dict[str, Any]:
        asked.append(req.message)
        return {"action": "accept", "content": {"name": "Ada"}}

    def sample(req: Any) -> dict[str, Any]:
        return {"role": "assistant", "content": {"type": "text", "text": "4"},
                "model": "m", "stopReason": "endTurn"}

    with mcpsync.connect(server.url, era="legacy", elicitation=elicit, sampling=sample,
                         timeout=10) as client:
        assert client.call_tool("greet", {}).text == "hello Ada (42)"
        assert client.call_tool("think", {}).text == "model said: 4"
    assert asked == ["Who are you?"]


def test_many_threads_share_one_client(
        official_http_server_factory: Callable[[str], OfficialServer]) -> None:
    server = official_http_server_factory("json-stateless")
    errors: list[BaseException] = []
    with mcpsync.connect(server.url, era="legacy", timeout=10, name="peer") as client:
        def work(i: int) -> None:
            try:
                for j in range(5):
                    assert client.call_tool("echo", {"text": f"{i}-{j}"}).text == f"{i}-{j}"
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)
        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        workers = {t.name for t in threading.enumerate() if t.name.startswith("mcpsync-http-")}
    assert not errors
    assert workers and all(n.startswith(("mcpsync-http-peer-", "mcpsync-http-get-peer",
                                          "mcpsync-http-watchdog-peer",
                                          "mcpsync-http-reader-peer"))
                           for n in workers), workers


def test_stateful_server_restart_recreates_the_session(
        official_http_server_factory: Callable[[str], OfficialServer]) -> None:
    server = official_http_server_factory("json-stateful")
    with mcpsync.connect(server.url, era="legacy", timeout=10) as client:
        assert client.call_tool("echo", {"text": "a"}).text == "a"
        server.restart()      # same port; the old session id is now unknown (404)
        assert client.call_tool("echo", {"text": "b"}).text == "b"
        assert client.list_tools()


def test_modern_server_restart_is_invisible(
        official_http_server_factory: Callable[[str], OfficialServer]) -> None:
    server = official_http_server_factory("json-stateless")
    with mcpsync.connect(server.url, era="modern", timeout=10) as client:
        assert client.call_tool("echo", {"text": "a"}).text == "a"
        server.restart()
        assert client.call_tool("echo", {"text": "b"}).text == "b"


def test_callers_session_is_used_and_left_open(
        official_http_server_factory: Callable[[str], OfficialServer]) -> None:
    server = official_http_server_factory("json-stateless")
    mine = requests.Session()
    adapters = dict(mine.adapters)
    sent: list[str] = []
    mine.hooks["response"].append(lambda r, *a, **k: sent.append(r.request.method or ""))
    with mcpsync.connect(server.url, era="legacy", session=mine, timeout=10) as client:
        assert client.call_tool("echo", {"text": "x"}).text == "x"
    assert "POST" in sent
    assert dict(mine.adapters) == adapters          # never remounted
    assert mine.get(server.url.replace("/mcp", "/nothing")).status_code == 404  # still open
    mine.close()


def test_import_mcpsync_does_not_import_requests() -> None:
    code = "import sys, mcpsync; print('requests' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def test_session_expired_is_a_connection_lost() -> None:
    assert issubclass(SessionExpired, mcpsync.ConnectionLost)


def test_modern_listen_runs_on_its_own_thread_and_ends_on_close(
        official_http_server_factory: Callable[[str], OfficialServer]) -> None:
    server = official_http_server_factory("sse-stateless")
    with mcpsync.connect(server.url, era="modern", timeout=10, name="peer") as client:
        handle = client.on_list_changed("tools", lambda kind: None)
        names = {t.name for t in threading.enumerate()}
        assert "mcpsync-http-listen-peer" in names
        handle.close()
        assert client.call_tool("echo", {"text": "still"}).text == "still"
    left = [t.name for t in threading.enumerate() if t.name.startswith("mcpsync-http-")
            and t.is_alive()]
    assert not left


def test_unreachable_url_raises_connection_lost_without_a_restart(
        caplog: pytest.LogCaptureFixture) -> None:
    import socket

    with socket.socket() as sock:            # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    with pytest.raises(mcpsync.ConnectionLost, match="server/discover"):
        mcpsync.connect(url, timeout=5)
    assert not [r for r in caplog.records if "restarting" in r.getMessage()]
    with pytest.raises(mcpsync.ConnectionLost, match="initialize"):
        mcpsync.connect(mcpsync.ServerConfig(url=url), era="legacy", timeout=5)


def test_http_keywords_are_refused_for_stdio_targets() -> None:
    with pytest.raises(mcpsync.ConfigError, match="headers"):
        mcpsync.connect([sys.executable, "-c", "pass"], headers={"X": "1"})
    with pytest.raises(mcpsync.ConfigError, match="auth"):
        mcpsync.connect("http://127.0.0.1:1/mcp", auth="t", authorization=lambda: "x")


def test_legacy_stream_closed_by_the_server_is_resumed(
        official_http_server_factory: Callable[[str], OfficialServer]) -> None:
    server = official_http_server_factory("sse-stateful-resumable-retry200")
    with mcpsync.connect(server.url, era="legacy", timeout=10) as client:
        assert client.call_tool("drop_stream", {}).text == "resumed"
        assert client.call_tool("echo", {"text": "after"}).text == "after"


def test_the_docs_example_runs(
        official_http_server_factory: Callable[[str], OfficialServer]) -> None:
    import re

    server = official_http_server_factory("json-stateful")
    text = (DOCS / "http.md").read_text()
    code = re.findall(r"^```python\n(.*?)^```", text, re.DOTALL | re.MULTILINE)[0]
    assert "http://127.0.0.1:8000/mcp" in code
    code = code.replace("http://127.0.0.1:8000/mcp", server.url)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["modern", "2026-07-28", "hi"]
