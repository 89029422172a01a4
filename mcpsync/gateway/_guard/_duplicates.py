"""Finding a key an object of a host's ``tools/call`` holds twice.

The guard judges a call's arguments as Python's json reads them, where the last of two
equal keys wins, but the gateway forwards the host's own bytes; an upstream whose parser
keeps the first key would act on a value the policy never saw. So a guarded gateway refuses
such a call rather than guess which reading the upstream makes.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["duplicate_key"]


class _Object(dict[str, Any]):
    """A decoded JSON object that remembers the first key it held twice."""

    twice: str | None = None


def _pairs(pairs: list[tuple[str, Any]]) -> _Object:
    obj = _Object()
    for key, value in pairs:
        if key in obj and obj.twice is None:
            obj.twice = key
        obj[key] = value
    return obj


def _first(value: Any) -> str | None:
    if isinstance(value, list):
        for item in value:
            found = _first(item)
            if found is not None:
                return found
        return None
    if not isinstance(value, _Object):
        return None
    if value.twice is not None:
        return value.twice
    for item in value.values():
        found = _first(item)
        if found is not None:
            return found
    return None


def duplicate_key(raw_params: str | None) -> tuple[str, str] | None:
    """``(where, key)`` for the first key an object of the params text ``raw_params`` holds
    twice, at any depth (keys compared once their escapes are decoded, as any parser reads
    them); ``where`` is ``"arguments"`` when that object is in the call's arguments, else
    ``"params"``. None: no key twice, or not JSON."""
    if raw_params is None or raw_params.count('"') < 4:
        return None   # two keys need at least four quotes
    try:
        params = json.loads(raw_params, object_pairs_hook=_pairs)
    except ValueError:
        return None
    if isinstance(params, dict):
        in_arguments = _first(params.get("arguments"))
        if in_arguments is not None:
            return "arguments", in_arguments
    found = _first(params)
    return None if found is None else ("params", found)
