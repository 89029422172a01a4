"""A raw JSON-lines MCP server whose misbehaviour is chosen by ``argv[1]`` (a test peer).

Real servers do not produce most edge cases on demand: a silent answer to the era probe, an
empty ``{}`` discover result, endless pages, an unknown ``resultType``, endless
``input_required`` rounds, a version error in the middle of a session, server→client
requests the client must refuse. Each scenario below is a few lines; every request it sees is
also appended to ``$SCRIPTED_LOG`` (when set) so a test can check what was sent.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

MODE = sys.argv[1] if len(sys.argv) > 1 else "legacy"
MODERN = "2026-07-28"
PV = "io.modelcontextprotocol/protocolVersion"
INFO = {"name": "scripted", "version": "1.0"}
TOOLS = [{"name": "t", "inputSchema": {"type": "object"}}]
_ids = iter(range(1000, 10**6))
_state: dict[str, Any] = {"calls": 0, "pages": 0}


def send(msg: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def result(rid: Any, res: Any) -> None:
    send({"jsonrpc": "2.0", "id": rid, "result": res})


def error(rid: Any, code: int, message: str, data: Any = None) -> None:
    err: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    send({"jsonrpc": "2.0", "id": rid, "error": err})


def ask(method: str, params: Any) -> dict[str, Any]:
    """Send a server→client request and wait for its answer (legacy only)."""
    rid = next(_ids)
    send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
    while True:
        line = sys.stdin.readline()
        if not line:
            sys.exit(0)
        msg = json.loads(line)
        if msg.get("id") == rid and "method" not in msg:
            return dict(msg)


def discover(rid: Any) -> None:
    result(rid, {"resultType": "complete", "supportedVersions": [MODERN],
                 "capabilities": {"tools": {}, "resources": {"subscribe": True}},
                 "ttlMs": 0, "cacheScope": "public", "_meta": {
                     "io.modelcontextprotocol/serverInfo": INFO}})


def initialize(rid: Any, params: dict[str, Any]) -> None:
    asked = params.get("protocolVersion")
    answer = {"legacy-old": "2024-11-05", "legacy-bogus": "1999-01-01"}.get(MODE, asked)
    if MODE == "legacy-init-retry" and asked == "2025-11-25":
        error(rid, -32602, "Unsupported protocol version",
              {"supported": ["2025-06-18"], "requested": asked})
        return
    result(rid, {"protocolVersion": answer, "serverInfo": INFO,
                 "capabilities": {"tools": {}, "logging": {}, "resources": {"subscribe": True},
                                  "completions": {}},
                 "instructions": "scripted"})


def page(rid: Any, params: dict[str, Any], modern: bool) -> None:
    cursor = params.get("cursor")
    _state["pages"] += 1
    extra: dict[str, Any] = {"resultType": "complete", "ttlMs": 60000} if modern else {}
    if MODE == "endless-pages":
        result(rid, {"tools": [], "nextCursor": str(_state["pages"]), **extra})
    elif cursor is None:
        result(rid, {"tools": TOOLS, "nextCursor": "", **extra})   # "" is a cursor
    elif cursor == "":
        result(rid, {"tools": [{"name": "u", "inputSchema": {"type": "object"},
                                "outputSchema": {"type": "object", "required": ["n"],
                                                 "properties": {"n": {"type": "integer"}}}}],
                     "nextCursor": None, **extra})


def call(rid: Any, params: dict[str, Any], modern: bool) -> None:
    _state["calls"] += 1
    args = params.get("arguments") or {}
    if args.get("mode") == "rounds":
        result(rid, {"resultType": "input_required", "requestState": "s"})
    elif args.get("mode") == "one-round":
        if params.get("requestState") == "go":
            result(rid, {"resultType": "complete", "content": [
                {"type": "text", "text": json.dumps(params.get("inputResponses"))}]})
        else:
            result(rid, {"resultType": "input_required", "requestState": "go",
                         "inputRequests": {"who": {"method": "elicitation/create", "params": {
                             "message": "name?", "requestedSchema": {"type": "object",
                             "properties": {"name": {"type": "string"}}}}}}})
    elif args.get("mode") == "weird":
        result(rid, {"resultType": "mystery"})
    elif args.get("mode") == "two-rounds":
        state = params.get("requestState")
        if state is None:
            result(rid, {"resultType": "input_required", "requestState": "r1",
                         "inputRequests": {"who": {"method": "elicitation/create", "params": {
                             "message": "name?", "requestedSchema": {"type": "object",
                             "properties": {"name": {"type": "string", "default": "X"}}}}}}})
        elif state == "r1":
            result(rid, {"resultType": "input_required",
                         "inputResponses_seen": params.get("inputResponses")})
        else:
            result(rid, {"resultType": "complete", "content": [
                {"type": "text", "text": "bad"}]})
    elif args.get("mode") == "version-later" and _state["calls"] == 1:
        error(rid, -32022, "unsupported", {"supported": [MODERN], "requested": MODERN})
    elif args.get("mode") == "url-required":
        error(rid, -32042, "needs url", {"elicitations": [
            {"mode": "url", "url": "https://x.example", "elicitationId": "e1",
             "message": "go"}]})
    elif args.get("mode") == "ask" and not modern:
        answers = [ask("ping", {}), ask("bogus/method", {}),
                   ask("elicitation/create", {"mode": "url", "url": "https://x",
                                              "elicitationId": "e", "message": "m"}),
                   ask("sampling/createMessage", {"messages": [], "maxTokens": 5})]
        send({"jsonrpc": "2.0", "method": "notifications/elicitation/complete",
              "params": {"elicitationId": "e"}})
        result(rid, {"content": [{"type": "text", "text": json.dumps(answers)}]})
    elif args.get("mode") == "notify":
        send({"jsonrpc": "2.0", "method": "notifications/custom", "params": {"n": 1}})
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        result(rid, {"content": []})
    elif args.get("mode") == "exit":
        sys.exit(3)
    else:
        result(rid, {"content": [{"type": "text", "text": json.dumps(params)}],
                     "structuredContent": args.get("structured"),
                     **({"resultType": "complete"} if modern else {})})


def main() -> None:
    log = os.environ.get("SCRIPTED_LOG")
    for line in sys.stdin:
        msg = json.loads(line)
        if log:
            with open(log, "a") as fh:
                fh.write(json.dumps(msg) + "\n")
        method, rid = msg.get("method"), msg.get("id")
        params = msg.get("params") or {}
        if rid is None or method is None:
            continue
        modern = PV in (params.get("_meta") or {})
        if method == "server/discover":
            if MODE.startswith("legacy-silent"):
                _state["probe"] = rid   # legacy-silent-late answers it after initialize
                continue
            if MODE == "modern-deaf":   # never answers the probe, refuses initialize
                continue
            if MODE == "exit-on-probe":
                sys.exit(1)
            if MODE == "empty-discover":
                result(rid, {})
            elif MODE == "modern-32022" and params["_meta"][PV] == MODERN and \
                    not _state.get("retried"):
                _state["retried"] = True
                error(rid, -32022, "unsupported", {"supported": [MODERN], "requested": "x"})
            elif MODE.startswith(("modern", "endless-pages")):
                discover(rid)
            else:
                error(rid, -32601, "Method not found")
        elif method == "initialize":
            if MODE == "silent-init":   # never answers: the client's initialize times out
                continue
            if MODE in ("modern-only", "modern-deaf"):
                error(rid, -32602, "Unsupported protocol version",
                      {"supported": [MODERN], "requested": params.get("protocolVersion")})
                continue
            initialize(rid, params)
            if MODE == "legacy-silent-late":
                discover(_state["probe"])   # a late, valid answer: must be ignored
        elif method == "tools/list":
            page(rid, params, modern)
        elif method == "tools/call":
            call(rid, params, modern)
        elif method in ("ping", "resources/subscribe", "resources/unsubscribe",
                        "logging/setLevel"):
            result(rid, {})
        elif method == "completion/complete":
            result(rid, {"completion": {"values": [json.dumps(params)], "hasMore": False}})
        else:
            error(rid, -32601, "Method not found")


if __name__ == "__main__":
    main()
