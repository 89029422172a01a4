"""Approval holds: a tool call waits while a human (or a program) decides on it.

A rule of the guard can say that a tool needs approval. The call is then handed to the
:class:`ApprovalDesk`, which asks an approver and answers with a :class:`Verdict`; the
guard forwards the call only when the verdict approves it, and answers the host with a
refusal otherwise.

What an approval covers. Exactly one held call: its :func:`call_digest` (the upstream, the
tool and the canonical JSON of the arguments) and its ticket, a random id each held call
gets of its own. So an approval cannot release a call with other arguments (the digest
differs, and the desk checks it again before it approves), and it cannot be replayed: a
second call with the same arguments is a second ticket, asked about anew, and a ticket is
decided once.

Threads. Each held call has a hold thread ``mcpsync-gateway-approval-<n>`` that keeps the
time, sends the progress messages and calls ``on_done``, and an asker thread
``mcpsync-gateway-approval-<n>-ask`` that runs the approver (which may block: a person
takes seconds). When the hold time passes, the hold thread answers on its own and tells a
built-in approver to withdraw the question, which ends its asker; a library callback that
keeps blocking is left to finish on its daemon thread, its answer ignored. At most
``max_held`` calls are held at once; beyond, a call is refused at once with a readable
reason rather than queued, since a queue would spend its hold time waiting for a turn.
"""

from __future__ import annotations

import collections
import hashlib
import importlib
import itertools
import json
import logging
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from mcpsync._threads import join_all, spawn

__all__ = [
    "ApprovalDesk",
    "Approver",
    "ApproverBase",
    "HeldCall",
    "Verdict",
    "approver_from_config",
    "call_digest",
    "desk_from_config",
    "from_policy_callback",
]

_log = logging.getLogger("mcpsync.gateway.approval")

#: Tickets remembered after their call left the desk, to refuse a second submission of one.
_SEEN_MAX: Final = 4096


def call_digest(upstream: str, tool: str, arguments: Mapping[str, Any]) -> str:
    """The sha256 hex digest of the canonical JSON of ``[upstream, tool, arguments]``.

    Canonical: keys sorted, no spaces, non-ASCII text kept as it is (``ensure_ascii=False``),
    so two spellings of the same arguments give one digest and any change of a value gives
    another. Raises ``ValueError`` for arguments that are not JSON (NaN, a set, ...).
    """
    try:
        text = json.dumps([upstream, tool, arguments], sort_keys=True, separators=(",", ":"),
                          ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"the arguments of {upstream}/{tool} are not JSON, so they cannot "
                         f"be approved: {exc}") from None
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _new_ticket() -> str:
    return secrets.token_hex(8)


@dataclass(frozen=True, repr=False)
class HeldCall:
    """One tool call waiting for approval."""

    upstream: str          #: the upstream's id (not the prefixed tool name)
    tool: str              #: the upstream's own tool name
    arguments: Mapping[str, Any]
    digest: str            #: ``call_digest(upstream, tool, arguments)``
    caller: str            #: who called (the budget key), shown in the approver's summary
    #: this held call's own random id: two calls with equal digests are two tickets
    ticket: str = field(default_factory=_new_ticket)

    def __repr__(self) -> str:
        # argument values may hold secrets and reprs end up in logs: names only
        names = ", ".join(sorted(map(str, self.arguments)))
        return (f"HeldCall({self.upstream!r}, {self.tool!r}, arguments=[{names}], "
                f"digest={self.digest[:12]}..., caller={self.caller!r}, ticket={self.ticket})")

    @classmethod
    def of(cls, upstream: str, tool: str, arguments: Mapping[str, Any],
           caller: str = "process") -> HeldCall:
        """A held call with its digest computed."""
        return cls(upstream, tool, arguments, call_digest(upstream, tool, arguments), caller)


