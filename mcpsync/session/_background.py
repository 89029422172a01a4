"""The background reader of a session (``mcpsync-<kind>-reader-<name>``): it reads whenever
no caller holds the reader role, and sleeps on the role's gate while one does. It is the
slow half of the hot path: a caller that leads never waits for it, and a caller that follows
is woken by whoever reads its answer. On stdio it is started only when first needed (until
then ``Role.absent``, and the shared idle watch looks at the server; see ``_start_reader``
and ``_idle_ready``). See ``_engine`` for the theory of operation.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Final

from mcpsync._threads import new_thread
from mcpsync.errors import ConnectionLost
from mcpsync.jsonrpc import StreamError
from mcpsync.session._base import (
    HANDOFF_GRACE,
    MAX_PARK,
    MAX_WATCH_PAUSE,
    Phase,
    SessionBase,
    logger,
)
from mcpsync.session._call import Call
from mcpsync.session._role import BG as _BG
from mcpsync.transport.base import Transport

__all__ = ["BackgroundReader"]


#: Answers to the idle watch (``mcpsync.transport.stdio._idle_watch``, whose ``DROP`` and
#: ``KEEP`` they equal; the session does not import a transport's module): let the session
#: go, or keep watching it; a positive number is a pause, in seconds.
_LET_GO: Final = -1.0
_KEEP: Final = 0.0
#: The pause after a reader could not be started from the watch (the process is out of
#: threads): the session stays watched, and is asked again then.
_RETRY: Final = 0.1


class BackgroundReader(SessionBase):
    """The loop of the background reader thread, and its start where it begins absent."""

    _bg_thread: threading.Thread | None

    def _new_reader(self) -> threading.Thread:
        """The background reader's thread, unstarted. Named after the transport
        (``mcpsync-http-reader-<name>`` on HTTP), so a thread dump tells which kind of
        connection a reader serves."""
        return new_thread(f"mcpsync-{self._transport.kind}-reader-{self._safe}", self._bg_run)

    def _unpark(self) -> None:
        """Under the lock: wake the background reader, or start it if it is absent (and
        the session is not closing: a close stops readers, it needs none)."""
        role = self._role
        if role.parked:
            if role.absent:
                self._start_reader()
            else:
                role.parked = False
                role.gate.release()

    def _start_reader(self) -> None:
        """Under the lock: start the absent background reader, which stays until the session
        ends. It begins awake (``parked`` clear, ``long_park`` set): a give-back before its
        first sleep takes the lock, as with any reader that is not asleep. The new thread
        waits for the lock, so it looks at the role only once these stores are all made.

        The idle watch lets the session go only once the thread runs. A thread that cannot
        be started (``RuntimeError``: the process is out of threads) leaves the reader
        absent as before, still watched, and the error goes to whoever needed the reader;
        the next need tries again. (A Ctrl-C inside ``Thread.start()`` cannot tell whether
        the thread began: the reader is then taken as started.)"""
        role = self._role
        if not role.absent or self._phase >= Phase.CLOSING:
            return
        thread = self._new_reader()
        role.absent = False
        role.parked = False
        role.long_park = True
        self._bg_thread = thread
        try:
            thread.start()
        except RuntimeError:
            self._bg_thread = None
            role.long_park = False
            role.parked = True
            role.absent = True
            raise
        unwatch_idle = getattr(self._transport, "unwatch_idle", None)
        if unwatch_idle is not None:
            unwatch_idle()

    def _idle_ready(self, force: bool) -> float:
        """The idle watch's thread: this session's stdout is readable (or at EOF), or its
        server exited. With the role free and that still so now, start the reader (it reads
        what came, and meets an exit as a loss); with the role held, the caller holding it
        most likely reads what came itself, so the watch leaves this session alone for a
        pause (a session called back to back wakes the watch about once per pause, not once
        per answer). ``force``: start the reader whatever the state (the watch is ending by
        a bug). A reader that cannot be started (out of threads) leaves the session
        watched, asked again after ``_RETRY`` seconds.

        The pause is HANDOFF_GRACE, doubled (up to MAX_WATCH_PAUSE) when the watch asks
        within HANDOFF_GRACE of the end of the last one with the role held: calls coming
        back to back (or one call whose server writes more often than that, progress
        say; the caller reads it all). Calls 2 * HANDOFF_GRACE or more apart get
        HANDOFF_GRACE each time. With HANDOFF_GRACE alone, the watch thread's work cost a
        session called back to back about 2 % of its CPU per call in a pinned benchmark
        (docs/performance.md, "The idle watch's pause, doubled while calls keep coming").
        What is given up is how soon something the server says unasked, or its exit, is
        seen right after such a run of calls: within the pause, at most MAX_WATCH_PAUSE."""
        with self._lock:
            role = self._role
            if not role.absent or self._phase is not Phase.OPEN:
                return _LET_GO
            if not force:
                if role.holder is not None:
                    aside = self._aside
                    now = time.monotonic()
                    pause = HANDOFF_GRACE
                    if now - aside.watch_resume < HANDOFF_GRACE:
                        pause = min(aside.watch_pause * 2.0, MAX_WATCH_PAUSE)
                    aside.watch_pause = pause
                    aside.watch_resume = now + pause
                    return pause
                idle_ready = getattr(self._transport, "idle_ready", None)
                if idle_ready is not None and not idle_ready():
                    return _KEEP   # what woke the watch was read by a caller since
            try:
                self._start_reader()
            except RuntimeError as exc:   # out of threads: still watched, asked again later
                logger.warning("server %r: could not start its reader (%s); trying again "
                               "in %g s", self.name, exc, _RETRY)
                return _RETRY
            return _LET_GO

    def _idle_full(self) -> None:
        """A write found stdin's pipe full (on the writing thread, write lock held): the
        server may be blocked writing to a stdout nobody reads. Start the reader, which
        drains stdout (taking a blocked caller's role over, as it does for any reader)."""
        if self._role.absent:
            with self._lock:
                self._start_reader()

    def _bg_run(self) -> None:
        """Thread ``mcpsync-<kind>-reader-<name>``: read whenever no caller holds the role.

        While a caller holds it, sleep on the gate: HANDOFF_GRACE when the holder changed
        since the last look (calls are flowing; a role given back with nothing pending is
        picked up within that time), doubling up to MAX_PARK while the same call keeps it.
        A holder still writing its request after a whole sleep has a blocked write: take
        the role over so that stdout is drained (the caller then waits as a follower).
        """
        transport = self._transport
        gate = self._role.gate
        # The holder seen at the last sleep, and the one seen writing then, each with its
        # call's id: a Call object is reused for a later call once its own is over (see
        # Session._request), so the object alone does not say "the same call still holds
        # the role" or "the same write is still going on"; the id, unique in a session,
        # does. (Both are read in one locked section, during which this reader is not
        # parked: a holder's give-back then takes the lock (_release_role), so the holder
        # cannot be given back and reused between the two reads. A mismatch would at
        # worst make one sleep longer, or take over a write that was not blocked, which a
        # takeover handles as any other.)
        last_holder: object = None
        last_id = 0
        seen_sending: Call | None = None
        seen_id = 0
        park_for = HANDOFF_GRACE
        yielded = False
        while True:
            with self._lock:
                if self._phase is not Phase.OPEN:
                    self._role.free(_BG)
                    break
                holder = self._role.holder
                if yielded and holder is None and not self._pending:
                    # Gave the role up to a sole caller (see _bg_read): sleep HANDOFF_GRACE
                    # with the role free, as after a leader gives it back. Not when a call
                    # waits: a caller may have taken the free role, read its own answer
                    # and given it back in the gap (its wake-up found no sleeper), so the
                    # reader takes the role now rather than leave that answer unread.
                    park = True
                    park_for = HANDOFF_GRACE
                    last_holder = seen_sending = None
                    self._role.long_park = False
                    self._role.parked = True
                elif (holder is None and self._role.take(_BG)) or holder is _BG or (
                        seen_sending is not None and holder is seen_sending
                        and seen_sending.id == seen_id and self._role.sending is holder):
                    self._role.holder = _BG
                    park = False
                else:
                    if holder is None:
                        # A caller took the role's token after our look (it claims without
                        # the lock): it owns the role now, so we park as for any holder.
                        # Its store of ``holder`` follows its ``del`` with nothing between
                        # where another thread runs, but for an opcode-level tracer: if
                        # ``holder`` is still None, the sleep is a short one (doubling it,
                        # as for a holder seen before, would meet the look for a role given
                        # back below, and loop without sleeping until the store).
                        holder = self._role.holder
                    park = True
                    now_id = holder.id if isinstance(holder, Call) else 0
                    park_for = min(park_for * 2, MAX_PARK) \
                        if holder is last_holder and now_id == last_id \
                        and holder is not None else HANDOFF_GRACE
                    last_holder = holder
                    last_id = now_id
                    seen_sending = self._role.sending
                    if seen_sending is not holder:
                        seen_sending = None
                    seen_id = now_id
                    self._role.long_park = park_for > HANDOFF_GRACE
                    self._role.parked = True
            yielded = False
            if park:
                if park_for > HANDOFF_GRACE and self._role.holder is None:
                    # A long sleep, but the role was given back meanwhile: a caller gives
                    # it back without the lock (see _release_role) and reads long_park
                    # after it stored ``holder = None``; we stored long_park above, before
                    # this second look at holder, so one of us sees the other. Undo the
                    # park as a timed-out sleep does, and look again.
                    with self._lock:
                        if self._role.parked:
                            self._role.parked = False
                        else:  # woken already: consume that wake-up
                            gate.acquire(False)
                    continue
                if not gate.acquire(timeout=park_for):
                    with self._lock:  # timed out: leave the gate locked and ourselves awake
                        if self._role.parked:
                            self._role.parked = False
                        else:  # released after our timeout: consume that wake-up
                            gate.acquire(False)
                continue
            last_holder = seen_sending = None
            self._role.long_park = True
            try:
                yielded = self._bg_read(transport)
            except StreamError as exc:
                with self._lock:
                    self._role.free(_BG)
                self._lose(exc)
            except Exception as exc:  # a bug; never let the reader die silently
                logger.error("server %r: the reader failed", self.name, exc_info=True)
                with self._lock:
                    self._role.free(_BG)
                self._lose(ConnectionLost(f"the reader of server {self.name!r} failed: "
                                          f"{exc!r}", server=self.name))
        self._teardown_after_loss()

    def _bg_read(self, transport: Transport) -> bool:
        """Hold the role and read until told to stop or a caller asks for the role. True when
        it gave the role up (nobody holds it now) to a sole caller it had answered."""
        monotonic = time.monotonic
        while True:
            timeout: float | None = None
            if self._unattended:
                now = monotonic()
                earliest = self._expire_unattended(now)
                if earliest != math.inf:
                    timeout = max(0.0, earliest - now)
            items = transport.receive(timeout)
            if items:
                self._feed(items)
            elif items is None:
                self._on_eof()
            with self._lock:
                if self._phase is not Phase.OPEN:
                    return False
                want = self._role.want
                if want is not None:
                    self._role.want = None
                    if not want.done and not want.answered:
                        # Grant the role to the caller whose call is the only one in flight.
                        self._role.grant(want)
                        return False
                    if not self._pending:
                        # The sole caller that asked for the role was answered by this very
                        # read (on one CPU the server answers before we see the wake-up).
                        # Keeping the role would make its next call ask again and be
                        # answered here again: two thread hops per call for as long as it
                        # keeps calling. Give the role up instead, so that its next call
                        # claims it free and reads its own answer. Nothing is pending, so
                        # nothing waits for a read; _bg_run sleeps HANDOFF_GRACE with the
                        # role free (the invariant a leader's hand-back keeps), so what the
                        # server sends meanwhile is read within that time.
                        self._role.free(_BG)
                        return True
