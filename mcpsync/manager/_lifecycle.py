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
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from mcpsync._threads import join_all, spawn
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
from mcpsync.session._base import MAIN_THREAD_SLICE
from mcpsync.transport.stdio import StdioTransport
from mcpsync.transport.stdio._exit_watch import ExitWatch, claim_close, finish_claimed_close

__all__ = ["begin_close_entry", "begin_discovery", "close_config_auth", "close_entries",
           "close_entry", "spawn_entry", "watch_tool_list"]

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

    ``Manager.close()`` calls it on every server, one after another on the close's
    waiting thread (see :func:`close_entries`), before any server is waited for: all the
    servers then exit at once, as if their stdins had been closed together. A server with
    a tool-list watch open is left to :func:`close_entry` (ending the watch is an exchange
    with the server).
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


#: A teardown still running after this long (a thread it joins is held by a callback of
#: yours, say) makes :func:`close_entries` start another teardown thread for those queued
#: behind it, so that one slow server delays the others by at most this much.
TEARDOWN_STALL = 0.05


def close_entries(take: Callable[[], list[ServerEntry]],
                  timeout: float) -> list[ServerEntry]:
    """Close every entry that ``take()`` hands over, all at once, within ``timeout``
    seconds in all; return those still closing then (their close goes on, on daemon
    threads).

    ``take`` runs first thing on the waiting thread, not on the caller's: it takes the
    entries out of their owner (the Manager marks itself closed there). So a Ctrl-C on the
    calling thread lands either before that thread started, when nothing was taken yet (the
    Manager is still open, and ``close()`` may be called again), or after, when the close is
    under way and goes on to its end; never in between, with the servers in the hands of a
    thread that left. The entries are not kept: each is let go as soon as it is closed, so
    that its client's objects are freed on the teardown thread while other servers are still
    exiting, not all at once when ``close()`` returns.

    What ``Manager.close()`` does. One thread, ``mcpsync-close-wait``, tells every server to
    stop (:func:`begin_close_entry`), then waits for all the stdio servers' exits at once
    and signals those that linger, each on the bounded schedule of a single close (see
    ``ExitWatch``); each server that exited is torn down (threads joined, descriptors
    closed, secret file deleted) on a teardown thread, ``mcpsync-close-<n>``: one, and
    another only when every one is held up for ``TEARDOWN_STALL``. Before, a thread per
    server waited for its own server's exit: starting, waking and joining those 50 threads
    was most of the CPU a close of 50 servers took. A server that cannot be watched that
    way (an HTTP server, one with a tool-list watch, one whose stdin stayed open because a
    write held it, one another thread is closing) is closed whole on a thread of its own,
    in parallel, as before.

    The calling thread only waits (on the main thread in slices of ``MAIN_THREAD_SLICE``,
    so that a simulated Ctrl-C is seen too): interrupted, it leaves, and the close carries
    on in the background to its end; its threads, all daemons, end by themselves (the
    teardown threads when no job is left) and are joined here when nothing interrupts.
    """
    closing = _Closing(take)
    deadline = time.monotonic() + timeout
    closing.start()
    if threading.current_thread() is threading.main_thread():
        # In short slices: a simulated Ctrl-C (``_thread.interrupt_main()``) is only seen
        # between two waits, where a real SIGINT interrupts the wait itself.
        while not closing.all_done.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            closing.all_done.wait(min(left, MAIN_THREAD_SLICE))
    else:
        closing.all_done.wait(timeout)
    join_all(closing.threads(), deadline)
    return closing.unfinished()


