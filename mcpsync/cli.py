"""The ``mcpsync`` command (also ``python -m mcpsync``): MCP servers from a shell.

One process per command: resolve the server (a config id, a URL or a command string), start it
through a :class:`~mcpsync.manager.Manager`, do one thing, print, close. The commands are
``tools``, ``call``, ``resources``, ``read``, ``prompts`` and ``login``; the behaviour (output,
argument conversion, exit codes) is ``docs/cli.md``.

Everything heavier than ``argparse`` is imported inside the functions that need it, so
``mcpsync --help`` and a usage error cost no more than starting Python.

Output discipline: the command's result is built completely before anything is written, so a
failure leaves stdout empty and stderr holds exactly one ``mcpsync: error: ...`` line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import re
import shlex
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from mcpsync.config import ServerConfig
    from mcpsync.manager import Manager
    from mcpsync.types import CallToolResult, ReadResourceResult

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

EXIT_OK = 0
EXIT_FAILED = 1          # isError, or a JSON-RPC error answer
EXIT_USAGE = 2           # bad command line or config
EXIT_CONNECT = 3         # could not start or connect, or the server died
EXIT_AUTH = 4            # unauthorized
EXIT_TIMEOUT = 5         # no answer in time
EXIT_INTERRUPTED = 130   # Ctrl-C

DEFAULT_CLI_TIMEOUT = 30.0

_log = logging.getLogger("mcpsync.cli")


class CLIError(Exception):
    """An error already worded for the user, with the exit code it ends the command with."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class _Outcome:
    """What a command produced: stdout text, exit code, and an optional stderr error line."""

    stdout: str
    code: int = EXIT_OK
    error: str | None = None


