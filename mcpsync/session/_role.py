"""The reader role of a session: which thread reads the transport now.

Exactly one thread at a time reads: the background reader (:data:`BG` as holder) or a caller
(its :class:`~mcpsync.session._call.Call`). Every field changes only under the session's
``_lock`` (the callers of these methods hold it), with these exceptions, each stored by
one thread only: a caller holding the role gives it back (``holder = None``) without the
lock in the usual case, and takes the lock only to wake the background reader
(``Session._release_role`` says why no wake-up is lost and why it cannot undo a takeover);
that caller clears its own ``sending`` without the lock once its write ends (and after a
failed write); and the background reader stores ``long_park = True`` without the lock
when it starts reading. The hot path reads ``holder`` without the lock, which is safe
because a thread only ever acts on "the holder is me", and only the holder (or, under the
lock, a granter) changes that.

- ``holder``: who reads (``None``: nobody; the background reader takes it within
  HANDOFF_GRACE).
- ``want``: the caller that asked the background reader for the role (its call is the only
  one in flight); the background reader grants it after its current ``receive``.
- ``sending``: the holder is still writing its request; a write that blocks (a server that
  stopped reading) is rescued by the background reader taking the role over.
- ``parked``/``long_park``/``gate``: the background reader sleeps on ``gate`` (a lock used as
  a binary semaphore, released only while ``parked`` is true); ``long_park`` says whether the
  sleep is longer than HANDOFF_GRACE, so a role given back must wake it at once.
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
    """Holder, want, sending and parked, changed under the session's lock. Claiming and
    giving back the role are written inline in the session (``_request``, ``_send``,
    ``_release_role``), since they run on every call."""

    __slots__ = ("gate", "holder", "long_park", "parked", "sending", "spare", "want")

    def __init__(self) -> None:
        self.holder: object = None
        self.want: Call | None = None
        self.sending: Call | None = None
        self.parked = False
        self.long_park = True
        self.gate = threading.Lock()
        self.gate.acquire()
        self.spare: dict[int, Call] = {}

    def grant(self, call: Call) -> None:
        """Under the lock, by the background reader: hand the role to ``call`` and wake it."""
        self.holder = call
        call.signal()

    def unpark(self) -> None:
        """Under the lock: wake the background reader if it sleeps on the gate."""
        if self.parked:
            self.parked = False
            self.gate.release()
