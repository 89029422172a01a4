"""A legacy-era stdio MCP peer whose tool list holds numbers Python's ``json`` would respell.

``tools/list`` answers with ``1.50``, ``1E2`` and ``1E400`` (beyond a double) in an item;
its one tool, ``echo_raw``, answers with the request line it received inside a string, so a
test sees the very text that reached the upstream. Run:
``python tests/gateway/peers/spelling_server.py``.
"""

from __future__ import annotations

import json
import sys

from mcpsync._envelope import parse_envelope

ITEM_EXTRA = '"x-n":1.50,"x-e":1E2,"x-huge":1E400'


def main() -> None:
    out = sys.stdout.buffer
    for raw in sys.stdin.buffer:
        line = raw.rstrip(b"\n").decode()
        if not line.strip():
            continue
        msg = json.loads(line)
        rid = parse_envelope(line).id
        method = msg.get("method")
        reply = None
        head = '{"jsonrpc":"2.0","id":' + str(rid)
        if method == "initialize":
            reply = (head + ',"result":{"protocolVersion":"2025-06-18","capabilities":'
                     '{"tools":{}},"serverInfo":{"name":"spelling","version":"1"}}}')
        elif method == "tools/list":
            reply = (head + ',"result":{"tools":[{"name":"echo_raw","inputSchema":'
                     '{"type":"object"},' + ITEM_EXTRA + '}]}}')
        elif method == "tools/call":
            body = json.dumps({"content": [{"type": "text", "text": line}]})
            reply = head + ',"result":' + body + '}'
        elif method == "ping":
            reply = head + ',"result":{}}'
        elif rid is not None and method is not None:
            reply = head + ',"error":{"code":-32601,"message":' + json.dumps(f"no {method}") + '}}'
        if reply is not None:
            out.write(reply.encode() + b"\n")
            out.flush()


if __name__ == "__main__":
    main()
