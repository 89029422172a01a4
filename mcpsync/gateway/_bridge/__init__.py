"""Era bridging: a host of one protocol era using servers of the other, through the gateway.

Without it the gateway is a pass-through and the host negotiates with each server itself, so
a 2026-07-28 host and a 2025-11-25 server simply do not understand each other. With
``Gateway(..., bridge=True)`` (``mcpsync gateway --bridge``) every upstream is a
:class:`~mcpsync.gateway._bridge._link.BridgedUpstream`: it learns both eras and, when they
differ, translates the envelope (handshake, input rounds, subscriptions, ``_meta``) both
ways, so the core and the aggregator see an upstream of the host's era. See
``docs/gateway-bridging.md`` for what is translated and what cannot be.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from mcpsync.config import ServerConfig
from mcpsync.errors import ConfigError
from mcpsync.gateway._bridge._link import ERAS, PROBE_TIMEOUT, BridgedUpstream, era_of_entry
from mcpsync.gateway._upstream import Upstream

__all__ = ["ERAS", "PROBE_TIMEOUT", "BridgedUpstream", "upstream_factory"]


def upstream_factory(bridge: bool, configs: Sequence[ServerConfig], source: str
                     ) -> Callable[..., Upstream]:
    """What the gateway builds each upstream with: :class:`Upstream` without the bridge,
    else a :class:`BridgedUpstream` with the era its entry pins. Refuses (``ConfigError``)
    a ``bridge`` that is not a bool, a bad ``era``, and an ``era`` without the bridge."""
    if not isinstance(bridge, bool):
        raise ConfigError(f"bridge must be True or False, not {bridge!r}")
    eras = {id(c): era_of_entry(c, source) for c in configs}
    if not bridge:
        pinned = [c.id or c.display_name for c in configs if "era" in c.extra]
        if pinned:
            raise ConfigError(f"{source}: server {pinned[0]!r} pins an \"era\", which only "
                              "the bridge reads; run the gateway with --bridge "
                              "(Gateway(..., bridge=True)) or remove the key")
        return Upstream

    def make(config: ServerConfig, **kwargs: Any) -> Upstream:
        return BridgedUpstream(config, era=eras.get(id(config), "auto"), **kwargs)

    return make
