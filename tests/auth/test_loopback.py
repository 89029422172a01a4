"""The loopback redirect listener and ``run_browser_login``.

The listener is exercised with real HTTP requests (``requests`` standing in for the
browser); ``webbrowser.open`` is replaced so no browser starts, and ``sys.stdin`` so the
paste path reads a scripted answer.
"""

from __future__ import annotations

import io
import socket
import sys
import threading
import webbrowser
from collections.abc import Iterator

import pytest
import requests

from mcpauth._loopback import LoopbackListener
from mcpauth.errors import InsecureURL, LoginRequired, LoginTimeout
from mcpauth.flows import run_browser_login

AUTH_URL = "https://as.example.com/authorize?client_id=c&state=s"


@pytest.fixture
def listener() -> Iterator[LoopbackListener]:
    lst = LoopbackListener()
    try:
        yield lst
    finally:
        lst.close()


def callback_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("mcpauth-callback")]


def test_redirect_uri_and_binding(listener: LoopbackListener) -> None:
    assert listener.redirect_uri == f"http://127.0.0.1:{listener.port}/callback"
    assert listener.port > 0
    (thread,) = [t for t in callback_threads() if t.name == "mcpauth-callback"]
    assert thread.daemon
    # Bound to 127.0.0.1 only: the port is not open on another local address.
    other = socket.gethostbyname(socket.gethostname())
    if not other.startswith("127."):
        with pytest.raises(OSError), socket.create_connection((other, listener.port), 1):
            pass


@pytest.mark.timeout(20)
def test_callback_is_served_and_returned(listener: LoopbackListener) -> None:
    url = listener.redirect_uri + "?code=abc&state=xyz&iss=https%3A%2F%2Fas.example.com"
    response = requests.get(url, timeout=5)
    assert response.status_code == 200
    assert "close this window" in response.text
    assert response.headers["Cache-Control"] == "no-store"
    assert listener.wait(5) == url


@pytest.mark.timeout(20)
def test_other_paths_are_404_and_only_one_callback_counts(listener: LoopbackListener) -> None:
    for path in ("/", "/favicon.ico", "/callbackx", "/other/callback"):
        assert requests.get(f"http://127.0.0.1:{listener.port}{path}?code=evil",
                            timeout=5).status_code == 404
    first = listener.redirect_uri + "?code=one&state=s"
    assert requests.get(first, timeout=5).status_code == 200
    second = requests.get(listener.redirect_uri + "?code=two&state=s", timeout=5)
    assert second.status_code == 400
    assert listener.wait(5) == first


@pytest.mark.timeout(20)
def test_wait_times_out() -> None:
    with LoopbackListener() as lst, pytest.raises(LoginTimeout) as info:
        lst.wait(0.2)
    assert info.value.step == "authorization"
    assert lst.redirect_uri in str(info.value)


@pytest.mark.timeout(20)
def test_close_joins_the_thread_even_with_an_idle_connection() -> None:
    before = set(callback_threads())
    lst = LoopbackListener()
    idle = socket.create_connection(("127.0.0.1", lst.port), 5)  # a browser pre-connection
    try:
        # The idle connection does not hold up the real redirect.
        assert requests.get(lst.redirect_uri + "?code=c", timeout=5).status_code == 200
        assert lst.wait(5).endswith("?code=c")
    finally:
        lst.close()
        idle.close()
    assert [t for t in callback_threads() if t not in before and t.is_alive()] == []
    lst.close()  # idempotent
    with pytest.raises(requests.ConnectionError):
        requests.get(lst.redirect_uri, timeout=2)


def test_a_taken_port_raises_oserror(listener: LoopbackListener) -> None:
    with pytest.raises(OSError):
        LoopbackListener(listener.port)


def test_a_fixed_port_can_be_reused_after_close() -> None:
    with LoopbackListener() as first:
        port = first.port
    with LoopbackListener(port) as again:
        assert again.redirect_uri == f"http://127.0.0.1:{port}/callback"


# ---- run_browser_login --------------------------------------------------------------------


