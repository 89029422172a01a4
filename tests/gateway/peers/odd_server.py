"""A legacy-era stdio MCP peer that writes odd but valid JSON, byte for byte as fixed here.

Its answers hold what a re-serialising proxy would change: ``1.50``, ``1E2``, ``-0``, escapes
(``\\u00e9``, ``\\/``), an unusual key order, spaces, and members no revision defines. A test
compares what a host behind the gateway receives with :data:`ODD_RESULT` exactly. Tools:
``odd`` (the odd result), ``echo_raw`` (answers with the request's own line inside a
string, so the test sees what reached the upstream), ``ask`` (sends a server-to-client request
first and answers with the host's reply line), ``die`` (exits mid-call), ``orphan``
(exits mid-call, leaving a child process that holds its stdout open), ``split`` (writes its
answer in two parts, 0.2 s apart), ``big`` (an answer line of about ``arguments.size``
bytes), ``later`` (answered
only at the next ``flush``) and ``flush`` (writes the held answers, a log notification
between the first two, and its own answer, all in one write, so the gateway reads several
lines at once).
Run: ``python tests/gateway/peers/odd_server.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from mcpsync._envelope import parse_envelope

ODD_RESULT = ('{"z":1.50,"a":1E2,"m":-0,"s":"caf\\u00e9 \\/ \\ud83d\\ude00","nested":'
              '{"k":[1.0, 2E-3 ,true]},"content":[{"type":"text","text":"odd"}]}')
ODD_EXTRA = '"x-future-member":{"keep":1.10}'


def main() -> None:
    out = sys.stdout.buffer
    pending_ask: str | None = None
    held: list[str] = []
    for raw in sys.stdin.buffer:
        line = raw.rstrip(b"\n").decode()
        if not line.strip():
            continue
        msg = json.loads(line)
        rid = parse_envelope(line).id   # the id's own text, echoed back as it came
        method = msg.get("method")
        reply: str | None = None
        if method == "initialize":
            reply = ('{"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},'
                     '"serverInfo":{"name":"odd-peer","version":"1.0"}},"jsonrpc":"2.0",'
                     f'"id":{rid}}}')
        elif method == "tools/list":
            reply = ('{"jsonrpc":"2.0","id":' + str(rid) + ',"result":{"tools":[{"name":"odd",'
                     '"inputSchema":{"type":"object"},"x-unknown":1E0}]}}')
        elif method == "tools/call":
            name = msg["params"]["name"]
            if name == "odd":
                reply = f'{{"jsonrpc":"2.0","id":{rid},"result":{ODD_RESULT},{ODD_EXTRA}}}'
            elif name == "echo_raw":
                body = json.dumps({"content": [{"type": "text", "text": line}]})
                reply = f'{{"jsonrpc":"2.0","id":{rid},"result":{body}}}'
            elif name == "ask":
                pending_ask = rid
                reply = '{"jsonrpc":"2.0","id":"s2c-1","method":"roots/list","x-k":1.50}'
            elif name == "die":
                os._exit(3)
            elif name == "orphan":   # exit, leaving a child that holds stdout open
                subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
                os._exit(4)
            elif name == "split":   # the answer in two writes, 0.2 s apart
                reply = f'{{"jsonrpc":"2.0","id":{rid},"result":{{"content":[],"split":1}}}}'
                out.write(reply.encode()[:15])
                out.flush()
                time.sleep(0.2)
                out.write(reply.encode()[15:] + b"\n")
                out.flush()
                reply = None
            elif name == "big":   # one line of the size asked for
                size = int(msg["params"]["arguments"]["size"])
                pad = "x" * size
                reply = f'{{"jsonrpc":"2.0","id":{rid},"result":{{"pad":"{pad}"}}}}'
            elif name == "later":
                held.append(f'{{"jsonrpc":"2.0","id":{rid},"result":{{"content":[],'
                            f'"held":{len(held)}}}}}')
            elif name == "flush":
                note = ('{"jsonrpc":"2.0","method":"notifications/message","params":'
                        '{"level":"info","data":"between"}}')
                lines = [*held[:1], note, *held[1:]]
                lines.append(f'{{"jsonrpc":"2.0","id":{rid},"result":{{"flushed":{len(held)}}}}}')
                held = []
                reply = "\n".join(lines)
        elif method is None and msg.get("id") == "s2c-1" and pending_ask is not None:
            body = json.dumps({"content": [{"type": "text", "text": line}]})
            reply = f'{{"jsonrpc":"2.0","id":{pending_ask},"result":{body}}}'
            pending_ask = None
        elif method == "ping":
            reply = f'{{"jsonrpc":"2.0","id":{rid},"result":{{}}}}'
        elif rid is not None and method is not None:
            reply = (f'{{"jsonrpc":"2.0","id":{rid},"error":{{"code":-32601,'
                     f'"message":"no {method}"}}}}')
        if reply is not None:
            out.write(reply.encode() + b"\n")
            out.flush()


if __name__ == "__main__":
    main()
