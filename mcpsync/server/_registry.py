"""The live registry of a server: tools, resources, resource templates, prompts, completions.

Readers never lock. Every table is a dict that is *replaced*, never changed in place, under
the registry's lock (copy-on-write), so a worker answering ``tools/call`` takes one reference
and reads a consistent table while another thread adds or removes a tool; lists are rebuilt
once per change, not per request. A change tells every open connection (its router is a
listener) which list changed, so each can send ``notifications/<kind>/list_changed`` in its
own era. The telling goes through the server's notification bus (``_bus``): in this process
only by default, or to the other worker processes too.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from mcpsync.server._bus import Change, LocalBus, NotificationBus
from mcpsync.server._uritemplate import UriTemplate
from mcpsync.server._validate import ArgumentCheck

__all__ = ["CompletionEntry", "PromptEntry", "Registry", "ResourceEntry", "TemplateEntry",
           "ToolEntry"]

Handler = Callable[[dict[str, Any], Any], Any]


@dataclass(frozen=True)
class ToolEntry:
    """A registered tool: its wire description and ``handler(arguments, ctx)``.

    ``check`` is the argument check prepared from the input schema when the entry is made, so
    a call does not work out again how to check its arguments.
    """

    wire: dict[str, Any]
    handler: Handler
    #: Over Streamable HTTP (2025-11-25 sessions) the call runs on a thread of its own, so
    #: that ``ctx.close_stream()`` can end its connection while it goes on.
    polling: bool = False
    #: A task tool that asks in ``input_required`` rounds until ``ctx.start_task()``.
    rounds_first: bool = False
    check: ArgumentCheck = field(init=False, repr=False, compare=False)
    #: ``"optional"`` or ``"required"`` (``execution.taskSupport``); ``None``: never a task.
    task_support: str | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        schema = self.wire.get("inputSchema", {"type": "object"})
        object.__setattr__(self, "check", ArgumentCheck(schema))
        execution = self.wire.get("execution")
        support = execution.get("taskSupport") if isinstance(execution, dict) else None
        object.__setattr__(self, "task_support",
                           support if support in ("optional", "required") else None)

    @property
    def structured(self) -> bool:
        return "outputSchema" in self.wire


@dataclass(frozen=True)
class ResourceEntry:
    """A resource at one fixed URI, read by ``handler({}, ctx)``."""

    wire: dict[str, Any]
    handler: Handler
    ttl_ms: int | None
    cache_scope: str | None

    @property
    def uri(self) -> str:
        return str(self.wire["uri"])


@dataclass(frozen=True)
class TemplateEntry:
    """Resources whose URIs match an RFC 6570 template, read by ``handler(variables, ctx)``."""

    wire: dict[str, Any]
    template: UriTemplate
    handler: Handler
    ttl_ms: int | None
    cache_scope: str | None


@dataclass(frozen=True)
class PromptEntry:
    """A prompt: its wire description and ``handler(arguments, ctx)``."""

    wire: dict[str, Any]
    handler: Handler


@dataclass(frozen=True)
class CompletionEntry:
    """Completes one argument of a prompt or resource template:
    ``handler(argument, value, context_arguments)``."""

    handler: Callable[[str, str, dict[str, str]], Any]


class Listener(Protocol):
    def list_changed(self, kind: str) -> None: ...
    def resource_updated(self, uri: str) -> None: ...


_KINDS = ("tools", "resources", "prompts")


class Registry:
    """The tables, their ready-made wire lists, and the connections listening for changes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.tools: dict[str, ToolEntry] = {}
        self.resources: dict[str, ResourceEntry] = {}
        self.templates: dict[str, TemplateEntry] = {}
        self.prompts: dict[str, PromptEntry] = {}
        self.completions: dict[tuple[str, str], CompletionEntry] = {}
        self.tool_list: list[dict[str, Any]] = []
        self.resource_list: list[dict[str, Any]] = []
        self.template_list: list[dict[str, Any]] = []
        self.prompt_list: list[dict[str, Any]] = []
        self._listeners: dict[int, Listener] = {}
        self._bus: NotificationBus = LocalBus()
        self._unsubscribe = self._bus.subscribe(self._deliver)

    # -- listeners ---------------------------------------------------------------------------

    def listen(self, listener: Listener) -> None:
        with self._lock:
            self._listeners = {**self._listeners, id(listener): listener}

    def unlisten(self, listener: Listener) -> None:
        with self._lock:
            if id(listener) in self._listeners:
                self._listeners = {k: v for k, v in self._listeners.items()
                                   if k != id(listener)}

    def use_bus(self, bus: NotificationBus) -> None:
        """Publish changes on ``bus``, and hear there those of other processes."""
        with self._lock:
            previous, self._bus = self._unsubscribe, bus
            self._unsubscribe = bus.subscribe(self._deliver)
        previous()

    def resource_updated(self, uri: str) -> None:
        self._bus.publish(Change("resource", uri))

    def _changed(self, kind: str) -> None:
        self._bus.publish(Change("list", kind))

    def _deliver(self, change: Change) -> None:
        """A change from the bus (this process's or another's): to every connection here."""
        for listener in list(self._listeners.values()):
            if change.what == "list":
                listener.list_changed(change.value)
            else:
                listener.resource_updated(change.value)

    # -- changes -----------------------------------------------------------------------------

    def add_tool(self, entry: ToolEntry, *, replace: bool = False) -> None:
        name = entry.wire["name"]
        with self._lock:
            if not replace and name in self.tools:
                raise ValueError(f"a tool named {name!r} is already registered")
            self.tools = {**self.tools, name: entry}
            self.tool_list = [e.wire for e in self.tools.values()]
        self._changed("tools")

    def remove_tool(self, name: str) -> bool:
        with self._lock:
            if name not in self.tools:
                return False
            self.tools = {k: v for k, v in self.tools.items() if k != name}
            self.tool_list = [e.wire for e in self.tools.values()]
        self._changed("tools")
        return True

    def add_resource(self, entry: ResourceEntry) -> None:
        with self._lock:
            if entry.uri in self.resources:
                raise ValueError(f"a resource at {entry.uri!r} is already registered")
            self.resources = {**self.resources, entry.uri: entry}
            self.resource_list = [e.wire for e in self.resources.values()]
        self._changed("resources")

    def remove_resource(self, uri: str) -> bool:
        with self._lock:
            if uri not in self.resources:
                return False
            self.resources = {k: v for k, v in self.resources.items() if k != uri}
            self.resource_list = [e.wire for e in self.resources.values()]
        self._changed("resources")
        return True

    def add_template(self, entry: TemplateEntry) -> None:
        key = entry.template.template
        with self._lock:
            if key in self.templates:
                raise ValueError(f"a resource template {key!r} is already registered")
            self.templates = {**self.templates, key: entry}
            self.template_list = [e.wire for e in self.templates.values()]
        self._changed("resources")

    def remove_template(self, template: str) -> bool:
        with self._lock:
            if template not in self.templates:
                return False
            self.templates = {k: v for k, v in self.templates.items() if k != template}
            self.template_list = [e.wire for e in self.templates.values()]
        self._changed("resources")
        return True

    def add_prompt(self, entry: PromptEntry) -> None:
        name = entry.wire["name"]
        with self._lock:
            if name in self.prompts:
                raise ValueError(f"a prompt named {name!r} is already registered")
            self.prompts = {**self.prompts, name: entry}
            self.prompt_list = [e.wire for e in self.prompts.values()]
        self._changed("prompts")

    def remove_prompt(self, name: str) -> bool:
        with self._lock:
            if name not in self.prompts:
                return False
            self.prompts = {k: v for k, v in self.prompts.items() if k != name}
            self.prompt_list = [e.wire for e in self.prompts.values()]
        self._changed("prompts")
        return True

    def add_completion(self, key: tuple[str, str], entry: CompletionEntry) -> None:
        with self._lock:
            if key in self.completions:
                raise ValueError(f"a completion for {key[0]} {key[1]!r} is already registered")
            self.completions = {**self.completions, key: entry}
