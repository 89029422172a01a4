"""A tool call's request line has two writers: ``jsonrpc._serialize_tool_call`` (a name seen
for the first time, a name that is not a ``str``, arguments that are not a ``dict``) and its
copy of the usual case in ``Session._request`` (a name whose piece of the line is cached,
``dict`` arguments). For every shape of name and arguments, the first call of a name takes
the function and the next one the copy, and both write exactly the line the general
serialiser writes for those params, or raise exactly its error (type, text and notes)
before anything is written, the call not left pending. A change to either copy's output
fails here."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from mcpsync import jsonrpc
from mcpsync.errors import RemoteError
from mcpsync.session import Session, _engine as engine

from .helpers import peer_session, record_lines_written

pytestmark = pytest.mark.timeout(60)


class _Name(str):
    """A name whose type is not ``str``: the general way."""


class _Arguments(dict):  # type: ignore[type-arg]
    """Arguments whose type is not ``dict``: the general way."""


def _circular() -> dict[str, Any]:
    value: dict[str, Any] = {}
    value["self"] = value
    return value


def _deep(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels):
        value = {"d": value}
    return value


NAMES: list[Any] = ["echo", "\u00e9\n\"\\\u2028", "\U0001f600 tool", "", "\ud800",
                    _Name("echo"), 7, ["a", "list"]]
ARGUMENTS: list[Any] = [
    {"text": "hi"},
    {},
    {"nested": [1, {"a": None}], "f": 1.5, "b": True, "big": 10**30},
    {"\u00e9": "\u00fc\u2028\n", "emoji": "\U0001f600"},
    {1: "int key", 2.5: "float key", None: "null key", False: "bool key"},
    {"t": "\udfff"},                      # a lone surrogate: ValueError, worded
    {"f": math.nan},                      # NaN: the encoder's ValueError
    {"f": -math.inf},
    _circular(),                          # RecursionError: ValueError, worded
    _deep(100_000),
    {"o": object()},                      # the encoder's TypeError
    {(1, 2): "tuple key"},                # a key the encoder refuses: TypeError
    [1, 2],                               # not a dict: the general way
    _Arguments(text="a dict subclass"),
    "text",
    None,
]


@pytest.fixture
def peer(no_leaks: None) -> Iterator[Session]:
    yield from peer_session()


@pytest.fixture
def empty_cache() -> Iterator[None]:
    """The table of cached pieces is the module's (bounded: full, it caches no new name):
    emptied for each case and given its entries back after the test."""
    saved = dict(jsonrpc._TOOL_PARTS)
    jsonrpc._TOOL_PARTS.clear()
    try:
        yield
    finally:
        jsonrpc._TOOL_PARTS.clear()
        jsonrpc._TOOL_PARTS.update(saved)


def _outcome(write: Any) -> Any:
    try:
        return write()
    except (TypeError, ValueError) as exc:
        return (type(exc), str(exc), getattr(exc, "__notes__", None))


def test_both_writers_write_the_general_serialisers_line(
        peer: Session, empty_cache: None, monkeypatch: pytest.MonkeyPatch) -> None:
    function_calls: list[Any] = []
    function = engine._serialize_tool_call

    def spy_function(rid: int, name: Any, params: dict[str, Any]) -> bytes:
        function_calls.append(name)
        return function(rid, name, params)

    frames = record_lines_written(peer, monkeypatch)
    monkeypatch.setattr(engine, "_serialize_tool_call", spy_function)
    copies_used = 0
    for name in NAMES:
        for arguments in ARGUMENTS:
            jsonrpc._TOOL_PARTS.clear()
            params = {"name": name, "arguments": arguments}
            usual = type(name) is str and type(arguments) is dict
            for go in range(2):   # the first call caches the name's piece, the next uses it
                frames.clear()
                function_calls.clear()
                try:
                    peer._request("tools/call", params, 5.0, None, None, True, name)
                except RemoteError:   # sent: the peer knows no tools/call
                    assert len(frames) == 1, (name, arguments)
                    line = frames[0]
                    sent_id = int(line.split(b'"id":', 1)[1].split(b",", 1)[0])
                    expected = jsonrpc.serialize(
                        jsonrpc.request(sent_id, "tools/call", params)) + b"\n"
                    assert line == expected, (name, arguments, go)
                    assert jsonrpc._serialize_tool_call(sent_id, name, params) == expected
                except (TypeError, ValueError) as exc:
                    assert frames == [], (name, arguments)   # nothing written
                    got = (type(exc), str(exc), getattr(exc, "__notes__", None))
                    # The function's own error for the same params, and the general
                    # serialiser's (type and text: its notes come from the whole params).
                    assert _outcome(lambda p=params: function(1, p["name"], p)) == got
                    general = _outcome(lambda p=params: jsonrpc.serialize(
                        jsonrpc.request(1, "tools/call", p)))
                    assert isinstance(general, tuple) and general[:2] == got[:2]
                    if sys.version_info < (3, 14):
                        # Before 3.14 the encoder adds no notes, so neither writer may: a
                        # note added by the shared error helper would differ here.
                        assert general[2] == got[2], (name, arguments, go)
                    if isinstance(exc, ValueError) and "cannot serialise" in str(exc):
                        assert exc.__cause__ is None and exc.__suppress_context__
                else:  # pragma: no cover - the peer answers every tools/call with an error
                    pytest.fail("the peer answered a tools/call")
                assert not peer._pending, (name, arguments)
                # Which writer wrote it: the copy for a name seen before, in the usual case.
                copy = usual and go == 1
                copies_used += copy
                assert function_calls == ([] if copy else [name]), (name, arguments, go)
    assert copies_used == sum(type(n) is str for n in NAMES) \
        * sum(type(a) is dict for a in ARGUMENTS)
    assert peer.request("echo", {"n": 1}) == {"n": 1}   # still usable
