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

__all__ = ["KEEP_DECODED", "Envelope", "EnvelopeError", "IdKey", "Kind", "decode_object",
           "parse_envelope"]

Kind = Literal["request", "notification", "response", "error"]
#: How calls are matched: ``("int", 1)``, ``("str", "a1")`` or ``("raw", id text)``.
IdKey = tuple[str, Any]

_scanstring: Callable[[str, int], tuple[str, int]] = getattr(json.decoder, "scanstring")  # noqa: B009
_scan_once: Callable[[str, int], tuple[Any, int]] = getattr(json.JSONDecoder(), "scan_once")  # noqa: B009
_loads: Callable[[str], Any] = json.JSONDecoder().decode
_ABSENT: Final[Any] = object()
_WS: Final = " \t\n\r"
_EXCERPT: Final = 120
#: Frames shorter than this (in characters) keep their decoded object (:meth:`Envelope.decoded`).
KEEP_DECODED: Final = 4096


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

    ``kind`` and ``method`` (the decoded name, or ``None``) are read at parse time, with
    :attr:`id_key`, the id as a correlation key (``("int", 1)``, ``("str", "a1")``, or
    ``("raw", text)`` for an id of another JSON type), so ``"a\u0031"`` and ``"a1"`` are the
    same call, as they are to JSON. :attr:`id` (the id's raw text) and :meth:`raw` (any
    member's exact text: ``params``, ``result``, ``error``, or one the gateway has never heard
    of) find the member spans on first use: forwarding a frame unchanged never needs them.
    Treat it as a value: :meth:`replace` returns a new envelope.
    """

    __slots__ = ("_data", "_decoded", "_spans", "_text", "id_key", "kind", "method")

    def __init__(self, text: str, spans: dict[str, tuple[int, int]] | None, kind: Kind,
                 id_key: IdKey | None, method: str | None, data: bytes | None,
                 decoded: dict[str, Any] | None = None) -> None:
        self._text = text
        self._spans = spans
        self._data = data
        self._decoded = decoded
        self.kind: Kind = kind
        self.id_key = id_key
        self.method = method

    @property
    def text(self) -> str:
        """The frame's text (without a newline)."""
        return self._text

    def _member_spans(self) -> dict[str, tuple[int, int]]:
        spans = self._spans
        if spans is None:
            spans = self._spans = _scan_spans(self._text)
        return spans

    def decoded(self) -> dict[str, Any] | None:
        """The object the parse decoded, for a reader that needs the values (the traffic
        log, which would otherwise decode the frame a second time); ``None`` for a frame
        of :data:`KEEP_DECODED` characters or more (its values would outweigh its text while
        it waits in flight) and for a :meth:`replace`-d copy. Do not change it."""
        return self._decoded

    @property
    def id(self) -> str | None:
        """The id's exact text (``'7'``, ``'"a\\u0031"'``), or ``None`` when absent."""
        if self.id_key is None:
            return None
        return self.raw("id")

    @property
    def members(self) -> list[str]:
        """The top-level member names, in wire order (the last of duplicates counts)."""
        return list(self._member_spans())

    def raw(self, key: str) -> str | None:
        """The exact text of member ``key``'s value, or ``None`` when it is absent."""
        span = self._member_spans().get(key)
        return None if span is None else self._text[span[0]:span[1]]

    def to_bytes(self) -> bytes:
        """The frame as UTF-8 (no newline): the parsed bytes themselves if nothing changed."""
        if self._data is None:
            self._data = self._text.encode("utf-8", "surrogatepass")
        return self._data

    def replace(self, key: str, raw_value: str) -> Envelope:
        """A copy with member ``key``'s value text replaced by ``raw_value`` (valid JSON text,
        not checked), or appended as the last member when absent. Every other byte stays.

        Replacing ``id`` or ``method`` updates :attr:`id_key` / :attr:`method`; the kind
        stays (callers replace values, they do not turn a request into a response).
        """
        text = self._text
        spans = self._member_spans()
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
        id_key = self.id_key
        if key == "method":
            decoded = json.loads(raw_value)
            method = decoded if isinstance(decoded, str) else method
        elif key == "id":
            id_key = _key_of(json.loads(raw_value), raw_value)
        return Envelope(new_text, new_spans, self.kind, id_key, method, None)

    def __repr__(self) -> str:
        parts: list[str] = [self.kind]
        if self.id_key is not None:
            parts.append(f"id={self.id}")
        if self.method is not None:
            parts.append(f"method={self.method!r}")
        parts.append(f"{len(self._text)} chars")
        return f"Envelope({' '.join(parts)})"


