"""A tool call's request line is serialised with its newline and handed to the transport
as a whole line (``ended``) only where the transport's ``send_bytes_until`` is marked as
taking one (``transport.base.takes_lines``); a transport whose ``send_bytes_until`` takes
frames (its own, a subclass's override, or none at all) gets the frame without its newline,
as before."""

from __future__ import annotations

from typing import Any

import pytest

from mcpsync import jsonrpc
from mcpsync.errors import RemoteError
from mcpsync.session import Session
from mcpsync.transport.base import takes_lines
from mcpsync.transport.stdio import StdioTransport

from .helpers import peer_argv

pytestmark = pytest.mark.timeout(60)


class FramesOnly:
    """A stdio transport seen through a ``send_bytes_until(frame, deadline)`` that takes
    frames without their newline (a transport of someone else's, say)."""

    def __init__(self, inner: StdioTransport) -> None:
        self._inner = inner
        self.frames: list[bytes] = []

    def send_bytes_until(self, frame: bytes, deadline: float) -> None:
        self.frames.append(frame)
        self._inner.send_bytes_until(frame, deadline)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class FramesOnlyStdio(StdioTransport):
    """A subclass of the stdio transport whose override of ``send_bytes_until`` takes frames
    only (two arguments): the mark is on the stdio transport's own method, not inherited by
    the override, so the session must not hand it a third argument."""

    frames: list[bytes]

    def send_bytes_until(self, frame: bytes, deadline: float) -> None:  # type: ignore[override]
        self.frames.append(frame)
        super().send_bytes_until(frame, deadline)


class FramesOnlyBytes:
    """A transport with ``send_bytes`` and no ``send_bytes_until`` at all (as the in-memory
    and HTTP transports are), seen through the stdio transport it wraps."""

    def __init__(self, inner: StdioTransport) -> None:
        self._inner = inner
        self.frames: list[bytes] = []

    def send_bytes(self, frame: bytes) -> None:
        self.frames.append(frame)
        self._inner.send_bytes(frame)

    def __getattr__(self, name: str) -> Any:
        if name == "send_bytes_until":
            raise AttributeError(name)
        return getattr(self._inner, name)


PARAMS = {"name": "echo", "arguments": {"text": "hi"}}


def _call(session: Session) -> Any:
    # The peer answers tools/call, a method it does not know, with an error: an answer all
    # the same, so the line it read was whole.
    with pytest.raises(RemoteError):
        session._request("tools/call", dict(PARAMS), 5.0, None, None, True, "echo")


def test_a_frames_only_transport_gets_the_tool_call_without_its_newline(
        no_leaks: None) -> None:
    inner = StdioTransport(peer_argv(), name="peer")
    inner.start()
    transport = FramesOnly(inner)
    session = Session(transport, name="peer")  # type: ignore[arg-type]
    session.start()
    try:
        for _ in range(3):   # each call's frame goes through the wrapper's write
            _call(session)
        assert session.request("echo", {"n": 1}) == {"n": 1}
        assert len(transport.frames) == 4
        for frame in transport.frames[:3]:
            rid = jsonrpc.parse(frame).id.value  # type: ignore[union-attr]
            assert frame == jsonrpc.serialize_request(rid, "tools/call", PARAMS)
        assert not any(frame.endswith(b"\n") for frame in transport.frames)
    finally:
        session.close()


def test_a_line_taking_transport_gets_the_whole_line(no_leaks: None,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    inner = StdioTransport(peer_argv(), name="peer")
    inner.start()
    written: list[tuple[bytes, bool]] = []
    send = inner.send_bytes_until

    def spy(frame: bytes, deadline: float, ended: bool = False) -> None:
        written.append((frame, ended))
        send(frame, deadline, ended)

    monkeypatch.setattr(inner, "send_bytes_until", takes_lines(spy))
    session = Session(inner, name="peer")
    session.start()
    try:
        for _ in range(3):
            _call(session)
        assert session.request("echo", {"n": 1}) == {"n": 1}
        tool_calls = [(f, e) for f, e in written if b'"tools/call"' in f]
        assert len(tool_calls) == 3
        # No background reader holds the role (none is started while one caller at a time
        # uses a stdio session), so every call claims it and writes the whole line.
        assert [ended for _, ended in tool_calls] == [True, True, True]
        for frame, ended in tool_calls:
            line = frame if ended else frame + b"\n"
            assert line.endswith(b"}\n") and line.count(b"\n") == 1
            rid = jsonrpc.parse(line[:-1]).id.value  # type: ignore[union-attr]
            assert line == jsonrpc.serialize_request(rid, "tools/call", PARAMS) + b"\n"
        assert [e for f, e in written if b'"echo"' in f and b"tools" not in f] == [False]
    finally:
        session.close()


def _frames_only_check(frames: list[bytes]) -> None:
    tool_calls = [f for f in frames if b'"tools/call"' in f]
    assert len(tool_calls) == 3
    for frame in tool_calls:
        rid = jsonrpc.parse(frame).id.value  # type: ignore[union-attr]
        assert frame == jsonrpc.serialize_request(rid, "tools/call", PARAMS)
    assert frames and not any(frame.endswith(b"\n") for frame in frames)


def test_a_subclass_whose_override_takes_frames_gets_frames(no_leaks: None) -> None:
    transport = FramesOnlyStdio(peer_argv(), name="peer")
    transport.frames = []
    transport.start()
    session = Session(transport, name="peer")
    session.start()
    try:
        for _ in range(3):
            _call(session)   # a third argument would raise TypeError here
        assert session.request("echo", {"n": 1}) == {"n": 1}
        _frames_only_check(transport.frames)
    finally:
        session.close()


def test_a_transport_without_send_bytes_until_gets_frames(no_leaks: None) -> None:
    inner = StdioTransport(peer_argv(), name="peer")
    inner.start()
    transport = FramesOnlyBytes(inner)
    session = Session(transport, name="peer")  # type: ignore[arg-type]
    session.start()
    try:
        for _ in range(3):
            _call(session)
        assert session.request("echo", {"n": 1}) == {"n": 1}
        _frames_only_check(transport.frames)
    finally:
        session.close()


def test_the_stdio_transport_s_own_method_carries_the_mark() -> None:
    assert getattr(StdioTransport.send_bytes_until, "send_takes_lines", False) is True
    assert not hasattr(FramesOnlyStdio.send_bytes_until, "send_takes_lines")
