"""OAuthProvider under concurrency: single flight, no lock across requests, one login at a time.
Ordering is proven with events, never with timing thresholds."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mcpauth import FileTokenStore, MemoryTokenStore

from ._servers import FakeAuthServer, challenge, follow_once, make_provider, seed_token

THREADS = 50


@pytest.fixture
def server() -> Iterator[FakeAuthServer]:
    fake = FakeAuthServer(("as1",))
    yield fake
    fake.close()


def _run_threads(count: int, target: Callable[[], object]) -> list[threading.Thread]:
    threads = [threading.Thread(target=target, name=f"mcpsync-test-{i}", daemon=True)
               for i in range(count)]
    for thread in threads:
        thread.start()
    return threads


@pytest.mark.timeout(30)
def test_fifty_threads_with_an_expired_token_cause_one_refresh(
        server: FakeAuthServer) -> None:
    store = MemoryTokenStore()
    seed_token(server, store, left=-5)
    provider = make_provider(server, store=store, client_id="pre")
    barrier = threading.Barrier(THREADS)
    results: list[object] = []
    lock = threading.Lock()

    def worker() -> None:
        barrier.wait(10)
        value = provider.headers("POST", server.mcp_url)
        with lock:
            results.append(dict(value))

    for thread in _run_threads(THREADS, worker):
        thread.join(20)
    assert len(results) == THREADS
    assert all(r == {"Authorization": "Bearer as1-at-1"} for r in results), results[:3]
    assert len(server.issuers["as1"].grants("refresh_token")) == 1


@pytest.mark.timeout(30)
def test_fifty_threads_hitting_401_together_cause_one_refresh(server: FakeAuthServer) -> None:
    """mcpsync serializes on_unauthorized under its auth lock; a second caller holding the
    replaced token returns at once (the stale-token rule)."""

    provider = make_provider(server)
    provider.on_unauthorized(challenge(server))
    barrier = threading.Barrier(THREADS)
    auth_lock = threading.Lock()                  # what mcpsync's client holds

    def worker() -> None:
        barrier.wait(10)
        with auth_lock:
            provider.on_unauthorized(challenge(server, authorization="Bearer as1-at-1"))

    for thread in _run_threads(THREADS, worker):
        thread.join(20)
    assert len(server.issuers["as1"].grants("refresh_token")) == 1
    assert provider.headers("POST", server.mcp_url) == {"Authorization": "Bearer as1-at-2"}


@pytest.mark.timeout(30)
def test_a_slow_refresh_does_not_delay_threads_with_a_valid_token(
        server: FakeAuthServer) -> None:
    store = MemoryTokenStore()
    seed_token(server, store, left=20)            # inside the margin, still valid
    provider = make_provider(server, store=store, client_id="pre")
    as1 = server.issuers["as1"]
    release = threading.Event()
    as1.refresh_delay = release
    refresher_result: list[object] = []

    def refresher() -> None:
        refresher_result.append(dict(provider.headers("POST", server.mcp_url)))

    thread = _run_threads(1, refresher)[0]
    assert as1.refresh_started.wait(10), "the first caller started the refresh"
    # The refresh is now held inside the token endpoint. Other callers are served at once
    # with the still-valid token, while the refresher is provably still waiting.
    for _ in range(20):
        assert provider.headers("POST", server.mcp_url) == {"Authorization": "Bearer seed-at"}
    assert not refresher_result and thread.is_alive()
    release.set()
    thread.join(10)
    assert refresher_result == [{"Authorization": "Bearer as1-at-1"}]
    assert provider.headers("POST", server.mcp_url) == {"Authorization": "Bearer as1-at-1"}
    assert len(as1.grants("refresh_token")) == 1


_CHILD = textwrap.dedent("""
    import os, sys, time
    from mcpauth import FileTokenStore, OAuthProvider
    url, path, go = sys.argv[1], sys.argv[2], sys.argv[3]
    provider = OAuthProvider(url, store=FileTokenStore(path), client_id="pre",
                             interactive=False)
    while not os.path.exists(go):
        time.sleep(0.01)
    print(provider.headers("POST", url)["Authorization"])