def _key_of(value: Any, raw: str | None) -> IdKey:
    kind = type(value)
    if kind is int:
        return ("int", value)
    if kind is str:
        return ("str", value)
    return ("raw", raw if raw is not None else json.dumps(value))


def _excerpt(text: str) -> str:
    return text if len(text) <= _EXCERPT else text[:_EXCERPT] + "..."


def parse_envelope(data: bytes | str) -> Envelope:
    """Parse one frame (without its newline) into an :class:`Envelope`.

    Raises :class:`EnvelopeError` when it is not UTF-8 JSON (-32700) or not an object of a
    message kind (-32600). Nothing else is checked: see the module docstring. The text is
    decoded once by the C decoder (which checks it is JSON); member spans wait until asked.
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
    body = text[1:] if text[:1] == "\ufeff" else text
    try:
        obj = _loads(body)
    except (ValueError, RecursionError) as exc:
        raise EnvelopeError(f"the frame is not valid JSON ({exc}): {_excerpt(text)!r}",
                            code=PARSE_ERROR) from None
    if type(obj) is not dict:
        code = INVALID_REQUEST if type(obj) is list else PARSE_ERROR
        what = "a batch (an array)" if code == INVALID_REQUEST else "not a JSON object"
        raise EnvelopeError(f"the frame is {what}: {_excerpt(text)!r}", code=code)
    method = obj.get("method")
    rid = obj.get("id", _ABSENT)
    id_key = None if rid is _ABSENT else _key_of(rid, None if type(rid) in (int, str)
                                                 else _raw_id(text))
    kind: Kind
    if "method" in obj:
        if type(method) is not str:
            raise EnvelopeError(f"the frame's method is not a string: {_excerpt(text)!r}",
                                code=INVALID_REQUEST)
        kind = "request" if rid is not _ABSENT and rid is not None else "notification"
    elif "error" in obj:
        kind, method = "error", None
    elif "result" in obj:
        kind, method = "response", None
    else:
        raise EnvelopeError("the frame is no JSON-RPC message (no method, result or error): "
                            f"{_excerpt(text)!r}", code=INVALID_REQUEST)
    return Envelope(text, None, kind, id_key, method, raw_bytes,
                    obj if len(text) < KEEP_DECODED else None)


def decode_object(data: bytes | bytearray) -> dict[str, Any] | None:
    """The JSON object ``data`` (one frame, UTF-8, no newline) holds, or ``None`` when it is
    anything else or this quick look cannot tell (then :func:`parse_envelope` decides, and
    names what is wrong).

    The gateway's pass-through reads most frames with this alone where msgspec is not
    installed (``mcpsync.gateway._frame_keys``): one call into the C scanner, without the
    Python steps of ``json.loads`` (two regular-expression matches for the whitespace around
    the value) or an :class:`Envelope`. A frame that begins or ends
    with whitespace or a byte-order mark, or is not an object, gets ``None``; so does text
    that is not JSON, exactly where ``parse_envelope`` would fail.
    """
    try:
        text = data.decode("utf-8")
        obj, end = _scan_once(text, 0)
    except (UnicodeDecodeError, StopIteration, ValueError, RecursionError):
        return None
    if end != len(text) or type(obj) is not dict:
        return None
    return obj


def _raw_id(text: str) -> str | None:
    span = _scan_spans(text).get("id")
    return None if span is None else text[span[0]:span[1]]


def _scan_spans(text: str) -> dict[str, tuple[int, int]]:
    """The value span of every top-level member of the object ``text`` (already known to be
    a valid JSON object), in wire order; of duplicates, the last, at its own position."""
    spans: dict[str, tuple[int, int]] = {}
    i = _skip(text, 1 if text[:1] == "\ufeff" else 0)
    i = _skip(text, i + 1)
    if text[i] == "}":
        return spans
    while True:
        name, i = _scanstring(text, i + 1)
        i = _skip(text, _skip(text, i) + 1)   # past the ':'
        start = i
        _, i = _scan_once(text, i)
        spans.pop(name, None)
        spans[name] = (start, i)
        i = _skip(text, i)
        if text[i] == "}":
            return spans
        i = _skip(text, i + 1)
