"""An MCP server serving both protocol eras: tools, resources, prompts, completion.

Wrap Python functions as MCP tools, resources and prompts and serve them over stdio, in
process (``mcpsync.connect(server)``), or (with ``run()``) from the command line::

    from mcpsync.server import Context, Server

    server = Server("calc", "1.0")

    @server.tool()
    def add(a: float, b: float) -> float:
        \"\"\"Add two numbers.\"\"\"
        return a + b

    server.serve()          # stdin/stdout until end of input

Each request is served under the era it asks for: a request whose ``params._meta`` carries
``io.modelcontextprotocol/protocolVersion`` gets 2026-07-28 rules, and a successful
``initialize`` selects legacy rules for the requests without it. The registry is live
(``_registry``): ``add_tool`` / ``remove_tool`` and friends change it while serving and tell
every connection. How each message is answered lives in ``_router``, the threads in ``_loop``
(stdio) and ``_memory`` (in process), the handler context in ``_context``.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar, overload

from mcpsync.jsonrpc import MAX_FRAME_BYTES, Message
from mcpsync.server._bus import NotificationBus
from mcpsync.server._context import Context
from mcpsync.server._intake import DEFAULT_MAX_QUEUED_BYTES
from mcpsync.server._loop import run
from mcpsync.server._memory import MemoryPeer
from mcpsync.server._registry import (
    CompletionEntry,
    PromptEntry,
    Registry,
    ResourceEntry,
    TemplateEntry,
    ToolEntry,
)
from mcpsync.server._router import Dispatcher, Send
from mcpsync.server._schema import ToolSignature, describe, signature_of
from mcpsync.server._services import CACHE_SCOPES, ServerIdentity, ServerSettings
from mcpsync.server._tasks import TASK_SUPPORT
from mcpsync.server._uritemplate import UriTemplate
from mcpsync.server.http._app import McpApp
from mcpsync.server.http._auth import ProtectedApp, TokenVerifier
from mcpsync.server.http._workers import check_workers
from mcpsync.types import Tool

if TYPE_CHECKING:
    from mcpsync.server.http._django import DjangoView

__all__ = ["Context", "Server", "ToolHandler"]

ToolHandler = Callable[[dict[str, Any], Context], Any]
"""What ``register_tool`` takes: called as ``handler(arguments, ctx)``."""

_F = TypeVar("_F", bound=Callable[..., Any])
_ADVERTISABLE = ("resources", "prompts", "completions")
_WIRE_ORDER = ("name", "title", "description", "inputSchema", "outputSchema", "annotations")


class Server:
    """An MCP server: register tools, resources and prompts, then serve.

    ``concurrency`` is how many handlers may run at once (1: answered in arrival order).
    ``max_frame_bytes`` bounds one incoming line; a longer one ends ``serve()`` with
    ``StreamError``, because the stream cannot be resynchronised after it. ``max_queued``
    (default ``2 * concurrency``) requests and ``max_queued_bytes`` (4 MiB) of their lines wait
    for a handler, and as many bytes again are read ahead; beyond that the server stops reading
    and a client that floods it is held back by the pipe (``docs/server.md``).

    ``state_keys`` seal the 2026-07-28 ``requestState`` of handlers that ask the client for
    input (default: ``MCPSYNC_STATE_KEY`` from the environment, else a key for this process
    only); give every worker process the same keys so that any of them can resume a round.
    ``ask_timeout`` bounds how long a legacy handler waits for the client to answer an ask.
    ``cache_ttl_ms`` / ``cache_scope`` are the 2026-07-28 caching hints of lists, discovery and
    reads (a resource may override them); ``cache_scope`` not given is ``"public"``, or
    ``"private"`` on an endpoint that requires an access token (``wsgi_app(token_verifier=)``).
    Capabilities follow what is registered (tools
    always; resources, prompts, completions once one exists); ``advertise`` names the kinds
    to offer from the start when the first one is added while serving.
    """

    def __init__(self, name: str, version: str, *, title: str | None = None,
                 instructions: str | None = None, concurrency: int = 1,
                 max_frame_bytes: int = MAX_FRAME_BYTES, max_queued: int | None = None,
                 max_queued_bytes: int = DEFAULT_MAX_QUEUED_BYTES,
                 state_keys: Sequence[str | bytes] | None = None, ask_timeout: float = 300.0,
                 cache_ttl_ms: int = 60_000, cache_scope: str | None = None,
                 advertise: Sequence[str] = ()) -> None:
        _check_positive("concurrency", concurrency)
        _check_positive("max_frame_bytes", max_frame_bytes)
        if max_queued is None:
            max_queued = 2 * concurrency
        _check_positive("max_queued", max_queued)
        _check_positive("max_queued_bytes", max_queued_bytes)
        if not (isinstance(ask_timeout, (int, float)) and ask_timeout > 0):
            raise ValueError(f"ask_timeout must be a positive number of seconds, got "
                             f"{ask_timeout!r}")
        ttl, scope = _check_cache(cache_ttl_ms, cache_scope)
        unknown = sorted(set(advertise) - set(_ADVERTISABLE))
        if unknown or isinstance(advertise, str):
            raise ValueError(f"advertise takes a list of {', '.join(_ADVERTISABLE)}, got "
                             f"{advertise!r}")
        self.name = name
        self.version = version
        self.title = title
        self.instructions = instructions
        self.concurrency = concurrency
        self.max_frame_bytes = max_frame_bytes
        self.max_queued = max_queued
        self.max_queued_bytes = max_queued_bytes
        self._registry = Registry()
        self._lock = threading.Lock()
        self._started = False
        self._state_keys = None if state_keys is None else list(state_keys)
        self._sealer: Any = None
        if self._state_keys is not None or os.environ.get("MCPSYNC_STATE_KEY") is not None:
            self._make_sealer()   # a bad key is a wiring mistake: say so at startup
            self._state_keys = None   # derived into the sealer: keep no raw secret around
        self._keys_shared = self._sealer is not None   # the same in every worker process
        self._settings = ServerSettings(
            ServerIdentity(name, version, title, instructions), self._registry,
            self._make_sealer, float(ask_timeout), 60_000 if ttl is None else ttl,
            scope, frozenset(advertise))

    def __repr__(self) -> str:
        return f"<Server {self.name!r} {self.version!r}>"

    def _make_sealer(self) -> Any:
        with self._lock:
            if self._sealer is None:
                importlib.import_module("mcpsync.server._state")
                from mcpsync.server._state import StateSealer

                self._sealer = StateSealer(self.name, self._state_keys)
            return self._sealer

    # -- tools -------------------------------------------------------------------------------

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The registered tools as ``tools/list`` shows them, in registration order."""
        return [dict(wire) for wire in self._registry.tool_list]

    def register_tool(self, tool: Mapping[str, Any] | Tool, handler: ToolHandler, *,
                      polling: bool = False, rounds_first: bool = False) -> None:
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
        ``serve()`` has started (the declared set is fixed then; :meth:`add_tool` is the way
        to change tools while serving). ``polling``, ``rounds_first``: as for :meth:`tool`;
        task support is the description's ``execution.taskSupport``.
        """
        entry = _tool_entry(tool, handler, polling=polling, rounds_first=rounds_first)
        with self._lock:
            if self._started:
                raise ValueError(f"cannot register tool {entry.wire['name']!r}: serve() has "
                                 "already started; use add_tool() to add tools while serving")
        self._registry.add_tool(entry)

    def add_tool(self, tool: Mapping[str, Any] | Tool | Callable[..., Any],
                 handler: ToolHandler | None = None, *, replace: bool = False,
                 **options: Any) -> None:
        """Add a tool to the live registry, at any time (also while serving), and tell every
        connected client that the tool list changed.

        Either a typed function (as ``@server.tool()`` takes it; ``options`` are that
        decorator's ``name``, ``description``, ``output_schema``, ``annotations``,
        ``polling``) or a wire description with its ``handler(arguments, ctx)`` (as
        :meth:`register_tool`).
        ``replace=True`` replaces a tool of the same name instead of raising.
        """
        polling = bool(options.pop("polling", False))
        rounds_first = bool(options.pop("rounds_first", False))
        if handler is None:
            if not callable(tool) or isinstance(tool, (Mapping, Tool)):
                raise ValueError("add_tool() takes a function, or a tool description and its "
                                 "handler")
            wire, handler = _function_tool(tool, **options)
            entry = _tool_entry(wire, handler, polling=polling, rounds_first=rounds_first)
        else:
            if options:
                raise ValueError(f"add_tool() with a handler takes no options but polling "
                                 f"and rounds_first: {sorted(options)}")
            entry = _tool_entry(tool, handler, polling=polling,  # type: ignore[arg-type]
                                rounds_first=rounds_first)
        self._registry.add_tool(entry, replace=replace)

    def remove_tool(self, name: str) -> bool:
        """Remove a tool from the live registry (False if there was none) and tell every
        connected client. A call already running finishes."""
        return self._registry.remove_tool(name)

    @overload
    def tool(self, name: _F, /) -> _F: ...

    @overload
    def tool(self, name: str | None = None, description: str | None = None,
             output_schema: Mapping[str, Any] | None = None,
             annotations: Mapping[str, Any] | None = None, *,
             polling: bool = False, task: str | None = None,
             rounds_first: bool = False) -> Callable[[_F], _F]: ...

    def tool(self, name: str | Callable[..., Any] | None = None,
             description: str | None = None,
             output_schema: Mapping[str, Any] | None = None,
             annotations: Mapping[str, Any] | None = None, *, polling: bool = False,
             task: str | None = None, rounds_first: bool = False) -> Any:
        """Decorator: register a typed function as a tool, deriving its input schema.

        The name defaults to the function's, the description to its cleaned docstring. With
        ``output_schema`` the return value is sent as ``structuredContent`` (plus a text block
        of its JSON). A parameter annotated :class:`Context`, or named ``ctx``, receives the
        handler context. An annotation that cannot be expressed as JSON Schema raises
        ``ValueError`` here, naming the parameter. The function is returned unchanged.
        ``@server.tool`` without parentheses works too. ``polling=True`` lets a long call
        end its HTTP connection early with :meth:`Context.close_stream` (SSE polling); such
        a call costs a thread of its own over HTTP, so only tools that use it ask for it.

        ``task`` (``"forbidden"``, the default, ``"optional"`` or ``"required"``) lets
        2026-07-28 clients that declare the tasks extension get a task for the call instead
        of waiting for its result (``docs/tasks.md``, "Serving tasks"); ``"required"``
        refuses clients that do not (-32021). ``rounds_first=True``: the handler first asks in
        ``input_required`` rounds and becomes a task where it calls ``ctx.start_task()``.
        """
        if callable(name):
            return self.tool()(name)
        if task is not None and task not in TASK_SUPPORT:
            raise ValueError(f"task must be one of {', '.join(TASK_SUPPORT)}, got {task!r}")
        if rounds_first and task in (None, "forbidden"):
            raise ValueError("rounds_first=True needs task='optional' or task='required'")

        def decorate(func: _F) -> _F:
            wire, handler = _function_tool(func, name=name, description=description,
                                           output_schema=output_schema,
                                           annotations=annotations)
            if task is not None and task != "forbidden":
                wire["execution"] = {"taskSupport": task}
            self.register_tool(wire, handler, polling=polling, rounds_first=rounds_first)
            return func

        return decorate

    # -- skills ------------------------------------------------------------------------------

    def serve_skills(self, directory: str | os.PathLike[str]) -> list[str]:
        """Serve the skills of ``directory`` (one subfolder per skill, each with a
        ``SKILL.md``): their files become ``skill://`` resources, and ``skills/list``,
        ``skills/get`` and ``resources/directory/read`` answer for them. Returns the
        ``SKILL.md`` URIs. ``ValueError`` names the file for a skill that cannot be served.
        """
        importlib.import_module("mcpsync.server._skills")
        from mcpsync.server._skills import SkillCatalog

        catalog = SkillCatalog.load(Path(directory))
        for item in catalog.files:
            entry = catalog.entries.get(item.uri)
            frontmatter = entry["frontmatter"] if entry is not None else {}
            self.resource(item.uri, name=str(frontmatter.get("name", item.uri.rsplit("/", 1)[1])),
                          description=frontmatter.get("description"),
                          mime_type=item.mime_type, size=item.size)(catalog.reader(item))
        self._settings.skills = catalog
        return list(catalog.entries)

    # -- resources ---------------------------------------------------------------------------

    def resource(self, uri: str, *, name: str | None = None, title: str | None = None,
                 description: str | None = None, mime_type: str | None = None,
                 size: int | None = None, annotations: Mapping[str, Any] | None = None,
                 ttl_ms: int | None = None,
                 cache_scope: str | None = None) -> Callable[[_F], _F]:
        """Decorator: the function returns the contents of the resource at ``uri``.

        It takes no arguments (or only the context) and returns ``str`` (text), ``bytes``
        (a blob), ``ResourceContents`` or a list of them, or ``None`` for "not found".
        ``ttl_ms`` / ``cache_scope`` override the server's caching hints for this resource.
        Can be used while serving: the list change is announced.
        """
        def decorate(func: _F) -> _F:
            self.add_resource(uri, func, name=name, title=title, description=description,
                              mime_type=mime_type, size=size, annotations=annotations,
                              ttl_ms=ttl_ms, cache_scope=cache_scope)
            return func

        return decorate

    def add_resource(self, uri: str, func: Callable[..., Any], *, name: str | None = None,
                     title: str | None = None, description: str | None = None,
                     mime_type: str | None = None, size: int | None = None,
                     annotations: Mapping[str, Any] | None = None, ttl_ms: int | None = None,
                     cache_scope: str | None = None) -> None:
        """The non-decorator form of :meth:`resource`."""
        if not isinstance(uri, str) or not uri or any(c.isspace() for c in uri):
            raise ValueError(f"a resource needs a URI without spaces, got {uri!r}")
        params = _plain_params(func, "resource", uri)
        if params.names:
            raise ValueError(f"the function of resource {uri!r} takes {list(params.names)}; a "
                             "fixed resource takes no arguments (use resource_template() for "
                             "URIs with variables)")
        ttl, scope = _check_cache(ttl_ms, cache_scope)
        wire = _drop_none({"uri": uri, "name": name or func.__name__, "title": title,
                           "description": description if description is not None
                           else describe(func), "mimeType": mime_type, "size": size,
                           "annotations": dict(annotations) if annotations else None})
        self._registry.add_resource(ResourceEntry(wire, params.caller(func), ttl, scope))

    def resource_template(self, uri_template: str, *, name: str | None = None,
                          title: str | None = None, description: str | None = None,
                          mime_type: str | None = None,
                          annotations: Mapping[str, Any] | None = None,
                          ttl_ms: int | None = None,
                          cache_scope: str | None = None) -> Callable[[_F], _F]:
        """Decorator: the function reads every resource whose URI matches ``uri_template``
        (RFC 6570); the template's variables arrive as its keyword arguments (strings).
        Its return value is as for :meth:`resource`."""
        def decorate(func: _F) -> _F:
            self.add_resource_template(uri_template, func, name=name, title=title,
                                       description=description, mime_type=mime_type,
                                       annotations=annotations, ttl_ms=ttl_ms,
                                       cache_scope=cache_scope)
            return func

        return decorate

    def add_resource_template(self, uri_template: str, func: Callable[..., Any], *,
                              name: str | None = None, title: str | None = None,
                              description: str | None = None, mime_type: str | None = None,
                              annotations: Mapping[str, Any] | None = None,
                              ttl_ms: int | None = None,
                              cache_scope: str | None = None) -> None:
        """The non-decorator form of :meth:`resource_template`."""
        template = UriTemplate(uri_template)
        params = _plain_params(func, "resource template", uri_template)
        missing = [v for v in template.variables if v not in params.names]
        extra = [p for p in params.names if p not in template.variables
                 and p not in params.defaults]
        if missing or extra:
            raise ValueError(f"the function of resource template {uri_template!r} must take "
                             f"the template's variables {list(template.variables)} as "
                             f"parameters (missing: {missing}, not in the template: {extra})")
        ttl, scope = _check_cache(ttl_ms, cache_scope)
        wire = _drop_none({"uriTemplate": uri_template, "name": name or func.__name__,
                           "title": title, "description": description if description
                           is not None else describe(func), "mimeType": mime_type,
                           "annotations": dict(annotations) if annotations else None})
        self._registry.add_template(TemplateEntry(wire, template, params.caller(func), ttl,
                                                  scope))

    def remove_resource(self, uri: str) -> bool:
        """Remove a fixed resource or a template (by its template text); announce the change."""
        return self._registry.remove_resource(uri) or self._registry.remove_template(uri)

    def notify_resource_updated(self, uri: str) -> None:
        """Tell every client subscribed to ``uri`` that it changed (legacy
        ``resources/subscribe``, or a 2026-07-28 listen naming it)."""
        self._registry.resource_updated(uri)

    def use_notification_bus(self, bus: NotificationBus) -> None:
        """Announce changes through ``bus`` (a :class:`~mcpsync.server.UnixSocketBus` shared
        by the worker processes of one host, or your own), so that a client listening in one
        worker hears of a change made in another. The default bus reaches this process's
        clients only."""
        if not isinstance(bus, NotificationBus):
            raise TypeError(f"a notification bus has publish() and subscribe(), got {bus!r}")
        self._registry.use_bus(bus)

    # -- prompts and completion --------------------------------------------------------------

    def prompt(self, name: str | None = None, *, title: str | None = None,
               description: str | None = None) -> Callable[[_F], _F]:
        """Decorator: a function building a prompt from string arguments.

        Its parameters are the prompt's arguments (required unless they have a default); it
        returns a string (one user message) or a list of messages (``(role, content)`` pairs,
        ``{"role", "content"}`` dicts or ``PromptMessage``), content being a string or a
        content block (text, image, audio, embedded resource, resource link).
        """
        def decorate(func: _F) -> _F:
            self.add_prompt(func, name=name, title=title, description=description)
            return func

        return decorate

    def add_prompt(self, func: Callable[..., Any], *, name: str | None = None,
                   title: str | None = None, description: str | None = None) -> None:
        """The non-decorator form of :meth:`prompt`; usable while serving."""
        prompt_name = name or func.__name__
        params = _plain_params(func, "prompt", prompt_name)
        arguments = []
        for pname in params.names:
            arg: dict[str, Any] = {"name": pname}
            if pname not in params.defaults:
                arg["required"] = True
            arguments.append(arg)
        wire = _drop_none({"name": prompt_name, "title": title,
                           "description": description if description is not None
                           else describe(func)})
        if arguments:
            wire["arguments"] = arguments
        self._registry.add_prompt(PromptEntry(wire, params.caller(func)))

    def remove_prompt(self, name: str) -> bool:
        """Remove a prompt from the live registry and announce the change."""
        return self._registry.remove_prompt(name)

    def completion(self, ref: str | Mapping[str, Any] | None = None, *,
                   prompt: str | None = None,
                   resource: str | None = None) -> Callable[[_F], _F]:
        """Decorator: complete the arguments of a prompt or the variables of a resource
        template.

        Name what it completes as the protocol does, ``ref={"type": "ref/prompt", "name":
        ...}`` or ``{"type": "ref/resource", "uri": ...}``, or as the client's ``complete()``
        takes it: a string is a resource URI (template) when it contains ``://``, else a
        prompt name; or by keyword, ``prompt=name`` / ``resource=template``.
        The function is called as ``func(argument, value, context)``: the argument's name,
        what the user typed so far, and the arguments already filled in. It returns a list of
        strings (the first 100 are sent) or ``{"values": [...], "total": n, "hasMore": b}``.
        """
        given = [x for x in (ref, prompt, resource) if x is not None]
        if len(given) != 1:
            raise ValueError("completion() takes exactly one of ref, prompt= and resource=")
        if isinstance(ref, Mapping):
            kind = ref.get("type")
            name = ref.get("name") if kind == "ref/prompt" else ref.get("uri")
            if kind not in ("ref/prompt", "ref/resource") or not isinstance(name, str):
                raise ValueError(f"completion(): a ref is {{'type': 'ref/prompt', 'name': ...}} "
                                 f"or {{'type': 'ref/resource', 'uri': ...}}, got {dict(ref)!r}")
            key = (str(kind), name)
        elif isinstance(ref, str):
            key = ("ref/resource", ref) if "://" in ref else ("ref/prompt", ref)
        elif prompt is not None:
            key = ("ref/prompt", prompt)
        else:
            key = ("ref/resource", str(resource))

        def decorate(func: _F) -> _F:
            self._registry.add_completion(key, CompletionEntry(func))
            return func

        return decorate

    # -- serving -----------------------------------------------------------------------------

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

    def run(self, argv: Sequence[str] | None = None) -> None:
        """The entry point of a server script: ``python server.py`` serves stdio, and
        ``python server.py --http HOST:PORT`` serves Streamable HTTP at
        ``http://HOST:PORT/mcp`` (see :meth:`serve_http`) until Ctrl-C."""
        parser = argparse.ArgumentParser(prog=self.name, description=f"MCP server {self.name}")
        parser.add_argument("--http", metavar="HOST:PORT",
                            help="serve Streamable HTTP on HOST:PORT instead of stdio")
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
        if args.http is not None:
            host, sep, port = str(args.http).rpartition(":")
            if not sep or not port.isdigit() or not host:
                parser.exit(2, f"{self.name}: --http {args.http}: expected HOST:PORT, such as "
                               "127.0.0.1:8000\n")
            try:
                self.serve_http(host.strip("[]"), int(port))
            except (OSError, ValueError) as exc:
                parser.exit(1, f"{self.name}: --http {args.http}: {exc}\n")
            return
        self.serve()

    @overload
    def wsgi_app(self, path: str = "/mcp", *, allowed_hosts: Sequence[str] | None = None,
                 max_sessions: int = 256,
                 session_idle_timeout: float | None = 1800.0, token_verifier: None = None,
                 resource: str | None = None, authorization_servers: Sequence[str] = (),
                 scopes: Sequence[str] = ()) -> McpApp: ...

    @overload
    def wsgi_app(self, path: str = "/mcp", *, allowed_hosts: Sequence[str] | None = None,
                 max_sessions: int = 256,
                 session_idle_timeout: float | None = 1800.0, token_verifier: TokenVerifier,
                 resource: str | None = None, authorization_servers: Sequence[str] = (),
                 scopes: Sequence[str] = ()) -> ProtectedApp: ...

    def wsgi_app(self, path: str = "/mcp", *, allowed_hosts: Sequence[str] | None = None,
                 max_sessions: int = 256,
                 session_idle_timeout: float | None = 1800.0,
                 token_verifier: TokenVerifier | None = None,
                 resource: str | None = None, authorization_servers: Sequence[str] = (),
                 scopes: Sequence[str] = ()) -> McpApp | ProtectedApp:
        """This server as a WSGI application answering MCP Streamable HTTP at ``path``, in
        both eras, for gunicorn or any WSGI server that supports ``write()`` and streams.

        ``allowed_hosts``: the names ``Host`` and ``Origin`` may carry (``"name"`` for any
        port, ``"name:port"``, ``"*"`` for any); by default loopback only. Call the app's
        ``close()`` when done, to end its sessions and open streams.
        ``session_idle_timeout``: seconds after which a legacy session with no request and
        no open stream is ended (its calls cancelled, its id answered 404); ``None``: never.

        With ``token_verifier`` (``verifier(token) -> AccessToken | None``, such as
        :class:`~mcpsync.server.http.IntrospectionVerifier`) every request needs an OAuth
        bearer token issued for ``resource`` (default: this endpoint's URL as the request
        names it) carrying every one of ``scopes``; the RFC 9728 metadata names
        ``authorization_servers``. Cache hints then default to ``cacheScope: "private"``.
        """
        check_workers(self.name, keys_shared=self._keys_shared)
        registry = self._registry

        def tool_schema(name: str) -> Any:
            entry = registry.tools.get(name)
            return None if entry is None else entry.wire.get("inputSchema")

        def tool_polls(name: str) -> bool:
            entry = registry.tools.get(name)
            return entry is not None and entry.polling

        make_dispatcher = self._dispatcher_factory()
        if token_verifier is not None and self._settings.cache_scope is None:
            # Answers to an authenticated caller are that caller's: no shared cache may
            # keep them. An explicit Server(cache_scope=) is taken as meant.
            settings = dataclasses.replace(self._settings, cache_scope="private")

            def make_dispatcher(send: Send,
                                send_batch: Callable[[list[Message]], None]) -> Dispatcher:
                return Dispatcher(settings, send, send_batch)

        if token_verifier is None and (resource is not None or authorization_servers
                                       or scopes):
            raise ValueError(f"MCP server {self.name!r}: resource, authorization_servers and "
                             "scopes describe a protected endpoint; pass token_verifier= too")
        app = McpApp(make_dispatcher, name=self.name, path=path,
                     allowed_hosts=allowed_hosts, tool_schema=tool_schema,
                     tool_polls=tool_polls, max_sessions=max_sessions,
                     session_idle_timeout=session_idle_timeout)
        if token_verifier is None:
            return app
        return ProtectedApp(app, token_verifier, resource=resource,
                            authorization_servers=authorization_servers, scopes=scopes,
                            allowed_hosts=allowed_hosts)

    def serve_http(self, host: str = "127.0.0.1", port: int = 8000, *, path: str = "/mcp",
                   allowed_hosts: Sequence[str] | None = None, max_sessions: int = 256,
                   session_idle_timeout: float | None = 1800.0,
                   stop: threading.Event | None = None,
                   ready: Callable[[str], None] | None = None,
                   token_verifier: TokenVerifier | None = None, resource: str | None = None,
                   authorization_servers: Sequence[str] = (), scopes: Sequence[str] = (),
                   **options: Any) -> None:
        """Serve Streamable HTTP on the built-in server until Ctrl-C or ``stop`` is set.

        ``ready(url)`` is called once clients can connect (with port 0 the URL names the port
        picked). ``token_verifier``, ``resource``, ``authorization_servers`` and ``scopes``
        protect the endpoint with OAuth, as for :meth:`wsgi_app`. ``options`` go to
        :class:`~mcpsync.server.http.WsgiServer` (``max_connections``, ``header_timeout``,
        ...). Each connection holds a thread, open streams included, so ``max_connections``
        bounds the clients served at once.
        """
        importlib.import_module("mcpsync.server.http")
        from mcpsync.server.http import WsgiServer

        app: McpApp | ProtectedApp
        if token_verifier is None:
            app = self.wsgi_app(path, allowed_hosts=allowed_hosts, max_sessions=max_sessions,
                                session_idle_timeout=session_idle_timeout, resource=resource,
                                authorization_servers=authorization_servers, scopes=scopes)
        else:
            app = self.wsgi_app(path, allowed_hosts=allowed_hosts, max_sessions=max_sessions,
                                session_idle_timeout=session_idle_timeout,
                                token_verifier=token_verifier, resource=resource,
                                authorization_servers=authorization_servers, scopes=scopes)
        server = WsgiServer(app, host, port, name=options.pop("name", "http"), **options)
        try:
            server.start()
            if ready is not None:
                ready(server.url + path)
            else:
                print(f"{self.name}: serving MCP at {server.url}{path}", file=sys.stderr)
            waiter = stop if stop is not None else threading.Event()
            try:
                while not waiter.wait(0.2):
                    pass
            except KeyboardInterrupt:
                pass
        finally:
            app.close()
            server.close()

    def django_view(self, *, allowed_hosts: Sequence[str] | None = None,
                    max_sessions: int = 256) -> DjangoView:
        """This server as a Django view (csrf-exempt) answering MCP Streamable HTTP in both
        eras at whatever URL pattern routes to it: ``path("mcp", server.django_view())``.

        Each request runs the endpoint on a thread of its own (``mcpsync-django-<n>``) so
        that event streams can go out through a ``StreamingHttpResponse``. ``allowed_hosts``
        is checked as by :meth:`wsgi_app`, besides Django's own ``ALLOWED_HOSTS``. Needs
        Django, which is imported only when a request arrives.
        """
        importlib.import_module("mcpsync.server.http._django")
        from mcpsync.server.http._django import DjangoView

        return DjangoView(self.wsgi_app(allowed_hosts=allowed_hosts,
                                        max_sessions=max_sessions))

    def _open_memory(self, deliver: Callable[[bytes | None], None]) -> MemoryPeer:
        """Answer an in-process client (``mcpsync.connect(server)``): see ``_memory``.

        This neither freezes the registry nor counts as ``serve()``, which may still be
        called afterwards.
        """
        return MemoryPeer(self._dispatcher_factory(), deliver, name=self.name,
                          concurrency=self.concurrency, max_queued=self.max_queued,
                          max_queued_bytes=self.max_queued_bytes)

    def _dispatcher_factory(self) -> Callable[[Send, Callable[[list[Message]], None]],
                                              Dispatcher]:
        """A maker of routers over the live registry, one per connection."""
        settings = self._settings

        def make_dispatcher(send: Send,
                            send_batch: Callable[[list[Message]], None]) -> Dispatcher:
            return Dispatcher(settings, send, send_batch)

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