@dataclass(frozen=True)
class Verdict:
    """What the desk decided about one held call."""

    approved: bool
    reason: str            #: readable: "approved on /dev/tty", "no decision within 25 s", ...
    rule: str              #: the rule that held the call, e.g. ``approval[files__delete*]``
    digest: str = ""       #: the digest this verdict is about
    ticket: str = ""       #: the ticket this verdict is about

    def covers(self, upstream: str, tool: str, arguments: Mapping[str, Any]) -> bool:
        """Whether this verdict approves exactly this call (checked before forwarding, so
        arguments changed after the approval are not forwarded under it)."""
        return self.approved and bool(self.digest) and \
            call_digest(upstream, tool, arguments) == self.digest


class Approver(Protocol):
    """Decides on a held call: ``True`` approves, ``False`` rejects; a :class:`Verdict`
    gives the reason too. May block; the desk stops waiting at the hold time."""

    def __call__(self, call: HeldCall, /) -> bool | Verdict: ...


class ApproverBase:
    """The built-in approvers (tty, web page, command hook): an :class:`Approver` the desk
    also starts, tells when a question is withdrawn (timed out, closing) and closes."""

    #: how the verdict's reason names this approver: "approved <label>"
    label = "by the approver"

    def __call__(self, call: HeldCall, /) -> bool | Verdict:
        raise NotImplementedError

    def start(self) -> None:
        """Acquire what asking needs (a port, a check of the terminal); before the first call."""

    def withdraw(self, call: HeldCall) -> None:
        """Stop asking about ``call``: its hold ended without an answer from here."""

    def close(self) -> None:
        """Release everything; questions still open end with a rejection."""


def from_policy_callback(approve: Callable[[str, str, dict[str, Any]], bool]) -> Approver:
    """An approver from a :class:`mcpsync.Policy` style ``approve(upstream, tool, args)``
    callback, so one callback serves a Manager and a Gateway."""
    def approver(call: HeldCall, /) -> bool:
        return approve(call.upstream, call.tool, dict(call.arguments))
    return approver


_Progress = Callable[[float, str], None]
_Done = Callable[[Verdict], None]


@dataclass
class _Ticket:
    number: int
    call: HeldCall
    rule: str
    on_progress: _Progress | None
    on_done: _Done
    started: float
    done: threading.Event = field(default_factory=threading.Event)
    outcome: object = None      # what the approver returned or raised, once ``done`` is set
    answered: bool = False      # the approver answered (not a close, not the hold time)
    lock: threading.Lock = field(default_factory=threading.Lock)   # guards the three above

    def settle(self, outcome: object = None, *, answered: bool = False) -> bool:
        """Record how the hold ended, once: the first caller wins and gets ``True``."""
        with self.lock:
            if self.done.is_set():
                return False
            self.outcome, self.answered = outcome, answered
            self.done.set()
            return True


