"""The pass-through writes a usual frame on before checking it: a host's call is written to
the upstream and then checked and entered in flight; an upstream's answer is taken out of the
table, written to the host and then checked. These tests cover what that order could break:
the shapes read from the bytes (``_heads``), lines whose start is well formed and whose rest
is not, an answer read before its call was entered, and a death between a call's write and
its entry."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from gateway.helpers_gw import ODD, RawHost, write_config
from mcpsync._envelope import decode_object
from mcpsync.gateway import _heads

pytestmark = pytest.mark.timeout(60)

INIT = ('{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":'
        '"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}')
INITIALIZED = '{"jsonrpc":"2.0","method":"notifications/initialized"}'


def _call(rid: str, name: str) -> str:
    return f'{{"jsonrpc":"2.0","id":{rid},"method":"tools/call","params":{{"name":"{name}"}}}}'


# ------------------------------------------------------------------------- the heads

@pytest.mark.parametrize(("line", "head"), [
    (b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{}}\n',
     (("int", 7), b"tools/call")),
    (b'{"jsonrpc":"2.0","id":0,"method":"ping"}\n', (("int", 0), b"ping")),
    (b'{"jsonrpc":"2.0","id":-3,"method":"ping"}\n', (("int", -3), b"ping")),
    (b'{"jsonrpc":"2.0","id":"a,b","method":"ping"}\n', (("str", "a,b"), b"ping")),
    (b'{"method":"tools/call","params":{"name":"x"},"jsonrpc":"2.0","id":12}\n',
     (("int", 12), b"tools/call")),
    (b'{"method":"tools/call","params":{},"jsonrpc":"2.0","id":"q"}\n',
     (("str", "q"), b"tools/call")),
    # Not read from the bytes: the line is checked before it goes on.
    (b'{"jsonrpc":"2.0","id":07,"method":"ping"}\n', None),            # not JSON
    (b'{"jsonrpc":"2.0","id":"a\\"b","method":"ping"}\n', None),       # an escape
    (b'{"jsonrpc":"2.0","id":1,"method":"a\\u0062"}\n', None),         # an escape
    (b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}\n', None),
    (b'{"jsonrpc":"2.0","id":null,"method":"ping"}\n', None),
    (b'{"jsonrpc":"2.0","method":"notifications/x"}\n', None),
    (b'{"id":1,"jsonrpc":"2.0","method":"ping"}\n', None),
    (b'{"jsonrpc":"2.0","id":1,"result":{}}\n', None),
])
def test_call_heads(line: bytes, head: Any) -> None:
    assert _heads.call_head(line) == head


@pytest.mark.parametrize(("line", "key"), [
    (b'{"jsonrpc":"2.0","id":2,"result":{"content":[]}}\n', ("int", 2)),
    (b'{"jsonrpc":"2.0","id":-1,"error":{"code":1,"message":"m"}}\n', ("int", -1)),
    (b'{"jsonrpc":"2.0","id":"s","result":1}\n', ("str", "s")),
    (b'{"result":{"content":[]},"jsonrpc":"2.0","id":3}\n', ("int", 3)),
    (bytearray(b'{"result":{},"jsonrpc":"2.0","id":"x"}\n'), ("str", "x")),
    (b'{"jsonrpc":"2.0","id":null,"error":{"code":1,"message":"m"}}\n', None),
    (b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n', None),
    (b'{"result":{},"jsonrpc":"2.0","id":1} \n', None),
])
def test_answer_heads(line: bytes, key: Any) -> None:
    assert _heads.answer_head(line) == key


_IDS = st.one_of(st.integers(-10**30, 10**30), st.text(max_size=12))
_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                       lambda inner: st.lists(inner, max_size=3)
                       | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                       max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(rid=_IDS, method=st.text(min_size=1, max_size=12), params=_VALUES,
       tail=st.booleans(), ascii=st.booleans())
def test_a_call_head_is_what_the_parser_reads(rid: Any, method: str, params: Any, tail: bool,
                                              ascii: bool) -> None:
    """Whatever the head reads from a frame a peer could write is what JSON parsing gives;
    and the usual frames are read."""
    frame = ({"method": method, "params": params, "jsonrpc": "2.0", "id": rid} if tail
             else {"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
    line = json.dumps(frame, separators=(",", ":"), ensure_ascii=ascii).encode() + b"\n"
    head = _heads.call_head(line)
    obj = decode_object(line[:-1])
    assert obj is not None
    if head is not None:
        key, raw_method = head
        assert key == ("int" if isinstance(rid, int) else "str", obj["id"])
        assert raw_method.decode() == obj["method"]
    elif line.isascii() and '"' not in method and "\\" not in json.dumps(rid) + \
            json.dumps(method) and (isinstance(rid, str) or abs(rid) < 10**30):
        pytest.fail(f"a usual frame was not read: {line!r}")


@settings(max_examples=300, deadline=None)
@given(rid=_IDS, result=_VALUES, error=st.booleans(), tail=st.booleans(),
       cut=st.integers(0, 200), junk=st.sampled_from(["]", "}", ",", "x", '"']))
def test_an_answer_head_never_reads_another_id(rid: Any, result: Any, error: bool, tail: bool,
                                               cut: int, junk: str) -> None:
    """Valid or spoiled (a byte changed inside), when the head reads an id and the line
    still parses, the parser gives that id."""
    member = ("error", {"code": 1, "message": "m", "data": result}) if error else \
        ("result", result)
    frame = dict([member, ("jsonrpc", "2.0"), ("id", rid)]) if tail else \
        dict([("jsonrpc", "2.0"), ("id", rid), member])
    text = json.dumps(frame, separators=(",", ":"))
    if cut:
        at = cut % len(text)
        text = text[:at] + junk + text[at + 1:]
    line = text.encode() + b"\n"
    key = _heads.answer_head(line)
    obj = decode_object(line[:-1])
    if key is not None and obj is not None and ("result" in obj or "error" in obj):
        assert key == ("int" if type(obj.get("id")) is int else "str", obj.get("id"))


# ------------------------------------------------------------------- through the command

@pytest.fixture
def host(tmp_path: Path) -> Iterator[RawHost]:
    host = RawHost(write_config(tmp_path, {"odd": ODD}))
    try:
        host.call(INIT)
        host.send(INITIALIZED)
        assert host.call('{"jsonrpc":"2.0","id":"p","method":"ping"}')["result"] == {}
        yield host
    finally:
        if host.proc.poll() is None:
            assert host.close() == 0


def _errors_after_death(host: RawHost, n: int) -> list[Any]:
    """Kill the upstream with a call; the ids of the ``n`` errors the host then gets."""
    host.send(_call('"die"', "die"))
    got = [json.loads(host.recv()) for _ in range(n)]
    for m in got:
        assert "upstream 'odd' stopped" in m["error"]["message"]
    return sorted(map(str, (m["id"] for m in got)))


def test_a_call_of_the_typescript_shape_is_written_and_tracked(host: RawHost) -> None:
    """``{"method":...,"jsonrpc":"2.0","id":N}``: the TypeScript SDK's key order. The call
    is entered in flight (its upstream's death fails it) like one of the other order."""
    host.send('{"method":"tools/call","params":{"name":"later"},"jsonrpc":"2.0","id":21}')
    time.sleep(0.3)   # a read of its own, and entered before the death
    host.send(_call("22", "later"))
    time.sleep(0.3)
    assert _errors_after_death(host, 3) == ["21", "22", "die"]


def test_a_host_line_with_a_good_start_and_a_broken_rest_reaches_the_upstream(
        host: RawHost) -> None:
    """Written before its check: the upstream has the line and answers the parse error
    (once: the gateway adds none of its own); the gateway's log says what happened; the
    line is not a call in flight (a death fails only the real one)."""
    host.send('{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{]}')
    got = json.loads(host.recv())
    assert got["id"] is None and got["error"]["code"] == -32700
    assert "odd-peer" in got["error"]["message"]   # the upstream's, not the gateway's
    assert host.call(_call("10", "odd"))["id"] == 10   # nothing else came meanwhile
    assert _errors_after_death(host, 1) == ["die"]
    host.close()
    assert b"not that valid JSON-RPC request" in b"".join(host.stderr)


def test_a_call_naming_its_id_twice_is_answered_by_the_last_and_not_tracked(
        host: RawHost) -> None:
    host.send('{"jsonrpc":"2.0","id":30,"method":"tools/call","params":{"name":"later"},'
              '"id":31}')
    time.sleep(0.3)   # a read of its own (a read of several lines is checked first)
    host.send(_call("32", "flush"))
    got = [json.loads(host.recv()) for _ in range(3)]   # the held answer, a note, the flush
    assert [m.get("id") for m in got] == [31, None, 32]
    assert _errors_after_death(host, 1) == ["die"]
    host.close()
    assert b"not that valid JSON-RPC request" in b"".join(host.stderr)


def test_an_answer_with_a_good_start_and_a_broken_rest_is_forwarded_and_stays_in_flight(
        host: RawHost) -> None:
    """The host has the line as the upstream wrote it (it was written before the check);
    the check puts the call back in flight, so the upstream's death still fails it."""
    host.send(_call("40", "broken"))
    assert host.recv() == b'{"jsonrpc":"2.0","id":40,"result":{"content":]}}'
    assert host.call(_call("41", "odd"))["id"] == 41
    assert _errors_after_death(host, 2) == ["40", "die"]
    host.close()
    assert b"not a valid JSON-RPC answer for it" in b"".join(host.stderr)


# ---------------------------------------------------------------- the races, in process

@contextmanager
def _gateway_on_pipes(tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    """A Gateway serving on pipes in this process: ``(send(line), recv() -> dict)``."""
    import mcpsync

    host_r, to_gw = os.pipe()
    from_gw, host_w = os.pipe()
    with mcpsync.Gateway(write_config(tmp_path, {"odd": ODD})) as gw, \
            os.fdopen(host_r, "rb", buffering=0) as stdin, \
            os.fdopen(host_w, "wb", buffering=0) as stdout, \
            os.fdopen(to_gw, "wb", buffering=0) as writer, \
            os.fdopen(from_gw, "rb") as reader:
        server = threading.Thread(target=gw.serve_stdio, args=(stdin, stdout),
                                  name="mcpsync-test-gateway", daemon=True)
        server.start()

        def send(line: str) -> None:
            writer.write(line.encode() + b"\n")

        def recv() -> dict[str, Any]:
            line = reader.readline()
            assert line, "the gateway closed its output"
            return json.loads(line)  # type: ignore[no-any-return]

        try:
            send(INIT)
            assert recv()["id"] == 0
            send(INITIALIZED)
            yield send, recv
        finally:
            writer.close()
            server.join(15)
            assert not server.is_alive()


def test_an_answer_read_before_its_call_was_entered_is_not_failed_later(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The host's thread is held between a call's write and its entry: the answer comes
    first (the table has nothing to take out, so the answer is remembered), then the entry
    finds it and is not made: the death that follows fails only the calls still waiting.
    The call written just before that death, and entered after it, is failed by the entry
    itself: once, with the same message."""
    from mcpsync.gateway._gateway import Gateway

    real = Gateway._after_call_sent
    held = threading.Event()

    def slow(self: Gateway, *args: Any) -> None:
        held.wait(0.5)   # the answer (or the death) comes meanwhile
        real(self, *args)

    monkeypatch.setattr(Gateway, "_after_call_sent", slow)
    with _gateway_on_pipes(tmp_path) as (send, recv):
        send(_call("1", "odd"))
        assert recv()["id"] == 1                       # answered while not yet entered
        send(_call("2", "die"))                        # dies while not yet entered
        failed = recv()
        assert failed["id"] == 2 and "upstream 'odd' stopped" in failed["error"]["message"]
        held.set()
        send(_call("3", "odd"))                        # restarted; 1 was not failed
        assert recv()["id"] == 3
        monkeypatch.setattr(Gateway, "_after_call_sent", real)
        send(_call("4", "later"))
        send(_call("5", "die"))
        ids = sorted(recv()["id"] for _ in range(2))
        assert ids == [4, 5]                           # no late error for 1, 2 or 3


def test_the_early_answers_are_bounded_and_expire() -> None:
    """An answer to a call never made (a broken server) is remembered only for a while and
    only so many: it cannot keep a later call of that id out of the table for long."""
    from mcpsync.config import ServerConfig
    from mcpsync.gateway import _upstream

    def nothing(*args: Any) -> None:
        pass

    upstream = _upstream.Upstream(ServerConfig(id="u", command="true"), on_line=nothing,
                                  on_down=nothing, on_refused=nothing, on_failed=nothing)
    assert upstream.answered(("int", 1)) is None
    assert upstream.enter_sent(("int", 1), b"{}", upstream._deaths)   # answered: not entered
    assert ("int", 1) not in upstream._inflight
    assert upstream.enter_sent(("int", 1), b"{}", upstream._deaths)   # a new call: entered
    assert ("int", 1) in upstream._inflight
    assert not upstream.enter_sent(("int", 2), b"{}", upstream._deaths - 1)   # died since
    assert ("int", 2) not in upstream._inflight
    upstream._early[("int", 3)] = time.monotonic() - _upstream.EARLY_WINDOW - 1
    assert upstream.enter_sent(("int", 3), b"{}", upstream._deaths)   # too old: entered
    assert ("int", 3) in upstream._inflight
    for i in range(_upstream.MAX_INFLIGHT + 5):
        upstream.answered(("str", str(i)))
    assert len(upstream._early) <= _upstream.MAX_INFLIGHT
