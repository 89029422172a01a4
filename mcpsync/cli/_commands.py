"""The ``mcpsync`` commands that ask servers something: ``tools``, ``resources``,
``prompts``, ``call`` and ``read``, and the table from command name to function.

Each command starts its server(s) through :mod:`mcpsync.cli._servers`, asks one thing and
returns an :class:`~mcpsync.cli._output._Outcome`; ``login`` lives in
:mod:`mcpsync.cli._login` with the rest of the OAuth handling.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from mcpsync.cli._args import _read_args_json, _split_items, convert_arguments
from mcpsync.cli._context import _Context
from mcpsync.cli._errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE, CLIError
from mcpsync.cli._login import _cmd_login
from mcpsync.cli._output import (
    _cell,
    _json_doc,
    _Outcome,
    _render_call,
    _render_read,
    _table,
    _with_server,
)
from mcpsync.cli._servers import _running
from mcpsync.cli._trust import _cmd_trust

if TYPE_CHECKING:
    from mcpsync.manager import Manager

# The CLI's modules all log as "mcpsync.cli": --verbose and the quiet warning filter
# (cli/_logging.py) are set up for that one name.
_log = logging.getLogger("mcpsync.cli")


def _list_each(manager: Manager, ids: Sequence[str], fetch: Callable[[str], list[Any]]
               ) -> list[tuple[str, Any]]:
    """Each server's items, in server order; a server without that capability has none."""
    from mcpsync.errors import CapabilityNotSupported

    rows: list[tuple[str, Any]] = []
    for sid in ids:
        try:
            items = fetch(sid)
        except CapabilityNotSupported:
            _log.debug("server %r does not offer this list", sid)
            items = []
        rows.extend((sid, item) for item in items)
    return rows


def _cmd_list(args: argparse.Namespace, ctx: _Context) -> _Outcome:
    kind: str = args.command
    header: tuple[str, ...]
    cells: list[tuple[str, ...]]
    with _running(ctx, args.server) as (manager, ids):
        if kind == "tools":
            rows = _list_each(manager, ids, manager.list_tools)
            header = ("SERVER", "TOOL", "DESCRIPTION")
            cells = [(sid, _cell(t.name), _cell(t.description, first_line=True))
                     for sid, t in rows]
        elif kind == "resources":
            rows = _list_each(manager, ids, manager.list_resources)
            header = ("SERVER", "URI", "NAME", "MIME")
            cells = [(sid, _cell(r.uri), _cell(r.name), _cell(r.mime_type)) for sid, r in rows]
        else:
            rows = _list_each(manager, ids, manager.list_prompts)
            header = ("SERVER", "PROMPT", "DESCRIPTION")
            cells = [(sid, _cell(p.name), _cell(p.description, first_line=True))
                     for sid, p in rows]
    if ctx.json:
        return _Outcome(_json_doc([_with_server(sid, item.raw) for sid, item in rows]))
    return _Outcome(_table(header, cells))


def _cmd_call(args: argparse.Namespace, ctx: _Context) -> _Outcome:
    # Every usage error is found before a server is spawned.
    if args.args_json is not None and args.items:
        raise CLIError("give the arguments either as key=value items or with --args, "
                       "not both", EXIT_USAGE)
    arguments: dict[str, Any] | None = None
    if args.args_json is not None:
        arguments = _read_args_json(args.args_json)
    else:
        _split_items(args.items)
    with _running(ctx, args.server) as (manager, [sid]):
        if arguments is None and args.items:
            tools = {t.name: t for t in manager.list_tools(sid)}
            tool = tools.get(args.tool)
            if tool is None:
                _log.debug("tool %r is not listed by %r; its arguments stay strings",
                           args.tool, sid)
            arguments = convert_arguments(args.items, tool.input_schema if tool else None)
        _log.debug("calling tool %r on %r with arguments %s", args.tool, sid,
                    sorted(arguments or {}))
        result = manager.call_tool(sid, args.tool, arguments or {}, timeout=ctx.timeout)
    code = EXIT_FAILED if result.is_error else EXIT_OK
    error = f"tool {args.tool!r} reported an error (isError)" if result.is_error else None
    out = _json_doc(result.raw) if ctx.json else _render_call(result)
    return _Outcome(out, code, error)


def _cmd_read(args: argparse.Namespace, ctx: _Context) -> _Outcome:
    with _running(ctx, args.server) as (manager, [sid]):
        result = manager.read_resource(sid, args.uri)
    return _Outcome(_json_doc(result.raw) if ctx.json else _render_read(result))


_COMMANDS: dict[str, Callable[[argparse.Namespace, _Context], _Outcome]] = {
    "tools": _cmd_list,
    "resources": _cmd_list,
    "prompts": _cmd_list,
    "call": _cmd_call,
    "read": _cmd_read,
    "login": _cmd_login,
    "trust": _cmd_trust,
}
