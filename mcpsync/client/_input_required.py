"""The multi-round-trip loop of the modern era.

See docs/architecture.md, "Callbacks and input required".

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

from mcpsync.client._callbacks import Callbacks
from mcpsync.errors import InputRoundsExceeded, ProtocolError
from mcpsync.protocol import describe_call

__all__ = ["INPUT_REQUIRED_METHODS", "check_result_type", "next_round_params", "run_input_rounds"]

INPUT_REQUIRED_METHODS = frozenset({"tools/call", "prompts/get", "resources/read"})


def check_result_type(method: str, result: Any, *, params: Any = None,
                      server: str | None = None) -> str:
    """Return ``"complete"`` or ``"input_required"``; anything else breaks the protocol.

    An absent ``resultType`` means complete (older servers); an unknown value MUST be
    treated as invalid, and ``input_required`` is only legal on the three MRTR methods.
    """
    if not isinstance(result, dict):
        raise ProtocolError(f"{describe_call(method, params, server)}: the result is not an "
                            f"object: {result!r:.200}", server=server, method=method)
    kind = result.get("resultType")
    if kind is None or kind == "complete":
        return "complete"
    if kind == "input_required" and method in INPUT_REQUIRED_METHODS:
        return "input_required"
    raise ProtocolError(f"{describe_call(method, params, server)}: the server answered with "
                        f"an unknown resultType {kind!r}", server=server, method=method)


def run_input_rounds(method: str, params: Mapping[str, Any], result: dict[str, Any], *,
                     send: Callable[[dict[str, Any]], Any], callbacks: Callbacks,
                     max_rounds: int, server: str | None = None) -> dict[str, Any]:
    """Drive ``input_required`` answers until the server completes; return the final result.

    ``result`` is the first answer (already known to be ``input_required``); ``send`` performs
    one wire round with the given params. More than ``max_rounds`` input-required answers
    raise :class:`InputRoundsExceeded`. The round fields are built fresh for each retry from
    the original ``params`` and never leak into other requests.
    """
    rounds = 0
    while check_result_type(method, result, params=params, server=server) == "input_required":
        rounds += 1
        result = send(next_round_params(method, params, result, callbacks=callbacks,
                                        round_number=rounds, max_rounds=max_rounds,
                                        server=server))
    return result


def next_round_params(method: str, params: Mapping[str, Any], result: Mapping[str, Any], *,
                      callbacks: Callbacks, round_number: int, max_rounds: int,
                      server: str | None = None) -> dict[str, Any]:
    """The params of input-required retry number ``round_number`` (1-based): the original
    ``params`` plus ``inputResponses`` (every ``inputRequests`` entry answered through the
    callbacks) and ``requestState`` echoed exactly, each only when the server gave it.
    Past ``max_rounds`` raises :class:`InputRoundsExceeded`.
    """
    if round_number > max_rounds:
        raise InputRoundsExceeded(
            f"{describe_call(method, params, server)}: the server asked for input more than "
            f"{max_rounds} times in a row; raise max_input_rounds if that is expected",
            server=server, method=method)
    requests = result.get("inputRequests")
    retry = dict(params)
    if requests is not None:
        if not isinstance(requests, Mapping):
            raise ProtocolError(f"{describe_call(method, params, server)}: inputRequests is "
                                "not an object", server=server, method=method)
        retry["inputResponses"] = {
            key: callbacks.answer_input_request(key, req) for key, req in requests.items()}
    if "requestState" in result:
        retry["requestState"] = result["requestState"]
    return retry
