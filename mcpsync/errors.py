"""The exception hierarchy of mcpsync.

Every error the library raises is an :class:`MCPError`. Errors are plain exceptions: never an
``ExceptionGroup``, never a bare ``Exception``. They pickle with their attributes, because
Celery and ``multiprocessing`` carry exceptions across processes.

Each error carries ``server`` (the display name of the server, when known) and ``method``
(the MCP method being called, when known). The message starts with what was being done, for
example ``calling tool 'add' on server 'demo': ...``, and says what to try where there is
something to try.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any

from mcpsync import _codes

__all__ = [
    "ApprovalRejected",
    "AuthHookError",
    "BudgetExceeded",
    "CallbackWarning",
    "Cancelled",
    "CapabilityNotSupported",
    "ClosedError",
    "ConfigError",
    "ConnectFailed",
    "ConnectionLost",
    "HeaderMismatch",
    "InputRoundsExceeded",
    "InvalidArguments",
    "MCPError",
    "MissingCapability",
    "OutputValidationError",
    "PolicyDenied",
    "PolicyRefused",
    "ProtocolError",
    "Rejected",
    "RemoteError",
    "RequestTimeout",
    "ResourceNotFound",
    "SecretError",
    "ServerExited",
    "SessionExpired",
    "SkillVerificationError",
    "TooManyPages",
    "ToolError",
    "TransportError",
    "URLElicitationRequired",
    "Unauthorized",
    "UnknownServer",
    "UnknownTool",
    "UnsupportedInThisEra",
    "UnsupportedProtocolVersion",
    "UsedAfterFork",
]


def _rebuild(cls: type[MCPError], args: tuple[Any, ...], state: dict[str, Any]) -> MCPError:
    """Recreate an error from its pickled parts without calling ``__init__``.

    Subclasses have different constructor signatures; restoring ``args`` and ``__dict__``
    directly keeps every attribute without each class writing its own ``__reduce__``.
    """
    obj = cls.__new__(cls, *args)
    obj.args = args
    obj.__dict__.update(state)
    return obj


class MCPError(Exception):
    """Root of every mcpsync error.

    ``server`` and ``method`` say where it happened, when known.
    """

    def __init__(self, message: str = "", *, server: str | None = None,
                 method: str | None = None) -> None:
        super().__init__(message)
        self.server = server
        self.method = method

    @property
    def message(self) -> str:
        """The message text, without the class name."""
        return str(self.args[0]) if self.args else ""

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))


class ProtocolError(MCPError):
    """The peer broke the protocol (an impossible answer, an unknown ``resultType``, ...).

    The client is usually still usable; the one request that met the error failed.
    """


class RemoteError(MCPError):
    """A JSON-RPC error answered by the peer: ``code``, ``message`` (``remote_message``) and
    ``data``.

    The connection is fine; only this request failed.
    """

    def __init__(self, message: str = "", *, code: int = 0, remote_message: str = "",
                 data: Any = None, server: str | None = None,
                 method: str | None = None) -> None:
        super().__init__(message, server=server, method=method)
        self.code = code
        self.remote_message = remote_message
        self.data = data


class ResourceNotFound(RemoteError):
    """The server has no resource at that URI (-32002, or -32602 on ``resources/read``)."""


class HeaderMismatch(RemoteError):
    """The server says an HTTP header disagrees with the body (-32020)."""


class URLElicitationRequired(RemoteError):
    """The server needs the user to visit a URL first (-32042); ``elicitations`` lists them."""

    @property
    def elicitations(self) -> list[Any]:
        data = self.data if isinstance(self.data, dict) else {}
        items = data.get("elicitations")
        return list(items) if isinstance(items, list) else []


class MissingCapability(RemoteError):
    """The server needs a client capability this client did not declare (-32021).

    ``required_capabilities`` names them; pass the matching callback to ``connect()``.
    """

    @property
    def required_capabilities(self) -> Any:
        data = self.data if isinstance(self.data, dict) else {}
        return data.get("requiredCapabilities")


class ConnectionLost(MCPError, ConnectionError):
    """The connection to the server is gone.

    ``maybe_executed`` is true when the request had been sent, so the server may have acted
    on it; such calls are never retried automatically.
    """

    def __init__(self, message: str = "", *, maybe_executed: bool = False,
                 server: str | None = None, method: str | None = None) -> None:
        super().__init__(message, server=server, method=method)
        self.maybe_executed = maybe_executed


class ServerExited(ConnectionLost):
    """The server process exited: ``exit_code`` (negative for a signal) and ``stderr_tail``.

    A legacy-era client is unusable afterwards (the session state is gone); a modern stdio
    client restarts the server on the next call unless ``restart=None``.
    """

    def __init__(self, message: str = "", *, exit_code: int | None = None,
                 stderr_tail: str = "", maybe_executed: bool = False,
                 server: str | None = None, method: str | None = None) -> None:
        super().__init__(message, maybe_executed=maybe_executed, server=server, method=method)
        self.exit_code = exit_code
        self.stderr_tail = stderr_tail


class ConnectFailed(ConnectionLost):
    """No connection to the server's URL could be made (refused, unresolvable host, connect
    timeout): nothing was sent, so ``maybe_executed`` is False. ``url`` is the URL (without
    credentials). A ``ConnectionLost`` too, so code that handles a lost connection handles
    this as well; check that the server runs at that URL.
    """

    def __init__(self, message: str = "", *, url: str | None = None,
                 server: str | None = None, method: str | None = None) -> None:
        super().__init__(message, maybe_executed=False, server=server, method=method)
        self.url = url


class SessionExpired(ConnectionLost):
    """The HTTP session expired and could not be restored."""


class RequestTimeout(MCPError, TimeoutError):
    """No answer within the timeout. The request was cancelled; the client stays usable."""

    def __init__(self, message: str = "", *, timeout: float | None = None,
                 server: str | None = None, method: str | None = None) -> None:
        super().__init__(message, server=server, method=method)
        self.timeout = timeout


class Cancelled(MCPError, concurrent.futures.CancelledError):
    """The request was cancelled by the caller (``Future.cancel()`` or Ctrl-C).

    The client stays usable.
    """


class UnsupportedProtocolVersion(MCPError):
    """The server speaks no protocol revision this client speaks.

    ``requested`` is what we asked for, ``supported`` what the server offered. The client is
    closed.
    """

    def __init__(self, message: str = "", *, requested: str | None = None,
                 supported: list[str] | None = None, server: str | None = None,
                 method: str | None = None) -> None:
        super().__init__(message, server=server, method=method)
        self.requested = requested
        self.supported = list(supported or [])


class UnsupportedInThisEra(MCPError):
    """The operation does not exist in the negotiated protocol era (e.g. ``ping`` in modern)."""


class CapabilityNotSupported(MCPError):
    """The server did not advertise the capability this call needs; nothing was sent."""


class TransportError(MCPError):
    """The transport failed in a way that is neither a lost connection nor a remote error
    (an HTTP status the protocol does not explain, a malformed stream).

    ``status`` is the HTTP status when there was one; ``url`` the URL (without credentials).
    """

    def __init__(self, message: str = "", *, status: int | None = None, url: str | None = None,
                 server: str | None = None, method: str | None = None) -> None:
        super().__init__(message, server=server, method=method)
        self.status = status
        self.url = url


class Unauthorized(MCPError):
    """The server refused our credentials after the one retry; ``www_authenticate`` holds
    the challenge (never a token)."""

    def __init__(self, message: str = "", *, www_authenticate: str | None = None,
                 status: int | None = None, url: str | None = None, server: str | None = None,
                 method: str | None = None) -> None:
        super().__init__(message, server=server, method=method)
        self.www_authenticate = www_authenticate
        self.status = status
        self.url = url


class AuthHookError(MCPError):
    """An auth hook raised; the original error is the ``__cause__``."""


class ToolError(MCPError):
    """A tool answered ``isError: true`` and the caller asked for ``raise_on_error=True``.

    ``result`` is the :class:`~mcpsync.types.CallToolResult`. The client stays usable.
    """

    def __init__(self, message: str = "", *, result: Any = None, server: str | None = None,
                 method: str | None = None) -> None:
        super().__init__(message, server=server, method=method)
        self.result = result


class OutputValidationError(MCPError):
    """A tool's structured result does not match its advertised ``outputSchema``.

    ``result`` is the unvalidated result. Pass ``validate_output=False`` to skip the check.
    """

    def __init__(self, message: str = "", *, result: Any = None, server: str | None = None,
                 method: str | None = None) -> None:
        super().__init__(message, server=server, method=method)
        self.result = result


class SkillVerificationError(MCPError):
    """A skill's file did not match its entry (size, digest, frontmatter), or the entry does
    not list it: the content is not used. ``uri`` names the file at fault."""

    def __init__(self, message: str = "", *, uri: str = "", server: str | None = None,
                 method: str | None = None) -> None:
        super().__init__(message, server=server, method=method)
        self.uri = uri


class TooManyPages(MCPError):
    """A list did not end within ``max_pages`` pages; raise ``max_pages`` if it is genuine."""


class InputRoundsExceeded(MCPError):
    """The server kept asking for input beyond ``max_input_rounds`` rounds."""


class ConfigError(MCPError, ValueError):
    """A configuration is invalid: the message names the field (and the file, if any)."""


class ClosedError(MCPError):
    """The client or manager is closed; open a new one."""


class Rejected(MCPError):
    """Raised by a sampling, elicitation or roots callback to decline the server's request.

    The server receives error -1 ("rejected by user"); the client stays usable.
    """


class CallbackWarning(RuntimeWarning):
    """A callback you gave mcpsync (progress, log, notification, sampling, elicitation,
    roots, a subscription) raised, and no logging handler would have shown it.

    Issued once per client and callback, naming the callback, the server and the exception's
    type and message. With logging configured (``logging.basicConfig()``) the failures are
    logged instead, each with its traceback. Not an ``MCPError``: nothing is raised to you.
    """


class UsedAfterFork(MCPError):
    """A client or manager created in a parent process was used in a forked child.

    Create a new one in the child (for example in a post-fork hook).
    """


class UnknownServer(MCPError, KeyError):
    """No server with that id is started in the Manager (``KeyError`` too, for ``except``)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return self.message


