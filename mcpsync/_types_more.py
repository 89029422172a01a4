"""The types of :mod:`mcpsync.types` that a connect-and-call never needs: the content blocks
other than text (image, audio, resource links, embedded resources and their contents, unknown
blocks, and the ``Content`` union of them all), resources, prompts, completion and roots.

They are defined here and re-exported by ``mcpsync.types`` on first access (its module
``__getattr__``), so that ``import mcpsync.client`` neither compiles nor builds them: a client
that only calls tools, and gets text back, never touches them (``content_block_from_dict``
loads this module for the first block that is not plain text). Their ``__module__`` is this
module, where their source is, so that ``inspect.getsource`` (and IPython's ``Resource??``)
finds it; reprs and new pickles therefore name ``mcpsync._types_more``, which stays
importable, and a pickle that names ``mcpsync.types`` still loads through that module's
``__getattr__``.
Import them from ``mcpsync.types`` (or ``mcpsync``), never from here.
"""

from __future__ import annotations

import builtins
import os
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from mcpsync.errors import ProtocolError
from mcpsync.types import (
    TextContent,
    _dict,
    _excerpt,
    _extra,
    _int,
    _list,
    _require_dict,
    _required_str,
    _Shown,
    _str,
    _with_common,
    content_block_from_dict,
)

__all__ = [
    "AudioContent",
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
]


# --- media as bytes or files: the writers of the image, audio and resource blocks -------

def _b64(data: object, what: str) -> str:
    """Base64 text of ``data``; anything but bytes is refused, since a ``str`` here is almost
    always text that was meant for a text block (or data already encoded once)."""
    if not isinstance(data, (builtins.bytes, bytearray, memoryview)):
        raise TypeError(f"{what} takes bytes, got {type(data).__name__}"
                        + (": use a text block for text" if isinstance(data, str) else ""))
    import base64  # media as bytes is a rare path: base64 loads on first use

    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> builtins.bytes:
    """The bytes of base64 ``text`` (``base64.b64decode``, loaded on first use)."""
    import base64

    return base64.b64decode(text)


def _mime(mime_type: object, what: str) -> str:
    if not isinstance(mime_type, str) or "/" not in mime_type:
        raise ValueError(f"{what} needs a MIME type such as 'image/png', got {mime_type!r}")
    return mime_type


def _uri(uri: object, what: str) -> str:
    if not isinstance(uri, str) or not uri:
        raise ValueError(f"{what} needs the resource's URI as a non-empty str, got {uri!r}")
    return uri


def _read_media(path: str | os.PathLike[str], mime_type: str | None, kind: str,
                what: str) -> tuple[builtins.bytes, str]:
    """The file's bytes and its MIME type: the one given, else the one its name suggests."""
    import mimetypes  # reading a file is rare: mimetypes (and urllib.parse) load then

    name = os.fspath(path)
    if mime_type is None:
        guessed, _ = mimetypes.guess_type(name)
        if guessed is None:
            example = "image/png" if kind == "image" else "audio/wav"
            raise ValueError(f"{what}: cannot tell the MIME type of {name!r} from its name; "
                             f"pass mime_type=, for example {example!r}")
        if not guessed.startswith(kind + "/"):
            raise ValueError(f"{what}: {name!r} looks like {guessed}, not {kind}; pass "
                             f"mime_type= if it really is {kind}")
        mime_type = guessed
    with open(name, "rb") as f:
        return f.read(), _mime(mime_type, what)


# --- content blocks other than plain text ------------------------------------------------

_MEDIA_KNOWN = frozenset(("type", "data", "mimeType", "annotations", "_meta"))
_LINK_KNOWN = frozenset(("type", "uri", "name", "title", "description", "mimeType", "size",
                         "icons", "annotations", "_meta"))
_EMBEDDED_KNOWN = frozenset(("type", "resource", "annotations", "_meta"))


