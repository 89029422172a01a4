"""Legacy host sessions carried on by another gateway process (replicas).

Two HTTP fronts with the same session key file stand for two gateway processes (one test
runs them in one process, the last one as two real gunicorn workers). A session opened on the
first is carried on by the second from its sealed id alone: the HTTP upstream's session goes
on (the same upstream ``Mcp-Session-Id``, no second ``initialize`` reaching it), the stdio
upstream is a new process that got the host's ``initialize``. An id altered by one byte, or
sealed under another key, is unknown (404); the id holds neither the key nor any upstream
credential, and the key file must be 0600. The log level and subscriptions a host sets after
``initialize`` travel through the replicas' session store (one sealed 0600 file per session
next to the key file): the other replica's fresh stdio upstream gets them again.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import require_peer
from http_peers.fault_server import FaultServer
from server.helpers import MODERN, initialize_params, modern_meta
from server.peers_http.gunicorn_run import Gunicorn

import mcpsync
from gateway.front_http_helpers import DEMO, Front, post, write_config
from mcpsync.errors import ConfigError

pytestmark = pytest.mark.timeout(120)
SECRET = "a shared replica key, long enough to seal with"


def _key(tmp_path: Path, secret: str = SECRET, name: str = "session.key") -> str:
    path = tmp_path / name
    path.write_text(secret)
    os.chmod(path, 0o600)
    return str(path)


@pytest.fixture
def pair(tmp_path: Path, fault_server: FaultServer) -> Iterator[tuple[Front, Front]]:
    config = write_config(tmp_path, {
        "remote": {"url": fault_server.url,
                   "headers": {"Authorization": "Bearer upstream-secret-token"}},
        "demo": DEMO})
    key = _key(tmp_path)
    with Front(config, session_key_file=key) as one, \
            Front(config, session_key_file=key) as two:
        yield one, two


def _call(port: int, sid: str, rid: int, method: str, params: Any = None) -> Any:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        body["params"] = params
    status, _, reply = post(port, body, {"Mcp-Session-Id": sid,
                                         "MCP-Protocol-Version": "2025-11-25"})
    return status, reply


def _open(front: Front) -> str:
    status, headers, reply = post(front.port, {"jsonrpc": "2.0", "id": 1,
                                               "method": "initialize",
                                               "params": initialize_params()})
    assert status == 200, reply
    sid = headers["Mcp-Session-Id"]
    status, _, _ = post(front.port, {"jsonrpc": "2.0", "method": "notifications/initialized"},
                        {"Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"})
    assert status == 202
    return sid


def test_a_session_moves_to_the_other_replica(pair: tuple[Front, Front],
                                              fault_server: FaultServer) -> None:
    one, two = pair
    sid = _open(one)
    status, listed = _call(one.port, sid, 2, "tools/list")
    assert status == 200
    names = {t["name"] for t in listed["result"]["tools"]}
    assert {"remote__echo", "demo__echo"} <= names
    (first_pids,) = one.app.session_processes()
    upstream_sids = {r.header("Mcp-Session-Id") for r in fault_server.requests
                     if r.rpc_method not in (None, "initialize")}
    assert len(upstream_sids) == 1 and None not in upstream_sids
    initializes = len(fault_server.rpc_requests("initialize"))

    # The same session id, sent to the other process: it carries the session on.
    status, echoed = _call(two.port, sid, 3, "tools/call",
                           {"name": "remote__echo", "arguments": {"text": "moved"}})
    assert status == 200, echoed
    assert "moved" in str(echoed["result"])
    status, echoed = _call(two.port, sid, 4, "tools/call",
                           {"name": "demo__echo", "arguments": {"text": "fresh"}})
    assert status == 200, echoed
    assert echoed["result"]["content"][0]["text"] == "fresh"
    (second_pids,) = two.app.session_processes()
    assert set(second_pids).isdisjoint(first_pids)     # stdio: a process of its own
    later = [r for r in fault_server.requests if r.rpc_method not in (None, "initialize")]
    assert {r.header("Mcp-Session-Id") for r in later} == upstream_sids   # the same session
    assert len(fault_server.rpc_requests("initialize")) == initializes    # no new handshake
    # Both replicas still serve the session; DELETE on either ends it there.
    status, _ = _call(one.port, sid, 5, "ping")
    assert status == 200


def test_the_sealed_id_holds_no_secret_and_refuses_changes(pair: tuple[Front, Front],
                                                            tmp_path: Path) -> None:
    one, two = pair
    sid = _open(one)
    assert sid.startswith("g1.")
    raw = base64.urlsafe_b64decode(sid[3:] + "=" * (-len(sid[3:]) % 4))
    for secret in (b"upstream-secret-token", SECRET.encode(), b"Bearer"):
        assert secret not in raw and secret.decode() not in sid
    flipped = sid[:-2] + ("A" if sid[-2] != "A" else "B") + sid[-1]
    status, reply = _call(two.port, flipped, 2, "ping")
    assert status == 404, reply
    config = write_config(tmp_path, {"demo": DEMO}, name="other.json")
    with Front(config, session_key_file=_key(tmp_path, "another key, also long enough",
                                             "other.key")) as stranger:
        status, reply = _call(stranger.port, sid, 2, "ping")
        assert status == 404


def test_an_ended_session_is_not_carried_on_again_by_its_own_process(
        pair: tuple[Front, Front]) -> None:
    # The sealed id would open again; the process that ended the session remembers it.
    one, _ = pair
    sid = _open(one)
    conn = http.client.HTTPConnection("127.0.0.1", one.port, timeout=10)
    try:
        conn.request("DELETE", one.app.path, headers={"Mcp-Session-Id": sid,
                                                      "MCP-Protocol-Version": "2025-11-25"})
        assert conn.getresponse().status == 204
    finally:
        conn.close()
    status, reply = _call(one.port, sid, 2, "tools/list")
    assert status == 404, reply
    assert one.app.session_processes() == []


def test_behind_a_token_verifier_a_session_moves_for_its_opener_only(tmp_path: Path) -> None:
    # Each process knows the owners of the sessions it opened; one sealed elsewhere names
    # its owner in the id, so the opener's token carries it on and another token gets 404.
    from mcpsync.server.http import AccessToken

    users = {"alice-token": "alice", "bob-token": "bob"}
    resource = "http://127.0.0.1/mcp"

    def verify(token: str) -> AccessToken | None:
        who = users.get(token)
        return None if who is None else AccessToken(client_id="host-app", subject=who,
                                                    audience=(resource,))

    config = write_config(tmp_path, {"demo": DEMO})
    key = _key(tmp_path)
    options: dict[str, Any] = {"session_key_file": key, "token_verifier": verify,
                               "resource": resource}
    with Front(config, **options) as one, Front(config, **options) as two:
        alice = {"Authorization": "Bearer alice-token"}
        status, headers, _ = post(one.port, {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                             "params": initialize_params()}, alice)
        assert status == 200
        sid = headers["Mcp-Session-Id"]
        session = {"Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}
        status, _, _ = post(two.port, {"jsonrpc": "2.0", "id": 2, "method": "ping"},
                            {**session, "Authorization": "Bearer bob-token"})
        assert status == 404
        status, _, reply = post(two.port, {"jsonrpc": "2.0", "id": 3, "method": "ping"},
                                {**session, **alice})
        assert status == 200 and reply["result"] == {}, reply
        status, _, _ = post(two.port, {"jsonrpc": "2.0", "id": 4, "method": "ping"},
                            {**session, "Authorization": "Bearer bob-token"})
        assert status == 404


FEATURES = [sys.executable, str(Path(__file__).parents[1] / "peers" / "feature_server.py")]
GREETING = "mcpgw://feat/memo://greeting"


def _events(port: int, sid: str, rid: int, method: str, params: Any) -> list[Any]:
    """Every message of one POST's reply (its event stream, or the one JSON body)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", "/mcp", json.dumps({"jsonrpc": "2.0", "id": rid, "method": method,
                                                 "params": params}),
                     {"Content-Type": "application/json",
                      "Accept": "application/json, text/event-stream",
                      "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"})
        response = conn.getresponse()
        assert response.status == 200
        raw = response.read().decode()
        if not response.getheader("Content-Type", "").startswith("text/event-stream"):
            return [json.loads(raw)]
        return [json.loads(x[5:]) for x in raw.splitlines()
                if x.startswith("data:") and x[5:].strip()]
    finally:
        conn.close()


