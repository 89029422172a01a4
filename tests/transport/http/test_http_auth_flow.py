"""AuthFlow against a real loopback HTTP server, plus the public hook types.

The server is a threaded ``http.server`` whose answer per request is a small script, so each
rule (401 retry, nonce retry, step-up, the hook-call limit, precedence) is seen on the wire.
``responses`` is used only for header-level edge cases.
"""

from __future__ import annotations

import http.server
import json
import pickle
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

import pytest
import requests
import responses

from mcpsync.auth_hooks import (
    AuthHooks,
    BearerToken,
    HttpChallenge,
    challenge_params,
    is_static,
    make_auth,
)
from mcpsync.errors import AuthHookError, ConfigError, TransportError, Unauthorized
from mcpsync.transport.http._auth import AuthFlow

SECRET = "s3cr3t-token-value"


@dataclass
class Seen:
    """One request as the server saw it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


Reply = tuple[int, list[tuple[str, str]], bytes]


@dataclass
class Script:
    """Decides the reply to each request; ``seen`` records them all."""

    decide: Callable[[Seen], Reply]
    seen: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Server:
    def __init__(self) -> None:
        self.script = Script(lambda s: (200, [], b"{}"))
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                seen = Seen(self.command, self.path, dict(self.headers.items()), body)
                script = outer.script
                with script.lock:
                    script.seen.append(seen)
                status, headers, payload = script.decide(seen)
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_POST = do_GET = do_DELETE = _handle

        class Server(http.server.ThreadingHTTPServer):
            request_queue_size = 128
            daemon_threads = True

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True,
                                       name="mcpsync-test-auth-server")
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/mcp"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


@pytest.fixture(scope="module")
def _server() -> Iterator[_Server]:
    server = _Server()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def server(_server: _Server) -> _Server:
    _server.script = Script(lambda s: (200, [], b"{}"))
    return _server


@pytest.fixture(scope="module")
def session() -> Iterator[requests.Session]:
    s = requests.Session()
    s.mount("http://", requests.adapters.HTTPAdapter(pool_maxsize=64))
    try:
        yield s
    finally:
        s.close()


BODY = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/list"}).encode()


def sender(session: requests.Session, url: str, flow: AuthFlow | None = None,
           transport: Mapping[str, str] | None = None,
           ) -> Callable[[dict[str, str]], requests.Response]:
    """A do_send: the transport's own headers over auth+static, the same body every time.

    With ``flow`` (single-threaded tests only) it also checks that the auth lock is not held
    while a request is sent."""
    own = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
           **(transport or {})}

    def do_send(headers: dict[str, str]) -> requests.Response:
        if flow is not None:
            assert not flow.lock.locked()
        return session.post(url, headers={**headers, **own}, data=BODY, timeout=10,
                            allow_redirects=False)
    return do_send


def auth_of(seen: Seen) -> str | None:
    for key, value in seen.headers.items():
        if key.lower() == "authorization":
            return value
    return None


class Provider:
    """A token provider like mcpauth's: cached token, refresh on the hook."""

    def __init__(self, token: str = "old", new: str = "new", delay: float = 0.0) -> None:
        self.token = token
        self.new = new
        self.delay = delay
        self.challenges: list[HttpChallenge] = []
        self.header_calls = 0
        self._lock = threading.Lock()

    def headers(self, method: str, url: str) -> Mapping[str, str]:
        with self._lock:
            self.header_calls += 1
        return {"Authorization": f"Bearer {self.token}"}

    def on_unauthorized(self, challenge: HttpChallenge) -> None:
        self.challenges.append(challenge)
        if self.delay:
            time.sleep(self.delay)  # widens the race window; not a timing assertion
        self.token = self.new


def accept_token(token: str, challenge: str = 'Bearer error="invalid_token"') -> Callable[
        [Seen], Reply]:
    def decide(seen: Seen) -> Reply:
        if auth_of(seen) == f"Bearer {token}":
            return 200, [], b'{"ok":true}'
        return 401, [("WWW-Authenticate", challenge)], b""
    return decide


# ---- headers and precedence ------------------------------------------------------------

def test_static_headers_only_without_hooks(server: _Server, session: requests.Session) -> None:
    flow = AuthFlow(None, {"Authorization": "Bearer static", "X-Custom": "1"}, server="demo")
    response = flow.send("POST", server.url, sender(session, server.url))
    assert response.status_code == 200
    seen = server.script.seen[0]
    assert auth_of(seen) == "Bearer static"
    assert seen.headers["X-Custom"] == "1"


