"""The per-request state of the server: the in-flight record and the handler's ``Context``.

One rule drives this module: once a request is cancelled, or once its response is written,
nothing more is written for it (no response, no progress, no log). Every write for a request
therefore goes through :meth:`_Call.emit` or :meth:`_Call.finish`, which check ``done`` under
the request's own lock, and hand the frame to the write gate together with the request's
cancellation event; the gate checks that event again under its own lock, immediately before
the first byte goes out. So a frame whose write has not begun when the cancel is set is never
written, while a frame already being written is finished (a half-written line would corrupt
the stream).

Setting the cancellation takes no lock at all. It is done by the reader and by the supervisor
while they hold the serve loop's shared condition, and a write can block for as long as the
client does not read its stdout: waiting there for a lock the writer holds would deadlock the
server as soon as that write failed and had to report it under the same condition.

The cancellation is a :class:`threading.Event` whose condition is made only when someone waits
on it (:class:`_Cancellation`): every request needs the flag, few handlers ever wait, and the
condition with its lock was most of the cost of tracking a request.
"""

from __future__ import annotations

import importlib
import math
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from mcpsync.jsonrpc import INTERNAL_ERROR, Message, RequestId, error, notification
from mcpsync.protocol import LEGACY_VERSIONS, LOG_LEVELS

__all__ = ["Context"]

_LEGACY = frozenset(LEGACY_VERSIONS)


class _Asker(Protocol):
    """How a handler's asks reach the client in its era (see ``_asking``)."""

    def ask(self, method: str, params: dict[str, Any], key: str | None) -> dict[str, Any]: ...

    def ask_all(self, asks: Mapping[str, tuple[str, dict[str, Any]]]
                ) -> dict[str, dict[str, Any]]: ...


class _Send(Protocol):
    """Writes one frame, unless ``cancelled`` is set by the time its write would begin."""

    def __call__(self, message: Message, cancelled: threading.Event | None = None, /) -> None:
        ...


