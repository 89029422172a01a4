"""Checking ``tools/call`` arguments against a tool's input schema.

The server must tell a client which argument was wrong, in every revision (as -32602 before
2025-11-25, as an ``isError`` result from then on). The built-in checker covers the keywords our
derived schemas use: ``type``, ``required``, ``properties``, ``items``, ``enum`` and
``additionalProperties``. When the optional ``jsonschema`` package is installed the full schema
is checked as well, so a hand-written schema with ``minimum`` or ``pattern`` is honoured too.
JSON's ``true`` is never an integer or a number here, although Python's ``bool`` is an ``int``.

A tool's check is prepared once, when it is registered (:class:`ArgumentCheck`), because it
runs on every call: the built-in rules become one predicate per schema, and a schema that uses
nothing beyond them (every schema ``@server.tool()`` derives) skips ``jsonschema`` altogether,
since it could not find anything the built-in check lets through. Any other schema gets its
``jsonschema`` validator built once, on first use, and the slower search for the error to
report runs only when the arguments fail. The messages are those of :func:`validate_arguments`:
a failing predicate hands over to the same walk that names the field.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["ArgumentCheck", "validate_arguments"]

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
    return _describe(error)


def _describe(error: Any) -> str | None:
    """A ``jsonschema`` error as ``arguments.<path>: <message>`` (``None``: no error)."""
    if error is None:
        return None
    where = "arguments" + "".join(
        f"[{p}]" if isinstance(p, int) else _field("", str(p)) for p in error.absolute_path)
    return f"{where}: {error.message}"


# -- prepared once per tool -----------------------------------------------------------------

Predicate = Callable[[Any], bool]


class ArgumentCheck:
    """The argument check of one tool, prepared at registration; ``check(arguments)`` returns
    what :func:`validate_arguments` would (a message naming the field, or ``None``).

    Safe to share between worker threads: the one thing built later, the ``jsonschema``
    validator, is built at most a few times over (two first calls at once) and then reused.
    """

    __slots__ = ("_full", "_passes", "_schema", "_validator")

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self._schema = schema
        self._passes = _compile(schema)
        self._full = not _covered(schema)   # jsonschema could find more than we do
        self._validator: Any = _UNBUILT

    @property
    def needs_jsonschema(self) -> bool:
        """True when the schema uses keywords only ``jsonschema`` checks."""
        return self._full

    def __call__(self, arguments: Mapping[str, Any]) -> str | None:
        if not self._passes(arguments):
            problem = _check(self._schema, arguments, "arguments")
            if problem is not None:
                return problem
        if not self._full:
            return None
        validator = self._validator
        if validator is _UNBUILT:
            validator = self._validator = _build_validator(self._schema)
        if validator is None:
            return None
        instance = arguments if isinstance(arguments, dict) else dict(arguments)
        try:
            if validator.is_valid(instance):
                return None
            from jsonschema.exceptions import best_match

            return _describe(best_match(validator.iter_errors(instance)))
        except Exception:  # a broken schema or an unresolvable $ref: never break the call
            return None


_UNBUILT: Any = object()


def _build_validator(schema: Mapping[str, Any]) -> Any:
    """The ``jsonschema`` validator of ``schema``; ``None`` without the extra or when the
    schema cannot be used (the built-in check is then all there is, as for one call)."""
    try:
        import jsonschema
    except ImportError:
        return None
    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        return cls(schema)
    except Exception:
        return None


def _anything(value: Any) -> bool:
    return True


_TYPE_TESTS: dict[str, Predicate] = {
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}


def _compile_type(expected: Any) -> Predicate | None:
    """The ``type`` rule of :func:`_check` as a predicate (``None``: no rule)."""
    if isinstance(expected, str):
        return _TYPE_TESTS.get(expected)   # an unknown name accepts everything, as in _check
    if isinstance(expected, list) and expected:
        tests = [_TYPE_TESTS.get(t, _anything) for t in expected if isinstance(t, str)]
        return lambda v: any(test(v) for test in tests)
    return None


def _compile(schema: Any) -> Predicate:
    """:func:`_check` for one schema as a predicate: the same rules, decided once."""
    if not isinstance(schema, Mapping):
        return _anything
    type_ok = _compile_type(schema.get("type"))
    enum = schema.get("enum")
    enum_ok: Predicate | None = (
        (lambda v: _enum_has(enum, v)) if isinstance(enum, list) else None)
    required = schema.get("required")
    names = tuple(n for n in required if isinstance(n, str)) if isinstance(required, list) else ()
    properties = schema.get("properties")
    fields = ({name: _compile(sub) for name, sub in properties.items()}
              if isinstance(properties, Mapping) else {})
    additional = schema.get("additionalProperties", True)
    closed = additional is False
    extra_ok = _compile(additional)
    items_ok = _compile(schema.get("items"))

    def passes(value: Any) -> bool:
        if type_ok is not None and not type_ok(value):
            return False
        if enum_ok is not None and not enum_ok(value):
            return False
        if isinstance(value, dict):
            for name in names:
                if name not in value:
                    return False
            for name, item in value.items():
                field_ok = fields.get(name)
                if field_ok is None:
                    if closed or not extra_ok(item):
                        return False
                elif not field_ok(item):
                    return False
        elif isinstance(value, list):
            for item in value:
                if not items_ok(item):
                    return False
        return True

    return passes


_CHECKED = frozenset({"type", "required", "properties", "items", "enum", "additionalProperties"})
#: Keywords ``jsonschema`` does not assert as it is called here (``format`` needs a format
#: checker, which is not passed).
_ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$comment",
                          "deprecated", "readOnly", "writeOnly", "format"})
_SCALAR_TYPES = (str, int, float, bool, type(None))


def _covered(schema: Any) -> bool:
    """True when the built-in check decides ``schema`` exactly as ``jsonschema`` would, so
    the full pass could never report anything more. Conservative: anything unusual is not."""
    if schema is True:
        return True
    if not isinstance(schema, Mapping):
        return False   # `false` rejects everything under jsonschema; _check accepts
    for key, value in schema.items():
        if key in _ANNOTATIONS:
            continue
        if key not in _CHECKED or not _covered_keyword(key, value):
            return False
    return True


def _covered_keyword(key: str, value: Any) -> bool:
    if key == "type":
        names = value if isinstance(value, list) and value else [value]
        return all(isinstance(t, str) and t in _TYPE_TESTS for t in names)
    if key == "required":
        return isinstance(value, list) and all(isinstance(n, str) for n in value)
    if key == "enum":   # nested values: Python's == would let [True] match [1]
        return isinstance(value, list) and all(type(v) in _SCALAR_TYPES for v in value)
    if key == "properties":
        return isinstance(value, Mapping) and all(_covered(sub) for sub in value.values())
    if key == "additionalProperties":
        return value is False or _covered(value)
    return _covered(value)   # items: one schema for every element
