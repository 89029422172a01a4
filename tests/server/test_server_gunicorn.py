"""The MCP server under a real gunicorn (``-k gthread``), with one worker and with two.

``server.peers_http.gunicorn_app`` is loaded by a gunicorn subprocess on a port it picks.
With one worker both eras and the official SDK's client are served; with two, and
``MCPSYNC_STATE_KEY`` set for both, stateless 2026-07-28 calls may land on either worker: 200
concurrent calls all come back right, and an input round whose two legs reach different
workers (told apart by the pid each reports) resumes. Without the key, two workers refuse
to boot. A legacy session lives in the worker that opened it: on the other one it is 404.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from helpers import require_peer

import mcpsync
from server.helpers import MODERN, initialize_params, modern_meta
from server.peers_http.gunicorn_run import Gunicorn

KEY = {"MCPSYNC_STATE_KEY": "one secret shared by every worker; long enough"}
ELICIT = {"io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}


@pytest.fixture
def one_worker(tmp_path: Path) -> Iterator[Gunicorn]:
    with Gunicorn(tmp_path / "gunicorn.log", workers=1) as served:
        yield served


@pytest.fixture
def two_workers(tmp_path: Path) -> Iterator[Gunicorn]:
    with Gunicorn(tmp_path / "gunicorn.log", workers=2, env=KEY) as served:
        yield served


def _request(conn: http.client.HTTPConnection, body: dict[str, Any],
             headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], Any]:
    """One POST on ``conn`` (kept open: it stays with the worker that accepted it); the body
    of an event-stream reply is its last event's JSON."""
    conn.request("POST", "/mcp", json.dumps(body), {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream", **(headers or {})})
    response = conn.getresponse()
    raw = response.read().decode()
    if response.getheader("Content-Type", "").startswith("text/event-stream"):
        raw = [line[5:] for line in raw.splitlines() if line.startswith("data:")][-1]
    return response.status, dict(response.getheaders()), json.loads(raw) if raw else None


def _modern_call(conn: http.client.HTTPConnection, name: str, arguments: dict[str, Any],
                 **extra: Any) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": name, "arguments": arguments, "_meta": modern_meta(**ELICIT), **extra}}
    status, _, reply = _request(conn, body, {"MCP-Protocol-Version": MODERN,
                                             "Mcp-Method": "tools/call", "Mcp-Name": name})
    assert status == 200, reply
    result: dict[str, Any] = reply["result"]
    return result


@contextlib.contextmanager
def _two_workers_connections(served: Gunicorn) -> Iterator[tuple[Any, Any]]:
    """A keep-alive connection to each of the two workers. Connections opened at once are
    spread between the workers (one opened alone usually goes to the same one), so a dozen
    are opened together and each asked whose it is; tried up to 50 times, never waited for."""
    for _ in range(50):
        conns = [http.client.HTTPConnection("127.0.0.1", served.port, timeout=20)
                 for _ in range(16)]
        try:
            for conn in conns:
                conn.connect()
            by_pid = {_modern_call(conn, "whoami", {})["content"][0]["text"]: conn
                      for conn in conns}
            if len(by_pid) == 2:
                yield tuple(by_pid.values())
                return
        finally:
            for conn in conns:
                conn.close()
    pytest.fail("16 connections opened at once never reached both workers, 50 times")


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_one_worker_serves_both_eras(one_worker: Gunicorn, era: str) -> None:
    asked_for: list[str] = []

    def elicit(request: Any) -> dict[str, Any]:
        asked_for.append(request.message)
        return {"action": "accept", "content": {"name": "Ada"}}

    with mcpsync.connect(one_worker.url, era=era, elicitation=elicit) as client:
        steps: list[float] = []
        result = client.call_tool("add", {"a": 2, "b": 3},
                                  progress=lambda done, total, message: steps.append(done))
        assert result.content[0].text.split()[0] == "5"
        assert steps == [1]   # the reply was an event stream, through gunicorn's write()
        asked = client.call_tool("ask_name")   # legacy: an ask on the stream; modern: a round
        assert asked.content[0].text.startswith("hello Ada (answered by ")
    assert len(asked_for) == 1 and asked_for[0].startswith("Your name?")


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_the_official_client_through_one_worker(one_worker: Gunicorn, mode: str) -> None:
    _official_calls(one_worker.url, mode)


def _official_calls(url: str, mode: str) -> None:
    anyio = require_peer("anyio")
    require_peer("mcp")
    from mcp import Client

    async def scenario() -> None:
        async with Client(url, mode=mode, read_timeout_seconds=20) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert {"add", "whoami", "ask_name"} <= names
            for a in range(5):
                added = await client.call_tool("add", {"a": a, "b": 1})
                assert added.content[0].text.split()[0] == str(a + 1)

    anyio.run(scenario)


def test_two_workers_serve_ours_and_the_official_client(two_workers: Gunicorn) -> None:
    _official_calls(two_workers.url, "auto")
    with mcpsync.connect(two_workers.url, era="modern") as client:
        assert client.call_tool("add", {"a": 40, "b": 2}).content[0].text.split()[0] == "42"


def test_200_concurrent_calls_on_two_workers_are_all_right(two_workers: Gunicorn) -> None:
    with mcpsync.connect(two_workers.url, era="modern") as client:
        def add(n: int) -> tuple[int, str]:
            return n, client.call_tool("add", {"a": n, "b": 1000}).content[0].text

        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=200, thread_name_prefix="test-add") as pool:
            results = list(pool.map(add, range(200)))
        elapsed = time.monotonic() - started
    assert [int(text.split()[0]) for _, text in results] == [n + 1000 for n in range(200)]
    pids = {text.split()[1] for _, text in results}
    print(f"200 calls in {elapsed:.2f} s, answered by {len(pids)} worker(s)")


@pytest.mark.parametrize("key_from", ["environment", "state_keys"])
def test_an_input_round_resumes_on_the_other_worker(tmp_path: Path, key_from: str) -> None:
    """The first leg (``input_required``) and the retry land on different workers: the
    sealed ``requestState`` opens there because both hold the same key (from
    ``MCPSYNC_STATE_KEY``, or given to ``Server(state_keys=...)``, which also satisfies the
    startup check)."""
    env = KEY if key_from == "environment" else {
        "MCPSYNC_TEST_STATE_KEY": KEY["MCPSYNC_STATE_KEY"]}
    with Gunicorn(tmp_path / "gunicorn.log", workers=2, env=env) as served, \
            _two_workers_connections(served) as (here, there):
        first = _modern_call(here, "ask_name", {})
        assert first["resultType"] == "input_required"
        (key, ask), = first["inputRequests"].items()
        asked_by = re.search(r"asked by (\d+)", ask["params"]["message"])
        done = _modern_call(there, "ask_name", {}, requestState=first["requestState"],
                            inputResponses={key: {"action": "accept",
                                                  "content": {"name": "Zoe"}}})
    answered_by = re.search(r"hello Zoe \(answered by (\d+)\)", done["content"][0]["text"])
    assert asked_by is not None and answered_by is not None, done
    assert asked_by.group(1) != answered_by.group(1)   # two processes, one round


@pytest.mark.parametrize("how", ["-w 2", "WEB_CONCURRENCY=2", "GUNICORN_CMD_ARGS"])
def test_several_workers_without_a_shared_key_refuse_to_boot(tmp_path: Path, how: str) -> None:
    env = {"WEB_CONCURRENCY": "2"} if how == "WEB_CONCURRENCY=2" else \
        {"GUNICORN_CMD_ARGS": "--workers 2"} if how == "GUNICORN_CMD_ARGS" else {}
    served = Gunicorn(tmp_path / "gunicorn.log", workers=2 if how == "-w 2" else None,
                      env=env, wait=False)
    try:
        status = served.exit_status()
    finally:
        served.close()
    log = served.text()
    # 3 is gunicorn's "worker failed to boot"; when both workers fail at once its arbiter
    # may trip over the second failure while halting and exit 1 instead
    assert status in (1, 3), log
    assert "Worker failed to boot" in log
    assert "gunicorn runs 2 workers but no shared state key is set" in log
    assert "MCPSYNC_STATE_KEY" in log


def test_one_worker_needs_no_shared_key(one_worker: Gunicorn) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", one_worker.port, timeout=20)
    try:
        first = _modern_call(conn, "ask_name", {})
        (key, _), = first["inputRequests"].items()
        done = _modern_call(conn, "ask_name", {}, requestState=first["requestState"],
                            inputResponses={key: {"action": "accept",
                                                  "content": {"name": "Al"}}})
    finally:
        conn.close()
    assert done["content"][0]["text"].startswith("hello Al")


def test_a_legacy_session_is_unknown_to_the_other_worker(two_workers: Gunicorn) -> None:
    """Without sticky routing, a session's request that reaches the other worker is 404
    (the session lives in one process, and a client then starts a new session); the worker
    that opened it still answers it."""
    with _two_workers_connections(two_workers) as (here, there):
        status, headers, _ = _request(here, {"jsonrpc": "2.0", "id": 0,
                                             "method": "initialize",
                                             "params": initialize_params()})
        assert status == 200
        session = {"Mcp-Session-Id": headers["Mcp-Session-Id"]}
        assert _request(here, {"jsonrpc": "2.0", "method": "notifications/initialized"},
                        session)[0] == 202
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "whoami", "arguments": {}}}
        lost, _, refused = _request(there, call, session)
        kept, _, answered = _request(here, call, session)
    assert lost == 404 and "unknown or ended session" in refused["error"]["message"]
    assert kept == 200 and answered["result"]["content"][0]["text"].isdigit()


