"""The name a stdio client goes by: the caller's, else the server's own, else the program's.

A default name of ``python``, ``node`` or ``npx`` says nothing when three servers fail at once;
after the handshake errors and reprs use ``serverInfo.name`` (cleaned of control characters,
at most 64 characters), unless the caller named the server.
"""

from __future__ import annotations

import json
import sys

import pytest

import mcpsync

DEMO = [sys.executable, "-m", "mcpsync.demo"]


def _named(info_name: str) -> list[str]:
    """A legacy server (a real process) that calls itself ``info_name``."""
    source = (
        "import json, sys\n"
        f"NAME = {json.dumps(info_name)}\n"
        "for line in sys.stdin:\n"
        "    msg = json.loads(line)\n"
        "    if msg.get('method') == 'initialize':\n"
        "        result = {'protocolVersion': msg['params']['protocolVersion'],\n"
        "                  'capabilities': {'tools': {}},\n"
        "                  'serverInfo': {'name': NAME, 'version': '1'}}\n"
        "    elif 'id' in msg and 'method' in msg:\n"
        "        result = {'content': [], 'isError': False} if msg['method'] == 'tools/call' \\\n"
        "            else None\n"
        "        if result is None:\n"
        "            print(json.dumps({'jsonrpc': '2.0', 'id': msg['id'], 'error':\n"
        "                              {'code': -32601, 'message': 'no'}}), flush=True)\n"
        "            continue\n"
        "    else:\n"
        "        continue\n"
        "    print(json.dumps({'jsonrpc': '2.0', 'id': msg['id'], 'result': result}), flush=True)\n"
    )
    return [sys.executable, "-c", source]


def test_errors_and_repr_use_the_servers_own_name(no_leaks: None) -> None:
    with mcpsync.connect(DEMO) as client:
        assert client.name == "mcpsync-demo"
        assert "'mcpsync-demo'" in repr(client)
        with pytest.raises(mcpsync.RemoteError, match="on server 'mcpsync-demo'"):
            client.call_tool("no-such-tool")


def test_a_name_given_by_the_caller_wins(no_leaks: None) -> None:
    with mcpsync.connect(DEMO, name="calc") as client:
        assert client.name == "calc"
        with pytest.raises(mcpsync.RemoteError, match="on server 'calc'"):
            client.call_tool("no-such-tool")
    config = mcpsync.ServerConfig(id="demo-1", command=sys.executable, args=["-m", "mcpsync.demo"])
    with mcpsync.connect(config) as client:
        assert client.name == "demo-1"


def test_the_servers_name_is_cleaned_and_cut(no_leaks: None) -> None:
    hostile = "evil\x1b[31m\nserver\t" + "x" * 100
    with mcpsync.connect(_named(hostile), era="legacy") as client:
        assert client.server_info.name == hostile   # the raw value is still there
        name = client.name
        assert len(name) == 64
        assert name.startswith("evil[31mserver")
        assert not any(ord(c) < 32 or ord(c) == 127 for c in name)
        with pytest.raises(mcpsync.CapabilityNotSupported) as info:
            client.get_prompt("p")
        assert f"server {name!r}" in str(info.value)
        assert "\x1b" not in str(info.value)


def test_an_empty_server_name_keeps_the_programs(no_leaks: None) -> None:
    with mcpsync.connect(_named(" \x00 "), era="legacy") as client:
        assert client.name.startswith("python")


def test_unicode_line_breaks_and_format_characters_are_removed(no_leaks: None) -> None:
    # Line and paragraph separators (Zl, Zp), NEL and VT (Cc), zero-width space, BOM and a
    # right-to-left override (Cf): each could split or disguise a log line or an error.
    breaks = "\u2028\u2029\u0085\u000b\u200b\ufeff\u202e"
    hostile = "fake" + breaks + "\u2028ERROR: server 'x'\u2029 done"
    with mcpsync.connect(_named(hostile), era="legacy") as client:
        name = client.name
        assert name == "fakeERROR: server 'x' done"
        with pytest.raises(mcpsync.CapabilityNotSupported) as info:
            client.get_prompt("p")
        shown = str(info.value) + repr(client)
    for c in breaks:
        assert c not in shown, f"U+{ord(c):04X} left in {shown!r}"
    assert len(str(info.value).splitlines()) == 1
