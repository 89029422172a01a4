"""The checks ``call_tool`` makes before sending a call by name: is the tool listed, and are
its required arguments there (docs/client.md, "Argument checks").

Only the cached tool list is consulted, so the cost on the hot path is a dict lookup and a
set check; a tool list is never fetched just to check a call. The one exception is a name
the cache does not know: the list is fetched once more (the server may have added the tool
since), and only then is the name refused. Nothing here validates types or values: the
server does that, and full JSON Schema validation would cost more than the call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from mcpsync.client._tools import ToolSchemas
from mcpsync.errors import InvalidArguments, UnknownTool

__all__ = ["check_arguments", "did_you_mean", "missing_arguments", "unknown_tool"]


def did_you_mean(name: str, choices: Iterable[str]) -> tuple[str, ...]:
    """The choices closest to ``name`` (at most three, best first)."""
    import difflib  # here: only a mistyped name needs it

    return tuple(difflib.get_close_matches(name, list(choices), n=3, cutoff=0.6))


def _hint(suggestions: tuple[str, ...]) -> str:
    if not suggestions:
        return ""
    return "; did you mean " + " or ".join(repr(s) for s in suggestions) + "?"


def unknown_tool(server: str, name: str, listed: Iterable[str]) -> UnknownTool:
    """The ``UnknownTool`` for a name the server does not list."""
    names = sorted(listed)
    suggestions = did_you_mean(name, names)
    shown = ", ".join(names[:20]) + (", ..." if len(names) > 20 else "")
    return UnknownTool(
        f"calling tool {name!r} on server {server!r}: the server lists no such tool"
        f"{_hint(suggestions)} (its tools: {shown or 'none'}); call_tool(..., "
        "validate_input=False) sends the call anyway", name=name, suggestions=suggestions,
        server=server, method="tools/call")


def missing_arguments(server: str, name: str, missing: Iterable[str],
                      takes: Iterable[str]) -> InvalidArguments:
    """The ``InvalidArguments`` for required arguments that were not given."""
    gone = tuple(sorted(missing))
    words = ", ".join(repr(m) for m in gone)
    return InvalidArguments(
        f"calling tool {name!r} on server {server!r}: missing required argument"
        f"{'s' if len(gone) > 1 else ''} {words} (the tool takes: "
        f"{', '.join(takes) or 'nothing'}); call_tool(..., validate_input=False) sends the "
        "call anyway", missing=gone, server=server, method="tools/call")


def check_arguments(server: str, name: str, arguments: Mapping[str, Any] | None,
                    tools: ToolSchemas, relist: Callable[[], object]) -> None:
    """Raise ``UnknownTool`` or ``InvalidArguments`` for a call that cannot be right.

    Called only when the fast test in ``call_tool`` failed (the name is not cached, or a
    required argument may be missing). ``relist()`` fetches the tool list again, bypassing
    the list cache; it runs at most once.
    """
    required = tools.required
    if required is None:
        return
    need = required.get(name)
    if need is None:
        relist()
        required = tools.required
        if required is None:   # the list changed again meanwhile: let the server judge
            return
        need = required.get(name)
        if need is None:
            raise unknown_tool(server, name, required)
    given = arguments if arguments is not None else {}
    missing = [r for r in need if r not in given]
    if missing:
        tool = tools.tools.get(name)
        props = tool.input_schema.get("properties") if tool is not None else None
        takes = list(props) if isinstance(props, Mapping) else sorted(need)
        raise missing_arguments(server, name, missing, takes)
