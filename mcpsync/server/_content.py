"""One thing a handler returned → one wire content block, fit for the revision in use.

Tool results and prompt messages carry the same blocks, so both go through :func:`to_block`.
A handler may give a ``str`` (a text block), a typed block from :mod:`mcpsync.types`, a
:class:`~mcpsync.types.ResourceContents` (embedded as a ``resource`` block) or a wire dict.

Two block types are younger than some revisions we serve: ``audio`` appeared in 2025-03-26 and
``resource_link`` in 2025-06-18. A client of an older revision validates results against a
schema without them, so it would reject the whole result. Dropping the block silently would
hide from the model that something was there, so each becomes a text block that says what was
left out (a link keeps its URI, which the model can still name). The block's ``annotations``
(audience, priority) carry over to the stand-in, since they existed in every revision.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcpsync.errors import ProtocolError
from mcpsync.types import (
    AudioContent,
    ContentBlock,
    EmbeddedResource,
    ImageContent,
    ResourceContents,
    ResourceLink,
    TextContent,
)

__all__ = ["BYTES_HINT", "is_block", "is_bytes", "is_typed", "text_block", "to_block",
           "to_revision"]

_PARSERS: dict[str, Any] = {
    "text": TextContent,
    "image": ImageContent,
    "audio": AudioContent,
    "resource": EmbeddedResource,
    "resource_link": ResourceLink,
}
_TYPED = (TextContent, ImageContent, AudioContent, ResourceLink, EmbeddedResource,
          ContentBlock, ResourceContents)
_NO_AUDIO = frozenset({"2024-11-05"})
_NO_RESOURCE_LINK = frozenset({"2024-11-05", "2025-03-26"})

BYTES_HINT = ("bytes have no content type: wrap them in ImageContent.from_bytes(data, "
              "mime_type), AudioContent.from_bytes(data, mime_type) or "
              "EmbeddedResource.from_bytes(uri, data, mime_type) (from mcpsync)")


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def is_bytes(value: object) -> bool:
    return isinstance(value, (bytes, bytearray, memoryview))


def is_typed(value: object) -> bool:
    """A block object from :mod:`mcpsync.types` (or contents to embed)."""
    return isinstance(value, _TYPED)


def is_block(value: object) -> bool:
    """A typed block, contents to embed, or a wire dict whose ``type`` is a known block."""
    if isinstance(value, _TYPED):
        return True
    kind = value.get("type") if isinstance(value, Mapping) else None
    return isinstance(kind, str) and kind in _PARSERS


def to_block(item: object, version: str, where: str) -> dict[str, Any]:
    """The wire block for ``item`` under ``version``; ``where`` names it in errors
    (``"content block 2"``). Raises ``TypeError`` for a value that is no block at all and
    ``ValueError`` for a wire dict that is malformed: both are the server author's bug."""
    if isinstance(item, str):
        return text_block(item)
    if isinstance(item, ResourceContents):
        block: dict[str, Any] = {"type": "resource", "resource": dict(item.to_dict())}
    elif isinstance(item, _TYPED):
        block = dict(item.to_dict())
    elif isinstance(item, Mapping):
        block = _checked(item, where)
    elif is_bytes(item):
        raise TypeError(f"{where} is bytes, and {BYTES_HINT}")
    else:
        raise TypeError(f"{where} is a {type(item).__name__}, not a content block: give a "
                        f"str, a block such as mcpsync.ImageContent, or a wire dict")
    return to_revision(block, version)


def _checked(item: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A copy of a wire block, once its type's parser accepts it (the client's own parser,
    so what we send is what we would read)."""
    block = dict(item)
    kind = block.get("type")
    parser = _PARSERS.get(kind) if isinstance(kind, str) else None
    if parser is None:
        raise ValueError(f"{where} has type {kind!r}; a content block's type is one of "
                         f"{', '.join(sorted(_PARSERS))}")
    try:
        parser.from_dict(block)
    except ProtocolError as exc:
        raise ValueError(f"{where}: {exc}") from None
    return block


def to_revision(block: dict[str, Any], version: str) -> dict[str, Any]:
    """``block`` itself when ``version`` has its type, else a text stand-in (see above)."""
    kind = block.get("type")
    if kind == "audio" and version in _NO_AUDIO:
        mime = block.get("mimeType")
        what = f"audio ({mime})" if isinstance(mime, str) else "audio"
        return _stand_in(block, f"[{what} omitted: protocol {version} has no audio content]")
    if kind == "resource_link" and version in _NO_RESOURCE_LINK:
        name = block.get("title") or block.get("name")
        text = f"[resource link: {name} <{block.get('uri')}>"
        description = block.get("description")
        if isinstance(description, str) and description:
            text += f": {description}"
        return _stand_in(block, text + "]")
    return block


def _stand_in(block: dict[str, Any], text: str) -> dict[str, Any]:
    out = text_block(text)
    annotations = block.get("annotations")
    if isinstance(annotations, dict):
        out["annotations"] = annotations
    return out