def test_a_listen_in_one_worker_hears_a_change_made_in_the_other(tmp_path: Path) -> None:
    """With a ``UnixSocketBus`` shared by the workers, a resource updated in worker B
    reaches a 2026-07-28 listen held by worker A."""
    env = {**KEY, "MCPSYNC_TEST_BUS_DIR": str(tmp_path / "bus")}
    with Gunicorn(tmp_path / "gunicorn.log", workers=2, env=env) as served, \
            _two_workers_connections(served) as (here, there):
        listener_pid = int(_modern_call(here, "whoami", {})["content"][0]["text"])
        here.request("POST", "/mcp", json.dumps({
            "jsonrpc": "2.0", "id": 7, "method": "subscriptions/listen", "params": {
                "notifications": {"resourceSubscriptions": ["memo://board"]},
                "_meta": modern_meta()}}), {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": MODERN,
            "Mcp-Method": "subscriptions/listen"})
        stream = here.getresponse()
        seen = b""
        while b"subscriptions/acknowledged" not in seen:
            chunk = stream.read1(65536)
            assert chunk, seen
            seen += chunk
        touched = _modern_call(there, "touch", {"uri": "memo://board",
                                                "unless_pid": listener_pid})
        assert touched["content"][0]["text"].endswith(" touched")   # in the other worker
        while b"notifications/resources/updated" not in seen:
            chunk = stream.read1(65536)
            assert chunk, seen
            seen += chunk
    assert b'"uri":"memo://board"' in seen.replace(b" ", b"")
