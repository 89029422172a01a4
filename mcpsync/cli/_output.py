"""What an ``mcpsync`` command prints: its outcome, tables, ``--json`` documents, and tool
results and resources rendered as text.

A command builds its whole output as a string before anything is written (the output
discipline of :mod:`mcpsync.cli`), so formatting is pure and lives here, apart from the
code that talks to servers. ``mcpsync.types`` is imported inside the renderers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mcpsync.cli._errors import EXIT_OK

if TYPE_CHECKING:
    from mcpsync.types import CallToolResult, ReadResourceResult


@dataclass(frozen=True)
class _Outcome:
    """What a command produced: stdout text, exit code, and an optional stderr error line."""

    stdout: str
    code: int = EXIT_OK
    error: str | None = None


def _cell(value: Any, *, first_line: bool = False) -> str:
    if value is None:
        return ""
    text = str(value).strip()
    if first_line:
        return text.splitlines()[0].strip() if text else ""
    return " ".join(text.split())


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell, two spaces apart; the last one not padded."""
    all_rows = [list(header), *[list(r) for r in rows]]
    widths = [max(len(r[i]) for r in all_rows) for i in range(len(header) - 1)]
    lines = []
    for row in all_rows:
        cells = [c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)] + [row[-1]]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines) + "\n"


def _json_doc(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def _with_server(server_id: str, raw: Mapping[str, Any]) -> dict[str, Any]:
    """A listed item as sent, with the ``server`` key added (first)."""
    out: dict[str, Any] = {"server": server_id}
    out.update((k, v) for k, v in raw.items() if k != "server")
    return out


def _blob_size(blob: str) -> int:
    import base64
    import binascii

    try:
        return len(base64.b64decode(blob))
    except (binascii.Error, ValueError):
        return len(blob) * 3 // 4


def _render_block(block: Any) -> str:
    """A non-text content block as one line (``<N bytes of MIME>`` for binary data)."""
    from mcpsync.types import AudioContent, EmbeddedResource, ImageContent, ResourceLink

    if isinstance(block, (ImageContent, AudioContent)):
        return f"<{_blob_size(block.data)} bytes of {block.mime_type}>"
    if isinstance(block, EmbeddedResource):
        res = block.resource
        if res.text is not None:
            return res.text
        return f"<{_blob_size(res.blob or '')} bytes of {res.mime_type or 'unknown type'}>"
    if isinstance(block, ResourceLink):
        return f"<resource {block.uri}>"
    return json.dumps(getattr(block, "raw", None), ensure_ascii=False)


def _render_call(result: CallToolResult) -> str:
    """The text content; else the structured JSON; else the other blocks, one per line."""
    from mcpsync.types import TextContent

    texts = [b.text for b in result.content if isinstance(b, TextContent)]
    if texts:
        body = "\n".join(texts)
    elif result.structured is not None:
        body = json.dumps(result.structured, indent=2, ensure_ascii=False)
    else:
        body = "\n".join(_render_block(b) for b in result.content)
    return body + "\n" if body and not body.endswith("\n") else body


def _render_read(result: ReadResourceResult) -> str:
    parts = []
    for item in result.contents:
        if item.text is not None:
            parts.append(item.text)
        else:
            mime = item.mime_type or "unknown type"
            parts.append(f"<{_blob_size(item.blob or '')} bytes of {mime}>")
    body = "\n".join(parts)
    return body + "\n" if body and not body.endswith("\n") else body
