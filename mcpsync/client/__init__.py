"""The user-facing client: :func:`connect` and :class:`Client`.

The public face of the room; the client body is in ``_client``, how it opens, restarts and
re-detects its session is in ``_lifecycle``, and each concern it delegates (handshake,
input-required rounds, callbacks, subscriptions, list cache, options, finalizer) has its own
private module next to it.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from mcpsync.client._callbacks import load_requests
from mcpsync.client._client import Client as Client, Subscription as Subscription
from mcpsync.client._connect import connect as connect
from mcpsync.client._options import ClientOptions as ClientOptions

if TYPE_CHECKING:
    from mcpsync.client._requests import (
        ElicitationRequest as ElicitationRequest,
        SamplingRequest as SamplingRequest,
    )

__all__ = [
    "Client",
    "ClientOptions",
    "ElicitationRequest",
    "SamplingRequest",
    "Subscription",
    "connect",
]

# Submodules reachable as attributes without an explicit import, so that the annotations of
# Client.tools (``mcpsync.client._proxies.ToolProxies``), Client's ``http`` and connect()'s
# keywords (``mcpsync.client._connect_keywords.ConnectKeywords``) resolve
# (typing.get_type_hints) although the client import leaves those modules for later. No
# call reads this package's attributes, so the __getattr__ slows no call down.
_SUBMODULES = frozenset({"_connect_http", "_connect_keywords", "_proxies"})


# The request types a server's sampling and elicitation requests build: public dataclasses
# that a connect-and-call never needs, loaded (and kept in this namespace) on first access.
_REQUESTS = frozenset({"SamplingRequest", "ElicitationRequest"})


def __getattr__(name: str) -> Any:
    """Import a submodule, or the request types, on first attribute access (PEP 562)."""
    if name in _SUBMODULES:
        return importlib.import_module(f"mcpsync.client.{name}")
    if name in _REQUESTS:
        requests = load_requests()
        namespace = globals()
        namespace.update({other: getattr(requests, other) for other in _REQUESTS})
        return namespace[name]
    raise AttributeError(f"module 'mcpsync.client' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public names with those loaded on first access, so that ``dir()`` and ``help()``
    list ``SamplingRequest`` and ``ElicitationRequest`` before anything has read them."""
    return sorted(set(globals()) | set(__all__))
