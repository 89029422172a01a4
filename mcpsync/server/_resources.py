"""``resources/list``, ``resources/templates/list``, ``resources/read`` and the legacy
``resources/subscribe`` / ``resources/unsubscribe``.

A read is answered by the resource registered at exactly that URI, else by the first template
(in registration order) that matches it. A URI nobody serves, or a handler returning ``None``,
is "not found": -32002 under the legacy revisions and -32602 under 2026-07-28, both with
``data.uri``; an empty ``contents`` is never sent for it. A handler that raises answers -32603
with the exception's type (its traceback goes to stderr), since no ``isError`` exists here.
"""

from __future__ import annotations

import base64
import traceback
from collections.abc import Mapping
from typing import Any

from mcpsync.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, RESOURCE_NOT_FOUND
from mcpsync.server._asking import InputNeeded, MissingCapability
from mcpsync.server._context import Context, _stderr
from mcpsync.server._request import Refusal, Request
from mcpsync.server._rounds import run_rounds
from mcpsync.server._services import Services, no_cursor

__all__ = ["find", "list_resources", "list_templates", "not_found", "read_resource", "uri_of"]

_PASS_THROUGH = (InputNeeded, MissingCapability, Refusal)


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
        except _PASS_THROUGH:
            raise
        except Exception as exc:
            raise _failed(req, uri, exc) from None
        if value is None:
            raise not_found(req, uri)
        return {"contents": contents(value, uri, mime_type)}

    out = run_rounds(svc, req, uri, {}, body)
    if out.get("resultType") == "input_required":
        return out
    return svc.cache(out, req, entry.ttl_ms, entry.cache_scope)


def _failed(req: Request, uri: str, exc: BaseException) -> Refusal:
    _stderr(f"reading resource {uri!r} failed:\n"
            + "".join(traceback.format_exception(exc)).rstrip())
    return Refusal(INTERNAL_ERROR, f"reading resource {uri!r} failed: {type(exc).__name__}",
                   {"uri": uri})


def contents(value: Any, uri: str, mime_type: Any) -> list[dict[str, Any]]:
    """A handler's return value as ``contents``: str (text), bytes (blob), a contents dict or
    ``ResourceContents``, or a list of them."""
    items = value if isinstance(value, list) else [value]
    if not items:
        raise ValueError(f"the handler of resource {uri!r} returned an empty list; return None "
                         "for a resource that does not exist")
    out: list[dict[str, Any]] = []
    for item in items:
        if isinstance(item, str):
            block: dict[str, Any] = {"uri": uri, "text": item}
        elif isinstance(item, (bytes, bytearray, memoryview)):
            block = {"uri": uri, "blob": base64.b64encode(bytes(item)).decode("ascii")}
        elif isinstance(item, Mapping):
            block = dict(item)
            block.setdefault("uri", uri)
        elif hasattr(item, "to_dict"):
            block = dict(item.to_dict())
        elif hasattr(item, "raw") and isinstance(item.raw, Mapping) and item.raw:
            block = dict(item.raw)
        elif hasattr(item, "uri") and (getattr(item, "text", None) is not None
                                       or getattr(item, "blob", None) is not None):
            block = {"uri": item.uri}
            if item.text is not None:
                block["text"] = item.text
            else:
                block["blob"] = item.blob
            if getattr(item, "mime_type", None):
                block["mimeType"] = item.mime_type
        else:
            raise TypeError(f"the handler of resource {uri!r} returned {type(item).__name__}; "
                            "return str, bytes, ResourceContents or a list of them")
        if isinstance(mime_type, str) and "mimeType" not in block:
            block["mimeType"] = mime_type
        if "text" not in block and "blob" not in block:
            raise ValueError(f"resource contents for {uri!r} need 'text' or 'blob'")
        out.append(block)
    return out
