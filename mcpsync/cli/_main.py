"""The ``mcpsync`` command (also ``python -m mcpsync``): MCP servers from a shell.

One process per command: resolve the server (a config id, a URL or a command string), start it
through a :class:`~mcpsync.manager.Manager`, do one thing, print, close. The commands are
``tools``, ``call``, ``resources``, ``read``, ``prompts``, ``login`` and ``trust``; the
behaviour (output, argument conversion, exit codes) is ``docs/cli.md``.

Everything heavier than ``argparse`` is imported inside the functions that need it, so
``mcpsync --help`` and a usage error cost no more than starting Python.

Output discipline: the command's result is built completely before anything is written, so a
failure leaves stdout empty and stderr holds exactly one ``mcpsync: error: ...`` line.

This module is the entry point (:func:`main`) and the public names; the work is split into
private modules, each importing only the standard library at load time:

- ``_parser``: the argparse parser and the global options;
- ``_args``: ``key=value`` conversion by a tool's ``inputSchema``, and ``--args``;
- ``_errors``: the exit codes and which exception ends in which;
- ``_context``: the parsed global options and the config file they point at;
- ``_servers``: SERVER resolved, checked and started through a Manager;
- ``_login``: the ``login`` command and the use of a stored login;
- ``_trust``: asking before a project config found in the current directory runs, and
  the ``trust`` command;
- ``_commands``: the other commands;
- ``_output``: tables, ``--json`` documents and rendered results;
- ``_logging``: the stderr log handler of one command.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from mcpsync.cli._args import convert_arguments, convert_value
from mcpsync.cli._commands import _COMMANDS
from mcpsync.cli._context import _Context
from mcpsync.cli._errors import (
    EXIT_AUTH,
    EXIT_CONNECT,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_USAGE,
    CLIError,
    _describe,
    exit_code_for,
)
from mcpsync.cli._logging import _drop_handler, _logging_handler
from mcpsync.cli._parser import (
    DEFAULT_CLI_TIMEOUT as DEFAULT_CLI_TIMEOUT,  # still readable as cli.DEFAULT_CLI_TIMEOUT
    _parse,
    build_parser,
)

__all__ = [
    "EXIT_AUTH",
    "EXIT_CONNECT",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_TIMEOUT",
    "EXIT_USAGE",
    "CLIError",
    "build_parser",
    "convert_arguments",
    "convert_value",
    "exit_code_for",
    "main",
]

_log = logging.getLogger("mcpsync.cli")


def _error(message: str) -> None:
    from mcpsync._printable import terminal_text

    try:   # a server's error text may hold terminal controls: escaped like a tool's text
        sys.stderr.write(f"mcpsync: error: {terminal_text(message)}\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # stderr gone: nothing left to tell
        pass


def _write_stdout(text: str) -> None:
    if not text:
        return
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # `mcpsync tools | head`: the reader left; say nothing more. Point stdout at devnull
        # so the interpreter's final flush does not complain a second time.
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        finally:
            os.close(devnull)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``mcpsync`` command and return its exit code (never raises, never exits)."""
    try:
        args = _parse(list(argv) if argv is not None else sys.argv[1:])
    except CLIError as exc:
        _error(str(exc))
        return exc.code
    except SystemExit as exc:   # --help / --version printed and asked to exit
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    handler = _logging_handler(bool(args.verbose))
    ctx = _Context(config=args.config, timeout=args.timeout, json=bool(args.json),
                   trust_project_config=bool(args.trust_project_config))
    try:
        outcome = _COMMANDS[args.command](args, ctx)
    except KeyboardInterrupt:
        _error("interrupted")
        return EXIT_INTERRUPTED
    except CLIError as exc:
        _error(str(exc))
        return exc.code
    except Exception as exc:
        code = exit_code_for(exc)
        _log.debug("command failed", exc_info=True)
        _error(_describe(exc))
        return code
    finally:
        _drop_handler(handler)
    _write_stdout(outcome.stdout)
    if outcome.error:
        for line in outcome.error.splitlines():   # one line per failed server, or one
            _error(line)
    return outcome.code