class UnknownTool(MCPError, KeyError):
    """The server does not list a tool of that name (``KeyError`` too, for ``except``).

    Raised before anything is sent, when the client has a tool list to judge by: the list was
    fetched again once, in case the server added the tool since. ``name`` is the name asked
    for; ``suggestions`` the listed names closest to it (also in the message, "did you
    mean"). ``validate_input=False`` sends such calls anyway.
    """

    def __init__(self, message: str = "", *, name: str = "",
                 suggestions: tuple[str, ...] = (), server: str | None = None,
                 method: str | None = None) -> None:
        super().__init__(message, server=server, method=method)
        self.name = name
        self.suggestions = suggestions

    def __str__(self) -> str:  # KeyError would quote the message
        return self.message


class InvalidArguments(MCPError, TypeError):
    """A tool call's arguments cannot be right: a required one is missing, or (through a
    tool proxy) one the tool does not take was given. ``TypeError`` too, as Python raises
    for a bad call. Raised before anything is sent; ``missing`` and ``unexpected`` name the
    arguments."""

    def __init__(self, message: str = "", *, missing: tuple[str, ...] = (),
                 unexpected: tuple[str, ...] = (), server: str | None = None,
                 method: str | None = None) -> None:
        super().__init__(message, server=server, method=method)
        self.missing = missing
        self.unexpected = unexpected


