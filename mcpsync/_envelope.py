"""The tolerant envelope: one JSON-RPC frame as raw text spans, for forwarding it untouched.

The strict parser (:mod:`mcpsync.jsonrpc`) decodes a frame into Python values and checks it
against JSON-RPC; re-serialising what it decoded loses what the wire said (``1.50`` becomes
``1.5``, ``1E2`` becomes ``100.0``, ``\\u00e9`` becomes ``é``, whitespace goes). A gateway
must hand a frame on as it came, changing only what it has to (an id, say), so that a field or
a revision it does not know still reaches the other side byte for byte.

:func:`parse_envelope` therefore keeps the frame's text and, for every top-level member, the
span of its value. It learns only what routing needs: the kind (request, notification,
response, error), the id's raw text and the method name. It fails only when the text is not
JSON, is not an object, or is an object of no kind (no ``method``, ``result`` or ``error``);
a ``jsonrpc`` value other than ``"2.0"``, ids of any JSON type and unknown members all pass.
:meth:`Envelope.to_bytes` of an unchanged envelope gives back the very bytes parsed, and
:meth:`Envelope.replace` splices one member's new text in, leaving every other byte alone.

Client and server keep the strict parser; only the gateway uses this.
"""

from __future__ import annotations

import json
import json.decoder
import json.encoder
from collections.abc import Callable
from typing import Any, Final, Literal

from mcpsync._codes import INVALID_REQUEST, PARSE_ERROR
from mcpsync.errors import MCPError

__all__ = ["Envelope", "EnvelopeError", "Kind", "parse_envelope"]

Kind = Literal["request", "notification", "response", "error"]

_scanstring: Callable[[str, int], tuple[str, int]] = getattr(json.decoder, "scanstring")  # noqa: B009
_scan_once: Callable[[str, int], tuple[Any, int]] = getattr(json.JSONDecoder(), "scan_once")  # noqa: B009
_WS: Final = " \t\n\r"
_EXCERPT: Final = 120


class EnvelopeError(MCPError):
    """A frame that is not JSON (``code`` -32700) or is JSON of no message kind (-32600)."""

    def __init__(self, message: str, *, code: int) -> None:
        super().__init__(message)
        self.code = code


def _skip(text: str, i: int) -> int:
    n = len(text)
    while i < n and text[i] in _WS:
        i += 1
    return i


class Envelope:
    """One parsed frame: its text, its kind, and where each top-level member's value lies.

    ``kind``, ``id`` (the id's raw JSON text, or ``None`` when absent) and ``method`` (the
    decoded name, or ``None``) are read once at parse time. :meth:`raw` gives any member's
    exact text (``params``, ``result``, ``error``, or one the gateway has never heard of).
    Treat it as a value: :meth:`replace` returns a new envelope.
    """

    __slots__ = ("_data", "_spans", "_text", "id", "kind", "method")

    def __init__(self, text: str, spans: dict[str, tuple[int, int]], kind: Kind,
                 id: str | None, method: str | None, data: bytes | None) -> None:
        self._text = text
        self._spans = spans
        self._data = data
        self.kind: Kind = kind
        self.id = id
        self.method = method

    @property
    def text(self) -> str:
        """The frame's text (without a newline)."""
        return self._text

    @property
    def members(self) -> list[str]:
        """The top-level member names, in wire order (the last of duplicates counts)."""
        return list(self._spans)

    def raw(self, key: str) -> str | None:
        """The exact text of member ``key``'s value, or ``None`` when it is absent."""
        span = self._spans.get(key)
        return None if span is None else self._text[span[0]:span[1]]

    def to_bytes(self) -> bytes:
        """The frame as UTF-8 (no newline): the parsed bytes themselves if nothing changed."""
        if self._data is None:
            self._data = self._text.encode("utf-8", "surrogatepass")
        return self._data

    def replace(self, key: str, raw_value: str) -> Envelope:
        """A copy with member ``key``'s value text replaced by ``raw_value`` (valid JSON text,
        not checked), or appended as the last member when absent. Every other byte stays.

        Replacing ``id`` or ``method`` updates :attr:`id` / :attr:`method`; the kind stays
        (callers replace values, they do not turn a request into a response).
        """
        text = self._text
        spans = self._spans
        span = spans.get(key)
        if span is not None:
            start, end = span
            new_text = text[:start] + raw_value + text[end:]
            delta = len(raw_value) - (end - start)
            new_spans = {k: ((s + delta, e + delta) if s >= end else (s, e))
                         for k, (s, e) in spans.items()}
            new_spans[key] = (start, start + len(raw_value))
        else:
            close = text.rindex("}")
            body_end = close
            while body_end > 0 and text[body_end - 1] in _WS:
                body_end -= 1
            sep = "" if text[body_end - 1] == "{" else ","
            head = f'{sep}{json.encoder.encode_basestring(key)}:'
            start = body_end + len(head)
            new_text = text[:body_end] + head + raw_value + text[body_end:]
            new_spans = dict(spans)
            new_spans[key] = (start, start + len(raw_value))
        method = self.method
        if key == "method":
            decoded = json.loads(raw_value)
            method = decoded if isinstance(decoded, str) else method
        new_id = raw_value if key == "id" else self.id
        return Envelope(new_text, new_spans, self.kind, new_id, method, None)

    def __repr__(self) -> str:
        parts: list[str] = [self.kind]
        if self.id is not None:
            parts.append(f"id={self.id}")
        if self.method is not None:
            parts.append(f"method={self.method!r}")
        parts.append(f"{len(self._text)} chars")
        return f"Envelope({' '.join(parts)})"