# --- the command line -------------------------------------------------------------------

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

    def command(name: str, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        _add_global_options(p, suppress=True)
        return p

    p = command("tools", "list tools (of SERVER, or of every enabled server in the config)")
    p.add_argument("server", nargs="?", metavar="SERVER", help=_SERVER_HELP)

    p = command("call", "call a tool")
    p.add_argument("server", metavar="SERVER", help=_SERVER_HELP)
    p.add_argument("tool", metavar="TOOL")
    p.add_argument("items", nargs="*", metavar="key=value",
                   help="an argument, converted by the tool's input schema")
    p.add_argument("--args", metavar="JSON", dest="args_json",
                   help="the whole arguments object as JSON ('-' reads it from stdin); "
                        "not together with key=value")

    p = command("resources", "list resources (of SERVER, or of every enabled server)")
    p.add_argument("server", nargs="?", metavar="SERVER", help=_SERVER_HELP)

    p = command("read", "read a resource")
    p.add_argument("server", metavar="SERVER", help=_SERVER_HELP)
    p.add_argument("uri", metavar="URI")

    p = command("prompts", "list prompts (of SERVER, or of every enabled server)")
    p.add_argument("server", nargs="?", metavar="SERVER", help=_SERVER_HELP)

    p = command("login", "log in to an HTTP server with OAuth and store the token")
    p.add_argument("url", metavar="URL")
    p.add_argument("--scope", action="append", metavar="S",
                   help="scope(s) to ask for, space separated; may be repeated")
    p.add_argument("--device", action="store_true",
                   help="use the device-code flow (no browser on this machine)")
    return parser


# --- key=value conversion ---------------------------------------------------------------

_INTEGER = re.compile(r"[-+]?[0-9]+")
_NUMBER = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
_TRUE = frozenset(("true", "1", "yes"))
_FALSE = frozenset(("false", "0", "no"))
_NO_VALUE = object()


def _as_type(kind: str, text: str) -> Any:
    """``text`` as JSON type ``kind``, or ``_NO_VALUE`` when it does not fit."""
    if kind == "string":
        return text
    if kind == "integer":
        return int(text) if _INTEGER.fullmatch(text) else _NO_VALUE
    if kind == "number":
        if _INTEGER.fullmatch(text):
            return int(text)
        if _NUMBER.fullmatch(text):
            value = float(text)
            return value if math.isfinite(value) else _NO_VALUE
        return _NO_VALUE
    if kind == "boolean":
        low = text.lower()
        return True if low in _TRUE else False if low in _FALSE else _NO_VALUE
    if kind == "null":
        return None if text == "null" else _NO_VALUE
    if kind in ("object", "array"):
        try:
            value = json.loads(text)
        except ValueError:
            return _NO_VALUE
        want = dict if kind == "object" else list
        return value if isinstance(value, want) else _NO_VALUE
    return _NO_VALUE


def _schema_types(schema: Any) -> list[str] | None:
    """The JSON types a property schema allows, in order; ``None`` when it names none.

    ``type`` may be a string or a list. Without ``type``, the types of ``anyOf``/``oneOf``
    branches are used: that is how pydantic spells ``Optional[int]``.
    """
    if not isinstance(schema, Mapping):
        return None
    kind = schema.get("type")
    if isinstance(kind, str):
        return [kind]
    if isinstance(kind, list):
        return [k for k in kind if isinstance(k, str)] or None
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if isinstance(branches, list):
            types: list[str] = []
            for branch in branches:
                for t in _schema_types(branch) or []:
                    if t not in types:
                        types.append(t)
            if types:
                return types
    return None


_TYPE_WORDS = {"integer": "an integer", "number": "a number",
               "boolean": "a boolean (true/false/1/0/yes/no)", "null": "null",
               "object": "a JSON object", "array": "a JSON array", "string": "a string"}


def convert_value(key: str, text: str, schema: Any) -> Any:
    """Convert one ``key=value`` text by the property's schema (rules §10).

    Types are tried in order, ``string`` last; no schema (or no type) keeps the text.
    Raises :class:`CLIError` (exit 2) when no type fits.
    """
    types = _schema_types(schema)
    if types is None:
        return text
    ordered = [t for t in types if t != "string"] + (["string"] if "string" in types else [])
    for kind in ordered:
        value = _as_type(kind, text)
        if value is not _NO_VALUE:
            return value
    wanted = " or ".join(_TYPE_WORDS.get(t, repr(t)) for t in ordered)
    raise CLIError(f"argument {key!r}: expected {wanted}, got {text!r}", EXIT_USAGE)


def _split_items(items: Sequence[str]) -> list[tuple[str, str]]:
    """``key=value`` items as pairs; an item without ``=`` or a repeated key is exit 2."""
    pairs: list[tuple[str, str]] = []
    seen: set[str] = set()
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CLIError(f"expected key=value, got {item!r}", EXIT_USAGE)
        if key in seen:
            raise CLIError(f"argument {key!r} is given more than once", EXIT_USAGE)
        seen.add(key)
        pairs.append((key, value))
    return pairs


def convert_arguments(items: Sequence[str], input_schema: Mapping[str, Any] | None
                      ) -> dict[str, Any]:
    """Turn ``key=value`` items into a tool's arguments object by its ``inputSchema``."""
    pairs = _split_items(items)
    props = (input_schema or {}).get("properties")
    props = props if isinstance(props, Mapping) else {}
    return {key: convert_value(key, text, props.get(key)) for key, text in pairs}


def _read_args_json(text: str) -> dict[str, Any]:
    if text == "-":
        text = sys.stdin.read()
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise CLIError(f"--args: invalid JSON: {exc}", EXIT_USAGE) from None
    if not isinstance(value, dict):
        raise CLIError(f"--args: expected a JSON object, got {type(value).__name__}",
                       EXIT_USAGE)
    return value


# --- errors and exit codes --------------------------------------------------------------

def _is_auth_error(exc: BaseException) -> bool:
    """An ``mcpauth.AuthError``, checked without importing mcpauth (if it raised one, it is
    already imported; if it is not installed, nothing can be one)."""
    mod = sys.modules.get("mcpauth.errors")
    auth_error = getattr(mod, "AuthError", None) if mod is not None else None
    return isinstance(auth_error, type) and isinstance(exc, auth_error)


def exit_code_for(exc: BaseException) -> int:
    """The exit code of an exception (rules §10): 4 auth, 5 timeout, 3 connection, 2 config,
    130 Ctrl-C, else 1 (a JSON-RPC error answer and every other failed request)."""
    from mcpsync import errors

    if isinstance(exc, CLIError):
        return exc.code
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    if isinstance(exc, (errors.Unauthorized, errors.AuthHookError)) or _is_auth_error(exc):
        return EXIT_AUTH
    if isinstance(exc, TimeoutError):   # RequestTimeout included
        return EXIT_TIMEOUT
    if isinstance(exc, (errors.ConnectionLost, errors.TransportError)):
        return EXIT_CONNECT
    if isinstance(exc, errors.ConfigError):
        return EXIT_USAGE
    return EXIT_FAILED


def _one_line(text: str) -> str:
    """Collapse a multi-line message (a server's stderr excerpt) onto one line."""
    return " | ".join(line.strip() for line in text.splitlines() if line.strip())


def _describe(exc: BaseException) -> str:
    return _one_line(str(exc)) or type(exc).__name__


# --- config and servers -----------------------------------------------------------------

@dataclass
class _Context:
    """The parsed global options, and the config they point at (loaded on demand)."""

    config: str | None
    timeout: float | None
    json: bool
    _loaded: tuple[str, list[ServerConfig]] | None = None

    def config_path(self) -> str | None:
        """``--config``, else the default search (rules §10); ``None`` when nothing exists."""
        if self.config is not None:
            return self.config
        from mcpsync.config_files import default_config_path

        path = default_config_path()
        _log.debug("config file: %s", path or "none found")
        return path

    def configs(self) -> tuple[str | None, list[ServerConfig]]:
        """The config file's path and its servers (``[]`` when there is no file)."""
        if self._loaded is not None:
            return self._loaded
        path = self.config_path()
        if path is None:
            return None, []
        import os

        if not os.path.exists(path):
            raise CLIError(f"config file {path!r} does not exist", EXIT_USAGE)
        from mcpsync.config_files import load_config
        from mcpsync.errors import ConfigError

        try:
            loaded = list(load_config(path))
        except ConfigError as exc:
            raise CLIError(_describe(exc), EXIT_USAGE) from exc
        except OSError as exc:
            raise CLIError(f"cannot read config file {path!r}: {exc}", EXIT_USAGE) from exc
        self._loaded = (path, loaded)
        return self._loaded

    def with_timeout(self, config: ServerConfig) -> ServerConfig:
        """The config with ``--timeout`` applied (handshake and per-request), if given."""
        if self.timeout is None:
            return config
        import dataclasses

        return dataclasses.replace(config, timeout=self.timeout)


def _resolve_server(ctx: _Context, server: str) -> tuple[ServerConfig, str]:
    """SERVER as a config: a config id, else an http(s) URL, else a command string.

    Returns the config and how it was found (``"id"``, ``"url"`` or ``"command"``).
    """
    from mcpsync.config import ServerConfig
    from mcpsync.errors import ConfigError

    path, configs = ctx.configs()
    for config in configs:
        if config.id == server:
            if config.scope == "thread":
                import dataclasses

                # The CLI has no threads; run it as a project server for this one command.
                config = dataclasses.replace(config, scope="")
            _log.debug("SERVER %r is a server id in %s", server, path)
            return ctx.with_timeout(config), "id"
    timeout = ctx.timeout or DEFAULT_CLI_TIMEOUT
    try:
        if server.startswith(("http://", "https://")):
            _log.debug("SERVER %r is a URL", server)
            return ServerConfig(id=server, url=server, timeout=timeout), "url"
        try:
            argv = shlex.split(server)
        except ValueError as exc:
            raise CLIError(f"SERVER {server!r}: cannot split the command: {exc}",
                           EXIT_USAGE) from None
        if not argv:
            raise CLIError("SERVER is empty", EXIT_USAGE)
        _log.debug("SERVER %r is a command: %r", server, argv)
        return ServerConfig(id=server, command=argv[0], args=argv[1:], timeout=timeout), \
            "command"
    except ConfigError as exc:
        raise CLIError(_describe(exc), EXIT_USAGE) from exc


def _check_config(config: ServerConfig) -> None:
    """The config checks that need no spawn (a ``secret_ref`` the CLI cannot resolve): exit
    2 here rather than a failed start (exit 3)."""
    from mcpsync.errors import ConfigError

    try:
        from mcpsync.secrets import check_secret_config
    except ImportError:  # pragma: no cover - secrets.py is part of the same issue
        return
    try:
        check_secret_config(config, None)
    except ConfigError as exc:
        raise CLIError(_describe(exc), EXIT_USAGE) from exc


def _start_failure(exc: BaseException) -> CLIError:
    """A failed start: exit 3, except auth (4), a handshake timeout (5) and Ctrl-C."""
    code = exit_code_for(exc)
    if code not in (EXIT_AUTH, EXIT_TIMEOUT, EXIT_INTERRUPTED):
        code = EXIT_CONNECT
    return CLIError(_describe(exc), code)


def _start_one(manager: Manager, ctx: _Context, server: str, config: ServerConfig,
               how: str) -> str:
    """Start the resolved SERVER and return its id in the Manager."""
    _log.debug("starting server %r", config.id)
    try:
        manager.start_server(config)
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        failure = _start_failure(exc)
        path, configs = ctx.configs()
        if how == "command" and configs and len(config.argv) == 1:
            # Most likely a mistyped id rather than a program name: say both.
            ids = ", ".join(c.id for c in configs)
            failure = CLIError(f"{server!r} is not a server id in {path} ({ids}); as a "
                               f"command: {failure}", failure.code)
        raise failure from exc
    _log_started(manager, config.id)
    return config.id


def _log_started(manager: Manager, server_id: str) -> None:
    if not _log.isEnabledFor(logging.DEBUG):
        return
    info = manager.server_info(server_id)
    if info is not None:
        _log.debug("server %r started: %s %s, protocol %s", server_id, info.name,
                   info.version, info.protocol_version)


def _start_every(manager: Manager, ctx: _Context) -> list[str]:
    """Start every enabled project server of the config; any failure is exit 3."""
    path, configs = ctx.configs()
    if path is None:
        raise CLIError("no SERVER given and no config file found (give SERVER, --config, "
                       "$MCPSYNC_CONFIG, or create ./.mcp.json)", EXIT_USAGE)
    wanted = [c for c in configs if not c.disabled and c.scope in ("", "project")]
    if not wanted:
        raise CLIError(f"config file {path!r} has no enabled project servers", EXIT_USAGE)
    for config in wanted:
        _check_config(config)
    _log.debug("starting %d servers of %s", len(wanted), path)
    results = manager.start_all()
    failed = {sid: exc for sid, exc in results.items() if exc is not None}
    if failed:
        parts = [f"server {sid!r}: {_describe(exc)}" for sid, exc in sorted(failed.items())]
        raise CLIError(f"{len(failed)} of {len(results)} servers failed to start: "
                       + "; ".join(parts), EXIT_CONNECT)
    return sorted(results)


def _stored_login(config: ServerConfig) -> Any:
    """An ``mcpauth.OAuthProvider`` for a URL server that ``mcpsync login`` logged in to.

    Only when mcpauth is installed, the token file exists and it records a login for this
    server (its resource index entry): otherwise ``None``, and nothing is created or
    discovered. The provider is non-interactive, so an expired login that cannot be
    refreshed ends in exit 4 (``LoginRequired``) rather than a browser window.
    """
    if config.url is None or any(k.lower() == "authorization" for k in config.headers):
        return None
    import os

    try:
        from mcpauth import FileTokenStore, OAuthProvider
        from mcpauth.discovery import canonical_resource
        from mcpauth.tokens import default_token_path, resource_index_key
    except ImportError as exc:
        # mcpauth ships with mcpsync, so this means something shadows it (e.g. a directory
        # named mcpauth in the current directory under `python -m`): say so, not silently.
        _log.warning("stored logins are not used: mcpauth cannot be imported (%s)", exc)
        return None
    if not os.path.exists(default_token_path()):
        return None
    store = FileTokenStore()
    if store.get(resource_index_key(canonical_resource(config.url))) is None:
        return None
    _log.debug("using the stored login for %s (%s)", config.url, store.path)
    return OAuthProvider(config.url, store=store, interactive=False)


def _log_notification(note: Any) -> None:
    """``--verbose``: the server's notifications while we wait (its log messages are logged
    by the client already, under ``mcpsync.server.<name>``)."""
    if note.method != "notifications/message":
        _log.debug("server %r sent %s %s", note.server_id, note.method,
                   json.dumps(note.params, ensure_ascii=False))


_PROBE_TIMEOUT = 5.0   # the client's default era probe


def _new_manager(ctx: _Context, configs: Sequence[ServerConfig] = (),
                 auth: Any = None) -> Manager:
    from mcpsync.manager import Manager

    options: dict[str, Any] = {}
    if auth is not None:
        options["auth"] = auth
    if ctx.timeout is not None and ctx.timeout < _PROBE_TIMEOUT:
        # `--timeout 1` should not wait 5 s for a silent server's era probe first.
        options["probe_timeout"] = ctx.timeout
    verbose = _log.isEnabledFor(logging.DEBUG)
    if verbose:
        options["log_level"] = "debug"   # ask every server for its log messages too
    manager = Manager(configs=configs, connect_options=options)
    if verbose:
        manager.set_notification_handler(_log_notification)
    return manager


@contextlib.contextmanager
def _running(ctx: _Context, server: str | None) -> Iterator[tuple[Manager, list[str]]]:
    """The started server(s) and their ids: SERVER alone, or every enabled server of the
    config. The Manager is closed on the way out, whatever happened."""
    if server is None:
        _path, configs = ctx.configs()
        manager = _new_manager(ctx, [ctx.with_timeout(c) for c in configs])
        try:
            yield manager, _start_every(manager, ctx)
        finally:
            manager.close()
        return
    config, how = _resolve_server(ctx, server)
    _check_config(config)
    manager = _new_manager(ctx, auth=_stored_login(config))
    try:
        yield manager, [_start_one(manager, ctx, server, config, how)]
    finally:
        manager.close()


# --- output -----------------------------------------------------------------------------

def _cell(value: Any, *, first_line: bool = False) -> str:
    if value is None:
        return ""
    text = str(value).strip()
    if first_line:
        return text.splitlines()[0].strip() if text else ""
    return " ".join(text.split())


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell, two spaces apart; the last one not padded."""
    all_rows = [list(header), *[list(r) for r in rows]]
    widths = [max(len(r[i]) for r in all_rows) for i in range(len(header) - 1)]
    lines = []
    for row in all_rows:
        cells = [c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)] + [row[-1]]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines) + "\n"


def _json_doc(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def _with_server(server_id: str, raw: Mapping[str, Any]) -> dict[str, Any]:
    """A listed item as sent, with the ``server`` key added (first)."""
    out: dict[str, Any] = {"server": server_id}
    out.update((k, v) for k, v in raw.items() if k != "server")
    return out


def _blob_size(blob: str) -> int:
    import base64
    import binascii

    try:
        return len(base64.b64decode(blob))
    except (binascii.Error, ValueError):
        return len(blob) * 3 // 4


def _render_block(block: Any) -> str:
    """A non-text content block as one line (``<N bytes of MIME>`` for binary data)."""
    from mcpsync.types import AudioContent, EmbeddedResource, ImageContent, ResourceLink

    if isinstance(block, (ImageContent, AudioContent)):
        return f"<{_blob_size(block.data)} bytes of {block.mime_type}>"
    if isinstance(block, EmbeddedResource):
        res = block.resource
        if res.text is not None:
            return res.text
        return f"<{_blob_size(res.blob or '')} bytes of {res.mime_type or 'unknown type'}>"
    if isinstance(block, ResourceLink):
        return f"<resource {block.uri}>"
    return json.dumps(getattr(block, "raw", None), ensure_ascii=False)


def _render_call(result: CallToolResult) -> str:
    """The text content; else the structured JSON; else the other blocks, one per line."""
    from mcpsync.types import TextContent

    texts = [b.text for b in result.content if isinstance(b, TextContent)]
    if texts:
        body = "\n".join(texts)
    elif result.structured is not None:
        body = json.dumps(result.structured, indent=2, ensure_ascii=False)
    else:
        body = "\n".join(_render_block(b) for b in result.content)
    return body + "\n" if body and not body.endswith("\n") else body


def _render_read(result: ReadResourceResult) -> str:
    parts = []
    for item in result.contents:
        if item.text is not None:
            parts.append(item.text)
        else:
            mime = item.mime_type or "unknown type"
            parts.append(f"<{_blob_size(item.blob or '')} bytes of {mime}>")
    body = "\n".join(parts)
    return body + "\n" if body and not body.endswith("\n") else body


# --- commands ---------------------------------------------------------------------------

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


def _cmd_login(args: argparse.Namespace, ctx: _Context) -> _Outcome:
    url: str = args.url
    if not url.startswith(("http://", "https://")):
        raise CLIError(f"login needs an http:// or https:// URL, got {url!r}", EXIT_USAGE)
    try:
        from mcpauth import FileTokenStore, OAuthProvider
    except ImportError as exc:
        raise CLIError(f"login needs mcpauth, which is not available: {exc}",
                       EXIT_USAGE) from exc
    scopes = [s for group in (args.scope or []) for s in group.split()]

    def show_device_code(code: Any) -> None:
        where = getattr(code, "verification_uri_complete", None) \
            or getattr(code, "verification_uri", "")
        print(f"To log in, open {where} and enter the code {getattr(code, 'user_code', '')}",
              file=sys.stderr, flush=True)

    store = FileTokenStore()
    options: dict[str, Any] = {"store": store, "interactive": True,
                               "grant": "device_code" if args.device else "authorization_code"}
    if scopes:
        options["scopes"] = scopes
    if args.device:
        options["device_code_handler"] = show_device_code
    token = OAuthProvider(url, **options).login()
    scope = getattr(token, "scope", None)
    if ctx.json:
        return _Outcome(_json_doc({"url": url, "token_store": store.path, "scope": scope}))
    return _Outcome(f"logged in to {url}; the token is stored in {store.path}\n")


_COMMANDS: dict[str, Callable[[argparse.Namespace, _Context], _Outcome]] = {
    "tools": _cmd_list,
    "resources": _cmd_list,
    "prompts": _cmd_list,
    "call": _cmd_call,
    "read": _cmd_read,
    "login": _cmd_login,
}


# --- entry point ------------------------------------------------------------------------

_LOGGERS = ("mcpsync", "mcpauth")


def _parse(argv: list[str]) -> argparse.Namespace:
    """Parse the command line; ``key=value`` items may come after options too.

    argparse fills ``call``'s ``nargs="*"`` items once, before the first option, so in
    ``call S T --json a=1`` the ``a=1`` comes back unrecognised: it is an item all the same.
    """
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command == "call" and not any(e.startswith("-") for e in extra):
        args.items = [*args.items, *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


# Loggers whose warnings reach stderr without --verbose: the config loader (unknown keys) and
# the CLI itself (a stored login that cannot be used).
_QUIET_LOGGERS = ("mcpsync.config", "mcpsync.cli")


def _logging_handler(verbose: bool) -> logging.Handler:
    """Log output on stderr: ``--verbose`` puts the ``mcpsync`` (and ``mcpauth``) loggers at
    DEBUG; otherwise only the warnings of the config loader (an unknown key in a file) and of
    the CLI show, as
    ``mcpsync: warning: ...``, since nothing else in a one-shot command needs a person."""
    handler = logging.StreamHandler(sys.stderr)
    if verbose:
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        for name in _LOGGERS:
            logger = logging.getLogger(name)
            logger.addHandler(handler)
            logger.setLevel(logging.DEBUG)
    else:
        handler.setFormatter(logging.Formatter("mcpsync: warning: %(message)s"))
        handler.setLevel(logging.WARNING)
        for name in _QUIET_LOGGERS:
            logging.getLogger(name).addHandler(handler)
    return handler


def _drop_handler(handler: logging.Handler) -> None:
    for name in (*_LOGGERS, *_QUIET_LOGGERS):
        logger = logging.getLogger(name)
        if handler in logger.handlers:
            logger.removeHandler(handler)
            if name in _LOGGERS:
                logger.setLevel(logging.NOTSET)


def _error(message: str) -> None:
    try:
        sys.stderr.write(f"mcpsync: error: {message}\n")
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
    ctx = _Context(config=args.config, timeout=args.timeout, json=bool(args.json))
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
        _error(outcome.error)
    return outcome.code
