"""A legacy tool call that leads writes its line and makes its first read in one transport
call (``StdioTransport.exchange``). What goes wrong there ends as it does on the two-call
path: a read that fails with an unexpected error (a bug) loses the connection with the error
logged, and the call is not treated as one whose sending was interrupted. And a session
takes the exchange only from a transport whose write and read are the stdio transport's own
(a wrapper or an override keeps the two calls: tests/session/test_session_line_write.py)."""

from __future__ import annotations

import logging
import sys
from typing import Any

import pytest
from helpers import assert_nothing_held

import mcpsync
from mcpsync.transport.stdio import StdioTransport

pytestmark = pytest.mark.timeout(60)

DEMO = [sys.executable, "-m", "mcpsync.demo"]


def test_the_exchange_is_taken_for_the_stdio_transports_own_methods(no_leaks: None) -> None:
    with mcpsync.connect(DEMO, timeout=30, era="legacy") as client:
        session = client._session
        transport = session._transport
        assert type(transport) is StdioTransport
        assert session._exchange is not None
        assert session._exchange.__func__ is StdioTransport.exchange  # type: ignore[attr-defined]
        taken: list[bytes] = []
        exchange = session._exchange

        def spy(line: bytes, call: Any, role: Any, timeout: float) -> Any:
            got = exchange(line, call, role, timeout)
            taken.append(line)
            return got

        session._exchange = spy
        for n in range(50):   # a call that finds the role free leads and exchanges
            assert client.call_tool("echo", {"text": str(n)}).text == str(n)
            if taken:
                break
        assert taken


def test_a_read_that_fails_with_a_bug_in_the_exchange_loses_the_connection(
        no_leaks: None, caplog: pytest.LogCaptureFixture) -> None:
    with mcpsync.connect(DEMO, timeout=30, era="legacy") as client:
        session = client._session
        transport = session._transport
        read_into = transport._read_into
        broke: list[bool] = []

        def bad_read(buffer: bytearray) -> int | None:
            if sys._getframe(1).f_code is StdioTransport.exchange.__code__:
                broke.append(True)
                raise RuntimeError("a bug in the read")
            return read_into(buffer)  # type: ignore[no-any-return]

        transport._read_into = bad_read
        with caplog.at_level(logging.ERROR, logger="mcpsync"):
            for n in range(50):
                try:
                    assert client.call_tool("echo", {"text": str(n)}).text == str(n)
                except mcpsync.ConnectionLost as exc:
                    assert broke
                    assert "a bug in the read" in str(exc)
                    assert not isinstance(exc, mcpsync.Cancelled)
                    break
            else:
                pytest.fail("no call led (the exchange was never taken)")
        assert any("reading failed" in r.getMessage() for r in caplog.records)
        assert any(r.exc_info and isinstance(r.exc_info[1], RuntimeError)
                   for r in caplog.records)
        assert session.lost is not None
        assert not transport._rx_lock.locked() and not transport._write_lock.locked()
        assert not session._pending
        with pytest.raises(mcpsync.ConnectionLost):
            client.call_tool("echo", {"text": "after"})


def test_ctrl_c_free_after_the_exchange(no_leaks: None) -> None:
    """The calls after an exchange that answered leave nothing held (the role given back
    by the lead's own give-back, the one written in the session)."""
    with mcpsync.connect(DEMO, timeout=30, era="legacy") as client:
        for n in range(20):
            assert client.call_tool("echo", {"text": str(n)}).text == str(n)
        assert_nothing_held(client._session, "after the calls")