def _stream_until(port: int, sid: str, method: str, timeout: float = 15.0) -> Any:
    """Open the session's GET stream and read it until a ``method`` notification comes."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", "/mcp", headers={"Accept": "text/event-stream",
                                             "Mcp-Session-Id": sid,
                                             "MCP-Protocol-Version": "2025-11-25"})
        response = conn.getresponse()
        assert response.status == 200
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = response.fp.readline().decode()
            if line.startswith("data:") and line[5:].strip():
                message = json.loads(line[5:])
                if message.get("method") == method:
                    return message
        return None
    finally:
        conn.close()


def test_the_log_level_and_subscriptions_follow_a_session_to_the_other_replica(
        tmp_path: Path, fault_server: FaultServer) -> None:
    config = write_config(tmp_path, {"remote": {"url": fault_server.url}, "feat": FEATURES})
    key = _key(tmp_path)
    store = Path(key + ".sessions")
    with Front(config, session_key_file=key) as one, Front(config, session_key_file=key) as two:
        sid = _open(one)
        assert _call(one.port, sid, 2, "tools/list")[0] == 200
        assert _call(one.port, sid, 3, "logging/setLevel", {"level": "info"})[0] == 200
        for rid, uri in ((4, GREETING), (5, "mcpgw://feat/memo://logo")):
            status, reply = _call(one.port, sid, rid, "resources/subscribe", {"uri": uri})
            assert status == 200 and reply["result"] == {}, reply
        status, _ = _call(one.port, sid, 6, "resources/unsubscribe",
                          {"uri": "mcpgw://feat/memo://logo"})
        assert status == 200
        (first_pids,) = one.app.session_processes()

        # The store: one sealed file, 0600 in a 0700 directory, named by no session id.
        (kept,) = list(store.iterdir())
        assert stat.S_IMODE(store.stat().st_mode) == 0o700
        assert stat.S_IMODE(kept.stat().st_mode) == 0o600
        text = kept.read_text()
        for clear in (sid, "memo://", "info", SECRET):
            assert clear not in kept.name and clear not in text

        # The other replica: a new feature_server process, which logs at info and above
        # and tells of a change to the one resource still subscribed.
        got = _events(two.port, sid, 7, "tools/call", {"name": "feat__log_some",
                                                       "arguments": {}})
        (second_pids,) = two.app.session_processes()
        assert set(second_pids).isdisjoint(first_pids)
        levels = [m["params"]["level"] for m in got
                  if m.get("method") == "notifications/message"]
        assert levels == ["info", "error"], got
        assert got[-1]["result"]["content"][0]["text"] == "logged"
        for rid, uri in ((8, "memo://logo"), (9, "memo://greeting")):
            status, reply = _call(two.port, sid, rid, "tools/call",
                                  {"name": "feat__touch", "arguments": {"uri": uri}})
            assert status == 200, reply
        updated = _stream_until(two.port, sid, "notifications/resources/updated")
        assert updated is not None and updated["params"]["uri"] == GREETING

        # DELETE removes the file; closing a process keeps another session's (other
        # processes may carry that one on).
        other = _open(one)
        assert _call(one.port, other, 2, "logging/setLevel", {"level": "debug"})[0] == 200
        (other_file,) = set(store.iterdir()) - {kept}
        conn = http.client.HTTPConnection("127.0.0.1", two.port, timeout=10)
        try:
            conn.request("DELETE", "/mcp", headers={"Mcp-Session-Id": sid,
                                                    "MCP-Protocol-Version": "2025-11-25"})
            assert conn.getresponse().status == 204
        finally:
            conn.close()
        assert list(store.iterdir()) == [other_file]
    assert list(store.iterdir()) == [other_file]


def test_a_key_file_others_can_read_is_refused(tmp_path: Path) -> None:
    key = _key(tmp_path)
    os.chmod(key, 0o644)
    config = write_config(tmp_path, {"demo": DEMO})
    with pytest.raises(ConfigError, match="chmod 600"), mcpsync.Gateway(config) as gateway:
        gateway.wsgi_app(session_key_file=key)


PID = [sys.executable, str(Path(__file__).with_name("peers") / "pid_stdio.py")]


def _modern_whoami(conn: http.client.HTTPConnection) -> str:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "pid__whoami", "arguments": {}, "_meta": modern_meta()}}
    conn.request("POST", "/mcp", json.dumps(body), {
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": "pid__whoami"})
    reply = _read(conn.getresponse())
    return str(reply["result"]["content"][0]["text"])


def _read(response: http.client.HTTPResponse) -> Any:
    raw = response.read().decode()
    if response.getheader("Content-Type", "").startswith("text/event-stream"):
        raw = [x[5:] for x in raw.splitlines() if x.startswith("data:") and x[5:].strip()][-1]
    return json.loads(raw)


def _legacy(conn: http.client.HTTPConnection, sid: str | None, rid: int, method: str,
            params: Any = None) -> tuple[int, dict[str, str], Any]:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        body["params"] = params
    headers = {"Content-Type": "application/json",
               "Accept": "application/json, text/event-stream"}
    if sid is not None:
        headers.update({"Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"})
    conn.request("POST", "/mcp", json.dumps(body), headers)
    response = conn.getresponse()
    return response.status, dict(response.getheaders()), _read(response)


def _legacy_events(conn: http.client.HTTPConnection, sid: str, rid: int, method: str,
                   params: Any) -> list[Any]:
    """Every message of a legacy POST's event-stream reply."""
    body = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
    conn.request("POST", "/mcp", json.dumps(body), {
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
        "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"})
    raw = conn.getresponse().read().decode()
    return [json.loads(x[5:]) for x in raw.splitlines() if x.startswith("data:")
            and x[5:].strip()]


