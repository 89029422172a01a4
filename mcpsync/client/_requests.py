"""The requests a server makes of the client's callbacks: :class:`SamplingRequest` and
:class:`ElicitationRequest`.

Public dataclasses (exported by ``mcpsync`` and ``mcpsync.client``) that only a server's
``sampling/createMessage`` or ``elicitation/create`` builds, so they are not built at
import: a dataclass generates and compiles its methods when its class is made, about 0.4 ms
each, and a connect-and-call never needs them. ``mcpsync``, ``mcpsync.client``,
``mcpsync.client._client`` and ``mcpsync.client._callbacks`` load this module on first
access to either name (the last two keep imports and pickles naming them working).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["ElicitationRequest", "SamplingRequest"]


@dataclass(frozen=True)
class SamplingRequest:
    """A server's request to sample the client's LLM (``sampling/createMessage``).

    ``params`` is the request exactly as received; the other fields are its commonly used
    members. The callback returns a ``CreateMessageResult`` dict
    (``{"role": "assistant", "content": {...}, "model": ..., "stopReason": ...}``), or raises
    :class:`mcpsync.Rejected` to refuse.
    """

    messages: list[Any]
    max_tokens: int | None
    system_prompt: str | None
    tools: list[Any] | None
    params: dict[str, Any] = field(repr=False)


@dataclass(frozen=True)
class ElicitationRequest:
    """A server's request for user input (``elicitation/create``).

    ``mode`` is ``"form"`` (``requested_schema`` describes the fields) or ``"url"`` (``url``
    and ``elicitation_id`` are set; the user should open the URL out of band). The callback
    returns ``{"action": "accept" | "decline" | "cancel", "content": {...}}``; for an accepted
    form, fields the callback leaves out get the schema's ``default`` (SEP-1034).
    """

    mode: str
    message: str
    requested_schema: dict[str, Any] | None
    url: str | None
    elicitation_id: str | None
    params: dict[str, Any] = field(repr=False)
