"""The pass-through's look at each frame: is it one JSON object, and which call is it?

The gateway forwards a host's call, and a server's answer, as the bytes that came, but only
once it knows the line is one JSON object (a host's broken line is answered with ``-32700``
rather than sent to a server that may never answer it; a server's broken line never reaches
the host) and has the call's id for its in-flight table (so a server's death fails the calls
it held at once). That look is most of what the gateway adds to a call beyond copying bytes.

Two ways to take it, with the same verdicts where it matters:

- **msgspec** (0.19 or later, installed with ``pip install "mcpsync[fast]"``; 0.18 decodes
  some integers above 2**64 wrongly): its JSON decoder checks the whole line and builds
  only the two or three members asked for (``id``, ``method``, and whether ``result`` or
  ``error`` is there), skipping the rest without making Python objects of it. Its skipping
  does not check that the skipped strings are UTF-8, so a line that is not all ASCII is
  also decoded as UTF-8 (a C loop; ASCII is the usual case and checked first).
- **the standard library** otherwise: its C scanner, through
  :func:`mcpsync._envelope.decode_object`, which builds the whole object.

Each function answers with the call's key, or ``None`` for "not this quick way": the line then
takes the gateway's full path, which decides with the standard library and names what is
wrong. So msgspec may only say *yes* where the standard library would say yes with the same
key; where they differ (msgspec refuses ``NaN``, lone ``\\ud800`` escapes, a byte-order mark;
a ``method`` member given twice, the first not a string) or where msgspec is the more
lenient (whitespace before or after the object: checked apart), msgspec says ``None`` and
the full path decides as before. One difference the other way is accepted: an object nested deeper
than Python's recursion limit but within msgspec's (both are about a thousand levels) passes
here, as the JSON it is. ``tests/gateway/test_frame_keys.py`` checks the first rule on
generated lines.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from mcpsync._envelope import IdKey, decode_object

__all__ = ["KEPT_METHODS", "checks", "stdlib_checks"]

#: Methods the pass-through's fast path leaves to the full one: the upstream keeps them for
#: a restart's replay.
KEPT_METHODS: Final = frozenset({"initialize", "notifications/initialized"})

Check = Callable[[Any], "IdKey | None"]


def _framed(line: bytes | bytearray) -> bool:
    """``line`` begins with ``{`` and ends with ``}`` (before its newline, if it has one):
    what the standard library's check asks of the object's place in the line, which
    msgspec's does not (it allows whitespace around the value)."""
    last = line[-1]
    if last == 10 and len(line) > 1:
        last = line[-2]
    return line[0] == 123 and last == 125


def _utf8(line: bytes | bytearray) -> bool:
    """``line`` is UTF-8 (asked only of a line that is not ASCII: msgspec does not decode
    the strings it skips)."""
    try:
        line.decode()
    except UnicodeDecodeError:
        return False
    return True


def _std_object(line: bytes | bytearray) -> dict[str, Any] | None:
    """``line`` (one line, maybe with its newline) as a dict when it is exactly one JSON
    object from its first byte to its end or newline; else ``None``."""
    return decode_object(line[:-1] if line[-1:] == b"\n" else line)


def _std_call_key(line: bytes | bytearray) -> IdKey | None:
    """The key of the request ``line`` holds (a string ``method`` other than those the
    gateway keeps, a number or string ``id``); ``None`` for any other line."""
    obj = _std_object(line)
    if obj is None:
        return None
    method = obj.get("method")
    rid = obj.get("id")
    kind = type(rid)
    if type(method) is not str or method in KEPT_METHODS or (kind is not int and kind is not str):
        return None
    return ("int" if kind is int else "str", rid)


def _std_answer_key(line: bytes | bytearray) -> IdKey | None:
    """The key of the answer ``line`` holds (no ``method``; a ``result`` or an ``error``; a
    number or string ``id``); ``None`` for any other line."""
    obj = _std_object(line)
    if obj is None or "method" in obj or ("result" not in obj and "error" not in obj):
        return None
    rid = obj.get("id")
    kind = type(rid)
    if kind is not int and kind is not str:
        return None
    return ("int" if kind is int else "str", rid)


def stdlib_checks() -> tuple[Check, Check]:
    """``(call_key, answer_key)`` by the standard library's scanner alone."""
    return _std_call_key, _std_answer_key


def _msgspec_checks() -> tuple[Check, Check] | None:
    try:
        import msgspec
    except ImportError:
        return None
    unset = msgspec.UNSET

    # The members the pass-through reads (made here, not by a class statement: this module's
    # annotations are strings, which msgspec would look up in the module's globals). ``Raw``
    # is checked and kept as bytes, not decoded; members not named are checked and skipped.
    raw = msgspec.Raw | msgspec.UnsetType
    head_type = msgspec.defstruct("Head", [
        ("id", int | str | None | msgspec.UnsetType, unset),
        ("method", str | msgspec.UnsetType, unset),
        ("result", raw, unset),
        ("error", raw, unset)])
    decode: Callable[[bytes | bytearray], Any] = msgspec.json.Decoder(head_type).decode
    # DecodeError (not a ValueError in every version), and the UnicodeDecodeError of versions
    # before 0.21 on a member it decodes (``id``, ``method``).
    failed = (msgspec.DecodeError, ValueError, RecursionError)
    kept = KEPT_METHODS
    framed = _framed
    utf8 = _utf8

    def call_key(line: bytes | bytearray) -> IdKey | None:
        try:
            head = decode(line)
        except failed:
            return None
        method = head.method
        rid = head.id
        kind = type(rid)
        if (type(method) is not str or method in kept or (kind is not int and kind is not str)
                or not framed(line)):
            return None
        if not line.isascii() and not utf8(line):
            return None
        return ("int" if kind is int else "str", rid)

    def answer_key(line: bytes | bytearray) -> IdKey | None:
        try:
            head = decode(line)
        except failed:
            return None
        rid = head.id
        kind = type(rid)
        if (head.method is not unset or (head.result is unset and head.error is unset)
                or (kind is not int and kind is not str) or not framed(line)):
            return None
        if not line.isascii() and not utf8(line):
            return None
        return ("int" if kind is int else "str", rid)

    return call_key, answer_key


_CHECKS: list[tuple[Check, Check]] = []


def checks() -> tuple[Check, Check]:
    """``(call_key, answer_key)``: msgspec's where it is installed, else the standard
    library's (the pass-through's loops and its full path's quick looks use these). Each
    takes one line (bytes, with or without its newline) and gives the call's key or
    ``None``. msgspec is imported on the first call (about 15 ms), not with the gateway's
    module."""
    if not _CHECKS:
        _CHECKS.append(_msgspec_checks() or stdlib_checks())
    return _CHECKS[0]
