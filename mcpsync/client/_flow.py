"""The call pipeline: what a client call does between its first request and its answer.

A call is usually one wire request. It takes more when the answer says so, and the rules for
that live here, once, for the blocking calls and for the futures alike:

- **Era re-detection** (HTTP, era detected rather than pinned, once per client): an error on
  the call's first round that contradicts the era the round was sent in (a modern-only code
  on a legacy session, ``-32601`` for ``tools/list`` on a modern one) makes the client detect
  the era again on a fresh transport; the call then starts over with params built for the new
  era. A contradiction from the session such a re-detection replaced still counts, so two
  calls that met it together both go through, and the era is detected once.
- **Protocol-version retry** (modern, once per call): ``-32022`` naming a version we share
  switches the client to it, and the round is sent again with the new ``_meta``.
- **Dropped-connection retry** (``retry_on_drop=True``, modern with restarts on, once per
  call): a round whose connection dropped is sent again on the restarted server.
- **Input-required rounds** (modern multi-round-trip requests): ``resultType:
  "input_required"`` is answered through the client's callbacks and the method is sent again
  with the original params plus ``inputResponses``/``requestState``, up to
  ``max_input_rounds`` times.

The policy is one generator, :func:`call_flow`. It yields a :class:`Round` to send and is sent
the round's result, or has the round's error thrown into it; it returns the call's final raw
result. Before anything slow (a user callback, a re-detection, a restart) and before every
round after the first it yields ``None``, a *hop*: the blocking driver (:func:`run`) simply
goes on in the caller's thread, while the future driver (``_submit.FutureFlow``) goes on in a
``mcpsync-input-<name>`` worker, because a future's answers arrive on the dispatcher thread,
which must never run user code or wait for the network.

The hot path stays outside: ``Client.call_tool`` sends its first round itself and hands the
answer to the flow (``sent=``) only when it is not a plain complete result, so a normal call
pays for no generator, no lock and no thread hop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from mcpsync._codes import METHOD_NOT_FOUND, MODERN_ONLY_CODES, UNSUPPORTED_PROTOCOL_VERSION
from mcpsync._threads import new_thread
from mcpsync.client._input_required import check_result_type, next_round_params
from mcpsync.errors import ConnectionLost, RemoteError

if TYPE_CHECKING:
    from mcpsync.client._callbacks import Callbacks
    from mcpsync.client._options import ClientOptions as Options
    from mcpsync.session import Session

__all__ = ["Call", "Host", "Round", "RoundWorkers", "call_flow", "era_contradicted", "run",
           "with_meta"]

# Modern-only error codes (MODERN_ONLY_CODES): on a legacy HTTP session they mean the era
# was detected wrongly.
_UNSUPPORTED_PROTOCOL_VERSION = UNSUPPORTED_PROTOCOL_VERSION
_METHOD_NOT_FOUND = METHOD_NOT_FOUND
_MODERN_ONLY_CODES = MODERN_ONLY_CODES

#: What the generator yields: a round to send, or ``None`` (go on off the dispatcher thread).
Flow = Generator["Round | None", Any, Any]


class Host(Protocol):
    """What the flow needs from its client (``Client`` provides it)."""

    _name: str
    _modern: bool
    _meta: dict[str, Any]
    _callbacks: Callbacks
    _opts: Options

    def _live(self) -> Session:
        """The current session, restarting a dead modern server first."""

    def _contradicts(self, exc: RemoteError, method: str, session: Session, *,
                     modern: bool) -> bool:
        """Whether ``exc``, met on ``session`` in that era, calls for a re-detection."""

    def _redetect(self, used: Session, exc: RemoteError) -> None:
        """Detect the era anew (or wait for the detection another call started)."""

    def _adopt_version(self, exc: RemoteError) -> bool:
        """Switch to the version a ``-32022`` names; ``False`` when it names none we share."""


class Call:
    """The fixed parts of one call: its method, the caller's params (for messages), how to
    build its wire params in the current era, and the options every round gets (each round
    has its own timeout)."""

    __slots__ = ("build", "method", "params", "progress", "reset", "retry_on_drop", "timeout")

    def __init__(self, method: str, params: Any, build: Callable[[], dict[str, Any] | None],
                 *, timeout: float | None = None, progress: Any = None,
                 reset: bool | None = None, retry_on_drop: bool = False) -> None:
        self.method = method
        self.params = params
        self.build = build
        self.timeout = timeout
        self.progress = progress
        self.reset = reset
        self.retry_on_drop = retry_on_drop


class Round:
    """One wire request of a call: the session it goes to, its params, and the era it was
    sent in (a contradiction is judged against that era, not the client's current one)."""

    __slots__ = ("modern", "params", "session")

    def __init__(self, session: Session, params: dict[str, Any] | None, modern: bool) -> None:
        self.session = session
        self.params = params
        self.modern = modern


def call_flow(host: Host, call: Call, *, sent: Round | None = None) -> Flow:
    """The retry policy of one call (see the module docstring); returns the final result.

    With ``sent``, the first round was already sent by the caller: it is yielded first (for
    the driver to skip) and its outcome is then sent or thrown in.
    """
    method = call.method
    version_retried = False
    drop_retried = not call.retry_on_drop
    while True:                       # one pass per era: a re-detection starts over
        if sent is not None:
            this, sent = sent, None
        else:
            params = call.build()
            this = Round(host._live(), params, host._modern)
        base = this.params            # what input-required rounds are built from
        first = True
        rounds = 0
        while True:                   # one pass per round; each later one after a hop
            try:
                result = yield this
            except RemoteError as exc:
                if first and host._contradicts(exc, method, this.session, modern=this.modern):
                    yield None
                    host._redetect(this.session, exc)
                    version_retried = False
                    break
                if version_retried or not host._modern or not this.params or \
                        exc.code != _UNSUPPORTED_PROTOCOL_VERSION or \
                        not host._adopt_version(exc):
                    raise
                version_retried = True
                # The round again, and the later rounds, with the new version's _meta.
                params = _remeta(this.params, host._meta)
                base = _remeta(base, host._meta) if base else base
                yield None
            except ConnectionLost:
                if drop_retried or not host._modern or host._opts.restart is None:
                    raise
                drop_retried = True
                params = this.params
                yield None
            else:
                if not host._modern or check_result_type(
                        method, result, params=call.params,
                        server=host._name) != "input_required":
                    return result
                rounds += 1
                yield None
                params = next_round_params(method, base or {}, result,
                                           callbacks=host._callbacks, round_number=rounds,
                                           max_rounds=host._opts.max_input_rounds,
                                           server=host._name)
            first = False
            this = Round(host._live(), params, host._modern)


def era_contradicted(exc: RemoteError, method: str, *, modern: bool) -> bool:
    """Whether an error says the era a request was sent in is wrong: -32601 for
    ``tools/list`` on a modern session, a modern-only code on a legacy one."""
    if modern:
        return exc.code == _METHOD_NOT_FOUND and method == "tools/list"
    return exc.code in _MODERN_ONLY_CODES


def _remeta(params: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    out = dict(params)
    out["_meta"] = {**params.get("_meta", {}), **meta}
    return out


def with_meta(params: Mapping[str, Any] | None, meta: Mapping[str, Any] | None, *,
              modern: bool, ours: dict[str, Any]) -> dict[str, Any] | None:
    """Wire params with the modern ``_meta`` (``ours`` win over the caller's keys)."""
    if modern:
        out = dict(params) if params else {}
        extra = out.get("_meta")
        if meta:
            extra = {**extra, **meta} if isinstance(extra, Mapping) else dict(meta)
        out["_meta"] = ours if not extra else {**extra, **ours}
        return out
    if meta:
        out = dict(params) if params else {}
        out["_meta"] = dict(meta)
        return out
    return dict(params) if params is not None else None


# -- the blocking driver -------------------------------------------------------------------

_NOTHING: Any = object()


def run(flow: Flow, call: Call, *, error: Exception | None = None,
        result: Any = _NOTHING) -> Any:
    """Drive ``flow`` in the calling thread; return its result or raise its error.

    A flow started with ``sent=`` is primed here and given that round's ``result`` (or its
    ``error``); otherwise every round is sent from here.
    """
    step = next(flow)
    try:
        if error is not None or result is not _NOTHING:
            step = flow.throw(error) if error is not None else flow.send(result)
        while True:
            if step is None:
                step = next(flow)
                continue
            try:
                answer = step.session.request(call.method, step.params, timeout=call.timeout,
                                              progress=call.progress,
                                              reset_timeout_on_progress=call.reset)
            except Exception as exc:
                step = flow.throw(exc)
            else:
                step = flow.send(answer)
    except StopIteration as stop:
        return stop.value


# -- the future driver ---------------------------------------------------------------------

class RoundWorkers:
    """The ``mcpsync-input-<name>`` threads that carry submitted calls between rounds (they
    may run user callbacks, a restart or a re-detection); joined, with a deadline, on close."""

    def __init__(self, safe_name: str) -> None:
        self._name = f"mcpsync-input-{safe_name}"
        self._lock = threading.Lock()
        self._threads: set[threading.Thread] = set()

    def start(self, work: Callable[[], None]) -> None:
        def body() -> None:
            try:
                work()
            finally:
                with self._lock:
                    self._threads.discard(threading.current_thread())

        thread = new_thread(self._name, body)
        with self._lock:
            self._threads.add(thread)
        thread.start()

    def join(self, seconds: float) -> None:
        """Wait up to ``seconds`` in all: a worker stuck in a user callback must not stretch
        ``close()``."""
        with self._lock:
            threads = list(self._threads)
        me = threading.current_thread()
        deadline = time.monotonic() + seconds
        for thread in threads:
            if thread is not me:
                thread.join(max(0.0, deadline - time.monotonic()))
