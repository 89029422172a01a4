"""How MCP objects look: short one-line reprs, and rich output for IPython and Jupyter.

The dataclasses of :mod:`mcpsync.types` delegate here, so the rendering rules live in one
place and the dataclasses stay about data. Two rules shape everything below:

- A repr is for a person reading a REPL or a log: it never echoes ``raw`` (which repeats every
  field), cuts long text with an ellipsis, and shows binary content as kind, size and MIME type
  (base64 text is noise, and can be megabytes).
- Everything a server sent is untrusted. Every string that goes into HTML is escaped; a link
  is made only for an ``http(s)`` URL and opens with ``rel="noopener noreferrer"``; images
  are inlined only for raster types a browser cannot run code from (no SVG) and only when
  the data really is base64.

IPython is never imported: it finds ``_repr_html_`` and ``_repr_mimebundle_`` on its own.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

__all__ = [
    "DisplayList",
    "html_of",
    "mimebundle_of",
    "short_repr",
]

T = TypeVar("T")

_TEXT_CUT = 60        # characters of text shown in a repr
_DESC_CUT = 50        # characters of a tool's or prompt's description in a repr
_ITEMS_CUT = 3        # content blocks or list items shown in a repr
_HTML_TEXT_CUT = 20_000   # characters of one text block shown in HTML
_HTML_ROWS_CUT = 500      # rows of a table shown in HTML

# Images a notebook may show inline. SVG is left out on purpose: it is a document that can
# carry script and links, so it is shown as text and size only.
_INLINE_IMAGES = frozenset(("image/png", "image/jpeg", "image/gif", "image/webp"))
_MIME = re.compile(r"^[a-z0-9][a-z0-9.+-]*/[a-z0-9][a-z0-9.+-]*$")


# --- small helpers -----------------------------------------------------------------------

def cut(text: str, limit: int) -> str:
    """``text`` on one line, at most ``limit`` characters (an ellipsis marks the cut)."""
    flat = " ".join(text.split()) if ("\n" in text or "\r" in text or "\t" in text) else text
    return flat if len(flat) <= limit else flat[:limit - 1] + "…"


def _cut_repr(value: object, limit: int) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def b64_size(data: str) -> int:
    """The decoded size of base64 ``data`` without decoding it."""
    n = len(data.rstrip("\n\r "))
    return max(0, n * 3 // 4 - data.count("=", max(0, n - 2)))


def human_size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n / (1024 * 1024):.1f} MiB"


def _esc(value: object) -> str:
    import html  # here: only notebooks render HTML, and the module costs an import ~1 ms

    return html.escape(str(value), quote=True)


def safe_href(uri: object) -> str | None:
    """``uri`` when it is an http(s) URL fit for a link, else ``None`` (``javascript:``,
    ``data:``, ``file:`` and anything odd stay plain text)."""
    if not isinstance(uri, str) or len(uri) > 4096:
        return None
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in uri):
        return None
    try:
        parts = urlsplit(uri)
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        return None
    return uri


def _link(uri: str, label: str | None = None) -> str:
    href = safe_href(uri)
    text = _esc(label if label is not None else uri)
    if href is None:
        return f"<code>{text}</code>"
    return f'<a href="{_esc(href)}" target="_blank" rel="noopener noreferrer">{text}</a>'


def _mime_ok(mime: object) -> str | None:
    return mime.lower() if isinstance(mime, str) and _MIME.match(mime.lower()) else None


def _valid_b64(data: str) -> bool:
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _arg_names(schema: dict[str, Any]) -> list[str]:
    props = schema.get("properties")
    if not isinstance(props, dict):
        return []
    required = schema.get("required")
    need = set(required) if isinstance(required, list) else set()
    return [f"{k}*" if k in need else str(k) for k in props]


def _pre(text: str) -> str:
    shown = text if len(text) <= _HTML_TEXT_CUT else text[:_HTML_TEXT_CUT] + "…"
    more = "" if shown is text else (f'<div style="opacity:.7">… {len(text) - _HTML_TEXT_CUT:,}'
                                     " more characters</div>")
    return f'<pre style="white-space:pre-wrap;margin:0">{_esc(shown)}</pre>{more}'


def _json(value: Any) -> str:
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):
        return repr(value)


# --- short reprs -------------------------------------------------------------------------

def _media_repr(obj: Any) -> str:
    return (f"{type(obj).__name__}(mime_type={obj.mime_type!r}, "
            f"size={human_size(b64_size(obj.data))})")


def _contents_repr(obj: Any) -> str:
    mime = f", mime_type={obj.mime_type!r}" if obj.mime_type else ""
    if obj.text is not None:
        body = f"text={cut(obj.text, _TEXT_CUT)!r}"
    else:
        body = f"blob={human_size(b64_size(obj.blob or ''))}"
    return f"ResourceContents(uri={cut(obj.uri, 80)!r}{mime}, {body})"


def _items_repr(items: Sequence[Any]) -> str:
    shown = ", ".join(short_repr(i) for i in items[:_ITEMS_CUT])
    more = f", … {len(items) - _ITEMS_CUT} more" if len(items) > _ITEMS_CUT else ""
    return f"[{shown}{more}]"


def short_repr(obj: Any) -> str:
    """The one-line repr of an object of :mod:`mcpsync.types` (see the module docstring)."""
    kind = type(obj).__name__
    if kind == "TextContent":
        return f"TextContent(text={cut(obj.text, _TEXT_CUT)!r})"
    if kind in ("ImageContent", "AudioContent"):
        return _media_repr(obj)
    if kind == "ResourceLink":
        mime = f", mime_type={obj.mime_type!r}" if obj.mime_type else ""
        return f"ResourceLink(uri={cut(obj.uri, 80)!r}, name={cut(obj.name, 40)!r}{mime})"
    if kind == "ResourceContents":
        return _contents_repr(obj)
    if kind == "EmbeddedResource":
        return f"EmbeddedResource({_contents_repr(obj.resource)})"
    if kind == "ContentBlock":
        return f"ContentBlock(type={obj.type!r}, fields={sorted(obj.extra)[:6]!r})"
    if kind == "Tool":
        desc = f", description={cut(obj.description, _DESC_CUT)!r}" if obj.description else ""
        return (f"Tool(name={cut(obj.name, 40)!r}, "
                f"args={cut(', '.join(_arg_names(obj.input_schema)), 40)!r}{desc})")
    if kind == "CallToolResult":
        structured = ("" if obj.structured is None
                      else f", structured={_cut_repr(obj.structured, 80)}")
        error = ", is_error=True" if obj.is_error else ""
        return f"CallToolResult(content={_items_repr(obj.content)}{structured}{error})"
    if kind == "Resource":
        mime = f", mime_type={obj.mime_type!r}" if obj.mime_type else ""
        return f"Resource(uri={cut(obj.uri, 80)!r}, name={cut(obj.name, 40)!r}{mime})"
    if kind == "ResourceTemplate":
        return (f"ResourceTemplate(uri_template={cut(obj.uri_template, 80)!r}, "
                f"name={cut(obj.name, 40)!r})")
    if kind == "ReadResourceResult":
        return f"ReadResourceResult(contents={_items_repr(obj.contents)})"
    if kind == "PromptArgument":
        return f"PromptArgument(name={cut(obj.name, 40)!r}, required={obj.required})"
    if kind == "Prompt":
        args = ", ".join(a.name + ("*" if a.required else "") for a in obj.arguments)
        desc = f", description={cut(obj.description, _DESC_CUT)!r}" if obj.description else ""
        return f"Prompt(name={cut(obj.name, 40)!r}, args={cut(args, 40)!r}{desc})"
    if kind == "PromptMessage":
        return f"PromptMessage(role={obj.role!r}, content={short_repr(obj.content)})"
    if kind == "GetPromptResult":
        desc = f"description={cut(obj.description, _DESC_CUT)!r}, " if obj.description else ""
        return f"GetPromptResult({desc}messages={_items_repr(obj.messages)})"
    if kind == "CompleteResult":
        total = f", total={obj.total}" if obj.total is not None else ""
        return (f"CompleteResult(values={_cut_repr(obj.values, 80)}{total}, "
                f"has_more={obj.has_more})")
    if kind == "ServerInfo":
        return (f"ServerInfo(name={cut(obj.name, 40)!r}, version={cut(obj.version, 20)!r}, "
                f"protocol_version={obj.protocol_version!r})")
    if kind == "Root":
        name = f", name={cut(obj.name, 40)!r}" if obj.name else ""
        return f"Root(uri={cut(obj.uri, 80)!r}{name})"
    return object.__repr__(obj)


# --- HTML ----------------------------------------------------------------------------------

_BOX = ('<div style="border:1px solid #ccc;border-radius:4px;padding:6px 8px;'
        'margin:2px 0;font-family:sans-serif;font-size:13px">')


def _media_html(obj: Any) -> str:
    mime = _mime_ok(obj.mime_type)
    size = human_size(b64_size(obj.data))
    label = f"{obj.type} {_esc(obj.mime_type)}, {size}"
    if mime in _INLINE_IMAGES and _valid_b64(obj.data):
        return (f'<div><img src="data:{mime};base64,{obj.data}" alt="{_esc(label)}" '
                f'style="max-width:100%"/><div style="opacity:.7">{label}</div></div>')
    if obj.type == "audio" and mime is not None and mime.startswith("audio/") \
            and _valid_b64(obj.data):
        return (f'<div><audio controls src="data:{mime};base64,{obj.data}"></audio>'
                f'<div style="opacity:.7">{label}</div></div>')
    return f'<div style="opacity:.7">[{label}]</div>'


def _contents_html(obj: Any) -> str:
    head = f"<div>{_link(obj.uri)}"
    if obj.mime_type:
        head += f' <span style="opacity:.7">{_esc(obj.mime_type)}</span>'
    head += "</div>"
    if obj.text is not None:
        return head + _pre(obj.text)
    return head + f'<div style="opacity:.7">[blob, {human_size(b64_size(obj.blob or ""))}]</div>'


def _block_html(block: Any) -> str:
    kind = type(block).__name__
    if kind == "TextContent":
        return _pre(block.text)
    if kind in ("ImageContent", "AudioContent"):
        return _media_html(block)
    if kind == "ResourceLink":
        label = block.title or block.name
        extra = " ".join(_esc(x) for x in (block.mime_type,
                                           block.description and cut(block.description, 200))
                         if x)
        return (f"<div>🔗 {_link(block.uri, label)} <code>{_esc(cut(block.uri, 200))}</code>"
                f' <span style="opacity:.7">{extra}</span></div>')
    if kind == "EmbeddedResource":
        return _contents_html(block.resource)
    return f"<div>[{_esc(block.type or 'unknown')} block]</div>" + _pre(_json(block.raw
                                                                               or block.extra))


def _table(headers: Sequence[str], rows: Iterable[Sequence[str]], total: int) -> str:
    head = "".join(f'<th style="text-align:left">{_esc(h)}</th>' for h in headers)
    body = []
    for i, row in enumerate(rows):
        if i >= _HTML_ROWS_CUT:
            body.append(f'<tr><td colspan="{len(headers)}">… {total - i} more</td></tr>')
            break
        body.append("<tr>" + "".join(f'<td style="text-align:left">{c}</td>' for c in row)
                    + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _code(text: str) -> str:
    return f"<code>{_esc(text)}</code>"


def _desc(text: str | None) -> str:
    return _esc(cut(text, 300)) if text else ""


def _tool_row(t: Any) -> list[str]:
    return [_code(t.name), _code(", ".join(_arg_names(t.input_schema))), _desc(t.description)]


def _prompt_row(p: Any) -> list[str]:
    args = ", ".join(a.name + ("*" if a.required else "") for a in p.arguments)
    return [_code(p.name), _code(args), _desc(p.description)]


def _resource_row(r: Any) -> list[str]:
    return [_link(r.uri), _esc(r.name), _esc(r.mime_type or ""), _desc(r.description)]


def _template_row(r: Any) -> list[str]:
    return [_code(r.uri_template), _esc(r.name), _esc(r.mime_type or ""), _desc(r.description)]


_ROWS: dict[str, tuple[tuple[str, ...], Any]] = {
    "Tool": (("tool", "arguments (* required)", "description"), _tool_row),
    "Prompt": (("prompt", "arguments (* required)", "description"), _prompt_row),
    "Resource": (("uri", "name", "MIME type", "description"), _resource_row),
    "ResourceTemplate": (("URI template", "name", "MIME type", "description"), _template_row),
}


def _list_html(items: Sequence[Any]) -> str:
    if not items:
        return "<div>(none)</div>"
    kind = type(items[0]).__name__
    spec = _ROWS.get(kind)
    if spec is None or any(type(i).__name__ != kind for i in items):
        return _BOX + "".join(html_of(i) or _pre(short_repr(i)) for i in items) + "</div>"
    headers, row = spec
    noun = kind if len(items) == 1 else kind + "s"
    return (_BOX + f"<div><b>{len(items)} {_esc(noun)}</b></div>"
            + _table(headers, (row(i) for i in items), len(items)) + "</div>")


def html_of(obj: Any) -> str | None:
    """HTML for ``obj`` (``None`` when there is nothing better than its repr)."""
    kind = type(obj).__name__
    if isinstance(obj, DisplayList):
        return _list_html(obj)
    if kind == "CallToolResult":
        status = ('<b style="color:#b00">tool error</b>' if obj.is_error else "<b>result</b>")
        parts = [_BOX, f"<div>{status}</div>"]
        parts += [_block_html(b) for b in obj.content]
        if obj.structured is not None:
            parts.append('<div style="opacity:.7">structured</div>' + _pre(_json(obj.structured)))
        return "".join(parts) + "</div>"
    if kind in ("TextContent", "ImageContent", "AudioContent", "ResourceLink",
                "EmbeddedResource", "ContentBlock"):
        return _BOX + _block_html(obj) + "</div>"
    if kind == "ResourceContents":
        return _BOX + _contents_html(obj) + "</div>"
    if kind == "ReadResourceResult":
        return _BOX + "".join(_contents_html(c) for c in obj.contents) + "</div>"
    if kind in _ROWS:
        headers, row = _ROWS[kind]
        return _BOX + _table(headers, [row(obj)], 1) + "</div>"
    if kind == "GetPromptResult":
        parts = [_BOX]
        if obj.description:
            parts.append(f"<div><i>{_desc(obj.description)}</i></div>")
        for m in obj.messages:
            parts.append(f"<div><b>{_esc(m.role)}</b></div>{_block_html(m.content)}")
        return "".join(parts) + "</div>"
    return None


def mimebundle_of(obj: Any) -> dict[str, Any] | None:
    """The raw media bundle of an image or audio block (``image/png`` and so on, base64 as
    the notebook format wants it), or ``None`` for anything else and for types shown as text
    only (SVG, unknown or malformed)."""
    mime = _mime_ok(getattr(obj, "mime_type", None))
    if mime is None or not _valid_b64(obj.data):
        return None
    if (obj.type == "image" and mime in _INLINE_IMAGES) or \
            (obj.type == "audio" and mime.startswith("audio/")):
        return {mime: obj.data, "text/plain": short_repr(obj)}
    return None


class DisplayList(list[T]):
    """A plain ``list`` (equal to one, and usable as one) that a notebook shows as a table:
    what ``list_tools()``, ``list_prompts()`` and the resource listings return."""

    __slots__ = ()

    def _repr_html_(self) -> str:
        return _list_html(self)
