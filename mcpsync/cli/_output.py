"""What an ``mcpsync`` command prints: its outcome, tables, ``--json`` documents, and tool
results and resources rendered as text.

A command builds its whole output as a string before anything is written (the output
discipline of :mod:`mcpsync.cli`), so formatting is pure and lives here, apart from the
code that talks to servers. ``mcpsync.types`` is imported inside the renderers.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mcpsync._printable import printable, terminal_text
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
    """One table cell: whitespace folded to single spaces (or only the first line), and
    every control or invisible character escaped, since servers write these values."""
    if value is None:
        return ""
    text = str(value).strip()
    if first_line:
        return printable(text.splitlines()[0].strip()) if text else ""
    return printable(" ".join(text.split()))


def _stdout_terminal() -> bool:
    """Whether stdout is a terminal (a tool's text is then escaped, see :func:`_text`)."""
    import sys

    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def _text(text: str, terminal: bool) -> str:
    """A text block as sent; on a terminal with its control characters (other than newline
    and tab) escaped, so a server cannot retitle the window or erase what was printed."""
    return terminal_text(text) if terminal else text


def _terminal_width() -> int | None:
    """The width to cut table lines to: the terminal's when stdout is one, or ``$COLUMNS``
    when set; ``None`` (no cutting) when the output goes to a file or a pipe."""
    import os
    import shutil
    import sys

    columns = os.environ.get("COLUMNS", "")
    if not columns.isdigit():
        try:
            if not sys.stdout.isatty():
                return None
        except (AttributeError, ValueError):
            return None
    return max(20, shutil.get_terminal_size().columns)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell, two spaces apart; the last one (a description)
    not padded, and cut with "..." to the terminal's width (see :func:`_terminal_width`)."""
    all_rows = [list(header), *[list(r) for r in rows]]
    widths = [max(len(r[i]) for r in all_rows) for i in range(len(header) - 1)]
    width = _terminal_width()
    lines = []
    for row in all_rows:
        cells = [c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)] + [row[-1]]
        line = "  ".join(cells).rstrip()
        if width is not None and len(line) > width:
            line = line[:width - 3].rstrip() + "..."
        lines.append(line)
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


_EXTENSIONS = {"image/png": ".png", "image/jpeg": ".jpg", "image/gif": ".gif",
               "image/webp": ".webp", "audio/wav": ".wav", "audio/x-wav": ".wav",
               "audio/mpeg": ".mp3", "audio/ogg": ".ogg", "application/pdf": ".pdf"}


def _save_blob(blob: str, mime: str | None, kind: str, output: str | None,
               number: int) -> str:
    """``--output DIR``: the decoded blob written to ``DIR/<kind>-<n><ext>``, or when that
    exists (a second run into the same DIR) ``<kind>-<n>-2<ext>``, ``-3``, ...: never over an
    existing file, never outside DIR. ``""`` without ``--output``, else ``, saved to P``, or
    ``, not saved: why`` (the tool has run: its output is printed whatever happens here)."""
    if output is None:
        return ""
    import base64
    import binascii
    import os

    try:
        data = base64.b64decode(blob, validate=False)
    except (binascii.Error, ValueError):
        return ", not saved: the data is not base64"
    ext = _EXTENSIONS.get((mime or "").lower(), ".bin")
    for copy in range(1, 10_000):
        suffix = f"-{copy}" if copy > 1 else ""
        path = os.path.join(output, f"{kind}-{number}{suffix}{ext}")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            continue
        except OSError as exc:
            return f", not saved: {printable(exc.strerror or str(exc))}"
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        except OSError as exc:
            return f", not saved to {path}: {printable(exc.strerror or str(exc))}"
        return f", saved to {path}"
    return f", not saved: every {kind}-{number}-N{ext} name in {output} is taken"


def _render_block(block: Any, output: str | None = None, number: int = 1,
                  terminal: bool = False) -> str:
    """One content block as text: text as sent (escaped on a ``terminal``, see
    :func:`_text`); an image or audio as ``<image, N bytes, image/png>``; a resource link
    as its URI; an embedded resource as its text, or ``<resource, N bytes, mime>``. The
    MIME types and URIs in these labels are always escaped."""
    importlib.import_module("mcpsync.types")
    from mcpsync.types import (
        AudioContent,
        EmbeddedResource,
        ImageContent,
        ResourceLink,
        TextContent,
    )

    if isinstance(block, TextContent):
        return _text(block.text, terminal)
    if isinstance(block, (ImageContent, AudioContent)):
        saved = _save_blob(block.data, block.mime_type, block.type, output, number)
        return (f"<{printable(block.type)}, {_blob_size(block.data)} bytes, "
                f"{printable(str(block.mime_type))}{saved}>")
    if isinstance(block, EmbeddedResource):
        res = block.resource
        if res.text is not None:
            return _text(res.text, terminal)
        mime = printable(res.mime_type or "unknown type")
        saved = _save_blob(res.blob or "", res.mime_type, "resource", output, number)
        return (f"<resource {printable(res.uri)}, {_blob_size(res.blob or '')} bytes, "
                f"{mime}{saved}>")
    if isinstance(block, ResourceLink):
        return printable(block.uri)
    # An unknown block as JSON: ensure_ascii escapes every control character in it.
    return json.dumps(getattr(block, "raw", None))


def _render_call(result: CallToolResult, output: str | None = None,
                 terminal: bool = False) -> str:
    """Every content block in order, one after the other; a result with no content but
    structured content shows that as JSON (escaped on a ``terminal``)."""
    if result.content:
        body = "\n".join(_render_block(b, output, i, terminal)
                         for i, b in enumerate(result.content, 1))
    elif result.structured is not None:
        body = _text(json.dumps(result.structured, indent=2, ensure_ascii=False), terminal)
    else:
        body = ""
    return body + "\n" if body and not body.endswith("\n") else body


def _render_read(result: ReadResourceResult, terminal: bool = False) -> str:
    """Each content's text (escaped on a ``terminal``) or ``<N bytes of mime>``."""
    parts = []
    for item in result.contents:
        if item.text is not None:
            parts.append(_text(item.text, terminal))
        else:
            mime = printable(item.mime_type or "unknown type")
            parts.append(f"<{_blob_size(item.blob or '')} bytes of {mime}>")
    body = "\n".join(parts)
    return body + "\n" if body and not body.endswith("\n") else body