def _check_cache(ttl_ms: Any, scope: Any) -> tuple[int | None, str | None]:
    if ttl_ms is not None and (not isinstance(ttl_ms, int) or isinstance(ttl_ms, bool)
                               or ttl_ms < 0):
        raise ValueError(f"ttl_ms must be a non-negative integer (milliseconds), got {ttl_ms!r}")
    if scope is not None and scope not in CACHE_SCOPES:
        raise ValueError(f"cache_scope must be one of {', '.join(CACHE_SCOPES)}, got {scope!r}")
    return ttl_ms, scope


def _drop_none(wire: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in wire.items() if value is not None}


def _tool_entry(tool: Mapping[str, Any] | Tool, handler: ToolHandler, *,
                polling: bool = False, rounds_first: bool = False) -> ToolEntry:
    """Check a wire tool description and its handler (``ValueError`` for wiring mistakes)."""
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
    execution = wire.get("execution")
    support = execution.get("taskSupport") if isinstance(execution, Mapping) else None
    if support is not None and support not in TASK_SUPPORT:
        raise ValueError(f"the execution.taskSupport of tool {name!r} must be one of "
                         f"{', '.join(TASK_SUPPORT)}, got {support!r}")
    return ToolEntry(wire, handler, polling, rounds_first)


def _function_tool(func: Callable[..., Any], *, name: str | None = None,
                   description: str | None = None,
                   output_schema: Mapping[str, Any] | None = None,
                   annotations: Mapping[str, Any] | None = None
                   ) -> tuple[dict[str, Any], ToolHandler]:
    """The wire description and handler of a typed function (what ``@tool`` registers)."""
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
    return wire, _call_with_kwargs(func, signature)


