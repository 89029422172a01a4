"""The log thread's two ways of writing a record at ``summary`` detail: as text straight
from the frame (the usual case: a log file and no callback) and through the record dicts
(a callback is set, or the frame is one the text path leaves to the dicts). Both must write
the very same bytes, so a log reads the same whichever path wrote it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from mcpsync._envelope import parse_envelope
from mcpsync.gateway._inspector import Inspector

TO_UPSTREAM = ("host->gateway", "gateway->upstream")
TO_HOST = ("upstream->gateway", "gateway->host")
_TIME = re.compile(rb'^\{"time":"[^"]*",')


def _frame(value: Any) -> bytes:
    return json.dumps(value).encode()


def _deep(n: int) -> Any:
    return {"a": _deep(n - 1)} if n else [1, 2]


# (legs, upstream, frame): requests and their answers on both sides, of every kind the
# text path covers and of the ones it hands to the dicts.
TRAFFIC: list[tuple[tuple[str, ...], str | None, bytes]] = [
    (TO_UPSTREAM, None, _frame({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                           "clientInfo": {"name": "h", "version": "1"}}})),
    (TO_HOST, "demo", _frame({"jsonrpc": "2.0", "id": 0, "result": {
        "protocolVersion": "2025-06-18", "capabilities": {"tools": {"listChanged": True}},
        "serverInfo": {"name": "demo", "version": "1"}}})),
    (TO_UPSTREAM, "demo", _frame({"jsonrpc": "2.0", "method": "notifications/initialized"})),
    (TO_UPSTREAM, "demo", _frame({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "échö", "arguments": {"text": "hi", "n": 2, "x": 1.5, "ok": True,
                                      "none": None, "items": [{"a": 1}, {"a": 2}],
                                      "empty": [], "one": ["s"]},
        "_meta": {"progressToken": 7}}})),
    (TO_HOST, "demo", _frame({"jsonrpc": "2.0", "method": "notifications/progress",
                              "params": {"progressToken": 7, "progress": 0.5}})),
    (TO_HOST, "demo", _frame({"jsonrpc": "2.0", "id": 1, "result": {
        "content": [{"type": "text", "text": "hi"}], "isError": True}})),
    (TO_UPSTREAM, "demo", _frame({"jsonrpc": "2.0", "id": "a\u00e9", "method": "prompts/get",
                                  "params": {"name": "p", "arguments": {"api_key": "k"}}})),
    (TO_HOST, "demo", _frame({"jsonrpc": "2.0", "id": "a\u00e9", "result": {"messages": []}})),
    (TO_UPSTREAM, "demo", _frame({"jsonrpc": "2.0", "id": 2.5, "method": "resources/read",
                                  "params": {"uri": "https://u:pw@example.com/x?token=abc"}})),
    (TO_HOST, "demo", _frame({"jsonrpc": "2.0", "id": 2.5, "error": {
        "code": -32010, "message": "denied: token=abc"}})),
    (TO_UPSTREAM, "demo", _frame({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                                  "params": {"name": "deep", "arguments": _deep(10)}})),
    (TO_HOST, "demo", _frame({"jsonrpc": "2.0", "id": 3, "result": {
        f"k{i}": i for i in range(60)}})),
    (TO_UPSTREAM, "demo", _frame({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {
        "name": "keys", "arguments": {"ghp_" + "a1B2" * 9: 1, "sk-" + "x9Y8" * 6: 2}}})),
    (TO_HOST, "demo", _frame({"jsonrpc": "2.0", "id": 4, "result": None})),
    (TO_UPSTREAM, "demo", _frame({"jsonrpc": "2.0", "id": None, "method": "ping"})),
    (TO_HOST, "demo", _frame({"jsonrpc": "2.0", "id": 99, "result": {}})),   # never asked
    (TO_UPSTREAM, "demo", b'\xef\xbb\xbf{"jsonrpc":"2.0","id":5,"method":"tools/list"}'),
    (TO_HOST, "demo", _frame({"jsonrpc": "2.0", "id": 5, "result": {"tools": []}})),
    (TO_UPSTREAM, "demo", _frame({"jsonrpc": "2.0", "id": 5, "method": "tools/list"})),
    (("gateway->host",), "demo", _frame({"jsonrpc": "2.0", "id": 6, "error": {
        "code": -32603, "message": "upstream 'demo' stopped"}})),
    (TO_HOST, "demo", _frame({"jsonrpc": "2.0", "id": 5, "result": {   # decoded anew
        "tools": [{"name": "t", "description": "d" * 5000, "inputSchema": {}}]}})),
    (TO_UPSTREAM, "demo", _frame({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                                  "params": {"name": "echo", "arguments": {"text": "x"}}})),
    (("upstream->gateway",), "demo", _frame({"jsonrpc": "2.0", "id": 7, "result": {}})),
    (("gateway->host",), None, _frame({"jsonrpc": "2.0", "id": 7, "result": {}})),
]


def _write(path: Path, *, callback: bool, session: str | None = None) -> list[bytes]:
    got: list[dict[str, Any]] = []
    now = [100.0]

    def clock() -> float:
        now[0] += 0.0125
        return now[0]

    inspector = Inspector(path, callback=got.append if callback else None, clock=clock)
    for legs, upstream, frame in TRAFFIC:
        inspector.record_frame(legs, parse_envelope(frame), upstream, session)
    inspector.close()
    assert not callback or len(got) == len(path.read_bytes().splitlines())
    return [_TIME.sub(b"{", line) for line in path.read_bytes().splitlines()]


def test_the_text_path_writes_what_the_dicts_write(tmp_path: Path) -> None:
    text = _write(tmp_path / "text.log", callback=False)
    dicts = _write(tmp_path / "dicts.log", callback=True)
    assert len(text) == sum(len(legs) for legs, _, _ in TRAFFIC)
    for mine, theirs in zip(text, dicts, strict=True):
        assert mine == theirs
    records = [json.loads(line) for line in text]
    call = records[6]
    assert (call["tool"], call["shape"]["arguments"]["items"]) == \
        ("échö", [{"a": "int"}, "1 more"])
    assert (records[11]["tool"], records[11]["outcome"], records[11]["latency_ms"]) == \
        ("échö", "tool_error", 25.0)
    assert "pw" not in text[16].decode() and "abc" not in text[16].decode()
    assert records[-1]["tool"] == "echo" and records[-1]["upstream"] == "demo"


def test_both_paths_write_a_legacy_http_session_alike(tmp_path: Path) -> None:
    # The HTTP front tags each record of a legacy session with a digest of its id.
    text = _write(tmp_path / "text.log", callback=False, session="0123456789ab")
    dicts = _write(tmp_path / "dicts.log", callback=True, session="0123456789ab")
    assert text == dicts
    records = [json.loads(line) for line in text]
    assert {r.get("session") for r in records} == {"0123456789ab"}
    assert records[11]["latency_ms"] == 25.0


def test_answers_pair_with_requests_of_their_own_session(tmp_path: Path) -> None:
    call = _frame({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                   "params": {"name": "slow", "arguments": {}}})
    answer = _frame({"jsonrpc": "2.0", "id": 1, "result": {}})
    now = [0.0]

    def clock() -> float:
        now[0] += 1.0
        return now[0]

    path = tmp_path / "two.log"
    inspector = Inspector(path, clock=clock)
    inspector.record_frame(TO_UPSTREAM, parse_envelope(call), "demo", "aaaaaaaaaaaa")   # t=1
    inspector.record_frame(TO_UPSTREAM, parse_envelope(call), "demo", "bbbbbbbbbbbb")   # t=2
    inspector.record_frame(TO_HOST, parse_envelope(answer), "demo", "bbbbbbbbbbbb")     # t=3
    inspector.record_frame(TO_HOST, parse_envelope(answer), "demo", "aaaaaaaaaaaa")     # t=4
    inspector.close()
    done = [json.loads(line) for line in path.read_bytes().splitlines()
            if json.loads(line)["dir"] == "gateway->host"]
    assert [(r["session"], r["latency_ms"]) for r in done] == \
        [("bbbbbbbbbbbb", 1000.0), ("aaaaaaaaaaaa", 3000.0)]


def test_repeated_keys_with_other_value_types_get_their_own_shape(tmp_path: Path) -> None:
    # The text path remembers an object's shape by its keys and its values' shapes.
    frames = [{"n": 1, "m": {"a": "x"}}, {"n": "1", "m": {"a": "x"}}, {"n": 1, "m": {"a": 2}},
              {"n": 1, "m": {"a": "x"}}, {"n": 1, "m": ["x"]}, {"n": 1, "m": {"a": "x"}}]
    got: dict[bool, list[Any]] = {}
    for callback in (False, True):
        path = tmp_path / f"{callback}.log"
        inspector = Inspector(path, callback=(lambda r: None) if callback else None)
        for rid, arguments in enumerate(frames):
            inspector.record_frame(("host->gateway",), parse_envelope(_frame(
                {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                 "params": {"name": "t", "arguments": arguments}})), "demo")
        inspector.close()
        got[callback] = [json.loads(line)["shape"]["arguments"]
                         for line in path.read_bytes().splitlines()]
    assert got[False] == got[True] == [
        {"n": "int", "m": {"a": "str"}}, {"n": "str", "m": {"a": "str"}},
        {"n": "int", "m": {"a": "int"}}, {"n": "int", "m": {"a": "str"}},
        {"n": "int", "m": ["str"]}, {"n": "int", "m": {"a": "str"}}]


def test_a_remembered_body_shape_is_the_walked_one(tmp_path: Path) -> None:
    # The text path remembers a body's shape by its skeleton (keys, list lengths, value
    # types): bodies that differ in any of those, in any order, get the walk's own text.
    bodies: list[Any] = [
        {"a": 1}, {"a": True}, {"a": 1.5}, {"a": None}, {"a": "1"}, {"b": 1}, {"a": 1, "b": 2},
        {"b": 2, "a": 1}, {"a": []}, {"a": [1]}, {"a": [1, 2]}, {"a": [True, 2]},
        {"a": [[1]]}, {"a": [{"x": 1}]}, {"a": [{"x": "1"}]}, {"a": {"x": 1}},
        {"a": {}, "b": {"x": 1}}, {"a": {"x": 1}, "b": {}}, [], [1], [{"a": 1}, 2],
        {"a": _deep(6)}, {"a": _deep(9)}, {f"k{i}": i for i in range(51)},
        {"a": [{f"k{i}": i for i in range(51)}]}, {"api_key": 1, "API-KEY": 2},
        {"a": [[[[[[[[[1]]]]]]]]]}, {"": 1}, {"a": {"": {"": 1}}},
        "str", 1, {"a": list(range(600))}, [[i] for i in range(3)],
        {"a": [[{"b": 1}] * 300]}, {f"k{i}": {"x": [i]} for i in range(40)},
        {"a": {f"k{i}": {"y": {"z": 1}} for i in range(45)},   # a skeleton past the bound
         "b": {f"k{i}": {"y": {"z": 1}} for i in range(45)}},
    ]
    inspector = Inspector(tmp_path / "x.log")
    for _ in range(2):
        for body in bodies + bodies[::-1]:
            assert inspector._body_shape(body) == inspector._shape_text(body, 0), body
    inspector.close()


def test_the_body_shape_cache_stays_small_when_keys_are_data(tmp_path: Path) -> None:
    # Keys that are data (paths, record ids) make each body's skeleton new: the cache must
    # not keep thousands of them, nor a body whose keys are long, and every shape it gives
    # is still the walked one.
    _BODIES_CACHED, _SKELETON_TEXT = 256, 2048

    inspector = Inspector(tmp_path / "x.log")
    long_keys = {"rows": {f"/srv/data/{'d' * 60}/{n:06d}.json": 1 for n in range(40)}}
    assert inspector._body_shape(long_keys) == inspector._shape_text(long_keys, 0)
    assert inspector._bodies == {}   # 2.7 KB of keys: not remembered
    held = 0
    for n in range(2000):
        body = {"name": "t", "arguments": {f"rec-{n:08d}-{k:02d}": {"v": k} for k in range(30)}}
        assert inspector._body_shape(body) == inspector._shape_text(body, 0)
        held = max(held, len(inspector._bodies))
        text = sum(len(part) for key in inspector._bodies for part in key if type(part) is str)
        assert text <= len(inspector._bodies) * _SKELETON_TEXT
    assert 0 < held <= _BODIES_CACHED <= 256
    inspector.close()


def _cached_chars(inspector: Inspector) -> int:
    """Characters held by the name, text, tool and shape caches (keys and values)."""
    total = 0
    for name, done in inspector._names.items():
        total += len(name) + len(done)
    for value, text in inspector._texts.items():
        total += len(value) + len(text)
    for (tool, _), (_, text) in inspector._tools.items():
        total += len(tool) + len(text)
    for key, shape in inspector._shapes.items():
        total += sum(map(len, key)) + len(shape or "")
    return total


def test_the_name_and_shape_caches_stay_small_when_an_upstream_sends_huge_names(
        tmp_path: Path) -> None:
    # The caches hold at most 4096 entries each; a hostile upstream could make each entry
    # a megabyte (a key, a tool name). Long names are redacted and written as usual but not
    # remembered, so what the caches hold stays bounded in bytes, not only in entries.
    inspector = Inspector(tmp_path / "x.log")
    big = "k" * 20_000
    for n in range(20):
        body = {f"{big}{n}": {f"{big}-inner-{n}": 1}, "small": n}
        assert inspector._body_shape(body) == inspector._shape_text(body, 0)
        assert inspector._tool_about(f"{big}tool{n}", "up")[0]["tool"].startswith("kkk")
        inspector._json(f"{big}text{n}")
    assert _cached_chars(inspector) < 64_000, _cached_chars(inspector)
    # Short names are still remembered.
    inspector._body_shape({"path": "x", "limit": 1})
    assert "path" in inspector._names and "limit" in inspector._names
    assert any("path" in key for key in inspector._shapes)
    inspector.close()
