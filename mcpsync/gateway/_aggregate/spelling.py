"""JSON decoding and encoding for the aggregator that keeps each number as it was written.

With several upstreams the gateway must decode some payloads to rewrite them (a tool name
in ``tools/call`` params, the items of a list it merges, the URIs of a read result) and
encode them again. Python's ``json`` turns ``1.50`` into ``1.5`` and ``1E2`` into ``100.0``
on the way, and, worse, a literal beyond a double's range (``1E400``) into ``inf``, which it
then writes as ``Infinity``: not JSON at all, so the host (or the upstream) would fail to
read the whole frame. :func:`loads` keeps every non-integer number's text in a
:class:`Number` (a ``float``, so the code that compares or sorts values still can), and
:func:`dumps` writes that text back. Integers are exact in Python already; the one spelling
they lose is ``-0``, which comes back as ``0``.
"""

from __future__ import annotations

import json
import json.encoder
import math
from collections.abc import Callable
from typing import Any, Final

__all__ = ["Number", "dumps", "loads"]


class Number(float):
    """A decoded JSON number with a fraction or exponent, carrying its source ``text``."""

    __slots__ = ("text",)
    text: str

    def __new__(cls, text: str) -> Number:
        self = super().__new__(cls, text)
        self.text = text
        return self


# ``NaN`` and ``Infinity`` are not JSON, but the tolerant envelope lets them through (its
# decoder is Python's): they are kept as written too, forwarded as they came, as with one
# upstream, instead of failing the encoder on the gateway's thread.
_decode: Final = json.JSONDecoder(parse_float=Number, parse_constant=Number).decode
_make_iterencode: Callable[..., Callable[[Any, int], Any]] = getattr(  # noqa: B009
    json.encoder, "_make_iterencode")


def loads(text: str) -> Any:
    """``json.loads``, but every non-integer number (and ``NaN``, ``Infinity``) is a
    :class:`Number` keeping its text."""
    return _decode(text)


def _floatstr(value: float) -> str:
    if isinstance(value, Number):
        return value.text
    if not math.isfinite(value):   # a computed value, never a decoded one
        raise ValueError(f"{value!r} cannot be written as JSON")
    return float.__repr__(value)


def _encoder(ensure_ascii: bool) -> Callable[[Any], str]:
    encode_str = (json.encoder.encode_basestring_ascii if ensure_ascii
                  else json.encoder.encode_basestring)

    def default(value: Any) -> Any:
        raise TypeError(f"{type(value).__name__} is not JSON serializable")

    def encode(value: Any) -> str:
        # The pure-Python encoder: the C one writes floats with float.__repr__, whatever
        # their class. Strings still go through the C string encoder.
        chunks = _make_iterencode({}, default, encode_str, None, _floatstr, ":", ",", False,
                                  False, True)
        return "".join(chunks(value, 0))

    return encode


_ENCODE: Final = {True: _encoder(True), False: _encoder(False)}


def dumps(value: Any, *, ensure_ascii: bool = True) -> str:
    """Compact JSON text of ``value`` (no spaces after ``,`` and ``:``), each
    :class:`Number` written as the text it was decoded from."""
    return _ENCODE[ensure_ascii](value)
