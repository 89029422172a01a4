"""Legacy host sessions carried on by another gateway process (replicas).

Two HTTP fronts with the same session key file stand for two gateway processes (one test
runs them in one process, the last one as two real gunicorn workers). A session opened on the
first is carried on by the second from its sealed id alone: the HTTP upstream's session goes
on (the same upstream ``Mcp-Session-Id``, no second ``initialize`` reaching it), the stdio
upstream is a new process that got the host's ``initialize``. An id altered by one byte, or
sealed under another key, is unknown (404); the id holds neither the key nor any upstream
credential, and the key file must be 0600.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from http_peers.fault_server import FaultServer
from server.helpers import initialize_params

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


def test_a_key_file_others_can_read_is_refused(tmp_path: Path) -> None:
    key = _key(tmp_path)
    os.chmod(key, 0o644)
    config = write_config(tmp_path, {"demo": DEMO})
    with pytest.raises(ConfigError, match="chmod 600"), mcpsync.Gateway(config) as gateway:
        gateway.wsgi_app(session_key_file=key)
