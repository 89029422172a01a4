"""The frames the guard writes to the host, and the one it rewrites.

A refusal is an ordinary JSON-RPC error on the call's own id, with ``error.data`` saying
why. A held call's progress is a ``notifications/progress`` on the host's own token. A
``tools/list`` answer in pass-through is rewritten only when a tool is hidden from it, so a
list with nothing to hide still reaches the host byte for byte.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from mcpsync._envelope import Envelope
from mcpsync.gateway._guard._core import Refusal

__all__ = ["filter_list_answer", "filter_tools", "progress_frame", "refusal_frame"]


def refusal_frame(raw_id: str, refusal: Refusal) -> str:
    """The JSON-RPC error answering the host's call ``raw_id`` (its id's own text)."""
    body = {"code": refusal.code, "message": refusal.message, "data": refusal.data()}
    return f'{{"jsonrpc":"2.0","id":{raw_id},"error":{json.dumps(body, ensure_ascii=False)}}}'


def progress_frame(token: Any, elapsed: float, message: str) -> str:
    """A progress notification for a call the guard holds (``progress``: seconds held)."""
    return json.dumps({"jsonrpc": "2.0", "method": "notifications/progress",
                       "params": {"progressToken": token, "progress": round(elapsed, 3),
                                  "message": message}}, ensure_ascii=False)


def filter_tools(result: Any, visible: Callable[[str], bool]) -> tuple[Any, bool]:
    """``(result, changed)``: a ``tools/list`` result without the tools ``visible`` hides."""
    if not isinstance(result, dict) or not isinstance(result.get("tools"), list):
        return result, False
    tools = result["tools"]
    kept = [t for t in tools if not (isinstance(t, dict) and isinstance(t.get("name"), str)
                                     and not visible(t["name"]))]
    if len(kept) == len(tools):
        return result, False
    return {**result, "tools": kept}, True


def filter_list_answer(env: Envelope, visible: Callable[[str], bool]) -> Envelope:
    """A pass-through ``tools/list`` answer, rewritten only when something is hidden."""
    raw = env.raw("result")
    if env.kind != "response" or raw is None or '"tools"' not in raw:
        return env
    try:
        result = json.loads(raw)
    except ValueError:
        return env
    filtered, changed = filter_tools(result, visible)
    if not changed:
        return env
    return env.replace("result", json.dumps(filtered, ensure_ascii=False,
                                            separators=(",", ":")))
