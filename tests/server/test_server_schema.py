"""``@server.tool``: input schemas derived from type hints."""

from __future__ import annotations

from typing import Literal, Optional

import pytest

from mcpsync.server import Context, Server


def schema_of(func: object, **kwargs: object) -> dict[str, object]:
    server = Server("t", "1")
    server.tool(**kwargs)(func)  # type: ignore[arg-type]
    return server.tools[0]["inputSchema"]  # type: ignore[no-any-return]


def test_scalars_map_to_json_types_and_are_required() -> None:
    def f(s: str, i: int, x: float, b: bool) -> None: ...

    assert schema_of(f) == {
        "type": "object",
        "properties": {"s": {"type": "string"}, "i": {"type": "integer"},
                       "x": {"type": "number"}, "b": {"type": "boolean"}},
        "required": ["s", "i", "x", "b"],
        "additionalProperties": False,
    }


def test_containers() -> None:
    def f(a: list[int], t: tuple[str, ...], d: dict[str, float],
          nested: list[dict[str, list[bool]]]) -> None: ...

    props = schema_of(f)["properties"]
    assert props == {
        "a": {"type": "array", "items": {"type": "integer"}},
        "t": {"type": "array", "items": {"type": "string"}},
        "d": {"type": "object", "additionalProperties": {"type": "number"}},
        "nested": {"type": "array", "items": {"type": "object", "additionalProperties": {
            "type": "array", "items": {"type": "boolean"}}}},
    }


def test_optional_is_schema_of_t_and_not_required() -> None:
    def f(a: Optional[int], b: str | None, c: int | None = None, d: int | None = 3) -> None: ...  # noqa: UP045

    schema = schema_of(f)
    assert schema["properties"] == {"a": {"type": "integer"}, "b": {"type": "string"},
                                    "c": {"type": "integer"},
                                    "d": {"type": "integer", "default": 3}}
    assert "required" not in schema


def test_literal_becomes_enum() -> None:
    def f(mode: Literal["fast", "slow"], n: Literal[1, 2, 3], mixed: Literal["a", 1]) -> None: ...

    props = schema_of(f)["properties"]
    assert props["mode"] == {"type": "string", "enum": ["fast", "slow"]}
    assert props["n"] == {"type": "integer", "enum": [1, 2, 3]}
    assert props["mixed"] == {"enum": ["a", 1]}


def test_default_becomes_default_and_not_required() -> None:
    def f(text: str, times: int = 2, tags: tuple[str, ...] = ("x",)) -> None: ...

    schema = schema_of(f)
    assert schema["properties"]["times"] == {"type": "integer", "default": 2}
    assert schema["properties"]["tags"] == {"type": "array", "items": {"type": "string"},
                                            "default": ["x"]}
    assert schema["required"] == ["text"]


def test_context_parameter_is_not_in_the_schema() -> None:
    def by_type(text: str, context: Context) -> None: ...

    def by_name(ctx, text: str) -> None: ...  # type: ignore[no-untyped-def]

    for func in (by_type, by_name):
        schema = schema_of(func)
        assert list(schema["properties"]) == ["text"]
        assert schema["required"] == ["text"]


def test_no_parameters_gives_a_closed_object() -> None:
    def f() -> None: ...

    assert schema_of(f) == {"type": "object", "properties": {}, "additionalProperties": False}


@pytest.mark.parametrize("annotation", [bytes, set[int], dict[int, str], "int | str",
                                        list, object, [int], tuple[int, str]])
def test_unsupported_annotation_raises_naming_the_parameter(annotation: object) -> None:
    def f(good: int, bad): ...  # type: ignore[no-untyped-def]

    f.__annotations__ = {"good": int, "bad": int | str if annotation == "int | str" else annotation}
    with pytest.raises(ValueError, match="'bad'"):
        schema_of(f)


def test_missing_annotation_and_varargs_raise() -> None:
    def untyped(x): ...  # type: ignore[no-untyped-def]

    def varargs(*items: int) -> None: ...

    with pytest.raises(ValueError, match=r"'x'.*no type annotation"):
        schema_of(untyped)
    with pytest.raises(ValueError, match="'items'"):
        schema_of(varargs)


def test_name_and_description_come_from_the_function() -> None:
    server = Server("t", "1")

    @server.tool()
    def summarise(text: str) -> str:
        """Summarise a text.

        Second paragraph.
            Indented line.
        """
        return text

    @server.tool(name="other", description="explicit", annotations={"readOnlyHint": True},
                 output_schema={"type": "object"})
    def whatever() -> None: ...

    @server.tool
    def bare(x: int) -> int:
        return x

    first, second, third = server.tools
    assert first["name"] == "summarise"
    assert first["description"] == "Summarise a text.\n\nSecond paragraph.\n    Indented line."
    assert second["name"] == "other"
    assert second["description"] == "explicit"
    assert second["annotations"] == {"readOnlyHint": True}
    assert second["outputSchema"] == {"type": "object"}
    assert third["name"] == "bare" and "description" not in third
    assert summarise("x") == "x"  # the decorator returns the function unchanged


def test_decorated_handler_receives_converted_arguments() -> None:
    from .helpers import PipeServer

    server = Server("t", "1")
    seen: dict[str, object] = {}

    @server.tool()
    def f(ctx: Context, t: tuple[int, ...], opt: str | None, dflt: int = 7) -> str:
        seen.update(t=t, opt=opt, dflt=dflt, ctx=ctx)
        return "ok"

    with PipeServer(server) as ps:
        ps.initialize()
        reply = ps.call(1, "f", {"t": [1, 2]})
    assert reply["result"]["content"] == [{"type": "text", "text": "ok"}]
    assert seen["t"] == (1, 2) and seen["opt"] is None and seen["dflt"] == 7
    assert isinstance(seen["ctx"], Context)
