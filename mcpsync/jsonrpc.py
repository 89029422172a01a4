"""The JSON-RPC 2.0 wire layer: messages, ids, parsing, serialisation and line framing.

Like h11, this module is pure: it does no I/O of its own (the frame reader and writer, loaded
from ``mcpsync._frame_io`` on first access, only call the stream they are given), starts no
threads and reads no clock, so every edge case is a unit test. Parsing and serialisation run
on every call a client or server makes, so both have a fast path for the common shapes and
pay for rare cases (string ids with escapes, surrogate escapes, batches) only when the text
shows them.

The guarantees, and the reasons for them, are written up in ``docs/wire.md``.
"""

from __future__ import annotations

import importlib
import json
import json.encoder
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, NoReturn

from mcpsync._codes import (
    APPROVAL_REJECTED as APPROVAL_REJECTED,
    BUDGET_EXCEEDED as BUDGET_EXCEEDED,
    DENIED_BY_POLICY as DENIED_BY_POLICY,
    HEADER_MISMATCH as HEADER_MISMATCH,
    INTERNAL_ERROR as INTERNAL_ERROR,
    INVALID_PARAMS as INVALID_PARAMS,
    INVALID_REQUEST as INVALID_REQUEST,
    METHOD_NOT_FOUND as METHOD_NOT_FOUND,
    MISSING_CLIENT_CAPABILITY as MISSING_CLIENT_CAPABILITY,
    PARSE_ERROR as PARSE_ERROR,
    RESOURCE_NOT_FOUND as RESOURCE_NOT_FOUND,
    UNSUPPORTED_PROTOCOL_VERSION as UNSUPPORTED_PROTOCOL_VERSION,
    URL_ELICITATION_REQUIRED as URL_ELICITATION_REQUIRED,
)
from mcpsync._fields_eq import FACTORY, fields_eq
from mcpsync.errors import MCPError

if TYPE_CHECKING:
    from mcpsync._frame_io import FrameReader as FrameReader, FrameWriter as FrameWriter

# The error codes are defined in mcpsync._codes (so that ``errors`` can use them too) and are
# public here.
__all__ = [
    "APPROVAL_REJECTED",
    "BUDGET_EXCEEDED",
    "DENIED_BY_POLICY",
    "HEADER_MISMATCH",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "MAX_FRAME_BYTES",
    "METHOD_NOT_FOUND",
    "MISSING",
    "MISSING_CLIENT_CAPABILITY",
    "PARSE_ERROR",
    "RESOURCE_NOT_FOUND",
    "UNSUPPORTED_PROTOCOL_VERSION",
    "URL_ELICITATION_REQUIRED",
    "AnswerSink",
    "Batch",
    "FrameDecoder",
    "FrameReader",
    "FrameWriter",
    "Message",
    "ParseError",
    "RequestId",
    "StreamError",
    "error",
    "notification",
    "parse",
    "request",
    "result",
    "serialize",
    "serialize_request",
]

#: The largest line the frame reader accepts, excluding the newline (32 MiB).
MAX_FRAME_BYTES: Final = 32 * 1024 * 1024
#: How much of a bad line an error message quotes.
_EXCERPT_BYTES: Final = 200


class _MissingType:
    """Type of :data:`MISSING`: "member absent", distinct from a JSON ``null``."""

    __slots__ = ()
    _instance: _MissingType | None = None

    def __new__(cls) -> _MissingType:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "MISSING"


#: Sentinel for an absent member: ``Message.result`` is ``MISSING`` unless the message is a
#: successful response, because ``null`` is a legitimate result.
MISSING: Final[Any] = _MissingType()


# --- the scanning helpers, loaded on first use -------------------------------------------

# ``mcpsync._jsonscan`` serves only unusual text: a str holding non-ASCII characters, a
# surrogate escape, a string id in a text that holds a backslash, an id of 0 or -0, a batch. A
# client's usual line (bytes, integer ids) needs none of it, so it is not loaded with this
# module. Each name below loads it on its first call and puts the helper in its own place,
# so later calls go straight to the helper: an import statement on the path would cost about
# 0.5 us each time it ran. ``importlib.import_module`` comes before the ``from`` import: in a
# thread that waited on the module lock while a Ctrl-C stopped another thread's import of it,
# a bare ``from`` import reads the name from the failed, half-built module (ImportError);
# import_module looks again after the lock and imports the module itself.

def _lone_surrogate(text: str, /) -> re.Match[str] | None:
    """Where ``text`` holds a lone surrogate (``SURROGATE_RE.search``)."""
    global _lone_surrogate
    importlib.import_module("mcpsync._jsonscan")
    from mcpsync._jsonscan import SURROGATE_RE

    _lone_surrogate = SURROGATE_RE.search
    return _lone_surrogate(text)


def _raw_member(text: str, start: int, key: str) -> str | None:
    """``_jsonscan.raw_member``, loaded on first use."""
    global _raw_member
    importlib.import_module("mcpsync._jsonscan")
    from mcpsync._jsonscan import raw_member

    _raw_member = raw_member
    return raw_member(text, start, key)


def _element_spans(text: str, start: int) -> list[tuple[int, int]] | None:
    """``_jsonscan.element_spans``, loaded on first use."""
    global _element_spans
    importlib.import_module("mcpsync._jsonscan")
    from mcpsync._jsonscan import element_spans

    _element_spans = element_spans
    return element_spans(text, start)


def _has_lone_surrogate(value: Any) -> bool:
    """``_jsonscan.has_lone_surrogate``, loaded on first use."""
    global _has_lone_surrogate
    importlib.import_module("mcpsync._jsonscan")
    from mcpsync._jsonscan import has_lone_surrogate

    _has_lone_surrogate = has_lone_surrogate
    return has_lone_surrogate(value)