def test_hook_headers_replace_static_authorization_and_transport_wins(
        server: _Server, session: requests.Session) -> None:
    class Hook(Provider):
        def headers(self, method: str, url: str) -> Mapping[str, str]:
            return {"Authorization": "DPoP tok", "DPoP": "proof", "Accept": "text/plain"}

    flow = AuthFlow(Hook(), {"authorization": "Bearer static", "X-Custom": "1",
                             "DPoP": "static-proof"})
    flow.send("POST", server.url, sender(session, server.url, flow))
    seen = server.script.seen[0]
    assert auth_of(seen) == "DPoP tok"
    assert seen.headers["DPoP"] == "proof"
    assert seen.headers["X-Custom"] == "1"
    assert seen.headers["Accept"] == "application/json, text/event-stream"  # transport wins


def test_empty_mapping_sends_no_authorization_even_with_a_static_one(
        server: _Server, session: requests.Session) -> None:
    class Hook(Provider):
        def headers(self, method: str, url: str) -> Mapping[str, str]:
            return {}

    flow = AuthFlow(Hook(), {"Authorization": "Bearer static"})
    flow.send("POST", server.url, sender(session, server.url))
    assert auth_of(server.script.seen[0]) is None


def test_headers_called_before_every_request_with_method_and_url(
        server: _Server, session: requests.Session) -> None:
    calls: list[tuple[str, str]] = []

    class Hook(Provider):
        def headers(self, method: str, url: str) -> Mapping[str, str]:
            calls.append((method, url))
            return {}

    flow = AuthFlow(Hook(), {})
    for _ in range(3):
        flow.send("POST", server.url, sender(session, server.url))
    assert calls == [("POST", server.url)] * 3


def test_headers_exception_fails_unsent_with_auth_hook_error(
        server: _Server, session: requests.Session) -> None:
    class Boom(Provider):
        def headers(self, method: str, url: str) -> Mapping[str, str]:
            raise RuntimeError("keyring locked")

    flow = AuthFlow(Boom(), {}, server="demo")
    with pytest.raises(AuthHookError, match="keyring locked") as info:
        flow.send("POST", server.url, sender(session, server.url), rpc_method="tools/list")
    assert isinstance(info.value.__cause__, RuntimeError)
    assert info.value.server == "demo"
    assert info.value.method == "tools/list"
    assert server.script.seen == []


# ---- 401 ----------------------------------------------------------------------------------

def test_401_without_hook_raises_unauthorized(server: _Server,
                                              session: requests.Session) -> None:
    server.script = Script(accept_token("never", 'Bearer realm="mcp", error="invalid_token"'))
    flow = AuthFlow(None, {"Authorization": f"Bearer {SECRET}"}, server="demo")
    with pytest.raises(Unauthorized) as info:
        flow.send("POST", server.url + "?k=v", sender(session, server.url),
                  rpc_method="tools/list")
    err = info.value
    assert err.status == 401
    assert err.www_authenticate == 'Bearer realm="mcp", error="invalid_token"'
    assert err.__dict__["url"] == server.url + "?k=v"
    assert err.server == "demo"
    assert len(server.script.seen) == 1
    assert SECRET not in str(err) and SECRET not in repr(err)
    assert "?k=v" not in str(err)
    assert pickle.loads(pickle.dumps(err)).__dict__["url"] == server.url + "?k=v"


def test_401_calls_hook_once_and_retries_with_same_body(server: _Server,
                                                        session: requests.Session) -> None:
    server.script = Script(accept_token("new"))
    provider = Provider()
    flow = AuthFlow(provider, {}, server="demo")
    response = flow.send("POST", server.url, sender(session, server.url, flow))
    assert response.status_code == 200
    assert [auth_of(s) for s in server.script.seen] == ["Bearer old", "Bearer new"]
    assert server.script.seen[0].body == server.script.seen[1].body == BODY
    [challenge] = provider.challenges
    assert challenge.status == 401
    assert challenge.www_authenticate == ('Bearer error="invalid_token"',)
    assert challenge.method == "POST" and challenge.url == server.url
    assert challenge.authorization == "Bearer old"
    assert "Bearer old" not in repr(challenge)
    assert flow.hook_calls == 1


