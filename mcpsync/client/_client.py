"""The user-facing client: :func:`connect` and :class:`Client`.

``connect()`` turns a command (a string split with :func:`shlex.split`, or an argv list) or a
:class:`~mcpsync.config.ServerConfig` into a connected :class:`Client`, the way
``requests.get`` turns a URL into a response: it has no behaviour of its own. The ``Client``
is a thin layer over one :class:`~mcpsync.session.Session`: it adds the era handshake, the
modern ``_meta``, the input-required loop, pagination, caching, subscriptions and restarts,
and turns wire dicts into the dataclasses of :mod:`mcpsync.types`.

Thread contract: every method is safe to call from any number of threads at once, including
from inside a sampling/elicitation/roots callback and from a running asyncio event loop (the
calls block the calling thread; nothing here touches asyncio). ``close()`` is idempotent.
"""

from __future__ import annotations

import atexit
import copy
import logging
import math
import os
import sys
import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import mcpsync
from mcpsync.client._cache import ListCache, SkillRegistry
from mcpsync.client._callback_warnings import CallbackGuard
from mcpsync.client._callbacks import (
    Callbacks,
    ElicitationCallback,
    RootsInput,
    SamplingCallback,
    load_module,
    load_requests,
)
from mcpsync.client._finalizer import watch, weak_method
from mcpsync.client._flow import (
    Call,
    Round,
    RoundWorkers,
    call_flow,
    run,
    with_meta,
)
from mcpsync.client._handshake import negotiate
from mcpsync.client._lifecycle import ClientAside, SessionLifecycle, SessionResources
from mcpsync.client._lists import list_all
from mcpsync.client._notifications import Notifications
from mcpsync.client._options import ClientOptions
from mcpsync.client._subscriptions import Subscription, Subscriptions
from mcpsync.client._tools import ToolSchemas, task_required
from mcpsync.config import ServerConfig, logger_name_part
from mcpsync.errors import (
    CapabilityNotSupported,
    ClosedError,
    ConnectionLost,
    MCPError,
    PolicyRefused,
    ProtocolError,
    RemoteError,
    UnsupportedInThisEra,
    UsedAfterFork,
)
from mcpsync.protocol import describe_call, retry_version_from_error
from mcpsync.session import RequestFuture, Session
from mcpsync.session._base import Phase
from mcpsync.transport.base import Transport
from mcpsync.transport.stdio import StdioTransport
from mcpsync.types import CallToolResult, ServerInfo, TextContent, Tool

# The types below are loaded on first use, so the annotations name them through attributes that
# load them when read (``mcpsync.Resource``, ``mcpsync.client._proxies``): a bare name imported
# under TYPE_CHECKING alone would make typing.get_type_hints() raise NameError on Client.
if TYPE_CHECKING:
    import mcpsync.client._connect_http
    import mcpsync.client._proxies
    import mcpsync.transport.memory
    from mcpsync.client._requests import (
        ElicitationRequest as ElicitationRequest,
        SamplingRequest as SamplingRequest,
    )

__all__ = ["Client", "ElicitationRequest", "SamplingRequest", "Subscription"]

_log = logging.getLogger("mcpsync.client")
_new = object.__new__   # _call_tool's plain-text result is made without __init__ (see there)
_SESSION_OPEN = Phase.OPEN   # _call_tool compares the session's phase by identity
# A task's end states and the bound on its tasks/cancel, as in _tasks (not loaded here).
_TASK_ENDS = frozenset(("completed", "failed", "cancelled"))
_TASK_CANCEL_TIMEOUT = 5.0
#: Set on a KeyboardInterrupt whose created task has been seen to (see claim_task_cancel).
_TASK_CLAIMED = "mcpsync_task_cancel_claimed"


# Two modules that only a rarer outcome of call_tool needs load on first use: the names
# _call_tool calls start as loaders that put the real function in their place (as
# ``types._other_block`` does), so later calls run no import statement and _call_tool's
# code is the same.

def _load_check_arguments(server: str, name: str, arguments: Mapping[str, Any] | None,
                          tools: ToolSchemas, relist: Callable[[], object]) -> None:
    """``_arguments.check_arguments``, loaded by the first call that the fast test in
    ``call_tool`` does not pass (a tool the cached list does not name, or a required
    argument that may be missing): a plain ``call_tool`` that passes the fast test never
    loads that module (``submit_tool`` and the task calls import it at their own first
    use)."""
    global check_arguments
    load_module("mcpsync.client._arguments")
    import mcpsync.client._arguments as loaded

    check_arguments = loaded.check_arguments
    check_arguments(server, name, arguments, tools, relist)


def _load_gateway_refusal(exc: RemoteError, server_id: str,
                          tool: str) -> PolicyRefused | None:
    """``_gateway_refusal.gateway_refusal``, loaded by the first error answer of a
    ``gateway=True`` server: other servers never need it."""
    global gateway_refusal
    load_module("mcpsync._gateway_refusal")
    import mcpsync._gateway_refusal as loaded

    gateway_refusal = loaded.gateway_refusal
    return gateway_refusal(exc, server_id, tool)


check_arguments = _load_check_arguments
gateway_refusal = _load_gateway_refusal


def claim_task_cancel(exc: BaseException, task: object) -> bool:
    """For a Ctrl-C during a task call: True for the first handler that asks about ``task``
    (the server's ``CreateTaskResult``, the same object all the way down), which must then
    cancel it or has left that to a ``TaskRun`` that does; False for every handler after
    it. So a task is cancelled once, by the handler nearest to it.

    The claim is a mark on the exception, naming the task (a KeyboardInterrupt raised while
    an earlier one was handled, around another call, is not taken for this one's), set
    before anything that another Ctrl-C could interrupt; that next KeyboardInterrupt has
    this one as its ``__context__``, which is looked at too (a few links: a call's chain
    is short)."""
    seen: BaseException | None = exc
    for _ in range(4):
        if seen is None:
            break
        if seen.__dict__.get(_TASK_CLAIMED, _TASK_CLAIMED) is task:   # never a str task
            return False
        seen = seen.__context__
    exc.__dict__[_TASK_CLAIMED] = task
    return True

ProgressCallback = Callable[[float, "float | None", "str | None"], Any]

_KEYWORD_ONLY: object = object()   # _call_tool's third parameter by default: see there


