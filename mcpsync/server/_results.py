"""Turning what a handler returned into the wire result: tool results, prompt messages and
resource contents.

Handlers return what is natural in Python (a string, a dict, ``None``, typed blocks from
:mod:`mcpsync.types`), and this module is the one place that decides how each becomes wire
JSON, per revision; the blocks themselves are built in ``_content``. A value that cannot be
sent raises ``TypeError``/``ValueError`` here, which the server answers with -32603 (the
message goes to stderr): that is the handler author's bug, not the caller's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from mcpsync.errors import ProtocolError
from mcpsync.server._content import (
    BYTES_HINT,
    is_block,
    is_bytes,
    is_typed,
    text_block,
    to_block,
    to_revision,
)
from mcpsync.types import CallToolResult, PromptMessage, ResourceContents

__all__ = ["error_result", "to_call_tool_result", "to_prompt_messages", "to_read_contents"]

# Under these revisions structuredContent is typed as an object; 2026-07-28 allows any JSON.
_OBJECT_ONLY_STRUCTURED = frozenset({"2025-06-18", "2025-11-25"})
# Before 2025-06-18 structuredContent does not exist: the text block carries the value alone.
_NO_STRUCTURED = frozenset({"2024-11-05", "2025-03-26"})
_ROLES = ("user", "assistant")


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def error_result(text: str) -> dict[str, Any]:
    """An ``isError`` result with one text block: how tool failures reach the model."""
    return {"content": [text_block(text)], "isError": True}


# --- tools ------------------------------------------------------------------------------

def _is_content_list(value: Any) -> bool:
    """Whether a list is content rather than data to send as JSON text.

    Any typed block makes it content (each other item must then be a block too, or a str).
    Without one, it is content only when every item is a block dict or a str and at least
    one is a block dict: a list of plain strings stays data, as it always was.
    """
    if not isinstance(value, (list, tuple)) or not value:
        return False
    if any(is_typed(item) for item in value):
        return True
    return all(isinstance(item, str) or is_block(item) for item in value) and any(
        is_block(item) for item in value)


def _blocks(items: Any, version: str, what: str) -> list[dict[str, Any]]:
    return [to_block(item, version, f"{what}[{index}]") for index, item in enumerate(items)]


def _from_result_object(value: CallToolResult, version: str) -> dict[str, Any]:
    """A ``CallToolResult`` from a wire dict (a proxy passing another server's result on)
    goes out as it was, but for the blocks this revision lacks; one built by hand goes out
    from its fields, so a handler can set ``is_error``, ``structured``, ``meta`` and mix
    blocks, wire dicts and strings in ``content``."""
    if value.raw:
        out = dict(value.raw)
        content = out.get("content")
        if isinstance(content, list):
            out["content"] = [to_revision(b, version) if isinstance(b, dict) else b
                              for b in content]
        return out
    if not isinstance(value.content, (list, tuple)):
        raise TypeError(f"CallToolResult.content must be a list of content blocks, got "
                        f"{type(value.content).__name__}")
    out = {"content": _blocks(value.content, version, "CallToolResult.content")}
    if value.structured is not None:
        text = _compact(value.structured)  # raises for a value that is not JSON
        if version not in _NO_STRUCTURED and (isinstance(value.structured, dict)
                                              or version not in _OBJECT_ONLY_STRUCTURED):
            out["structuredContent"] = value.structured
        elif not any(block.get("type") == "text" for block in out["content"]):
            out["content"].append(text_block(text))  # this revision reads the text only
    if value.is_error:
        out["isError"] = True
    if value.meta is not None:
        out["_meta"] = dict(value.meta)
    out.update(value.extra)
    return out


def to_call_tool_result(value: Any, *, structured: bool, version: str) -> dict[str, Any]:
    """Convert a tool handler's return ``value``; ``structured`` says the tool has an output
    schema; ``version`` is the revision the request is served under.

    - A ``CallToolResult`` is sent as built (see ``_from_result_object``).
    - With an output schema the value becomes ``structuredContent`` plus a text block of its
      compact JSON in every revision (older clients read the text). Under 2025-06-18 and
      2025-11-25 only an object may be structured content, so a non-object there is sent as
      text alone rather than as a result those clients would reject.
    - ``None`` is empty content; a ``str`` one text block; one typed block (or
      ``ResourceContents``, embedded) that block; a list holding a typed block, or block dicts
      beside strings, one block per item (a str item is a text block).
    - ``bytes`` raise ``TypeError``: they have no content type, so the author must say which.
    - Anything else is one text block of its compact JSON, or of ``str()`` when it is not JSON.

    Blocks a revision does not have become text stand-ins: ``audio`` under 2024-11-05 and
    ``resource_link`` under 2024-11-05 and 2025-03-26 (the text says what was left out; a
    link keeps its name and URI).
    """
    if isinstance(value, CallToolResult):
        return _from_result_object(value, version)
    if structured:
        text = _compact(value)  # raises for a value that is not JSON: answered with -32603
        out: dict[str, Any] = {"content": [text_block(text)]}
        if version not in _NO_STRUCTURED and (isinstance(value, dict)
                                              or version not in _OBJECT_ONLY_STRUCTURED):
            out["structuredContent"] = value
        return out
    if value is None:
        return {"content": []}
    if isinstance(value, str):
        return {"content": [text_block(value)]}
    if is_typed(value):
        return {"content": [to_block(value, version, "the returned block")]}
    if is_bytes(value):
        raise TypeError(f"a tool handler returned {type(value).__name__}, and {BYTES_HINT}")
    if _is_content_list(value):
        return {"content": _blocks(value, version, "content")}
    try:
        text = _compact(value)
    except (TypeError, ValueError):
        text = str(value)
    return {"content": [text_block(text)]}


# --- prompts ----------------------------------------------------------------------------

def to_prompt_messages(value: Any, version: str) -> list[dict[str, Any]]:
    """The wire ``messages`` of ``prompts/get`` from what a prompt handler returned.

    A ``str`` is one user message with a text block. Otherwise a list (or one
    ``PromptMessage``) of messages, each a ``(role, content)`` pair, a ``{"role", "content"}``
    dict (other members pass through) or a ``PromptMessage``; ``content`` is one block, given
    as anything a tool may return as one block: a str, a typed block, a wire dict. The role
    must be ``"user"`` or ``"assistant"`` (else ``ValueError``). The revision rules of tool
    results apply to the blocks.
    """
    if isinstance(value, str):
        return [{"role": "user", "content": text_block(value)}]
    if isinstance(value, PromptMessage):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"a prompt handler returned a {type(value).__name__}: return a str, or "
                        f"a list of (role, content) pairs, {{'role', 'content'}} dicts or "
                        f"PromptMessage objects")
    return [_message(item, version, f"prompt message {index}")
            for index, item in enumerate(value)]


def _message(item: Any, version: str, where: str) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if isinstance(item, PromptMessage):
        role, content = item.role, item.content
        extra = dict(item.extra)
    elif isinstance(item, Mapping):
        if "role" not in item or "content" not in item:
            raise ValueError(f"{where} needs 'role' and 'content', got the keys "
                             f"{sorted(map(str, item))}")
        role, content = item["role"], item["content"]
        extra = {k: v for k, v in item.items() if k not in ("role", "content")}
    elif isinstance(item, tuple) and len(item) == 2:
        role, content = item
    else:
        hint = (": a str alone is a message only as the whole return value; pair it with a "
                "role, ('user', text)" if isinstance(item, str) else "")
        raise TypeError(f"{where} is a {type(item).__name__}, not a (role, content) pair, a "
                        f"{{'role', 'content'}} dict or a PromptMessage{hint}")
    if not isinstance(role, str) or role not in _ROLES:
        raise ValueError(f"{where} has the role {role!r}; a prompt message's role is 'user' "
                         f"or 'assistant'")
    if isinstance(content, (list, tuple)):
        raise TypeError(f"{where}'s content is a {type(content).__name__}; a message holds "
                        f"one block, so send one message per block")
    return {"role": role, "content": to_block(content, version, f"{where}'s content"),
            **extra}


# --- resources --------------------------------------------------------------------------

def to_read_contents(value: Any, uri: str, mime_type: str | None,
                     version: str) -> list[dict[str, Any]]:
    """The wire ``contents`` of ``resources/read`` from what a resource handler returned.

    A ``str`` is one text contents and ``bytes`` one base64 blob contents, both for ``uri``
    with ``mime_type`` (the resource's, when it declared one). ``ResourceContents`` (from
    ``from_text``/``from_bytes``) and wire dicts, alone or in a list, go out as they are, so a
    handler may answer for several URIs (a directory). Nothing (``None``, an empty list) is a
    ``ValueError``: a resource that does not exist must be reported as not found, never as
    empty contents. No revision changes resource contents, so ``version`` only keeps the
    signature the same as the other converters'.
    """
    del version
    where = f"resource {uri!r}"
    if value is None or (isinstance(value, (list, tuple)) and not value):
        raise ValueError(f"{where}: the handler returned no contents; report a resource that "
                         f"does not exist as not found instead of returning nothing")
    if isinstance(value, str):
        return [ResourceContents.from_text(uri, value, mime_type).to_dict()]
    if is_bytes(value):
        return [ResourceContents.from_bytes(uri, bytes(value), mime_type).to_dict()]
    items = value if isinstance(value, (list, tuple)) else [value]
    return [_wire_contents(item, f"{where}: contents {index}")
            for index, item in enumerate(items)]


def _wire_contents(item: Any, where: str) -> dict[str, Any]:
    if isinstance(item, ResourceContents):
        return dict(item.to_dict())
    if isinstance(item, Mapping):
        contents = dict(item)
        try:
            ResourceContents.from_dict(contents)
        except ProtocolError as exc:
            raise ValueError(f"{where}: {exc}") from None
        return contents
    hint = (": in a list each item needs its own URI, so build it with "
            "ResourceContents.from_text() or from_bytes()"
            if isinstance(item, str) or is_bytes(item) else "")
    raise TypeError(f"{where} is a {type(item).__name__}, not ResourceContents or a wire "
                    f"dict{hint}")
