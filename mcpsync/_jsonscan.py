"""Private JSON helpers for the wire layer: raw member spans and lone-surrogate checks.

The :mod:`json` module decodes values but exposes no source spans, and the wire layer needs
two things it cannot give: the exact wire text of a message's ``id`` (so an id is written back
byte for byte), and the span of each element of a batch (so a per-element error can quote it).
These helpers walk only the *top level* of a document that :mod:`json` has already accepted,
and use the C ``scanstring``/``scan_once`` of the stdlib to step over each member, so the
Python-level loop runs once per top-level member, never once per character.

Everything here assumes its input is valid JSON (the caller decoded it first); on anything
unexpected the helpers return ``None`` rather than guess.
"""

from __future__ import annotations

import json
import json.decoder
import re
from collections.abc import Callable
from typing import Any

__all__ = ["SURROGATE_RE", "element_spans", "has_lone_surrogate", "raw_member"]

#: A code point in U+D800-U+DFFF. After :mod:`json` has decoded a string, a *valid* surrogate
#: pair is one astral code point, so any match here is a lone (unpaired) surrogate.
SURROGATE_RE = re.compile("[\ud800-\udfff]")

_WS = re.compile(r"[ \t\n\r]*")


def _skip_ws(text: str, i: int) -> int:
    match = _WS.match(text, i)
    return match.end() if match is not None else i
_scanstring: Callable[[str, int], tuple[str, int]] = getattr(json.decoder, "scanstring")  # noqa: B009
# A plain decoder's scanner: used only to step over values json already accepted, so its
# parse_constant does not matter here.
_scan_once: Callable[[str, int], tuple[Any, int]] = getattr(json.JSONDecoder(), "scan_once")  # noqa: B009


def raw_member(text: str, start: int, key: str) -> str | None:
    """Return the exact source text of the *last* top-level member ``key`` of the object
    that starts at ``text[start]`` (a ``{``), or ``None`` when there is no such member.

    The last one, because :mod:`json` keeps the last of duplicate keys and the raw text must
    describe the value that was kept. Keys are compared after decoding, so ``"\\u0069d"`` is
    ``"id"`` just as it is to :mod:`json`.
    """
    try:
        if text[start] != "{":
            return None
        i = _skip_ws(text, start + 1)
        if text[i] == "}":
            return None
        found: str | None = None
        while True:
            if text[i] != '"':
                return None
            name, i = _scanstring(text, i + 1)
            i = _skip_ws(text, i)
            if text[i] != ":":
                return None
            i = _skip_ws(text, i + 1)
            value_start = i
            _, i = _scan_once(text, i)
            if name == key:
                found = text[value_start:i]
            i = _skip_ws(text, i)
            if text[i] == "}":
                return found
            if text[i] != ",":
                return None
            i = _skip_ws(text, i + 1)
    except (IndexError, ValueError, StopIteration, RecursionError):
        return None


def element_spans(text: str, start: int) -> list[tuple[int, int]] | None:
    """Return ``(start, end)`` of each element of the array that starts at ``text[start]``.

    Used for batches only (2025-03-26), which are rare enough that stepping over each element
    with the C scanner a second time is an acceptable cost.
    """
    try:
        if text[start] != "[":
            return None
        spans: list[tuple[int, int]] = []
        i = _skip_ws(text, start + 1)
        if text[i] == "]":
            return spans
        while True:
            _, end = _scan_once(text, i)
            spans.append((i, end))
            i = _skip_ws(text, end)
            if text[i] == "]":
                return spans
            if text[i] != ",":
                return None
            i = _skip_ws(text, i + 1)
    except (IndexError, ValueError, StopIteration, RecursionError):
        return None


def has_lone_surrogate(value: Any) -> bool:
    """Whether any string in a decoded JSON value, key or value, holds a lone surrogate.

    Iterative rather than recursive: the value may be nested as deeply as the C decoder
    allowed, which is deeper than a Python-level recursion could follow from here.
    """
    search = SURROGATE_RE.search
    stack: list[Any] = [value]
    pop = stack.pop
    push = stack.append
    extend = stack.extend
    while stack:
        item = pop()
        kind = type(item)
        if kind is str:
            if not item.isascii() and search(item):
                return True
        elif kind is dict:
            for k, v in item.items():
                if not k.isascii() and search(k):
                    return True
                push(v)
        elif kind is list:
            extend(item)
    return False
