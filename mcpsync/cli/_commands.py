"""The ``mcpsync`` commands that ask servers something: ``tools``, ``resources``,
``prompts``, ``call``, ``describe``, ``prompt`` and ``read``, and the table from command
name to function. Names the user typed are checked against what the server lists before
anything else is asked ("did you mean"), so a typo is a usage error, not a server's.

Each command starts its server(s) through :mod:`mcpsync.cli._servers`, asks one thing and
returns an :class:`~mcpsync.cli._output._Outcome`; ``login`` lives in
:mod:`mcpsync.cli._login` with the rest of the OAuth handling.
"""

from __future__ import annotations

import argparse
import importlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from mcpsync._printable import printable
from mcpsync.cli._args import _read_args_json, _split_items, convert_arguments
from mcpsync.cli._context import _Context
from mcpsync.cli._errors import (
    EXIT_CONNECT,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    CLIError,
    _describe,
)
from mcpsync.cli._gateway import _cmd_gateway
from mcpsync.cli._inspect import _cmd_inspect
from mcpsync.cli._login import _cmd_login
from mcpsync.cli._output import (
    _cell,
    _json_doc,
    _Outcome,
    _render_block,
    _render_call,
    _render_read,
    _stdout_terminal,
    _table,
    _with_server,
)
from mcpsync.cli._servers import _running
from mcpsync.cli._trust import _cmd_trust

if TYPE_CHECKING:
    from mcpsync.manager import Manager
    from mcpsync.types import Tool

# The CLI's modules all log as "mcpsync.cli": --verbose and the quiet warning filter
# (cli/_logging.py) are set up for that one name.
_log = logging.getLogger("mcpsync.cli")


def _list_each(manager: Manager, ids: Sequence[str], fetch: Callable[[str], list[Any]],
               ctx: _Context) -> list[tuple[str, Any]]:
    """Each server's items, in server order (a server without that capability has none).
    Over a whole config a server that fails to answer is one line in ``ctx.failures`` and
    the others are still shown; for one SERVER its error ends the command."""
    rows: list[tuple[str, Any]] = []
    for sid in ids:
        try:
            items = fetch(sid)
        except Exception as exc:
            if ctx.all_servers:
                ctx.failures.append(f"server {sid!r} did not answer: {_describe(exc)}")
                continue
            raise
        ctx.answered += 1
        rows.extend((sid, item) for item in items)
    return rows


def _cmd_list(args: argparse.Namespace, ctx: _Context) -> _Outcome:
    kind: str = args.command
    header: tuple[str, ...]
    cells: list[tuple[str, ...]]
    with _running(ctx, args.server) as (manager, ids):
        if kind == "tools":
            rows = _list_each(manager, ids, manager.list_tools, ctx)
            header = ("SERVER", "TOOL", "DESCRIPTION")
            cells = [(sid, _cell(t.name), _cell(t.description, first_line=True))
                     for sid, t in rows]
        elif kind == "resources":
            rows = _list_each(manager, ids, manager.list_resources, ctx)
            header = ("SERVER", "URI", "NAME", "MIME")
            cells = [(sid, _cell(r.uri), _cell(r.name), _cell(r.mime_type)) for sid, r in rows]
        else:
            rows = _list_each(manager, ids, manager.list_prompts, ctx)
            header = ("SERVER", "PROMPT", "DESCRIPTION")
            cells = [(sid, _cell(p.name), _cell(p.description, first_line=True))
                     for sid, p in rows]
    code, error = (EXIT_CONNECT, "\n".join(ctx.failures)) if ctx.failures else (EXIT_OK, None)
    if ctx.json:
        return _Outcome(_json_doc([_with_server(sid, item.raw) for sid, item in rows]),
                        code, error)
    # No server answered: nothing on stdout, only the failure lines.
    return _Outcome(_table(header, cells) if ctx.answered else "", code, error)


def _tool_of(manager: Manager, sid: str, name: str) -> Tool:
    """The listed tool ``name`` of ``sid``; exit 2 with "did you mean" when it has none."""
    tools = {t.name: t for t in manager.list_tools(sid)}
    tool = tools.get(name)
    if tool is None:
        raise CLIError(f"server {sid!r} has no tool {name!r}{_guess(name, tools)} (list "
                       f"them with 'mcpsync tools {_quoted(sid)}')", EXIT_USAGE)
    return tool


