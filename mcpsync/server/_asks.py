"""What a handler can ask the client for, built once and usable alone or several at a time.

``Ask.elicit(...)``, ``Ask.sample(...)`` and ``Ask.roots()`` describe one request to the
client (its method, its params, and how to read the answer); ``ctx.elicit()`` and friends ask
one, ``ctx.ask_all({"key": Ask..., ...})`` asks several at once. Under 2026-07-28 several asks
go out in one ``input_required`` result, under their keys; a legacy client is asked one after
the other.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mcpsync.server._asking import ElicitResult, SampleResult, root_list

__all__ = ["Ask"]


@dataclass(frozen=True)
class Ask:
    """One request to the client: ``method``, ``params``, and ``read`` for its answer."""

    method: str
    params: dict[str, Any]
    read: Callable[[Mapping[str, Any]], Any]

    @classmethod
    def elicit(cls, message: str, schema: Mapping[str, Any] | None = None, *,
               url: str | None = None) -> Ask:
        """Ask the user to fill a form (``schema``: a flat JSON object schema) or to visit
        ``url``; the answer is an :class:`ElicitResult`."""
        params: dict[str, Any] = {"message": str(message)}
        if url is not None:
            if schema is not None:
                raise ValueError("elicit() takes a schema (form mode) or a url, not both")
            params["mode"] = "url"
            params["url"] = str(url)
        else:
            params["requestedSchema"] = dict(schema) if schema is not None else {
                "type": "object", "properties": {}}
        return cls("elicitation/create", params, ElicitResult.from_dict)

    @classmethod
    def sample(cls, messages: str | Sequence[Mapping[str, Any]], *, max_tokens: int,
               system_prompt: str | None = None, temperature: float | None = None,
               stop_sequences: Sequence[str] | None = None,
               model_preferences: Mapping[str, Any] | None = None,
               include_context: str | None = None, metadata: Mapping[str, Any] | None = None,
               tools: Sequence[Mapping[str, Any]] | None = None,
               tool_choice: Mapping[str, Any] | None = None) -> Ask:
        """Ask the client's model for a message; the answer is a :class:`SampleResult`.

        ``messages`` is a string (one user message) or a list of ``{"role", "content"}``,
        content being a string or a content block dict."""
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        wire: list[dict[str, Any]] = []
        for item in messages:
            content = item.get("content")
            if isinstance(content, str):
                content = {"type": "text", "text": content}
            wire.append({"role": item.get("role", "user"), "content": content})
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"max_tokens must be a positive integer, got {max_tokens!r}")
        params: dict[str, Any] = {"messages": wire, "maxTokens": max_tokens}
        for key, value in (("systemPrompt", system_prompt), ("temperature", temperature),
                           ("stopSequences", list(stop_sequences) if stop_sequences else None),
                           ("modelPreferences", model_preferences),
                           ("includeContext", include_context), ("metadata", metadata),
                           ("tools", list(tools) if tools else None),
                           ("toolChoice", tool_choice)):
            if value is not None:
                params[key] = value
        return cls("sampling/createMessage", params, SampleResult.from_dict)

    @classmethod
    def roots(cls) -> Ask:
        """Ask for the client's roots; the answer is a list of ``mcpsync.types.Root``."""
        return cls("roots/list", {}, root_list)