def test_second_401_raises_unauthorized(server: _Server, session: requests.Session) -> None:
    server.script = Script(accept_token("never"))
    provider = Provider()
    flow = AuthFlow(provider, {})
    with pytest.raises(Unauthorized) as info:
        flow.send("POST", server.url, sender(session, server.url))
    assert len(provider.challenges) == 1
    assert len(server.script.seen) == 2
    assert info.value.status == 401


def test_use_dpop_nonce_gets_one_more_hook_call_and_retry(server: _Server,
                                                          session: requests.Session) -> None:
    nonce_challenge = 'DPoP error="use_dpop_nonce", error_description="nonce"'

    def decide(seen: Seen) -> Reply:
        n = len(server.script.seen)
        if n == 1:
            return 401, [("WWW-Authenticate", 'DPoP error="invalid_token"')], b""
        if n in (2, 3):
            return 401, [("WWW-Authenticate", nonce_challenge),
                         ("DPoP-Nonce", f"n{n}")], b""
        return 200, [], b"{}"

    server.script = Script(decide)
    provider = Provider()
    flow = AuthFlow(provider, {})
    with pytest.raises(Unauthorized):
        flow.send("POST", server.url, sender(session, server.url))
    # first 401 → hook; nonce 401 → hook (the one nonce retry); another nonce 401 → stop
    assert len(server.script.seen) == 3
    assert len(provider.challenges) == 2
    assert provider.challenges[1].headers["dpop-nonce"] == "n2"

    def decide_ok(seen: Seen) -> Reply:
        n = len(server.script.seen)
        if n == 1:
            return 401, [("WWW-Authenticate", 'DPoP error="invalid_token"')], b""
        if n == 2:
            return 401, [("WWW-Authenticate", nonce_challenge), ("DPoP-Nonce", "n2")], b""
        return 200, [], b"{}"

    server.script = Script(decide_ok)
    provider = Provider()
    flow = AuthFlow(provider, {})
    assert flow.send("POST", server.url, sender(session, server.url)).status_code == 200
    assert len(provider.challenges) == 2


def test_nonce_call_is_not_counted_toward_the_limit(server: _Server,
                                                    session: requests.Session) -> None:
    replies: list[Reply] = [
        (401, [("WWW-Authenticate", 'Bearer error="invalid_token"')], b""),
        (401, [("WWW-Authenticate", 'DPoP error="use_dpop_nonce"')], b""),
        (403, [("WWW-Authenticate", 'Bearer error="insufficient_scope", scope="a b"')], b""),
        (403, [("WWW-Authenticate", 'Bearer error="insufficient_scope", scope="a b c"')], b""),
        (200, [], b"{}"),
    ]
    server.script = Script(lambda s: replies[len(server.script.seen) - 1])
    provider = Provider()
    flow = AuthFlow(provider, {})
    assert flow.send("POST", server.url, sender(session, server.url)).status_code == 200
    assert len(provider.challenges) == 4  # 3 counted + the nonce call


# ---- 403 ----------------------------------------------------------------------------------

def test_403_insufficient_scope_steps_up_and_retries(server: _Server,
                                                     session: requests.Session) -> None:
    def decide(seen: Seen) -> Reply:
        if auth_of(seen) == "Bearer new":
            return 200, [], b"{}"
        return 403, [("WWW-Authenticate",
                      'Bearer error="insufficient_scope", scope="files:write"')], b""

    server.script = Script(decide)
    provider = Provider()
    flow = AuthFlow(provider, {})
    assert flow.send("POST", server.url, sender(session, server.url)).status_code == 200
    [challenge] = provider.challenges
    assert challenge.status == 403
    assert challenge.param("scope") == "files:write"


def test_other_403_is_a_transport_error_without_the_hook(server: _Server,
                                                         session: requests.Session) -> None:
    server.script = Script(lambda s: (403, [("WWW-Authenticate",
                                             'Bearer error="invalid_token"')], b"{}"))
    provider = Provider()
    flow = AuthFlow(provider, {}, server="demo")
    with pytest.raises(TransportError) as info:
        flow.send("POST", server.url, sender(session, server.url), rpc_method="tools/list")
    assert not isinstance(info.value, Unauthorized)
    assert info.value.__dict__["status"] == 403
    assert provider.challenges == []
    assert len(server.script.seen) == 1
    # A plain 403 (an invalid Origin) has no challenge at all.
    server.script = Script(lambda s: (403, [], b"{}"))
    with pytest.raises(TransportError):
        flow.send("POST", server.url, sender(session, server.url))
    assert provider.challenges == []