def _guess(name: str, choices: Iterable[str]) -> str:
    importlib.import_module("mcpsync.client._arguments")
    from mcpsync.client._arguments import did_you_mean

    hint = did_you_mean(name, choices)
    return f"; did you mean {hint[0]!r}?" if hint else ""


def _quoted(text: str) -> str:
    import shlex

    return shlex.quote(text)


def _check_tool_arguments(sid: str, tool: Tool, arguments: Mapping[str, Any]) -> None:
    """Required arguments present, and no unknown ones when the schema says
    ``additionalProperties: false`` (JSON Schema allows them otherwise): exit 2 before the
    call, pointing at ``mcpsync describe``."""
    importlib.import_module("mcpsync.client._proxies")
    from mcpsync.client._proxies import describe_arguments

    described = describe_arguments(tool)
    takes = [name for name, *_ in described]
    missing = [name for name, _t, required, _d in described
               if required and name not in arguments]
    see = f"(see 'mcpsync describe {_quoted(sid)} {_quoted(tool.name)}')"
    if missing:
        raise CLIError(f"tool {tool.name!r} of server {sid!r} needs argument"
                       f"{'s' if len(missing) > 1 else ''} "
                       f"{', '.join(repr(m) for m in missing)} {see}", EXIT_USAGE)
    if tool.input_schema.get("additionalProperties") is not False:
        return
    unknown = [k for k in arguments if k not in takes]
    if unknown:
        raise CLIError(f"tool {tool.name!r} of server {sid!r} takes no argument "
                       f"{unknown[0]!r}{_guess(unknown[0], takes)} {see}", EXIT_USAGE)


def _progress_printer(tool: str, force: bool) -> Callable[[float, float | None, str | None],
                                                          None] | None:
    """A progress line on stderr while a call runs: rewritten in place on a terminal,
    one line per notification with ``--progress`` elsewhere; ``None`` when neither. The
    server's message is escaped (see :mod:`mcpsync._printable`): it cannot move the cursor
    or rewrite the terminal."""
    import sys

    stream = sys.stderr
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    if not (tty or force):
        return None

    def show(done: float, total: float | None, message: str | None) -> None:
        of = f"/{total:g}" if total is not None else ""
        line = f"{printable(tool)}: {done:g}{of}" + (
            f" {printable(str(message))}" if message else "")
        try:
            stream.write(f"\r{line[:200]}\x1b[K" if tty else f"progress: {line[:200]}\n")
            stream.flush()
        except (OSError, ValueError):
            pass

    return show


def _end_progress(shown: bool) -> None:
    import sys

    if shown:
        try:
            if sys.stderr.isatty():
                sys.stderr.write("\r\x1b[K")
                sys.stderr.flush()
        except (OSError, ValueError):
            pass


def _cmd_call(args: argparse.Namespace, ctx: _Context) -> _Outcome:
    # Every usage error is found before a server is spawned.
    if args.args_json is not None and args.items:
        raise CLIError("give the arguments either as key=value items or with --args, "
                       "not both", EXIT_USAGE)
    output = _output_dir(args.output)
    arguments: dict[str, Any] | None = None
    if args.args_json is not None:
        arguments = _read_args_json(args.args_json)
    else:
        _split_items(args.items)
    with _running(ctx, args.server) as (manager, [sid]):
        tool = _tool_of(manager, sid, args.tool)
        if arguments is None:
            arguments = convert_arguments(args.items, tool.input_schema)
        _check_tool_arguments(sid, tool, arguments)
        _log.debug("calling tool %r on %r with arguments %s", args.tool, sid,
                   sorted(arguments))
        progress = _progress_printer(args.tool, bool(args.progress))
        try:
            # --timeout bounds each request and, for a tool that runs as a task, the task.
            result = manager.call_tool(sid, args.tool, arguments, timeout=ctx.timeout,
                                       progress=progress, task_timeout=ctx.timeout)
        finally:
            _end_progress(progress is not None)
    code = EXIT_FAILED if result.is_error else EXIT_OK
    error = f"tool {args.tool!r} reported an error (isError)" if result.is_error else None
    out = _json_doc(result.raw) if ctx.json else _render_call(result, output, _stdout_terminal())
    return _Outcome(out, code, error)