# The call options a tool proxy passes on to call_tool, with their defaults.
_PROXY_OPTIONS: dict[str, Any] = {"timeout": None, "progress": None, "raise_on_error": False,
                                  "retry_on_drop": False, "meta": None,
                                  "reset_timeout_on_progress": None}

# Clients left open at interpreter exit are closed, so no server outlives the script.
_open_clients: weakref.WeakSet[Client] = weakref.WeakSet()


def _close_open_clients() -> None:
    for client in list(_open_clients):
        try:
            client.close()
        except Exception as exc:  # never let one client's teardown stop the others
            _log.debug("closing %r at exit failed: %s", client, exc)


atexit.register(_close_open_clients)


class Client(SessionLifecycle):
    """A connection to one MCP server over stdio; use :func:`connect` to make one.

    Properties tell what was negotiated: :attr:`era` (``"legacy"``/``"modern"``),
    :attr:`protocol_version`, :attr:`capabilities`, :attr:`instructions`,
    :attr:`server_info`. Blocking calls are safe from many threads at once. A ``Client`` is a
    context manager; ``close()`` is idempotent, and clients still open at interpreter exit are
    closed by an ``atexit`` hook.
    """

    def __init__(self, config: ServerConfig, options: ClientOptions, *,
                 sampling: SamplingCallback | None = None,
                 elicitation: ElicitationCallback | None = None,
                 roots: RootsInput | None = None,
                 http: mcpsync.client._connect_http.HttpSettings | None = None,
                 in_process: Callable[[str], mcpsync.transport.memory.MemoryTransport] | None = None
                 ) -> None:
        # First, before anything close() or the finalizer could read: what the calls never
        # read is kept there (see ClientAside), and set there as the steps below make it.
        aside = self._aside = ClientAside(in_process, http, options.client_info_sent())
        self._config = config
        self._opts = options
        self._name = config.display_name
        aside.safe_name = logger_name_part(self._name)
        aside.server_log = logging.getLogger(f"mcpsync.server.{aside.safe_name}")
        # The subscription thread and the session reach this client only weakly, so that a
        # client nobody holds is collected and its server stopped (see _finalizer).
        me = weakref.ref(self)
        self._pid = os.getpid()
        first_name = self._name
        self._guard = CallbackGuard(lambda: getattr(me(), "_name", first_name))
        self._callbacks = Callbacks(sampling=sampling, elicitation=elicitation, roots=roots,
                                    guard=self._guard)
        self._cache = ListCache()
        self._toolset = ToolSchemas(validate=options.validate_output)
        self._skills = SkillRegistry()
        self._validate_input = options.validate_input
        self._proxies: mcpsync.client._proxies.ToolProxies | None = None
        self._subs = Subscriptions(
            name=self._name, thread_name=f"mcpsync-listen-{aside.safe_name}",
            request=weak_method(self._request, self._gone),
            submit_listen=weak_method(self._submit_listen, self._gone),
            era=lambda: _alive(me)._era, capabilities=lambda: _alive(me)._capabilities,
            ack_timeout=lambda: config.timeout)
        aside.resources = SessionResources(self._subs)
        aside.notes = Notifications(options, server_log=aside.server_log, cache=self._cache,
                                    tools=self._toolset, subs=self._subs,
                                    callbacks=self._callbacks, name=lambda: _alive(me)._name,
                                    guard=self._guard)
        self._state_lock = threading.Lock()      # close and the session swap
        self._closed = False
        self._workers = RoundWorkers(aside.safe_name)   # submitted calls between rounds
        self._log_level = options.log_level
        self._session: Session
        self._transport: Transport | None = None
        # Set by _adopt(); declared here for the type checker.
        self._era = "legacy"
        self._modern = False
        self._protocol_version = ""
        self._capabilities: dict[str, Any] = {}
        self._meta: dict[str, Any] = {}
        self._tool_meta: dict[str, Any] = {}   # _meta plus the Tasks extension, for tools/call
        self._may_task = False   # a 2025-11-25 server that runs tools as tasks
        self._has_tools = False
        # A forced HTTP+SSE transport (2024-11-05) is legacy by definition: no detection.
        era = "legacy" if config.transport == "sse" and options.era == "auto" else options.era
        session, negotiated = negotiate(
            self._open_session, self._handshake_params(), era=era,
            protocol_version=options.protocol_version, memory_key=self._memory_key(),
            allow_probe_restart=http is None)   # an HTTP server cannot be restarted
        # The session is open (a running server, its threads and pipes), and a step below
        # may still raise: a Ctrl-C above all, odd server data in _adopt or the naming, a
        # MemoryError. The caller then gets no client to close, and the exit hook and the
        # finalizer may not be set yet: so the handler closes the session before anything
        # else. On 3.11 and later a Ctrl-C is raised only as a function starts, as a C
        # function returns or as a loop jumps back, and none of these comes between the
        # failure and the close's start (a Ctrl-C inside the close is the close's to
        # handle). ``_closed`` is set first, by a plain store, so that the exit hook finds
        # the client closed should the discard below be cut short; the finalizer is
        # detached last, and told not to warn first (one made by watch() but not yet stored
        # when the failure came cannot be detached: it only closes again, quietly).
        # What is left: a second Ctrl-C raised as the close starts leaves the session open
        # until this process exits; and Python 3.10 also raises a pending Ctrl-C as a
        # Python function returns and as an exception handler begins, so that there one
        # landing as _open_session() returns its session into negotiate(), in negotiate()'s
        # last steps, or as the handler begins, does the same.
        try:
            session.handshake_done()
            self._session = session
            aside.resources.session = session
            self._adopt(negotiated)
            self._take_server_name(session)
            _open_clients.add(self)
            aside.finalizer = watch(self, aside.resources, self._name)
            self._ask_for_logs()
        except BaseException:
            self._closed = True
            aside.resources.warn = False   # a finalizer made but not stored stays quiet
            try:
                session.close("connecting failed")
            finally:
                _open_clients.discard(self)
                finalizer = getattr(aside, "finalizer", None)
                if finalizer is not None:
                    finalizer.detach()
            raise

    def _ask_for_logs(self) -> None:
        """``log_level=`` on a legacy server: send ``logging/setLevel`` once connected (a
        modern server gets the level in every request's ``_meta`` instead). A server that
        refuses it is not worth failing the connection for: a warning says so."""
        level = self._log_level
        if self._modern or level is None or "logging" not in self._capabilities:
            return
        try:
            self._request("logging/setLevel", {"level": level})
        except RemoteError as exc:
            _log.warning("server %r refused logging/setLevel %r: %s", self._name, level, exc)

    def _live(self) -> Session:
        """The current session, restarting a dead modern server first (see docs/client.md)."""
        session = self._session
        return session if session.lost is None else self._revive()

    # -- the request path (the retry policy itself is in _flow) ----------------------------

    def _request(self, method: str, params: Mapping[str, Any] | None = None, *,
                 timeout: float | None = None, progress: ProgressCallback | None = None,
                 reset_timeout_on_progress: bool | None = None,
                 meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """One blocking call with everything but the result parsing (see ``_flow``)."""
        call = self._call(method, params, meta, timeout, progress, reset_timeout_on_progress)
        return self._dict_result(method, params, run(call_flow(self, call), call))

    def _call(self, method: str, params: Mapping[str, Any] | None,
              meta: Mapping[str, Any] | None, timeout: float | None,
              progress: Any, reset: bool | None) -> Call:
        if progress is not None and (progress.__class__ is bool or not callable(progress)):
            # A bar is call_tool's; a bare request takes a callable (or nothing).
            load_module("mcpsync.client._progress")
            from mcpsync.client._progress import check_progress  # a wrong value: rare

            check_progress(progress, describe_call(method, params, self._name))
            if progress is True:
                raise TypeError(f"{describe_call(method, params, self._name)}: progress=True "
                                "(a progress bar) is for call_tool() and submit_tool(); "
                                "pass a callable progress(progress, total, message) here")
            progress = None
        return Call(method, params,
                    lambda: with_meta(params, meta, modern=self._modern, ours=self._meta),
                    timeout=timeout,
                    progress=None if progress is None else self._guard.wrap("progress", progress),
                    reset=reset)

    def _dict_result(self, method: str, params: Any, result: Any) -> dict[str, Any]:
        if not isinstance(result, dict):
            raise ProtocolError(f"{describe_call(method, params, self._name)}: the result is "
                                f"not an object: {result!r:.200}", server=self._name,
                                method=method)
        return result

    def _adopt_version(self, exc: RemoteError) -> bool:
        """A modern -32022 on a later request: switch to the newest shared version (the
        flow sends the round again); ``False`` when the error names none we share."""
        version = retry_version_from_error(exc.data, "modern")
        if version is None:
            return False
        _log.info("server %r asked for protocol %s; retrying %s", self._name, version,
                  exc.method)
        self._protocol_version = version
        self._aside.server_info = replace(self._aside.server_info, protocol_version=version)
        self._rebuild_meta()
        return True

    def _require(self, capability: str, doing: str, method: str) -> None:
        """Raise ``CapabilityNotSupported`` (nothing sent) when the server did not offer it."""
        if capability not in self._capabilities:
            raise CapabilityNotSupported(
                f"{doing} on server {self._name!r}: the server did not advertise the "
                f"{capability!r} capability", server=self._name, method=method)

    # -- tools -----------------------------------------------------------------------------

    def call_tool(self, name: str, arguments: Mapping[str, Any] | None = None, *,
                  timeout: float | None = None,
                  progress: ProgressCallback | bool | None = None,
                  raise_on_error: bool = False, retry_on_drop: bool = False,
                  meta: Mapping[str, Any] | None = None,
                  reset_timeout_on_progress: bool | None = None,
                  validate_input: bool | None = None,
                  task_timeout: float | None = None,
                  tasks: bool = True) -> CallToolResult:
        """Call a tool and return its :class:`~mcpsync.types.CallToolResult`.

        A tool that fails reports ``is_error=True`` in a normal result; pass
        ``raise_on_error=True`` to get :class:`~mcpsync.errors.ToolError` instead.
        ``progress(progress, total, message)`` receives the server's progress notifications
        (on the dispatcher thread); every one that arrived before the answer has run by the
        time this returns. ``progress=True`` shows a progress bar instead (tqdm when
        installed, else a line on ``sys.stderr``), closed when the call ends. ``timeout``
        overrides the client default (``math.inf``: no limit);
        ``reset_timeout_on_progress`` overrides the client option for this call. With
        ``retry_on_drop=True`` a call whose connection dropped is sent again once after a
        modern server's restart (only for tools safe to run twice).

        When a tool list is cached (from :meth:`list_tools` or a tool proxy), the call is
        checked against it before anything is sent: a name it lacks is listed once more,
        then raises :class:`~mcpsync.errors.UnknownTool` ("did you mean ..."); a missing
        required argument raises :class:`~mcpsync.errors.InvalidArguments`.
        ``validate_input=False`` (here, or on ``connect()`` for every call) sends the call
        unchecked.

        When the last :meth:`list_tools` cached an ``outputSchema`` for this tool and
        ``jsonschema`` is installed, the structured result is validated
        (:class:`~mcpsync.errors.OutputValidationError`); ``validate_output=False`` on
        ``connect()`` turns that off. Errors leave the client usable, except
        :class:`~mcpsync.errors.ServerExited` on a legacy server.

        A tool that runs as a task (docs/tasks.md) is followed to its end: ``timeout``
        bounds each request, ``task_timeout`` the whole task (its TTL is the backstop), the
        task's status goes to ``progress``, and a timeout or Ctrl-C sends ``tasks/cancel``.
        ``tasks=False`` does not declare the 2026-07-28 Tasks extension on this call.

        This is the blocking form of :meth:`submit_tool`: same result, same errors, same
        rounds, but it waits in the calling thread (which may read its own answer, see
        ``docs/performance.md``) instead of building a future.
        """
        # Declaration only (what type checkers, the API reference and help() read): what
        # runs is _call_tool, below the class, installed in its place.
        raise NotImplementedError   # pragma: no cover - never runs

    def _call_tool_with_bar(self, name: str, arguments: Mapping[str, Any] | None,
                            progress: object, **options: Any) -> CallToolResult:
        """``call_tool(progress=True)``: the call with a progress bar that is closed when it
        ends, failed or not (``False`` is no bar; anything else a ``TypeError``). The argument
        checks run first: no bar is drawn for a call that is never sent."""
        load_module("mcpsync.client._client_more")
        from mcpsync.client._client_more import call_tool_with_bar

        return call_tool_with_bar(self, name, arguments, progress, **options)

    def _tool_call(self, name: str, arguments: Mapping[str, Any] | None,
                   meta: Mapping[str, Any] | None, timeout: float | None,
                   progress: ProgressCallback | None, reset: bool | None,
                   retry_on_drop: bool, tasks: bool = False) -> Call:
        """A ``tools/call`` for the flow; its params are built anew for each era (the same
        as ``_call_tool`` inlines: that is the hot path)."""
        def build() -> dict[str, Any]:
            if not self._has_tools:   # again after a re-detection: the new era's server
                self._require("tools", f"calling tool {name!r}", "tools/call")
            params: dict[str, Any] = {"name": name,
                                      "arguments": arguments if arguments is not None else {}}
            if self._modern:
                ours = self._tool_meta if tasks else self._meta
                params["_meta"] = ours if meta is None else {**meta, **ours}
            elif meta is not None:
                params["_meta"] = dict(meta)
            return params

        return Call("tools/call", {"name": name}, build, timeout=timeout,
                    progress=None if progress is None else self._guard.wrap("progress", progress),
                    reset=reset, retry_on_drop=retry_on_drop)

    # -- tasks (see _tasks and docs/tasks.md) -----------------------------------------------

    def _needs_task(self, name: str) -> bool:
        """Whether this tool of a server that offers tool tasks runs only as one; the tools
        are listed first when no list is cached (once, then the list is kept).

        The answer comes from one read of the cached set, or else from the list fetched
        here, never from the cache after that listing: a ``tools/list_changed`` that arrived
        before the list's answer can still be handled on the dispatcher thread after it and
        drop the cache, and an unknown list must not read as "no task needed" (the call
        would go out without ``params.task`` and the server refuse it)."""
        tasks = self._toolset.task_required
        if tasks is None:
            tasks = task_required(self.list_tools())
        return name in tasks

    def _task_request(self, method: str, params: Mapping[str, Any],
                      timeout: float | None) -> dict[str, Any]:
        """A ``tasks/*`` request. A 2026-07-28 request stands alone, so each one declares
        the Tasks extension in its client capabilities, as the ``tools/call`` that created
        the task did (a server may refuse ``tasks/get`` without it: -32021)."""
        call = Call(method, params,
                    lambda: with_meta(params, None, modern=self._modern, ours=self._tool_meta),
                    timeout=timeout, progress=None, reset=None)
        return self._dict_result(method, params, run(call_flow(self, call), call))

    def _task_call(self, name: str, params: dict[str, Any] | None, timeout: float | None,
                   task_timeout: float | None, progress: Any, raise_on_error: bool, *,
                   created: dict[str, Any] | None = None,
                   future: mcpsync.CallFuture | None = None) -> CallToolResult:
        """Run ``tools/call`` as a task to its end: ``params`` asks a 2025-11-25 server for
        one; ``created`` is a 2026-07-28 ``CreateTaskResult`` already in hand.

        The first task loads the code that follows tasks here. With ``created``, the server
        made the task before that: a Ctrl-C while it loads, or as ``task_call`` begins,
        sends ``tasks/cancel``, as one in the wait does, so no task is left running that the
        caller never got the id of. Every handler on the way claims the cancel first
        (:func:`claim_task_cancel`): the one nearest the task sends it, the others see it
        claimed."""
        try:
            load_module("mcpsync.client._tasks")
            load_module("mcpsync.client._client_more")
            from mcpsync.client._client_more import task_call

            return task_call(self, name, params, timeout, task_timeout, progress,
                             raise_on_error, created=created, future=future)
        except KeyboardInterrupt as exc:
            if created is not None and claim_task_cancel(exc, created):
                self._cancel_created(created)
            raise

    def _interrupted_task(self, result: Any, exc: BaseException) -> None:
        """``call_tool``'s Ctrl-C handler on a 2026-07-28 answer: ``tasks/cancel`` for a
        task the server created, when the Ctrl-C came before the task code took it over
        (as the answer was looked at, or as ``_task_call`` began); nothing otherwise."""
        if type(result) is dict and result.get("resultType") == "task" \
                and claim_task_cancel(exc, result):
            self._cancel_created(result)

    def _cancel_created(self, created: Any) -> None:
        """``tasks/cancel`` for a task the server created that no ``TaskRun`` follows yet
        (a Ctrl-C came first); nothing for a task without an id or already at its end. A
        refusal is ignored, as ``TaskHandle.cancel`` ignores one."""
        task_id = created.get("taskId") if isinstance(created, dict) else None
        if isinstance(task_id, str) and created.get("status") not in _TASK_ENDS:
            try:
                self._task_request("tasks/cancel", {"taskId": task_id}, _TASK_CANCEL_TIMEOUT)
            except MCPError:
                return

    def resume_task(self, task_id: str, *, timeout: float | None = None,
                    task_timeout: float | None = None,
                    progress: ProgressCallback | None = None,
                    raise_on_error: bool = False) -> CallToolResult:
        """Pick up a tool call's task by its id (kept from ``future.task.task_id``, say,
        after a restart of this program) and return its final result, as ``call_tool``
        would have."""
        load_module("mcpsync.client._client_more")
        from mcpsync.client._client_more import resume_task

        return resume_task(self, task_id, timeout=timeout, task_timeout=task_timeout,
                           progress=progress, raise_on_error=raise_on_error)

    def list_tools(self) -> list[Tool]:
        """Every tool (all pages). Remembers the list (and output schemas) for the checks
        and validation of :meth:`call_tool`. A server without the ``tools`` capability has
        none: ``[]``, nothing sent."""
        if "tools" not in self._capabilities:
            return []
        load_module("mcpsync._display")
        from mcpsync._display import DisplayList  # notebook rendering: loaded on first list

        tools = DisplayList(Tool.from_dict(t) for t in self._list_all("tools/list", "tools"))
        self._toolset.remember(tools)
        return tools

    @property
    def tools(self) -> mcpsync.client._proxies.ToolProxies:
        """The server's tools as Python callables: ``client.tools.add(a=1, b=2)``, or
        ``client.tools["get-sum"](...)`` by the real name (docs/client.md, "Tool proxies").
        Made from the cached tool list; the tools are listed only when none is cached."""
        proxies = self._proxies
        if proxies is None:
            load_module("mcpsync.client._proxies")
            from mcpsync.client._proxies import ToolProxies  # loaded on first use

            me = weakref.ref(self)
            proxies = self._proxies = ToolProxies(
                lambda: _alive(me)._name, lambda: _alive(me)._cached_tools(),
                lambda name, args, **options: _alive(me).call_tool(name, args, **options),
                _PROXY_OPTIONS, relist=lambda: _alive(me)._relist_tools())
        return proxies

    def _cached_tools(self) -> list[Tool]:
        listed = self._toolset.listed()
        return listed if listed is not None else self.list_tools()

    def _relist_tools(self) -> None:
        """List the tools again past the list cache: a call named a tool the cached list
        lacks, and the server may have added it since."""
        self._cache.invalidate("tools/list")
        self.list_tools()

    def submit(self, method: str, params: Mapping[str, Any] | None = None, *,
               timeout: float | None = None, progress: ProgressCallback | None = None,
               reset_timeout_on_progress: bool | None = None,
               meta: Mapping[str, Any] | None = None) -> mcpsync.CallFuture:
        """Send a request without waiting; return a ``concurrent.futures.Future`` for it.

        The future resolves to the raw result dict, after the same protocol-version retry
        and input-required rounds as a blocking call (rounds run their callbacks on a
        ``mcpsync-input-<name>`` thread). ``future.cancel()`` cancels on the wire and returns
        ``True`` if no answer had arrived, ``False`` once it had. Its done-callbacks and
        progress callbacks run on the dispatcher thread; do not wait on the future *inside*
        such a callback (it would wait for itself).
        """
        return _submit(self, method, params, timeout=timeout, progress=progress,
                       reset_timeout_on_progress=reset_timeout_on_progress, meta=meta)

    def submit_tool(self, name: str, arguments: Mapping[str, Any] | None = None, *,
                    timeout: float | None = None,
                    progress: ProgressCallback | bool | None = None,
                    raise_on_error: bool = False, retry_on_drop: bool = False,
                    meta: Mapping[str, Any] | None = None,
                    reset_timeout_on_progress: bool | None = None,
                    validate_input: bool | None = None,
                    task_timeout: float | None = None,
                    tasks: bool = True) -> mcpsync.CallFuture:
        """:meth:`call_tool` without waiting: the future resolves to its
        :class:`~mcpsync.types.CallToolResult` (or raises what ``call_tool`` would raise:
        ``ToolError`` with ``raise_on_error``, ``OutputValidationError``, ...).
        ``future.cancel()`` cancels on the wire. The argument checks of ``call_tool`` run
        here, before the future exists: ``UnknownTool`` and ``InvalidArguments`` raise at
        once; ``progress=True`` shows a bar until the future is done. A call that runs as a
        task sets ``future.task`` (a ``TaskHandle``) once the server created it, and
        ``future.cancel()`` then sends ``tasks/cancel``."""
        return _submit_tool(self, name, arguments, timeout=timeout, progress=progress,
                            raise_on_error=raise_on_error, retry_on_drop=retry_on_drop,
                            meta=meta, reset_timeout_on_progress=reset_timeout_on_progress,
                            validate_input=validate_input, task_timeout=task_timeout,
                            tasks=tasks)

    def _submit_listen(self, params: dict[str, Any]) -> RequestFuture:
        """A listen naming ``taskIds`` declares the Tasks extension (the server refuses one
        that does not, -32021); other listens go with the plain ``_meta``."""
        ours = self._tool_meta if "taskIds" in params.get("notifications", {}) else self._meta
        return self._live().submit("subscriptions/listen",
                                   with_meta(params, None, modern=self._modern, ours=ours),
                                   timeout=math.inf)

    # -- lists -----------------------------------------------------------------------------

    def _list_all(self, method: str, key: str) -> list[Any]:
        return list_all(method, key, request=self._request, cache=self._cache,
                        modern=lambda: self._modern, max_pages=self._opts.max_pages,
                        server=self._name)

    def list_resources(self) -> list[mcpsync.Resource]:
        """Every resource (all pages); ``[]`` without the ``resources`` capability (a server
        that offers no resources has none; nothing is sent)."""
        if "resources" not in self._capabilities:
            return []
        load_module("mcpsync._display")
        from mcpsync._display import DisplayList
        from mcpsync.types import Resource

        return DisplayList(Resource.from_dict(r)
                           for r in self._list_all("resources/list", "resources"))

    def list_resource_templates(self) -> list[mcpsync.ResourceTemplate]:
        """Every resource template (all pages); ``[]`` without the ``resources`` capability."""
        if "resources" not in self._capabilities:
            return []
        load_module("mcpsync._display")
        from mcpsync._display import DisplayList
        from mcpsync.types import ResourceTemplate

        return DisplayList(ResourceTemplate.from_dict(r)
                           for r in self._list_all("resources/templates/list",
                                                   "resourceTemplates"))

    def list_prompts(self) -> list[mcpsync.Prompt]:
        """Every prompt (all pages); ``[]`` without the ``prompts`` capability."""
        if "prompts" not in self._capabilities:
            return []
        load_module("mcpsync._display")
        from mcpsync._display import DisplayList
        from mcpsync.types import Prompt

        return DisplayList(Prompt.from_dict(p) for p in self._list_all("prompts/list", "prompts"))

    # -- resources, prompts, completion ----------------------------------------------------

    def read_resource(self, uri: str, *, timeout: float | None = None,
                      meta: Mapping[str, Any] | None = None) -> mcpsync.ReadResourceResult:
        """Read one resource. A missing one raises :class:`~mcpsync.errors.ResourceNotFound`."""
        load_module("mcpsync.client._client_more")
        from mcpsync.client._client_more import read_resource

        return read_resource(self, uri, timeout=timeout, meta=meta)

    # -- skills (the io.modelcontextprotocol/skills extension, see _skills) ----------------

    def list_skills(self) -> list[mcpsync.Skill]:
        """Every skill the server offers (all pages of ``skills/list``). No file of any skill
        is read: entries are remembered so that :meth:`get_skill` can verify against them."""
        load_module("mcpsync.client._client_more")
        from mcpsync.client._client_more import list_skills

        return list_skills(self)

    def get_skill(self, uri: str, *, timeout: float | None = None) -> mcpsync.LoadedSkill:
        """Load one skill: read its ``SKILL.md`` and verify it (size, digest, frontmatter
        field by field) against the entry this server gave; its other files are read only
        through :meth:`LoadedSkill.read`. An entry not listed yet is asked for with
        ``skills/get``. Any mismatch raises :class:`~mcpsync.errors.SkillVerificationError`
        naming the file, and nothing of it is used."""
        load_module("mcpsync.client._client_more")
        from mcpsync.client._client_more import get_skill

        return get_skill(self, uri, timeout=timeout)

    def get_prompt(self, name: str, arguments: Mapping[str, str] | None = None, *,
                   timeout: float | None = None,
                   meta: Mapping[str, Any] | None = None) -> mcpsync.GetPromptResult:
        """Render a prompt with its (string) arguments."""
        load_module("mcpsync.client._client_more")
        from mcpsync.client._client_more import get_prompt

        return get_prompt(self, name, arguments, timeout=timeout, meta=meta)

    def complete(self, ref: Any, argument: Any,
                 context: Mapping[str, Any] | None = None) -> mcpsync.CompleteResult:
        """Ask for completions of one argument (``completion/complete``).

        ``ref`` is a ``{"type": "ref/prompt", "name": ...}`` /
        ``{"type": "ref/resource", "uri": ...}`` dict, a :class:`~mcpsync.types.Prompt` or
        :class:`~mcpsync.types.ResourceTemplate`, or a string (a URI or URI template when it
        contains ``://``, else a prompt name). ``argument`` is ``{"name", "value"}`` or a
        ``(name, value)`` pair; ``context`` maps already-chosen argument names to values.
        """
        load_module("mcpsync.client._client_more")
        from mcpsync.client._client_more import complete

        return complete(self, ref, argument, context)

    # -- utilities -------------------------------------------------------------------------

    def ping(self, *, timeout: float | None = None) -> None:
        """Check that a legacy server answers; modern servers have no ``ping``."""
        if self._modern and os.getpid() == self._pid:
            raise UnsupportedInThisEra(
                f"pinging server {self._name!r}: ping does not exist in protocol "
                f"{self._protocol_version}; any cheap call (list_tools()) serves instead",
                server=self._name, method="ping")
        self._request("ping", None, timeout=timeout)

    def set_log_level(self, level: str) -> None:
        """Ask for server log messages at ``level`` and above (delivered to ``on_log``).

        Legacy sends ``logging/setLevel``; modern puts the level in every later request's
        ``_meta`` (messages then arrive only for those requests).
        """
        load_module("mcpsync.client._client_more")
        from mcpsync.client._client_more import set_log_level

        set_log_level(self, level)

    def set_roots(self, roots: RootsInput) -> None:
        """Replace the roots offered to the server.

        Legacy (with roots declared at ``connect()``) also sends
        ``notifications/roots/list_changed``; modern servers ask for roots through
        input-required rounds, which read the new list.
        """
        self._callbacks.set_roots(roots)
        if not self._modern and self._callbacks.roots_declared:
            self._live().notify("notifications/roots/list_changed")

    def subscribe(self, uri: str, callback: Callable[[str], Any]) -> Subscription:
        """Call ``callback(uri)`` whenever the resource changes; returns a handle to close.

        Returns once the server acknowledged. Raises
        :class:`~mcpsync.errors.CapabilityNotSupported` when the server does not offer
        resource subscriptions (or did not acknowledge this URI).
        """
        return self._subs.subscribe(uri, callback)

    def on_list_changed(self, kind: str, callback: Callable[[str], Any]) -> Subscription:
        """Call ``callback(kind)`` when the ``tools``, ``prompts`` or ``resources`` list changes.

        The cached list is dropped before the callback runs, so calling ``list_*`` inside it
        fetches the new one.
        """
        return self._subs.on_list_changed(kind, callback)

    def watch_task(self, task_id: str, callback: Callable[[dict[str, Any]], Any]
                   ) -> Subscription:
        """Call ``callback(task)`` at every status change the server announces for task
        ``task_id`` (``task`` as ``tasks/get`` shows it: ``taskId``, ``status``, ...);
        returns a handle whose ``close()`` stops it.

        For a 2026-07-28 server that declares the Tasks extension; returns once the server
        acknowledged. Raises :class:`~mcpsync.errors.UnsupportedInThisEra` on an older
        server and :class:`~mcpsync.errors.CapabilityNotSupported` without the extension or
        when the server does not acknowledge the task. Calls and ``resume_task`` poll
        ``tasks/get`` either way; a watch only lets you hear about the task without asking.
        """
        return self._subs.watch_task(task_id, callback)

    def stderr_tail(self) -> str:
        """The server's recent stderr (up to ``stderr_bytes``, newest kept)."""
        transport = self._transport
        return transport.stderr_tail() if transport is not None else ""

    # -- properties ------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The display name used in errors and reprs: the name you gave (``name=``, or the
        config's ``name``/``id``); else, once connected, the name the server gives itself
        (``serverInfo.name``, without control characters, at most 64 characters); else the
        program's base name. Thread and logger names keep the name known at start."""
        return self._name

    @property
    def era(self) -> str:
        """``"legacy"`` (an ``initialize`` handshake) or ``"modern"`` (2026-07-28)."""
        return self._era

    @property
    def protocol_version(self) -> str:
        return self._protocol_version

    @property
    def capabilities(self) -> dict[str, Any]:
        """The server's capabilities (a copy)."""
        return dict(self._capabilities)

    @property
    def instructions(self) -> str | None:
        return self._aside.instructions

    @property
    def server_info(self) -> ServerInfo:
        return self._aside.server_info

    @property
    def handshake_result(self) -> dict[str, Any]:
        """The whole ``initialize`` (legacy) or ``server/discover`` (modern) result, as the
        server sent it (a copy): for fields mcpsync does not model."""
        return copy.deepcopy(self._aside.handshake_result)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def pid(self) -> int | None:
        """The server process id (changes after a modern restart)."""
        transport = self._transport
        return transport.pid if isinstance(transport, StdioTransport) else None

    # -- closing ---------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the server and every thread of this client. Idempotent and thread-safe.

        In a forked child it only drops references: the parent's server is not touched, and
        no lock is taken (a parent thread may have held one at the fork).
        """
        if os.getpid() != self._pid:
            # A forked child: never signal the parent's processes or write its pipes.
            self._closed = True
            _open_clients.discard(self)
            self._aside.finalizer.detach()
            return
        with self._state_lock:
            first = not self._closed
            self._closed = True
            rest, self._aside.close_rest = self._aside.close_rest, False
        if not first and not rest:
            return   # closed, or another thread is closing it
        try:
            if first:
                self._begin_rest()
        finally:   # whatever failed above, the server is stopped and the threads joined
            self._session.close()
            self._workers.join(1.0)

    def _close_early(self) -> None:
        """Start :meth:`close` without waiting, where that needs no exchange with the
        server: refuse new calls, fail pending ones, begin the shutdown (a stdio server's
        stdin is closed). :meth:`close` must still be called: it waits for the server to exit
        and joins every thread.

        The Manager calls it on every server before closing them, so that all of them exit
        at once. A client with an open ``subscriptions/listen`` is left alone (ending a listen
        takes a round with the server): :meth:`close` does all of it then.
        """
        if os.getpid() != self._pid or self._subs.listening:
            return
        with self._state_lock:
            if self._closed:
                return
            # Set first: should a step below fail, close() still does everything.
            self._closed = self._aside.close_rest = True
        self._begin_rest()

    def _begin_rest(self) -> None:
        """Past marking the client closed: refuse it to new uses, end the subscriptions and
        begin the session's close (which does not wait)."""
        _open_clients.discard(self)
        self._aside.finalizer.detach()
        self._subs.close()
        self._session.begin_close()

    def __enter__(self) -> Client:
        if os.getpid() != self._pid:
            raise UsedAfterFork(f"client for server {self._name!r} was created in another "
                                "process; connect again in this one", server=self._name)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{self._era} {self._protocol_version}"
        return f"<mcpsync.Client {self._name!r} {state}>"


# The future a worker thread of submit_tool() is resolving, for the task handle it gains.
_submitting = threading.local()


def _alive(ref: weakref.ref[Client]) -> Client:
    client = ref()
    if client is None:
        raise ClosedError("the client was garbage-collected")
    return client


if not TYPE_CHECKING:   # the type checker sees the imports at the top, and no other name
    def __getattr__(name: str) -> Any:
        """``SamplingRequest`` and ``ElicitationRequest``, exported from here as before,
        loaded on first access (PEP 562; see ``_callbacks.load_requests``). Nothing reads
        this module's attributes on a call."""
        if name in ("SamplingRequest", "ElicitationRequest"):
            return getattr(load_requests(), name)
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _submit(client: Client, method: str, params: Mapping[str, Any] | None, *,
            timeout: float | None, progress: ProgressCallback | None,
            reset_timeout_on_progress: bool | None,
            meta: Mapping[str, Any] | None) -> mcpsync.CallFuture:
    """Load ``_submit`` (the future driver) for the first submitted call and put its
    ``submit`` in this name's place, so that later calls run no import statement."""
    global _submit
    load_module("mcpsync.client._submit")
    from mcpsync.client._submit import submit

    _submit = submit
    return submit(client, method, params, timeout=timeout, progress=progress,
                  reset_timeout_on_progress=reset_timeout_on_progress, meta=meta)


def _submit_tool(client: Client, name: str, arguments: Mapping[str, Any] | None, *,
                 timeout: float | None, progress: ProgressCallback | bool | None,
                 raise_on_error: bool, retry_on_drop: bool, meta: Mapping[str, Any] | None,
                 reset_timeout_on_progress: bool | None, validate_input: bool | None,
                 task_timeout: float | None, tasks: bool) -> mcpsync.CallFuture:
    """As ``_submit``, for ``Client.submit_tool``."""
    global _submit_tool
    load_module("mcpsync.client._submit")
    from mcpsync.client._submit import submit_tool

    _submit_tool = submit_tool
    return submit_tool(client, name, arguments, timeout=timeout, progress=progress,
                       raise_on_error=raise_on_error, retry_on_drop=retry_on_drop, meta=meta,
                       reset_timeout_on_progress=reset_timeout_on_progress,
                       validate_input=validate_input, task_timeout=task_timeout, tasks=tasks)


# What runs as Client.call_tool. CPython 3.11 fills each keyword-only parameter a call leaves
# out from the function's __kwdefaults__ dict, one lookup each (nine here, about 1,100
# instructions per call in all), and does not specialise the call; parameters with
# positional defaults are filled from a tuple by a specialised call. So the options are
# positional parameters here, behind a guard: a third positional argument (or any value
# given for ``_keyword_only``) is refused, so every call accepted or refused is the one
# Client.call_tool's declaration accepts or refuses, only some refusals' messages differing.
# It is a function of the module, not a second def in the class, so that every tool reading
# the class (type checkers, the API reference) finds the declaration alone; help() and
# inspect.signature() follow __wrapped__ to it. docs/architecture.md has the whole picture,
# docs/performance.md the figures.
def _call_tool(self: Client, name: str,
               arguments: Mapping[str, Any] | None = None,
               _keyword_only: object = _KEYWORD_ONLY,
               timeout: float | None = None,
               progress: ProgressCallback | bool | None = None,
               raise_on_error: bool = False, retry_on_drop: bool = False,
               meta: Mapping[str, Any] | None = None,
               reset_timeout_on_progress: bool | None = None,
               validate_input: bool | None = None,
               task_timeout: float | None = None,
               tasks: bool = True) -> CallToolResult:
    if _keyword_only is not _KEYWORD_ONLY:
        raise TypeError("Client.call_tool() takes name and arguments by position and its "
                        "options (timeout=, progress=, ...) by keyword only")
    # Hot path (benchmarked): build the params, one session._request, from_dict. Any
    # other outcome goes to the call flow, which takes over from this first round.
    if progress is not None and (progress.__class__ is bool or not callable(progress)):
        return self._call_tool_with_bar(name, arguments, progress, timeout=timeout,
                                        raise_on_error=raise_on_error,
                                        retry_on_drop=retry_on_drop, meta=meta,
                                        reset_timeout_on_progress=reset_timeout_on_progress,
                                        validate_input=validate_input,
                                        task_timeout=task_timeout, tasks=tasks)
    if not self._has_tools:
        self._require("tools", f"calling tool {name!r}", "tools/call")
    if (required := self._toolset.required) is not None and (
            self._validate_input if validate_input is None else validate_input):
        need = required.get(name)
        if need is None or (need and not need.issubset(arguments or ())):
            check_arguments(self._name, name, arguments, self._toolset,
                            self._relist_tools)
    session = self._session
    # An open session has no loss to report: its phase answers that without calling the
    # ``lost`` property (a nested evaluation per call); any other phase asks it.
    if session._phase is not _SESSION_OPEN and session.lost is not None:
        session = self._revive()
    modern = self._modern
    params: dict[str, Any] = {"name": name,
                              "arguments": arguments if arguments is not None else {}}
    # The tool's name while params holds just those two members, in that order: the
    # session then writes the request line without finding that shape out again
    # (_serialize_tool_call); None once _meta is added. Arguments other than a plain
    # dict take serialize_request from there, one frame deeper: such a value nested
    # about 990 levels deep meets the nesting limit one level sooner than it did (a
    # type test here to spare it costs about 190 instructions per call).
    tool: str | None = name
    if modern:
        ours = self._tool_meta if tasks else self._meta
        params["_meta"] = ours if meta is None else {**meta, **ours}
        tool = None
    else:
        if meta is not None:
            params["_meta"] = dict(meta)
            tool = None
        if self._may_task and self._needs_task(name):
            return self._task_call(name, params, timeout, task_timeout, progress,
                                   raise_on_error)
    try:
        if progress is None and reset_timeout_on_progress is None:
            # Positional, past request()'s keyword-only signature (see Session._request),
            # and looked up on the class, which CPython 3.11 specialises whatever the
            # instance holds (a session whose attributes outgrow what it keeps inline
            # would make the instance's lookup take the generic path, about 250
            # instructions more per call).
            result = type(session)._request(session, "tools/call", params, timeout, None,
                                            None, True, tool)
        else:
            result = session.request("tools/call", params, timeout=timeout,
                                     progress=None if progress is None
                                     else self._guard.wrap("progress", progress),
                                     reset_timeout_on_progress=reset_timeout_on_progress)
    except (RemoteError, ConnectionLost) as exc:
        call = self._tool_call(name, arguments, meta, timeout, progress,
                               reset_timeout_on_progress, retry_on_drop, tasks)
        try:
            result = run(call_flow(self, call, sent=Round(session, params, modern)), call,
                         error=exc)
        except RemoteError as failed:   # a gateway's refusal, for a gateway=True server
            refusal = gateway_refusal(failed, self._name, name) \
                if self._config.gateway else None
            if refusal is None:
                raise
            raise refusal from failed
    else:
        # For a Ctrl-C as the answer is looked at, or before the task code takes over.
        # On 3.11+ the try sets nothing up (an exception table): one NOP on this path;
        # 3.10 runs a SETUP_FINALLY and a POP_BLOCK.
        try:
            if modern and type(result) is dict and (kind := result.get("resultType")) \
                    is not None and kind != "complete":
                if kind == "task" and tasks:
                    return self._task_call(name, None, timeout, task_timeout, progress,
                                           raise_on_error, created=result)
                call = self._tool_call(name, arguments, meta, timeout, progress,
                                       reset_timeout_on_progress, retry_on_drop, tasks)
                result = run(call_flow(self, call, sent=Round(session, params, modern)),
                             call, result=result)
        except KeyboardInterrupt as exc:
            if modern and tasks:
                self._interrupted_task(result, exc)
            raise
    if type(result) is not dict or self._toolset.schemas or raise_on_error:
        return self._toolset.result(self._name, name, result, raise_on_error)
    # The common case, without the checks: the usual plain-text result (one text block,
    # beside it at most structuredContent and isError), made by the same steps as
    # from_dict's first one, types._plain_text_result (see there why without __init__
    # and by subscript), written out here: a frame fewer per call (about 220
    # instructions). Anything declined goes on to from_dict's general part, not from the
    # top (a KeyError out of _build would come again from the same call below). A test
    # holds the two copies to the same decision and the same result for every shape.
    try:
        content = result["content"]
        if type(content) is list and len(content) == 1:
            block = content[0]
            if type(block) is dict and len(block) == 2 and block["type"] == "text":
                text = block["text"]
                if type(text) is str:
                    n = len(result)
                    if n == 1:
                        structured = None
                        is_error = False
                    elif n == 1 + ("structuredContent" in result) + ("isError" in result):
                        structured = result.get("structuredContent")
                        is_error = result.get("isError") is True
                    else:
                        return CallToolResult._build(result)
                    part: TextContent = _new(TextContent)
                    part.text = text
                    part.annotations = part.meta = None
                    part.extra = {}
                    part.raw = block
                    part.type = "text"
                    made: CallToolResult = _new(CallToolResult)
                    made.content = [part]
                    made.structured = structured
                    made.is_error = is_error
                    made.meta = None
                    made.extra = {}
                    made.raw = result
                    return made
    except KeyError:
        pass
    return CallToolResult._build(result)


def _install(declaration: Any, running: Any) -> Any:
    """``running`` made to present ``declaration``: its names, in the function (so Python's
    own messages for a bad call say ``Client.call_tool()``) and in its code (so tracebacks
    and profiles say ``call_tool``), docstring and annotations, and ``__wrapped__`` for
    ``inspect.signature()``."""
    code = running.__code__
    if sys.version_info >= (3, 11):
        running.__code__ = code.replace(co_name=declaration.__name__,
                                        co_qualname=declaration.__qualname__)
    else:
        running.__code__ = code.replace(co_name=declaration.__name__)
    running.__name__ = declaration.__name__
    running.__qualname__ = declaration.__qualname__
    running.__doc__ = declaration.__doc__
    running.__annotations__ = dict(declaration.__annotations__)   # get_type_hints()
    running.__wrapped__ = declaration
    return running


Client.call_tool = _install(Client.call_tool, _call_tool)  # type: ignore[method-assign]
