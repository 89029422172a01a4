"""How :class:`~mcpsync.client._callbacks.Callbacks` answers a server's request: running
the sampling, elicitation or roots callback and shaping its result for the wire.

Every client holds its callbacks, but a connect-and-call never answers a request: ``import
mcpsync.client`` does not compile this. The methods of ``Callbacks`` that answer
(``answer``, ``answer_input_request``, ``elicitation_complete``) import their function from
here when they run; each takes the callbacks as ``callbacks`` and does what the method did.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from mcpsync._codes import INVALID_PARAMS, METHOD_NOT_FOUND
from mcpsync.client._callbacks import Callbacks, _remote, load_requests
from mcpsync.errors import ProtocolError, RemoteError

load_requests()   # the request types, built here first: a Ctrl-C meanwhile stays one
from mcpsync.client._requests import ElicitationRequest, SamplingRequest  # noqa: E402

_log = logging.getLogger("mcpsync.client")

_CALLBACK_NAMES = {"sampling/createMessage": "sampling", "elicitation/create": "elicitation",
                   "roots/list": "roots"}


def apply_schema_defaults(schema: Any, content: Any) -> dict[str, Any]:
    """Fill every field the callback left out with the schema's ``default`` (SEP-1034).

    The user accepted a form; a field with a default that they did not touch means "the
    default", and the server should not have to guess that.
    """
    out = dict(content) if isinstance(content, Mapping) else {}
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    if isinstance(properties, Mapping):
        for key, prop in properties.items():
            if key not in out and isinstance(prop, Mapping) and "default" in prop:
                out[key] = prop["default"]
    return out


def answer_input_request(callbacks: Callbacks, key: str, request: Any) -> dict[str, Any]:
    """:meth:`Callbacks.answer_input_request`."""
    if not isinstance(request, Mapping) or not isinstance(request.get("method"), str):
        raise ProtocolError(f"input request {key!r} is not a {{method, params}} object")
    method = request["method"]
    if not callbacks.declared(method):
        raise ProtocolError(
            f"the server asked for {method!r} (input request {key!r}), which this client "
            "did not declare; pass the matching callback to connect()")
    params = request.get("params")
    try:
        return answer(callbacks, method, params if isinstance(params, Mapping) else {})
    except RemoteError as exc:
        raise ProtocolError(f"input request {key!r}: {exc.remote_message}") from exc


def answer(callbacks: Callbacks, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """:meth:`Callbacks.answer`."""
    try:
        return _answer(callbacks, method, params)
    except Exception as exc:
        if callbacks._guard is not None and not isinstance(exc, RemoteError):
            callbacks._guard.report(_CALLBACK_NAMES.get(method, method), exc)
        raise


def _answer(callbacks: Callbacks, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
    raw = dict(params)
    if method == "sampling/createMessage":
        assert callbacks.sampling is not None
        max_tokens = raw.get("maxTokens")
        tools = raw.get("tools")
        req = SamplingRequest(
            messages=list(raw.get("messages") or []),
            max_tokens=max_tokens if isinstance(max_tokens, int) else None,
            system_prompt=raw.get("systemPrompt") if isinstance(
                raw.get("systemPrompt"), str) else None,
            tools=list(tools) if isinstance(tools, list) else None,
            params=raw)
        return _result_dict(callbacks.sampling(req), "sampling")
    if method == "elicitation/create":
        return _elicit(callbacks, raw)
    if method == "roots/list":
        return callbacks.list_roots()
    raise _remote(METHOD_NOT_FOUND, f"Method not found: {method}")


def _elicit(callbacks: Callbacks, raw: dict[str, Any]) -> dict[str, Any]:
    assert callbacks.elicitation is not None
    mode = raw.get("mode", "form")  # a missing mode MUST be treated as form
    if mode not in ("form", "url") or (mode == "url" and not callbacks.elicitation_url):
        raise _remote(INVALID_PARAMS, f"elicitation mode {mode!r} was not declared")
    schema = raw.get("requestedSchema")
    url = raw.get("url")
    eid = raw.get("elicitationId")
    req = ElicitationRequest(
        mode=mode, message=str(raw.get("message", "")),
        requested_schema=dict(schema) if isinstance(schema, Mapping) else None,
        url=url if isinstance(url, str) else None,
        elicitation_id=eid if isinstance(eid, str) else None,
        params=raw)
    result = _result_dict(callbacks.elicitation(req), "elicitation")
    if result.get("action") == "accept" and mode == "form":
        result["content"] = apply_schema_defaults(schema, result.get("content"))
    return result


def elicitation_complete(callbacks: Callbacks, params: Any) -> None:
    """:meth:`Callbacks.elicitation_complete`."""
    hook = getattr(callbacks.elicitation, "on_complete", None)
    eid = params.get("elicitationId") if isinstance(params, Mapping) else None
    if callable(hook) and isinstance(eid, str):
        if callbacks._guard is not None:
            hook = callbacks._guard.wrap("elicitation on_complete", hook)
        hook(eid)
    else:
        _log.debug("elicitation %r completed (no on_complete hook)", eid)


def _result_dict(value: Any, what: str) -> dict[str, Any]:
    if isinstance(value, Mapping):
        return dict(value)
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        result = to_dict()
        if isinstance(result, Mapping):
            return dict(result)
    raise TypeError(f"the {what} callback must return a dict, got {type(value).__name__}")
