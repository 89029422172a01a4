"""An OAuth-protected HTTP upstream behind the gateway, logged at full detail: the access
token (from the authlib authorization server's client-credentials grant) rides in the
upstream's own config entry, the server checks it by introspection, and neither the token
nor the client secret, nor any 16-character piece of them, reaches the log or stderr."""

from __future__ import annotations

import json
import os
import secrets
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests
from auth_peers.authlib_server import AuthlibServer

import mcpsync
from gateway.helpers_gw import GATEWAY
from mcpsync.server import IntrospectionVerifier, Server, current_access_token

pytestmark = pytest.mark.timeout(60)

SCOPES = ["mcp:tools"]


def _build() -> Server:
    server = Server("guarded", "1.0")

    @server.tool()
    def whoami() -> str:
        """Who the verified token says is calling."""
        token = current_access_token()
        assert token is not None
        return f"{token.client_id}/{sorted(token.scopes)}"

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    return server


class _Guarded:
    """Our server on ``serve_http`` behind the authlib server's introspection."""

    def __init__(self, auth: AuthlibServer) -> None:
        self.auth = auth
        self.secret = secrets.token_urlsafe(24)
        self.rs_secret = secrets.token_urlsafe(24)
        auth.register_introspector(client_id="rs", client_secret=self.rs_secret)
        auth.register_client(client_id="svc", client_secret=self.secret,
                             grant_types=["client_credentials"])
        self.verifier = IntrospectionVerifier(f"{auth.issuer}/introspect", client_id="rs",
                                              client_secret=self.rs_secret)
        self._stop = threading.Event()
        ready = threading.Event()
        self.url = ""

        def on_ready(url: str) -> None:
            self.url = url
            ready.set()

        self._thread = threading.Thread(target=_build().serve_http, kwargs={
            "port": 0, "stop": self._stop, "ready": on_ready, "token_verifier": self.verifier,
            "authorization_servers": [auth.issuer], "scopes": SCOPES},
            name="test-gw-oauth-serve", daemon=True)
        self._thread.start()
        assert ready.wait(10), "serve_http did not start"

    def token(self) -> str:
        response = requests.post(f"{self.auth.issuer}/token", auth=("svc", self.secret), data={
            "grant_type": "client_credentials", "scope": " ".join(SCOPES),
            "resource": self.url}, timeout=5)
        assert response.status_code == 200, response.text
        token: str = response.json()["access_token"]
        return token

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.verifier.close()
        assert not self._thread.is_alive()


@pytest.fixture
def guarded(authlib_server_factory: Callable[..., AuthlibServer]) -> Iterator[_Guarded]:
    made = _Guarded(authlib_server_factory())
    yield made
    made.close()


def _pieces(secret: str, size: int = 16) -> set[str]:
    return {secret[i:i + size] for i in range(max(1, len(secret) - size + 1))}


@pytest.mark.parametrize("era", ["auto", "legacy"])
def test_an_oauth_upstream_at_full_detail_leaves_no_token_in_the_log(
        tmp_path: Path, guarded: _Guarded, era: str) -> None:
    token = guarded.token()
    assert len(token) >= 16
    config = tmp_path / "gateway.json"
    fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump({"mcpServers": {"guarded": {
            "url": guarded.url, "headers": {"Authorization": f"Bearer {token}"}}}}, out)
    log = tmp_path / "gateway.log"
    stderr: list[str] = []
    argv = [*GATEWAY, str(config), "--log", str(log), "--log-detail", "full"]
    with mcpsync.connect(argv, era=era, on_stderr=stderr.append) as client:
        assert {"whoami", "add"} <= {t.name for t in client.list_tools()}
        assert client.call_tool("whoami").text == "svc/['mcp:tools']"
        assert client.call_tool("add", {"a": 2, "b": 3}).text == "5"
    text = log.read_text()
    records = [json.loads(line) for line in text.splitlines()]
    assert any(r.get("tool") == "whoami" and "payload" in r for r in records), \
        "the log holds no full record of the call"
    assert "svc/" in text   # the answer itself is logged
    seen = text + "\n".join(stderr)
    for secret in (token, guarded.secret, guarded.rs_secret):
        leaked = [p for p in _pieces(secret) if p in seen]
        assert leaked == [], f"a piece of a secret is in the log: {leaked[:1]}"
