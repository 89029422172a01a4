"""``mcpsync gateway``: run the MCP gateway over this process's stdin and stdout.

An MCP host starts this command as its server. Everything the gateway logs goes to stderr;
stdout carries MCP frames only (see ``docs/gateway.md``).
"""

from __future__ import annotations

import argparse
import importlib
from typing import TYPE_CHECKING, Any

from mcpsync.cli._context import _Context
from mcpsync.cli._errors import EXIT_USAGE, CLIError
from mcpsync.cli._output import _Outcome

if TYPE_CHECKING:
    from mcpsync.gateway._secretdir import DirectorySecrets

__all__ = ["_cmd_gateway", "guard_options"]


def guard_options(path: str) -> dict[str, Any]:
    """The policy, approver and hold time the config file's ``mcpsync`` key asks for."""
    importlib.import_module("mcpsync.gateway._guard._hooks")
    from mcpsync.gateway._guard._hooks import guard_options as read_options

    return read_options(path)


def _cmd_gateway(args: argparse.Namespace, ctx: _Context) -> _Outcome:
    importlib.import_module("mcpsync.gateway")
    from mcpsync.gateway import Gateway

    if not ctx.config:
        raise CLIError("mcpsync gateway needs --config FILE: the mcpServers config of the "
                       "servers to put behind it", EXIT_USAGE)
    inspector = None
    if args.log:
        importlib.import_module("mcpsync.gateway._inspector")
        from mcpsync.gateway._inspector import Inspector
        try:
            inspector = Inspector(args.log, detail=args.log_detail, helper=True)
        except OSError as exc:
            raise CLIError(f"cannot write the gateway log {args.log!r}: {exc.strerror or exc} "
                           "(choose a file in a directory you own)", EXIT_USAGE) from None
    merge = {} if args.merge_timeout is None else {"merge_timeout": args.merge_timeout}
    if args.merge_timeout is not None and not 0 < args.merge_timeout < float("inf"):
        raise CLIError(f"--merge-timeout must be a number of seconds above 0 (for example 5), "
                       f"not {args.merge_timeout:g}", EXIT_USAGE)
    try:
        options = guard_options(ctx.config)
        if args.http:
            _check_approver_port(options.get("approver"), args.http)
        gateway = Gateway(ctx.config, inspector=inspector, secret_resolver=_secrets(args),
                          bridge=args.bridge, **merge, **options)
    except BaseException:
        if inspector is not None:
            inspector.close()
        raise
    with gateway:
        if args.http:
            importlib.import_module("mcpsync.cli._gateway_http")
            from mcpsync.cli._gateway_http import serve_gateway_http
            serve_gateway_http(gateway, args)
        else:
            gateway.serve_stdio()
    return _Outcome("")


def _secrets(args: argparse.Namespace) -> DirectorySecrets | None:
    """``--secrets-dir``: the resolver of the entries' ``secret_ref`` (None without it)."""
    if not args.secrets_dir:
        return None
    importlib.import_module("mcpsync.gateway._secretdir")
    from mcpsync.gateway._secretdir import DirectorySecrets
    return DirectorySecrets(args.secrets_dir)


def _check_approver_port(approver: object, address: str) -> None:
    """The web approver's page must never share the MCP port: an agent that can reach the
    MCP endpoint must not be able to approve its own calls."""
    importlib.import_module("mcpsync.cli._gateway_http")
    from mcpsync.cli._gateway_http import parse_address
    importlib.import_module("mcpsync.gateway._guard._approvers._web")
    from mcpsync.gateway._guard._approvers._web import WebApprover

    _, port = parse_address(address)
    if isinstance(approver, WebApprover) and port != 0 and approver.port == port:
        raise CLIError(f"mcpsync gateway --http {address}: the config's web approver "
                       f"(mcpsync.approval.approver.web.port) asks for port {port} too; give "
                       "the approval page a port of its own (0 picks a free one)", EXIT_USAGE)