@dataclass(slots=True, repr=False)
class ImageContent(_Shown):
    """An ``image`` block: base64 ``data`` and its ``mime_type``."""

    data: str
    mime_type: str
    annotations: dict[str, Any] | None = None
    meta: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)
    type: str = "image"

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ImageContent:
        d = _require_dict(d, "an image content block")
        return cls(_required_str(d, "data", "an image content block"),
                   _required_str(d, "mimeType", "an image content block"),
                   _dict(d, "annotations"), _dict(d, "_meta"), _extra(d, _MEDIA_KNOWN), d)

    @property
    def bytes(self) -> builtins.bytes:
        """The image bytes, decoded (``data`` stays the base64 text as sent)."""
        return _unb64(self.data)

    def decode(self) -> builtins.bytes:
        """The same as :attr:`bytes` (the older spelling, kept)."""
        return _unb64(self.data)

    @classmethod
    def from_bytes(cls, data: builtins.bytes, mime_type: str, *,
                   annotations: dict[str, Any] | None = None,
                   meta: dict[str, Any] | None = None) -> ImageContent:
        """A block for a server to send: ``data`` is base64-encoded here, so a handler never
        handles base64 itself (``mime_type`` such as ``'image/png'``)."""
        what = "ImageContent.from_bytes()"
        return cls(_b64(data, what), _mime(mime_type, what), annotations, meta)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], mime_type: str | None = None, *,
                  annotations: dict[str, Any] | None = None,
                  meta: dict[str, Any] | None = None) -> ImageContent:
        """A block holding the file at ``path``; without ``mime_type`` it is guessed from the
        file name (:mod:`mimetypes`), and a name that says nothing, or says it is not image,
        raises ``ValueError`` naming the file."""
        data, mime = _read_media(path, mime_type, "image", "ImageContent.from_file()")
        return cls(_b64(data, "ImageContent.from_file()"), mime, annotations, meta)

    def to_dict(self) -> dict[str, Any]:
        """The block as wire JSON (the original dict when there is one)."""
        if self.raw:
            return self.raw
        return _with_common({"type": "image", "data": self.data, "mimeType": self.mime_type},
                            self.annotations, self.meta, self.extra)


@dataclass(slots=True, repr=False)
class AudioContent(_Shown):
    """An ``audio`` block: base64 ``data`` and its ``mime_type``."""

    data: str
    mime_type: str
    annotations: dict[str, Any] | None = None
    meta: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)
    type: str = "audio"

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AudioContent:
        d = _require_dict(d, "an audio content block")
        return cls(_required_str(d, "data", "an audio content block"),
                   _required_str(d, "mimeType", "an audio content block"),
                   _dict(d, "annotations"), _dict(d, "_meta"), _extra(d, _MEDIA_KNOWN), d)

    @property
    def bytes(self) -> builtins.bytes:
        """The audio bytes, decoded (``data`` stays the base64 text as sent)."""
        return _unb64(self.data)

    def decode(self) -> builtins.bytes:
        """The same as :attr:`bytes` (the older spelling, kept)."""
        return _unb64(self.data)

    @classmethod
    def from_bytes(cls, data: builtins.bytes, mime_type: str, *,
                   annotations: dict[str, Any] | None = None,
                   meta: dict[str, Any] | None = None) -> AudioContent:
        """A block for a server to send: ``data`` is base64-encoded here, so a handler never
        handles base64 itself (``mime_type`` such as ``'audio/wav'``)."""
        what = "AudioContent.from_bytes()"
        return cls(_b64(data, what), _mime(mime_type, what), annotations, meta)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], mime_type: str | None = None, *,
                  annotations: dict[str, Any] | None = None,
                  meta: dict[str, Any] | None = None) -> AudioContent:
        """A block holding the file at ``path``; without ``mime_type`` it is guessed from the
        file name (:mod:`mimetypes`), and a name that says nothing, or says it is not audio,
        raises ``ValueError`` naming the file."""
        data, mime = _read_media(path, mime_type, "audio", "AudioContent.from_file()")
        return cls(_b64(data, "AudioContent.from_file()"), mime, annotations, meta)

    def to_dict(self) -> dict[str, Any]:
        """The block as wire JSON (the original dict when there is one)."""
        if self.raw:
            return self.raw
        return _with_common({"type": "audio", "data": self.data, "mimeType": self.mime_type},
                            self.annotations, self.meta, self.extra)


