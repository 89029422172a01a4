"""What the parts of a :class:`~mcpsync.session.Session` share: its tuning constants and
the state every part reads, declared once for the type checker.

The session is one object built from parts, each in its own module: ``_engine`` (the
reader role's use, sending and waiting: the hot path), ``_role`` (the role itself),
``_background`` (the background reader), ``_incoming`` (frames and requests from the
server), ``_cancel`` (deadlines and cancellations) and ``_loss`` (connection loss and the
errors that describe it). They are mixins over :class:`SessionBase`, which only declares.
"""

from __future__ import annotations

import enum
import logging
import math
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Final

from mcpsync._codes import USER_REJECTED
from mcpsync.errors import (
    ConnectionLost,
)
from mcpsync.jsonrpc import Batch, Message, ParseError
from mcpsync.session._call import Call
from mcpsync.session._delivery import CallbackPool, Dispatcher
from mcpsync.session._role import Role
from mcpsync.transport.base import CallFailed, Transport

__all__ = ["Phase", "SessionBase"]

DEFAULT_MAX_TIMEOUT: Final = 600.0
#: Poll slice of a reading caller on the main thread: bounds how late a simulated Ctrl-C
#: (``_thread.interrupt_main``, which interrupts no system call) is noticed. A real SIGINT
#: interrupts the poll at once.
MAIN_THREAD_SLICE: Final = 0.1
#: Garbage stdout lines logged at WARNING per connection; later ones go to DEBUG.
GARBAGE_WARNINGS: Final = 10
#: During the handshake, this many stdout lines that are not JSON-RPC (and no answer) mean
#: the program is not an MCP server: the connection fails at once instead of timing out.
HANDSHAKE_GARBAGE: Final = 10
#: How long connection-loss handling waits for the server's exit status after stdout EOF.
EXIT_WAIT: Final = 1.0
JOIN_TIMEOUT: Final = 1.0
#: Longest time the background reader sleeps before it looks at a role given back with no
#: call pending (and before it rescues a caller whose request write is blocked); also the
#: first, shortest pause of the idle watch for a session whose role a caller holds.
HANDOFF_GRACE: Final = 0.005
#: Longest time the idle watch leaves a session out of its poll while a caller holds the
#: role: the pause starts at HANDOFF_GRACE and doubles each time the watch, within
#: HANDOFF_GRACE of a pause's end, finds the session's output ready and the role held
#: again (see BackgroundReader._idle_ready).
MAX_WATCH_PAUSE: Final = 0.05
#: True: giving the role back always wakes the background reader at once (the strict reading
#: of "the background reader reads whenever no caller holds the role"), at a cost of one
#: thread switch per sequential call (about 11 us on one CPU). False: see _release_role.
EAGER_HANDBACK = False
#: Longest wait to write a frame that is not a request (a notification, a cancellation, an
#: answer to a server's request) to a server that does not read its stdin; the client's
#: default timeout when that is shorter. A frame partly written by then is finished by the
#: transport, which tears the connection down if it is still unfinished 5 s later.
NOTICE_WRITE_BOUND = 30.0
#: Longest sleep of the background reader while one call keeps the role (it doubles from
#: HANDOFF_GRACE); giving the role back after such a sleep wakes it at once.
MAX_PARK: Final = 1.0

_USER_REJECTED: Final = USER_REJECTED
_PROGRESS: Final = "notifications/progress"

logger = logging.getLogger("mcpsync.session")

if TYPE_CHECKING:
    from typing import Protocol

    class SendUntil(Protocol):
        """Writes a frame by a deadline; ``ended``: the frame ends with its newline (see
        ``transport.base.takes_lines``). For the type checker only: the class would cost
        every import about 0.1 M instructions."""

        def __call__(self, frame: bytes, deadline: float, ended: bool = False, /) -> None: ...
else:
    SendUntil = Callable   # what typing.get_type_hints() finds for the session's _send_until


class Phase(enum.IntEnum):
    """Where a session is in its life; it only moves forward (a close may follow a loss).

    ``LOSING``: a loss was seen and its error is being built (waiting up to EXIT_WAIT for the
    exit status); new calls wait for it (``_aside.loss_settled``) rather than quote a placeholder.
    ``LOST``: the error is final; ``TORN_DOWN``: the background reader closed the transport
    after the loss. ``CLOSING``: ``close()`` began (new calls get ``ClosedError``);
    ``CLOSED``: the reader is being stopped.
    """

    NEW = 0
    OPEN = 1
    LOSING = 2
    LOST = 3
    TORN_DOWN = 4
    CLOSING = 5
    CLOSED = 6


class Aside:
    """What a session keeps that its calls never read: the garbage-line count, the loss's
    bookkeeping, the close's mark, two of its options, the idle watch's last pause. Kept
    out of the session itself so that the session holds fewer attributes than CPython 3.11
    keeps inline in an instance (29 at most): beyond that its instance dict is a real dict,
    and every attribute load on it takes the slower, hinted lookup (about 17 instructions
    more each; a sequential call makes about two dozen) and no method looked up on it is
    specialised."""

    __slots__ = ("close_done", "first_garbage", "garbage", "loss_settled", "lost_cause",
                 "observe_progress", "on_lost", "watch_pause", "watch_resume")

    def __init__(self, observe_progress: bool,
                 on_lost: Callable[[ConnectionLost], None] | None) -> None:
        self.observe_progress = observe_progress
        self.on_lost = on_lost
        self.close_done = False   # close() ran its second half (joins, transport close)
        self.loss_settled = threading.Event()   # set once _lost holds its final error
        self.lost_cause: BaseException | None = None
        self.garbage = 0
        # Handshake watch (see watch_handshake): the first stdout line that was not JSON-RPC.
        self.first_garbage: str | None = None
        # The idle watch's last pause of this session and when it ends (see _idle_ready).
        self.watch_pause = 0.0
        self.watch_resume = -math.inf


class SessionBase:
    """The attributes (set by ``Session.__init__``) and cross-part methods of a session."""

    name: str
    _phase: Phase
    _safe: str
    _transport: Transport
    _lock: threading.Lock
    _pending: dict[int, Call]
    _unattended: set[Call]
    _answered: set[Call]
    _role: Role
    _lost: ConnectionLost | None
    _aside: Aside
    _watching: bool
    _dispatcher: Dispatcher
    _pool: CallbackPool
    _notice_bound: float
    _on_notification: Callable[[Message], None] | None
    _on_request: Callable[[Message], Any] | None
    _send_until: SendUntil

    if TYPE_CHECKING:  # defined by the parts; declared here so that each part type-checks
        def _describe(self, call: Call) -> str: ...
        def _what(self, method: str | None, params: Any) -> str: ...
        def _release_role(self, call: Call) -> None: ...
        def _unpark(self) -> None: ...
        def _settle_later(self, call: Call, result: Any,
                          error: BaseException | None) -> None: ...
        def _lose(self, cause: BaseException | None, *, exited: bool = False) -> None: ...
        def _send_cancel(self, call: Call, reason: str, *, wait: bool = False) -> None: ...
        def _not_mcp_note(self, subject: str | None = None) -> str: ...
        def _not_an_mcp_server(self) -> None: ...
        def _fail_all(self, make: Callable[[Call], BaseException]) -> None: ...
        def _feed(self, items: Iterable[Message | Batch | ParseError | CallFailed]) -> None: ...
        def _expire_unattended(self, now: float) -> float: ...
        def _on_eof(self) -> None: ...
        def _teardown_after_loss(self) -> None: ...
