"""The pass-through's fast path: reads of several lines, lines split over reads, frames that
must take the full path in the middle of a read, and an upstream dying with fast-path calls
in flight. The host is raw bytes on the gateway command's pipes; the upstream is the odd peer,
whose ``later``/``flush`` tools make it write several answers (and a notification) in one
write, so the gateway reads them together. The tests on the command run twice: the gateway
checking each frame with msgspec, and with the standard library's scanner alone (the two
that run a ``Gateway`` in this process use whichever is installed)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gateway.helpers_gw import ODD, RawHost, child_pids, write_config

pytestmark = pytest.mark.timeout(60)

INIT = ('{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":'
        '"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}')
INITIALIZED = '{"jsonrpc":"2.0","method":"notifications/initialized"}'


def _call(rid: str, name: str) -> str:
    return f'{{"jsonrpc":"2.0","id":{rid},"method":"tools/call","params":{{"name":"{name}"}}}}'


def _write(host: RawHost, *lines: str) -> None:
    """All ``lines`` in one write, so the gateway reads them at once."""
    assert host.proc.stdin is not None
    host.proc.stdin.write("".join(line + "\n" for line in lines).encode())
    host.proc.stdin.flush()


def _recv(host: RawHost, n: int) -> list[dict[str, Any]]:
    return [json.loads(host.recv()) for _ in range(n)]


def _recv_after(host: RawHost, line: str, n: int) -> list[dict[str, Any]]:
    host.send(line)
    return _recv(host, n)


@pytest.fixture(params=["msgspec", "stdlib"])
def stdlib_check(request: pytest.FixtureRequest) -> bool:
    """Each test twice: the gateway checking frames with msgspec (installed with the test
    extras), and with the standard library's scanner (msgspec made unimportable)."""
    return bool(request.param == "stdlib")


@pytest.fixture
def host(tmp_path: Path, stdlib_check: bool) -> Any:
    host = RawHost(write_config(tmp_path, {"odd": ODD}), "--log", str(tmp_path / "log.jsonl"),
                   stdlib_check=stdlib_check)
    try:
        host.call(INIT)
        host.send(INITIALIZED)
        # Answered only once the notification was read: the test's lines are a read of
        # their own.
        assert host.call('{"jsonrpc":"2.0","id":"p","method":"ping"}')["result"] == {}
        yield host
    finally:
        if host.proc.poll() is None:
            assert host.close() == 0


def test_several_requests_in_one_read_and_several_answers_in_one_read(
        host: RawHost, tmp_path: Path) -> None:
    _write(host, _call("1", "later"), _call('"two"', "later"), _call("3", "later"),
           _call("4", "flush"))
    got = _recv(host, 5)
    # The upstream wrote its four answers and a notification in one write; each reaches
    # the host once, in the order written, the notification in its place.
    assert [m.get("id") for m in got] == [1, None, "two", 3, 4]
    assert got[1]["method"] == "notifications/message"
    assert [m["result"].get("held") for m in (got[0], got[2], got[3])] == [0, 1, 2]
    assert got[4]["result"] == {"flushed": 3}
    # The calls were entered in flight on the way in: the answers are matched (a second
    # flush has nothing held), and the log has both legs of every frame.
    note, again = _recv_after(host, _call("5", "flush"), 2)
    assert note["method"] == "notifications/message" and again["result"] == {"flushed": 0}
    assert host.close() == 0
    records = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    legs = [(r["dir"], r.get("id")) for r in records]
    for rid in (1, "two", 3, 4):
        assert legs.count(("host->gateway", rid)) == 1
        assert legs.count(("gateway->upstream", rid)) == 1
        assert legs.count(("upstream->gateway", rid)) == 1
        assert legs.count(("gateway->host", rid)) == 1


