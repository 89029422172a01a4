"""A minimal stdio MCP server with a tool registry, serving both protocol eras.

Enough server to test a client against, to wrap a few Python functions as MCP tools, and to
run the demo (``python -m mcpsync.demo``)::

    from mcpsync.server import Context, Server

    server = Server("calc", "1.0")

    @server.tool()
    def add(a: float, b: float) -> float:
        \"\"\"Add two numbers.\"\"\"
        return a + b

    server.serve()          # stdin/stdout until end of input

Each request is served under the era it asks for: a request whose ``params._meta`` carries
``io.modelcontextprotocol/protocolVersion`` gets 2026-07-28 rules, and a successful
``initialize`` selects legacy rules for the requests without it. Resources, prompts and
completion are not offered. How each message is answered lives in ``_server_dispatch``, the
threads in ``_server_loop``, the handler context in ``_server_context``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import IO, Any, TypeVar, overload

from mcpsync.jsonrpc import MAX_FRAME_BYTES, Message
from mcpsync.server._context import Context
from mcpsync.server._intake import DEFAULT_MAX_QUEUED_BYTES
from mcpsync.server._loop import run
from mcpsync.server._memory import MemoryPeer
from mcpsync.server._router import Dispatcher, Send, ServerIdentity, ToolEntry
from mcpsync.server._schema import ToolSignature, describe, signature_of
from mcpsync.types import Tool

__all__ = ["Context", "Server", "ToolHandler"]

ToolHandler = Callable[[dict[str, Any], Context], Any]
"""What ``register_tool`` takes: called as ``handler(arguments, ctx)``."""

_F = TypeVar("_F", bound=Callable[..., Any])
_WIRE_ORDER = ("name", "title", "description", "inputSchema", "outputSchema", "annotations")


class Server:
    """A stdio MCP server: register tools, then call :meth:`serve` once.

    ``concurrency`` is how many handlers may run at once (1: answered in arrival order).
    ``max_frame_bytes`` bounds one incoming line; a longer one ends ``serve()`` with
    ``StreamError``, because the stream cannot be resynchronised after it. ``max_queued``
    (default ``2 * concurrency``) requests and ``max_queued_bytes`` (4 MiB) of their lines wait
    for a handler, and as many bytes again are read ahead; beyond that the server stops reading
    and a client that floods it is held back by the pipe (``docs/server.md``).
    """

    def __init__(self, name: str, version: str, *, title: str | None = None,
                 instructions: str | None = None, concurrency: int = 1,
                 max_frame_bytes: int = MAX_FRAME_BYTES, max_queued: int | None = None,
                 max_queued_bytes: int = DEFAULT_MAX_QUEUED_BYTES) -> None:
        _check_positive("concurrency", concurrency)
        _check_positive("max_frame_bytes", max_frame_bytes)
        if max_queued is None:
            max_queued = 2 * concurrency
        _check_positive("max_queued", max_queued)
        _check_positive("max_queued_bytes", max_queued_bytes)
        self.name = name
        self.version = version
        self.title = title
        self.instructions = instructions
        self.concurrency = concurrency
        self.max_frame_bytes = max_frame_bytes
        self.max_queued = max_queued
        self.max_queued_bytes = max_queued_bytes
        self._tools: dict[str, ToolEntry] = {}
        self._lock = threading.Lock()
        self._started = False

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The registered tools as ``tools/list`` shows them, in registration order."""
        with self._lock:
            return [dict(entry.wire) for entry in self._tools.values()]

    def register_tool(self, tool: Mapping[str, Any] | Tool, handler: ToolHandler) -> None:
        """Register a tool described in wire shape, handled by ``handler(arguments, ctx)``.

        ``tool`` is a mapping as ``tools/list`` shows it: ``name`` (required), and optionally
        ``title``, ``description``, ``inputSchema`` (default ``{"type": "object"}``),
        ``outputSchema``, ``annotations`` and any other member (``icons``, ``_meta``), which is
        passed through. A ``mcpsync.Tool`` (as a client lists it) is taken in its wire form,
        so a proxy can re-offer another server's tools. ``arguments`` arrive already checked
        against ``inputSchema``.

        Raises ``ValueError`` for wiring mistakes, which are caught here rather than when a
        client first calls the tool: an empty name, a handler that is not callable, a
        duplicate name, an ``inputSchema`` that is not an object schema, or registering after
        ``serve()`` has started.
        """
        if isinstance(tool, Tool):
            tool = tool.raw or _tool_to_wire(tool)
        if not isinstance(tool, Mapping):
            raise ValueError(f"a tool must be a mapping in wire shape, got {type(tool).__name__}")
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError("a tool needs a non-empty string 'name'")
        if handler is None or not callable(handler):
            raise ValueError(f"the handler of tool {name!r} must be callable, got {handler!r}")
        schema = tool.get("inputSchema", {"type": "object"})
        if not isinstance(schema, Mapping) or schema.get("type") != "object":
            raise ValueError(f"the inputSchema of tool {name!r} must be a JSON object schema "
                             f'with "type": "object", got {schema!r}')
        output_schema = tool.get("outputSchema")
        if output_schema is not None and not isinstance(output_schema, Mapping):
            raise ValueError(f"the outputSchema of tool {name!r} must be a JSON object schema")
        wire: dict[str, Any] = {"name": name}
        for key in _WIRE_ORDER[1:]:
            if key == "inputSchema":
                wire[key] = dict(schema)
            elif tool.get(key) is not None:
                wire[key] = tool[key]
        wire.update((k, v) for k, v in tool.items() if k not in _WIRE_ORDER)
        with self._lock:
            if self._started:
                raise ValueError(f"cannot register tool {name!r}: serve() has already started "
                                 "and the tool list is frozen")
            if name in self._tools:
                raise ValueError(f"a tool named {name!r} is already registered")
            self._tools[name] = ToolEntry(wire, handler)

    @overload
    def tool(self, name: _F, /) -> _F: ...

    @overload
    def tool(self, name: str | None = None, description: str | None = None,
             output_schema: Mapping[str, Any] | None = None,
             annotations: Mapping[str, Any] | None = None) -> Callable[[_F], _F]: ...

    def tool(self, name: str | Callable[..., Any] | None = None,
             description: str | None = None,
             output_schema: Mapping[str, Any] | None = None,
             annotations: Mapping[str, Any] | None = None) -> Any:
        """Decorator: register a typed function as a tool, deriving its input schema.

        The name defaults to the function's, the description to its cleaned docstring. With
        ``output_schema`` the return value is sent as ``structuredContent`` (plus a text block
        of its JSON). A parameter annotated :class:`Context`, or named ``ctx``, receives the
        handler context. An annotation that cannot be expressed as JSON Schema raises
        ``ValueError`` here, naming the parameter. The function is returned unchanged.
        ``@server.tool`` without parentheses works too.
        """
        if callable(name):
            return self.tool()(name)

        def decorate(func: _F) -> _F:
            signature = signature_of(func, Context)
            wire: dict[str, Any] = {"name": name or func.__name__}
            text = description if description is not None else describe(func)
            if text is not None:
                wire["description"] = text
            wire["inputSchema"] = signature.input_schema
            if output_schema is not None:
                wire["outputSchema"] = dict(output_schema)
            if annotations is not None:
                wire["annotations"] = dict(annotations)
            self.register_tool(wire, _call_with_kwargs(func, signature))
            return func

        return decorate

    def serve(self, stdin: IO[bytes] | None = None, stdout: IO[bytes] | None = None,
              stop: threading.Event | None = None) -> None:
        """Serve MCP over newline-delimited JSON until end of input or ``stop`` is set.

        ``stdin``/``stdout`` are binary streams; by default the process's own, in which case
        fd 1 is diverted to stderr while serving so nothing but protocol reaches the client.
        ``sys.stdout`` points at stderr while serving, in every case. Returns ``None`` at end
        of input (after answering what was received, 2 s at most) and within 100 ms of
        ``stop`` being set. A fatal stream error (an oversized line, a broken pipe) is
        reported on stderr and raised as ``mcpsync.jsonrpc.StreamError``. Call it once.
        """
        with self._lock:
            if self._started:
                raise RuntimeError("serve() may be called only once per Server")
            self._started = True
        run(self._dispatcher_factory(), stdin=stdin, stdout=stdout, stop=stop,
            concurrency=self.concurrency, max_frame_bytes=self.max_frame_bytes,
            max_queued=self.max_queued, max_queued_bytes=self.max_queued_bytes)

    def _open_memory(self, deliver: Callable[[bytes | None], None]) -> MemoryPeer:
        """Answer an in-process client (``mcpsync.connect(server)``): see ``_memory``.

        The tools registered so far are served; this neither freezes the registry nor counts
        as ``serve()``, which may still be called afterwards.
        """
        return MemoryPeer(self._dispatcher_factory(), deliver, name=self.name,
                          concurrency=self.concurrency, max_queued=self.max_queued,
                          max_queued_bytes=self.max_queued_bytes)

    def _dispatcher_factory(self) -> Callable[[Send, Callable[[list[Message]], None]],
                                              Dispatcher]:
        """A maker of routers over the tools registered now, for one connection."""
        with self._lock:
            tools = dict(self._tools)
        identity = ServerIdentity(self.name, self.version, self.title, self.instructions)

        def make_dispatcher(send: Send,
                            send_batch: Callable[[list[Message]], None]) -> Dispatcher:
            return Dispatcher(identity, tools, send, send_batch)

        return make_dispatcher