def test_at_most_three_hook_calls_per_logical_request(server: _Server,
                                                      session: requests.Session) -> None:
    counter = iter(range(100))

    class Rotating(Provider):
        def on_unauthorized(self, challenge: HttpChallenge) -> None:
            self.challenges.append(challenge)
            self.token = f"t{next(counter)}"

    def decide(seen: Seen) -> Reply:
        if auth_of(seen) == "Bearer old":
            return 401, [("WWW-Authenticate", 'Bearer error="invalid_token"')], b""
        return 403, [("WWW-Authenticate", 'Bearer error="insufficient_scope"')], b""

    server.script = Script(decide)
    provider = Rotating()
    flow = AuthFlow(provider, {})
    with pytest.raises(Unauthorized) as info:
        flow.send("POST", server.url, sender(session, server.url))
    assert len(provider.challenges) == 3
    # 1 original + 3 retries; the authorizations after the first are the hook's 3
    assert len(server.script.seen) == 4
    assert info.value.status == 403
    assert "insufficient_scope" in (info.value.www_authenticate or "")
    # The limit is per logical request: the next request starts afresh.
    provider.token = "old"
    with pytest.raises(Unauthorized):
        flow.send("POST", server.url, sender(session, server.url))
    assert len(provider.challenges) == 6


def test_on_unauthorized_raising_is_auth_hook_error(server: _Server,
                                                    session: requests.Session) -> None:
    class LoginRequired(Exception):
        pass

    class Hook(Provider):
        def on_unauthorized(self, challenge: HttpChallenge) -> None:
            raise LoginRequired("open https://idp.example/login")

    server.script = Script(accept_token("new"))
    flow = AuthFlow(Hook(), {})
    with pytest.raises(AuthHookError, match=r"idp\.example") as info:
        flow.send("POST", server.url, sender(session, server.url))
    assert isinstance(info.value.__cause__, LoginRequired)
    assert not flow.lock.locked()
    assert len(server.script.seen) == 1


# ---- concurrency --------------------------------------------------------------------------

@pytest.mark.timeout(60)
def test_fifty_threads_hitting_401_cause_one_hook_call(server: _Server,
                                                       session: requests.Session) -> None:
    server.script = Script(accept_token("new"))
    provider = Provider(delay=0.05)
    flow = AuthFlow(provider, {})
    barrier = threading.Barrier(50)
    results: list[int] = []
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            barrier.wait(10)
            results.append(flow.send("POST", server.url,
                                     sender(session, server.url)).status_code)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, name=f"mcpsync-test-{i}", daemon=True)
               for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    assert results == [200] * 50
    assert len(provider.challenges) == 1
    assert flow.hook_calls == 1
    assert sum(1 for s in server.script.seen if auth_of(s) == "Bearer old") >= 1


@pytest.mark.timeout(30)
def test_lock_is_not_held_across_requests(server: _Server, session: requests.Session) -> None:
    """While one thread's request is in flight, another thread's hook can run."""
    in_flight = threading.Event()
    release = threading.Event()

    def decide(seen: Seen) -> Reply:
        if seen.headers.get("X-Slow"):
            in_flight.set()
            release.wait(10)
            return 200, [], b"{}"
        return accept_token("new")(seen)

    server.script = Script(decide)
    provider = Provider()
    flow = AuthFlow(provider, {})
    slow = threading.Thread(
        target=lambda: flow.send("POST", server.url,
                                 sender(session, server.url, transport={"X-Slow": "1"})),
        name="mcpsync-test-slow", daemon=True)
    slow.start()
    assert in_flight.wait(10)
    assert flow.send("POST", server.url, sender(session, server.url)).status_code == 200
    assert len(provider.challenges) == 1
    release.set()
    slow.join(10)


# ---- on_response ----------------------------------------------------------------------------

def test_on_response_gets_every_response_with_dpop_nonce(server: _Server,
                                                         session: requests.Session) -> None:
    def decide(seen: Seen) -> Reply:
        n = len(server.script.seen)
        if n == 1:
            return 401, [("WWW-Authenticate", 'DPoP error="use_dpop_nonce"'),
                         ("DPoP-Nonce", "n1")], b""
        if n == 2:
            return 200, [("DPoP-Nonce", "n2")], b"{}"
        return 200, [], b"{}"

    class Hook(Provider):
        def __init__(self) -> None:
            super().__init__()
            self.nonces: list[str] = []

        def on_response(self, headers: Mapping[str, str]) -> None:
            self.nonces.append(headers["dpop-nonce"])

    server.script = Script(decide)
    hook = Hook()
    flow = AuthFlow(hook, {})
    flow.send("POST", server.url, sender(session, server.url))
    flow.send("POST", server.url, sender(session, server.url))
    assert hook.nonces == ["n1", "n2"]