def test_a_line_split_over_two_reads(host: RawHost) -> None:
    line = _call("7", "odd").encode() + b"\n"
    assert host.proc.stdin is not None
    host.proc.stdin.write(line[:20])
    host.proc.stdin.flush()
    time.sleep(0.2)   # the gateway reads the first part alone
    host.proc.stdin.write(line[20:] + _call("8", "odd").encode()[:10])
    host.proc.stdin.flush()
    time.sleep(0.2)
    host.proc.stdin.write(_call("8", "odd").encode()[10:] + b"\n")
    host.proc.stdin.flush()
    got = _recv(host, 2)
    assert [m["id"] for m in got] == [7, 8]
    assert got[0]["result"]["z"] == 1.5


def test_frames_of_the_full_path_in_the_middle_of_a_read(host: RawHost) -> None:
    """A notification, a line that is not JSON, a blank line, a request with an id of
    another type and an answer-less frame among requests of one read: each is handled as
    alone, in order."""
    _write(host, _call("1", "later"),
           '{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":99}}',
           "{not json", "", _call("[2]", "later"), " " + _call("3", "later"), _call("4", "flush"))
    got = _recv(host, 6)
    # The parse error at once; then the flush's write: 1, its notification, [2], 3, 4.
    assert [m.get("id", "note") for m in got] == [None, 1, "note", [2], 3, 4]
    bad = [m for m in got if "error" in m]
    assert len(bad) == 1 and bad[0]["id"] is None and bad[0]["error"]["code"] == -32700
    answered = [m.get("id") for m in got if "result" in m]
    assert answered == [1, [2], 3, 4]
    assert got[-1]["result"] == {"flushed": 3}


def test_death_with_fast_path_calls_in_flight_fails_each_and_replays_the_handshake(
        tmp_path: Path, stdlib_check: bool) -> None:
    host = RawHost(write_config(tmp_path, {"odd": ODD}), stdlib_check=stdlib_check)
    try:
        # The handshake in one read with calls: initialize takes the full path (kept for
        # the replay), the calls the fast one.
        _write(host, INIT, INITIALIZED, _call("1", "odd"))
        first = _recv(host, 2)
        assert [m["id"] for m in first] == [0, 1]
        [pid] = child_pids(host.proc.pid)
        _write(host, _call('"a\\u0031"', "later"), _call("2", "later"), _call("3", "die"))
        raw = [host.recv() for _ in range(3)]
        failed = [json.loads(line) for line in raw]
        assert sorted(map(str, (m["id"] for m in failed))) == ["2", "3", "a1"]
        for m in failed:
            assert m["error"]["data"] == {"upstream": "odd"}
            assert "upstream 'odd' stopped" in m["error"]["message"]
        # The string id comes back as the host spelled it.
        assert any(line.startswith(b'{"jsonrpc":"2.0","id":"a\\u0031",') for line in raw)
        # The next call restarts the server with the host's initialize replayed (its answer
        # is not passed on), and is answered.
        again = host.call(_call("4", "odd"))
        assert again["id"] == 4 and again["result"]["z"] == 1.5
        [second] = child_pids(host.proc.pid)
        assert second != pid
    finally:
        assert host.close() == 0
    assert b"restarted" in b"".join(host.stderr)


def test_an_answer_split_over_two_reads_of_the_upstream(host: RawHost) -> None:
    """The upstream writes one answer in two parts: the first read holds no whole line, so
    the reader's loop leaves both to the transport's line splitter; the next single-line
    answer takes the loop's own way again."""
    got = host.call(_call("1", "split"))
    assert got == {"jsonrpc": "2.0", "id": 1, "result": {"content": [], "split": 1}}
    assert host.call(_call("2", "odd"))["result"]["z"] == 1.5


def test_a_read_of_the_upstream_mixing_answers_and_a_notification_keeps_their_order(
        host: RawHost) -> None:
    """One read of the upstream's: two answers, a notification between them, the flush's
    own answer; then single-line reads again, each by the loop's own way."""
    for rid in ("10", "11"):
        host.send(_call(rid, "later"))
    got = _recv_after(host, _call("12", "flush"), 4)
    assert [m.get("id", "note") for m in got] == [10, "note", 11, 12]
    assert [host.call(_call(str(i), "odd"))["id"] for i in (13, 14)] == [13, 14]


