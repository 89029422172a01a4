"""The multi-round-trip loop of the modern era (spec digest §7.4, client rules §5).

A modern server never sends requests; when ``tools/call``, ``prompts/get`` or
``resources/read`` needs the client (sampling, elicitation, roots) it answers
``resultType: "input_required"`` with ``inputRequests`` and/or ``requestState``. We answer
every request through the same callbacks that serve legacy servers, then send the *same*
method again with the original params plus ``inputResponses`` and the ``requestState`` echoed
exactly (only when given). Each retry is a fresh wire request, so it gets a new id and progress
token, and its own timeout: time spent in callbacks (a human filling a form) never counts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from mcpsync._callbacks import Callbacks
from mcpsync.errors import InputRoundsExceeded, ProtocolError

__all__ = ["INPUT_REQUIRED_METHODS", "check_result_type", "run_input_rounds"]

INPUT_REQUIRED_METHODS = frozenset({"tools/call", "prompts/get", "resources/read"})


def check_result_type(method: str, result: Any) -> str:
    """Return ``"complete"`` or ``"input_required"``; anything else breaks the protocol.

    An absent ``resultType`` means complete (older servers); an unknown value MUST be
    treated as invalid, and ``input_required`` is only legal on the three MRTR methods.
    """
    if not isinstance(result, dict):
        raise ProtocolError(f"the result of {method} is not an object: {result!r:.200}",
                            method=method)
    kind = result.get("resultType")
    if kind is None or kind == "complete":
        return "complete"
    if kind == "input_required" and method in INPUT_REQUIRED_METHODS:
        return "input_required"
    raise ProtocolError(f"the server answered {method} with an unknown resultType {kind!r}",
                        method=method)


def run_input_rounds(method: str, params: Mapping[str, Any], result: dict[str, Any], *,
                     send: Callable[[dict[str, Any]], Any], callbacks: Callbacks,
                     max_rounds: int) -> dict[str, Any]:
    """Drive ``input_required`` answers until the server completes; return the final result.

    ``result`` is the first answer (already known to be ``input_required``); ``send`` performs
    one wire round with the given params. More than ``max_rounds`` input-required answers
    raise :class:`InputRoundsExceeded`. The round fields are built fresh for each retry from
    the original ``params`` and never leak into other requests.
    """
    rounds = 0
    while check_result_type(method, result) == "input_required":
        rounds += 1
        if rounds > max_rounds:
            raise InputRoundsExceeded(
                f"the server asked for input more than {max_rounds} times in a row; raise "
                "max_input_rounds if that is expected", method=method)
        requests = result.get("inputRequests")
        retry = dict(params)
        if requests is not None:
            if not isinstance(requests, Mapping):
                raise ProtocolError(f"inputRequests of {method} is not an object", method=method)
            retry["inputResponses"] = {
                key: callbacks.answer_input_request(key, req) for key, req in requests.items()}
        if "requestState" in result:
            retry["requestState"] = result["requestState"]
        result = send(retry)
    return result
