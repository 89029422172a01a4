"""A URL nobody listens on: ``ConnectFailed`` with the URL, a plain reason and a hint.

Against a real loopback port that was free a moment ago (and a real server stopped
mid-run): the error says the connection was never made, names the URL, hides urllib3's
wording and our private class names, and says nothing was sent (``maybe_executed=False``).
"""

from __future__ import annotations

import pickle
import socket
import time

import pytest
from http_peers.fault_server import FaultServer

import mcpsync
from mcpsync import ConnectFailed, ConnectionLost

pytestmark = pytest.mark.timeout(30)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_connection_refused_raises_connect_failed() -> None:
    url = f"http://127.0.0.1:{_free_port()}/mcp"
    start = time.monotonic()
    with pytest.raises(ConnectFailed) as caught:
        mcpsync.connect(url, timeout=5)
    elapsed = time.monotonic() - start
    error = caught.value
    message = str(error)
    assert f"could not connect to {url} (connection refused); is the server running " \
           "there?" in message, message
    for leak in ("_Tracked", "Max retries", "NewConnectionError", "urllib3"):
        assert leak not in message, message
    assert isinstance(error, ConnectionLost)
    assert error.url == url and error.maybe_executed is False
    assert error.server == "127.0.0.1"
    assert error.__cause__ is None and error.__suppress_context__
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is ConnectFailed and again.url == url and str(again) == message
    assert elapsed < 3, f"took {elapsed:.2f} s"   # the probe's one retry after 0.5 s


def test_the_url_in_the_error_has_no_credentials() -> None:
    port = _free_port()
    with pytest.raises(ConnectFailed) as caught:
        mcpsync.connect(f"http://user:secret@127.0.0.1:{port}/mcp?token=abc", timeout=5)
    assert "secret" not in str(caught.value) and "abc" not in str(caught.value)
    assert caught.value.url == f"http://127.0.0.1:{port}/mcp"


def test_a_server_gone_mid_run_fails_calls_with_connect_failed() -> None:
    """Once the server is gone (its port closed), a tool call that cannot reach it was not
    executed: ConnectFailed, not a ConnectionLost that may have run the tool."""
    server = FaultServer()
    server.faults.era = "modern"
    try:
        client = mcpsync.connect(server.url, timeout=5)
    except BaseException:
        server.close()
        raise
    with client:
        assert client.call_tool("echo", {"text": "up"}).text == "up"
        server.close()
        with pytest.raises(ConnectionLost) as caught:
            client.call_tool("echo", {"text": "down"})
        if isinstance(caught.value, ConnectFailed):
            assert caught.value.maybe_executed is False
            assert "connection refused" in str(caught.value)
        else:   # a pooled keep-alive socket the server closed: the request may have left
            assert caught.value.maybe_executed is True
        with pytest.raises(ConnectFailed, match="connection refused"):
            client.call_tool("echo", {"text": "still down"})


def test_a_forced_http_sse_transport_says_connect_failed_too() -> None:
    url = f"http://127.0.0.1:{_free_port()}/sse"
    with pytest.raises(ConnectFailed) as caught:
        mcpsync.connect(url, transport="sse", timeout=5)
    message = str(caught.value)
    assert "(connection refused); is the server running there?" in message, message
    for leak in ("_Tracked", "Max retries", "NewConnectionError", "urllib3"):
        assert leak not in message, message
    assert caught.value.url == url and caught.value.maybe_executed is False


def test_http_sse_errors_show_no_user_info_or_query(fault_server: FaultServer) -> None:
    fault_server.faults.era = "legacy"
    fault_server.faults.get_stream = False   # GET answered 405: not an event stream
    port = fault_server.origin.rsplit(":", 1)[1]
    url = f"http://user:pw-secret@127.0.0.1:{port}/mcp?token=tok-secret"
    with pytest.raises(mcpsync.MCPError) as caught:
        mcpsync.connect(url, transport="sse", timeout=5)
    message = str(caught.value)
    assert "GET http://127.0.0.1" in message, message
    assert "pw-secret" not in message and "tok-secret" not in message, message