def test_two_gunicorn_workers_share_modern_hosts_and_carry_on_legacy_sessions(
        tmp_path: Path, fault_server: FaultServer) -> None:
    """Two real workers behind one address. Sixteen keep-alive connections are opened at once
    and each asks (2026-07-28) which stdio process answers: the worker's shared one, so two
    pids mean two workers, one connection kept for each. A legacy session opened through one
    worker then goes on through the other, with the log level it set there."""
    require_peer("gunicorn")
    config = write_config(tmp_path, {"pid": PID, "remote": {"url": fault_server.url},
                                     "feat": FEATURES})
    env = {"MCPSYNC_GATEWAY_CONFIG": config,
           "MCPSYNC_GATEWAY_SESSION_KEY_FILE": _key(tmp_path)}
    with Gunicorn(tmp_path / "gunicorn.log", "mcpsync.gateway:wsgi()", workers=2,
                  env=env) as served:
        here = there = None
        kept: list[http.client.HTTPConnection] = []
        for _ in range(50):
            conns = [http.client.HTTPConnection("127.0.0.1", served.port, timeout=30)
                     for _ in range(16)]
            for conn in conns:
                conn.connect()
            by_pid = {_modern_whoami(conn): conn for conn in conns}
            if len(by_pid) == 2:
                here, there = by_pid.values()
                kept = [here, there]
                for conn in conns:
                    if conn not in kept:
                        conn.close()
                break
            for conn in conns:
                conn.close()
        assert here is not None and there is not None, "never reached both workers"
        try:
            status, headers, reply = _legacy(here, None, 1, "initialize", initialize_params())
            assert status == 200, reply
            sid = headers["Mcp-Session-Id"]
            _legacy(here, sid, 2, "tools/list")
            status, _, reply = _legacy(here, sid, 6, "logging/setLevel", {"level": "error"})
            assert status == 200 and reply["result"] == {}, reply
            _, _, first = _legacy(here, sid, 3, "tools/call",
                                  {"name": "pid__whoami", "arguments": {}})
            status, _, second = _legacy(there, sid, 4, "tools/call",
                                        {"name": "pid__whoami", "arguments": {}})
            assert status == 200, second
            status, _, echoed = _legacy(there, sid, 5, "tools/call",
                                        {"name": "remote__echo", "arguments": {"text": "w2"}})
            assert status == 200 and "w2" in json.dumps(echoed)
            logged = _legacy_events(there, sid, 7, "tools/call",
                                    {"name": "feat__log_some", "arguments": {}})
        finally:
            for conn in kept:
                conn.close()
    one = first["result"]["content"][0]["text"]
    two = second["result"]["content"][0]["text"]
    assert one != two   # each worker runs the session's stdio upstream in a process of its own
    # ... which got the log level the host set through the first worker (the shared store).
    assert [m["params"]["level"] for m in logged
            if m.get("method") == "notifications/message"] == ["error"], logged
    upstream = {r.header("Mcp-Session-Id") for r in fault_server.requests
                if r.rpc_method not in (None, "initialize")
                and r.header("Mcp-Session-Id") is not None}
    assert len(upstream) == 1   # ... and both carried on the one HTTP upstream session
