"""``resources/list``, ``resources/templates/list``, ``resources/read`` and the legacy
``resources/subscribe`` / ``resources/unsubscribe``.

A read is answered by the resource registered at exactly that URI, else by the first template
(in registration order) that matches it. A URI nobody serves, or a handler returning ``None``,
is "not found": -32002 under the legacy revisions and -32602 under 2026-07-28, both with
``data.uri``; an empty ``contents`` is never sent for it. A handler that raises answers -32603
with the exception's type (its traceback goes to stderr), since no ``isError`` exists here.
"""

from __future__ import annotations

import traceback
from typing import Any

from mcpsync.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, RESOURCE_NOT_FOUND
from mcpsync.server._context import Context, _stderr
from mcpsync.server._request import Refusal, Request
from mcpsync.server._results import to_read_contents
from mcpsync.server._rounds import PASS_THROUGH, run_rounds
from mcpsync.server._services import Services, no_cursor

__all__ = ["find", "list_resources", "list_templates", "not_found", "read_resource", "uri_of"]



def list_resources(svc: Services, req: Request) -> dict[str, Any]:
    no_cursor(req)
    return svc.cache({"resources": svc.registry.resource_list}, req)


def list_templates(svc: Services, req: Request) -> dict[str, Any]:
    no_cursor(req)
    return svc.cache({"resourceTemplates": svc.registry.template_list}, req)


def uri_of(req: Request) -> str:
    uri = req.params.get("uri")
    if not isinstance(uri, str) or not uri:
        raise Refusal(INVALID_PARAMS, f"{req.method} needs params with a string 'uri'")
    return uri


def not_found(req: Request, uri: str) -> Refusal:
    code = INVALID_PARAMS if req.modern else RESOURCE_NOT_FOUND
    return Refusal(code, f"resource not found: {uri!r}", {"uri": uri})


def find(svc: Services, uri: str) -> tuple[Any, dict[str, str]] | None:
    """The entry serving ``uri`` and the template variables (empty for a fixed resource)."""
    registry = svc.registry
    entry = registry.resources.get(uri)
    if entry is not None:
        return entry, {}
    for template in registry.templates.values():
        variables = template.template.match(uri)
        if variables is not None:
            return template, variables
    return None


def read_resource(svc: Services, req: Request) -> dict[str, Any]:
    uri = uri_of(req)
    found = find(svc, uri)
    if found is None:
        raise not_found(req, uri)
    entry, variables = found
    mime_type = entry.wire.get("mimeType")

    def body(ctx: Context) -> dict[str, Any]:
        try:
            value = entry.handler(variables, ctx)
        except PASS_THROUGH:
            raise
        except Exception as exc:
            raise _failed(req, uri, exc) from None
        if value is None:
            raise not_found(req, uri)
        try:
            return {"contents": to_read_contents(value, uri, mime_type, req.version)}
        except (TypeError, ValueError) as exc:   # [] or a value that is no contents
            raise _failed(req, uri, exc) from None

    out = run_rounds(svc, req, uri, {}, body)
    if out.get("resultType") == "input_required":
        return out
    return svc.cache(out, req, entry.ttl_ms, entry.cache_scope)


def _failed(req: Request, uri: str, exc: BaseException) -> Refusal:
    _stderr(f"reading resource {uri!r} failed:\n"
            + "".join(traceback.format_exception(exc)).rstrip())
    return Refusal(INTERNAL_ERROR, f"reading resource {uri!r} failed: {type(exc).__name__}",
                   {"uri": uri})

