"""One server entry's life, from spawn to close, apart from the Manager's registry.

The Manager keeps the table of running servers (which id runs, the locks, the policy);
what happens to one :class:`ServerEntry` once it exists needs none of that: its spawn with
a fresh secret file, the watch of a modern server's tool list, the background tool
discovery, and its teardown. Keeping them here leaves ``_manager`` with routing and
bookkeeping only. Every function here is on a cold path (start, list change, stop); a tool
call never passes through this module.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from mcpsync._threads import spawn
from mcpsync.client._connect import connect
from mcpsync.client._options import ClientOptions
from mcpsync.config import ServerConfig
from mcpsync.errors import ConnectionLost
from mcpsync.manager._types import ServerEntry
from mcpsync.secrets import (
    SecretFile,
    SecretResolver,
    apply_header_secrets,
    apply_placeholders,
    check_secret_config,
    write_secret_file,
)

__all__ = ["begin_close_entry", "begin_discovery", "close_config_auth", "close_entry",
           "spawn_entry", "watch_tool_list"]

_log = logging.getLogger("mcpsync.manager")

#: ``observer(method, params)``: every notification of one server, after the client's own
#: handling (the Manager binds the server id).
Observer = Callable[[str, Any], None]


def spawn_entry(config: ServerConfig, key: tuple[str, str] | None, worktree_root: str | None,
                resolver: SecretResolver | None, base_options: ClientOptions | None,
                options: Mapping[str, Any], observer: Observer) -> ServerEntry:
    """Check the config, write its secret file, connect; clean up on any failure."""
    server_id = config.id
    check_secret_config(config, resolver)
    secret: SecretFile | None = None
    exited = threading.Event()

    def lost(error: ConnectionLost) -> None:
        # The client's reader saw the exit (its pidfd or stdout EOF) or the connection
        # drop: the server is down for good (restart=None), so its secret goes now.
        exited.set()
        if secret is not None:
            secret.remove()
        _log.warning("server %r: %s; start it again with start_server()", server_id, error)
    try:
        if config.secret_ref:
            assert resolver is not None   # check_secret_config refused it otherwise
            if not config.is_http:
                secret = write_secret_file(config, resolver)
        actual = apply_placeholders(config, secret_file=secret.path if secret else None,
                                    worktree_root=worktree_root)
        if config.secret_ref and config.is_http:
            assert resolver is not None
            actual = apply_header_secrets(actual, resolver)   # {{secret:KEY}} in headers
        kwargs = dict(options)
        # The Manager owns the lifecycle: a crashed server stays down (and its secret
        # file is deleted) until start_server() starts it anew with a new file.
        kwargs["restart"] = None
        # The observer sees every notification (progress, logs, list changes included)
        # after the client's own handling, with params as sent.
        client = connect(actual, base_options, notification_observer=observer,
                         on_connection_lost=lost, **kwargs)
    except BaseException:
        if secret is not None:
            secret.remove()
        raise
    return ServerEntry(server_id, config, client, secret, key, exited)


def watch_tool_list(entry: ServerEntry) -> None:
    """Hear a modern server's tool-list changes: open its ``subscriptions/listen``.

    A legacy server sends ``notifications/tools/list_changed`` on the connection, and the
    Manager's notification observer already sees it. A modern (2026-07-28) server sends it
    only on a listen stream the client asked for, so one is opened here when the server
    announces ``tools.listChanged``. It is opened before the first discovery begins, so a
    change made meanwhile is not missed (it only folds into that discovery as a rerun). The
    callback runs on the client's dispatcher thread and never blocks. A server that does
    not acknowledge the watch still starts: its tools are discovered once, and a WARNING
    says so.
    """
    client = entry.client
    tools = client.capabilities.get("tools")
    if client.era != "modern" or not (isinstance(tools, Mapping)
                                      and tools.get("listChanged") is True):
        return
    try:
        entry.list_watch = client.on_list_changed("tools", lambda kind: begin_discovery(entry))
    except Exception as exc:  # the server runs; only the refresh is lost
        _log.warning("server %r: cannot watch its tool list (%s); its tools are "
                     "discovered once, not after changes", entry.server_id, exc)
    except BaseException:      # e.g. Ctrl-C while waiting for the acknowledgement
        close_entry(entry)
        raise


def begin_discovery(entry: ServerEntry) -> None:
    """Start the discovery thread, or fold this request into the one running.

    Called for the first discovery and for every ``notifications/tools/list_changed`` (on
    the dispatcher thread, so it never blocks). One thread per server at a time: a request
    while it runs only marks a rerun, so a burst costs at most one more ``tools/list``.
    Takes only ``discover_lock``, never the Manager's lock, so a caller may hold that one.
    """
    with entry.discover_lock:
        if entry.closing:
            return
        if entry.discovering:
            entry.rediscover = True
            return
        entry.discovering = True
        entry.rediscover = False
        entry.discover_thread = spawn(f"mcpsync-discover-{entry.server_id}",
                                      _discovery_loop, entry)


def _discovery_loop(entry: ServerEntry) -> None:
    """Discover until no list_changed came during the last ``tools/list``."""
    while True:
        _discover(entry)
        with entry.discover_lock:
            if not entry.rediscover or entry.closing:
                entry.discovering = False
                return
            entry.rediscover = False


def _discover(entry: ServerEntry) -> None:
    """List every tool (all pages); record the outcome.

    A failure before any list was known is the discovery error (the server is not ready);
    a failure of a re-discovery keeps the old list and is kept as ``refresh_error`` until a
    later discovery succeeds.
    """
    try:
        client = entry.client
        tools = client.list_tools() if "tools" in client.capabilities else []
    except BaseException as exc:  # kept for server_ready_error(), never raised here
        if entry.tools is None:
            entry.discover_error = exc
        else:
            entry.refresh_error = exc
        if not entry.client.closed and not entry.closing:
            again = "re-" if entry.tools is not None else ""
            _log.warning("tool %sdiscovery on server %r failed: %s", again,
                         entry.server_id, exc)
    else:
        entry.tools = tools           # the list first, so ready never shows no list
        entry.discover_error = None
        entry.refresh_error = None
    finally:
        entry.discovered.set()


def begin_close_entry(entry: ServerEntry) -> None:
    """Begin an entry's close without waiting for anything: no re-discovery starts, and
    the server is told to stop (a stdio server's stdin is closed, so it starts exiting).

    ``Manager.close()`` calls it on every server, one after another on its own thread,
    before :func:`close_entry` waits for each in parallel: all the servers then exit at
    once, as if their stdins had been closed together, rather than each when its closing
    thread gets to it. A server with a tool-list watch open is left to :func:`close_entry`
    (ending the watch is an exchange with the server).
    """
    with entry.discover_lock:
        entry.closing = True          # no re-discovery starts after this
        if entry.list_watch is not None:
            return
    try:
        entry.client._close_early()
    except Exception as exc:  # close_entry() below closes it all the same
        _log.warning("server %r: beginning the close failed (it is closed all the same): "
                     "%s", entry.server_id, exc)


def close_entry(entry: ServerEntry) -> None:
    """Stop the process and its threads, and delete its secret file."""
    with entry.discover_lock:
        entry.closing = True          # no re-discovery starts after this
        thread = entry.discover_thread
        watch, entry.list_watch = entry.list_watch, None
    try:
        if watch is not None:
            # Ends the listen on the wire; client.close() then joins its thread.
            try:
                watch.close()
            except Exception as exc:  # a dead server: close() below cleans up
                _log.debug("server %r: closing the tool-list watch failed: %s",
                           entry.server_id, exc)
        entry.client.close()
    finally:
        if thread is not None and thread is not threading.current_thread():
            thread.join(5.0)
        entry.remove_secret()


def close_config_auth(configs: Iterable[ServerConfig]) -> None:
    """Close the OAuth providers mcpsync made for config-file entries (their HTTP sessions
    to the authorization servers); a provider you passed is yours to close."""
    seen: set[int] = set()
    for config in configs:
        hooks = config.auth
        if hooks is None or id(hooks) in seen or not getattr(hooks, "_mcpsync_owned", False):
            continue
        seen.add(id(hooks))
        try:
            hooks.close()  # type: ignore[attr-defined]
        except Exception as exc:  # one provider's teardown never stops the others
            _log.debug("closing the OAuth provider of %s failed: %s", config.id, exc)
