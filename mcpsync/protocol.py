"""Protocol decisions as pure functions: versions, eras, ``_meta``, capabilities, errors.

Nothing here does I/O, starts a thread or reads a clock. The session engine and the client
ask these functions what to do with an answer (h11's way: the protocol's rules in one
place, every branch a unit test), then do it.

Theory of operation for era detection on stdio (docs/architecture.md, "Era detection"):

1. Send ``server/discover`` with :func:`build_meta` for :data:`LATEST_MODERN`.
2. A result goes to :func:`classify_discover_result`: ``("modern", version)`` when it is a
   real ``DiscoverResult`` naming a modern version we speak, else ``("legacy", None)``.
3. An error goes to :func:`classify_discover_error`: ``("retry", version)`` for a -32022
   naming a modern version we speak (probe once more with it), else ``("legacy", None)``.
   The fallback is deliberately not keyed to one code: legacy servers answer unknown
   pre-``initialize`` methods with whatever code they like.
4. Legacy: ``initialize`` with :data:`LATEST_LEGACY`; the answered version goes through
   :func:`choose_legacy_version`; an ``initialize`` error with ``data.supported`` goes
   through :func:`retry_version_from_error` (``era="legacy"``) for one retry.
"""

from __future__ import annotations

import logging
from collections.abc import Container, Mapping
from typing import Any, Final, Literal

from mcpsync._codes import (
    HEADER_MISMATCH as _HEADER_MISMATCH,
    INTERNAL_ERROR as _INTERNAL_ERROR,
    INVALID_PARAMS as _INVALID_PARAMS,
    METHOD_NOT_FOUND as _METHOD_NOT_FOUND,
    MISSING_CLIENT_CAPABILITY as _MISSING_CLIENT_CAPABILITY,
    RESOURCE_NOT_FOUND as _RESOURCE_NOT_FOUND,
    UNSUPPORTED_PROTOCOL_VERSION as _UNSUPPORTED_PROTOCOL_VERSION,
    URL_ELICITATION_REQUIRED as _URL_ELICITATION_REQUIRED,
    USER_REJECTED as _USER_REJECTED,
)
from mcpsync.errors import (
    HeaderMismatch,
    MissingCapability,
    ProtocolError,
    RemoteError,
    ResourceNotFound,
    UnsupportedProtocolVersion,
    URLElicitationRequired,
)
from mcpsync.types import ServerInfo

__all__ = [
    "LATEST_LEGACY",
    "LATEST_MODERN",
    "LEGACY_VERSIONS",
    "LOG_LEVELS",
    "META_CLIENT_CAPABILITIES",
    "META_CLIENT_INFO",
    "META_LOG_LEVEL",
    "META_PROTOCOL_VERSION",
    "META_SERVER_INFO",
    "META_SUBSCRIPTION_ID",
    "MODERN_VERSIONS",
    "SUPPORTED_VERSIONS",
    "build_meta",
    "choose_legacy_version",
    "classify_discover_error",
    "classify_discover_result",
    "client_capabilities",
    "describe_call",
    "is_modern",
    "log_level_to_logging",
    "remote_error",
    "result_type",
    "retry_version_from_error",
    "server_info_from_result",
]

# --- versions ---------------------------------------------------------------------------

LEGACY_VERSIONS: Final = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
"""Handshake-era revisions we speak, newest first."""
MODERN_VERSIONS: Final = ("2026-07-28",)
"""Stateless-era revisions we speak, newest first."""
SUPPORTED_VERSIONS: Final = MODERN_VERSIONS + LEGACY_VERSIONS
LATEST_LEGACY: Final = "2025-11-25"
LATEST_MODERN: Final = "2026-07-28"

META_PROTOCOL_VERSION: Final = "io.modelcontextprotocol/protocolVersion"
META_CLIENT_CAPABILITIES: Final = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO: Final = "io.modelcontextprotocol/clientInfo"
META_LOG_LEVEL: Final = "io.modelcontextprotocol/logLevel"
META_SERVER_INFO: Final = "io.modelcontextprotocol/serverInfo"
META_SUBSCRIPTION_ID: Final = "io.modelcontextprotocol/subscriptionId"

LOG_LEVELS: Final = ("debug", "info", "notice", "warning", "error", "critical", "alert",
                     "emergency")
"""RFC 5424 levels as MCP spells them, least severe first."""


