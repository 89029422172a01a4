"""Exit codes and the exception-to-exit-code mapping of the ``mcpsync`` command (docs/cli.md,
"Exit codes").

One place decides what number a failure ends the command with, so every command and the
server start-up agree; the messages are collapsed onto one line here too, since the output
discipline allows exactly one ``mcpsync: error: ...`` line on stderr. The public names here
are exported by :mod:`mcpsync.cli`, whose ``__all__`` lists them.
"""

from __future__ import annotations

import importlib
import sys

EXIT_OK = 0
EXIT_FAILED = 1          # isError, or a JSON-RPC error answer
EXIT_USAGE = 2           # bad command line or config
EXIT_CONNECT = 3         # could not start or connect, or the server died
EXIT_AUTH = 4            # unauthorized
EXIT_TIMEOUT = 5         # no answer in time
EXIT_INTERRUPTED = 130   # Ctrl-C


class CLIError(Exception):
    """An error already worded for the user, with the exit code it ends the command with."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def _is_auth_error(exc: BaseException) -> bool:
    """An ``mcpauth.AuthError``, checked without importing mcpauth (if it raised one, it is
    already imported; if it is not installed, nothing can be one)."""
    mod = sys.modules.get("mcpauth.errors")
    auth_error = getattr(mod, "AuthError", None) if mod is not None else None
    return isinstance(auth_error, type) and isinstance(exc, auth_error)


def exit_code_for(exc: BaseException) -> int:
    """The exit code of an exception (docs/cli.md, "Exit codes"): 4 auth, 5 timeout, 3 connection,
    2 config, 130 Ctrl-C, else 1 (a JSON-RPC error answer and every other failed request)."""
    importlib.import_module("mcpsync.errors")
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
    """The one-line message, with a pointer to the command that helps where there is one
    (a 401: ``mcpsync login URL``)."""
    text = _one_line(str(exc)) or type(exc).__name__
    importlib.import_module("mcpsync.errors")
    from mcpsync import errors

    if isinstance(exc, errors.Unauthorized) and exc.url and "mcpsync login" not in text:
        import shlex
        from urllib.parse import urlsplit

        parts = urlsplit(exc.url)   # the endpoint without query or fragment (no secrets)
        url = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"
        text += f" (log in with 'mcpsync login {shlex.quote(url)}')"
    return text