class ApprovalDesk:
    """Holds calls while an approver decides; see the module docstring.

    ``approver`` ``None`` refuses every call at once ("no approver is configured").
    ``hold_seconds`` is how long a call waits (25 s by default, under the 30 s a client
    usually waits for an answer), ``progress_every`` how often ``on_progress`` hears that
    it still waits, ``max_held`` how many calls may wait at once.
    """

    def __init__(self, approver: Approver | None, *, hold_seconds: float = 25.0,
                 progress_every: float = 5.0, max_held: int = 16) -> None:
        for what, value in (("hold_seconds", hold_seconds), ("progress_every", progress_every),
                            ("max_held", max_held)):
            if isinstance(value, bool) or not value > 0:
                raise ValueError(f"the approval desk needs {what} > 0, not {value!r}")
        self._approver = approver
        self._hold = float(hold_seconds)
        self._every = float(progress_every)
        self._max = int(max_held)
        self._label = approver.label if isinstance(approver, ApproverBase) \
            else "by the approval callback"
        self._lock = threading.Lock()
        self._held: dict[str, _Ticket] = {}
        self._seen: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._threads: list[threading.Thread] = []
        self._numbers = itertools.count(1)
        self._closed = False
        if isinstance(approver, ApproverBase):
            approver.start()

    @property
    def hold_seconds(self) -> float:
        """How long a call is held before it is refused."""
        return self._hold

    def __repr__(self) -> str:
        with self._lock:
            held = len(self._held)
        who = type(self._approver).__name__ if self._approver is not None else "no approver"
        return (f"<ApprovalDesk {who}, hold {self._hold:g} s, {held} held"
                f"{', closed' if self._closed else ''}>")

    def held(self) -> list[HeldCall]:
        """The calls held now, oldest first."""
        with self._lock:
            return [t.call for t in self._held.values()]

    # --- submitting -------------------------------------------------------------------------

    def submit(self, call: HeldCall, rule: str, *, on_progress: _Progress | None,
               on_done: _Done) -> None:
        """Hold ``call`` until the approver decides or the hold time passes; never blocks.

        ``on_done(verdict)`` runs exactly once: from the call's hold thread, or at once
        (on this thread) when the call cannot be held at all (no approver, the desk is full
        or closed, the digest does not match the arguments, the ticket was seen before).
        ``on_progress(elapsed_seconds, message)`` runs every ``progress_every`` seconds
        while the call waits. Both should return quickly.
        """
        try:
            matches = call_digest(call.upstream, call.tool, call.arguments) == call.digest
        except ValueError as exc:
            on_done(self._refusal(call, rule, str(exc)))
            return
        refusal = ""
        with self._lock:
            if self._closed:
                refusal = "the gateway is closing; the call was not held for approval"
            elif self._approver is None:
                refusal = (f"{call.upstream}/{call.tool} needs approval and no approver is "
                           f"configured")
            elif not matches:
                refusal = "the call's digest does not match its upstream, tool and arguments"
            elif call.ticket in self._seen:
                refusal = ("this held call was submitted before; an approval covers one call "
                           "once")
            elif len(self._held) >= self._max:
                refusal = (f"{self._max} calls are already waiting for approval, the most "
                           f"the gateway holds at once; retry when one is decided")
            else:
                ticket = _Ticket(next(self._numbers), call, rule, on_progress, on_done,
                                 time.monotonic())
                self._held[call.ticket] = ticket
                self._seen[call.ticket] = None
                while len(self._seen) > _SEEN_MAX:
                    self._seen.popitem(last=False)
                self._threads = [t for t in self._threads if t.is_alive()]
                name = f"mcpsync-gateway-approval-{ticket.number}"
                self._threads += [spawn(name, self._hold_call, ticket),
                                  spawn(f"{name}-ask", self._ask, ticket)]
        if refusal:
            on_done(self._refusal(call, rule, refusal))

    @staticmethod
    def _refusal(call: HeldCall, rule: str, reason: str) -> Verdict:
        return Verdict(False, reason, rule, call.digest, call.ticket)

    # --- the hold thread --------------------------------------------------------------------

    def _hold_call(self, ticket: _Ticket) -> None:
        verdict = self._refusal(ticket.call, ticket.rule, "the approval hold failed")
        try:
            deadline = ticket.started + self._hold
            beat = ticket.started + self._every
            while True:
                now = time.monotonic()
                if now >= deadline or ticket.done.wait(min(deadline, beat) - now):
                    break   # (a timed-out wait returns False; the next pass sees the time)
                now = time.monotonic()
                if beat <= now < deadline:
                    beat += self._every
                    self._progress(ticket, now - ticket.started)
            verdict = self._verdict(ticket)
            if not ticket.answered and isinstance(self._approver, ApproverBase):
                try:
                    self._approver.withdraw(ticket.call)
                except Exception:
                    _log.warning("the approver failed to withdraw a held call", exc_info=True)
        finally:
            with self._lock:
                self._held.pop(ticket.call.ticket, None)
        try:
            ticket.on_done(verdict)
        except Exception:
            _log.warning("the approval's on_done callback raised", exc_info=True)

    def _progress(self, ticket: _Ticket, elapsed: float) -> None:
        if ticket.on_progress is None:
            return
        call = ticket.call
        message = (f"waiting for approval of {call.upstream}/{call.tool} "
                   f"({elapsed:.0f} s of {self._hold:g} s)")
        try:
            ticket.on_progress(elapsed, message)
        except Exception:
            _log.warning("the approval's on_progress callback raised", exc_info=True)

    def _ask(self, ticket: _Ticket) -> None:
        assert self._approver is not None
        try:
            outcome: object = self._approver(ticket.call)
        except Exception as exc:
            _log.warning("the approver raised on %s/%s", ticket.call.upstream,
                         ticket.call.tool, exc_info=True)
            outcome = exc
        ticket.settle(outcome, answered=True)   # ignored when the hold already ended

    def _verdict(self, ticket: _Ticket) -> Verdict:
        call, rule = ticket.call, ticket.rule
        if ticket.settle():   # the hold time passed: from now on an answer is ignored
            return self._refusal(call, rule, f"no decision within {self._hold:g} s")
        if not ticket.answered:
            why = ticket.outcome if isinstance(ticket.outcome, str) else \
                "the gateway closed while the call was held"
            return self._refusal(call, rule, why)
        outcome = ticket.outcome
        if isinstance(outcome, Verdict):
            approved = outcome.approved is True
            reason = outcome.reason or (f"approved {self._label}" if approved
                                        else f"rejected {self._label}")
        elif isinstance(outcome, bool):
            approved = outcome
            reason = f"approved {self._label}" if approved else f"rejected {self._label}"
        elif isinstance(outcome, Exception):
            return self._refusal(call, rule, f"the approver failed ({type(outcome).__name__}); "
                                             f"the call was refused")
        else:
            return self._refusal(call, rule, f"the approver answered a "
                                             f"{type(outcome).__name__}, not True or False; "
                                             f"the call was refused")
        if approved and call_digest(call.upstream, call.tool, call.arguments) != call.digest:
            return self._refusal(call, rule, "the call's arguments changed while it was held; "
                                             "it needs a new approval")
        return Verdict(approved, reason, rule, call.digest, call.ticket)

    def withdraw(self, ticket: str, reason: str) -> bool:
        """End one held call now, refused with ``reason`` (its host went away: nobody
        would hear the answer, and the approver should not be asked any more). ``False``
        when the ticket is not held (decided already, or unknown)."""
        with self._lock:
            held = self._held.get(ticket)
        return held is not None and held.settle(reason)

    # --- closing ----------------------------------------------------------------------------

    def close(self, timeout: float = 5.0) -> None:
        """Refuse every call still held ("the gateway closed ..."), close a built-in
        approver and join the desk's threads (up to ``timeout`` seconds). Safe twice."""
        with self._lock:
            first = not self._closed
            self._closed = True
            tickets = list(self._held.values())
            threads = list(self._threads)
        deadline = time.monotonic() + timeout
        for ticket in tickets:
            ticket.settle()
        holders = [t for t in threads if not t.name.endswith("-ask")]
        join_all(holders, deadline)
        if first and isinstance(self._approver, ApproverBase):
            try:
                self._approver.close()
            except Exception:
                _log.warning("closing the approver failed", exc_info=True)
        stuck = join_all(threads, deadline)
        if stuck:
            _log.warning("approval: %s still running the approver after close (a callback "
                         "that does not return)", ", ".join(t.name for t in stuck))

    def __enter__(self) -> ApprovalDesk:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def approver_from_config(section: Mapping[str, Any], source: str, *,
                         key: str = "mcpsync.approval") -> Approver | None:
    """The approver the command's config asks for (tty, web page, command hook), or
    ``None`` when it names none. ``section`` is the config's ``approval`` object, ``source``
    the file it came from and ``key`` its path there, both for the error messages; unknown
    keys and wrong types raise ``ConfigError`` naming them."""
    importlib.import_module("mcpsync.gateway._guard._approvers._config")
    from mcpsync.gateway._guard._approvers._config import approver_from_config as build
    return build(section, source, key=key)


def desk_from_config(section: Mapping[str, Any], source: str, *,
                     key: str = "mcpsync.approval") -> ApprovalDesk:
    """The desk the config's ``approval`` object describes: its approver and
    ``hold_seconds``."""
    importlib.import_module("mcpsync.gateway._guard._approvers._config")
    from mcpsync.gateway._guard._approvers._config import desk_settings
    approver = approver_from_config(section, source, key=key)
    return ApprovalDesk(approver, hold_seconds=desk_settings(section, source, key=key))
