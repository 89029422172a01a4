"""The types of :mod:`mcpsync.types` that a connect-and-call never needs: resources, prompts,
completion and roots.

They are defined here and re-exported by ``mcpsync.types`` on first access (its module
``__getattr__``), so that ``import mcpsync.client`` neither compiles nor builds them: a client
that only calls tools never touches them. Their ``__module__`` is this module, where their
source is, so that ``inspect.getsource`` (and IPython's ``Resource??``) finds it; reprs and
new pickles therefore name ``mcpsync._types_more``, which stays importable, and a pickle that
names ``mcpsync.types`` still loads through that module's ``__getattr__``.
Import them from ``mcpsync.types`` (or ``mcpsync``), never from here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mcpsync.errors import ProtocolError
from mcpsync.types import (
    Content,
    ResourceContents,
    _dict,
    _excerpt,
    _extra,
    _int,
    _list,
    _require_dict,
    _required_str,
    _Shown,
    _str,
    content_block_from_dict,
)

__all__ = [
    "CompleteResult",
    "GetPromptResult",
    "Prompt",
    "PromptArgument",
    "PromptMessage",
    "ReadResourceResult",
    "Resource",
    "ResourceTemplate",
    "Root",
]


# --- resources --------------------------------------------------------------------------

_RESOURCE_KNOWN = frozenset(("uri", "name", "title", "description", "mimeType", "size",
                             "annotations", "icons", "_meta"))
_TEMPLATE_KNOWN = frozenset(("uriTemplate", "name", "title", "description", "mimeType",
                             "annotations", "icons", "_meta"))
_READ_KNOWN = frozenset(("contents", "_meta", "resultType", "ttlMs", "cacheScope"))


@dataclass(slots=True, repr=False)
class Resource(_Shown):
    """A resource the server offers (``resources/list``)."""

    uri: str
    name: str
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None
    size: int | None = None
    annotations: dict[str, Any] | None = None
    icons: list[Any] | None = None
    meta: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Resource:
        d = _require_dict(d, "a resource")
        return cls(_required_str(d, "uri", "a resource"), _required_str(d, "name", "a resource"),
                   _str(d, "title"), _str(d, "description"), _str(d, "mimeType"),
                   _int(d, "size"), _dict(d, "annotations"), _list(d, "icons"),
                   _dict(d, "_meta"), _extra(d, _RESOURCE_KNOWN), d)


@dataclass(slots=True, repr=False)
class ResourceTemplate(_Shown):
    """A parameterised resource (``resources/templates/list``); ``uri_template`` is RFC 6570."""

    uri_template: str
    name: str
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None
    annotations: dict[str, Any] | None = None
    icons: list[Any] | None = None
    meta: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ResourceTemplate:
        d = _require_dict(d, "a resource template")
        return cls(_required_str(d, "uriTemplate", "a resource template"),
                   _required_str(d, "name", "a resource template"),
                   _str(d, "title"), _str(d, "description"), _str(d, "mimeType"),
                   _dict(d, "annotations"), _list(d, "icons"), _dict(d, "_meta"),
                   _extra(d, _TEMPLATE_KNOWN), d)


@dataclass(slots=True, repr=False)
class ReadResourceResult(_Shown):
    """The result of ``resources/read``: one or more contents (a directory may give many)."""

    contents: list[ResourceContents]
    meta: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ReadResourceResult:
        d = _require_dict(d, "a resources/read result")
        items = d.get("contents")
        if not isinstance(items, list):
            if "contents" not in d:
                raise ProtocolError(f"a resources/read result has no 'contents': {_excerpt(d)}")
            raise ProtocolError(f"a resources/read result's 'contents' must be a list: "
                                f"{_excerpt(d)}")
        return cls([ResourceContents.from_dict(c) for c in items], _dict(d, "_meta"),
                   _extra(d, _READ_KNOWN), d)

    @property
    def text(self) -> str:
        """The text contents joined with newlines (``""`` when there are none)."""
        return "\n".join([c.text for c in self.contents if c.text is not None])


# --- prompts ----------------------------------------------------------------------------

_ARG_KNOWN = frozenset(("name", "title", "description", "required"))
_PROMPT_KNOWN = frozenset(("name", "title", "description", "arguments", "icons", "_meta"))
_MESSAGE_KNOWN = frozenset(("role", "content"))
_GET_PROMPT_KNOWN = frozenset(("description", "messages", "_meta", "resultType"))


@dataclass(slots=True, repr=False)
class PromptArgument(_Shown):
    """One argument a prompt takes; ``required`` defaults to False."""

    name: str
    title: str | None = None
    description: str | None = None
    required: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PromptArgument:
        d = _require_dict(d, "a prompt argument")
        return cls(_required_str(d, "name", "a prompt argument"), _str(d, "title"),
                   _str(d, "description"), d.get("required") is True,
                   _extra(d, _ARG_KNOWN), d)


@dataclass(slots=True, repr=False)
class Prompt(_Shown):
    """A prompt template the server offers (``prompts/list``)."""

    name: str
    title: str | None = None
    description: str | None = None
    arguments: list[PromptArgument] = field(default_factory=list)
    icons: list[Any] | None = None
    meta: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Prompt:
        d = _require_dict(d, "a prompt")
        args = [PromptArgument.from_dict(a) for a in (_list(d, "arguments") or [])]
        return cls(_required_str(d, "name", "a prompt"), _str(d, "title"),
                   _str(d, "description"), args, _list(d, "icons"), _dict(d, "_meta"),
                   _extra(d, _PROMPT_KNOWN), d)


@dataclass(slots=True, repr=False)
class PromptMessage(_Shown):
    """One message of a rendered prompt: ``role`` (``user``/``assistant``) and one block."""

    role: str
    content: Content
    extra: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PromptMessage:
        d = _require_dict(d, "a prompt message")
        if "content" not in d:
            raise ProtocolError(f"a prompt message has no 'content': {_excerpt(d)}")
        return cls(_required_str(d, "role", "a prompt message"),
                   content_block_from_dict(d["content"]), _extra(d, _MESSAGE_KNOWN), d)


@dataclass(slots=True, repr=False)
class GetPromptResult(_Shown):
    """The result of ``prompts/get``."""

    messages: list[PromptMessage]
    description: str | None = None
    meta: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GetPromptResult:
        d = _require_dict(d, "a prompts/get result")
        items = d.get("messages")
        if not isinstance(items, list):
            raise ProtocolError(f"a prompts/get result needs a 'messages' list: {_excerpt(d)}")
        return cls([PromptMessage.from_dict(m) for m in items], _str(d, "description"),
                   _dict(d, "_meta"), _extra(d, _GET_PROMPT_KNOWN), d)


# --- completion and roots ---------------------------------------------------------------

_COMPLETE_KNOWN = frozenset(("completion", "_meta", "resultType"))


@dataclass(slots=True, repr=False)
class CompleteResult(_Shown):
    """The result of ``completion/complete``: suggested ``values`` (at most 100), the
    ``total`` number of matches when known, and whether there are more (``has_more``)."""

    values: list[str]
    total: int | None = None
    has_more: bool = False
    meta: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CompleteResult:
        d = _require_dict(d, "a completion/complete result")
        completion = d.get("completion")
        if not isinstance(completion, dict):
            raise ProtocolError(f"a completion/complete result needs a 'completion' object: "
                                f"{_excerpt(d)}")
        values = completion.get("values")
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise ProtocolError(f"completion 'values' must be a list of strings: {_excerpt(d)}")
        return cls(list(values), _int(completion, "total"),
                   completion.get("hasMore") is True, _dict(d, "_meta"),
                   _extra(d, _COMPLETE_KNOWN), d)


_ROOT_KNOWN = frozenset(("uri", "name", "_meta"))


@dataclass(slots=True, repr=False)
class Root(_Shown):
    """A filesystem root the client exposes to servers (``file://`` URI, optional name)."""

    uri: str
    name: str | None = None
    meta: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Root:
        d = _require_dict(d, "a root")
        return cls(_required_str(d, "uri", "a root"), _str(d, "name"), _dict(d, "_meta"),
                   _extra(d, _ROOT_KNOWN), d)

    def to_dict(self) -> dict[str, Any]:
        """The root as sent in a ``roots/list`` answer (unknown fields kept)."""
        out: dict[str, Any] = {"uri": self.uri}
        if self.name is not None:
            out["name"] = self.name
        if self.meta is not None:
            out["_meta"] = self.meta
        out.update(self.extra)
        return out