@dataclass(slots=True, repr=False)
class ResourceLink(_Shown):
    """A ``resource_link`` block: a pointer to a resource the client may read."""

    uri: str
    name: str
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None
    size: int | None = None
    icons: list[Any] | None = None
    annotations: dict[str, Any] | None = None
    meta: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)
    type: str = "resource_link"

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ResourceLink:
        d = _require_dict(d, "a resource_link content block")
        return cls(_required_str(d, "uri", "a resource_link content block"),
                   _required_str(d, "name", "a resource_link content block"),
                   _str(d, "title"), _str(d, "description"), _str(d, "mimeType"),
                   _int(d, "size"), _list(d, "icons"), _dict(d, "annotations"),
                   _dict(d, "_meta"), _extra(d, _LINK_KNOWN), d)

    def to_dict(self) -> dict[str, Any]:
        """The block as wire JSON (the original dict when there is one); the optional fields
        that are ``None`` are left out."""
        if self.raw:
            return self.raw
        out: dict[str, Any] = {"type": "resource_link", "uri": self.uri, "name": self.name}
        for key, value in (("title", self.title), ("description", self.description),
                           ("mimeType", self.mime_type), ("size", self.size),
                           ("icons", self.icons)):
            if value is not None:
                out[key] = value
        return _with_common(out, self.annotations, self.meta, self.extra)


_CONTENTS_KNOWN = frozenset(("uri", "mimeType", "text", "blob", "_meta"))


@dataclass(slots=True, repr=False)
class ResourceContents(_Shown):
    """The contents of a resource: exactly one of ``text`` and ``blob`` (base64) is set."""

    uri: str
    mime_type: str | None = None
    text: str | None = None
    blob: str | None = None
    meta: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ResourceContents:
        d = _require_dict(d, "resource contents")
        uri = _required_str(d, "uri", "resource contents")
        text, blob = _str(d, "text"), _str(d, "blob")
        if text is None and blob is None:
            raise ProtocolError(f"resource contents for {uri!r} have neither a 'text' nor a "
                                f"'blob' string: {_excerpt(d)}")
        return cls(uri, _str(d, "mimeType"), text, blob, _dict(d, "_meta"),
                   _extra(d, _CONTENTS_KNOWN), d)

    @property
    def is_text(self) -> bool:
        """True for text contents, False for a blob."""
        return self.text is not None

    @property
    def bytes(self) -> builtins.bytes:
        """The bytes: the decoded blob, or the text encoded as UTF-8."""
        if self.text is not None:
            return self.text.encode("utf-8")
        return _unb64(self.blob or "")

    @property
    def data(self) -> builtins.bytes:
        """The same as :attr:`bytes` (the older spelling, kept)."""
        return self.bytes

    @classmethod
    def from_text(cls, uri: str, text: str, mime_type: str | None = None, *,
                  meta: dict[str, Any] | None = None) -> ResourceContents:
        """Text contents for a server to send (a resource read, or an embedded resource)."""
        if not isinstance(text, str):
            raise TypeError(f"ResourceContents.from_text() for {uri!r} takes a str, got "
                            f"{type(text).__name__}: use from_bytes() for bytes")
        return cls(_uri(uri, "ResourceContents.from_text()"), mime_type, text, None, meta)

    @classmethod
    def from_bytes(cls, uri: str, data: builtins.bytes, mime_type: str | None = None, *,
                   meta: dict[str, Any] | None = None) -> ResourceContents:
        """Binary contents for a server to send: ``data`` goes out as a base64 ``blob``."""
        what = "ResourceContents.from_bytes()"
        return cls(_uri(uri, what), mime_type, None, _b64(data, what), meta)

    def to_dict(self) -> dict[str, Any]:
        """The contents as wire JSON (the original dict when there is one).

        Raises ``ValueError`` when not exactly one of ``text`` and ``blob`` is set: the peer
        could not tell which one to read.
        """
        if self.raw:
            return self.raw
        if (self.text is None) == (self.blob is None):
            raise ValueError(f"resource contents for {self.uri!r} need exactly one of 'text' "
                             f"and 'blob' (build them with ResourceContents.from_text() or "
                             f"from_bytes())")
        out: dict[str, Any] = {"uri": self.uri}
        if self.mime_type is not None:
            out["mimeType"] = self.mime_type
        if self.text is not None:
            out["text"] = self.text
        else:
            out["blob"] = self.blob
        if self.meta is not None:
            out["_meta"] = self.meta
        out.update(self.extra)
        return out