def _output_dir(path: str | None) -> str | None:
    """``--output DIR``: an existing directory (checked before the server starts)."""
    if path is None:
        return None
    import os

    if not os.path.isdir(path):
        raise CLIError(f"--output {path!r}: not a directory (create it first)", EXIT_USAGE)
    return path


def _cmd_describe(args: argparse.Namespace, ctx: _Context) -> _Outcome:
    importlib.import_module("mcpsync.client._proxies")
    from mcpsync.client._proxies import describe_arguments

    with _running(ctx, args.server) as (manager, [sid]):
        tool = _tool_of(manager, sid, args.tool)
    if ctx.json:
        return _Outcome(_json_doc(_with_server(sid, tool.raw)))
    lines = [f"{printable(tool.name)}  (server {printable(sid)})"]
    if tool.description:
        lines += ["", *[f"  {printable(line)}".rstrip()
                        for line in tool.description.strip().splitlines()]]
    described = describe_arguments(tool)
    lines.append("")
    if not described:
        lines.append("no arguments")
        return _Outcome("\n".join(lines) + "\n")
    cells = [(_cell(name), _cell(kind), "yes" if required else "no", _cell(desc))
             for name, kind, required, desc in described]
    return _Outcome("\n".join(lines) + "\n" + _table(("ARGUMENT", "TYPE", "REQUIRED",
                                                     "DESCRIPTION"), cells))


def _cmd_prompt(args: argparse.Namespace, ctx: _Context) -> _Outcome:
    pairs = dict(_split_items(args.items))
    with _running(ctx, args.server) as (manager, [sid]):
        prompts = {p.name: p for p in manager.list_prompts(sid)}
        prompt = prompts.get(args.name)
        if prompt is None:
            raise CLIError(f"server {sid!r} has no prompt {args.name!r}"
                           f"{_guess(args.name, prompts)} (list them with 'mcpsync prompts "
                           f"{_quoted(sid)}')", EXIT_USAGE)
        missing = [a.name for a in prompt.arguments if a.required and a.name not in pairs]
        if missing:
            takes = ", ".join(a.name + ("" if a.required else "?") for a in prompt.arguments)
            raise CLIError(f"prompt {args.name!r} of server {sid!r} needs argument"
                           f"{'s' if len(missing) > 1 else ''} "
                           f"{', '.join(repr(m) for m in missing)} (it takes: {takes})",
                           EXIT_USAGE)
        result = manager.get_prompt(sid, args.name, pairs)
    if ctx.json:
        return _Outcome(_json_doc(result.raw))
    terminal = _stdout_terminal()
    parts = []
    if result.description:
        parts.append(f"# {printable(result.description)}")
    for message in result.messages:
        parts.append(f"[{printable(message.role)}] "
                     f"{_render_block(message.content, terminal=terminal)}")
    body = "\n".join(parts)
    return _Outcome(body + "\n" if body else "")


def _cmd_read(args: argparse.Namespace, ctx: _Context) -> _Outcome:
    importlib.import_module("mcpsync.errors")
    from mcpsync.errors import CapabilityNotSupported, ResourceNotFound

    with _running(ctx, args.server) as (manager, [sid]):
        try:
            result = manager.read_resource(sid, args.uri)
        except (ResourceNotFound, CapabilityNotSupported) as exc:
            raise CLIError(f"{_describe(exc)} (list them with 'mcpsync resources "
                           f"{_quoted(sid)}')", EXIT_FAILED) from exc
    return _Outcome(_json_doc(result.raw) if ctx.json else _render_read(result, _stdout_terminal()))


_COMMANDS: dict[str, Callable[[argparse.Namespace, _Context], _Outcome]] = {
    "tools": _cmd_list,
    "resources": _cmd_list,
    "prompts": _cmd_list,
    "call": _cmd_call,
    "describe": _cmd_describe,
    "prompt": _cmd_prompt,
    "read": _cmd_read,
    "login": _cmd_login,
    "trust": _cmd_trust,
    "gateway": _cmd_gateway,
    "inspect": _cmd_inspect,
}
