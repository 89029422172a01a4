"""MCP data as small dataclasses: tools, resources, prompts, results and content blocks.

Each type is built from the wire dict by ``from_dict(d)`` and keeps two things besides its
typed fields:

- ``raw``: the original dict, untouched, so nothing the server sent is ever lost;
- ``extra``: the members this version of mcpsync does not know (future spec fields,
  vendor extensions), in their original order.

Parsing is tolerant where tolerance is harmless and strict where it is not: an optional
field of the wrong type reads as absent (its value stays in ``raw``), while a missing or
wrong-typed *required* field raises :class:`~mcpsync.errors.ProtocolError`, because the
object would be unusable. A list result (``CallToolResult.content``, ``PromptMessage``
content) degrades a block it cannot parse to a generic :class:`ContentBlock` rather than
failing the whole call.

``CallToolResult.from_dict`` runs on every tool call, so these classes use slots and plain
``dict.get`` lookups; nothing here validates JSON Schema or copies more than it must.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

import mcpsync
from mcpsync._fields_eq import FACTORY, fields_eq
from mcpsync.errors import ProtocolError

if TYPE_CHECKING:
    from mcpsync._types_more import (
        AudioContent as AudioContent,
        CompleteResult as CompleteResult,
        Content as Content,
        ContentBlock as ContentBlock,
        EmbeddedResource as EmbeddedResource,
        GetPromptResult as GetPromptResult,
        ImageContent as ImageContent,
        Prompt as Prompt,
        PromptArgument as PromptArgument,
        PromptMessage as PromptMessage,
        ReadResourceResult as ReadResourceResult,
        Resource as Resource,
        ResourceContents as ResourceContents,
        ResourceLink as ResourceLink,
        ResourceTemplate as ResourceTemplate,
        Root as Root,
    )

__all__ = [
    "AudioContent",
    "CallToolResult",
    "CompleteResult",
    "Content",
    "ContentBlock",
    "EmbeddedResource",
    "GetPromptResult",
    "ImageContent",
    "Prompt",
    "PromptArgument",
    "PromptMessage",
    "ReadResourceResult",
    "Resource",
    "ResourceContents",
    "ResourceLink",
    "ResourceTemplate",
    "Root",
    "ServerInfo",
    "TextContent",
    "Tool",
    "content_block_from_dict",
]


# --- small readers: each returns the value when it has the right type, else the default ---

def _str(d: dict[str, Any], key: str) -> str | None:
    v = d.get(key)
    return v if isinstance(v, str) else None


def _dict(d: dict[str, Any], key: str) -> dict[str, Any] | None:
    v = d.get(key)
    return v if isinstance(v, dict) else None


def _list(d: dict[str, Any], key: str) -> list[Any] | None:
    v = d.get(key)
    return v if isinstance(v, list) else None


def _int(d: dict[str, Any], key: str) -> int | None:
    v = d.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _bool(d: dict[str, Any], key: str) -> bool | None:
    v = d.get(key)
    return v if isinstance(v, bool) else None


def _required_str(d: dict[str, Any], key: str, what: str) -> str:
    v = d.get(key)
    if not isinstance(v, str):
        if key not in d:
            raise ProtocolError(f"{what} has no '{key}' field: {_excerpt(d)}")
        raise ProtocolError(f"{what} field '{key}' must be a string, got "
                            f"{type(v).__name__}: {_excerpt(d)}")
    return v


def _require_dict(d: object, what: str) -> dict[str, Any]:
    if not isinstance(d, dict):
        raise ProtocolError(f"{what} must be a JSON object, got {type(d).__name__}: "
                            f"{_excerpt(d)}")
    return d


def _extra(d: dict[str, Any], known: frozenset[str]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k not in known}


def _excerpt(value: object, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


# --- small writers: the wire form of a hand-built object (one built without from_dict) ------

def _with_common(out: dict[str, Any], annotations: dict[str, Any] | None,
                 meta: dict[str, Any] | None, extra: dict[str, Any]) -> dict[str, Any]:
    """Add the members every block may carry, in wire order, then the unknown ones."""
    if annotations is not None:
        out["annotations"] = annotations
    if meta is not None:
        out["_meta"] = meta
    out.update(extra)
    return out


# --- how the objects look: short reprs, and rich output in IPython/Jupyter ----------------

class _Shown:
    """The repr and notebook display of every type here, delegated to :mod:`mcpsync._display`
    (imported on first use, so parsing never pays for it). ``importlib.import_module`` comes
    before each ``from`` import: in a thread that waited on the module lock while a Ctrl-C
    stopped another thread's import of ``_display``, a bare ``from`` import (and ``from
    mcpsync import _display`` too) reads the name from the failed, half-built module and
    raises ``ImportError``; ``import_module`` looks again after the lock and imports it."""

    __slots__ = ()

    def __repr__(self) -> str:
        importlib.import_module("mcpsync._display")
        from mcpsync._display import short_repr
        return short_repr(self)

    def _repr_html_(self) -> str | None:
        importlib.import_module("mcpsync._display")
        from mcpsync._display import html_of
        return html_of(self)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Any:
        importlib.import_module("mcpsync._display")
        from mcpsync._display import mimebundle_of
        return mimebundle_of(self) if getattr(self, "type", None) in ("image", "audio") \
            else None


# --- content blocks ---------------------------------------------------------------------

_TEXT_KNOWN = frozenset(("type", "text", "annotations", "_meta"))

# The four dataclasses here (and jsonrpc.Message) are made with init=False and eq=False and
# their __init__ and __eq__ written out: a dataclass generates and compiles these every time
# the class is made, at every import, cached or not. Each __init__ takes the fields in order,
# with their defaults (FACTORY, from mcpsync._fields_eq, for a field made by its factory),
# and stores each as given; a field added later must be added to __init__ too. Each __eq__
# compares as the generated one of the running Python would (mcpsync._fields_eq says how),
# and defining __eq__ leaves __hash__ None, so instances stay unhashable; a test holds them
# to generated twins.


@dataclass(slots=True, init=False, repr=False, eq=False)
class TextContent(_Shown):
    """A ``text`` block."""

    text: str
    annotations: dict[str, Any] | None = None
    meta: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)
    type: str = "text"

    def __init__(self, text: str, annotations: dict[str, Any] | None = None,
                 meta: dict[str, Any] | None = None, extra: dict[str, Any] = FACTORY,
                 raw: dict[str, Any] = FACTORY, type: str = "text") -> None:
        # written out: see the comment above TextContent
        self.text = text
        self.annotations = annotations
        self.meta = meta
        self.extra = {} if extra is FACTORY else extra
        self.raw = {} if raw is FACTORY else raw
        self.type = type

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TextContent:
        d = _require_dict(d, "a text content block")
        text = d.get("text")
        if not isinstance(text, str):
            text = _required_str(d, "text", "a text content block")
        # Fast path: the usual block has only type and text, so skip building extra.
        if len(d) == 2 and "type" in d:
            return cls(text, None, None, {}, d)
        return cls(text, _dict(d, "annotations"), _dict(d, "_meta"), _extra(d, _TEXT_KNOWN), d)

    def to_dict(self) -> dict[str, Any]:
        """The block as wire JSON (the original dict when there is one)."""
        if self.raw:
            return self.raw
        out: dict[str, Any] = {"type": "text", "text": self.text}
        if self.annotations is None and self.meta is None and not self.extra:
            return out
        return _with_common(out, self.annotations, self.meta, self.extra)

    def __eq__(self, other: object) -> bool:   # written out: see above TextContent
        return _text_eq(self, other)


_text_eq = fields_eq(list(TextContent.__dataclass_fields__))


def content_block_from_dict(d: Any) -> mcpsync.types.Content:
    """Parse one content block, degrading to :class:`ContentBlock` when its type is unknown
    or a required field is missing, so one odd block never fails a whole result.

    A block that is not a JSON object at all raises :class:`ProtocolError`.
    """
    if isinstance(d, dict):
        kind = d.get("type")
        if kind == "text":  # the hot case, dispatched without the table lookup
            text = d.get("text")
            if type(text) is str and len(d) == 2:
                return TextContent(text, None, None, {}, d)
            try:
                return TextContent.from_dict(d)
            except ProtocolError:
                pass
        # Every other block (and a text block that is not one): its types load on first use.
        return _other_block(d, kind)
    raise ProtocolError(f"a content block must be a JSON object, got {type(d).__name__}: "
                        f"{_excerpt(d)}")


def _other_block(d: dict[str, Any], kind: object) -> Content:
    """Load ``_types_more`` for the first block that is not plain text, and put its
    ``other_block`` in this name's place, so that later blocks call it directly: an import
    statement in ``content_block_from_dict`` itself would run for every such block, and on
    3.10 and 3.11 it costs about 0.5 us each time, as much as parsing an image block."""
    global _other_block
    _load_more()
    from mcpsync._types_more import other_block  # loaded: a lookup in sys.modules

    _other_block = other_block
    return other_block(d, kind)


def _content_list(value: Any, what: str) -> list[Content]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ProtocolError(f"{what} must be a list of content blocks, got "
                            f"{type(value).__name__}: {_excerpt(value)}")
    return [content_block_from_dict(b) for b in value]


# --- tools ------------------------------------------------------------------------------

_TOOL_KNOWN = frozenset(("name", "title", "description", "inputSchema", "outputSchema",
                         "annotations", "icons", "_meta"))


@dataclass(slots=True, init=False, repr=False, eq=False)
class Tool(_Shown):
    """A tool the server offers (``tools/list``).

    ``input_schema`` is ``{}`` when the server sent none (the spec requires one, but a
    missing schema should not hide the tool).
    """

    name: str
    title: str | None = None
    description: str | None = None
    input_schema: dict[str, Any] = field(default_factory=dict)
    output_schema: dict[str, Any] | None = None
    annotations: dict[str, Any] | None = None
    icons: list[Any] | None = None
    meta: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)

    def __init__(self, name: str, title: str | None = None, description: str | None = None,
                 input_schema: dict[str, Any] = FACTORY,
                 output_schema: dict[str, Any] | None = None,
                 annotations: dict[str, Any] | None = None, icons: list[Any] | None = None,
                 meta: dict[str, Any] | None = None, extra: dict[str, Any] = FACTORY,
                 raw: dict[str, Any] = FACTORY) -> None:
        # written out: see the comment above TextContent
        self.name = name
        self.title = title
        self.description = description
        self.input_schema = {} if input_schema is FACTORY else input_schema
        self.output_schema = output_schema
        self.annotations = annotations
        self.icons = icons
        self.meta = meta
        self.extra = {} if extra is FACTORY else extra
        self.raw = {} if raw is FACTORY else raw

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Tool:
        d = _require_dict(d, "a tool")
        return cls(_required_str(d, "name", "a tool"), _str(d, "title"),
                   _str(d, "description"), _dict(d, "inputSchema") or {},
                   _dict(d, "outputSchema"), _dict(d, "annotations"), _list(d, "icons"),
                   _dict(d, "_meta"), _extra(d, _TOOL_KNOWN), d)

    @property
    def task_support(self) -> str:
        """``execution.taskSupport``: ``"required"`` (the tool runs only as a task, which
        ``call_tool`` handles), ``"optional"`` or ``"forbidden"`` (also when absent)."""
        execution = self.raw.get("execution")
        value = execution.get("taskSupport") if isinstance(execution, dict) else None
        return value if value in ("required", "optional") else "forbidden"

    @property
    def display_title(self) -> str:
        """What to show a person: ``title``, then ``annotations.title``, then ``name``."""
        if self.title:
            return self.title
        ann_title = (self.annotations or {}).get("title")
        return ann_title if isinstance(ann_title, str) and ann_title else self.name

    def __eq__(self, other: object) -> bool:   # written out: see above TextContent
        return _tool_eq(self, other)


_tool_eq = fields_eq(list(Tool.__dataclass_fields__))


_CALL_KNOWN = frozenset(("content", "structuredContent", "isError", "_meta", "resultType"))


@dataclass(slots=True, init=False, repr=False, eq=False)
class CallToolResult(_Shown):
    """The result of ``tools/call``.

    ``structured`` is ``structuredContent`` (``None`` when absent); ``is_error`` is true when
    the tool itself failed (``isError: true``), which is a normal result, not an exception,
    unless the caller asked for ``raise_on_error=True``. A missing ``content`` reads as an
    empty list.
    """

    content: list[mcpsync.types.Content]
    structured: Any = None
    is_error: bool = False
    meta: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)

    def __init__(self, content: list[mcpsync.types.Content], structured: Any = None,
                 is_error: bool = False, meta: dict[str, Any] | None = None,
                 extra: dict[str, Any] = FACTORY, raw: dict[str, Any] = FACTORY) -> None:
        # written out: see the comment above TextContent
        self.content = content
        self.structured = structured
        self.is_error = is_error
        self.meta = meta
        self.extra = {} if extra is FACTORY else extra
        self.raw = {} if raw is FACTORY else raw

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CallToolResult:
        if type(d) is dict:
            if cls is CallToolResult:   # a subclass gets its own type, by the general way
                result = _plain_text_result(d)
                if result is not None:
                    return result
        else:
            d = _require_dict(d, "a tool result")
        return cls._build(d)

    @classmethod
    def _build(cls, d: dict[str, Any]) -> CallToolResult:
        """:meth:`from_dict` past its plain-text step (``d`` is a dict): also what
        ``Client.call_tool`` calls for an answer that step declined, so as not to try it
        twice."""
        content = d.get("content")
        if type(content) is list:
            blocks = [content_block_from_dict(b) for b in content]
        else:
            blocks = _content_list(content, "a tool result's 'content'")
        n = len(d)
        # Fast path: {"content": [...]} with at most isError beside it.
        if content is not None and (n == 1 or (n == 2 and "isError" in d)):
            return cls(blocks, None, d.get("isError") is True, None, {}, d)
        return cls(blocks, d.get("structuredContent"), d.get("isError") is True,
                   _dict(d, "_meta"), _extra(d, _CALL_KNOWN), d)

    @property
    def text(self) -> str:
        """The text blocks joined with newlines (``""`` when there are none)."""
        return "\n".join([b.text for b in self.content if type(b) is TextContent])

    def __eq__(self, other: object) -> bool:   # written out: see above TextContent
        return _result_eq(self, other)


_result_eq = fields_eq(list(CallToolResult.__dataclass_fields__))


_new = object.__new__


def _plain_text_result(d: dict[str, Any]) -> CallToolResult | None:
    """``CallToolResult.from_dict`` for the usual answer of a tool, or ``None`` for anything
    else: one ``{"type": "text", "text": ...}`` block in ``content``, beside it at most
    ``structuredContent`` and ``isError``. The two objects are made without their dataclass
    ``__init__`` (every field set here, to what the general path gives), which is most of
    what building a result costs per call; a test holds every field of both to what the
    constructors build, so a field added to either class cannot be missed here.
    ``Client.call_tool`` makes its usual result by the same steps written out (a frame fewer
    per call): change both; a test holds the two to the same decision and result."""
    # Subscripts, not get(): a subscript of a dict is specialised and a method call is not
    # (about 80 instructions each, three per call); a missing key is the unusual answer,
    # and its KeyError (on the path that declines) reads as None did.
    try:
        content = d["content"]
        if type(content) is not list or len(content) != 1:
            return None
        block = content[0]
        if type(block) is not dict or len(block) != 2 or block["type"] != "text":
            return None
        text = block["text"]
    except KeyError:
        return None
    if type(text) is not str:
        return None
    n = len(d)
    if n == 1:
        structured = None
        is_error = False
    else:
        if n != 1 + ("structuredContent" in d) + ("isError" in d):
            return None   # _meta, resultType or an unknown member: the general path
        structured = d.get("structuredContent")
        is_error = d.get("isError") is True
    part: TextContent = _new(TextContent)
    part.text = text
    part.annotations = part.meta = None
    part.extra = {}
    part.raw = block
    part.type = "text"
    result: CallToolResult = _new(CallToolResult)
    result.content = [part]
    result.structured = structured
    result.is_error = is_error
    result.meta = None
    result.extra = {}
    result.raw = d
    return result


# --- server info ------------------------------------------------------------------------

_INFO_KNOWN = frozenset(("name", "title", "version"))


@dataclass(slots=True, init=False, repr=False, eq=False)
class ServerInfo(_Shown):
    """Who the server says it is, and what was negotiated with it.

    ``name``, ``title`` and ``version`` are self-reported (never use them for security);
    ``protocol_version`` is the negotiated revision and ``instructions`` the server's usage
    hints, when it gave any. ``raw`` is the server's implementation-info dict.
    """

    name: str = ""
    title: str | None = None
    version: str = ""
    protocol_version: str = ""
    instructions: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)

    def __init__(self, name: str = "", title: str | None = None, version: str = "",
                 protocol_version: str = "", instructions: str | None = None,
                 extra: dict[str, Any] = FACTORY, raw: dict[str, Any] = FACTORY) -> None:
        # written out: see the comment above TextContent
        self.name = name
        self.title = title
        self.version = version
        self.protocol_version = protocol_version
        self.instructions = instructions
        self.extra = {} if extra is FACTORY else extra
        self.raw = {} if raw is FACTORY else raw

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, protocol_version: str = "",
                  instructions: str | None = None) -> ServerInfo:
        """Build from an implementation-info dict (``{"name", "version", ...}``).

        Lenient on purpose: a server that omits its info is still usable, so missing
        fields read as ``""`` rather than raising.
        """
        if not isinstance(d, dict):
            d = {}
        return cls(_str(d, "name") or "", _str(d, "title"), _str(d, "version") or "",
                   protocol_version, instructions, _extra(d, _INFO_KNOWN), d)

    def __eq__(self, other: object) -> bool:   # written out: see above TextContent
        return _info_eq(self, other)


_info_eq = fields_eq(list(ServerInfo.__dataclass_fields__))

# The generated __init__ carried the object None as its return annotation, not the string
# "None" that this module's annotations become: help() and inspect.signature show it so.
for _cls in (TextContent, Tool, CallToolResult, ServerInfo):
    _cls.__init__.__annotations__["return"] = None
del _cls


# --- the other content blocks, resources, prompts, completion and roots: defined in
# _types_more, loaded on first use ---------------------------------------------------------

# A client that only calls tools, and gets text back, never needs these: ``import
# mcpsync.client`` neither compiles nor builds them. The first access to any of them (or the
# first content block that is not plain text) loads all of them; the first access puts them in
# this module's namespace, so later accesses (and type-hint lookups, which read this
# namespace) are plain globals. ``CallToolResult.content`` and ``content_block_from_dict``
# name ``Content`` as ``mcpsync.types.Content``, an attribute lookup that loads it, so that
# ``typing.get_type_hints`` resolves them before anything else has.
_MORE = frozenset(("AudioContent", "CompleteResult", "Content", "ContentBlock",
                   "EmbeddedResource", "GetPromptResult", "ImageContent", "Prompt",
                   "PromptArgument", "PromptMessage", "ReadResourceResult", "Resource",
                   "ResourceContents", "ResourceLink", "ResourceTemplate", "Root"))


def __getattr__(name: str) -> Any:
    """Load the other content blocks and the resource, prompt, completion and root types on
    first access (PEP 562)."""
    if name not in _MORE:
        raise AttributeError(f"module 'mcpsync.types' has no attribute {name!r}")
    _types_more = _load_more()
    # One update, so that a thread that finds one of them in the namespace finds all of them
    # (Prompt never without PromptArgument).
    namespace = globals()
    namespace.update({other: getattr(_types_more, other) for other in _MORE})
    return namespace[name]


def _load_more() -> ModuleType:
    """Import ``_types_more``; a Ctrl-C that lands while it builds its dataclasses comes out as
    the ``KeyboardInterrupt`` it is. On 3.10 and 3.11 ``type()`` wraps an exception raised in
    a ``__set_name__`` (a dataclass field's) in ``RuntimeError("Error calling __set_name__
    ...")``, which a caller's ``except KeyboardInterrupt`` would not catch. The failed import
    leaves nothing behind: the next access imports the module again."""
    try:
        # Not ``from mcpsync import _types_more``: in a thread that waited on the module lock
        # while a Ctrl-C stopped another thread's import, that reads the failed, half-built
        # module (ImportError); import_module looks again after the lock and imports it.
        _types_more = importlib.import_module("mcpsync._types_more")
    except RuntimeError as exc:
        if isinstance(exc.__cause__, KeyboardInterrupt):
            raise exc.__cause__ from None
        raise
    return _types_more


def __dir__() -> list[str]:
    return sorted(set(globals()) | _MORE)
