"""Argument validation for ``tools/call`` (type, required, properties, items, enum,
additionalProperties; the full schema with the ``jsonschema`` extra), one-shot and as the
check prepared once per tool, which must say exactly the same."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from hypothesis import given, settings, strategies as st

from mcpsync.server import _validate as _server_validate
from mcpsync.server._context import Context
from mcpsync.server._schema import signature_of
from mcpsync.server._validate import (
    ArgumentCheck,
    _check,
    _check_with_jsonschema,
    validate_arguments,
)

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


# -- the check prepared at registration (ArgumentCheck) ------------------------------------


_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-3, 3),
                     st.sampled_from([0.0, 1.0, 1.5, -2.5]), st.sampled_from(["", "a", "b", "zz"]))
_VALUES = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3),
    st.dictionaries(st.sampled_from(["a", "b", "c", "x-y"]), inner, max_size=3)), max_leaves=8)
_ARGUMENTS = st.dictionaries(st.sampled_from(["a", "b", "c", "x-y"]), _VALUES, max_size=3)
_TYPES = st.sampled_from(["string", "integer", "number", "boolean", "array", "object", "null"])


def _schemas(extra: bool) -> st.SearchStrategy[Any]:
    """Schemas made of the built-in keywords (``extra``: with some only jsonschema checks)."""
    def node(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        keywords: dict[str, st.SearchStrategy[Any]] = {
            "type": st.one_of(_TYPES, st.lists(_TYPES, min_size=1, max_size=2)),
            "enum": st.lists(_SCALARS, max_size=3),
            "required": st.lists(st.sampled_from(["a", "b", "c"]), max_size=2, unique=True),
            "properties": st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=2),
            "items": inner,
            "additionalProperties": st.one_of(st.booleans(), inner),
            "description": st.just("annotation only"),
            "format": st.sampled_from(["email", "date-time"]),   # not asserted by jsonschema
        }
        if extra:
            keywords.update({"minimum": st.integers(-1, 1), "maxItems": st.integers(0, 2),
                             "minLength": st.integers(0, 2), "items": st.booleans()})
        return st.fixed_dictionaries({}, optional=keywords)
    return st.recursive(st.just({}), node, max_leaves=6)


@settings(max_examples=400, deadline=None)
@given(schema=_schemas(extra=True), arguments=_ARGUMENTS)
def test_prepared_check_says_what_the_one_shot_check_says(schema: Any, arguments: Any) -> None:
    assert ArgumentCheck(schema)(arguments) == validate_arguments(schema, arguments)


@settings(max_examples=400, deadline=None)
@given(schema=_schemas(extra=False), arguments=_ARGUMENTS)
def test_jsonschema_finds_nothing_more_in_a_covered_schema(schema: Any, arguments: Any) -> None:
    """What lets a covered schema skip the jsonschema pass: it never reports anything more."""
    pytest.importorskip("jsonschema")
    assert not ArgumentCheck(schema).needs_jsonschema
    if _check(schema, arguments, "arguments") is None:
        assert _check_with_jsonschema(schema, arguments) is None, (schema, arguments)


def test_derived_schemas_skip_jsonschema_and_hand_written_ones_do_not() -> None:
    def tool(ctx: Context, text: str, n: int, x: float = 1.0, flag: bool = False,
             tags: list[str] | None = None, pair: tuple[int, ...] = (),
             weights: dict[str, float] | None = None,
             mode: Literal["a", "b"] = "a") -> str:
        return text

    derived = signature_of(tool, Context).input_schema
    assert not ArgumentCheck(derived).needs_jsonschema
    for schema in (
        {"type": "object", "properties": {"n": {"type": "integer", "minimum": 10}}},
        {"type": "object", "properties": {"n": False}},
        {"type": "object", "properties": {"v": {"enum": [[1]]}}},
        {"type": "object", "properties": {"v": {"$ref": "#/$defs/x"}}, "$defs": {"x": {}}},
        {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"},
        {"type": "object", "properties": {"t": {"type": []}}},
    ):
        assert ArgumentCheck(schema).needs_jsonschema, schema


def test_prepared_check_builds_its_validator_once(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("jsonschema")
    built: list[Any] = []
    real = _server_validate._build_validator

    def counting(schema: Any) -> Any:
        built.append(schema)
        return real(schema)

    monkeypatch.setattr(_server_validate, "_build_validator", counting)
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 10}}}
    check = ArgumentCheck(schema)
    assert [check({"n": n}) for n in (10, 11, 3)][:2] == [None, None]
    assert check({"n": 3}) == validate_arguments(schema, {"n": 3})
    assert check({"n": 3}) is not None and check({"n": 3}).startswith("arguments.n:")
    assert len(built) == 1
    covered = ArgumentCheck({"type": "object", "properties": {"n": {"type": "integer"}}})
    assert covered({"n": 1}) is None and covered({"n": "1"}) is not None
    assert len(built) == 1   # a covered schema never builds one
