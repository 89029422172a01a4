"""mcpsync: a synchronous, thread-based Python SDK for the Model Context Protocol.

Blocking calls that are safe from many threads at once, that work inside a running event loop
(a Jupyter cell) and never hang on a dead server::

    import mcpsync

    with mcpsync.connect([sys.executable, "-m", "mcpsync.demo"]) as client:
        print(client.call_tool("add", {"a": 1, "b": 2}).structured)

Public names are loaded lazily on first use, so ``import mcpsync`` stays cheap for one-shot
scripts and command-line tools (``requests`` is imported only when HTTP is used).
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

from mcpsync._version import __version__

# Libraries never configure logging; a NullHandler keeps "no handler" warnings away while
# leaving every decision about output to the application.
logging.getLogger("mcpsync").addHandler(logging.NullHandler())

if TYPE_CHECKING:
    from mcpsync.auth_hooks import (
        AuthHooks as AuthHooks,
        BearerToken as BearerToken,
        HttpChallenge as HttpChallenge,
        make_auth as make_auth,
    )
    from mcpsync.client import (
        Client as Client,
        ClientOptions as ClientOptions,
        ElicitationRequest as ElicitationRequest,
        SamplingRequest as SamplingRequest,
        Subscription as Subscription,
        connect as connect,
    )
    from mcpsync.client._future import CallFuture as CallFuture
    from mcpsync.client._proxies import NOT_GIVEN as NOT_GIVEN
    from mcpsync.client._skills import (
        LoadedSkill as LoadedSkill,
        Skill as Skill,
        SkillFile as SkillFile,
    )
    from mcpsync.config import DEFAULT_TIMEOUT as DEFAULT_TIMEOUT, ServerConfig as ServerConfig
    from mcpsync.config_files import load_config as load_config
    from mcpsync.errors import (
        ApprovalRejected as ApprovalRejected,
        AuthHookError as AuthHookError,
        BudgetExceeded as BudgetExceeded,
        CallbackWarning as CallbackWarning,
        Cancelled as Cancelled,
        CapabilityNotSupported as CapabilityNotSupported,
        ClosedError as ClosedError,
        ConfigError as ConfigError,
        ConnectFailed as ConnectFailed,
        ConnectionLost as ConnectionLost,
        HeaderMismatch as HeaderMismatch,
        InputRoundsExceeded as InputRoundsExceeded,
        InvalidArguments as InvalidArguments,
        MCPError as MCPError,
        MissingCapability as MissingCapability,
        OutputValidationError as OutputValidationError,
        PolicyDenied as PolicyDenied,
        PolicyRefused as PolicyRefused,
        ProtocolError as ProtocolError,
        Rejected as Rejected,
        RemoteError as RemoteError,
        RequestTimeout as RequestTimeout,
        ResourceNotFound as ResourceNotFound,
        SecretError as SecretError,
        ServerExited as ServerExited,
        SessionExpired as SessionExpired,
        SkillVerificationError as SkillVerificationError,
        ToolError as ToolError,
        TooManyPages as TooManyPages,
        TransportError as TransportError,
        Unauthorized as Unauthorized,
        UnknownServer as UnknownServer,
        UnknownTool as UnknownTool,
        UnsupportedInThisEra as UnsupportedInThisEra,
        UnsupportedProtocolVersion as UnsupportedProtocolVersion,
        URLElicitationRequired as URLElicitationRequired,
        UsedAfterFork as UsedAfterFork,
    )
    from mcpsync.gateway import Gateway as Gateway
    from mcpsync.jsonrpc import ParseError as ParseError, StreamError as StreamError
    from mcpsync.manager import (
        ManagedTool as ManagedTool,
        Manager as Manager,
        Notification as Notification,
    )
    from mcpsync.policy import ArgumentRule as ArgumentRule, Budget as Budget, Policy as Policy
    from mcpsync.secrets import SecretResolver as SecretResolver, render_secret as render_secret
    from mcpsync.server import Context as Context, Server as Server
    from mcpsync.session._future import RequestFuture as RequestFuture
    from mcpsync.types import (
        AudioContent as AudioContent,
        CallToolResult as CallToolResult,
        CompleteResult as CompleteResult,
        ContentBlock as ContentBlock,
        EmbeddedResource as EmbeddedResource,
        GetPromptResult as GetPromptResult,
        ImageContent as ImageContent,
        Prompt as Prompt,
        PromptArgument as PromptArgument,
        PromptMessage as PromptMessage,
        ReadResourceResult as ReadResourceResult,
        Resource as Resource,
        ResourceContents as ResourceContents,
        ResourceLink as ResourceLink,
        ResourceTemplate as ResourceTemplate,
        Root as Root,
        ServerInfo as ServerInfo,
        TextContent as TextContent,
        Tool as Tool,
    )

# The public names, each once: name -> module that defines it. ``__all__``, ``__dir__`` and
# the lazy loader below are made from this dict; tests/layout checks that the TYPE_CHECKING
# block above imports exactly these names from these modules.
_PUBLIC: dict[str, str] = {
    "AuthHooks": "mcpsync.auth_hooks",
    "BearerToken": "mcpsync.auth_hooks",
    "HttpChallenge": "mcpsync.auth_hooks",
    "make_auth": "mcpsync.auth_hooks",
    "Client": "mcpsync.client",
    "ClientOptions": "mcpsync.client",
    "ElicitationRequest": "mcpsync.client",
    "SamplingRequest": "mcpsync.client",
    "Subscription": "mcpsync.client",
    "connect": "mcpsync.client",
    "CallFuture": "mcpsync.client._future",
    "LoadedSkill": "mcpsync.client._skills",
    "Skill": "mcpsync.client._skills",
    "SkillFile": "mcpsync.client._skills",
    "NOT_GIVEN": "mcpsync.client._proxies",
    "DEFAULT_TIMEOUT": "mcpsync.config",
    "ServerConfig": "mcpsync.config",
    "load_config": "mcpsync.config_files",
    **dict.fromkeys((
        "ApprovalRejected", "AuthHookError", "BudgetExceeded", "CallbackWarning", "Cancelled",
        "CapabilityNotSupported", "ClosedError", "ConfigError", "ConnectFailed",
        "ConnectionLost", "HeaderMismatch", "InputRoundsExceeded", "InvalidArguments", "MCPError",
        "MissingCapability", "OutputValidationError", "PolicyDenied", "PolicyRefused",
        "ProtocolError", "Rejected", "RemoteError", "RequestTimeout", "ResourceNotFound",
        "SecretError", "ServerExited", "SessionExpired", "SkillVerificationError", "ToolError",
        "TooManyPages",
        "TransportError", "Unauthorized", "UnknownServer", "UnknownTool", "UnsupportedInThisEra",
        "UnsupportedProtocolVersion", "URLElicitationRequired", "UsedAfterFork",
    ), "mcpsync.errors"),
    "Gateway": "mcpsync.gateway",
    "ParseError": "mcpsync.jsonrpc",
    "StreamError": "mcpsync.jsonrpc",
    "ManagedTool": "mcpsync.manager",
    "Manager": "mcpsync.manager",
    "Notification": "mcpsync.manager",
    "ArgumentRule": "mcpsync.policy",
    "Budget": "mcpsync.policy",
    "Policy": "mcpsync.policy",
    "SecretResolver": "mcpsync.secrets",
    "render_secret": "mcpsync.secrets",
    "Context": "mcpsync.server",
    "Server": "mcpsync.server",
    "RequestFuture": "mcpsync.session._future",
    **dict.fromkeys((
        "AudioContent", "CallToolResult", "CompleteResult", "ContentBlock", "EmbeddedResource",
        "GetPromptResult", "ImageContent", "Prompt", "PromptArgument", "PromptMessage",
        "ReadResourceResult", "Resource", "ResourceContents", "ResourceLink",
        "ResourceTemplate", "Root", "ServerInfo", "TextContent", "Tool",
    ), "mcpsync.types"),
}

__all__ = ["__version__", *sorted(_PUBLIC)]


# submodules reachable as attributes without an explicit import (``mcpsync.jsonrpc``)
_SUBMODULES = frozenset({"errors", "jsonrpc", "protocol", "types", "config", "server", "client",
                         "manager", "secrets", "policy", "config_files"})


def __getattr__(name: str) -> Any:
    """Import the module that defines a public name on first access (PEP 562)."""
    if name in _SUBMODULES:
        return importlib.import_module(f"mcpsync.{name}")
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'mcpsync' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
