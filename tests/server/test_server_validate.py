"""Argument validation for ``tools/call`` (type, required, properties, items, enum,
additionalProperties; the full schema with the ``jsonschema`` extra)."""

from __future__ import annotations

from typing import Any

import pytest

from mcpsync.server import _validate as _server_validate
from mcpsync.server._validate import validate_arguments

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "text": {"type": "string"},
        "n": {"type": "integer"},
        "x": {"type": "number"},
        "flag": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "mode": {"enum": ["a", "b"]},
        "weights": {"type": "object", "additionalProperties": {"type": "number"}},
    },
    "required": ["text"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(("arguments", "expected"), [
    ({"text": "hi"}, None),
    ({"text": "hi", "n": 3, "x": 1, "flag": False, "tags": ["a"], "mode": "b",
      "weights": {"w": 0.5}}, None),
    ({}, "arguments.text: required field is missing"),
    ({"text": 1}, "arguments.text: expected string, got integer"),
    ({"text": "t", "n": True}, "arguments.n: expected integer, got boolean"),
    ({"text": "t", "n": 1.5}, "arguments.n: expected integer, got number"),
    ({"text": "t", "x": True}, "arguments.x: expected number, got boolean"),
    ({"text": "t", "tags": ["a", 2]}, "arguments.tags[1]: expected string, got integer"),
    ({"text": "t", "mode": "c"}, "arguments.mode: 'c' is not one of ['a', 'b']"),
    ({"text": "t", "extra": 1}, "arguments.extra: unexpected field (the tool does not take it)"),
    ({"text": "t", "weights": {"w": "heavy"}}, "arguments.weights.w: expected number, got string"),
])
def test_builtin_checks_name_the_field(arguments: dict[str, Any], expected: str | None,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_server_validate, "_check_with_jsonschema", lambda s, a: None)
    assert validate_arguments(SCHEMA, arguments) == expected


def test_enum_keeps_true_and_one_apart() -> None:
    schema = {"type": "object", "properties": {"v": {"enum": [1]}}}
    assert validate_arguments(schema, {"v": 1}) is None
    assert validate_arguments(schema, {"v": 1.0}) is None
    assert validate_arguments(schema, {"v": True}) is not None


def test_jsonschema_extra_checks_the_full_schema() -> None:
    pytest.importorskip("jsonschema")
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 10},
                                               "s": {"type": "string", "pattern": "^a"}}}
    assert validate_arguments(schema, {"n": 10, "s": "abc"}) is None
    problem = validate_arguments(schema, {"n": 3})
    assert problem is not None and problem.startswith("arguments.n:") and "10" in problem
    problem = validate_arguments(schema, {"s": "zzz"})
    assert problem is not None and problem.startswith("arguments.s:")


def test_default_schema_accepts_anything() -> None:
    assert validate_arguments({"type": "object"}, {"anything": [1, {"x": None}]}) is None
