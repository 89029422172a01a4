"""Transports: how mcpsync moves frames to and from a server (stdio subprocess, HTTP)."""

from __future__ import annotations

import importlib
from typing import Any

# Submodules reachable as attributes without an explicit import, so that an annotation
# written ``mcpsync.transport.memory.MemoryTransport`` resolves (typing.get_type_hints on
# Client and connect) although the client import leaves the in-memory transport for later.
# No call reads this package's attributes, so the __getattr__ slows no call down.
_SUBMODULES = frozenset({"memory"})


def __getattr__(name: str) -> Any:
    """Import a submodule on first attribute access (PEP 562)."""
    if name in _SUBMODULES:
        return importlib.import_module(f"mcpsync.transport.{name}")
    raise AttributeError(f"module 'mcpsync.transport' has no attribute {name!r}")