# The escapes a long decoded text is searched for, as compiled patterns made on first use
# (about 20-35 us each, not spent at import). On a long text a pattern's search is about
# three times as fast as ``in``: CPython's search for a two-character needle steps through
# the text in a loop of its own (about 0.73 ms a megabyte), where the pattern engine's
# literal search is quicker (about 0.25 ms), and a one-character needle is a ``memchr``
# (7.5 us a megabyte). So a text is first asked for a backslash; one that holds one is
# searched with ``in`` below _LONG_TEXT characters and with the pattern from there on. The
# mark is a choice, not a measured crossover: in wall time the pattern is as fast from a few
# hundred characters, but it counts more instructions than ``in`` on texts rich in
# backslashes of any length (about 5 % more for a whole 5 KB line of ``\n`` escapes, which
# still decodes in three quarters of the time), and below the mark the sequential call's
# instruction count stays what it was. A failed compile (a Ctrl-C in it) leaves the loader
# in place for the next call.

#: Characters from which a text holding a backslash is searched with a compiled pattern.
_LONG_TEXT: Final = 4096

def _load_u_escape(text: str, /) -> re.Match[str] | None:
    """Where ``text`` holds a ``\\u`` escape (compiles the pattern, binds ``_u_escape``)."""
    global _u_escape
    _u_escape = re.compile(r"\\u").search
    return _u_escape(text)


def _load_surrogate_escape(text: str, /) -> re.Match[str] | None:
    """Where ``text`` holds a ``\\ud``/``\\uD`` escape (a surrogate's, or the start of one);
    compiles the pattern and binds ``_surrogate_escape``."""
    global _surrogate_escape
    _surrogate_escape = re.compile(r"\\u[dD]").search
    return _surrogate_escape(text)


_u_escape: Callable[[str], re.Match[str] | None] = _load_u_escape
_surrogate_escape: Callable[[str], re.Match[str] | None] = _load_surrogate_escape


# --- errors -------------------------------------------------------------------------------


class ParseError(MCPError):
    """A line (or one batch element) that is not a valid JSON-RPC message.

    Recoverable: the stream is still in sync, and the next line is read normally. ``code`` is
    :data:`PARSE_ERROR` (not JSON) or :data:`INVALID_REQUEST` (JSON, but not JSON-RPC); ``id``
    is the message's :class:`RequestId` when a valid one could be read, so a server can answer
    as JSON-RPC requires (with ``"id": null`` otherwise); ``excerpt`` is the first 200 bytes of
    the offending text, decoded with replacement characters.
    """

    def __init__(self, message: str = "", *, code: int = PARSE_ERROR,
                 id: RequestId | None = None, excerpt: str = "",
                 server: str | None = None, method: str | None = None) -> None:
        super().__init__(message, server=server, method=method)
        self.code = code
        self.id = id
        self.excerpt = excerpt


class StreamError(MCPError):
    """The byte stream itself is broken: an over-long line, an I/O error, a closed stream.

    Fatal and sticky: the reader (or writer, or decoder) that raised it raises the same error
    on every later call, because there is no way to find the next message boundary again.
    """


