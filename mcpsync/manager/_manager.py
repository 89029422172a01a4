"""``Manager``: many MCP servers behind one object, with scopes, readiness and routing.

A host (an IDE, an agent runner) talks to a dozen servers at once: the project's, plus some
per conversation thread with their own worktree. The Manager starts them in parallel, keeps
each one's tools discovered in the background, routes calls by server id, checks a
:class:`~mcpsync.policy.Policy` before a tool call leaves the process, gives each spawn its
own secret file, and stops everything within a bounded time. It is a thin layer over
:class:`~mcpsync.client.Client`: one Client per running server.

Thread contract: every method is safe from any number of threads. A Manager belongs to the
process that made it; in a forked child every method raises ``UsedAfterFork``.
"""

from __future__ import annotations

import atexit
import importlib
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from mcpsync._budget_ledger import BudgetLedger
from mcpsync._display import DisplayList
from mcpsync._parallel import run_parallel
from mcpsync._secret_dirs import sweep as sweep_secret_dirs
from mcpsync._threads import held_here
from mcpsync.client._callback_warnings import CallbackGuard
from mcpsync.client._client import Client, ProgressCallback
from mcpsync.client._options import ClientOptions
from mcpsync.client._progress import check_progress
from mcpsync.client._proxies import ToolProxies
from mcpsync.config import ServerConfig
from mcpsync.errors import (
    ClosedError,
    ConfigError,
    RemoteError,
    UnknownServer,
    UsedAfterFork,
)
from mcpsync.manager._lifecycle import (
    begin_discovery,
    close_config_auth,
    close_entries,
    close_entry,
    spawn_entry,
    watch_tool_list,
)
from mcpsync.manager._settings import checked_configs, split_connect_options
from mcpsync.manager._types import (
    SEP,
    ManagedTool,
    Notification,
    ServerEntry,
    split_thread_server_id,
    thread_server_id,
)
from mcpsync.policy import Policy, check_call, finish_call, gateway_refusal
from mcpsync.secrets import SecretResolver
from mcpsync.types import (
    CallToolResult,
    GetPromptResult,
    Prompt,
    ReadResourceResult,
    Resource,
    ServerInfo,
    Tool,
)

__all__ = ["ManagedTool", "Manager", "Notification", "split_thread_server_id",
           "thread_server_id"]

_log = logging.getLogger("mcpsync.manager")

CLOSE_TIMEOUT = 10.0          # close() of a Manager, all servers in parallel
MAX_PARALLEL_STARTS = 16      # start_all (docs/architecture.md, "Limits")
_SEP = SEP

NotificationHandler = Callable[[Notification], Any]



# -- fork and exit handling ----------------------------------------------------------------

_managers: weakref.WeakSet[Manager] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for manager in list(_managers):
        manager._forked = True
        # A parent thread (a discovery, a start) may have held the lock at the fork; in the
        # child nobody would ever release it, and close() or repr() would hang on it.
        manager._lock = threading.RLock()


def _close_at_exit() -> None:
    for manager in list(_managers):
        if manager._forked or manager._pid != os.getpid():
            continue   # a forked child never touches the parent's servers
        try:
            manager.close()
        except Exception as exc:  # never let one manager's teardown stop the others
            _log.debug("closing a Manager at exit failed: %s", exc)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_close_at_exit)


