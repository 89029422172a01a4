"""Small JSON-RPC frame helpers of the bridge: build frames, and edit one member of an object
without re-encoding the rest.

The bridge changes envelopes, never payloads: a tool's arguments or result, a resource's
contents and an input request's params reach the other side as the text they came in. So an
object (``params``, a ``_meta``) is edited through :class:`~mcpsync._envelope.Envelope`'s
span splicing, which rewrites one member and leaves every other byte alone.
"""

from __future__ import annotations

import itertools
import json
from typing import Any, Final

from mcpsync._envelope import Envelope, IdKey

__all__ = ["ID_PREFIX", "BridgeIds", "decoded", "error_frame", "key_of_raw", "member",
           "notification_frame", "object_text", "request_frame", "result_frame", "set_member",
           "without_keys"]

#: Every request id the bridge makes itself starts with this, so its answers are told apart
#: from the host's (whose ids are whatever the host chose).
ID_PREFIX: Final = "mcpsync-bridge-"


class BridgeIds:
    """Fresh request ids of one bridge: ``(raw text, IdKey)``."""

    def __init__(self, upstream: str) -> None:
        self._tag = f"{ID_PREFIX}{upstream}-"
        self._count = itertools.count(1)

    def new(self) -> tuple[str, IdKey]:
        value = f"{self._tag}{next(self._count)}"
        return json.dumps(value), ("str", value)

    def mine(self, key: IdKey | None) -> bool:
        return key is not None and key[0] == "str" and str(key[1]).startswith(self._tag)


def _obj(text: str) -> Envelope:
    # An Envelope over any JSON object text: its member spans and splicing, nothing else.
    return Envelope(text, None, "response", None, None, None)


def object_text(raw: str | None) -> str:
    """``raw`` when it is an object's text, else ``"{}"`` (absent or not an object)."""
    if raw is None or not raw.lstrip().startswith("{"):
        return "{}"
    return raw


def member(raw: str | None, key: str) -> str | None:
    """The exact text of member ``key`` of the object ``raw`` (``None`` when absent)."""
    if raw is None or not raw.lstrip().startswith("{"):
        return None
    return _obj(raw.strip()).raw(key)


def set_member(raw: str | None, key: str, value_raw: str) -> str:
    """The object ``raw`` with member ``key`` set to ``value_raw``; every other byte kept."""
    return _obj(object_text(raw).strip()).replace(key, value_raw).text


def decoded(raw: str | None) -> Any:
    """The value of ``raw`` JSON text (``None`` when absent)."""
    return None if raw is None else json.loads(raw)


def without_keys(params_raw: str | None, keys: frozenset[str]) -> str | None:
    """``params_raw`` with ``keys`` taken out of its ``_meta`` (only that member re-encoded);
    ``params_raw`` itself when its ``_meta`` holds none of them."""
    meta_raw = member(params_raw, "_meta")
    meta = decoded(meta_raw)
    if not isinstance(meta, dict) or not keys.intersection(meta):
        return params_raw
    kept = {k: v for k, v in meta.items() if k not in keys}
    return set_member(params_raw, "_meta", json.dumps(kept, ensure_ascii=False))


def key_of_raw(raw: str | None) -> IdKey | None:
    """The correlation key of an id given as JSON text (as the envelope keys ids)."""
    if raw is None:
        return None
    value = json.loads(raw)
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return ("raw", raw)
    return ("int", value) if isinstance(value, int) else ("str", value)


def request_frame(raw_id: str, method: str, params_raw: str | None) -> str:
    params = "" if params_raw is None else f',"params":{params_raw}'
    return f'{{"jsonrpc":"2.0","id":{raw_id},"method":{json.dumps(method)}{params}}}'


def notification_frame(method: str, params_raw: str | None) -> str:
    params = "" if params_raw is None else f',"params":{params_raw}'
    return f'{{"jsonrpc":"2.0","method":{json.dumps(method)}{params}}}'


def result_frame(raw_id: str, result_raw: str) -> str:
    return f'{{"jsonrpc":"2.0","id":{raw_id},"result":{result_raw}}}'


def error_frame(raw_id: str, code: int, message: str, upstream: str) -> str:
    body = json.dumps({"code": code, "message": message, "data": {"upstream": upstream}})
    return f'{{"jsonrpc":"2.0","id":{raw_id},"error":{body}}}'
