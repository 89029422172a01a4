"""A stdio MCP peer that answers ``initialize`` and then nothing: the upstream that must not
hold the gateway's merged answers.

Every line it receives is appended to the file given as the first argument (so a test sees
which ``notifications/cancelled`` reached it). With ``--late SECONDS`` it does answer
``tools/list``, that long after the request and with a tool called ``late``, ignoring any
cancellation: the late answer the gateway must drop. Run:
``python tests/gateway/peers/stuck_server.py RECORD [--late SECONDS]``.
"""

from __future__ import annotations

import json
import sys
import threading
import time

from mcpsync._envelope import parse_envelope


def main() -> None:
    record = sys.argv[1]
    late = float(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[2] == "--late" else None
    out = sys.stdout.buffer
    lock = threading.Lock()

    def write(reply: str) -> None:
        with lock:
            out.write(reply.encode() + b"\n")
            out.flush()

    def answer_late(rid: str) -> None:
        assert late is not None
        time.sleep(late)
        with open(record, "a", encoding="utf-8") as f:
            f.write(f"# answered late {rid}\n")
        write('{"jsonrpc":"2.0","id":' + rid + ',"result":{"tools":[{"name":"late",'
              '"inputSchema":{"type":"object"}}]}}')

    for raw in sys.stdin.buffer:
        line = raw.rstrip(b"\n").decode()
        if not line.strip():
            continue
        with open(record, "a", encoding="utf-8") as f:
            f.write(line + "\n")
        msg = json.loads(line)
        rid = parse_envelope(line).id
        if msg.get("method") == "initialize":
            write('{"jsonrpc":"2.0","id":' + str(rid) + ',"result":{"protocolVersion":'
                  '"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"stuck",'
                  '"version":"1"}}}')
        elif msg.get("method") == "tools/list" and late is not None and rid is not None:
            threading.Thread(target=answer_late, args=(rid,), daemon=True).start()


if __name__ == "__main__":
    main()
