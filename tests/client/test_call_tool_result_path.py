"""``call_tool`` builds the usual plain-text answer's result itself, as
``CallToolResult.from_dict``'s fast step (``types._plain_text_result``) does, written out in
``call_tool``, and anything else with ``from_dict``'s general part: for every shape of answer
the two copies of the fast step take the same decision, and the result is the one
``from_dict`` gives, field for field."""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

import pytest

import mcpsync
from mcpsync.demo import build_server
from mcpsync.types import CallToolResult, _plain_text_result

pytestmark = pytest.mark.timeout(60)

TEXT = {"type": "text", "text": "hi"}

SHAPES: list[dict[str, Any]] = [
    {"content": [TEXT]},
    {"content": [TEXT], "structuredContent": {"n": 1}},
    {"content": [TEXT], "isError": True},
    {"content": [TEXT], "structuredContent": [1, 2], "isError": False},
    {"content": [TEXT], "_meta": {"k": "v"}},
    {"content": [TEXT], "unknown": 1},
    {"content": [{"type": "text", "text": "hi", "annotations": {"audience": ["user"]}}]},
    {"content": [TEXT, {"type": "text", "text": "there"}]},
    {"content": []},
    {"content": [{"type": "image", "data": "AAAA", "mimeType": "image/png"}]},
    {"content": [{"type": "text", "text": 3}]},
    {"content": [{"type": "mystery", "x": 1}]},
    {"structuredContent": {"only": True}},
    # The shortcut looks its keys up by subscript: a missing one declines, as get() did.
    {},
    {"isError": True},
    {"content": [{"text": "hi", "kind": "text"}]},
    {"content": [{"type": "text", "body": "hi"}]},
    {"content": [TEXT], "structuredContent": None, "isError": True},
    # Values kept as they are: only True is an error, a falsy structuredContent stays.
    {"content": [TEXT], "isError": "yes"},
    {"content": [TEXT], "isError": 1},
    {"content": [TEXT], "structuredContent": {}},
    {"content": [TEXT], "structuredContent": 0, "isError": False},
]


@pytest.mark.parametrize("shape", SHAPES, ids=range(len(SHAPES)))
def test_call_tool_gives_what_from_dict_gives(shape: dict[str, Any], no_leaks: None,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    with mcpsync.connect(build_server(), era="legacy") as client:
        session = client._session
        # What call_tool calls (positional, looked up on the class; see Session._request).
        real = type(session)._request

        def answer(self: Any, method: str, params: Any, *rest: Any) -> Any:
            if method == "tools/call" and self is session:
                return shape
            return real(self, method, params, *rest)

        monkeypatch.setattr(type(session), "_request", answer)
        general = CallToolResult._build.__func__   # type: ignore[attr-defined]
        declined: list[object] = []

        def spy(cls: type[CallToolResult], d: dict[str, Any]) -> CallToolResult:
            declined.append(d)
            return general(cls, d)  # type: ignore[no-any-return]

        monkeypatch.setattr(CallToolResult, "_build", classmethod(spy))
        got = client.call_tool("echo", {"text": "ignored"})
    # call_tool's copy of the fast step declines exactly the shapes types' declines.
    assert declined == ([] if _plain_text_result(shape) is not None else [shape])
    want = CallToolResult.from_dict(shape)
    assert want == CallToolResult._build(shape)   # the general path, past the shortcut
    assert type(got) is CallToolResult
    assert got == want and repr(got) == repr(want)
    for field in dataclasses.fields(CallToolResult):
        assert getattr(got, field.name) == getattr(want, field.name), field.name
        assert type(getattr(got, field.name)) is type(getattr(want, field.name)), field.name
    assert [type(block) for block in got.content] == [type(block) for block in want.content]
    assert [vars(b) if hasattr(b, "__dict__") else
            {f.name: getattr(b, f.name) for f in dataclasses.fields(b)}
            for b in got.content] == [
        vars(b) if hasattr(b, "__dict__") else
        {f.name: getattr(b, f.name) for f in dataclasses.fields(b)} for b in want.content]
    assert got.raw is shape
    # Each block keeps the very dict it was made from, and no two objects share a dict.
    assert len(got.content) == len(want.content)
    for mine, theirs in zip(got.content, want.content, strict=True):
        assert getattr(mine, "raw", None) is getattr(theirs, "raw", None)
    extras = [got.extra, *(b.extra for b in got.content if hasattr(b, "extra"))]
    assert len({id(extra) for extra in extras}) == len(extras)
    assert pickle.loads(pickle.dumps(got)) == want
