"""``tools/list`` and ``tools/call``, following the per-revision error table.

Unknown tool and malformed params are protocol errors (-32602). Arguments that fail the input
schema are -32602 up to 2025-06-18 and an ``isError`` result from 2025-11-25 on (the model
should see them). A handler that raises answers an ``isError`` result with the exception's
text; one that raises :class:`Refusal` answers that JSON-RPC error instead; asks for input
follow ``_rounds``.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

from mcpsync.jsonrpc import INVALID_PARAMS
from mcpsync.server._asking import StartTask
from mcpsync.server._context import Context, _stderr
from mcpsync.server._request import Refusal, Request
from mcpsync.server._results import error_result, to_call_tool_result
from mcpsync.server._rounds import PASS_THROUGH, run_rounds
from mcpsync.server._services import Services, args_of, no_cursor
from mcpsync.server._tasks import declares_tasks, missing_tasks

__all__ = ["call_tool", "list_tools"]

# Revisions where a tools/call argument that fails the schema is a protocol error (-32602);
# from 2025-11-25 on it is a tool execution error the model should see (isError).
_ARGS_ARE_PROTOCOL_ERRORS = frozenset({"2024-11-05", "2025-03-26", "2025-06-18"})


# outputSchema and structuredContent arrive together in 2025-06-18: before, neither exists.
_NO_OUTPUT_SCHEMA = frozenset({"2024-11-05", "2025-03-26"})


def list_tools(svc: Services, req: Request) -> dict[str, Any]:
    no_cursor(req)
    tools = svc.registry.tool_list
    if req.version in _NO_OUTPUT_SCHEMA:
        tools = [{k: v for k, v in wire.items() if k != "outputSchema"} if "outputSchema" in wire
                 else wire for wire in tools]
    return svc.cache({"tools": tools}, req)


def call_tool(svc: Services, req: Request) -> dict[str, Any]:
    params = req.params
    name = params.get("name")
    if not isinstance(name, str):
        raise Refusal(INVALID_PARAMS, "tools/call needs params with a string 'name'")
    arguments = args_of(params, f"tools/call {name!r}")
    entry = svc.registry.tools.get(name)
    if entry is None:
        raise Refusal(INVALID_PARAMS, f"unknown tool {name!r}", {"name": name})
    problem = entry.check(arguments)
    if problem is not None:
        text = f"invalid arguments for tool {name!r}: {problem}"
        if req.version in _ARGS_ARE_PROTOCOL_ERRORS:
            raise Refusal(INVALID_PARAMS, text)
        return error_result(text)

    def body(ctx: Context) -> dict[str, Any]:
        try:
            value = entry.handler(arguments, ctx)
        except PASS_THROUGH:
            raise
        except BaseException as exc:  # SystemExit from a tool too: it must not kill a worker
            # The model reads the message; the server's author needs the traceback.
            _stderr(f"tool {name!r} raised (answered as an isError result):\n"
                    + "".join(traceback.format_exception(exc)).rstrip())
            return error_result(f"{type(exc).__name__}: {exc}")
        return to_call_tool_result(value, structured=entry.structured, version=req.version)

    if entry.task_support is not None:
        return _as_task(svc, req, name, arguments, entry.task_support, entry.rounds_first, body)
    return run_rounds(svc, req, name, arguments, body)


def _as_task(svc: Services, req: Request, name: str, arguments: dict[str, Any], support: str,
             rounds_first: bool, body: Callable[[Context], dict[str, Any]]) -> dict[str, Any]:
    """A task tool's call: a task for a 2026-07-28 client that declared the extension, the
    plain result for others (-32021 when the tool requires a task)."""
    if not (req.modern and declares_tasks(req.capabilities)):
        if support == "required":
            raise missing_tasks(f"tool {name!r}")
        return run_rounds(svc, req, name, arguments, body)
    if not rounds_first:
        return dict(svc.tasks.start(req, name, {}, body))

    def gathering(ctx: Context) -> dict[str, Any]:
        ctx._task_hook = _begin
        return body(ctx)

    try:
        return run_rounds(svc, req, name, arguments, gathering)
    except StartTask as begin:
        return dict(svc.tasks.start(req, name, begin.answers, body))


def _begin(ctx: Context) -> None:
    """``ctx.start_task()`` during the rounds: answer the request with a task."""
    asker = ctx._asker
    raise StartTask(getattr(asker, "answers", {}))
