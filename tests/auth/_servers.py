"""Loopback HTTP servers shared by the mcpauth tests (private to ``tests/auth``).

Two servers, both real ``ThreadingHTTPServer`` instances on 127.0.0.1 so that every request
mcpauth makes really goes over a socket, and both record what they receive:

- :class:`ScriptedServer` answers from a script: ``routes`` by path (the same reply every
  time, for metadata documents and redirect chains) and ``script``, a queue popped once per
  request that no route matches (for a token endpoint answering a sequence). Anything else
  is a 404, which fails a test loudly.
- :class:`FakeAuthServer` plays a protected resource's metadata and one or more whole
  authorization servers (issuers ``<base>/as1``, ``<base>/as2``): discovery, dynamic
  registration, an ``/authorize`` that redirects at once (as the conformance mock does), a
  device endpoint and a token endpoint for every grant. The provider tests drive
  ``OAuthProvider`` against it the way mcpsync does.

Their fixtures (``server``, ``server2``, ``session``) are offered to the tests of this folder
only, by ``tests/auth/conftest.py``: the names are too plain to hand to every test.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
import requests

from mcpauth import OAuthProvider, Token, TokenStore
from mcpauth.tokens import credential_key, resource_index_key

__all__ = [
    "FakeAuthServer",
    "FakeChallenge",
    "Issuer",
    "Recorded",
    "Reply",
    "ScriptedServer",
    "challenge",
    "follow_once",
    "make_provider",
    "requested_scopes",
    "scripted_server_fixture",
    "second_scripted_server_fixture",
    "seed_token",
    "session_fixture",
]

GRANT_TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
GRANT_DEVICE_CODE = "urn:ietf:params:oauth:grant-type:device_code"
TOKEN_TYPE_ID_JAG = "urn:ietf:params:oauth:token-type:id-jag"


class _QuietServer(ThreadingHTTPServer):
    """No tracebacks on stderr: a client that gave up (timeout, size cap) is expected."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


def _serve(handler: type[BaseHTTPRequestHandler], name: str
           ) -> tuple[_QuietServer, threading.Thread, str]:
    """Start ``handler`` on an ephemeral loopback port; (server, thread, base URL)."""
    httpd = _QuietServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True, name=name)
    thread.start()
    return httpd, thread, f"http://127.0.0.1:{httpd.server_address[1]}"


def _stop(httpd: ThreadingHTTPServer, thread: threading.Thread) -> None:
    httpd.shutdown()
    httpd.server_close()
    thread.join(5)


# --- the scripted server ----------------------------------------------------------------