class _Closing:
    """The state of one :func:`close_entries`: the watch's thread, the teardown queue and
    its threads, and which entries are done."""

    def __init__(self, take: Callable[[], list[ServerEntry]]) -> None:
        self._take: Callable[[], list[ServerEntry]] | None = take
        # Filled by _coordinate() from take(); each becomes None once closed.
        self.entries: list[ServerEntry | None] = []
        self.all_done = threading.Event()
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)      # a job queued, or no more jobs
        self._drained = threading.Condition(self._lock)   # the queue just emptied
        # (entry index, its claimed transport, what the watch found: see _close_one)
        self._jobs: deque[tuple[int, StdioTransport | None, bool | None]] = deque()
        self._no_more = False
        self._idle = 0
        self._busy: dict[int, float] = {}                 # worker number: since when
        self._done: list[bool] = []
        self._left = 0
        self._threads: list[threading.Thread] = []
        self._count = 0

    def start(self) -> None:
        with self._lock:
            self._threads.append(spawn("mcpsync-close-wait", self._coordinate))

    def threads(self) -> list[threading.Thread]:
        with self._lock:
            return list(self._threads)

    def unfinished(self) -> list[ServerEntry]:
        with self._lock:
            return [entry for entry, done in zip(self.entries, self._done, strict=True)
                    if not done and entry is not None]

    # -- the watching thread ---------------------------------------------------------------

    def _coordinate(self) -> None:
        """Thread ``mcpsync-close-wait``: tell every server to stop, watch the exits of
        those it could claim, hand each settled one to a teardown thread, and see that the
        teardowns keep moving until the last is taken."""
        take, self._take = self._take, None
        try:
            entries = take() if take is not None else []
        except BaseException:   # nothing was handed over: nothing to close
            self.all_done.set()
            raise
        with self._lock:
            self.entries = list(entries)
            self._done = [False] * len(entries)
            self._left = len(entries)
        del entries
        if not self.entries:
            self.all_done.set()
        watch = ExitWatch()
        claimed: dict[int, StdioTransport] = {}
        handed = 0    # entries [0, handed) are watched or closing alone
        try:
            for index in range(len(self.entries)):
                transport = self._begin(index)
                if transport is not None:
                    claimed[index] = transport
                    watch.add(transport, index)
                else:
                    self._alone(index)
                handed = index + 1
            transport = None   # the teardowns are to let go of it (see close_entries)
            while len(watch):
                for key, exited in watch.step(self._supervise()):
                    assert isinstance(key, int)
                    self._submit(key, claimed.pop(key), exited)
        except BaseException:   # a bug: whatever is left is closed in full all the same
            for index, transport in claimed.items():   # the finish runs the whole sequence
                self._submit(index, transport, None)
            for index in range(handed, len(self.entries)):
                if index not in claimed:
                    self._alone(index)
            raise
        finally:
            self._wind_down()

    def _begin(self, index: int) -> StdioTransport | None:
        """Tell the server to stop; return its transport if the watch can take its close
        over (a stdio server whose stdin is closed now, no tool-list watch open)."""
        entry = self.entries[index]
        assert entry is not None   # none is closed before it is handed over
        begin_close_entry(entry)
        transport = entry.client._transport
        if (isinstance(transport, StdioTransport) and entry.list_watch is None
                and claim_close(transport)):
            return transport
        return None

    def _wind_down(self) -> None:
        """Keep the teardowns moving until every queued one is taken, then let the teardown
        threads end."""
        with self._lock:
            while self._jobs:
                wait = self._stall_check(time.monotonic())
                self._drained.wait(wait)
            self._no_more = True
            self._idle = 0
            self._work.notify_all()

    def _supervise(self) -> float | None:
        with self._lock:
            return self._stall_check(time.monotonic())

    def _stall_check(self, now: float) -> float | None:
        """Under the lock: start another teardown thread when jobs wait and every thread
        has been busy for ``TEARDOWN_STALL``; return how long until the next look (None:
        nothing to look after)."""
        if not self._jobs or self._idle:
            return None
        if not self._busy:
            self._spawn_worker()
            return None
        newest = max(self._busy.values())
        if now - newest >= TEARDOWN_STALL:
            self._spawn_worker()
            return TEARDOWN_STALL
        return newest + TEARDOWN_STALL - now

    def _submit(self, index: int, transport: StdioTransport | None,
                exited: bool | None) -> None:
        with self._lock:
            self._jobs.append((index, transport, exited))
            if self._idle:
                self._idle -= 1    # taken off here: a second job must not count on it too
                self._work.notify()
            elif not self._busy:
                self._spawn_worker()

    def _spawn_worker(self) -> None:
        """Under the lock: one more teardown thread."""
        self._count += 1
        number = self._count
        self._busy[number] = time.monotonic()   # busy until it asks for its first job
        self._threads.append(spawn(f"mcpsync-close-{number}", self._teardowns, number))

    def _alone(self, index: int) -> None:
        """Close an entry the watch does not hold, whole, on a thread of its own."""
        with self._lock:
            self._count += 1
            self._threads.append(spawn(f"mcpsync-close-{self._count}", self._close_one,
                                       index, None, None))

    # -- the teardown threads --------------------------------------------------------------

    def _teardowns(self, number: int) -> None:
        """Thread ``mcpsync-close-<n>``: tear down settled servers until there are no more."""
        while True:
            with self._lock:
                del self._busy[number]
                while not self._jobs:
                    if self._no_more:
                        return
                    self._idle += 1   # whoever wakes us takes us off the count
                    self._work.wait()
                index, transport, exited = self._jobs.popleft()
                self._busy[number] = time.monotonic()
                if not self._jobs:
                    self._drained.notify()
            self._close_one(index, transport, exited)
            transport = None   # let it go now, not at the next job

    def _close_one(self, index: int, transport: StdioTransport | None,
                   exited: bool | None) -> None:
        """Close one entry: first its claimed transport's finish (``exited`` as the watch
        found it; ``None``, the watch never ran: the whole shutdown), then the rest of the
        client and the entry (which then finds its transport closed)."""
        entry = self.entries[index]
        assert entry is not None
        try:
            try:
                if transport is not None:
                    finish_claimed_close(transport, exited)   # closed, whatever it raises
            finally:
                close_entry(entry)
        except BaseException as exc:   # the entry is as closed as it gets; go on with others
            _log.debug("server %r: closing failed: %r", entry.server_id, exc)
        finally:
            with self._lock:
                self.entries[index] = None
                self._done[index] = True
                self._left -= 1
                if self._left == 0:
                    self.all_done.set()


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
