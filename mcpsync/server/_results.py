"""Turning whatever a tool handler returned into a wire ``CallToolResult``.

Handlers return what is natural in Python (a string, a dict, ``None``), and this module is the
one place that decides how each becomes ``content`` and ``structuredContent``, per revision.
A value that cannot be serialised raises ``TypeError``/``ValueError`` here, which the server
answers with -32603: that is the tool author's bug, not the caller's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from mcpsync.types import CallToolResult

__all__ = ["error_result", "to_call_tool_result"]

# Under these revisions structuredContent is typed as an object; 2026-07-28 allows any JSON.
_OBJECT_ONLY_STRUCTURED = frozenset({"2025-06-18", "2025-11-25"})
_CONTENT_TYPES = frozenset({"text", "image", "audio", "resource", "resource_link"})


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def error_result(text: str) -> dict[str, Any]:
    """An ``isError`` result with one text block: how tool failures reach the model."""
    return {"content": [_text(text)], "isError": True}


def _is_content_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(
        isinstance(item, Mapping) and item.get("type") in _CONTENT_TYPES for item in value)


def _block_dict(block: Any) -> dict[str, Any]:
    to_dict = getattr(block, "to_dict", None)
    if callable(to_dict):
        return dict(to_dict())
    raw = getattr(block, "raw", None)
    if isinstance(raw, Mapping) and raw:
        return dict(raw)
    raise TypeError(f"content block {block!r} has no wire form; build it with from_dict()")


def _from_result_object(value: CallToolResult) -> dict[str, Any]:
    """A ``CallToolResult`` goes out as it is: its wire dict when it came from one, else its
    fields (so a handler can build one by hand to set ``is_error`` or several blocks)."""
    if value.raw:
        return dict(value.raw)
    out: dict[str, Any] = {"content": [_block_dict(block) for block in value.content]}
    if value.structured is not None:
        out["structuredContent"] = value.structured
    if value.is_error:
        out["isError"] = True
    if value.meta is not None:
        out["_meta"] = dict(value.meta)
    out.update(value.extra)
    return out


def to_call_tool_result(value: Any, *, structured: bool, version: str) -> dict[str, Any]:
    """Convert a handler's return ``value``; ``structured`` says the tool has an output schema.

    With an output schema the value becomes ``structuredContent`` plus a text block of its
    compact JSON in every revision (older clients read the text). Under 2025-06-18 and
    2025-11-25 only an object may be structured content, so a non-object there is sent as text
    alone rather than as a result those clients would reject.
    """
    if isinstance(value, CallToolResult):
        return _from_result_object(value)
    if structured:
        text = _compact(value)  # raises for a value that is not JSON: answered with -32603
        out: dict[str, Any] = {"content": [_text(text)]}
        if isinstance(value, dict) or version not in _OBJECT_ONLY_STRUCTURED:
            out["structuredContent"] = value
        return out
    if value is None:
        return {"content": []}
    if isinstance(value, str):
        return {"content": [_text(value)]}
    if _is_content_list(value):
        return {"content": [dict(item) for item in value]}
    try:
        text = _compact(value)
    except (TypeError, ValueError):
        text = str(value)
    return {"content": [_text(text)]}