@dataclass
class Recorded:
    """One request as the server saw it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def form(self) -> dict[str, str]:
        """The form body; a repeated field fails the test (a client must send each once)."""
        parsed = parse_qs(self.body.decode(), keep_blank_values=True)
        for name, values in parsed.items():
            assert len(values) == 1, f"{name} sent {len(values)} times"
        return {name: values[0] for name, values in parsed.items()}

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers.items() if k.lower() == name.lower()), None)


@dataclass
class Reply:
    """A scripted answer: a dict or list body is sent as JSON, a str as UTF-8 text."""

    status: int = 200
    body: bytes | str | dict[str, Any] | list[Any] = b""
    headers: dict[str, str] = field(default_factory=dict)
    chunked: bool = False
    delay: float = 0.0


Route = Reply | Callable[[Recorded], Reply]


class ScriptedServer:
    """A loopback HTTP server answering ``routes`` by path, else popping ``script``.

    Every request is appended to ``requests``; with neither a route nor a scripted reply
    left the answer is a 404.
    """

    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.script: list[Route] = []
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                rec = Recorded(self.command, self.path, dict(self.headers.items()),
                               self.rfile.read(length) if length else b"")
                outer._send(self, outer._route(rec))

            do_GET = do_POST = _handle

        self.httpd, self._thread, self.base = _serve(Handler, "mcpsync-test-auth-server")
        self.port: int = self.httpd.server_address[1]

    def _route(self, rec: Recorded) -> Reply:
        with self._lock:
            self.requests.append(rec)
            route = self.routes.get(rec.path.split("?", 1)[0])
            if route is None:
                route = self.script.pop(0) if self.script else Reply(404, {"error": "none"})
        return route(rec) if callable(route) else route

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, reply: Reply) -> None:
        if reply.delay:
            time.sleep(reply.delay)  # a slow server, for the client's read timeout
        data = reply.body
        if isinstance(data, (dict, list)):
            data = json.dumps(data).encode()
        elif isinstance(data, str):
            data = data.encode()
        handler.send_response(reply.status)
        for name, value in {"Content-Type": "application/json", **reply.headers}.items():
            handler.send_header(name, value)
        if reply.chunked:
            handler.send_header("Transfer-Encoding", "chunked")
            handler.end_headers()
            for i in range(0, len(data), 65536):
                piece = data[i:i + 65536]
                handler.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            handler.wfile.write(b"0\r\n\r\n")
        else:
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)

    def close(self) -> None:
        _stop(self.httpd, self._thread)


@pytest.fixture(name="server")
def scripted_server_fixture() -> Iterator[ScriptedServer]:
    srv = ScriptedServer()
    try:
        yield srv
    finally:
        srv.close()


@pytest.fixture(name="server2")
def second_scripted_server_fixture() -> Iterator[ScriptedServer]:
    srv = ScriptedServer()
    try:
        yield srv
    finally:
        srv.close()


@pytest.fixture(name="session")
def session_fixture() -> Iterator[requests.Session]:
    with requests.Session() as s:
        yield s


# --- the fake authorization servers -----------------------------------------------------


@dataclass
class Issuer:
    """One authorization server's behaviour and what it saw."""

    name: str
    scopes_supported: list[str] | None = None
    expires_in: int = 3600
    refresh_delay: threading.Event | None = None   # the refresh waits for this when set
    refresh_started: threading.Event = field(default_factory=threading.Event)
    refuse_refresh: bool = False                   # answer refreshes with invalid_grant
    refresh_tokens: bool = True                    # issue refresh tokens at all
    dpop: bool = False                             # advertise DPoP, bind tokens to proofs
    pending_polls: int = 1                         # device-code polls answered "pending"
    # Refuse a dynamically registered client a grant it did not register (unauthorized_client),
    # as authlib's server does (ClientMixin.check_grant_type; RFC 7591 §2).
    enforce_grant_types: bool = False
    client_grants: dict[str, list[str]] = field(default_factory=dict)
    dpop_proofs: list[str] = field(default_factory=list)
    registrations: list[dict[str, Any]] = field(default_factory=list)
    authorizations: list[dict[str, str]] = field(default_factory=list)
    token_requests: list[dict[str, str]] = field(default_factory=list)
    token_headers: list[dict[str, str]] = field(default_factory=list)
    counter: int = 0

    def grants(self, grant_type: str) -> list[dict[str, str]]:
        return [r for r in self.token_requests if r.get("grant_type") == grant_type]