def _check_positive(field: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{field} must be a positive integer, got {value!r}")


def _tool_to_wire(tool: Tool) -> dict[str, Any]:
    """A hand-built ``Tool`` (no wire dict kept) in wire shape."""
    wire: dict[str, Any] = {"name": tool.name, "title": tool.title,
                            "description": tool.description,
                            "inputSchema": tool.input_schema or {"type": "object"},
                            "outputSchema": tool.output_schema, "annotations": tool.annotations,
                            "icons": tool.icons, "_meta": tool.meta, **tool.extra}
    return {key: value for key, value in wire.items() if value is not None}


def _call_with_kwargs(func: Callable[..., Any], signature: ToolSignature) -> ToolHandler:
    """Adapt a typed function to ``handler(arguments, ctx)``: arguments become keywords."""

    def handler(arguments: dict[str, Any], ctx: Context) -> Any:
        kwargs = {name: arguments[name] for name in signature.params if name in arguments}
        for name in signature.tuple_params:
            if isinstance(kwargs.get(name), list):
                kwargs[name] = tuple(kwargs[name])
        for name in signature.params:
            if name not in kwargs and name not in signature.defaults:
                kwargs[name] = None  # Optional[T] without a default: absent means None
        if signature.context_param is not None:
            kwargs[signature.context_param] = ctx
        return func(**kwargs)

    return handler
