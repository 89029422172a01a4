"""The ``mcpsync`` command line: the argparse parser, its global options and parsing.

Kept apart from the commands so that ``mcpsync --help`` and a usage error need nothing but
``argparse``: at load time this module imports only the exit codes from the rest of mcpsync.
"""

from __future__ import annotations

import argparse
import math
from typing import Any, NoReturn

from mcpsync.cli._errors import EXIT_USAGE, CLIError

__all__ = ["DEFAULT_CLI_TIMEOUT", "build_parser"]


# --timeout when neither it nor the config gives one (URL and command SERVERs).
DEFAULT_CLI_TIMEOUT = 30.0


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors become one ``mcpsync: error:`` line (exit 2).

    argparse's own ``error()`` prints the usage block first and calls ``sys.exit``; raising
    lets ``main()`` keep the one-line rule and return instead of exiting (tests call it
    in-process).
    """

    def error(self, message: str) -> NoReturn:
        raise CLIError(f"{message} (see 'mcpsync --help')", EXIT_USAGE)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be finite and > 0, got {text!r}")
    return value


def _add_global_options(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """The options every command takes, before or after the command name.

    On the subcommand parsers the defaults are ``SUPPRESS``, so an option given before the
    command is not overwritten by the subcommand's default.
    """
    def default(value: Any) -> Any:
        return argparse.SUPPRESS if suppress else value

    group = parser.add_argument_group("global options")
    group.add_argument("--config", metavar="PATH", default=default(None),
                       help="config file (default: $MCPSYNC_CONFIG, else ./.mcp.json, else "
                            "./.vscode/mcp.json)")
    group.add_argument("--timeout", metavar="SECONDS", type=_seconds, default=default(None),
                       help=f"per-request timeout (default {DEFAULT_CLI_TIMEOUT:g}, or the "
                            "config's)")
    group.add_argument("--json", action="store_true", default=default(False),
                       help="print exactly one JSON document on stdout")
    group.add_argument("--verbose", "-v", action="store_true", default=default(False),
                       help="log mcpsync at DEBUG to stderr")
    group.add_argument("--trust-project-config", action="store_true", default=default(False),
                       help="run the servers of ./.mcp.json or ./.vscode/mcp.json this once "
                            "without asking (see 'mcpsync trust')")


_SERVER_HELP = ("a server id from the config, an http(s):// URL, or a command string "
                "(split like a shell would)")


def build_parser() -> argparse.ArgumentParser:
    """The full ``mcpsync`` argument parser (used by :func:`main` and the docs)."""
    parser = _Parser(
        prog="mcpsync",
        description="Talk to MCP servers from the shell: list and call tools, read resources, "
                    "list prompts, log in with OAuth.",
        epilog="exit codes: 0 ok, 1 tool error or JSON-RPC error, 2 usage or config, "
               "3 could not connect or server died, 4 unauthorized, 5 timeout, 130 Ctrl-C")
    _add_global_options(parser, suppress=False)
    from mcpsync._version import __version__

    parser.add_argument("--version", action="version", version=f"mcpsync {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True,
                                parser_class=_Parser)

    def command(name: str, help: str, examples: str = "") -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help,
                           epilog=f"examples:\n{examples}" if examples else None,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        _add_global_options(p, suppress=True)
        return p

    p = command("tools", "list tools (of SERVER, or of every enabled server in the config)")
    p.add_argument("server", nargs="?", metavar="SERVER", help=_SERVER_HELP)

    p = command("call", "call a tool (its name and required arguments are checked first)",
                "  mcpsync call demo add a=1 b=2\n"
                "  mcpsync call demo echo --args '{\"text\": \"hi\"}'\n"
                "  mcpsync call demo slow seconds=3 --progress\n"
                "  mcpsync call SERVER screenshot --output ./shots")
    p.add_argument("server", metavar="SERVER", help=_SERVER_HELP)
    p.add_argument("tool", metavar="TOOL")
    p.add_argument("items", nargs="*", metavar="key=value",
                   help="an argument, converted by the tool's input schema")
    p.add_argument("--args", metavar="JSON", dest="args_json",
                   help="the whole arguments object as JSON ('-' reads it from stdin); "
                        "not together with key=value")
    p.add_argument("--output", metavar="DIR",
                   help="save image, audio and binary resource blocks into DIR (it must "
                        "exist); the printed line names each file")
    p.add_argument("--progress", action="store_true",
                   help="print progress notifications on stderr even when it is not a "
                        "terminal (on a terminal they always show, on one line)")

    p = command("describe", "show a tool: its description and arguments (types, which are "
                            "required)",
                "  mcpsync describe demo add\n"
                "  mcpsync describe demo slow --json")
    p.add_argument("server", metavar="SERVER", help=_SERVER_HELP)
    p.add_argument("tool", metavar="TOOL")

    p = command("prompt", "get a prompt, rendered with its arguments",
                "  mcpsync prompt SERVER greeting name=Ada\n"
                "  mcpsync prompt SERVER summary text='a long text' --json")
    p.add_argument("server", metavar="SERVER", help=_SERVER_HELP)
    p.add_argument("name", metavar="NAME")
    p.add_argument("items", nargs="*", metavar="key=value",
                   help="a prompt argument (prompt arguments are strings)")

    p = command("resources", "list resources (of SERVER, or of every enabled server)")
    p.add_argument("server", nargs="?", metavar="SERVER", help=_SERVER_HELP)

    p = command("read", "read a resource")
    p.add_argument("server", metavar="SERVER", help=_SERVER_HELP)
    p.add_argument("uri", metavar="URI")

    p = command("prompts", "list prompts (of SERVER, or of every enabled server)")
    p.add_argument("server", nargs="?", metavar="SERVER", help=_SERVER_HELP)

    p = command("trust", "trust a project config file (./.mcp.json) to start its servers "
                         "until it changes")
    p.add_argument("path", metavar="PATH")

    p = command("inspect", "summarise a gateway traffic log: calls per tool, errors, latency "
                           "percentiles, refusals",
                "  mcpsync inspect gateway.log\n"
                "  mcpsync inspect gateway.log gateway.log.1 --json")
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="a log written by 'mcpsync gateway --log FILE', or a rotated one")

    p = command("login", "log in to an HTTP server with OAuth and store the token")
    p.add_argument("url", metavar="URL")
    p.add_argument("--scope", action="append", metavar="S",
                   help="scope(s) to ask for, space separated; may be repeated")
    p.add_argument("--device", action="store_true",
                   help="use the device-code flow (no browser on this machine)")

    p = command("gateway", "serve the config's server to an MCP host over stdin/stdout, "
                           "passing its frames through untouched (stdout carries MCP only)",
                "  mcpsync gateway --config ~/gateway.json\n"
                "  mcpsync gateway --config ~/gateway.json --log ~/gateway.log\n"
                "  mcpsync gateway --config ~/gateway.json --http 127.0.0.1:8808")
    p.add_argument("--http", metavar="HOST:PORT",
                   help="serve MCP hosts over Streamable HTTP at http://HOST:PORT/mcp instead "
                        "of stdin/stdout (each legacy host session gets its own upstreams)")
    p.add_argument("--max-upstream-processes", type=int, default=None, metavar="N",
                   help="with --http: stdio upstream processes across all host sessions "
                        "(default 32); a session past it is refused at initialize")
    p.add_argument("--session-key-file", metavar="FILE",
                   help="with --http: a 0600 file holding a secret shared by several gateway "
                        "processes, so a legacy session can move between them")
    p.add_argument("--log", metavar="FILE",
                   help="log every message as a JSON line (redacted; 0600; rotated at 10 MB); "
                        "read it with 'mcpsync inspect FILE'")
    p.add_argument("--log-detail", choices=("summary", "full"), default="summary",
                   help="summary (default): methods, tools, sizes, latencies, outcomes and the "
                        "shape of arguments; full: whole messages too, still redacted")
    p.add_argument("--secrets-dir", metavar="DIR",
                   help="where an entry's secret_ref is a file (DIR/<ref>, a JSON object, mode "
                        "0600), written to the server's 0600 {{secret_file}} on each start")
    p.add_argument("--merge-timeout", type=float, default=None, metavar="SECONDS",
                   help="with several servers: how long a merged request (initialize, "
                        "tools/list, ...) waits for each before answering from the others "
                        "(default 5; server/discover at most 3)")
    p.add_argument("--bridge", action="store_true",
                   help="bridge protocol eras: a 2026-07-28 host can use legacy servers and a "
                        "legacy host 2026-07-28 ones (docs/gateway-bridging.md)")
    return parser


def _parse(argv: list[str]) -> argparse.Namespace:
    """Parse the command line; ``key=value`` items may come after options too.

    argparse fills ``call``'s ``nargs="*"`` items once, before the first option, so in
    ``call S T --json a=1`` the ``a=1`` comes back unrecognised: it is an item all the same.
    """
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command in ("call", "prompt") \
            and not any(e.startswith("-") for e in extra):
        args.items = [*args.items, *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args
