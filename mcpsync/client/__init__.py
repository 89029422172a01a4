"""The user-facing client: :func:`connect` and :class:`Client`.

The public face of the room; the client body is in ``_client``, and each concern it
delegates (handshake, input-required rounds, callbacks, subscriptions, list cache, options,
finalizer) has its own private module next to it.
"""
from __future__ import annotations

from mcpsync.client._client import (
    Client as Client,
    ElicitationRequest as ElicitationRequest,
    SamplingRequest as SamplingRequest,
    Subscription as Subscription,
    connect as connect,
)

__all__ = [
    "Client",
    "ElicitationRequest",
    "SamplingRequest",
    "Subscription",
    "connect",
]
