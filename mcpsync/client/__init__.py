"""The user-facing client: :func:`connect` and :class:`Client`.

The public face of the room; the client body is in ``_client``, how it opens, restarts and
re-detects its session is in ``_lifecycle``, and each concern it delegates (handshake,
input-required rounds, callbacks, subscriptions, list cache, options, finalizer) has its own
private module next to it.
"""
from __future__ import annotations

from mcpsync.client._client import (
    Client as Client,
    ElicitationRequest as ElicitationRequest,
    SamplingRequest as SamplingRequest,
    Subscription as Subscription,
)
from mcpsync.client._connect import connect as connect
from mcpsync.client._options import ClientOptions as ClientOptions

__all__ = [
    "Client",
    "ClientOptions",
    "ElicitationRequest",
    "SamplingRequest",
    "Subscription",
    "connect",
]