class _Invalid(Exception):
    """Internal: a JSON value that is not a JSON-RPC message (becomes -32600)."""

    def __init__(self, reason: str, rid: RequestId | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.rid = rid


class _NonFinite(ValueError):
    """Internal: ``NaN``/``Infinity``/``-Infinity`` in the text (becomes -32700)."""


# --- ids and messages ---------------------------------------------------------------------

_encode_str: Callable[[str], str] = json.encoder.encode_basestring


class RequestId:
    """A request id as it was on the wire; immutable and hashable.

    ``raw`` is the exact JSON text (``'7'``, ``'"a\\u0062"'``) and is what gets written back,
    so a peer that compares ids textually sees its own bytes. ``value`` is the decoded id.
    Correlate on :attr:`key`, never on ``value`` alone: in a dict, ``1`` and ``True`` are the
    same key, and ``1`` and ``"1"`` are different ids that a careless table might merge.

    A plain slotted class with read-only properties rather than a frozen dataclass, because
    one is built for every parsed message and a frozen dataclass costs twice as much to build.
    """

    __slots__ = ("_raw", "_value")

    def __init__(self, raw: str, value: int | str) -> None:
        self._raw = raw
        self._value = value

    @property
    def raw(self) -> str:
        """The exact wire text of the id."""
        return self._raw

    @property
    def value(self) -> int | str:
        """The decoded id."""
        return self._value

    def __eq__(self, other: object) -> bool:
        if type(other) is not RequestId:
            return NotImplemented
        return self._raw == other._raw and self._value == other._value

    def __hash__(self) -> int:
        return hash((self._raw, self._value))

    def __repr__(self) -> str:
        return f"RequestId(raw={self._raw!r}, value={self._value!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (RequestId, (self._raw, self._value))

    @property
    def key(self) -> tuple[str, int | str]:
        """``("int", 1)`` or ``("str", "1")``: a correlation key that keeps kinds apart."""
        value = self._value
        return ("int", value) if type(value) is int else ("str", value)

    @classmethod
    def of(cls, value: int | str) -> RequestId:
        """Build an id for sending. ``bool`` is refused (``TypeError``): JSON has no boolean
        ids, and ``True == 1`` would make it collide with the integer id 1.

        A string holding a lone surrogate raises ``ValueError``, since it cannot be encoded.
        """
        if type(value) is int:
            return cls(str(value), value)
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise TypeError(f"a request id is an int or a str, not {type(value).__name__}")
        if isinstance(value, int):
            plain = int(value)
            return cls(str(plain), plain)
        text = str(value)
        if not text.isascii() and _lone_surrogate(text):
            raise ValueError("a request id cannot hold a lone surrogate")
        return cls(_encode_str(text), text)

    def __str__(self) -> str:
        return self.raw


def _as_id(id: RequestId | int | str) -> RequestId:
    return id if isinstance(id, RequestId) else RequestId.of(id)


_KNOWN_MEMBERS: Final = frozenset({"jsonrpc", "id", "method", "params", "result", "error"})


@dataclass(slots=True, init=False, repr=False, eq=False)
class Message:
    """One JSON-RPC message: a request, a notification or a response.

    Build messages with the module constructors :func:`request`, :func:`notification`,
    :func:`result` and :func:`error`, which check their arguments; the plain constructor does
    not, because :func:`parse` uses it on the hot path. Treat a message as a value and do not
    change it after handing it to a writer.

    ``params`` is ``None`` when absent, ``result`` is :data:`MISSING` when absent (``None`` is
    a valid result), ``error`` is ``None`` unless this is an error response. ``extra`` holds
    unknown top-level members in wire order; they are written back after the known ones, so
    a message from a newer revision passes through untouched.
    """

    id: RequestId | None = None
    method: str | None = None
    params: Any = None
    result: Any = MISSING
    error: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    # Written out rather than generated (init is False above), as for the types in
    # mcpsync.types: a dataclass generates and compiles __init__ at every import. The same
    # parameters and defaults (``extra``'s is mcpsync._fields_eq.FACTORY), each stored as
    # given; a field added later must be added here too.
    def __init__(self, id: RequestId | None = None, method: str | None = None,
                 params: Any = None, result: Any = MISSING,
                 error: dict[str, Any] | None = None, extra: dict[str, Any] = FACTORY) -> None:
        self.id = id
        self.method = method
        self.params = params
        self.result = result
        self.error = error
        self.extra = {} if extra is FACTORY else extra

    @property
    def is_request(self) -> bool:
        """A method call that expects an answer (it has an id)."""
        return self.method is not None and self.id is not None

    @property
    def is_notification(self) -> bool:
        """A method call with no id (absent or ``null``): no answer is sent."""
        return self.method is not None and self.id is None

    @property
    def is_response(self) -> bool:
        """A result or error response."""
        return self.method is None

    @property
    def is_error(self) -> bool:
        """An error response. Its ``id`` may be ``None``: an uncorrelated error."""
        return self.error is not None

    def to_bytes(self) -> bytes:
        """Same as :func:`serialize`."""
        return serialize(self)

    def to_dict(self) -> dict[str, Any]:
        """The message as a plain dict, in wire order, with the id's decoded value."""
        out: dict[str, Any] = {"jsonrpc": "2.0"}
        if self.id is not None:
            out["id"] = self.id.value
        elif self.method is None:
            out["id"] = None
        if self.method is not None:
            out["method"] = self.method
        if self.params is not None:
            out["params"] = self.params
        if self.result is not MISSING:
            out["result"] = self.result
        if self.error is not None:
            out["error"] = self.error
        out.update(self.extra)
        return out

    def __repr__(self) -> str:
        if self.method is not None:
            kind = "request" if self.id is not None else "notification"
        else:
            kind = "error" if self.error is not None else "result"
        parts = [kind]
        if self.id is not None:
            parts.append(f"id={self.id.raw}")
        if self.method is not None:
            parts.append(f"method={self.method!r}")
        if self.params is not None:
            parts.append(f"params={self.params!r}")
        if self.result is not MISSING:
            parts.append(f"result={self.result!r}")
        if self.error is not None:
            parts.append(f"error={self.error!r}")
        if self.extra:
            parts.append(f"extra={self.extra!r}")
        return f"Message({' '.join(parts)})"

    # Written out rather than generated (eq is False above), as for the types in
    # mcpsync.types: a dataclass generates and compiles __eq__ at every import. The same
    # comparison (mcpsync._fields_eq); __hash__ stays None.
    def __eq__(self, other: object) -> bool:
        return _message_eq(self, other)


_message_eq = fields_eq(list(Message.__dataclass_fields__))
# The generated __init__ carried the object None as its return annotation, not the string
# "None" that this module's annotations become: help() and inspect.signature show it so.
Message.__init__.__annotations__["return"] = None


class Batch(list["Message | ParseError"]):
    """A JSON-RPC batch (an array line); only the 2025-03-26 revision has them.

    Each item is a :class:`Message`, or a :class:`ParseError` for an element that is not a
    valid message, so one bad element does not lose the others.
    """

    __slots__ = ()


def _check_extra(extra: Mapping[str, Any] | None) -> dict[str, Any]:
    if not extra:
        return {}
    out = dict(extra)
    for key in out:
        if type(key) is not str:
            raise TypeError(f"extra member names are strings, not {type(key).__name__}")
        if key in _KNOWN_MEMBERS:
            raise ValueError(f"{key!r} is a JSON-RPC member, not an extra one")
    return out


def _check_params(params: Any) -> Any:
    if params is not None and not isinstance(params, (dict, list)):
        raise TypeError(f"params must be a dict, a list or None, not {type(params).__name__}")
    return params


def request(id: RequestId | int | str, method: str, params: Any = None, *,
            extra: Mapping[str, Any] | None = None) -> Message:
    """A request: a method call that expects a response carrying the same id."""
    if type(method) is not str:
        raise TypeError(f"method must be a str, not {type(method).__name__}")
    return Message(_as_id(id), method, _check_params(params), MISSING, None, _check_extra(extra))


def notification(method: str, params: Any = None, *,
                 extra: Mapping[str, Any] | None = None) -> Message:
    """A notification: a method call with no id, which is never answered."""
    if type(method) is not str:
        raise TypeError(f"method must be a str, not {type(method).__name__}")
    return Message(None, method, _check_params(params), MISSING, None, _check_extra(extra))


def result(id: RequestId | int | str, result: Any) -> Message:
    """A successful response to the request with this id (``result`` may be ``None``)."""
    return Message(_as_id(id), None, None, result, None, {})


def error(id: RequestId | int | str | None, code: int, message: str,
          data: Any = MISSING) -> Message:
    """An error response. ``id=None`` writes ``"id": null``, as JSON-RPC requires when the
    request's id could not be read."""
    if type(code) is not int:
        raise TypeError(f"an error code is an int, not {type(code).__name__}")
    if type(message) is not str:
        raise TypeError(f"an error message is a str, not {type(message).__name__}")
    body: dict[str, Any] = {"code": code, "message": message}
    if data is not MISSING:
        body["data"] = data
    return Message(None if id is None else _as_id(id), None, None, MISSING, body, {})


# --- serialisation ------------------------------------------------------------------------

_ENCODER: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _build_value_encoder() -> Callable[[Any], str]:
    """Return the fastest correct "value to compact JSON text" function available.

    ``JSONEncoder.encode`` builds a new C encoder on every call; building it once saves about
    a microsecond per value. The C encoder is built with no circular-reference table (a shared
    table would be racy between threads), so a circular value surfaces as ``RecursionError``,
    which :func:`serialize` turns into ``ValueError``. If the private constructor is missing
    or behaves differently on this interpreter, use the public encoder instead.
    """
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is not None:
        try:
            c_encode = make(None, _ENCODER.default, _encode_str, None, ":", ",",
                            False, False, False)

            def encode(value: Any) -> str:
                return "".join(c_encode(value, 0))

            encode.c_encode = c_encode  # type: ignore[attr-defined]

            sample = {"a": [1, 2.5, "é\n", None, True], "b": {}}
            if encode(sample) == _ENCODER.encode(sample):
                return encode
        except Exception:  # pragma: no cover - depends on the interpreter
            pass
    return _ENCODER.encode  # pragma: no cover


_encode_value: Final = _build_value_encoder()
# The C encoder itself, when _encode_value wraps it (serialize_request calls it directly).
_c_chunks: Final[Callable[[Any, int], Any] | None] = getattr(_encode_value, "c_encode", None)


def _serialize_text(message: Message) -> str:
    rid = message.id
    method = message.method
    if rid is not None:
        text = '{"jsonrpc":"2.0","id":' + rid.raw
    elif method is None:
        text = '{"jsonrpc":"2.0","id":null'
    else:
        text = '{"jsonrpc":"2.0"'
    if method is not None:
        text += ',"method":' + _encode_str(method)
    if message.params is not None:
        text += ',"params":' + _encode_value(message.params)
    if message.result is not MISSING:
        text += ',"result":' + _encode_value(message.result)
    if message.error is not None:
        text += ',"error":' + _encode_value(message.error)
    if message.extra:
        for key, value in message.extra.items():
            text += "," + _encode_str(key) + ":" + _encode_value(value)
    return text + "}"


def serialize(message: Message) -> bytes:
    """Compact UTF-8 JSON for one message, without the trailing newline.

    Members come in the order ``jsonrpc, id, method, params, result, error``, then the extra
    ones; the id is written from its ``raw`` text. JSON escapes every control character, so
    the result never holds a raw newline. A value holding a lone surrogate or a NaN/infinite
    float raises ``ValueError`` (a value that is not JSON at all raises ``TypeError``): both
    are the caller's bug, and are raised before anything could be written.
    """
    try:
        return _serialize_text(message).encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("cannot serialise a message holding a lone surrogate "
                         "(U+D800-U+DFFF) in a string") from None
    except RecursionError:
        raise ValueError("cannot serialise a circular or too deeply nested value") from None


# Pieces of request lines as JSON text, kept per name: a client sends a handful of methods
# and calls a handful of tools, over and over. A method's name; what follows the id of a
# tools/call, ``,"method":"tools/call","params":{"name":<the tool's name>,"arguments":``.
# Each table is bounded, so that a caller inventing names cannot grow it without limit.
_METHOD_PARTS: Final[dict[str, str]] = {}
_TOOL_PARTS: Final[dict[str, str]] = {}
_PARTS_MAX: Final = 256
# The tool table's lookup as a function, for the session's copy of the tool call's usual
# case (see _serialize_tool_call): CPython 3.11 compiles a method call on a name bound by an
# import (``_TOOL_PARTS.get(name)`` in a module that imported ``_TOOL_PARTS``) as an
# attribute load and a call, which makes and frees a bound method per call (about 250
# instructions); a call of this one is specialised. The tool table is filled only when the
# C encoder is there (_c_chunks), so a piece found in it means that the encoder is too.
_tool_part: Final[Callable[[str], str | None]] = _TOOL_PARTS.get


def _remember(parts: dict[str, str], name: str, part: str) -> str:
    if len(parts) < _PARTS_MAX:
        parts[name] = part
    return part


def serialize_request(rid: int, method: str, params: dict[str, Any] | None) -> bytes:
    """``serialize(request(rid, method, params))`` for a positive integer id, without
    building the :class:`Message` (the session's hot path; the caller guarantees the types).
    Raises ``ValueError`` / ``TypeError`` exactly as :func:`serialize` does."""
    try:
        if method == "tools/call" and params is not None and len(params) == 2 \
                and _c_chunks is not None:
            # The usual tools/call params, {"name": <str>, "arguments": <dict>} in that
            # order (the encoder writes a dict's members in its order): everything between
            # the id and the arguments comes from the cache, looked up by the tool's name,
            # and the encoder writes the arguments only. The same bytes as encoding the
            # whole dict; any other shape takes the general way below. _serialize_tool_call
            # writes the line the same way, for a caller that built params in that shape;
            # not called from here, as a nested call costs the other callers of this one
            # about 950 instructions per tools/call (docs/performance.md). The property
            # tests hold both to serialize() byte for byte.
            for first in params:  # noqa: B007 - the first key, without two calls
                break
            name = params.get("name")
            arguments = params.get("arguments")
            if first == "name" and type(name) is str and type(arguments) is dict:
                after = _TOOL_PARTS.get(name)
                if after is None:
                    after = _remember(_TOOL_PARTS, name,
                                      ',"method":"tools/call","params":{"name":'
                                      + _encode_str(name) + ',"arguments":')
                try:
                    body = "".join(_c_chunks(arguments, 0))
                except (TypeError, ValueError) as exc:
                    # From Python 3.14 the encoder notes on its errors where in the value
                    # they happened; encoding the whole params would add this level's.
                    if sys.version_info >= (3, 14):
                        exc.add_note("when serializing dict item 'arguments'")
                    raise
                return f'{{"jsonrpc":"2.0","id":{rid}{after}{body}}}}}'.encode()
        middle = _METHOD_PARTS.get(method)
        if middle is None:
            middle = _remember(_METHOD_PARTS, method, _encode_str(method))
        if params is None:
            return f'{{"jsonrpc":"2.0","id":{rid},"method":{middle}}}'.encode()
        if _c_chunks is not None:
            return (f'{{"jsonrpc":"2.0","id":{rid},"method":{middle},"params":'
                    f'{"".join(_c_chunks(params, 0))}}}').encode()
        return f'{{"jsonrpc":"2.0","id":{rid},"method":{middle},"params":' \
            f'{_encode_value(params)}}}'.encode()  # pragma: no cover - no C encoder
    except UnicodeEncodeError:
        raise ValueError("cannot serialise a message holding a lone surrogate "
                         "(U+D800-U+DFFF) in a string") from None
    except RecursionError:
        raise ValueError("cannot serialise a circular or too deeply nested value") from None


def _serialize_tool_call(rid: int, name: str, params: dict[str, Any]) -> bytes:
    """``serialize_request(rid, "tools/call", params) + b"\\n"`` (the request's whole line,
    its newline included) for ``params`` that the caller built as ``{"name": name,
    "arguments": <...>}``, those two members in that order and no other
    (``Client.call_tool``'s usual params; the hot path). When ``name`` is a ``str`` and the
    arguments a ``dict``, everything between the id and the arguments comes from a piece
    cached per tool name and the C encoder writes the arguments alone: the same bytes as
    encoding the whole params, written as :func:`serialize_request`'s own branch for that
    shape writes them. Anything else goes to :func:`serialize_request`. Raises
    ``ValueError`` / ``TypeError`` exactly as :func:`serialize` does.

    Private: the shape is the caller's promise and is not checked (a third member would be
    left out, a missing ``arguments`` raise ``KeyError``); the session engine calls it only
    with the ``tool`` ``Client.call_tool`` passes for params it has just built so. The
    session writes the line itself for a name already in the cache (the same f-string,
    without this call's frame) and calls this for the rest: a name seen for the first time,
    a name or arguments of another type, and no C encoder.

    A separate entry, so that the caller that knows the shape (it built the dict) does not
    pay for :func:`serialize_request` finding it out again: the length, the first key and
    two lookups: about 1,450 instructions per call (docs/performance.md). The newline is
    written by the same f-string, so that the write does not copy the line once more to
    append it (``frame + b"\\n"``: about 460 instructions per call).
    """
    arguments = params["arguments"]
    if type(name) is str and type(arguments) is dict and _c_chunks is not None:
        try:
            after = _TOOL_PARTS.get(name)
            if after is None:
                after = _remember(_TOOL_PARTS, name,
                                  ',"method":"tools/call","params":{"name":'
                                  + _encode_str(name) + ',"arguments":')
            body = "".join(_c_chunks(arguments, 0))
            return f'{{"jsonrpc":"2.0","id":{rid}{after}{body}}}}}\n'.encode()
        except Exception as exc:
            _tool_call_failed(exc)
    return serialize_request(rid, "tools/call", params) + b"\n"


def _tool_call_failed(exc: Exception) -> NoReturn:
    """Raise what :func:`serialize` raises for the tool call's params, given what writing
    its line from the cached piece and the arguments' text raised (``exc``, being handled):
    a lone surrogate (met by ``encode``) and a circular or too deep value (the encoder's
    ``RecursionError``) become the ``ValueError`` that :func:`serialize` words, and from
    Python 3.14 the encoder's own ``TypeError`` / ``ValueError`` get the note that encoding
    the whole params would have added for this level; anything else is raised as it is.
    Shared by :func:`_serialize_tool_call` and the session's copy of its usual case, so
    that the two raise alike; called only on failure (a call costs a frame)."""
    if isinstance(exc, UnicodeEncodeError):
        raise ValueError("cannot serialise a message holding a lone surrogate "
                         "(U+D800-U+DFFF) in a string") from None
    if isinstance(exc, RecursionError):
        raise ValueError("cannot serialise a circular or too deeply nested value") from None
    if sys.version_info >= (3, 14) and isinstance(exc, (TypeError, ValueError)):
        # From Python 3.14 the encoder notes on its errors where in the value they
        # happened; encoding the whole params would add this level's.
        exc.add_note("when serializing dict item 'arguments'")
    raise exc


# --- parsing ------------------------------------------------------------------------------


def _reject_constant(name: str) -> Any:
    raise _NonFinite(f"{name} is not valid JSON")


_DECODER: Final = json.JSONDecoder(parse_constant=_reject_constant)
_decode: Final = _DECODER.decode
# The decoder's C scanner: ``decode`` wraps it in two whitespace regex matches and a
# ``raw_decode`` call, which cost as much as scanning a small response. parse() calls it
# directly when the text is exactly one object ("{" first, "}" last, nothing after it) and
# falls back to ``_decode`` for everything else, errors included.
_scan_once: Final[Callable[[str, int], tuple[Any, int]]] = getattr(_DECODER, "scan_once")  # noqa: B009


def _excerpt(data: bytes | bytearray | str) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    return bytes(data[:_EXCERPT_BYTES]).decode("utf-8", "replace")


def _parse_error(code: int, reason: str, data: bytes | bytearray | str,
                 rid: RequestId | None = None) -> ParseError:
    excerpt = _excerpt(data)
    label = "parse error" if code == PARSE_ERROR else "invalid request"
    return ParseError(f"{label}: {reason}; the text starts {excerpt!r}",
                      code=code, id=rid, excerpt=excerpt)


def _object_start(text: str) -> int:
    i = 0
    while text[i] in " \t\n\r":
        i += 1
    return i


def _make_id(value: int | str, text: str, start: int) -> RequestId:
    """The :class:`RequestId` of a decoded id, with its exact wire text.

    Cheap cases first: a JSON integer other than 0 has exactly one spelling (no leading zeros,
    no plus sign), and a string in a text with no backslash at all has no escapes. Anything
    else (``-0``, a string in a text holding escapes) costs one walk over the top-level
    members, about as much as decoding the text again. (Searching the text for a unique
    ``"id"`` instead was measured and is no faster: ``str.find`` of a short needle runs at
    about the speed of the C decoder.) ``start`` is the index of the object in ``text`` (a
    batch element), or -1 for a line holding one message.
    """
    if type(value) is int:
        if value:
            return RequestId(str(value), value)
    elif "\\" not in text:
        return RequestId('"' + value + '"', value)  # type: ignore[operator]
    if start < 0:
        start = _object_start(text)
    raw = _raw_member(text, start, "id")
    if raw is None:  # pragma: no cover - the text was already accepted by json
        raw = str(value) if isinstance(value, int) else _encode_str(value)
    return RequestId(raw, value)


def _extra(obj: dict[str, Any], known: int, consumed: frozenset[str]) -> dict[str, Any]:
    if len(obj) == known:
        return {}
    return {k: v for k, v in obj.items() if k not in consumed}


_REQUEST_MEMBERS: Final = frozenset({"jsonrpc", "id", "method", "params"})
_RESPONSE_MEMBERS: Final = frozenset({"jsonrpc", "id", "result", "error"})
_BAD_ID: Final = "an id must be a string or an integer (no fraction, no exponent)"


def _to_message(obj: dict[str, Any], text: str, start: int) -> Message:
    """Check the shape of a decoded object and build the :class:`Message`.

    Raises :class:`_Invalid` (-32600) carrying the id when a valid one was read.
    """
    get = obj.get
    id_value = get("id", MISSING)
    if len(obj) == 3 and type(id_value) is int and id_value and get("jsonrpc") == "2.0":
        # The usual response, {"jsonrpc", "id": <non-zero integer>, "result"}: a non-zero
        # JSON integer has one spelling, so its raw text is str() of it (as in _make_id).
        res = get("result", MISSING)
        if res is not MISSING:
            return Message(RequestId(str(id_value), id_value), None, None, res, None, {})
    rid: RequestId | None = None
    id_ok = True
    known = 1
    if id_value is not MISSING:
        known = 2
        kind = type(id_value)
        if kind is int or kind is str:
            rid = _make_id(id_value, text, start)
        elif id_value is not None:
            id_ok = False
    if get("jsonrpc") != "2.0":
        raise _Invalid('"jsonrpc" must be the string "2.0"', rid)
    method = get("method", MISSING)
    if method is not MISSING:
        if type(method) is not str:
            raise _Invalid('"method" must be a string', rid)
        if not id_ok:
            raise _Invalid(_BAD_ID)
        if "result" in obj or "error" in obj:
            raise _Invalid('a request or notification cannot carry "result" or "error"', rid)
        known += 1
        params = get("params", MISSING)
        if params is MISSING:
            params = None
        else:
            if type(params) is not dict and type(params) is not list:
                raise _Invalid('"params" must be an object or an array', rid)
            known += 1
        return Message(rid, method, params, MISSING, None,
                       _extra(obj, known, _REQUEST_MEMBERS))
    res = get("result", MISSING)
    err = get("error", MISSING)
    if res is not MISSING:
        if err is not MISSING:
            raise _Invalid('a response carries "result" or "error", not both', rid)
        if rid is None:
            raise _Invalid("a result needs a string or integer id" if id_ok else _BAD_ID)
        return Message(rid, None, None, res, None, _extra(obj, known + 1, _RESPONSE_MEMBERS))
    if err is MISSING:
        raise _Invalid('a message needs "method", "result" or "error"', rid)
    if not id_ok:
        raise _Invalid(_BAD_ID)
    if (type(err) is not dict or type(err.get("code")) is not int
            or type(err.get("message")) is not str):
        raise _Invalid('"error" must be an object with an integer "code" and a string '
                       '"message"', rid)
    return Message(rid, None, None, MISSING, err, _extra(obj, known + 1, _RESPONSE_MEMBERS))


def _to_batch(items: list[Any], text: str) -> Batch:
    start = _object_start(text)
    spans = _element_spans(text, start)
    if spans is None or len(spans) != len(items):  # pragma: no cover - json accepted the text
        spans = [(start, len(text))] * len(items)
    batch = Batch()
    for item, (begin, end) in zip(items, spans, strict=True):
        if type(item) is dict:
            try:
                batch.append(_to_message(item, text, begin))
            except _Invalid as bad:
                batch.append(_parse_error(INVALID_REQUEST, bad.reason, text[begin:end], bad.rid))
        else:
            batch.append(_parse_error(INVALID_REQUEST, "a batch element must be an object",
                                      text[begin:end]))
    return batch


def _parse_plain(text: str) -> Message | None:
    """The usual line, fast: exactly one object, no ``\\u`` escape, a valid message.

    ``None`` for anything else (padding, a batch, NaN, an escape that could be a lone
    surrogate, an invalid message...): :func:`parse` then takes its general path, which
    decides and words every error. ``text`` starts with ``{``.
    """
    try:
        obj, end = _scan_once(text, 0)
    except Exception:  # StopIteration (not JSON), _NonFinite, RecursionError...
        return None
    if end != len(text) or ("\\" in text and (
            "\\u" in text if end < _LONG_TEXT else _u_escape(text) is not None)):
        return None
    try:
        return _to_message(obj, text, -1)  # a dict: the text starts with "{"
    except _Invalid:
        return None


#: ``answer(id, result)``: takes a plain result response (a non-zero integer id) off the frame
#: decoder's hands (True) or declines it (False). See ``FrameDecoder.answer``.
AnswerSink = Callable[[int, Any], bool]


def parse(data: bytes | bytearray | str, *, allow_batch: bool = False) -> Message | Batch:
    """Parse one line (without its newline) into a :class:`Message` or a :class:`Batch`.

    Raises :class:`ParseError` and nothing else for any content: -32700 when the text is not
    UTF-8 JSON (including NaN/Infinity, a lone surrogate, or nesting too deep to decode),
    -32600 when it is JSON but not a JSON-RPC message. A leading U+FEFF is ignored. Of
    duplicate keys, the last wins. An array is a batch only with ``allow_batch=True``
    (2025-03-26); an empty one is -32600.
    """
    if isinstance(data, str):
        text = data
        if not text.isascii() and _lone_surrogate(text):
            raise _parse_error(PARSE_ERROR, "the text holds a lone surrogate", data)
    elif isinstance(data, (bytes, bytearray)):
        # Decode ourselves: json.loads(bytes) guesses UTF-16/32 and lets encoded surrogates
        # through; strict UTF-8 rejects both.
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _parse_error(PARSE_ERROR, f"invalid UTF-8 at byte {exc.start}",
                               data) from None
    else:
        raise TypeError(f"parse() takes bytes or str, not {type(data).__name__}")
    if text[:1] == "{":
        message = _parse_plain(text)
        if message is not None:
            return message
    if text[:1] == "\ufeff":
        text = text[1:]
    try:
        obj = _decode(text)
    except _NonFinite as exc:
        raise _parse_error(PARSE_ERROR, str(exc), data) from None
    except RecursionError:
        raise _parse_error(PARSE_ERROR, "the JSON is nested too deeply", data) from None
    except ValueError as exc:  # JSONDecodeError, or an integer too long to convert
        raise _parse_error(PARSE_ERROR, f"invalid JSON: {exc}", data) from None
    if "\\" in text and (
            ("\\u" in text and ("\\ud" in text or "\\uD" in text)) if len(text) < _LONG_TEXT
            else _surrogate_escape(text) is not None) and _has_lone_surrogate(obj):
        raise _parse_error(PARSE_ERROR, "a string holds a lone surrogate escape", data)
    kind = type(obj)
    if kind is dict:
        try:
            return _to_message(obj, text, -1)
        except _Invalid as bad:
            raise _parse_error(INVALID_REQUEST, bad.reason, data, bad.rid) from None
    if kind is list:
        if not allow_batch:
            raise _parse_error(INVALID_REQUEST, "batches are only allowed under 2025-03-26",
                               data)
        if not obj:
            raise _parse_error(INVALID_REQUEST, "an empty batch is invalid", data)
        return _to_batch(obj, text)
    raise _parse_error(INVALID_REQUEST, "a message must be a JSON object", data)


# --- framing ------------------------------------------------------------------------------

_Frame = Message | Batch | ParseError


def _oversized(limit: int) -> StreamError:
    return StreamError(f"a line is longer than the frame limit of {limit} bytes "
                       f"(max_frame_bytes); the stream cannot be resynchronised")


class FrameDecoder:
    """Incremental line framing for newline-delimited JSON-RPC (the stdio transport).

    Feed it bytes as they arrive; it returns what the complete lines decode to. Lines end at
    LF only (a CR before it is JSON whitespace); blank lines are skipped. A bad line comes back
    as a :class:`ParseError` *in the list* rather than raised, so one read holding many lines
    loses nothing. A line longer than ``max_frame_bytes`` (excluding the LF) raises
    :class:`StreamError`, which is sticky; the decoder never holds more than
    ``max_frame_bytes`` bytes of a partial line. Not thread-safe: one reader feeds it.
    """

    __slots__ = ("_buf", "_error", "_max", "allow_batch", "answer")

    def __init__(self, *, max_frame_bytes: int = MAX_FRAME_BYTES,
                 allow_batch: bool = False) -> None:
        if max_frame_bytes < 1:
            raise ValueError("max_frame_bytes must be positive")
        self._max = max_frame_bytes
        self.allow_batch = allow_batch
        # The reader's shortcut (the session's, through its transport): when a read holds
        # exactly one line and it is a plain result response, ``answer(id, result)`` may
        # take it, and the read then decodes to no frame. None: every line becomes a frame.
        self.answer: AnswerSink | None = None
        self._buf = bytearray()
        self._error: StreamError | None = None

    @property
    def max_frame_bytes(self) -> int:
        """The frame limit, in bytes, excluding the newline."""
        return self._max

    @property
    def buffered(self) -> int:
        """Bytes of an unfinished line held so far."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray) -> list[_Frame]:
        """Decode every line that ``data`` completes. Raises :class:`StreamError` only.

        The usual read holds exactly one complete line that starts with ``{`` and ends with
        its only newline, with nothing buffered: that line is decoded here, to what
        ``parse(data[:-1])`` returns or raises, or to no frame when :attr:`answer` took it
        (a plain result response it was waiting for). This is :func:`parse` and
        :func:`_parse_plain` folded into this method for the common case (UTF-8 bytes, one
        object, no ``\\u`` escape), with the usual response, ``{"jsonrpc", "id": <non-zero
        integer>, "result"}``, handled inline: a sequential call pays for no function here
        (a separate one cost about 400 instructions per line, its frame and arguments)
        and, when the reader hands it straight to the waiting call, for no
        :class:`Message` at all. Anything else goes to :func:`parse` (on the line without
        its newline), which decides and words every error as before.
        """
        if not self._buf and self._error is None:
            # The usual read: exactly one complete object line and nothing buffered.
            last = len(data) - 1
            if 0 < last <= self._max and (cut := data.partition(b"\n"))[1] and not cut[2]:
                # The one newline is the last byte: cut[0] is the line without it, as
                # parse() takes it. partition() takes its argument without parsing a format
                # (find() does: about 400 instructions more, with the newline's decoding).
                try:
                    # Strict UTF-8: decode()'s defaults, given without an argument to parse
                    # (about 210 instructions less than decode("utf-8"), the same text and
                    # the same errors).
                    text = cut[0].decode()
                    # The line's bytes go before the scan: kept alive beside the text and the
                    # scanned objects, a copy of a large line (100 KB and more, fed by a
                    # caller of its own: a pipe's read holds 64 KiB at most) made the scan
                    # about twice as slow.
                    del cut
                    obj, end = _scan_once(text, 0)
                except Exception:  # UnicodeDecodeError, StopIteration (not JSON), _NonFinite...
                    obj = None  # set here, not before the try: one store less on the usual path
                    text = ""
                    end = -1    # never len(text)
                # Scanned from its first character, a line makes a dict exactly when it starts
                # with "{" (the scanner picks the value's kind by that character): the usual
                # line is known to start so without a subscript of the bytes (about 230
                # instructions). A line that starts otherwise (a batch, a blank line, not
                # JSON) goes on to the general split below, as it did; one that starts with
                # "{" and did not scan goes to parse().
                if type(obj) is not dict:
                    if data[0] != 0x7B:
                        return self._split_decode(data)
                # "\\" first: a one-character needle is a memchr, the two-character one a
                # slower search (about 310 instructions per line; a long line's goes to
                # _u_escape, see _LONG_TEXT); a line without a backslash has no escape.
                elif end == len(text) and ("\\" not in text or (
                        "\\u" not in text if end < _LONG_TEXT
                        else _u_escape(text) is None)):
                    if len(obj) == 3:
                        # Each obj.get(...) a method call of its own: a call on a dict's
                        # method is specialised, where loading ``obj.get`` once makes a
                        # bound method by the generic path (about 450 instructions more).
                        id_value = obj.get("id")
                        if type(id_value) is int and id_value and obj.get("jsonrpc") == "2.0":
                            res = obj.get("result", MISSING)
                            if res is not MISSING:
                                answer = self.answer
                                if answer is not None and answer(id_value, res):
                                    return []
                                return [Message(RequestId(str(id_value), id_value), None, None,
                                                res, None, {})]
                    try:
                        return [_to_message(obj, text, -1)]
                    except _Invalid:
                        pass
                try:
                    return [parse(data[:-1], allow_batch=self.allow_batch)]
                except ParseError as exc:
                    return [exc]
        return self._split_decode(data)

    def _split_decode(self, data: bytes | bytearray) -> list[_Frame]:
        """:meth:`feed`'s general path: split ``data`` into lines, decode each."""
        lines: list[bytes] = []
        self._split(data, lines.append)
        return [self._decode(line) for line in lines]

    def finish(self) -> list[_Frame]:
        """At end of input: decode a last line that had no newline."""
        return [self._decode(line) for line in self._finish_lines()]

    def _decode(self, line: bytes) -> _Frame:
        try:
            return parse(line, allow_batch=self.allow_batch)
        except ParseError as exc:
            return exc

    def _finish_lines(self) -> list[bytes]:
        if self._error is not None:
            raise self._error
        lines: list[bytes] = []
        if self._buf:
            line = bytes(self._buf)
            self._buf.clear()
            self._emit(line, lines.append)
        return lines

    def _fail(self) -> None:
        self._buf = bytearray()
        self._error = _oversized(self._max)
        raise self._error

    def _split(self, data: bytes | bytearray, out: Callable[[bytes], None]) -> None:
        """Hand each complete, non-blank line to ``out``, undecoded. On an over-long line,
        ``out`` has had the lines before it, and then :class:`StreamError` is raised: the
        frame reader relies on this to hand out the lines that preceded the bad one."""
        if self._error is not None:
            raise self._error
        limit = self._max
        buf = self._buf
        nl = data.find(b"\n")
        if nl < 0:
            if len(buf) + len(data) > limit:
                self._fail()
            buf += data
            return
        if buf:
            if len(buf) + nl > limit:
                self._fail()
            buf += data[:nl]
            line = bytes(buf)
            buf.clear()
        else:
            if nl > limit:
                self._fail()
            line = bytes(data[:nl])
        self._emit(line, out)
        start = nl + 1
        while True:
            nl = data.find(b"\n", start)
            if nl < 0:
                break
            if nl - start > limit:
                self._fail()
            self._emit(bytes(data[start:nl]), out)
            start = nl + 1
        if start < len(data):
            if len(data) - start > limit:
                self._fail()
            buf += data[start:]

    @staticmethod
    def _emit(line: bytes, out: Callable[[bytes], None]) -> None:
        # The common line starts with "{"; only others can be blank.
        if line and (line[0] == 0x7B or line.strip(b" \t\r")):
            out(line)


# --- the frame reader and writer, loaded on first access ----------------------------------

# In the package only the stdio server's loop reads or writes a stream through these; a client
# connection does not, so they live in ``mcpsync._frame_io`` and are not compiled by ``import
# mcpsync.client``. The module ``__getattr__`` below stops CPython 3.11 from specialising an
# attribute load on this module (``jsonrpc.<name>``), so nothing on a call's path looks a name
# up here: the session and the transports import the names they use.
_FRAME_IO: Final = frozenset(("FrameReader", "FrameWriter"))


def __getattr__(name: str) -> Any:
    """Load the frame reader and writer on first access (PEP 562)."""
    if name not in _FRAME_IO:
        raise AttributeError(f"module 'mcpsync.jsonrpc' has no attribute {name!r}")
    _frame_io = importlib.import_module("mcpsync._frame_io")   # not a from-import: see above
    # One update, so that a thread that finds one of them in the namespace finds both.
    namespace = globals()
    namespace.update({other: getattr(_frame_io, other) for other in _FRAME_IO})
    return namespace[name]


def __dir__() -> list[str]:
    return sorted(set(globals()) | _FRAME_IO)
