"""placeholder: a legacy host on a 2026-07-28 server passes through unchanged for now."""

from __future__ import annotations

from mcpsync._envelope import Envelope
from mcpsync.gateway._bridge._link import Out, Translator

__all__ = ["LegacyHostModernServer"]


class LegacyHostModernServer(Translator):
    """Frames pass as they are."""

    def from_host(self, env: Envelope, out: Out) -> None:
        out.up(env)

    def from_upstream(self, env: Envelope, out: Out) -> None:
        out.host(env)

    def internal_failed(self, env: Envelope, why: str, out: Out) -> None:
        return None
