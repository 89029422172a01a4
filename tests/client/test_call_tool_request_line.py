"""``call_tool`` hands the session the tool's name while its params hold just ``name`` and
``arguments`` (in that order), and the session then writes the request line from the name
(``_serialize_tool_call``, or its copy in ``Session._request`` for a name seen before)
instead of ``serialize_request`` finding that shape out again: for every shape of call
(arguments or none, a ``dict`` subclass, ``meta``, a modern server's ``_meta``), the line
written is byte for byte what the general serialiser makes of the params meant, and the
name is handed over only when the params have that shape."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

import mcpsync
from mcpsync import jsonrpc

pytestmark = pytest.mark.timeout(60)

DEMO = [sys.executable, "-m", "mcpsync.demo"]


class _Arguments(dict):  # type: ignore[type-arg]
    """Arguments whose type is not ``dict``: the general way, in one piece."""


CALLS: list[tuple[str, dict[str, Any]]] = [
    ("echo", {"arguments": {"text": "hi"}}),
    ("echo", {"arguments": {"text": "é\n\u2028\"\\"}}),
    ("echo", {"arguments": _Arguments(text="a dict subclass")}),
    ("echo", {}),
    ("echo", {"arguments": {"text": "with meta"}, "meta": {"k": "v"}}),
    ("add", {"arguments": {"a": 1, "b": 2.5}}),
]


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_the_line_written_is_the_general_serialisers(era: str, no_leaks: None,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    kwargs: dict[str, Any] = {"era": era}
    if era == "modern":
        kwargs["protocol_version"] = "2026-07-28"
    with mcpsync.connect(DEMO, **kwargs) as client:
        session = client._session
        frames: list[bytes] = []
        send = session._send_until

        def spy_send(frame: bytes, deadline: float, ended: bool = False) -> None:
            # The line as the transport writes it (a tool call's comes with its newline).
            frames.append(frame if ended else frame + b"\n")
            send(frame, deadline, ended)

        tools: list[str] = []
        # What call_tool calls (positional, looked up on the class; see Session._request):
        # its last argument is the name handed over, or None.
        real = type(session)._request

        def spy_request(self: Any, method: str, params: Any, *rest: Any) -> Any:
            if method == "tools/call" and self is session and rest[-1] is not None:
                tools.append(rest[-1])
            return real(self, method, params, *rest)

        # A tool's own line (legacy, no meta) is written by the transport's exchange, which
        # also makes the first read: the line is taken there.
        exchange = session._exchange
        assert exchange is not None
        exchanged: list[bytes] = []

        def spy_exchange(line: bytes, call: Any, role: Any, timeout: float) -> Any:
            frames.append(line)
            exchanged.append(line)
            return exchange(line, call, role, timeout)

        monkeypatch.setattr(session, "_send_until", spy_send)
        monkeypatch.setattr(type(session), "_request", spy_request)
        monkeypatch.setattr(session, "_exchange", spy_exchange)
        for name, options in CALLS:
            frames.clear()
            tools.clear()
            client.call_tool(name, **options)
            assert len(frames) == 1
            sent = json.loads(frames[0])
            params = sent["params"]
            # What was meant to be sent: the test's own name and arguments; a legacy
            # server's _meta is the meta given, a modern one's is the client's (read back).
            meant: dict[str, Any] = {"name": name, "arguments": options.get("arguments") or {}}
            if era == "modern":
                meant["_meta"] = params["_meta"]
            elif "meta" in options:
                meant["_meta"] = options["meta"]
            assert frames[0] == jsonrpc.serialize(
                jsonrpc.request(sent["id"], "tools/call", meant)) + b"\n"
            plain = list(params) == ["name", "arguments"]
            assert plain == (era == "legacy" and "meta" not in options)
            # The name is handed over exactly when the params have that shape.
            assert tools == ([name] if plain else [])
        if era == "legacy":
            # A call that finds the reader role free (right after another, before the
            # background reader takes it back) writes its plain line by the exchange: the
            # spy above saw it there. (A loaded machine can let the reader take the role
            # first: then the call follows, and the next one tries again.)
            exchanged.clear()
            for _ in range(50):
                client.call_tool("echo", arguments={"text": "led"})
                if exchanged:
                    break
            assert exchanged and json.loads(exchanged[0])["params"] == {
                "name": "echo", "arguments": {"text": "led"}}


def test_a_mapping_the_encoder_refuses_fails_as_before(no_leaks: None) -> None:
    """A ``Mapping`` that is not JSON (a ``mappingproxy``) raises the encoder's TypeError
    before anything is sent, and the client stays usable."""
    import types

    with mcpsync.connect(DEMO, era="legacy") as client:
        with pytest.raises(TypeError, match="mappingproxy is not JSON serializable"):
            client.call_tool("echo", types.MappingProxyType({"text": "x"}))
        assert client.call_tool("echo", {"text": "after"}).text == "after"
