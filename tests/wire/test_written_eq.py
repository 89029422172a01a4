"""The written-out ``__eq__`` (and ``ServerConfig.__hash__``) of the public dataclasses that the
client import builds: ``TextContent``, ``Tool``, ``CallToolResult``, ``ServerInfo``,
``jsonrpc.Message`` and ``ServerConfig``. A dataclass generates and compiles these at every
import; the written ones must compare (and hash) exactly as the generated ones did, so each is
held here to a generated twin: the same fields, made by a plain ``@dataclass``.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import pickle
from typing import Any

import pytest

from mcpsync.config import ServerConfig
from mcpsync.jsonrpc import MISSING, Message, RequestId
from mcpsync.types import CallToolResult, ServerInfo, TextContent, Tool


def _twin(cls: type, **params: Any) -> type:
    """``cls``'s fields in a plain dataclass with every method generated (``params`` as the
    original decorator had them)."""
    namespace: dict[str, Any] = {"__annotations__": {}, "__module__": cls.__module__,
                                 "__qualname__": cls.__qualname__}
    for f in dataclasses.fields(cls):
        namespace["__annotations__"][f.name] = f.type
        namespace[f.name] = dataclasses.field(default=f.default,
                                              default_factory=f.default_factory,
                                              compare=f.compare, hash=f.hash)
    return dataclasses.dataclass(**params)(type(cls.__name__, (), namespace))


def _values(cls: type, changes: dict[str, Any]) -> dict[str, Any]:
    return {f.name: changes.get(f.name, getattr(cls(**_required(cls)), f.name))
            for f in dataclasses.fields(cls)}


def _required(cls: type) -> dict[str, Any]:
    return {f.name: "x" for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}


NAN = math.nan
_CASES: list[tuple[type, list[dict[str, Any]]]] = [
    (TextContent, [{"text": "a"}, {"text": "b"}, {"text": "a", "meta": {"k": 1}},
                   {"text": "a", "raw": {"type": "text", "text": "a"}}, {"text": NAN}]),
    (Tool, [{"name": "t"}, {"name": "t", "input_schema": {"type": "object"}},
            {"name": "u"}, {"name": "t", "icons": [1]}]),
    (CallToolResult, [{"content": []}, {"content": [TextContent("a")]},
                      {"content": [TextContent("a")], "is_error": True},
                      {"content": [], "structured": {"n": NAN}}]),
    (ServerInfo, [{}, {"name": "s"}, {"name": "s", "version": "1"},
                  {"name": "s", "extra": {"x": 1}}]),
    (Message, [{}, {"id": RequestId.of(1), "method": "m"}, {"id": RequestId.of(2), "method": "m"},
               {"result": None}, {"result": MISSING, "error": {"code": 1}}]),
]


@pytest.mark.parametrize(("cls", "cases"), _CASES, ids=[c.__name__ for c, _ in _CASES])
def test_the_written_eq_compares_as_the_generated_one_did(
        cls: type, cases: list[dict[str, Any]]) -> None:
    twin = _twin(cls, slots=True, repr=False)
    assert "__eq__" in cls.__dict__ and cls.__hash__ is None and twin.__hash__ is None
    assert cls.__match_args__ == twin.__match_args__
    built = [(cls(**_values(cls, c)), twin(**_values(cls, c))) for c in cases]
    for a, ta in built:
        with pytest.raises(TypeError):
            hash(a)
        assert a.__eq__(ta) is NotImplemented and ta.__eq__(a) is NotImplemented
        assert a.__eq__(object()) is NotImplemented
        assert (a == copy.copy(a)) is (ta == copy.copy(ta))
        assert (a == dataclasses.replace(a)) is (ta == dataclasses.replace(ta))
        for b, tb in built:
            assert (a == b) is (ta == tb), (a, b)
            assert (a != b) is (ta != tb), (a, b)


class _Sub(TextContent):
    """A subclass that is not a dataclass itself: it inherits the written ``__eq__``."""

    __slots__ = ()


def test_a_subclass_compares_by_its_own_class_as_before() -> None:
    assert _Sub("a") == _Sub("a") and _Sub("a") != _Sub("b")
    assert _Sub("a") != TextContent("a") and TextContent("a") != _Sub("a")


def test_a_parsed_result_still_compares_equal_to_a_built_one() -> None:
    wire = {"content": [{"type": "text", "text": "hi"}]}
    parsed = CallToolResult.from_dict(wire)
    assert parsed == CallToolResult([TextContent("hi", raw=wire["content"][0])], raw=wire)
    assert parsed != CallToolResult([TextContent("hi")], raw=wire)
    assert pickle.loads(pickle.dumps(parsed)) == parsed


_CONFIGS: list[dict[str, Any]] = [
    {"command": "a"}, {"command": "b"}, {"command": "a", "args": ["x"]},
    {"command": "a", "env": {"A": "1"}}, {"command": "a", "env": {"A": "2"}},
    {"command": "a", "extra": {"k": 1}}, {"command": "a", "timeout": 5.0},
    {"url": "https://h/x"}, {"url": "https://h/x", "headers": {"X-A": "1"}},
    {"command": "a", "gateway": True}, {"command": "a", "name": "n", "id": "i"},
]


def test_server_config_compares_and_hashes_as_the_generated_methods_did() -> None:
    fields = dataclasses.fields(ServerConfig)
    compared = tuple(f.name for f in fields if f.compare)
    hashed = tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash))
    assert "extra" not in compared and {"env", "headers", "extra", "auth"}.isdisjoint(hashed)
    twin = _twin(ServerConfig, frozen=True, repr=False)
    configs = [ServerConfig(**c) for c in _CONFIGS]
    # the twin holds the same stored values (ServerConfig's __init__ normalises them)
    twins = [twin(**{f.name: getattr(c, f.name) for f in fields}) for c in configs]
    for a, ta in zip(configs, twins, strict=True):
        assert hash(a) == hash(ta)
        assert a == dataclasses.replace(a) and hash(a) == hash(dataclasses.replace(a))
        assert a.__eq__(ta) is NotImplemented
        for b, tb in zip(configs, twins, strict=True):
            assert (a == b) is (ta == tb), (a, b)
            assert (a != b) is (ta != tb), (a, b)
    assert ServerConfig(command="a", extra={"k": 1}) == ServerConfig(command="a")
    plain, with_env = ServerConfig(command="a"), ServerConfig(command="a", env={"A": "1"})
    assert hash(plain) == hash(with_env) and plain != with_env   # env is compared, not hashed
    assert pickle.loads(pickle.dumps(configs[0])) == configs[0]