def test_an_over_long_line_from_the_upstream_breaks_its_stream_naming_it(
        tmp_path: Path) -> None:
    """A line past ``max_frame_bytes`` from the upstream: the call in flight is failed with
    the reason, naming the upstream; the next call restarts it."""
    import os
    import threading

    import mcpsync

    host_w_r, host_w_w = os.pipe()
    host_r_r, host_r_w = os.pipe()
    with mcpsync.Gateway(write_config(tmp_path, {"odd": ODD}), max_frame_bytes=2000) as gw, \
            os.fdopen(host_w_r, "rb") as stdin, os.fdopen(host_r_w, "wb") as stdout, \
            os.fdopen(host_w_w, "wb") as to_gw, os.fdopen(host_r_r, "rb") as from_gw:
        server = threading.Thread(target=gw.serve_stdio, args=(stdin, stdout),
                                  name="mcpsync-test-gateway", daemon=True)
        server.start()

        def call(line: str) -> dict[str, Any]:
            to_gw.write(line.encode() + b"\n")
            to_gw.flush()
            return json.loads(from_gw.readline())   # type: ignore[no-any-return]

        assert call(INIT)["id"] == 0
        to_gw.write(INITIALIZED.encode() + b"\n")
        small = call('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"big",'
                     '"arguments":{"size":1500}}}')
        assert len(small["result"]["pad"]) == 1500   # under the limit: passed on
        big = call('{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"big",'
                   '"arguments":{"size":5000}}}')
        assert big["id"] == 2 and big["error"]["data"] == {"upstream": "odd"}
        message = big["error"]["message"]
        assert "upstream 'odd' stopped" in message and "frame limit of 2000 bytes" in message
        assert call(_call("3", "odd"))["result"]["z"] == 1.5   # restarted
        to_gw.close()
        server.join(15)
        assert not server.is_alive()


def test_death_with_a_grandchild_holding_stdout_fails_fast_path_calls_at_once(
        tmp_path: Path, stdlib_check: bool) -> None:
    """The server exits while a child it left holds its stdout open (no EOF for 30 s): the
    reader's loop wakes on the process's exit and the calls in flight are failed at once."""
    host = RawHost(write_config(tmp_path, {"odd": ODD}), stdlib_check=stdlib_check)
    try:
        host.call(INIT)
        host.send(INITIALIZED)
        assert host.call(_call("1", "odd"))["id"] == 1
        host.send(_call("2", "later"))
        started = time.monotonic()
        host.send(_call("3", "orphan"))
        failed = _recv(host, 2)
        took = time.monotonic() - started
        assert sorted(m["id"] for m in failed) == [2, 3]
        for m in failed:
            assert "upstream 'odd' stopped" in m["error"]["message"]
            assert "exited with code 4" in m["error"]["message"]
        assert took < 10, took   # not the 30 s until the grandchild lets stdout go
        assert host.call(_call("4", "odd"))["result"]["z"] == 1.5   # restarted
    finally:
        assert host.close() == 0


