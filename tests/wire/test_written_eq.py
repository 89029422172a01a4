"""The written-out ``__eq__`` (and ``ServerConfig.__hash__``) of the public dataclasses that the
client import builds: ``TextContent``, ``Tool``, ``CallToolResult``, ``ServerInfo``,
``jsonrpc.Message`` and ``ServerConfig``, and the written-out ``__init__`` of the five slotted
ones. A dataclass generates and compiles these at every import; the written ones must compare
(and hash, and construct) exactly as the generated ones did, so each is held here to a
generated twin: the same fields, made by a plain ``@dataclass``.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import math
import pickle
from typing import Any

import pytest

from mcpsync._fields_eq import FACTORY
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


# --- the written __init__ of the slotted ones --------------------------------------------

_SLOTTED: list[Any] = [TextContent, Tool, CallToolResult, ServerInfo, Message]


def _factories(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)
            if f.default_factory is not dataclasses.MISSING]


def _stored(obj: object) -> list[Any]:
    return [getattr(obj, f.name) for f in dataclasses.fields(obj)]   # type: ignore[arg-type]


@pytest.mark.parametrize("cls", _SLOTTED, ids=[c.__name__ for c in _SLOTTED])
def test_the_written_init_has_the_generated_ones_parameters(cls: Any) -> None:
    twin: Any = _twin(cls, slots=True, repr=False, eq=False)
    assert "__init__" in cls.__dict__ and cls.__dataclass_params__.init is False
    assert twin.__dataclass_params__.init is True
    mine, theirs = inspect.signature(cls), inspect.signature(twin)
    assert list(mine.parameters) == list(theirs.parameters)
    factories = _factories(cls)
    assert factories   # each has at least one: the FACTORY default is exercised
    for name, p in mine.parameters.items():
        q = theirs.parameters[name]
        assert p.kind is q.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
        assert p.annotation == q.annotation   # the field's annotation, as a string
        if name in factories:
            assert p.default is FACTORY and repr(p.default) == repr(q.default) == "<factory>"
        else:
            assert p.default is q.default
    assert mine.return_annotation is None and str(mine) == str(theirs)
    assert str(inspect.signature(cls.__init__)) == str(inspect.signature(twin.__init__))
    assert cls.__match_args__ == twin.__match_args__
    assert [f.name for f in dataclasses.fields(cls)] == list(mine.parameters)


def _calls(cls: type) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """Positional, keyword and mixed calls: the required fields only, every field given
    (distinct objects), and every factory's field given as None."""
    names = list(inspect.signature(cls).parameters)
    required = _required(cls)
    given = {name: [name] if name == "icons" else {"given": name} for name in names}
    nones = {**required, **dict.fromkeys(_factories(cls))}
    return [((), dict(required)), (tuple(required.values()), {}),
            ((), given), (tuple(given.values()), {}),
            (tuple(given.values())[:2], {n: given[n] for n in names[2:]}),
            ((), nones)]


@pytest.mark.parametrize("cls", _SLOTTED, ids=[c.__name__ for c in _SLOTTED])
def test_the_written_init_stores_what_the_generated_one_did(cls: Any) -> None:
    twin: Any = _twin(cls, slots=True, repr=False, eq=False)
    for args, kwargs in _calls(cls):
        a, b, t = cls(*args, **kwargs), cls(*args, **kwargs), twin(*args, **kwargs)
        assert type(a) is cls
        for name, x, y, z in zip(list(inspect.signature(cls).parameters),
                                 _stored(a), _stored(b), _stored(t), strict=True):
            assert type(x) is type(z) and x == z, (name, x, z)
            passed = kwargs.get(name, args[_index(cls, name)] if _index(cls, name) < len(args)
                                else dataclasses.MISSING)
            if passed is not dataclasses.MISSING:
                assert x is passed and y is passed, name   # stored as given, None included
            elif name in _factories(cls):
                assert x == {} and x is not y, name   # a fresh dict per instance
            else:
                assert x is y, name


def _index(cls: type, name: str) -> int:
    return list(inspect.signature(cls).parameters).index(name)


@pytest.mark.parametrize("cls", _SLOTTED, ids=[c.__name__ for c in _SLOTTED])
def test_the_written_init_refuses_what_the_generated_one_did(cls: Any) -> None:
    twin: Any = _twin(cls, slots=True, repr=False, eq=False)
    names = list(inspect.signature(cls).parameters)
    required = _required(cls)
    bad: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        ((), {**required, "nope": 1}),
        (tuple(range(len(names) + 1)), {}),
        ((1,), {names[0]: 1}),
    ]
    if required:
        bad.append(((), {}))
    for args, kwargs in bad:
        with pytest.raises(TypeError) as mine:
            cls(*args, **kwargs)
        with pytest.raises(TypeError) as theirs:
            twin(*args, **kwargs)
        assert str(mine.value) == str(theirs.value)


@pytest.mark.parametrize("cls", _SLOTTED, ids=[c.__name__ for c in _SLOTTED])
def test_replace_copy_pickle_and_match_still_work(cls: Any) -> None:
    original = cls(**{**_required(cls), _factories(cls)[0]: {"k": 1}})
    for other in (dataclasses.replace(original), copy.copy(original),
                  copy.deepcopy(original), pickle.loads(pickle.dumps(original))):
        assert type(other) is cls and _stored(other) == _stored(original)
    changed = dataclasses.replace(original, **{_factories(cls)[0]: None})
    assert getattr(changed, _factories(cls)[0]) is None
    assert dataclasses.asdict(original) == {f.name: getattr(original, f.name)
                                            for f in dataclasses.fields(cls)}
    first = cls.__match_args__[0]
    match original:
        case cls(value):
            assert value is getattr(original, first)
        case _:
            raise AssertionError("no match")
