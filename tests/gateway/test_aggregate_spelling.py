"""Numbers keep their spelling where the aggregating gateway decodes and re-encodes JSON, and
a literal beyond a double's range never comes out as ``Infinity`` (which is not JSON)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from gateway.helpers_gw import PEERS, RawHost, write_config
from mcpsync.gateway._aggregate.spelling import Number, dumps, loads

pytestmark = pytest.mark.timeout(60)

SPELLING = [sys.executable, str(PEERS / "spelling_server.py")]
INIT = ('{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":'
        '"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}')


@pytest.mark.parametrize("text", ["1.50", "1E2", "-2.5e-3", "1E400", "-1E400", "0.0", "1e-400",
                                  "NaN", "-Infinity"])
def test_a_number_comes_back_as_written(text: str) -> None:
    value = loads('{"v":[' + text + ',{"w":' + text + '}]}')
    assert dumps(value) == '{"v":[' + text + ',{"w":' + text + '}]}'
    assert isinstance(value["v"][0], Number)


def test_everything_else_encodes_as_json_does() -> None:
    value = {"s": "caf\u00e9 \"q\"", "i": 12345678901234567890, "b": True, "n": None,
             "l": [], "d": {}, "f": 0.25}
    assert json.loads(dumps(value)) == value
    assert dumps(value, ensure_ascii=False) == json.dumps(value, ensure_ascii=False,
                                                        separators=(",", ":"))
    with pytest.raises(ValueError, match="cannot be written as JSON"):
        dumps({"x": float("inf")})   # computed, not decoded: refused, never "Infinity"


def test_an_aggregated_list_and_call_keep_the_numbers(tmp_path: Path) -> None:
    host = RawHost(write_config(tmp_path, {"a": SPELLING, "b": SPELLING}))
    try:
        host.send(INIT)
        host.recv()
        host.send('{"jsonrpc":"2.0","method":"notifications/initialized"}')
        host.send('{"jsonrpc":"2.0","id":1,"method":"tools/list"}')
        listed = host.recv()
        assert b"Infinity" not in listed
        assert listed.count(b'"x-n":1.50,"x-e":1E2,"x-huge":1E400') == 2
        assert {t["name"] for t in json.loads(listed)["result"]["tools"]} == {
            "a__echo_raw", "b__echo_raw"}
        host.send('{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":'
                  '"b__echo_raw","arguments":{"n":1.50,"e":1E2,"h":1E400}}}')
        answer = json.loads(host.recv())
        seen = answer["result"]["content"][0]["text"]
        assert '"name":"echo_raw","arguments":{"n":1.50,"e":1E2,"h":1E400}' in seen
        # NaN is not JSON, but the gateway forwards it as it came and goes on serving.
        host.send('{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":'
                  '"a__echo_raw","arguments":{"v":NaN}}}')
        assert '"arguments":{"v":NaN}' in json.loads(host.recv())["result"]["content"][0][
            "text"]
        assert host.call('{"jsonrpc":"2.0","id":4,"method":"ping"}')["id"] == 4
    finally:
        assert host.close() == 0
