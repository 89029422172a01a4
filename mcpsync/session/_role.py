"""The reader role of a session: which thread reads the transport now.

Exactly one thread at a time reads: the background reader (:data:`BG` as holder) or a caller
(its :class:`~mcpsync.session._call.Call`). The role is owned through its *token*: the slot
``token`` is set while the role is free and deleted by whoever claims it. Deleting a slot
that is not set raises ``AttributeError``, and ``del role.token`` is one bytecode that runs
no Python code (the member descriptor's C setter), so under the GIL one thread only can
take a free role, with or without the session's lock. The claimer then stores itself as
``holder``, on the same line and with nothing between that can run Python code, take a
Ctrl-C or switch threads (a test holds the bytecode to that). Who takes it: a caller on the
usual path without the lock (``Session._request``, which tests ``holder is None`` first so
that a taken role costs no exception); under the lock, ``Role.take`` for ``_send``,
``_claim_after_write``, the background reader and ``start()`` when it starts the reader at
once (before the phase opens, so no caller claims beside the background reader; a session
whose reader is ``absent`` opens with the role free). Who gives it back: only its owner, by
``holder = None`` and then ``token = True`` (the other order would let a claim take the
token and have its store undone): a leader without the lock in ``_request``, or
``Role.free(owner)`` under the lock. A grant of ``want`` and the takeover of a blocked
write change a present owner, under the lock: the token stays taken.

The other fields change under the session's ``_lock`` (the callers of these methods hold
it), with these exceptions, each stored by one thread only: the claim above; a caller
holding the role gives it back without the lock in the usual case, and takes the lock only
to wake the background reader (``Session._release_role`` says why no wake-up is lost and
why it cannot undo a takeover); that caller clears its own ``sending`` without the lock
once its write ends (and after a failed write); and the background reader stores
``long_park = True`` without the lock when it starts reading. The hot path reads
``holder`` without the lock, which is safe because a thread only ever acts on "the holder
is me", and only the holder (or, under the lock, a granter) changes that.

- ``holder``: who reads (``None``: nobody; the background reader takes it within
  HANDOFF_GRACE, or, while it is ``absent``, the idle watch starts it when something
  arrives, within HANDOFF_GRACE of the role's give-back, MAX_WATCH_PAUSE after a run of
  calls back to back). ``None`` with the token taken is a claim between its two stores, or
  a give-back between its two: seen only by a tracer that runs between bytecodes or lines.
- ``token``: set (to True) while the role is free; see above.
- ``want``: the caller that asked the background reader for the role (its call is the only
  one in flight); the background reader grants it after its current ``receive``.
- ``sending``: the holder is still writing its request; a write that blocks (a server that
  stopped reading) is rescued by the background reader taking the role over.
- ``parked``/``long_park``/``gate``: the background reader sleeps on ``gate`` (a lock used as
  a binary semaphore, released only while ``parked`` is true and the reader is not
  ``absent``); ``long_park`` says whether the sleep is longer than HANDOFF_GRACE, so a role
  given back must wake it at once. ``Session._unpark`` wakes it (or starts it).
- ``absent``: no background reader exists yet. A stdio session used from one thread
  at a time needs none: a caller reads its own answer, and the shared idle watch
  (``mcpsync.transport.stdio._idle_watch``) looks at stdout and the server's exit while
  nobody calls. The role then reads as ``parked`` with ``long_park`` clear (what a reader
  in its short sleep shows, so the hot path's give-back stays lock-free), and every wake-up
  of the reader (``Session._unpark``) starts one instead, as does the watch when it finds
  something to read with the role free, and a write that finds stdin's pipe full. Once
  started, the reader stays until the session ends.
- ``spare``: at most one :class:`~mcpsync.session._call.Call` kept for reuse (under the key
  ``0``), taken and put back without the lock by single ``dict`` operations; see
  ``Session._request`` for when a call goes back (the session's docstring says the rule).
  It lives here, not on the session, because one attribute more on the session would take
  it past what CPython keeps inline.
"""

from __future__ import annotations

import threading
from typing import Final

from mcpsync.session._call import Call

__all__ = ["BG", "Role"]

BG: Final = object()  # the background reader, as holder of the reader role


class Role:
    """Holder, token, want, sending and parked (the module's docstring says who changes
    each, and when without the session's lock). The usual claim and give-back are written
    inline in ``Session._request``, since they run on every call; the others go through
    :meth:`take` and :meth:`free`."""

    __slots__ = ("absent", "gate", "holder", "long_park", "parked", "sending", "spare",
                 "token", "want")

    def __init__(self) -> None:
        self.holder: object = None
        # The role's token, set while the role is free (see the module's docstring): a
        # claim deletes it, which one thread only can do; no Ctrl-C can land between the
        # ``del`` and the ``holder`` store that follows (a Ctrl-C is raised where a call
        # returns, on 3.10 also at a taken jump, and the two are on one line).
        self.token = True
        self.want: Call | None = None
        self.sending: Call | None = None
        self.parked = False
        self.long_park = True
        self.gate = threading.Lock()
        self.gate.acquire()
        self.spare: dict[int, Call] = {}
        # No background reader yet (see the module's docstring): set by Session.start()
        # for a session the idle watch looks after, cleared when its reader is started.
        self.absent = False

    def grant(self, call: Call) -> None:
        """Under the lock, by the background reader: hand the role to ``call`` and wake it."""
        self.holder = call
        call.signal()

    def take(self, owner: object) -> bool:
        """Under the lock: claim the role for ``owner`` if its token is free (False, and
        nothing changed, if someone owns it). The lock orders this claim against the
        others made under it; against ``Session._request``'s lock-free claim only the
        token does."""
        try:
            # One line: no trace function's line event between the token and the holder.
            del self.token; self.holder = owner  # noqa: E702
        except AttributeError:
            return False
        return True

    def free(self, owner: object) -> None:
        """Under the lock: give the role back if ``owner`` holds it: ``holder`` first, then
        the token (given back first, a claim could take it and then see its own store of
        ``holder`` undone)."""
        if self.holder is owner:
            self.holder = None; self.token = True  # noqa: E702 - one line, as in take
