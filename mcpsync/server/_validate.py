"""Checking ``tools/call`` arguments against a tool's input schema.

The server must tell a client which argument was wrong, in every revision (as -32602 before
2025-11-25, as an ``isError`` result from then on). The built-in checker covers the keywords our
derived schemas use: ``type``, ``required``, ``properties``, ``items``, ``enum`` and
``additionalProperties``. When the optional ``jsonschema`` package is installed the full schema
is checked as well, so a hand-written schema with ``minimum`` or ``pattern`` is honoured too.
JSON's ``true`` is never an integer or a number here, although Python's ``bool`` is an ``int``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["validate_arguments"]

_TYPE_NAMES = {
    bool: "boolean", int: "integer", float: "number", str: "string", list: "array",
    dict: "object", type(None): "null",
}


def validate_arguments(schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> str | None:
    """Return a message naming the first field that fails ``schema``, or ``None`` when it passes."""
    problem = _check(schema, arguments, "arguments")
    if problem is None:
        problem = _check_with_jsonschema(schema, arguments)
    return problem


def _json_type(value: Any) -> str:
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def _has_type(value: Any, name: str) -> bool:
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if name == "boolean":
        return isinstance(value, bool)
    if name == "string":
        return isinstance(value, str)
    if name == "array":
        return isinstance(value, list)
    if name == "object":
        return isinstance(value, dict)
    if name == "null":
        return value is None
    return True  # an unknown type name is the schema's problem, not the caller's


def _enum_has(enum: list[Any], value: Any) -> bool:
    """Membership that keeps ``True`` and ``1`` apart, as JSON does."""
    numeric = ("integer", "number")
    return any((type(v) is type(value) and v == value)
               or (_json_type(v) in numeric and _json_type(value) in numeric and v == value)
               for v in enum)


def _check(schema: Any, value: Any, path: str) -> str | None:
    if not isinstance(schema, Mapping):
        return None  # `true` / `{}`-like schemas accept everything
    expected = schema.get("type")
    if isinstance(expected, str):
        if not _has_type(value, expected):
            return f"{path}: expected {expected}, got {_json_type(value)}"
    elif isinstance(expected, list) and expected and not any(
            _has_type(value, t) for t in expected if isinstance(t, str)):
        return f"{path}: expected one of {expected}, got {_json_type(value)}"
    enum = schema.get("enum")
    if isinstance(enum, list) and not _enum_has(enum, value):
        return f"{path}: {value!r} is not one of {enum}"
    if isinstance(value, dict):
        return _check_object(schema, value, path)
    if isinstance(value, list):
        items = schema.get("items")
        for index, item in enumerate(value):
            problem = _check(items, item, f"{path}[{index}]")
            if problem is not None:
                return problem
    return None


def _check_object(schema: Mapping[str, Any], value: dict[str, Any], path: str) -> str | None:
    required = schema.get("required")
    if isinstance(required, list):
        for name in required:
            if isinstance(name, str) and name not in value:
                return f"{_field(path, name)}: required field is missing"
    properties = schema.get("properties")
    properties = properties if isinstance(properties, Mapping) else {}
    additional = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in properties:
            problem = _check(properties[name], item, _field(path, name))
        elif additional is False:
            return f"{_field(path, name)}: unexpected field (the tool does not take it)"
        else:
            problem = _check(additional, item, _field(path, name))
        if problem is not None:
            return problem
    return None


def _field(path: str, name: str) -> str:
    return f"{path}.{name}" if name.isidentifier() else f"{path}[{name!r}]"


def _check_with_jsonschema(schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> str | None:
    """Full validation when the optional ``jsonschema`` extra is installed; else nothing."""
    try:
        import jsonschema
    except ImportError:
        return None
    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        error = jsonschema.exceptions.best_match(cls(schema).iter_errors(dict(arguments)))
    except jsonschema.exceptions.SchemaError:
        return None  # a broken hand-written schema: the built-in check already ran
    except Exception:  # e.g. an unresolvable $ref; never let the extra break a call
        return None
    if error is None:
        return None
    where = "arguments" + "".join(
        f"[{p}]" if isinstance(p, int) else _field("", str(p)) for p in error.absolute_path)
    return f"{where}: {error.message}"