def _stderr(text: str) -> None:
    """One line to the server's stderr, its log channel (stdout belongs to the protocol)."""
    try:
        sys.stderr.write(f"mcpsync.server: {text}\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # stderr closed: nowhere left to report to
        pass


_MAKING = threading.Lock()   # two first waiters at once must share one condition


class _Cancellation(threading.Event):
    """A :class:`threading.Event` that makes its condition on the first wait, not at birth.

    ``is_set`` reads the flag; ``set`` raises it and wakes waiters only if there can be some.
    No wake-up is lost: a waiter stores the condition before it reads the flag, and ``set``
    raises the flag before it looks for the condition, so one of them sees the other.
    """

    def __init__(self) -> None:   # no Event.__init__: it would build the condition now
        self._flag: bool = False
        self._cond: threading.Condition | None = None

    def _condition(self) -> threading.Condition:
        cond = self._cond
        if cond is None:
            with _MAKING:
                cond = self._cond
                if cond is None:
                    cond = self._cond = threading.Condition(threading.Lock())
        return cond

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        self._flag = True
        cond = self._cond
        if cond is not None:
            with cond:
                cond.notify_all()

    def clear(self) -> None:
        cond = self._cond
        if cond is None:
            self._flag = False
            return
        with cond:
            self._flag = False

    def wait(self, timeout: float | None = None) -> bool:
        if self._flag:
            return True
        cond = self._condition()
        with cond:
            signaled: bool = self._flag
            if not signaled:
                signaled = cond.wait(timeout)
            return signaled

    def _at_fork_reinit(self) -> None:
        if self._cond is not None:
            self._cond._at_fork_reinit()  # type: ignore[attr-defined]


class _Call:
    """One in-flight request: its cancellation event and the gate for every write."""

    __slots__ = ("cancelled", "closer", "done", "id", "lock", "method", "sink")

    def __init__(self, request_id: RequestId, method: str) -> None:
        self.id = request_id
        self.method = method
        self.cancelled: threading.Event = _Cancellation()
        self.lock = threading.Lock()
        self.done = False
        #: Where this request's frames go when not to the connection's one stream (an HTTP
        #: exchange answers each request on its own response); ``None``: the connection's.
        self.sink: _Send | None = None
        #: Ends the HTTP connection of this request's stream but not the stream (a legacy
        #: session's SSE polling); ``None``: this transport cannot.
        self.closer: Callable[[int | None], bool] | None = None

    def cancel(self) -> None:
        """Mark cancelled; after this returns no write for the request can begin.

        Lock-free on purpose (see the module docstring): a frame already being written is
        finished, every later one is dropped by the write gate's own check.
        """
        self.cancelled.set()

    def emit(self, message: Message, send: _Send) -> bool:
        """Write a notification for this request unless it is cancelled or answered."""
        with self.lock:
            if self.done or self.cancelled.is_set():
                return False
            (self.sink or send)(message, self.cancelled)
            return True

    def finish(self, message: Message | None, send: _Send) -> bool:
        """Write the response (``None``: none) unless cancelled; nothing is written afterwards.

        A result that cannot be serialised (``ValueError`` from the writer, before any byte
        went out) is answered with -32603 instead, because it is our side's failure.
        """
        with self.lock:
            already = self.done or self.cancelled.is_set()
            self.done = True
            if already or message is None:
                return False
            send = self.sink or send
            try:
                send(message, self.cancelled)
            except (TypeError, ValueError) as exc:
                _stderr(f"the result of {self.method!r} could not be serialised: {exc}")
                send(error(self.id, INTERNAL_ERROR,
                           f"internal error: the result of {self.method!r} is not valid JSON"),
                     self.cancelled)
            return True


class Context:
    """What a handler can do besides returning: notice cancellation, report progress, log,
    and ask the client for input (``elicit``, ``sample``, ``list_roots``).

    A handler receives it through a parameter annotated ``Context`` or named ``ctx``.

    - ``cancelled`` is a ``threading.Event`` set by the client's ``notifications/cancelled``
      and when ``serve()`` stops; a long handler should wait on it (``ctx.cancelled.wait(t)``)
      instead of ``time.sleep(t)``. Whatever the handler returns after a cancel is discarded.
    - ``request_id``, ``protocol_version`` (the revision this request is served under) and
      ``meta`` (the request's ``params._meta``, or ``{}``).
    """

    def __init__(self, call: _Call, *, protocol_version: str, meta: Mapping[str, Any],
                 send: _Send, log_threshold: Callable[[], str | None],
                 asker: _Asker | None = None,
                 client_capabilities: Mapping[str, Any] | None = None,
                 make_asker: Callable[[], _Asker] | None = None) -> None:
        self._call = call
        self._send = send
        self._log_threshold = log_threshold
        self._asker = asker
        self._make_asker = make_asker   # builds the asker on the first ask (most never ask)
        self._last_progress: float | None = None
        self.cancelled: threading.Event = call.cancelled
        self.request_id: RequestId = call.id
        self.protocol_version = protocol_version
        # The handler's own copies, made when first read: most handlers read neither.
        self._meta_from = meta
        self._meta: dict[str, Any] | None = None
        self._capabilities_from = client_capabilities
        self._capabilities: dict[str, Any] | None = None

    @property
    def meta(self) -> dict[str, Any]:
        """The request's ``params._meta`` (``{}`` when absent); the handler's own copy."""
        if self._meta is None:
            self._meta = dict(self._meta_from)
        return self._meta

    @meta.setter
    def meta(self, value: dict[str, Any]) -> None:
        self._meta = value

    @property
    def client_capabilities(self) -> dict[str, Any]:
        """What the client declared it can do, for this request; the handler's own copy."""
        if self._capabilities is None:
            self._capabilities = dict(self._capabilities_from or {})
        return self._capabilities

    @client_capabilities.setter
    def client_capabilities(self, value: dict[str, Any]) -> None:
        self._capabilities = value

    @property
    def modern(self) -> bool:
        """True when this request is served under 2026-07-28 rules (asks become rounds)."""
        return self.protocol_version not in _LEGACY

    # -- asking the client (see ``_asking``) ---------------------------------------------

    def _asker_now(self, what: str) -> _Asker:
        if self._asker is None and self._make_asker is not None:
            self._asker = self._make_asker()
        if self._asker is None:
            raise RuntimeError(f"{what}: this handler cannot ask the client for input")
        return self._asker

    def ask(self, ask: Any, *, key: str | None = None) -> Any:
        """Ask the client one thing (an ``Ask``) and return its answer, read by the ask.

        Legacy (2024-11-05 … 2025-11-25): a request to the client; this call blocks until it
        answers (at most the server's ``ask_timeout``). 2026-07-28: the request ends with
        ``input_required`` listing the ask under ``key`` (default ``ask-1``, ``ask-2``, ...
        in the order of the handler's asks), and this handler runs again from the top when
        the client retries with the answer: everything before this line runs again, so keep
        it cheap and free of side effects. A capability the client did not declare:
        ``CapabilityNotSupported`` (legacy) or the -32021 answer (modern).
        """
        raw = self._asker_now(ask.method).ask(ask.method, ask.params, key)
        return ask.read(raw)

    def ask_all(self, asks: Mapping[str, Any]) -> dict[str, Any]:
        """Ask several things at once: ``{key: Ask}`` → ``{key: answer}``.

        Under 2026-07-28 every unanswered ask goes out in one ``input_required`` result, under
        its key (one round instead of one per ask); a legacy client is asked one after the
        other.
        """
        if not asks:
            return {}
        raw = self._asker_now("ask_all").ask_all(
            {key: (ask.method, ask.params) for key, ask in asks.items()})
        return {key: ask.read(raw[key]) for key, ask in asks.items()}

    def elicit(self, message: str, schema: Mapping[str, Any] | None = None, *,
               url: str | None = None, key: str | None = None) -> Any:
        """Ask the user, through the client, to fill a form (``schema``: a flat JSON object
        schema) or to visit ``url``. Returns an ``ElicitResult`` (``action``, ``content``).
        Era rules and ``key`` as for :meth:`ask`."""
        importlib.import_module("mcpsync.server._asks")
        from mcpsync.server._asks import Ask

        return self.ask(Ask.elicit(message, schema, url=url), key=key)

    def sample(self, messages: str | Sequence[Mapping[str, Any]], *, max_tokens: int,
               key: str | None = None, **options: Any) -> Any:
        """Ask the client's LLM for a message (``sampling/createMessage``); returns a
        ``SampleResult`` (``role``, ``content``, ``model``, ``stop_reason``, ``text``).
        ``options`` are those of ``Ask.sample`` (``system_prompt``, ``temperature``, ...).
        Era rules and ``key`` as for :meth:`ask`."""
        importlib.import_module("mcpsync.server._asks")
        from mcpsync.server._asks import Ask

        return self.ask(Ask.sample(messages, max_tokens=max_tokens, **options), key=key)

    def list_roots(self, *, key: str | None = None) -> list[Any]:
        """The client's roots (``roots/list``), as ``mcpsync.types.Root`` objects."""
        importlib.import_module("mcpsync.server._asks")
        from mcpsync.server._asks import Ask

        result: list[Any] = self.ask(Ask.roots(), key=key)
        return result

    #: Set on a tool that gathers input before its task begins (``rounds_first``).
    _task_hook: Callable[[Context], None] | None = None

    def start_task(self) -> None:
        """Begin the task here, for a tool registered with ``task=`` and
        ``rounds_first=True``: the asks before this line were ``input_required`` rounds of
        the request; now the request is answered with a task and the handler runs again from
        the top inside it (those asks return the answers already given). Everywhere else it
        does nothing: in a task already, or when the call is not served as a task.
        """
        hook = self._task_hook
        if hook is not None:
            hook(self)

    def close_stream(self, retry_ms: int | None = None) -> bool:
        """End the HTTP connection carrying this request, without ending the request.

        Streamable HTTP sessions negotiated at 2025-11-25 only (SSE polling): the reply
        stream closes now (after a ``retry:`` field of ``retry_ms``, when given), the
        handler goes on, and what it sends afterwards (notifications, its result) is kept
        by the server until the client reconnects with ``GET`` and ``Last-Event-ID``.
        Returns True when it did so; False, doing nothing, where there is no such stream to
        close: stdio, 2026-07-28 (closing its stream would cancel the request), sessions of
        older revisions, and calls of tools not registered with ``polling=True`` (only
        those run apart from their connection, on a thread of their own).
        """
        closer = self._call.closer
        return closer(retry_ms) if closer is not None else False

    def progress(self, progress: float, total: float | None = None,
                 message: str | None = None) -> None:
        """Send ``notifications/progress`` when the request asked for it (``progressToken``).

        Progress must increase every time (spec): a value not greater than the last one sent
        is dropped and reported on stderr. ``message`` does not exist under 2024-11-05 and is
        left out there. Nothing is sent once the request is answered or cancelled.
        """
        token = self.meta.get("progressToken")
        if token is None or isinstance(token, bool) or not isinstance(token, (int, str)):
            return
        value = float(progress)
        if math.isnan(value) or math.isinf(value):
            raise ValueError(f"progress must be a finite number, got {progress!r}")
        if self._last_progress is not None and value <= self._last_progress:
            _stderr(f"progress {progress!r} for request {self.request_id.raw} dropped: "
                    f"not greater than the last value sent ({self._last_progress!r})")
            return
        params: dict[str, Any] = {"progressToken": token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None and self.protocol_version != "2024-11-05":
            params["message"] = message
        if self._call.emit(notification("notifications/progress", params), self._send):
            self._last_progress = value

    def log(self, level: str, data: Any, logger: str | None = None) -> None:
        """Send ``notifications/message`` when the client asked for this level or a lower one.

        Legacy: the threshold is the session's ``logging/setLevel``; before the client sends
        one, nothing is sent.
        Modern: only requests whose ``_meta`` carries ``io.modelcontextprotocol/logLevel`` get
        messages, at or above that level. ``level`` is an RFC 5424 name; an unknown one raises
        ``ValueError`` because it is the handler's bug.
        """
        if level not in LOG_LEVELS:
            raise ValueError(f"unknown log level {level!r}; use one of {', '.join(LOG_LEVELS)}")
        threshold = self._log_threshold()
        if threshold is None or LOG_LEVELS.index(level) < LOG_LEVELS.index(threshold):
            return
        params: dict[str, Any] = {"level": level}
        if logger is not None:
            params["logger"] = logger
        params["data"] = data
        self._call.emit(notification("notifications/message", params), self._send)
