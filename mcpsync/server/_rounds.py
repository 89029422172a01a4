"""Running a handler that may ask the client for input, in the request's era.

Legacy: the handler gets a :class:`LegacyAsker` (made on its first ask) and simply blocks on
its asks. Modern
(2026-07-28): the answers gathered so far come back sealed in ``requestState``; they are opened
(bound to this server, method, target and arguments, 10 minutes at most), the new answer from
``inputResponses`` is added, and the handler runs with a :class:`ModernAsker` that replays them.
When it asks for something new, the request is answered ``input_required`` with that ask and
the sealed state of the answers so far.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mcpsync.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, MISSING_CLIENT_CAPABILITY
from mcpsync.server._asking import InputNeeded, LegacyAsker, MissingCapability, ModernAsker
from mcpsync.server._context import Context
from mcpsync.server._request import Refusal, Request
from mcpsync.server._services import Services

__all__ = ["ROUND_FIELDS", "run_rounds"]

ROUND_FIELDS = ("inputResponses", "requestState")
_START_OVER = ("send the request again without requestState and inputResponses to start over")


def run_rounds(svc: Services, req: Request, target: str, arguments: Any,
               body: Callable[[Context], dict[str, Any]]) -> dict[str, Any]:
    """Run ``body(ctx)`` and return its result, or the ``input_required`` result."""
    if not req.modern:   # the asker is built on the first ask: most handlers never ask
        return body(svc.context(req, None, make_asker=lambda: LegacyAsker(
            svc.outbox, req.call, req.capabilities, req.version, svc.settings.ask_timeout)))
    answers = _answers_so_far(svc, req, target, arguments)
    modern = ModernAsker(answers, req.capabilities)
    try:
        return body(svc.context(req, modern))
    except MissingCapability as missing:
        raise Refusal(MISSING_CLIENT_CAPABILITY,
                      f"{req.method} {target!r} needs to ask the client ({missing.method}) but "
                      f"this request did not declare the capability {missing.required}",
                      {"requiredCapabilities": missing.required}) from None
    except InputNeeded as need:
        from mcpsync.server._state import StateTooLarge

        payload = {"answers": answers, "pending": {"key": need.key, "method": need.method}}
        try:
            state = svc.settings.sealer().seal(payload, method=req.method, target=target,
                                               arguments=arguments)
        except StateTooLarge as exc:
            raise Refusal(INTERNAL_ERROR, f"{req.method} {target!r}: the answers gathered so "
                          f"far are too large to carry in requestState ({exc})") from None
        return {"resultType": "input_required",
                "inputRequests": {need.key: {"method": need.method, "params": need.params}},
                "requestState": state}


def _answers_so_far(svc: Services, req: Request, target: str,
                    arguments: Any) -> list[dict[str, Any]]:
    params = req.params
    token = params.get("requestState")
    responses = params.get("inputResponses")
    if token is None:
        if responses is not None:
            raise Refusal(INVALID_PARAMS, f"{req.method}: inputResponses came without the "
                          f"requestState they answer; {_START_OVER}")
        return []
    from mcpsync.server._state import StateRefused

    try:
        state = svc.settings.sealer().open(token, method=req.method, target=target,
                                           arguments=arguments)
    except StateRefused as exc:
        raise Refusal(INVALID_PARAMS, f"{req.method}: requestState refused ({exc.reason}): "
                      f"{exc}", {"reason": exc.reason}) from None
    answers = state.get("answers")
    pending = state.get("pending")
    if not isinstance(answers, list) or not isinstance(pending, dict):
        raise Refusal(INVALID_PARAMS, f"{req.method}: requestState is not one this server "
                      f"issued; {_START_OVER}")
    key = pending.get("key")
    if not isinstance(responses, dict) or key not in responses:
        raise Refusal(INVALID_PARAMS, f"{req.method}: inputResponses must answer {key!r}, the "
                      "input this server asked for")
    answer = responses[key]
    if not isinstance(answer, dict):
        raise Refusal(INVALID_PARAMS, f"{req.method}: the answer to {key!r} must be an object")
    return [*answers, {"method": pending.get("method"), "result": answer}]
