"""A one-era MCP server made of a dual-era one: the bridge tests' strict legacy or modern peer.

Our servers (and the official SDK's) answer both eras, so a host would never need the bridge
to reach them. This peer runs one as its child and refuses the other era at the door:
``--only legacy`` answers ``server/discover`` and any request whose ``_meta`` names a
2026-07-28 version with -32601, as a 2025-11-25 server does; ``--only modern`` answers
``initialize`` with -32022 naming 2026-07-28 only, as a modern-only server does. Every line
that reaches it is appended to ``--log FILE`` (one JSON line each), so a test sees what the
gateway sent upstream. Run:
``python era_guard.py --only legacy --log F -- python feature_server.py``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
from typing import Any

MODERN = "2026-07-28"


def _refusal(message: dict[str, Any], only: str) -> dict[str, Any] | None:
    method = message.get("method")
    if "id" not in message or not isinstance(method, str):
        return None
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    version = meta.get("io.modelcontextprotocol/protocolVersion") \
        if isinstance(meta, dict) else None
    if only == "legacy" and (method == "server/discover" or version == MODERN):
        return {"code": -32601, "message": f"Method not found: {method}"}
    if only == "modern" and method == "initialize":
        return {"code": -32022, "message": "Unsupported protocol version",
                "data": {"supported": [MODERN],
                         "requested": (params or {}).get("protocolVersion")}}
    return None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", choices=("legacy", "modern"), required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("child", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    child_argv = args.child[1:] if args.child[:1] == ["--"] else args.child
    child = subprocess.Popen(child_argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None
    out_lock = threading.Lock()
    log = open(args.log, "a", encoding="utf-8")  # noqa: SIM115

    def write(line: bytes) -> None:
        with out_lock:
            sys.stdout.buffer.write(line if line.endswith(b"\n") else line + b"\n")
            sys.stdout.buffer.flush()

    def pump() -> None:
        assert child.stdout is not None
        for line in child.stdout:
            write(line)

    reader = threading.Thread(target=pump, name="era-guard-pump", daemon=True)
    reader.start()
    for line in sys.stdin.buffer:
        log.write(line.decode().rstrip("\n") + "\n")
        log.flush()
        message = json.loads(line)
        refusal = _refusal(message, args.only) if isinstance(message, dict) else None
        if refusal is not None:
            write(json.dumps({"jsonrpc": "2.0", "id": message["id"],
                              "error": refusal}).encode())
            continue
        child.stdin.write(line)
        child.stdin.flush()
    child.stdin.close()
    child.wait(10)
    reader.join(5)
    log.close()


if __name__ == "__main__":
    main()
