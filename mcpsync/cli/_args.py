"""``call``'s arguments: ``key=value`` items converted by the tool's ``inputSchema``, or a
whole ``--args`` JSON object (docs/cli.md, "`call` arguments").

Pure functions with no server behind them, so the conversion rules can be tested (and
reasoned about) on their own; every failure is a :class:`CLIError` with exit 2.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from mcpsync.cli._errors import EXIT_USAGE, CLIError

__all__ = ["convert_arguments", "convert_value"]


_INTEGER = re.compile(r"[-+]?[0-9]+")
_NUMBER = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
_TRUE = frozenset(("true", "1", "yes"))
_FALSE = frozenset(("false", "0", "no"))
_NO_VALUE = object()


def _as_type(kind: str, text: str) -> Any:
    """``text`` as JSON type ``kind``, or ``_NO_VALUE`` when it does not fit."""
    if kind == "string":
        return text
    if kind == "integer":
        return int(text) if _INTEGER.fullmatch(text) else _NO_VALUE
    if kind == "number":
        if _INTEGER.fullmatch(text):
            return int(text)
        if _NUMBER.fullmatch(text):
            value = float(text)
            return value if math.isfinite(value) else _NO_VALUE
        return _NO_VALUE
    if kind == "boolean":
        low = text.lower()
        return True if low in _TRUE else False if low in _FALSE else _NO_VALUE
    if kind == "null":
        return None if text == "null" else _NO_VALUE
    if kind in ("object", "array"):
        try:
            value = json.loads(text)
        except ValueError:
            return _NO_VALUE
        want = dict if kind == "object" else list
        return value if isinstance(value, want) else _NO_VALUE
    return _NO_VALUE


def _schema_types(schema: Any) -> list[str] | None:
    """The JSON types a property schema allows, in order; ``None`` when it names none.

    ``type`` may be a string or a list. Without ``type``, the types of ``anyOf``/``oneOf``
    branches are used: that is how pydantic spells ``Optional[int]``.
    """
    if not isinstance(schema, Mapping):
        return None
    kind = schema.get("type")
    if isinstance(kind, str):
        return [kind]
    if isinstance(kind, list):
        return [k for k in kind if isinstance(k, str)] or None
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if isinstance(branches, list):
            types: list[str] = []
            for branch in branches:
                for t in _schema_types(branch) or []:
                    if t not in types:
                        types.append(t)
            if types:
                return types
    return None


_TYPE_WORDS = {"integer": "an integer", "number": "a number",
               "boolean": "a boolean (true/false/1/0/yes/no)", "null": "null",
               "object": "a JSON object", "array": "a JSON array", "string": "a string"}


def convert_value(key: str, text: str, schema: Any) -> Any:
    """Convert one ``key=value`` text by the property's schema (docs/cli.md, "`call` arguments").

    Types are tried in order, ``string`` last; no schema (or no type) keeps the text.
    Raises :class:`CLIError` (exit 2) when no type fits.
    """
    types = _schema_types(schema)
    if types is None:
        return text
    ordered = [t for t in types if t != "string"] + (["string"] if "string" in types else [])
    for kind in ordered:
        value = _as_type(kind, text)
        if value is not _NO_VALUE:
            return value
    wanted = " or ".join(_TYPE_WORDS.get(t, repr(t)) for t in ordered)
    raise CLIError(f"argument {key!r}: expected {wanted}, got {text!r}", EXIT_USAGE)


def _split_items(items: Sequence[str]) -> list[tuple[str, str]]:
    """``key=value`` items as pairs; an item without ``=`` or a repeated key is exit 2."""
    pairs: list[tuple[str, str]] = []
    seen: set[str] = set()
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CLIError(f"expected key=value, got {item!r}", EXIT_USAGE)
        if key in seen:
            raise CLIError(f"argument {key!r} is given more than once", EXIT_USAGE)
        seen.add(key)
        pairs.append((key, value))
    return pairs


def convert_arguments(items: Sequence[str], input_schema: Mapping[str, Any] | None
                      ) -> dict[str, Any]:
    """Turn ``key=value`` items into a tool's arguments object by its ``inputSchema``."""
    pairs = _split_items(items)
    props = (input_schema or {}).get("properties")
    props = props if isinstance(props, Mapping) else {}
    return {key: convert_value(key, text, props.get(key)) for key, text in pairs}


def _read_args_json(text: str) -> dict[str, Any]:
    if text == "-":
        text = sys.stdin.read()
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise CLIError(f"--args: invalid JSON: {exc}", EXIT_USAGE) from None
    if not isinstance(value, dict):
        raise CLIError(f"--args: expected a JSON object, got {type(value).__name__}",
                       EXIT_USAGE)
    return value
