"""Running a handler that may ask the client for input, in the request's era.

Legacy: the handler gets a :class:`LegacyAsker` (made on its first ask) and simply blocks on
its asks. Modern
(2026-07-28): the answers gathered so far come back sealed in ``requestState``; they are opened
(bound to this server, method, target and arguments, 10 minutes at most), this request's
``inputResponses`` are added, and the handler runs with a :class:`ModernAsker` that answers its
asks by key. When it asks for something unanswered, the request is answered ``input_required``
with every such ask under its key and the sealed state of the answers used so far.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from mcpsync.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, MISSING_CLIENT_CAPABILITY
from mcpsync.server._asking import (
    InputNeeded,
    LegacyAsker,
    MissingCapability,
    ModernAsker,
    StartTask,
    TaskCancelled,
)
from mcpsync.server._context import Context
from mcpsync.server._request import Refusal, Request
from mcpsync.server._services import Services

__all__ = ["PASS_THROUGH", "ROUND_FIELDS", "run_rounds"]

ROUND_FIELDS = ("inputResponses", "requestState")
#: What a handler's own error handling must let through to ``run_rounds`` and the router: a
#: 2026-07-28 ask without an answer, an undeclared capability, a chosen JSON-RPC error, and a
#: tool's move into a task (``ctx.start_task()``) or its task's cancellation.
PASS_THROUGH = (InputNeeded, MissingCapability, Refusal, StartTask, TaskCancelled)
_START_OVER = ("send the request again without requestState and inputResponses to start over")


def run_rounds(svc: Services, req: Request, target: str, arguments: Any,
               body: Callable[[Context], dict[str, Any]]) -> dict[str, Any]:
    """Run ``body(ctx)`` and return its result, or the ``input_required`` result."""
    if not req.modern:   # the asker is built on the first ask: most handlers never ask
        return body(svc.context(req, None, make_asker=lambda: LegacyAsker(
            svc.outbox, req.call, req.capabilities, svc.settings.ask_timeout)))
    answers = _answers(svc, req, target, arguments)
    modern = ModernAsker(answers, req.capabilities)
    try:
        return body(svc.context(req, modern))
    except MissingCapability as missing:
        raise Refusal(MISSING_CLIENT_CAPABILITY,
                      f"{req.method} {target!r} needs to ask the client ({missing.method}) but "
                      f"this request did not declare the capability {missing.required}",
                      {"requiredCapabilities": missing.required}) from None
    except InputNeeded as need:
        importlib.import_module("mcpsync.server._state")
        from mcpsync.server._state import StateTooLarge

        try:
            state = svc.settings.sealer().seal({"answers": modern.used}, method=req.method,
                                               target=target, arguments=arguments)
        except StateTooLarge as exc:
            raise Refusal(INTERNAL_ERROR, f"{req.method} {target!r}: the answers gathered so "
                          f"far are too large to carry in requestState ({exc})") from None
        return {"resultType": "input_required",
                "inputRequests": {key: {"method": method, "params": params}
                                  for key, (method, params) in need.requests.items()},
                "requestState": state}


def _answers(svc: Services, req: Request, target: str,
             arguments: Any) -> dict[str, dict[str, Any]]:
    """The answers this run may use: those of earlier rounds (sealed in ``requestState``,
    which must open: a stale, foreign or altered state is refused) and this request's
    ``inputResponses``. Answers are the client's word either way, so ones that come without
    a state are used too, and keys nobody asks for are ignored."""
    params = req.params
    responses = params.get("inputResponses")
    answers: dict[str, dict[str, Any]] = {}
    if isinstance(responses, dict):
        answers.update((k, v) for k, v in responses.items()
                       if isinstance(k, str) and isinstance(v, dict))
    elif responses is not None:
        raise Refusal(INVALID_PARAMS, f"{req.method}: inputResponses must be an object "
                      "mapping each input request's key to its answer")
    token = params.get("requestState")
    if token is None:
        return answers
    importlib.import_module("mcpsync.server._state")
    from mcpsync.server._state import StateRefused

    try:
        state = svc.settings.sealer().open(token, method=req.method, target=target,
                                           arguments=arguments)
    except StateRefused as exc:
        raise Refusal(INVALID_PARAMS, f"{req.method}: requestState refused ({exc.reason}): "
                      f"{exc}", {"reason": exc.reason}) from None
    earlier = state.get("answers")
    if not isinstance(earlier, dict):
        raise Refusal(INVALID_PARAMS, f"{req.method}: requestState is not one this server "
                      f"issued; {_START_OVER}")
    answers.update(earlier)   # what earlier rounds answered stands
    return answers