# ---- WWW-Authenticate values and challenge parsing ------------------------------------------

def test_repeated_www_authenticate_headers_stay_separate(server: _Server,
                                                         session: requests.Session) -> None:
    server.script = Script(lambda s: (401, [
        ("WWW-Authenticate", 'Bearer realm="a, b", error="invalid_token"'),
        ("WWW-Authenticate", 'DPoP algs="ES256", error="use_dpop_nonce"')], b""))
    provider = Provider()
    flow = AuthFlow(provider, {})
    with pytest.raises(Unauthorized):
        flow.send("POST", server.url, sender(session, server.url))
    assert provider.challenges[0].www_authenticate == (
        'Bearer realm="a, b", error="invalid_token"', 'DPoP algs="ES256", error="use_dpop_nonce"')
    # the second 401 carried use_dpop_nonce (in the second value), so the nonce retry ran
    assert len(provider.challenges) == 2


@responses.activate
def test_www_authenticate_values_with_responses_mock() -> None:
    responses.add(responses.POST, "https://mcp.example/mcp", status=401,
                  headers=[("WWW-Authenticate", 'Bearer error="invalid_token"'),
                           ("WWW-Authenticate", 'Basic realm="x"')])
    flow = AuthFlow(None, {})
    with pytest.raises(Unauthorized) as info:
        flow.send("POST", "https://mcp.example/mcp",
                  lambda h: requests.post("https://mcp.example/mcp", headers=h, data=b"{}"))
    assert info.value.__dict__["www_authenticate_values"] == (
        'Bearer error="invalid_token"', 'Basic realm="x"')


@pytest.mark.parametrize(("value", "code", "expected"), [
    ('Bearer error="insufficient_scope"', "insufficient_scope", True),
    ('Bearer error=insufficient_scope', "insufficient_scope", True),
    ('Bearer realm="x",error="insufficient_scope",scope="a"', "insufficient_scope", True),
    ('Bearer ERROR="insufficient_scope"', "insufficient_scope", True),
    ('Bearer my_error="insufficient_scope"', "insufficient_scope", False),
    ('Bearer error_description="insufficient_scope"', "insufficient_scope", False),
    ('Bearer realm="error=\\"insufficient_scope\\""', "insufficient_scope", False),
    ('Bearer error="insufficient_scope_x"', "insufficient_scope", False),
    ('DPoP algs="ES256", error="use_dpop_nonce"', "use_dpop_nonce", True),
    ('Basic realm="use_dpop_nonce"', "use_dpop_nonce", False),
])
def test_challenge_error_matching_is_exact(value: str, code: str, expected: bool) -> None:
    assert HttpChallenge(401, (value,)).has_error(code) is expected


def test_scope_param_is_not_read_from_error_scope() -> None:
    challenge = HttpChallenge(403, ('Bearer error_scope="admin", scope="read"',))
    assert challenge.param("scope") == "read"
    assert HttpChallenge(403, ('Bearer error_scope="admin"',)).param("scope") is None
    assert challenge_params('Bearer realm="a \\"q\\" b", x=y') == [
        ("realm", 'a "q" b'), ("x", "y")]


def test_challenge_headers_are_case_insensitive_and_frozen() -> None:
    challenge = HttpChallenge(401, ["Bearer"], {"DPoP-Nonce": "abc"},  # type: ignore[arg-type]
                              "POST", "u", "Bearer t")
    assert challenge.headers["dpop-nonce"] == "abc"
    assert "DPOP-NONCE" in challenge.headers
    assert challenge.www_authenticate == ("Bearer",)
    assert "Bearer t" not in repr(challenge)
    with pytest.raises(AttributeError):
        challenge.status = 403  # type: ignore[misc]


# ---- make_auth and the static forms -------------------------------------------------------

