"""Shared helpers for the session-engine tests: a scriptable peer server and fixtures.

The peer is a real subprocess speaking newline-delimited JSON-RPC; each request runs on its own
thread, so slow methods overlap. Its methods are test levers: ``echo``, ``sleep``, ``ignore``
(never answered), ``ids`` and ``cancelled`` (what it has seen), ``garbage``, ``huge``, ``die``,
``notify``, ``progress`` and ``ask`` (a server->client request).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest

from mcpsync.session import Session
from mcpsync.transport.stdio import StdioTransport

PEER = r'''
import json, os, sys, threading, time
lock = threading.Lock()
ids, cancelled, waiting = [], [], {}
state = {"active": 0, "max_active": 0, "next": 0}

def write(obj=None, raw=None):
    data = raw if raw is not None else (json.dumps(obj) + "\n").encode()
    with lock:
        os.write(1, data)

def reply(rid, result):
    write({"jsonrpc": "2.0", "id": rid, "result": result})

def ask(method, params):
    with lock:
        state["next"] += 1
        sid = "s%d" % state["next"]
        ev = threading.Event()
        waiting[sid] = [ev, None]
    msg = {"jsonrpc": "2.0", "id": sid, "method": method}
    if params is not None:
        msg["params"] = params
    write(msg)
    ev.wait(10)
    return waiting.pop(sid)[1]

def handle(msg):
    rid, method, p = msg.get("id"), msg.get("method"), msg.get("params") or {}
    if method == "echo":
        reply(rid, p)
    elif method == "sleep":
        with lock:
            state["active"] += 1
            state["max_active"] = max(state["max_active"], state["active"])
        time.sleep(p.get("ms", 50) / 1000.0)
        with lock:
            state["active"] -= 1
        reply(rid, {"slept": p.get("ms", 50), "max_active": state["max_active"]})
    elif method == "ignore":
        pass
    elif method == "ids":
        reply(rid, list(ids))
    elif method == "cancelled":
        reply(rid, list(cancelled))
    elif method == "garbage":
        for i in range(p.get("n", 1)):
            write(raw=b"this is not json %d\n" % i)
        reply(rid, "after garbage")
    elif method == "bad_response":
        write(raw=b'{"jsonrpc":"2.0","id":%d,"result":1,"error":{"code":1,"message":"x"}}\n' % rid)
    elif method == "null_error":
        write({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "who?"}})
        reply(rid, "ok")
    elif method == "huge":
        write(raw=b'{"jsonrpc":"2.0","id":%d,"result":"' % rid + b"x" * p["bytes"] + b'"}\n')
    elif method == "die":
        sys.stderr.write(p.get("stderr", ""))
        sys.stderr.flush()
        os._exit(p.get("code", 1))
    elif method == "notify":
        for i in range(p.get("count", 1)):
            write({"jsonrpc": "2.0", "method": "test/note", "params": {"i": i}})
        reply(rid, "notified")
    elif method == "string_id":
        write({"jsonrpc": "2.0", "id": str(rid), "result": "wrong kind of id"})
        write({"jsonrpc": "2.0", "method": "notifications/progress",
               "params": {"progressToken": 999999, "progress": 1}})
        reply(rid, "right id")
    elif method == "notify_later":
        time.sleep(p.get("before", 0) / 1000.0)
        reply(rid, "later")
        time.sleep(p.get("ms", 50) / 1000.0)
        write({"jsonrpc": "2.0", "method": "test/later", "params": {}})
        if p.get("ask"):
            ask("ping", None)
    elif method == "progress":
        token = (p.get("_meta") or {}).get("progressToken")
        for i in range(p.get("steps", 3)):
            time.sleep(p.get("ms", 0) / 1000.0)
            write({"jsonrpc": "2.0", "method": "notifications/progress",
                   "params": {"progressToken": token, "progress": i + 1,
                              "total": p.get("steps", 3), "message": "step %d" % (i + 1)}})
        time.sleep(p.get("ms", 0) / 1000.0)
        reply(rid, {"token": token, "params": p})
    elif method == "ask":
        reply(rid, ask(p["method"], p.get("params")))
    else:
        error = {"code": -32601, "message": "no " + str(method)}
        write({"jsonrpc": "2.0", "id": rid, "error": error})

for line in sys.stdin.buffer:
    msg = json.loads(line)
    if "method" not in msg:
        slot = waiting.get(msg.get("id"))
        if slot is not None:
            slot[1] = msg.get("result", {"error": msg.get("error")})
            slot[0].set()
        continue
    if "id" not in msg:
        if msg["method"] == "notifications/cancelled":
            cancelled.append(msg["params"])
        continue
    ids.append(msg["id"])
    threading.Thread(target=handle, args=(msg,), daemon=True).start()
'''

DEMO_SERVER = [sys.executable, "-m", "mcpsync.demo"]


def peer_argv() -> list[str]:
    return [sys.executable, "-c", PEER]


def reader_from_the_start(transport: StdioTransport) -> StdioTransport:
    """Make ``transport``'s session start its background reader at once, as on a transport
    without the idle watch, instead of when one is first needed (``Role.absent``): for the
    tests of the reader's own hand-overs, which need it there from the first call."""
    transport.watch_idle = lambda on_ready, on_full: False  # type: ignore[method-assign]
    return transport


def open_session(argv: list[str] | None = None, *, name: str = "peer",
                 max_frame_bytes: int | None = None, reader: bool = False,
                 **options: object) -> Session:
    """Start a transport and a session on it; ``reader``: with its background reader from
    the start (see :func:`reader_from_the_start`)."""
    kwargs: dict[str, object] = {}
    if max_frame_bytes is not None:
        kwargs["max_frame_bytes"] = max_frame_bytes
    transport = StdioTransport(argv or peer_argv(), name=name, **kwargs)  # type: ignore[arg-type]
    transport.start()
    if reader:
        reader_from_the_start(transport)
    session = Session(transport, name=name, **options)  # type: ignore[arg-type]
    session.start()
    return session


def peer_session(reader: bool = False) -> Iterator[Session]:
    """Body of each test module's ``peer`` fixture: a session on the scriptable peer, closed
    after the test (the module's fixture also asks for ``no_leaks``)."""
    session = open_session(reader=reader)
    try:
        yield session
    finally:
        session.close()


def record_lines_written(session: Session, monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every request line ``session`` writes from now on, newline included, in order: what
    its ``_send_until`` is given, and what its transport's exchange is given where it has
    one (a stdio peer's tool call writes its line there). The writes still happen."""
    lines: list[bytes] = []
    send = session._send_until

    def spy_send(frame: bytes, deadline: float, ended: bool = False) -> None:
        lines.append(frame if ended else frame + b"\n")   # the line written
        send(frame, deadline, ended)

    monkeypatch.setattr(session, "_send_until", spy_send)
    exchange = session._exchange
    if exchange is not None:
        def spy_exchange(line: bytes, call: Any, role: Any, timeout: float) -> Any:
            lines.append(line)
            return exchange(line, call, role, timeout)

        monkeypatch.setattr(session, "_exchange", spy_exchange)
    return lines
