"""``Client.call_tool`` runs with its options as positional parameters behind a guard (a
call that leaves out keyword-only parameters pays a dict lookup for each, see
docs/performance.md), and still presents, accepts and refuses exactly what its declared
signature does: ``name`` and ``arguments`` positional or by keyword, every option by keyword
only."""

from __future__ import annotations

import ast
import inspect
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import mcpsync
from mcpsync import Client
from mcpsync.client import _client
from mcpsync.demo import build_server

pytestmark = pytest.mark.timeout(60)

OPTIONS = ["timeout", "progress", "raise_on_error", "retry_on_drop", "meta",
           "reset_timeout_on_progress", "validate_input", "task_timeout", "tasks"]


@pytest.fixture
def client(no_leaks: None) -> Iterator[Client]:
    with mcpsync.connect(build_server()) as made:
        yield made


def test_the_signature_shown_is_the_declared_one() -> None:
    params = list(inspect.signature(Client.call_tool).parameters.values())
    assert [p.name for p in params] == ["self", "name", "arguments", *OPTIONS]
    assert [p.kind for p in params[:3]] == [inspect.Parameter.POSITIONAL_OR_KEYWORD] * 3
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params[3:])
    defaults = {p.name: p.default for p in params[2:]}
    assert defaults == {"arguments": None, "timeout": None, "progress": None,
                        "raise_on_error": False, "retry_on_drop": False, "meta": None,
                        "reset_timeout_on_progress": None, "validate_input": None,
                        "task_timeout": None, "tasks": True}
    assert inspect.signature(Client.call_tool).return_annotation == "CallToolResult"
    assert Client.call_tool.__doc__ is not None
    assert Client.call_tool.__doc__.startswith("Call a tool and return its")
    assert Client.call_tool.__qualname__ == "Client.call_tool"


def test_what_runs_takes_the_same_defaults() -> None:
    """The positional parameters' defaults are the declared keyword-only ones."""
    declared = inspect.signature(Client.call_tool)
    runs = inspect.signature(Client.call_tool, follow_wrapped=False)
    for option in OPTIONS:
        assert runs.parameters[option].default == declared.parameters[option].default, option
        assert runs.parameters[option].annotation == declared.parameters[option].annotation
    assert list(runs.parameters)[:3] == ["self", "name", "arguments"]
    assert list(runs.parameters)[4:] == OPTIONS


def test_name_and_arguments_by_position_or_keyword(client: Client) -> None:
    assert client.call_tool("echo", {"text": "a"}).text == "a"
    assert client.call_tool("echo", arguments={"text": "b"}).text == "b"
    assert client.call_tool(name="echo", arguments={"text": "c"}, timeout=5).text == "c"
    assert client.call_tool("echo", {"text": "d"}, raise_on_error=True, tasks=False,
                            validate_input=False, meta={"k": 1}).text == "d"


@pytest.mark.parametrize("extra", [(5,), (None,), (None, 5), (5.0, None, True)])
def test_an_option_by_position_is_refused(client: Client, extra: tuple[Any, ...]) -> None:
    with pytest.raises(TypeError, match=r"call_tool\(\) takes name and arguments by "
                                        r"position and its options .* by keyword only"):
        client.call_tool("echo", {"text": "x"}, *extra)


def test_the_guard_is_not_a_keyword(client: Client) -> None:
    with pytest.raises(TypeError, match="by keyword only"):
        client.call_tool("echo", {"text": "x"}, _keyword_only=None)   # type: ignore[call-arg]


def test_an_unknown_keyword_is_named(client: Client) -> None:
    with pytest.raises(TypeError, match=r"Client\.call_tool\(\) got an unexpected keyword "
                                        r"argument 'timout'"):
        client.call_tool("echo", {"text": "x"}, timout=3)   # type: ignore[call-arg]


def test_a_missing_name_is_named(client: Client) -> None:
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'name'"):
        client.call_tool()   # type: ignore[call-arg]


def test_help_shows_keyword_only_options(capsys: pytest.CaptureFixture[str]) -> None:
    help(Client.call_tool)
    shown = capsys.readouterr().out
    flat = " ".join(shown.split())
    assert "call_tool(self, name: 'str', arguments: 'Mapping[str, Any] | None' = None, *, " \
           "timeout: 'float | None' = None," in flat, shown
    assert "_keyword_only" not in shown and "Call a tool and return its" in flat



def test_tools_that_read_the_source_find_the_declaration_alone() -> None:
    """Type checkers and the API reference read the class body: it holds one ``call_tool``,
    the keyword-only declaration; what runs is the module's ``_call_tool``, and the two
    agree on every option's annotation and default as written."""
    tree = ast.parse(Path(_client.__file__).read_text(encoding="utf-8"))
    (cls,) = [node for node in tree.body
              if isinstance(node, ast.ClassDef) and node.name == "Client"]
    (declared,) = [node for node in cls.body
                   if isinstance(node, ast.FunctionDef) and node.name == "call_tool"]
    (runs,) = [node for node in tree.body
               if isinstance(node, ast.FunctionDef) and node.name == "_call_tool"]
    assert ast.get_docstring(declared) is not None and ast.get_docstring(runs) is None
    assert [a.arg for a in declared.args.args] == ["self", "name", "arguments"]
    assert [a.arg for a in declared.args.kwonlyargs] == OPTIONS
    assert not runs.args.kwonlyargs
    assert [a.arg for a in runs.args.args] == ["self", "name", "arguments", "_keyword_only",
                                               *OPTIONS]

    def same(node: ast.AST | None) -> str:
        return "" if node is None else ast.dump(node)

    pairs = [*zip(declared.args.args[1:3], runs.args.args[1:3], strict=True),
             *zip(declared.args.kwonlyargs, runs.args.args[4:], strict=True)]
    for want, got in pairs:
        assert same(want.annotation) == same(got.annotation), want.arg
    assert [same(d) for d in declared.args.kw_defaults] == \
        [same(d) for d in runs.args.defaults[2:]]
    assert same(declared.args.defaults[0]) == same(runs.args.defaults[0])   # arguments
    assert same(declared.returns) == same(runs.returns)
    assert Client.call_tool is _client._call_tool


def test_what_runs_answers_to_the_declared_names() -> None:
    assert typing.get_type_hints(Client.call_tool) == \
        typing.get_type_hints(inspect.unwrap(Client.call_tool))
    assert "_keyword_only" not in typing.get_type_hints(Client.call_tool)
