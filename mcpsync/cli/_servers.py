"""SERVER on the ``mcpsync`` command line turned into running servers (docs/cli.md, "SERVER").

Resolution (a config id, an http(s) URL or a command string), the checks that need no spawn,
starting through a :class:`~mcpsync.manager.Manager` and closing it again: the part every
command shares, so each command only says what to ask the started servers. The Manager is
imported inside the functions, which keeps ``mcpsync --help`` light.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import shlex
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from mcpsync.cli._context import _Context
from mcpsync.cli._errors import (
    EXIT_AUTH,
    EXIT_CONNECT,
    EXIT_INTERRUPTED,
    EXIT_TIMEOUT,
    EXIT_USAGE,
    CLIError,
    _describe,
    exit_code_for,
)
from mcpsync.cli._login import _stored_login
from mcpsync.cli._parser import DEFAULT_CLI_TIMEOUT

if TYPE_CHECKING:
    from mcpsync.config import ServerConfig
    from mcpsync.manager import Manager

# The CLI's modules all log as "mcpsync.cli": --verbose and the quiet warning filter
# (cli/_logging.py) are set up for that one name.
_log = logging.getLogger("mcpsync.cli")


def _resolve_server(ctx: _Context, server: str) -> tuple[ServerConfig, str]:
    """SERVER as a config: a config id, else an http(s) URL, else a command string.

    Returns the config and how it was found (``"id"``, ``"url"`` or ``"command"``).
    """
    importlib.import_module("mcpsync.config")
    from mcpsync.config import ServerConfig
    importlib.import_module("mcpsync.errors")
    from mcpsync.errors import ConfigError

    path, configs = ctx.configs()
    for config in configs:
        if config.id == server:
            if config.scope == "thread":
                import dataclasses

                # The CLI has no threads; run it as a project server for this one command.
                config = dataclasses.replace(config, scope="")
            _log.debug("SERVER %r is a server id in %s", server, path)
            ctx.require_trust()
            return ctx.with_timeout(config), "id"
    if configs and path is not None:
        _refuse_a_near_id(path, [c.id for c in configs], server)
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


def _refuse_a_near_id(path: str, ids: Sequence[str], server: str) -> None:
    """A single word close to an id of the loaded config, and no program of that name on
    ``PATH``: a typo of the id (exit 2, "did you mean"), not a command to try starting."""
    import shutil

    importlib.import_module("mcpsync.client._arguments")
    from mcpsync.client._arguments import did_you_mean

    if server.startswith(("http://", "https://")) or not server or "/" in server \
            or any(ch.isspace() for ch in server) or shutil.which(server) is not None:
        return
    hint = did_you_mean(server, ids)
    if hint:
        shown = ", ".join(ids[:10]) + (", ..." if len(ids) > 10 else "")
        raise CLIError(f"{server!r} is not a server id in {path}; did you mean {hint[0]!r}? "
                       f"(its servers: {shown})", EXIT_USAGE)


def _check_config(config: ServerConfig) -> None:
    """The config checks that need no spawn (a ``secret_ref`` the CLI cannot resolve): exit
    2 here rather than a failed start (exit 3)."""
    importlib.import_module("mcpsync.errors")
    from mcpsync.errors import ConfigError

    try:
        importlib.import_module("mcpsync.secrets")
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
        if how == "id" and f"server {config.id!r}" not in str(failure):
            failure = CLIError(f"server {config.id!r}: {failure}", failure.code)
        if how == "command" and configs and len(config.argv) == 1:
            # Most likely a mistyped id rather than a program name: say both.
            importlib.import_module("mcpsync.client._arguments")
            from mcpsync.client._arguments import did_you_mean

            ids = [c.id for c in configs]
            hint = did_you_mean(server, ids)
            guess = f"; did you mean {hint[0]!r}?" if hint else ""
            failure = CLIError(f"{server!r} is not a server id in {path}{guess} (its servers: "
                               f"{', '.join(ids)}); as a command: {failure}", failure.code)
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
    """Start every enabled project server of the config; return the ids of those that
    started. Each one that did not is recorded in ``ctx.failures`` (one line each), and the
    command ends with exit 3 after printing what the others answered."""
    path, configs = ctx.configs()
    if path is None:
        raise CLIError("no SERVER given and no config file found (give SERVER, --config, "
                       "$MCPSYNC_CONFIG, or create ./.mcp.json)", EXIT_USAGE)
    wanted = [c for c in configs if not c.disabled and c.scope in ("", "project")]
    if not wanted:
        raise CLIError(f"config file {path!r} has no enabled project servers", EXIT_USAGE)
    ctx.require_trust()
    for config in wanted:
        _check_config(config)
    _log.debug("starting %d servers of %s", len(wanted), path)
    results = manager.start_all()
    failed = {sid: exc for sid, exc in results.items() if exc is not None}
    for sid, exc in sorted(failed.items()):
        ctx.failures.append(f"server {sid!r} did not start: {_describe(exc)}")
    return sorted(sid for sid in results if sid not in failed)


def _log_notification(note: Any) -> None:
    """``--verbose``: the server's notifications while we wait (its log messages are logged
    by the client already, under ``mcpsync.server.<name>``)."""
    if note.method != "notifications/message":
        _log.debug("server %r sent %s %s", note.server_id, note.method,
                   json.dumps(note.params, ensure_ascii=False))


_PROBE_TIMEOUT = 5.0   # the client's default era probe


def _new_manager(ctx: _Context, configs: Sequence[ServerConfig] = ()) -> Manager:
    importlib.import_module("mcpsync.manager")
    from mcpsync.manager import Manager

    # Credentials are per server (ServerConfig.auth), never connect options: one server's
    # token must not reach another.
    options: dict[str, Any] = {}
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
        ctx.all_servers = True
        manager = _new_manager(ctx, [ctx.with_timeout(c) for c in configs])
        try:
            yield manager, _start_every(manager, ctx)
        finally:
            manager.close()
        return
    config, how = _resolve_server(ctx, server)
    _check_config(config)
    stored = _stored_login(config)
    if stored is not None:
        import dataclasses

        config = dataclasses.replace(config, auth=stored)
    manager = _new_manager(ctx)
    try:
        yield manager, [_start_one(manager, ctx, server, config, how)]
    finally:
        manager.close()