@pytest.fixture
def no_browser(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``webbrowser.open`` that records its URL and reports that no browser started."""
    opened: list[str] = []

    def fake_open(url: str, *args: object, **kwargs: object) -> bool:
        opened.append(url)
        return False

    monkeypatch.setattr(webbrowser, "open", fake_open)
    return opened


def test_handler_is_used_alone(no_browser: list[str], listener: LoopbackListener) -> None:
    seen: list[str] = []

    def handler(url: str) -> str:
        seen.append(url)
        return "http://localhost:3000/callback?code=h&state=s"

    result = run_browser_login(AUTH_URL, redirect_uri=listener.redirect_uri, listener=listener,
                               authorization_handler=handler)
    assert result == "http://localhost:3000/callback?code=h&state=s"
    assert seen == [AUTH_URL]
    assert no_browser == []


@pytest.mark.timeout(20)
def test_browser_and_listener(monkeypatch: pytest.MonkeyPatch,
                              listener: LoopbackListener) -> None:
    """The 'browser' follows the redirect to the listener, as a real one would."""
    threads: list[threading.Thread] = []

    def fake_open(url: str, *args: object, **kwargs: object) -> bool:
        assert url == AUTH_URL
        t = threading.Thread(target=requests.get, name="test-browser",
                             args=(listener.redirect_uri + "?code=b&state=s",),
                             kwargs={"timeout": 5}, daemon=True)
        t.start()
        threads.append(t)
        return True

    monkeypatch.setattr(webbrowser, "open", fake_open)
    result = run_browser_login(AUTH_URL, redirect_uri=listener.redirect_uri, listener=listener,
                               authorization_handler=None, timeout=10)
    assert result == listener.redirect_uri + "?code=b&state=s"
    for t in threads:
        t.join(5)


def test_paste_from_stdin_when_no_browser_opens(no_browser: list[str],
                                                listener: LoopbackListener,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    pasted = listener.redirect_uri + "?code=p&state=s"
    monkeypatch.setattr(sys, "stdin", io.StringIO(f"  {pasted}  \n"))
    result = run_browser_login(AUTH_URL, redirect_uri=listener.redirect_uri, listener=listener,
                               authorization_handler=None)
    assert result == pasted
    assert no_browser == [AUTH_URL]
    err = capsys.readouterr().err
    assert AUTH_URL in err and listener.redirect_uri in err


def test_paste_when_the_browser_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(url: str, *args: object, **kwargs: object) -> bool:
        raise webbrowser.Error("could not locate runnable browser")

    monkeypatch.setattr(webbrowser, "open", broken)
    monkeypatch.setattr(sys, "stdin", io.StringIO("http://127.0.0.1:1/callback?code=x\n"))
    with LoopbackListener() as lst:
        result = run_browser_login(AUTH_URL, redirect_uri=lst.redirect_uri, listener=lst,
                                   authorization_handler=None)
    assert result == "http://127.0.0.1:1/callback?code=x"


def test_open_browser_false_skips_the_browser(no_browser: list[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("http://localhost:3000/callback?code=x\n"))
    result = run_browser_login(AUTH_URL, redirect_uri="http://localhost:3000/callback",
                               listener=None, authorization_handler=None, open_browser=False)
    assert result.endswith("code=x")
    assert no_browser == []


def test_nothing_pasted_and_no_listener(no_browser: list[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    with pytest.raises(LoginRequired):
        run_browser_login(AUTH_URL, redirect_uri="http://localhost:3000/callback",
                          listener=None, authorization_handler=None)


@pytest.mark.parametrize("url", [
    "http://as.example.com/authorize",
    "file:///etc/passwd",
    "javascript:alert(1)",
    "https:///no-host",
    "; rm -rf ~",
])
def test_only_https_or_loopback_http_is_opened(no_browser: list[str], url: str,
                                               listener: LoopbackListener) -> None:
    with pytest.raises(InsecureURL):
        run_browser_login(url, redirect_uri=listener.redirect_uri, listener=listener,
                          authorization_handler=None)
    assert no_browser == []


@pytest.mark.timeout(20)
def test_loopback_http_authorization_url_is_allowed(monkeypatch: pytest.MonkeyPatch,
                                                    listener: LoopbackListener) -> None:
    opened: list[str] = []

    def fake_open(url: str, *args: object, **kwargs: object) -> bool:
        opened.append(url)
        requests.get(listener.redirect_uri + "?code=l", timeout=5)
        return True

    monkeypatch.setattr(webbrowser, "open", fake_open)
    url = "http://127.0.0.1:9/authorize?x=1"
    assert run_browser_login(url, redirect_uri=listener.redirect_uri, listener=listener,
                             authorization_handler=None, timeout=5).endswith("code=l")
    assert opened == [url]


def test_a_login_waits_300_seconds_by_default() -> None:
    """The loopback login wait (the provider relies on these defaults)."""
    import inspect

    from mcpauth._loopback import DEFAULT_WAIT

    assert DEFAULT_WAIT == 300
    assert inspect.signature(run_browser_login).parameters["timeout"].default == 300
    assert inspect.signature(LoopbackListener.wait).parameters["timeout"].default == 300