def test_a_host_read_larger_than_a_pipe_takes_whole_is_still_written_frame_by_frame(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A read of the host's over ``PIPE_BUF`` cannot go out in one atomic write; its frames
    must then still be written at once, each by itself (as the full path always did), not
    all handed to the writer thread."""
    import os
    import threading

    from mcpsync.config import ServerConfig
    from mcpsync.gateway import Gateway, _upstream

    hops: list[object] = []
    real = _upstream.Upstream._write_one

    def counted(self: _upstream.Upstream, item: object) -> None:
        if item:
            hops.append(item)
        real(self, item)  # type: ignore[arg-type]

    monkeypatch.setattr(_upstream.Upstream, "_write_one", counted)
    gateway = Gateway([ServerConfig(id="odd", command=ODD[0], args=ODD[1:])])
    host_r, host_w = os.pipe()
    out_r, out_w = os.pipe()
    with os.fdopen(host_r, "rb", buffering=0) as stdin, \
            os.fdopen(out_w, "wb", buffering=0) as stdout, os.fdopen(out_r, "rb") as answers:
        serving = threading.Thread(target=gateway.serve_stdio, args=(stdin, stdout),
                                   name="mcpsync-test-serve", daemon=True)
        serving.start()
        try:
            os.write(host_w, (INIT + "\n").encode())
            assert json.loads(answers.readline())["id"] == 0
            os.write(host_w, (INITIALIZED + "\n").encode())
            hops.clear()
            pad = "x" * 500
            for r in range(5):
                blob = "".join(
                    f'{{"jsonrpc":"2.0","id":{r * 10 + i},"method":"ping",'
                    f'"params":{{"pad":"{pad}"}}}}\n' for i in range(10)).encode()
                assert len(blob) > 4096
                os.write(host_w, blob)
                got = sorted(json.loads(answers.readline())["id"] for _ in range(10))
                assert got == [r * 10 + i for i in range(10)]
        finally:
            os.close(host_w)
            serving.join(15)
            gateway.close()
    assert not serving.is_alive()
    assert hops == [], f"{len(hops)} frames went through the writer thread"


STALLER = r'''
import json, sys, time
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    if msg.get("method") == "tools/call":   # stop reading, let the pipe fill, then die
        time.sleep(1.0)
        sys.exit(3)
    result = ({"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {},
               "serverInfo": {"name": "staller", "version": "1"}}
              if msg["method"] == "initialize" else {})
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}) + "\n")
    sys.stdout.flush()
'''


def test_calls_queued_when_the_upstream_dies_are_answered_once(
        tmp_path: Path, stdlib_check: bool) -> None:
    """Calls the gateway had to queue (the server stopped reading, its pipe was full) are
    in flight: when the server dies they are failed at once, and must not then be sent to
    the restarted server as well, which would answer the host twice for one id."""
    peer = tmp_path / "staller.py"
    peer.write_text(STALLER, encoding="utf-8")
    host = RawHost(write_config(tmp_path, {"st": [sys.executable, str(peer)]}),
                   stdlib_check=stdlib_check)
    try:
        host.call(INIT)
        host.send(INITIALIZED)
        assert host.call('{"jsonrpc":"2.0","id":"p","method":"ping"}')["result"] == {}
        pad = "x" * 1000
        pings = [f'{{"jsonrpc":"2.0","id":{i},"method":"ping","params":{{"pad":"{pad}"}}}}'
                 for i in range(1, 301)]   # 300 KB: far more than the pipe holds
        _write(host, _call("0", "stall"))
        for at in range(0, 300, 50):
            _write(host, *pings[at:at + 50])
        answers: dict[Any, list[dict[str, Any]]] = {}
        for _ in range(301):
            message = json.loads(host.recv())
            answers.setdefault(message["id"], []).append(message)
        assert sorted(answers) == list(range(301))
        # The next call restarts the server; if a failed call had been sent to it as well,
        # its second answer would come before this one.
        assert host.call('{"jsonrpc":"2.0","id":"after","method":"ping"}') == {
            "jsonrpc": "2.0", "id": "after", "result": {}}
        assert all(len(each) == 1 for each in answers.values()), \
            [rid for rid, each in answers.items() if len(each) > 1][:10]
        # The stalled call and those in flight with it were failed; calls the gateway read
        # only after the death (a loaded machine) went to the restarted server instead.
        assert "error" in answers[0][0]
        assert sum("error" in each[0] for each in answers.values()) > 1
    finally:
        if host.proc.poll() is None:
            host.close()


def test_blank_lines_from_the_upstream_are_skipped_quietly(
        tmp_path: Path, stdlib_check: bool) -> None:
    """A server that writes blank or whitespace-only lines between its answers: the host
    gets every answer, and the gateway does not warn about lines that are not there."""
    peer = tmp_path / "blank.py"
    peer.write_text(r'''
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    result = ({"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {},
               "serverInfo": {"name": "blank", "version": "1"}}
              if msg["method"] == "initialize" else {})
    answer = json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result})
    sys.stdout.write({0: answer + "\n\n", 1: "\n" + answer + "\n",
                      2: answer + "\n   \n"}.get(msg["id"] % 3 if isinstance(msg["id"], int)
                                                 else 0, answer + "\n"))
    sys.stdout.flush()
''', encoding="utf-8")
    host = RawHost(write_config(tmp_path, {"b": [sys.executable, str(peer)]}),
                   stdlib_check=stdlib_check)
    host.call(INIT)
    host.send(INITIALIZED)
    for rid in range(1, 10):
        assert host.call(f'{{"jsonrpc":"2.0","id":{rid},"method":"ping"}}') == {
            "jsonrpc": "2.0", "id": rid, "result": {}}
    assert host.close() == 0
    assert not [line for line in host.stderr if b"not a JSON-RPC message" in line], \
        host.stderr


def test_a_host_line_not_utf8_in_a_member_the_check_skips_is_refused(
        host: RawHost) -> None:
    """A call whose params hold a byte that is not UTF-8 (in a member msgspec skips
    without decoding): refused with ``-32700`` by the gateway itself, in one read of its own
    and in a read with a good call; the good call is still answered."""
    bad = (b'{"jsonrpc":"2.0","id":41,"method":"tools/call","params":{"name":"odd",'
           b'"x":"\xff"}}')
    host.send(bad)
    refused = json.loads(host.recv())
    assert refused["id"] is None and refused["error"]["code"] == -32700
    assert host.proc.stdin is not None
    host.proc.stdin.write(bad + b"\n" + _call("42", "odd").encode() + b"\n")
    host.proc.stdin.flush()
    got = _recv(host, 2)
    assert [g.get("id") for g in got] == [None, 42]
    assert got[0]["error"]["code"] == -32700 and "result" in got[1]


def test_an_answer_not_utf8_in_a_member_the_check_skips_is_dropped(
        tmp_path: Path, stdlib_check: bool) -> None:
    """A server's answer holding a byte that is not UTF-8 inside its result never reaches
    the host (the gateway writes nothing but JSON to its stdout); the next answer does, and
    the gateway says on stderr what it dropped."""
    peer = tmp_path / "badbytes.py"
    peer.write_text(r'''
import json, sys
out = sys.stdout.buffer
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    if msg["method"] == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {},
                  "serverInfo": {"name": "bad", "version": "1"}}
    elif msg["id"] == 1:
        out.write(b'{"jsonrpc":"2.0","id":1,"result":{"x":"\xff"}}\n')
        out.flush()
        continue
    else:
        result = {}
    out.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}).encode()
              + b"\n")
    out.flush()
''', encoding="utf-8")
    host = RawHost(write_config(tmp_path, {"b": [sys.executable, str(peer)]}),
                   stdlib_check=stdlib_check)
    try:
        host.call(INIT)
        host.send(INITIALIZED)
        host.send('{"jsonrpc":"2.0","id":1,"method":"ping"}')
        assert host.call('{"jsonrpc":"2.0","id":2,"method":"ping"}') == {
            "jsonrpc": "2.0", "id": 2, "result": {}}
    finally:
        assert host.close() == 0
    assert [line for line in host.stderr if b"not a JSON-RPC message" in line], host.stderr


def test_an_object_broken_over_two_lines_in_one_read_is_two_lines(host: RawHost) -> None:
    """Stdio messages are single lines: an object with a newline inside is two broken lines,
    each refused with ``-32700``, when its halves come in one read as when they come in
    two; nothing reaches the server, whose next call is answered."""
    assert host.proc.stdin is not None
    host.proc.stdin.write(b'{"jsonrpc":"2.0","id":5,\n"method":"ping"}\n')
    host.proc.stdin.flush()
    got = _recv(host, 2)
    assert [(g["id"], g["error"]["code"]) for g in got] == [(None, -32700), (None, -32700)]
    assert host.call('{"jsonrpc":"2.0","id":6,"method":"ping"}') == {
        "jsonrpc": "2.0", "id": 6, "result": {}}