class FakeAuthServer:
    """Resource metadata plus authorization servers on one loopback port.

    ``current`` names the issuer the resource metadata points at (``prm_servers``, when
    set, replaces the whole ``authorization_servers`` list; ``prm_extra`` adds members).
    A token-exchange request is answered with an ID-JAG, so an issuer can also play an
    enterprise IdP.
    """

    def __init__(self, issuers: tuple[str, ...] = ("as1",)) -> None:
        self.issuers = {name: Issuer(name) for name in issuers}
        self.current = issuers[0]
        self.prm_scopes: list[str] | None = None
        self.prm_servers: list[str] | None = None
        self.prm_extra: dict[str, Any] = {}
        self.prm_requests = 0
        self.metadata_requests: list[str] = []
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:   # quiet
                pass

            def do_GET(self) -> None:
                fake._get(self)

            def do_POST(self) -> None:
                fake._post(self)

        self.httpd, self.thread, self.base = _serve(Handler, "mcpsync-test-fake-as")

    @property
    def mcp_url(self) -> str:
        return f"{self.base}/mcp"

    @property
    def prm_url(self) -> str:
        return f"{self.base}/.well-known/oauth-protected-resource/mcp"

    def issuer_url(self, name: str) -> str:
        return f"{self.base}/{name}"

    def close(self) -> None:
        _stop(self.httpd, self.thread)

    @staticmethod
    def _json(handler: BaseHTTPRequestHandler, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _get(self, h: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(h.path)
        path = parts.path
        if path == "/.well-known/oauth-protected-resource/mcp":
            with self.lock:
                self.prm_requests += 1
            servers = self.prm_servers or [self.issuer_url(self.current)]
            doc: dict[str, Any] = {"resource": self.mcp_url, "authorization_servers": servers,
                                   **self.prm_extra}
            if self.prm_scopes is not None:
                doc["scopes_supported"] = self.prm_scopes
            return self._json(h, 200, doc)
        prefix = "/.well-known/oauth-authorization-server/"
        if path.startswith(prefix) and path[len(prefix):] in self.issuers:
            issuer = self.issuers[path[len(prefix):]]
            with self.lock:
                self.metadata_requests.append(issuer.name)
            base = self.issuer_url(issuer.name)
            meta: dict[str, Any] = {
                "issuer": base,
                "authorization_endpoint": f"{base}/authorize",
                "token_endpoint": f"{base}/token",
                "registration_endpoint": f"{base}/register",
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported": ["none"],
                "grant_types_supported": ["authorization_code", "refresh_token",
                                          "client_credentials", GRANT_DEVICE_CODE],
                "device_authorization_endpoint": f"{base}/device",
            }
            if issuer.dpop:
                meta["dpop_signing_alg_values_supported"] = ["ES256"]
            if issuer.scopes_supported is not None:
                meta["scopes_supported"] = issuer.scopes_supported
            return self._json(h, 200, meta)
        name, _, rest = path.strip("/").partition("/")
        if rest == "authorize" and name in self.issuers:
            query = {k: v[0] for k, v in parse_qs(parts.query).items()}
            with self.lock:
                self.issuers[name].authorizations.append(query)
            target = query["redirect_uri"] + "?" + urlencode(
                {"code": f"code-{name}", "state": query.get("state", "")})
            h.send_response(302)
            h.send_header("Location", target)
            h.send_header("Content-Length", "0")
            h.end_headers()
            return None
        return self._json(h, 404, {"error": "not_found"})

    def _post(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length).decode()
        name, _, rest = urlsplit(h.path).path.strip("/").partition("/")
        issuer = self.issuers.get(name)
        if issuer is None:
            return self._json(h, 404, {"error": "not_found"})
        if rest == "register":
            body = json.loads(raw)
            # RFC 7591 §2: no grant_types means authorization_code only.
            grants = list(body.get("grant_types") or ["authorization_code"])
            with self.lock:
                issuer.registrations.append(body)
                client_id = f"{name}-client-{len(issuer.registrations)}"
                issuer.client_grants[client_id] = grants
            return self._json(h, 201, {"client_id": client_id,
                                       "token_endpoint_auth_method": "none",
                                       "redirect_uris": body.get("redirect_uris", []),
                                       "grant_types": grants})
        if rest == "device":
            return self._json(h, 200, {"device_code": "dev-code", "user_code": "WXYZ-1234",
                                       "verification_uri": f"{self.issuer_url(name)}/verify",
                                       "expires_in": 30, "interval": 0.01})
        if rest == "token":
            return self._token(h, issuer, raw)
        return self._json(h, 404, {"error": "not_found"})

    def _token(self, h: BaseHTTPRequestHandler, issuer: Issuer, raw: str) -> None:
        name = issuer.name
        form = {k: v[0] for k, v in parse_qs(raw).items()}
        proof = h.headers.get("DPoP")
        with self.lock:
            issuer.token_requests.append(form)
            issuer.token_headers.append(dict(h.headers.items()))
            if proof:
                issuer.dpop_proofs.append(proof)
            if form.get("grant_type", "").endswith("device_code") and issuer.pending_polls:
                issuer.pending_polls -= 1
                pending = True
            else:
                pending = False
                issuer.counter += 1
            n = issuer.counter
        registered = issuer.client_grants.get(form.get("client_id", ""))
        if (issuer.enforce_grant_types and registered is not None
                and form.get("grant_type") not in registered):
            return self._json(h, 400, {"error": "unauthorized_client",
                                       "error_description": "grant type not registered"})
        if pending:
            return self._json(h, 400, {"error": "authorization_pending"})
        if form.get("assertion") == "refused-jwt":
            return self._json(h, 400, {"error": "invalid_grant",
                                       "error_description": "untrusted workload"})
        if form.get("grant_type") == "refresh_token":
            issuer.refresh_started.set()
            if issuer.refresh_delay is not None:
                issuer.refresh_delay.wait(10)
            if issuer.refuse_refresh:
                return self._json(h, 400, {"error": "invalid_grant"})
        token_type = "DPoP" if issuer.dpop and proof else "Bearer"
        answer: dict[str, Any] = {"access_token": f"{name}-at-{n}", "token_type": token_type,
                                  "expires_in": issuer.expires_in,
                                  "refresh_token": f"{name}-rt-{n}"}
        if not issuer.refresh_tokens:
            del answer["refresh_token"]
        if form.get("grant_type") == GRANT_TOKEN_EXCHANGE:
            answer = {"access_token": f"{name}-id-jag-{n}", "token_type": "N_A",
                      "issued_token_type": TOKEN_TYPE_ID_JAG, "expires_in": 300}
        if "scope" in form:
            answer["scope"] = form["scope"]
        return self._json(h, 200, answer)


@dataclass(frozen=True)
class FakeChallenge:
    """Shaped like mcpsync's HttpChallenge (the provider reads it by duck typing)."""

    status: int
    www_authenticate: tuple[str, ...]
    headers: dict[str, str] = field(default_factory=dict)
    method: str = "POST"
    url: str = ""
    authorization: str | None = None


def follow_once(url: str) -> str:
    """The authorization handler of the conformance client: no redirect following."""
    response = requests.get(url, allow_redirects=False, timeout=10)
    return str(response.headers["Location"])


def make_provider(server: FakeAuthServer, **options: Any) -> OAuthProvider:
    options.setdefault("authorization_handler", follow_once)
    options.setdefault("redirect_uri", "http://127.0.0.1:3000/callback")
    return OAuthProvider(server.mcp_url, **options)


def challenge(server: FakeAuthServer, *, status: int = 401, scope: str | None = None,
              error: str | None = None, authorization: str | None = None) -> FakeChallenge:
    params = [f'resource_metadata="{server.prm_url}"']
    if scope is not None:
        params.append(f'scope="{scope}"')
    if error is not None:
        params.append(f'error="{error}"')
    return FakeChallenge(status, ("Bearer " + ", ".join(params),), url=server.mcp_url,
                         authorization=authorization)


def requested_scopes(issuer: Issuer, index: int = -1) -> list[str] | None:
    scope = issuer.authorizations[index].get("scope")
    return None if scope is None else scope.split(" ")


def seed_token(server: FakeAuthServer, store: TokenStore, *, left: float,
               lifetime: float = 100.0, client_id: str = "pre",
               refresh_token: str | None = "seed-rt") -> Token:
    """Put a token for the fake server in ``store`` with ``left`` seconds to live."""
    now = time.time()
    token = Token(access_token="seed-at", refresh_token=refresh_token, expires_at=now + left,
                  issued_at=now + left - lifetime, issuer=server.issuer_url("as1"),
                  client_id=client_id, resource=server.mcp_url)
    store.put(credential_key(token.issuer, token.client_id, token.resource), token.to_dict())
    store.put(resource_index_key(server.mcp_url),
              {"issuer": token.issuer, "client_id": token.client_id,
               "resource": token.resource})
    return token