def test_make_auth_forms() -> None:
    assert make_auth() is None
    token = make_auth("abc")
    assert isinstance(token, BearerToken)
    assert token.headers("POST", "u") == {"Authorization": "Bearer abc"}
    assert is_static(token)
    bt = BearerToken(SECRET)
    assert make_auth(bt) is bt
    assert SECRET not in repr(bt) and SECRET not in str(bt)
    provider = Provider()
    assert make_auth(provider) is provider
    assert isinstance(provider, AuthHooks)
    assert not is_static(provider)
    with pytest.raises(ConfigError):
        make_auth(object())  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        BearerToken("a\r\nX-Injected: 1")


def test_make_auth_both_is_config_error() -> None:
    with pytest.raises(ConfigError, match="not both"):
        make_auth("abc", authorization=lambda: "Bearer x")
    with pytest.raises(ConfigError, match="not both"):
        make_auth(Provider(), on_unauthorized=lambda challenge: None)


def test_plain_callables_adapter(server: _Server, session: requests.Session) -> None:
    values: list[str | None] = ["Bearer old"]
    got: list[str] = []

    def authorization() -> str | None:
        return values[-1]

    def on_unauthorized(www_authenticate: str) -> None:
        got.append(www_authenticate)
        values.append("Bearer new")

    hooks = make_auth(authorization=authorization, on_unauthorized=on_unauthorized)
    assert hooks is not None and not is_static(hooks)
    server.script = Script(lambda s: (200, [], b"{}") if auth_of(s) == "Bearer new" else (
        401, [("WWW-Authenticate", 'Bearer error="invalid_token"'),
              ("WWW-Authenticate", 'DPoP algs="ES256"')], b""))
    flow = AuthFlow(hooks, {"Authorization": "Bearer static"})
    assert flow.send("POST", server.url, sender(session, server.url)).status_code == 200
    assert got == ['Bearer error="invalid_token", DPoP algs="ES256"']
    values.append(None)
    assert hooks.headers("POST", "u") == {}
    values.append("")
    assert hooks.headers("POST", "u") == {}


def test_static_token_401_raises_without_retry(server: _Server,
                                               session: requests.Session) -> None:
    server.script = Script(accept_token("never"))
    flow = AuthFlow(make_auth(SECRET), {})
    with pytest.raises(Unauthorized) as info:
        flow.send("POST", server.url, sender(session, server.url))
    assert len(server.script.seen) == 1
    assert auth_of(server.script.seen[0]) == f"Bearer {SECRET}"
    assert SECRET not in str(info.value)


def test_authorization_callable_alone_rereads_then_gives_up(
        server: _Server, session: requests.Session) -> None:
    tokens = iter(["Bearer a", "Bearer a", "Bearer b", "Bearer b", "Bearer b"])
    hooks = make_auth(authorization=lambda: next(tokens))
    assert hooks is not None and is_static(hooks)
    server.script = Script(accept_token("b"))
    flow = AuthFlow(hooks, {})
    # first send "a" → 401 → re-read gives "a": no refresh possible → Unauthorized
    with pytest.raises(Unauthorized):
        flow.send("POST", server.url, sender(session, server.url))
    # now the callable has moved on: "b" is accepted
    assert flow.send("POST", server.url, sender(session, server.url)).status_code == 200


def test_insufficient_scope_without_hook_is_unauthorized(server: _Server,
                                                         session: requests.Session) -> None:
    server.script = Script(lambda s: (403, [("WWW-Authenticate",
                                             'Bearer error="insufficient_scope"')], b""))
    with pytest.raises(Unauthorized) as info:
        AuthFlow(make_auth("tok"), {}).send("POST", server.url, sender(session, server.url))
    assert info.value.status == 403


def test_challenge_refusal_message_redacts(server: _Server, session: requests.Session) -> None:
    class Hook(Provider):
        def headers(self, method: str, url: str) -> Mapping[str, str]:
            return {"Authorization": f"Bearer {SECRET}"}

    server.script = Script(accept_token("never"))
    flow = AuthFlow(Hook(), {})
    url = server.url.replace("http://", f"http://user:{SECRET}@")
    with pytest.raises(Unauthorized) as info:
        flow.send("POST", url, sender(session, server.url))
    assert SECRET not in str(info.value) and SECRET not in repr(info.value)



def test_building_blocks_do_not_import_requests() -> None:
    """``import mcpsync`` stays light: these modules load requests only when used."""
    import subprocess
    import sys

    code = ("import sys, mcpsync.auth_hooks, mcpsync.transport.sse, "
            "mcpsync.transport.http._headers, mcpsync.transport.http._auth, "
            "mcpsync.transport.http._redirects; print('requests' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout.strip()
    assert out == "False"