class _PlainParams:
    """The parameters of a prompt or resource function: names (strings on the wire), those
    with defaults, and the one receiving the context."""

    def __init__(self, names: tuple[str, ...], defaults: frozenset[str],
                 context_param: str | None) -> None:
        self.names = names
        self.defaults = defaults
        self.context_param = context_param

    def caller(self, func: Callable[..., Any]) -> Callable[[dict[str, Any], Any], Any]:
        names, context_param = self.names, self.context_param

        def handler(arguments: dict[str, Any], ctx: Any) -> Any:
            kwargs = {k: v for k, v in arguments.items() if k in names}
            if context_param is not None:
                kwargs[context_param] = ctx
            return func(**kwargs)

        return handler


def _plain_params(func: Callable[..., Any], what: str, label: str) -> _PlainParams:
    if not callable(func):
        raise ValueError(f"the {what} {label!r} needs a callable, got {func!r}")
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"cannot read the signature of the {what} function for {label!r}: "
                         f"{exc}") from exc
    names: list[str] = []
    defaults: set[str] = set()
    context_param: str | None = None
    for pname, param in sig.parameters.items():
        annotation = param.annotation
        if annotation is Context or annotation == "Context" or (
                pname == "ctx" and annotation is inspect.Parameter.empty):
            context_param = pname
            continue
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD,
                          inspect.Parameter.POSITIONAL_ONLY):
            raise ValueError(f"parameter {pname!r} of the {what} function for {label!r}: "
                             "only named parameters can receive arguments")
        names.append(pname)
        if param.default is not inspect.Parameter.empty:
            defaults.add(pname)
    return _PlainParams(tuple(names), frozenset(defaults), context_param)

