"""Type hints to a tool's JSON input schema, for ``@server.tool``.

A tool author writes an ordinary typed function; the client needs a JSON Schema. This module
is the one translation between the two, and it refuses what it cannot translate at decoration
time, naming the parameter, because a wrong schema found at call time is a bug the author never
sees. Supported: ``str``, ``int``, ``float``, ``bool``, ``list[T]``, ``tuple[T, ...]``,
``dict[str, T]``, ``Optional[T]`` / ``T | None`` and ``Literal[...]``. The parameter that
receives the handler context (annotated ``Context`` or named ``ctx``) is left out of the schema.
"""

from __future__ import annotations

import inspect
import json
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Union

__all__ = ["ToolSignature", "describe", "signature_of"]

_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


@dataclass(frozen=True)
class ToolSignature:
    """What the decorator learnt from a function: its schema and how to call it.

    ``tuple_params`` are the parameters annotated ``tuple[T, ...]``: JSON has no tuples, so
    the array the client sent is converted before the call. ``defaults`` are the parameters
    with a Python default; an absent ``Optional`` parameter without one receives ``None``.
    """

    input_schema: dict[str, Any]
    context_param: str | None
    params: tuple[str, ...]
    tuple_params: frozenset[str]
    defaults: frozenset[str]


def describe(func: Callable[..., Any]) -> str | None:
    """The cleaned docstring, which is what a model reads to decide whether to call the tool."""
    doc = inspect.getdoc(func)
    return doc if doc else None


def signature_of(func: Callable[..., Any], context_type: type) -> ToolSignature:
    """Build the input schema of ``func``; raise ``ValueError`` naming any parameter we cannot map.

    ``context_type`` is passed in rather than imported so that this module stays free of the
    server's threading code.
    """
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"cannot read the signature of {func!r}: {exc}") from exc
    try:
        hints = typing.get_type_hints(func)
    except Exception as exc:  # NameError for an unresolvable forward reference, and friends
        raise ValueError(
            f"cannot resolve the type hints of tool function {_name(func)!r}: {exc}"
        ) from exc

    properties: dict[str, Any] = {}
    required: list[str] = []
    params: list[str] = []
    tuple_params: set[str] = set()
    defaults: set[str] = set()
    context_param: str | None = None
    for pname, param in sig.parameters.items():
        where = f"parameter {pname!r} of tool function {_name(func)!r}"
        annotation = hints.get(pname, inspect.Parameter.empty)
        if annotation is context_type or (pname == "ctx" and annotation in (
                inspect.Parameter.empty, context_type)):
            if context_param is not None:
                raise ValueError(f"{where}: only one parameter may receive the handler context")
            context_param = pname
            continue
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise ValueError(f"{where}: *args and **kwargs cannot be described by a JSON schema")
        if param.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise ValueError(f"{where}: positional-only parameters cannot receive named arguments")
        if annotation is inspect.Parameter.empty:
            raise ValueError(f"{where} has no type annotation; annotate it (for example `: str`)")
        inner, optional = _unwrap_optional(annotation)
        schema = _schema_for(inner, where)
        if _is_tuple(inner):
            tuple_params.add(pname)
        if param.default is not inspect.Parameter.empty and param.default is not None:
            try:
                json.dumps(param.default, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{where}: its default {param.default!r} is not JSON") from exc
            schema = {**schema, "default": _jsonable_default(param.default)}
        elif param.default is None and not optional:
            raise ValueError(
                f"{where}: the default is None but the annotation does not allow None; "
                "write `T | None = None`"
            )
        properties[pname] = schema
        if param.default is not inspect.Parameter.empty:
            defaults.add(pname)
        if param.default is inspect.Parameter.empty and not optional:
            required.append(pname)
        params.append(pname)

    input_schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        input_schema["required"] = required
    input_schema["additionalProperties"] = False
    return ToolSignature(input_schema, context_param, tuple(params), frozenset(tuple_params),
                         frozenset(defaults))


def _name(func: Callable[..., Any]) -> str:
    return getattr(func, "__name__", repr(func))


def _jsonable_default(value: Any) -> Any:
    """Tuples become lists, as they will on the wire."""
    return json.loads(json.dumps(value))


def _unwrap_optional(annotation: Any) -> tuple[Any, bool]:
    """``Optional[T]`` and ``T | None`` → ``(T, True)``; anything else → ``(annotation, False)``."""
    origin = typing.get_origin(annotation)
    if origin is Union or origin is types.UnionType:
        args = typing.get_args(annotation)
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and len(rest) != len(args):
            return rest[0], True
    return annotation, False


def _is_tuple(annotation: Any) -> bool:
    return typing.get_origin(annotation) is tuple


def _schema_for(annotation: Any, where: str) -> dict[str, Any]:
    """The JSON schema of one annotation, recursively; ``ValueError`` names ``where``."""
    if isinstance(annotation, type) and annotation in _SCALARS:
        return {"type": _SCALARS[annotation]}
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is list and len(args) == 1:
        return {"type": "array", "items": _schema_for(args[0], where)}
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return {"type": "array", "items": _schema_for(args[0], where)}
    if origin is dict and len(args) == 2:
        if args[0] is not str:
            raise ValueError(f"{where}: dict keys must be str, because JSON object keys are")
        return {"type": "object", "additionalProperties": _schema_for(args[1], where)}
    if origin is Literal:
        values = list(args)
        for value in values:
            if value is not None and type(value) not in (str, int, bool):
                raise ValueError(f"{where}: Literal value {value!r} is not a JSON scalar")
        schema: dict[str, Any] = {"enum": values}
        kinds = {_SCALARS[type(v)] for v in values if v is not None}
        if len(kinds) == 1 and None not in values:
            schema = {"type": kinds.pop(), "enum": values}
        return schema
    if origin is Union or origin is types.UnionType:
        raise ValueError(
            f"{where}: unions other than Optional[T] / `T | None` are not supported "
            f"(got {annotation!r})"
        )
    raise ValueError(
        f"{where}: unsupported annotation {annotation!r}; use str, int, float, bool, list[T], "
        "tuple[T, ...], dict[str, T], Optional[T] or Literal[...]"
    )