""")


@pytest.mark.timeout(60)
def test_two_processes_sharing_a_token_file_refresh_once(server: FakeAuthServer,
                                                         tmp_path: Path) -> None:
    path = tmp_path / "cfg" / "tokens.json"
    store = FileTokenStore(path)
    seed_token(server, store, left=-5)
    release = threading.Event()
    server.issuers["as1"].refresh_delay = release
    go = tmp_path / "go"
    env = dict(os.environ)
    children = [subprocess.Popen([sys.executable, "-c", _CHILD, server.mcp_url, str(path),
                                  str(go)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, env=env) for _ in range(2)]
    try:
        go.write_text("go")
        # One child is inside the refresh (held at the token endpoint) while holding the
        # file lock; release it only then, so the other has had to queue on the lock.
        assert server.issuers["as1"].refresh_started.wait(30)
        release.set()
        outputs = [child.communicate(timeout=30) for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
    for child, (out, err) in zip(children, outputs, strict=True):
        assert child.returncode == 0, err
        assert out.strip() == "Bearer as1-at-1"
    assert len(server.issuers["as1"].grants("refresh_token")) == 1


@pytest.mark.timeout(30)
def test_one_interactive_login_at_a_time_in_a_process() -> None:
    servers = [FakeAuthServer(("as1",)), FakeAuthServer(("as1",))]
    try:
        active = 0
        most = 0
        lock = threading.Lock()
        first_inside = threading.Event()
        release_first = threading.Event()
        entered: list[int] = []

        def handler_for(index: int) -> Callable[[str], str]:
            def handler(url: str) -> str:
                nonlocal active, most
                with lock:
                    active += 1
                    most = max(most, active)
                    entered.append(index)
                try:
                    if index == 0:
                        first_inside.set()
                        release_first.wait(10)
                    return follow_once(url)
                finally:
                    with lock:
                        active -= 1
            return handler

        providers = [make_provider(s, authorization_handler=handler_for(i))
                     for i, s in enumerate(servers)]
        first = threading.Thread(target=providers[0].login, name="mcpsync-test-login-0",
                                 daemon=True)
        first.start()
        assert first_inside.wait(10)
        second = threading.Thread(target=providers[1].login, name="mcpsync-test-login-1",
                                  daemon=True)
        second.start()
        # Give the second login every chance to reach its browser step (it cannot: the
        # first holds the process-wide lock), then let the first finish.
        second.join(0.5)
        assert entered == [0], "the second login must wait for the first"
        release_first.set()
        first.join(10)
        second.join(10)
        assert entered == [0, 1] and most == 1
        assert all(p.token is not None for p in providers)
    finally:
        for s in servers:
            s.close()


@pytest.mark.timeout(30)
def test_a_login_in_flight_does_not_delay_headers_with_a_valid_token(
        server: FakeAuthServer) -> None:
    """headers() holds no lock across a request: while a step-up login waits for the user
    (holding the provider's flight), a valid token is still handed out at once."""
    store = MemoryTokenStore()
    seed_token(server, store, left=1000)
    inside = threading.Event()
    release = threading.Event()

    def slow_user(url: str) -> str:
        inside.set()
        release.wait(10)
        return follow_once(url)

    provider = make_provider(server, store=store, client_id="pre",
                             authorization_handler=slow_user)
    login = _run_threads(1, lambda: provider.on_unauthorized(challenge(
        server, status=403, scope="more", error="insufficient_scope",
        authorization="Bearer seed-at")))[0]
    try:
        assert inside.wait(10), "the step-up reached the user"
        for _ in range(20):
            assert provider.headers("POST", server.mcp_url) == {
                "Authorization": "Bearer seed-at"}
        assert login.is_alive() and not release.is_set()
    finally:
        release.set()
        login.join(10)
    assert provider.headers("POST", server.mcp_url) == {"Authorization": "Bearer as1-at-1"}


@pytest.mark.timeout(30)
def test_two_providers_sharing_a_store_refresh_a_credential_once(
        server: FakeAuthServer) -> None:
    """Single flight per credential key, not per provider object: the store's locked(key)
    makes the second provider re-read and adopt the first one's refresh."""
    store = MemoryTokenStore()
    seed_token(server, store, left=-5)
    as1 = server.issuers["as1"]
    release = threading.Event()
    as1.refresh_delay = release
    providers = [make_provider(server, store=store, client_id="pre") for _ in range(2)]
    results: list[object] = []
    threads = _run_threads(1, lambda: results.append(providers[0].headers("GET", server.mcp_url)))
    assert as1.refresh_started.wait(10)
    threads += _run_threads(1, lambda: results.append(providers[1].headers("GET", server.mcp_url)))
    release.set()
    for thread in threads:
        thread.join(10)
    assert results == [{"Authorization": "Bearer as1-at-1"}] * 2
    assert len(as1.grants("refresh_token")) == 1