def _excerpt(text: str) -> str:
    return text if len(text) <= _EXCERPT else text[:_EXCERPT] + "..."


def parse_envelope(data: bytes | str) -> Envelope:
    """Parse one frame (without its newline) into an :class:`Envelope`.

    Raises :class:`EnvelopeError` when it is not UTF-8 JSON (-32700) or not an object of a
    message kind (-32600). Nothing else is checked: see the module docstring.
    """
    raw_bytes: bytes | None
    if isinstance(data, str):
        text, raw_bytes = data, None
    else:
        raw_bytes = bytes(data)
        try:
            text = raw_bytes.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise EnvelopeError(f"the frame is not UTF-8 (bad byte at {exc.start})",
                                code=PARSE_ERROR) from None
    i = _skip(text, 1 if text[:1] == "\ufeff" else 0)
    if text[i:i + 1] != "{":
        code = INVALID_REQUEST if text[i:i + 1] == "[" else PARSE_ERROR
        what = "a batch (an array)" if code == INVALID_REQUEST else "not a JSON object"
        raise EnvelopeError(f"the frame is {what}: {_excerpt(text)!r}", code=code)
    spans: dict[str, tuple[int, int]] = {}
    values: dict[str, Any] = {}
    try:
        i = _skip(text, i + 1)
        if text[i] != "}":
            while True:
                if text[i] != '"':
                    raise ValueError("expected a member name")
                name, i = _scanstring(text, i + 1)
                i = _skip(text, i)
                if text[i] != ":":
                    raise ValueError("expected ':'")
                i = _skip(text, i + 1)
                start = i
                value, i = _scan_once(text, i)
                spans.pop(name, None)   # the last of duplicates wins, at its own position
                spans[name] = (start, i)
                if name in ("id", "method", "result", "error"):
                    values[name] = value
                i = _skip(text, i)
                if text[i] == "}":
                    break
                if text[i] != ",":
                    raise ValueError("expected ',' or '}'")
                i = _skip(text, i + 1)
        if _skip(text, i + 1) != len(text):
            raise ValueError("text after the object")
    except (IndexError, ValueError, StopIteration, RecursionError) as exc:
        reason = str(exc) if isinstance(exc, ValueError) and str(exc) else "malformed JSON"
        raise EnvelopeError(f"the frame is not valid JSON ({reason}): {_excerpt(text)!r}",
                            code=PARSE_ERROR) from None
    method = values.get("method")
    id_span = spans.get("id")
    rid = None if id_span is None else text[id_span[0]:id_span[1]]
    kind: Kind
    if "method" in spans:
        if not isinstance(method, str):
            raise EnvelopeError(f"the frame's method is not a string: {_excerpt(text)!r}",
                                code=INVALID_REQUEST)
        kind = "request" if rid is not None and values.get("id") is not None else "notification"
    elif "error" in spans:
        kind, method = "error", None
    elif "result" in spans:
        kind, method = "response", None
    else:
        raise EnvelopeError("the frame is no JSON-RPC message (no method, result or error): "
                            f"{_excerpt(text)!r}", code=INVALID_REQUEST)
    return Envelope(text, spans, kind, rid, method, raw_bytes)