class Manager:
    """Many MCP servers behind one object; see ``docs/manager.md``.

    ``secret_resolver`` resolves ``ServerConfig.secret_ref`` for each spawn, ``policy`` is
    checked before every :meth:`call_tool`, ``max_parallel_starts`` bounds
    :meth:`start_all`, ``configs`` are what :meth:`start_all` starts, and
    ``connect_options`` (a :class:`~mcpsync.ClientOptions`, or a mapping of
    :func:`mcpsync.connect` keywords) apply to every server (``era=``, callbacks...);
    credentials are per server
    (``ServerConfig(auth=...)``), so ``auth``, ``headers``, ``session`` and the plain auth
    callables there raise :class:`ConfigError`. A Manager is a context manager;
    :meth:`close` stops everything.
    """

    def __init__(self, secret_resolver: SecretResolver | None = None, *,
                 policy: Policy | None = None, max_parallel_starts: int = MAX_PARALLEL_STARTS,
                 configs: Iterable[ServerConfig] = (),
                 connect_options: ClientOptions | Mapping[str, Any] | None = None) -> None:
        if isinstance(max_parallel_starts, bool) or not isinstance(max_parallel_starts, int) \
                or max_parallel_starts < 1:
            raise ValueError(f"max_parallel_starts must be an int >= 1, "
                             f"got {max_parallel_starts!r}")
        if policy is not None and not isinstance(policy, Policy):
            raise TypeError(f"policy must be a Policy, got {type(policy).__name__}")
        stored = checked_configs(configs)
        base, options = split_connect_options(connect_options)
        self._pid = os.getpid()
        self._forked = False
        self._lock = threading.RLock()
        self._resolver = secret_resolver
        self._policy = policy
        self._budget = BudgetLedger()
        self._max_starts = max_parallel_starts
        self._configs = stored
        self._options = options
        self._base_options = base
        self._handler: NotificationHandler | None = None
        self._guard = CallbackGuard(lambda: "")   # the handler's failures, once
        self._entries: dict[str, ServerEntry] = {}
        self._start_errors: dict[str, BaseException] = {}
        self._id_locks: dict[str, threading.Lock] = {}
        self._closed = False
        _managers.add(self)
        sweep_secret_dirs()   # what a SIGKILLed host left; never a live process's

    @classmethod
    def from_config(cls, source: str | os.PathLike[str] | Mapping[str, Any], *,
                    secret_resolver: SecretResolver | None = None,
                    workspace_folder: str | None = None,
                    environ: Mapping[str, str] | None = None, token_store: Any = None,
                    interactive_login: bool = False, **kwargs: Any) -> Manager:
        """A Manager for the servers of a config file (or dict); nothing is started yet.

        Reads Claude Desktop / Claude Code / Cursor ``mcpServers`` and VS Code ``servers``
        files (``docs/manager.md``); ``kwargs`` go to the constructor. Each HTTP server
        without a static ``Authorization`` header gets its own OAuth provider, used from its
        first 401: ``token_store`` (a ``mcpauth.TokenStore``; default the file store that
        ``mcpsync login`` writes) holds its tokens, and no browser opens unless
        ``interactive_login=True``. :meth:`close` closes those providers.
        """
        # import_module first: a bare from-import in a thread that waited while a Ctrl-C
        # stopped another thread's first import of config_files reads the half-built module.
        importlib.import_module("mcpsync.config_files")
        from mcpsync.config_files import load_config

        configs = load_config(source, workspace_folder=workspace_folder, environ=environ,
                              token_store=token_store, interactive_login=interactive_login)
        return cls(secret_resolver, configs=configs, **kwargs)

    # -- guards ----------------------------------------------------------------------------

    def _check(self) -> None:
        """Refuse use from a forked child or after close."""
        if self._forked or os.getpid() != self._pid:
            raise UsedAfterFork(f"this Manager belongs to process {self._pid}; create a new "
                                "one in the child")
        if self._closed:
            raise ClosedError("the Manager is closed; create a new one")

    def _id_lock(self, server_id: str) -> threading.Lock:
        with self._lock:
            lock = self._id_locks.get(server_id)
            if lock is None:
                lock = self._id_locks[server_id] = threading.Lock()
            return lock

    def _entry(self, server_id: str) -> ServerEntry:
        self._check()
        with self._lock:
            entry = self._entries.get(server_id)
        if entry is None:
            with self._lock:
                started = sorted(self._entries)
            raise UnknownServer(
                f"no server {server_id!r} is started in this Manager (started: "
                f"{', '.join(map(repr, started)) or 'none'}); start it with start_server() "
                f"or start_all() first", server=server_id)
        return entry

    # -- settings --------------------------------------------------------------------------

    @property
    def configs(self) -> list[ServerConfig]:
        """The configs given at construction (or loaded by :meth:`from_config`); a copy."""
        self._check()
        return list(self._configs)

    def set_secret_resolver(self, resolver: SecretResolver | None) -> None:
        """Use ``resolver`` for the starts made after this call."""
        self._check()
        with self._lock:
            self._resolver = resolver

    def set_policy(self, policy: Policy | None) -> None:
        """Replace the policy for later calls; the budget counts are kept."""
        self._check()
        if policy is not None and not isinstance(policy, Policy):
            raise TypeError(f"policy must be a Policy, got {type(policy).__name__}")
        with self._lock:
            self._policy = policy

    def reset_budgets(self) -> None:
        """Start counting every budget from zero again."""
        self._check()
        self._budget.reset()

    def set_notification_handler(self, handler: NotificationHandler | None) -> None:
        """Deliver every server's notifications to ``handler(Notification)``.

        Applies at once to running servers and to later ones. It runs on each server's
        dispatcher thread, in order per server; an exception in it is logged.
        """
        self._check()
        if handler is not None and not callable(handler):
            raise TypeError("set_notification_handler() needs a callable or None")
        with self._lock:
            self._handler = handler

    # -- starting --------------------------------------------------------------------------

    def start_all(self) -> dict[str, BaseException | None]:
        """Start every enabled project-scope config in parallel (16 at once by default).

        Returns ``{id: None or the start error}``; one failure never stops the others, and
        this never raises for one server. ``scope="thread"`` configs are left to
        :meth:`start_thread_server`.
        """
        self._check()
        todo = [c for c in self._configs
                if not c.disabled and c.scope in ("", "project")]
        results, _ = run_parallel(self._start_project, todo, what="start",
                                  limit=self._max_starts)
        out: dict[str, BaseException | None] = {}
        for config, outcome in zip(todo, results, strict=True):
            out[config.id] = outcome if isinstance(outcome, BaseException) else None
        return out

    def start_server(self, config: ServerConfig | str) -> None:
        """Start one project server (or restart it, when that id runs already).

        ``config`` is a :class:`ServerConfig` with an id, or the id of one of
        :attr:`configs`. Returns after the handshake; tool discovery goes on in the
        background. Raises the start error (also kept for :meth:`server_ready_error`).
        """
        self._check()
        if isinstance(config, str):
            found = [c for c in self._configs if c.id == config]
            if not found:
                raise UnknownServer(f"no config with id {config!r} in this Manager",
                                    server=config)
            config = found[0]
        self._start_project(config)

    def _start_project(self, config: ServerConfig) -> None:
        if not isinstance(config, ServerConfig):
            raise TypeError(f"start_server() needs a ServerConfig, got "
                            f"{type(config).__name__}")
        if not config.id:
            raise ConfigError("invalid server config: id: start_server() needs a config "
                              "with a non-empty id")
        if config.scope == "thread":
            raise ConfigError(f"server {config.id!r}: scope is 'thread'; start it with "
                              "start_thread_server()", server=config.id)
        self._start(config, key=None, worktree_root=None)

    def start_thread_server(self, integration_id: str, thread_id: str, config: ServerConfig,
                            worktree_root: str | os.PathLike[str] | None = None) -> None:
        """Start (or restart) the server of ``integration_id`` for one conversation thread.

        Its id is :meth:`thread_server_id` of the pair; ``{{worktree_root}}`` in ``args``,
        ``env`` values and ``cwd`` becomes ``worktree_root``. Returns after the handshake.
        """
        self._check()
        server_id = thread_server_id(integration_id, thread_id)
        if config.scope == "project":
            raise ConfigError(f"server {server_id!r}: scope is 'project'; start it with "
                              "start_server()", server=server_id)
        if config.id and config.id != server_id:
            raise ConfigError(f"server {server_id!r}: config id {config.id!r} differs from "
                              f"the thread server id {server_id!r}", server=server_id)
        stored = replace(config, id=server_id, scope="thread")
        root = os.fspath(worktree_root) if worktree_root is not None else None
        if root is not None and not isinstance(root, str):
            raise ConfigError(f"server {server_id!r}: worktree_root must be a text path",
                              server=server_id)
        self._start(stored, key=(integration_id, thread_id), worktree_root=root)

    def _start(self, config: ServerConfig, *, key: tuple[str, str] | None,
               worktree_root: str | None) -> None:
        """Stop whatever runs under that id, then spawn, handshake and begin discovery."""
        server_id = config.id
        with self._id_lock(server_id):
            self._check()
            with self._lock:
                old = self._entries.get(server_id)
                if old is not None and (old.key is None) != (key is None):
                    other = "a thread" if old.key is not None else "a project"
                    raise ConfigError(f"server {server_id!r}: the id is taken by {other} "
                                      "server", server=server_id)
                self._entries.pop(server_id, None)
                self._start_errors.pop(server_id, None)
                resolver = self._resolver
            if old is not None:
                close_entry(old)
            try:
                entry = spawn_entry(
                    config, key, worktree_root, resolver, self._base_options, self._options,
                    lambda method, params: self._deliver(server_id, method, params))
            except BaseException as exc:
                if key is None:
                    with self._lock:
                        self._start_errors[server_id] = exc
                raise
            watch_tool_list(entry)
            with self._lock:
                closed = self._closed
                if not closed:
                    # Registered and discovering in one step, so a close() that comes now
                    # finds the entry complete (its threads to join).
                    self._entries[server_id] = entry
                    begin_discovery(entry)
            if closed:
                close_entry(entry)
                raise ClosedError(f"the Manager was closed while server {server_id!r} "
                                  "started", server=server_id)

    # -- stopping --------------------------------------------------------------------------

    def stop_server(self, server_id: str) -> bool:
        """Stop a project or thread server; ``False`` when none was running (never raises
        for an unknown id)."""
        self._check()
        with self._id_lock(server_id):
            with self._lock:
                entry = self._entries.pop(server_id, None)
                self._start_errors.pop(server_id, None)
            if entry is None:
                return False
            running = entry.alive
            close_entry(entry)
            return running

    def stop_thread_servers(self, thread_id: str) -> list[str]:
        """Stop every server of that thread (any integration) in parallel; return their ids."""
        self._check()
        with self._lock:
            ids = sorted(sid for sid, e in self._entries.items()
                         if e.key is not None and e.key[1] == thread_id)
        results, _ = run_parallel(self.stop_server, ids, what="stop", limit=len(ids) or 1)
        for server_id, outcome in zip(ids, results, strict=True):
            if isinstance(outcome, BaseException):
                _log.warning("stopping server %r failed: %s", server_id, outcome)
        return ids

    def close(self) -> None:
        """Stop every server in parallel within 10 s in all and delete their secret files.

        Servers still running after 10 s are named in a WARNING. Idempotent; other methods
        raise ``ClosedError`` afterwards. In a forked child it only drops references.
        """
        if self._forked or os.getpid() != self._pid:
            # The parent's servers, pipes and secret files are not ours to touch:
            # only drop the references (new objects, so nothing shared is mutated).
            self._closed = True
            self._entries = {}
            self._start_errors = {}
            _managers.discard(self)
            return
        with self._lock:
            if self._closed:
                return
            empty = not self._entries
            if empty:   # no server: nothing that a Ctrl-C could leave running
                self._closed = True
                self._start_errors.clear()
        if empty:
            _managers.discard(self)
            close_config_auth(self._configs)
            return
        # Two phases, as a client closing many servers by hand would: every server is told
        # to stop first (stdin closed, one after another: no waiting), then all are waited
        # for at once (and signalled if they linger), and each torn down as it exits. The
        # entries are taken out of the Manager on the close's own thread (take(), below), so
        # that a Ctrl-C here finds them either still in the Manager (nothing began: close()
        # may be called again) or in that thread's hands (the close goes on to its end).
        # The configs of the entries taken (for close_config_auth): not the entries, which
        # are let go one by one as they close (see close_entries).
        taken: list[list[ServerConfig]] = []

        def take() -> list[ServerEntry]:
            with self._lock:
                if self._closed:      # another thread's close() took them
                    return []
                self._closed = True
                mine = list(self._entries.values())
                self._entries.clear()
                self._start_errors.clear()
            _managers.discard(self)
            taken.append([entry.config for entry in mine])
            return mine

        hand_over = take
        if held_here(self._lock):
            # Re-entered on a thread inside a Manager method (a signal handler calling
            # close() while this thread was in tools(), say): the waiting thread's take()
            # would wait for a lock that this thread only releases once close() returns.
            # So the entries are taken here, as before the waiting thread took them.
            mine = take()

            def hand_over() -> list[ServerEntry]:
                handed = mine[:]
                mine.clear()    # the entries are let go one by one (see close_entries)
                return handed

        unfinished = close_entries(hand_over, CLOSE_TIMEOUT)
        if not taken:   # another close() took the entries: it finishes the job
            return
        if unfinished:
            for entry in unfinished:   # the process is being killed: the file goes now
                entry.remove_secret()
            _log.warning("Manager.close(): servers still stopping after %.0f s: %s",
                         CLOSE_TIMEOUT, ", ".join(repr(e.server_id) for e in unfinished))
        close_config_auth([*self._configs, *taken[0]])

    def __enter__(self) -> Manager:
        self._check()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        with self._lock:
            state = "closed" if self._closed else f"{len(self._entries)} running"
        return f"<mcpsync.Manager {state}>"

    # -- state -----------------------------------------------------------------------------

    def _project(self, server_id: str) -> ServerEntry | None:
        self._check()
        with self._lock:
            entry = self._entries.get(server_id)
        return entry if entry is not None and entry.key is None else None

    def server_started(self, server_id: str) -> bool:
        """Whether a project server with that id is connected (started and not exited)."""
        entry = self._project(server_id)
        return entry is not None and entry.alive

    def server_ready(self, server_id: str) -> bool:
        """Whether that server's tool discovery finished without error (and it runs)."""
        self._check()
        with self._lock:
            entry = self._entries.get(server_id)
        return entry is not None and entry.ready

    def server_ready_error(self, server_id: str) -> BaseException | None:
        """The start error while the last start of that project id failed, the discovery
        error when discovery failed, else ``None``; pair it with :meth:`server_started`."""
        self._check()
        with self._lock:
            failed = self._start_errors.get(server_id)
            entry = self._entries.get(server_id)
        if failed is not None:
            return failed
        if entry is None or entry.key is not None or not entry.discovered.is_set():
            return None
        return entry.discover_error or entry.refresh_error

    def thread_server_started(self, integration_id: str, thread_id: str) -> bool:
        """Whether the thread server of that pair is connected."""
        self._check()
        server_id = thread_server_id(integration_id, thread_id)
        with self._lock:
            entry = self._entries.get(server_id)
        return entry is not None and entry.key is not None and entry.alive

    def capabilities(self, server_id: str) -> dict[str, Any] | None:
        """The server's capabilities, or ``None`` when it is not connected."""
        self._check()
        with self._lock:
            entry = self._entries.get(server_id)
        return entry.client.capabilities if entry is not None and entry.alive else None

    def server_info(self, server_id: str) -> ServerInfo | None:
        """Who the server says it is (:class:`ServerInfo`), or ``None`` when not connected."""
        self._check()
        with self._lock:
            entry = self._entries.get(server_id)
        if entry is None or not entry.alive:
            return None
        # The Manager's ServerInfo.raw is the whole initialize / server/discover result.
        return replace(entry.client.server_info,
                       raw=entry.client.handshake_result)

    def server_stderr(self, server_id: str) -> str:
        """The last 64 KiB of that server's stderr; ``""`` for none and for HTTP servers."""
        entry = self._entry(server_id)
        if entry.config.is_http:
            return ""
        return entry.client.stderr_tail()

    def client(self, server_id: str) -> Client:
        """The live :class:`Client` of that server (``UnknownServer`` when none)."""
        return self._entry(server_id).client

    # -- tools -----------------------------------------------------------------------------

    def _managed(self, entries: Iterable[ServerEntry], prefixed: bool) -> list[ManagedTool]:
        out: list[ManagedTool] = []
        for entry in sorted(entries, key=lambda e: e.server_id):
            if not entry.ready:
                continue
            for tool in entry.tools or ():
                name = f"{entry.server_id}{_SEP}{tool.name}" if prefixed else tool.name
                out.append(ManagedTool(entry.server_id, tool, name))
        return out

    def tools(self, prefixed: bool = False) -> list[ManagedTool]:
        """The tools of ready project servers, by server id then each server's order."""
        self._check()
        with self._lock:
            entries = [e for e in self._entries.values() if e.key is None]
        return self._managed(entries, prefixed)

    def thread_tools(self, thread_id: str, prefixed: bool = False) -> list[ManagedTool]:
        """The project tools, then the tools of every ready server of that thread."""
        self._check()
        with self._lock:
            project = [e for e in self._entries.values() if e.key is None]
            thread = [e for e in self._entries.values()
                      if e.key is not None and e.key[1] == thread_id]
        return self._managed(project, prefixed) + self._managed(thread, prefixed)

    def resolve_tool(self, prefixed_name: str) -> tuple[str, str]:
        """``(server_id, tool_name)`` of a prefixed name, matching the longest known id."""
        self._check()
        with self._lock:
            known = set(self._entries) | {c.id for c in self._configs}
        best = ""
        for server_id in known:
            if (prefixed_name.startswith(server_id + _SEP)
                    and len(prefixed_name) > len(server_id) + len(_SEP)
                    and len(server_id) > len(best)):
                best = server_id
        if not best:
            raise UnknownServer(f"no known server id prefixes the tool name "
                                f"{prefixed_name!r}", server=None)
        return best, prefixed_name[len(best) + len(_SEP):]

    def list_tools(self, server_id: str) -> list[Tool]:
        """That server's tools: the discovered list once discovery is done (waiting for
        it), else listed now."""
        entry = self._entry(server_id)
        entry.discovered.wait(entry.config.timeout)
        if entry.discovered.is_set() and entry.discover_error is None \
                and entry.tools is not None:
            return DisplayList(entry.tools)
        return entry.client.list_tools()

    def proxy(self, server_id: str) -> ToolProxies:
        """That server's tools as Python callables, as ``Client.tools`` gives them
        (``manager.proxy("files").read_file(path="a")``); each call goes through
        :meth:`call_tool`, so the policy applies. Made from the discovered tool list."""
        self._entry(server_id)   # an unknown id fails here, not at the first attribute
        return ToolProxies(
            lambda: server_id, lambda: self.list_tools(server_id),
            lambda name, args, **options: self.call_tool(server_id, name, args, **options),
            {"timeout": None, "progress": None})

    def call_tool(self, server_id: str, name: str, args: Mapping[str, Any] | None = None, *,
                  timeout: float | None = None,
                  progress: ProgressCallback | bool | None = None,
                  task_timeout: float | None = None) -> CallToolResult:
        """Call a tool of a project or thread server, after the policy allowed it.

        Raises ``UnknownServer`` for an unknown id, and ``PolicyDenied``,
        ``BudgetExceeded`` or ``ApprovalRejected`` (``local=True``) when the policy refuses;
        nothing is sent then. A server still discovering its tools is called anyway.
        ``progress`` and ``task_timeout`` (the bound of a whole task) are as for
        :meth:`Client.call_tool` (``progress=True``: a progress bar).
        """
        check_progress(progress, f"calling tool {name!r} on server {server_id!r}")
        entry = self._entry(server_id)   # an unknown id fails before the policy runs
        policy = self._policy
        decision = None
        if policy is not None:
            decision = check_call(policy, self._budget, server_id, name,
                                  args if args is not None else {})
            # Looked up again: approve() may have waited for a human while the server was
            # restarted, and the call goes to the one running now.
            entry = self._entry(server_id)
        started = time.monotonic()
        try:
            return entry.client.call_tool(name, args, timeout=timeout, progress=progress,
                                          task_timeout=task_timeout)
        except RemoteError as exc:
            if entry.config.gateway:
                refusal = gateway_refusal(exc, server_id, name)
                if refusal is not None:
                    raise refusal from exc
            raise
        finally:
            if decision is not None:   # wall-time budgets count the call's duration
                finish_call(self._budget, decision, time.monotonic() - started)

    # -- prompts and resources -------------------------------------------------------------

    def list_prompts(self, server_id: str) -> list[Prompt]:
        """Every prompt of that server (all pages)."""
        return self._entry(server_id).client.list_prompts()

    def get_prompt(self, server_id: str, name: str,
                   arguments: Mapping[str, str] | None = None) -> GetPromptResult:
        """Render one prompt of that server."""
        return self._entry(server_id).client.get_prompt(name, arguments)

    def list_resources(self, server_id: str) -> list[Resource]:
        """Every resource of that server (all pages)."""
        return self._entry(server_id).client.list_resources()

    def read_resource(self, server_id: str, uri: str) -> ReadResourceResult:
        """Read one resource of that server."""
        return self._entry(server_id).client.read_resource(uri)

    # -- notifications ---------------------------------------------------------------------

    def _deliver(self, server_id: str, method: str, params: Any) -> None:
        """Hand one notification to the handler (the server's dispatcher thread).

        ``notifications/tools/list_changed`` first starts a background re-discovery (it
        never blocks), then reaches the handler like any other notification; the handler
        still sees the old list in :meth:`tools`. A server with a tool-list watch (modern,
        see ``_lifecycle.watch_tool_list``) is re-discovered by that watch's callback, which
        the client runs just before this observer; starting one here too would cost a second
        ``tools/list`` for every change.
        """
        if method == "notifications/tools/list_changed":
            with self._lock:
                entry = None if self._closed else self._entries.get(server_id)
            if entry is not None and entry.list_watch is None:
                begin_discovery(entry)
        handler = self._handler
        if handler is None or method == "notifications/subscriptions/acknowledged":
            return   # the acknowledgement of the tool-list watch is our plumbing, not news
        try:
            handler(Notification(server_id, method, params))
        except Exception as exc:
            _log.exception("the notification handler raised on %s from server %r", method,
                           server_id)
            self._guard.report("Manager notification", exc, server=server_id)

    # -- thread-scope ids (also module functions) ------------------------------------------

    thread_server_id = staticmethod(thread_server_id)
    split_thread_server_id = staticmethod(split_thread_server_id)
