"""``prompts/list``, ``prompts/get`` and ``completion/complete``.

A prompt handler returns a string (one user message), or a list of messages: each a
``PromptMessage``, a ``{"role", "content"}`` dict or a ``(role, content)`` pair, where content
is a string, a content block dict or a typed block (images, embedded resources). Unknown prompt
and missing required arguments are -32602; a handler that raises answers -32603 (type only).

Completion answers for a prompt argument or a resource-template variable; without a registered
completer the answer is an empty list. At most 100 values go out; ``hasMore`` says when there
were more. A handler that raises answers -32603 naming only the exception's type (as resources
do): its message may hold what the client should not see, and the traceback goes to stderr.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping
from typing import Any

from mcpsync.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS
from mcpsync.server._context import Context, _stderr
from mcpsync.server._request import Refusal, Request
from mcpsync.server._results import to_prompt_messages
from mcpsync.server._rounds import PASS_THROUGH, run_rounds
from mcpsync.server._services import Services, args_of, no_cursor

__all__ = ["complete", "get_prompt", "list_prompts"]

MAX_COMPLETIONS = 100


def list_prompts(svc: Services, req: Request) -> dict[str, Any]:
    no_cursor(req)
    return svc.cache({"prompts": svc.registry.prompt_list}, req)


def get_prompt(svc: Services, req: Request) -> dict[str, Any]:
    name = req.params.get("name")
    if not isinstance(name, str):
        raise Refusal(INVALID_PARAMS, "prompts/get needs params with a string 'name'")
    entry = svc.registry.prompts.get(name)
    if entry is None:
        raise Refusal(INVALID_PARAMS, f"unknown prompt {name!r}", {"name": name})
    arguments = args_of(req.params, f"prompts/get {name!r}")
    for declared in entry.wire.get("arguments", ()):
        if declared.get("required") and declared["name"] not in arguments:
            raise Refusal(INVALID_PARAMS, f"prompt {name!r} needs the argument "
                          f"{declared['name']!r}")
    bad = [k for k, v in arguments.items() if not isinstance(v, str)]
    if bad:
        raise Refusal(INVALID_PARAMS, f"prompt {name!r}: argument values must be strings "
                      f"({', '.join(map(repr, bad))} are not)")

    def body(ctx: Context) -> dict[str, Any]:
        try:
            value = entry.handler(arguments, ctx)
            messages = to_prompt_messages(value, req.version)
        except PASS_THROUGH:
            raise
        except Exception as exc:
            _stderr(f"prompt {name!r} failed:\n"
                    + "".join(traceback.format_exception(exc)).rstrip())
            raise Refusal(INTERNAL_ERROR,
                          f"prompt {name!r} failed: {type(exc).__name__}") from None
        out: dict[str, Any] = {"messages": messages}
        if entry.wire.get("description"):
            out["description"] = entry.wire["description"]
        return out

    return run_rounds(svc, req, name, arguments, body)


def complete(svc: Services, req: Request) -> dict[str, Any]:
    params = req.params
    ref = params.get("ref")
    argument = params.get("argument")
    if not isinstance(ref, Mapping) or not isinstance(argument, Mapping):
        raise Refusal(INVALID_PARAMS, "completion/complete needs 'ref' and 'argument' objects")
    name, value = argument.get("name"), argument.get("value")
    if not isinstance(name, str) or not isinstance(value, str):
        raise Refusal(INVALID_PARAMS, "completion/complete: argument needs string 'name' and "
                      "'value'")
    registry = svc.registry
    kind = ref.get("type")
    if kind == "ref/prompt":
        key = ref.get("name")
        if not isinstance(key, str) or key not in registry.prompts:
            raise Refusal(INVALID_PARAMS, f"completion/complete: unknown prompt {key!r}")
    elif kind == "ref/resource":
        key = ref.get("uri")
        if not isinstance(key, str) or (key not in registry.templates
                                        and key not in registry.resources):
            raise Refusal(INVALID_PARAMS, f"completion/complete: unknown resource or "
                          f"template {key!r}")
    else:
        raise Refusal(INVALID_PARAMS, f"completion/complete: unknown ref type {kind!r}")
    context = params.get("context")
    known = context.get("arguments") if isinstance(context, Mapping) else None
    resolved = {k: v for k, v in known.items() if isinstance(v, str)} if isinstance(
        known, Mapping) else {}
    entry = registry.completions.get((str(kind), key))
    if entry is None:
        return {"completion": {"values": [], "hasMore": False}}
    try:
        got = entry.handler(name, value, resolved)
    except Refusal:
        raise
    except Exception as exc:
        _stderr("a completion handler failed:\n"
                + "".join(traceback.format_exception(exc)).rstrip())
        raise Refusal(INTERNAL_ERROR, f"completion for {key!r} failed: "
                      f"{type(exc).__name__}") from None
    total: Any = None
    has_more: Any = None
    if isinstance(got, Mapping):
        values, total, has_more = got.get("values", []), got.get("total"), got.get("hasMore")
    else:
        values = got
    values = [str(v) for v in (values or [])]
    out: dict[str, Any] = {"values": values[:MAX_COMPLETIONS]}
    if total is not None:
        out["total"] = total
    elif len(values) > MAX_COMPLETIONS:
        out["total"] = len(values)
    out["hasMore"] = bool(has_more) or len(values) > MAX_COMPLETIONS
    return {"completion": out}