class SecretError(MCPError):
    """A secret could not be resolved or written for a server's spawn.

    The message names the server and the secret reference, never a secret value.
    """

    def __init__(self, message: str = "", *, ref: str = "", server: str | None = None,
                 method: str | None = None) -> None:
        super().__init__(message, server=server, method=method)
        self.ref = ref


class PolicyRefused(MCPError):
    """A tool call refused by the Manager's policy (or, for a ``gateway=True`` server, by
    the gateway).

    ``local`` is True when mcpsync refused it before sending anything, False when a gateway
    server answered with the code. ``gateway_code`` is the gateway's code (-32010..-32012), kept
    for hosts that forward refusals; ``tool`` and ``rule`` say what was refused and why.
    """

    gateway_code = 0

    def __init__(self, message: str = "", *, tool: str = "", rule: str = "",
                 local: bool = True, server: str | None = None,
                 method: str | None = None) -> None:
        super().__init__(message, server=server, method=method)
        self.tool = tool
        self.rule = rule
        self.local = local


class PolicyDenied(PolicyRefused):
    """The policy's ``allow`` rule refused the call (gateway code -32010)."""

    gateway_code = _codes.DENIED_BY_POLICY


class ApprovalRejected(PolicyRefused):
    """The ``approve`` callback (a human in the loop) said no (gateway code -32011)."""

    gateway_code = _codes.APPROVAL_REJECTED


class BudgetExceeded(PolicyRefused):
    """A budget of the server, tool or caller is spent (gateway code -32012).

    ``retry_after``: seconds until the budget's window resets, or None when it does not
    reset by itself (or the gateway did not say).
    """

    gateway_code = _codes.BUDGET_EXCEEDED

    def __init__(self, message: str = "", *, tool: str = "", rule: str = "",
                 local: bool = True, server: str | None = None, method: str | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(message, tool=tool, rule=rule, local=local, server=server,
                         method=method)
        self.retry_after = retry_after