Era = Literal["legacy", "modern"]
DiscoverVerdict = tuple[Literal["modern"], str] | tuple[Literal["legacy"], None]
DiscoverErrorVerdict = tuple[Literal["retry"], str] | tuple[Literal["legacy"], None]


def is_modern(version: str) -> bool:
    """True for a stateless-era revision (2026-07-28 and later).

    Dates compare correctly as strings, so an unknown future revision counts as modern.
    """
    return version >= "2026-07-28"


# --- logging ----------------------------------------------------------------------------

_LOG_LEVEL_MAP: Final = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "notice": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
    "alert": logging.CRITICAL,
    "emergency": logging.CRITICAL,
}


def log_level_to_logging(level: str) -> int:
    """Map an MCP log level to a :mod:`logging` level.

    ``notice`` has no stdlib twin and becomes INFO; ``alert`` and ``emergency`` become
    CRITICAL. A level the server invented (or a non-string) becomes INFO rather than
    being dropped: the message still reaches the user, at a neutral level.
    """
    if isinstance(level, str):
        return _LOG_LEVEL_MAP.get(level.lower(), logging.INFO)
    return logging.INFO


# --- requests: _meta and capabilities -----------------------------------------------------

def build_meta(version: str, capabilities: Mapping[str, Any],
               client_info: Mapping[str, Any] | None, log_level: str | None = None,
               progress_token: int | str | None = None,
               extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``_meta`` of a modern request.

    ``extra`` is the caller's own ``_meta``; its keys pass through, except that the
    protocol keys we set here win (a caller cannot accidentally send a second, conflicting
    protocol version). ``client_info=None`` leaves ``clientInfo`` out, as the spec allows.
    """
    meta: dict[str, Any] = dict(extra) if extra else {}
    meta[META_PROTOCOL_VERSION] = version
    meta[META_CLIENT_CAPABILITIES] = capabilities
    if client_info is not None:
        meta[META_CLIENT_INFO] = client_info
    if log_level is not None:
        meta[META_LOG_LEVEL] = log_level
    if progress_token is not None:
        meta["progressToken"] = progress_token
    return meta


def client_capabilities(*, sampling: bool = False, sampling_tools: bool = False,
                        elicitation: bool = False, elicitation_url: bool = False,
                        roots: bool = False, era: Era) -> dict[str, Any]:
    """The client capabilities to declare: only what has a callback behind it.

    A server may only use what we declare, so declaring a capability with nothing to
    answer it would invite requests we could only refuse. ``sampling_tools`` and
    ``elicitation_url`` refine ``sampling`` and ``elicitation`` and mean nothing alone.
    Roots differ by era: legacy announces ``listChanged`` (we send
    ``notifications/roots/list_changed``), modern's roots capability is ``{}``.
    """
    if era not in ("legacy", "modern"):
        raise ValueError(f"era must be 'legacy' or 'modern', got {era!r}")
    caps: dict[str, Any] = {}
    if sampling:
        caps["sampling"] = {"tools": {}} if sampling_tools else {}
    if elicitation:
        caps["elicitation"] = {"form": {}, "url": {}} if elicitation_url else {"form": {}}
    if roots:
        caps["roots"] = {"listChanged": True} if era == "legacy" else {}
    return caps


# --- era detection ----------------------------------------------------------------------

def _newest_shared(offered: object, ours: tuple[str, ...]) -> str | None:
    """The newest of ``ours`` that ``offered`` (a list from the peer) also names."""
    if not isinstance(offered, list):
        return None
    names = {v for v in offered if isinstance(v, str)}
    for version in ours:  # ours is newest first
        if version in names:
            return version
    return None


def classify_discover_result(result: Any) -> DiscoverVerdict:
    """Decide the era from a ``server/discover`` *result*.

    Modern only for a real ``DiscoverResult``: an object with a non-empty
    ``supportedVersions`` array of strings and a ``capabilities`` object, naming a modern
    version we speak (the newest shared one is returned). Anything else (the ``{}`` that
    conformance mocks answer to every method, a malformed result, a list of legacy
    versions only) means legacy.
    """
    if not isinstance(result, dict):
        return ("legacy", None)
    versions = result.get("supportedVersions")
    if (not isinstance(versions, list) or not versions
            or not all(isinstance(v, str) for v in versions)):
        return ("legacy", None)
    if not isinstance(result.get("capabilities"), dict):
        return ("legacy", None)
    chosen = _newest_shared(versions, MODERN_VERSIONS)
    if chosen is None:
        return ("legacy", None)
    return ("modern", chosen)


def classify_discover_error(code: Any, data: Any) -> DiscoverErrorVerdict:
    """Decide what a ``server/discover`` *error* means.

    -32022 whose ``data.supported`` names a modern version we speak: a modern server that
    wants another version, so probe once more with the newest shared one (even when it is
    the version we asked for: the server said so, and one retry is cheap). Every other
    error, -32601 included, means legacy.
    """
    if code != _UNSUPPORTED_PROTOCOL_VERSION:
        return ("legacy", None)
    supported = data.get("supported") if isinstance(data, dict) else None
    chosen = _newest_shared(supported, MODERN_VERSIONS)
    if chosen is None:
        return ("legacy", None)
    return ("retry", chosen)


def retry_version_from_error(data: Any, era: Era) -> str | None:
    """The version to retry with after a version error, or ``None`` to give up.

    Reads ``data.supported`` (the shape of both -32022 and the legacy -32602 example) and
    returns the newest version of that era we speak. Used once per failure: for a legacy
    ``initialize`` error and for a modern -32022 on an ordinary request.
    """
    if era not in ("legacy", "modern"):
        raise ValueError(f"era must be 'legacy' or 'modern', got {era!r}")
    supported = data.get("supported") if isinstance(data, dict) else None
    return _newest_shared(supported, LEGACY_VERSIONS if era == "legacy" else MODERN_VERSIONS)


def choose_legacy_version(answered: Any, *, requested: str = LATEST_LEGACY,
                          pinned: bool = False, server: str | None = None) -> str:
    """Accept the version a server answered to ``initialize``, or raise.

    Any of our four legacy revisions is accepted, unless the caller pinned one
    (``pinned=True``), when only ``requested`` is. Otherwise raise
    :class:`UnsupportedProtocolVersion` naming both versions; the caller closes the
    connection.
    """
    if isinstance(answered, str) and (answered == requested
                                      or (not pinned and answered in LEGACY_VERSIONS)):
        return answered
    doing = f"initializing server {server!r}" if server else "initializing"
    if pinned:
        hint = (f"the protocol version was pinned to {requested!r}; pin {answered!r} or "
                f"leave protocol_version unset to accept it")
    else:
        hint = f"mcpsync speaks {', '.join(SUPPORTED_VERSIONS)}"
    raise UnsupportedProtocolVersion(
        f"{doing}: the server answered protocol version {answered!r} to our "
        f"{requested!r}; {hint}",
        requested=requested, supported=[answered] if isinstance(answered, str) else [],
        server=server, method="initialize")


# --- results ----------------------------------------------------------------------------

_RESULT_TYPES: Final = ("complete", "input_required")


def result_type(result: Any, *, allowed: Container[str] = _RESULT_TYPES,
                server: str | None = None, method: str | None = None) -> str:
    """The ``resultType`` of a result: absent (or ``null``) means ``"complete"``.

    An unknown value raises :class:`ProtocolError`: the spec says such a result MUST be
    treated as invalid, and guessing could turn an interim answer into a final one.
    ``allowed`` widens the set for an extension the client advertised (e.g. ``"task"``).
    A result that is not an object has no ``resultType``: the caller validates its shape.
    """
    if not isinstance(result, dict):
        return "complete"
    value = result.get("resultType")
    if value is None:
        return "complete"
    if isinstance(value, str) and value in allowed:
        return value
    where = f" from server {server!r}" if server else ""
    raise ProtocolError(f"unknown resultType {value!r}{where}"
                        f"{f' answering {method!r}' if method else ''}; mcpsync understands "
                        f"'complete' and 'input_required'", server=server, method=method)


def server_info_from_result(result: Any, protocol_version: str) -> ServerInfo:
    """Server info from an ``initialize`` or ``server/discover`` result.

    Modern servers put it in ``_meta["io.modelcontextprotocol/serverInfo"]``; legacy ones
    in a top-level ``serverInfo``. A result with neither gives an empty ``ServerInfo``
    (the server is still usable; it just did not introduce itself).
    """
    if not isinstance(result, dict):
        return ServerInfo(protocol_version=protocol_version)
    meta = result.get("_meta")
    info = meta.get(META_SERVER_INFO) if isinstance(meta, dict) else None
    if not isinstance(info, dict):
        info = result.get("serverInfo")
    instructions = result.get("instructions")
    return ServerInfo.from_dict(info if isinstance(info, dict) else {},
                                protocol_version=protocol_version,
                                instructions=instructions if isinstance(instructions, str)
                                else None)


# --- error messages ---------------------------------------------------------------------

def describe_call(method: str, params: Any, server: str | None) -> str:
    """What we were doing, as the start of an error message.

    ``calling tool 'add' on server 'demo'``, ``reading resource 'file:///x' on server
    'demo'``, ``getting prompt 'p' on server 'demo'``, else ``calling 'ping' on server
    'demo'``. Without a server name the ``on server`` part is left out.
    """
    p = params if isinstance(params, dict) else {}
    if method == "tools/call":
        text = f"calling tool {p.get('name', '?')!r}"
    elif method == "resources/read":
        text = f"reading resource {p.get('uri', '?')!r}"
    elif method == "prompts/get":
        text = f"getting prompt {p.get('name', '?')!r}"
    else:
        text = f"calling {method!r}"
    return f"{text} on server {server!r}" if server else text


def _hint(code: int, method: str | None, data: Any) -> str:
    """A sentence saying what to try, for the codes where we know something useful."""
    if code == _METHOD_NOT_FOUND:
        if method:
            return f"the server does not implement {method!r}"
        return "the server does not implement that method"
    if code == _INVALID_PARAMS and method == "tools/call":
        return "check the tool name and the arguments against its inputSchema (list_tools())"
    if code == _INVALID_PARAMS and method == "prompts/get":
        return "check the prompt name and its required arguments (list_prompts())"
    if code in (_RESOURCE_NOT_FOUND, _INVALID_PARAMS) and method == "resources/read":
        return "the server has no resource at that URI (list_resources() shows what exists)"
    if code == _RESOURCE_NOT_FOUND:
        return "the server has no such resource"
    if code == _MISSING_CLIENT_CAPABILITY:
        required = data.get("requiredCapabilities") if isinstance(data, dict) else None
        what = f" {required!r}" if required is not None else ""
        return (f"the server needs client capabilities{what}; pass the matching callback "
                f"(sampling=, elicitation=, roots=) to connect()")
    if code == _URL_ELICITATION_REQUIRED:
        return "the user must complete the URL elicitation first (see .elicitations), then retry"
    if code == _UNSUPPORTED_PROTOCOL_VERSION:
        supported = data.get("supported") if isinstance(data, dict) else None
        if supported is not None:
            return f"the server speaks {supported!r}"
        return ""
    if code == _HEADER_MISMATCH:
        return "an HTTP header disagreed with the request body (a proxy may have rewritten it)"
    if code == _USER_REJECTED:
        return "the user rejected the request"
    return ""


_ERROR_CLASSES: Final[dict[int, type[RemoteError]]] = {
    _RESOURCE_NOT_FOUND: ResourceNotFound,
    _HEADER_MISMATCH: HeaderMismatch,
    _URL_ELICITATION_REQUIRED: URLElicitationRequired,
    _MISSING_CLIENT_CAPABILITY: MissingCapability,
}


def remote_error(code: Any, message: Any, data: Any = None, *, server: str | None,
                 method: str | None, prefix: str) -> RemoteError:
    """Build the exception for a JSON-RPC error a peer answered.

    The class follows the code (-32002, and -32602 on ``resources/read``, are
    :class:`ResourceNotFound`; -32020 :class:`HeaderMismatch`; -32042
    :class:`URLElicitationRequired`; -32021 :class:`MissingCapability`; else
    :class:`RemoteError`). The message is ``f"{prefix}: {message} (code {code})"``, plus a
    hint when one helps. ``prefix`` usually comes from :func:`describe_call`. A code that
    is not an integer (a broken peer) gives a plain :class:`RemoteError` with ``code``
    -32603 and the code shown as sent.
    """
    if isinstance(code, bool) or not isinstance(code, int):
        # A broken peer; keep what it sent visible but never crash building the error.
        code_num = _INTERNAL_ERROR
        shown_code: Any = repr(code)
    else:
        code_num = shown_code = code
    text = message if isinstance(message, str) else repr(message)
    if not text:
        text = "(no message)"
    cls = _ERROR_CLASSES.get(code_num, RemoteError)
    if code_num == _INVALID_PARAMS and method == "resources/read":
        cls = ResourceNotFound
    full = f"{prefix}: {text} (code {shown_code})"
    hint = _hint(code_num, method, data)
    if hint:
        full = f"{full}; {hint}"
    return cls(full, code=code_num, remote_message=text, data=data, server=server,
               method=method)