@dataclass(slots=True, repr=False)
class EmbeddedResource(_Shown):
    """A ``resource`` block: a resource's contents carried inline."""

    resource: ResourceContents
    annotations: dict[str, Any] | None = None
    meta: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)
    type: str = "resource"

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EmbeddedResource:
        d = _require_dict(d, "an embedded resource block")
        if "resource" not in d:
            raise ProtocolError(f"an embedded resource block has no 'resource' field: "
                                f"{_excerpt(d)}")
        return cls(ResourceContents.from_dict(d["resource"]), _dict(d, "annotations"),
                   _dict(d, "_meta"), _extra(d, _EMBEDDED_KNOWN), d)

    # No ``of(contents)``: ``EmbeddedResource(contents)`` already is that constructor. These
    # two build the contents too, which is the step every caller would otherwise repeat.
    @classmethod
    def from_text(cls, uri: str, text: str, mime_type: str | None = None, *,
                  annotations: dict[str, Any] | None = None) -> EmbeddedResource:
        """A ``resource`` block carrying text contents (see ResourceContents.from_text)."""
        return cls(ResourceContents.from_text(uri, text, mime_type), annotations)

    @classmethod
    def from_bytes(cls, uri: str, data: builtins.bytes, mime_type: str | None = None, *,
                   annotations: dict[str, Any] | None = None) -> EmbeddedResource:
        """A ``resource`` block carrying a base64 blob (see ResourceContents.from_bytes)."""
        return cls(ResourceContents.from_bytes(uri, data, mime_type), annotations)

    def to_dict(self) -> dict[str, Any]:
        """The block as wire JSON (the original dict when there is one)."""
        if self.raw:
            return self.raw
        return _with_common({"type": "resource", "resource": self.resource.to_dict()},
                            self.annotations, self.meta, self.extra)


@dataclass(slots=True, repr=False)
class ContentBlock(_Shown):
    """A content block of a type mcpsync does not model (``tool_use``, a future type), or a
    known type whose required fields were missing. ``raw`` holds everything."""

    type: str
    extra: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ContentBlock:
        d = _require_dict(d, "a content block")
        kind = d.get("type")
        return cls(kind if isinstance(kind, str) else "",
                   {k: v for k, v in d.items() if k != "type"}, d)

    def to_dict(self) -> dict[str, Any]:
        """The block as wire JSON: the original dict, or ``type`` and the other members."""
        return self.raw or {"type": self.type, **self.extra}


Content: TypeAlias = (TextContent | ImageContent | AudioContent | ResourceLink
                      | EmbeddedResource | ContentBlock)
"""Any content block; check ``.type`` or use ``isinstance``."""

_BLOCK_TYPES: dict[str, Any] = {
    "image": ImageContent,
    "audio": AudioContent,
    "resource_link": ResourceLink,
    "resource": EmbeddedResource,
}


def other_block(d: dict[str, Any], kind: object) -> Content:
    """``content_block_from_dict`` for a block that is not plain text: its own type when it
    parses, else a :class:`ContentBlock` (``kind`` is the block's ``type`` member; a text
    block that did not parse comes here too, and becomes a ``ContentBlock``)."""
    cls = _BLOCK_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is not None:
        try:
            block: Content = cls.from_dict(d)
            return block
        except ProtocolError:
            pass
    return ContentBlock.from_dict(d)


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
