"""The guard inside the gateway's routing: what the pass-through and aggregation code call.

Three moments matter. A host's ``tools/call`` is screened before it is routed
(:meth:`GuardHooks.screen_call`): refused at once, held for approval, or let through and
remembered. Its answer (:meth:`GuardHooks.answer_to_host`) ends the wall-time clock of the
call's budgets. A ``tools/list`` answer loses the tools the policy hides
(:meth:`GuardHooks.passthrough_request` remembers which answers those are; with several
upstreams, :meth:`GuardHooks.filter_tools` runs before the names are prefixed).

Held calls go to the approval desk, which decides on its own threads: the host's reader
thread returns at once, and other calls keep flowing. Without the approval module (or an
approver) a held call is answered -32011 at once.
"""

from __future__ import annotations

import importlib
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from mcpsync._codes import DENIED_BY_POLICY
from mcpsync._envelope import Envelope, IdKey, parse_envelope
from mcpsync.gateway._guard._core import PROCESS, Caller, Guard, Hold, Refusal
from mcpsync.gateway._guard._duplicates import duplicate_key
from mcpsync.gateway._guard._frames import (
    filter_list_answer,
    filter_tools,
    progress_frame,
    refusal_frame,
)
from mcpsync.gateway._guard._schema import GuardSettings
from mcpsync.gateway._inspector import GATEWAY_TO_HOST, HOST_TO_GATEWAY

if TYPE_CHECKING:
    from mcpsync.gateway._aggregate.names import Route
    from mcpsync.gateway._gateway import Gateway
    from mcpsync.gateway._upstream import Upstream
    from mcpsync.policy import Policy

__all__ = ["GuardHooks", "approver_from_settings", "guard_options"]

_log = logging.getLogger("mcpsync.gateway")
_APPROVAL_MODULE: Final = "mcpsync.gateway._guard._approval"
#: How many answered-later calls and lists the guard remembers (more would be a host that
#: never reads; the oldest is forgotten, so only its wall time is lost).
_PENDING_MAX: Final = 4096


class _PolicyApprover:
    """The policy's ``approve(server, tool, args)`` callback as a desk approver."""

    def __init__(self, approve: Callable[[str, str, Mapping[str, Any]], bool]) -> None:
        self._approve = approve

    def __call__(self, call: Any) -> bool:
        return bool(self._approve(call.upstream, call.tool, call.arguments))

    approve = __call__


def _approval_module() -> Any:
    try:
        return importlib.import_module(_APPROVAL_MODULE)
    except ImportError:
        return None


def approver_from_settings(settings: GuardSettings) -> Any:
    """The approver the config's ``approval`` section asks for (None: none, or approval
    support not installed), built by the approval module."""
    module = _approval_module()
    if module is None or not settings.approval:
        return None
    return module.approver_from_config(settings.approval, settings.source)


def guard_options(path: str) -> dict[str, Any]:
    """The ``Gateway`` options (policy, approver, hold time) the config file's ``mcpsync``
    key asks for: what the command and the gunicorn entry point both apply."""
    importlib.import_module("mcpsync.gateway._guard._schema")
    from mcpsync.gateway._guard._schema import read_guard_settings

    settings = read_guard_settings(path)
    if settings.policy is None:
        return {}
    return {"policy": settings.policy, "hold_seconds": settings.hold_seconds,
            "approver": approver_from_settings(settings)}


class GuardHooks:
    """The guard of one :class:`~mcpsync.gateway._gateway.Gateway`."""

    def __init__(self, gateway: Gateway, guard: Guard, *, approver: Any = None,
                 hold_seconds: float = 25.0, progress_every: float = 5.0,
                 desk_of: GuardHooks | None = None) -> None:
        # ``desk_of``: share that guard's approval desk (see for_core) instead of making one
        self._gw = gateway
        self.guard = guard
        self._by_id = {u.id: u for u in gateway.upstreams}
        self._pending: OrderedDict[IdKey, tuple[str, str, str, Caller, float]] = OrderedDict()
        self._lock = threading.Lock()
        self._tickets: set[str] = set()   # this gateway's calls on the desk now
        self._held_ids: dict[IdKey, str] = {}   # a held call's host id -> its ticket
        self._cancelled: set[str] = set()       # tickets the host cancelled while held
        self._owns_desk = desk_of is None
        self._approval: Any = None
        self._desk: Any = None
        if desk_of is not None:
            self._approval, self._desk = desk_of._approval, desk_of._desk
            return
        if approver is None and guard.policy.approve is not None:
            approver = _PolicyApprover(guard.policy.approve)
        holds = guard.policy.require_approval is not None or guard.policy.approve is not None
        module = _approval_module() if holds else None
        self._approval = module
        if module is not None:
            self._desk = module.ApprovalDesk(approver, hold_seconds=hold_seconds,
                                             progress_every=progress_every)
        elif holds and approver is not None:
            _log.warning("the gateway's approval support is not installed: calls that need "
                         "approval will be refused")

    @classmethod
    def make(cls, gateway: Gateway, policy: Policy, *, approver: Any = None,
             hold_seconds: float = 25.0) -> GuardHooks:
        """The guard of ``gateway`` for ``policy`` (one budget ledger for all its hosts)."""
        return cls(gateway, Guard(policy), approver=approver, hold_seconds=hold_seconds)

    def for_core(self, gateway: Gateway) -> GuardHooks:
        """The guard of a gateway core an HTTP front made from this one: the same policy,
        budget ledger and approval desk (so budgets and approvals are the gateway's, not
        one session's), with the core's own routing and calls in flight."""
        return GuardHooks(gateway, self.guard, desk_of=self)   # its maker closes the desk

    def close(self) -> None:
        """Reject what is still held (the host hears -32011) and stop the desk's threads.
        A core's guard leaves the shared desk to the gateway it was made from, and only
        withdraws its own held calls (its host session ended); a legacy session's budget
        use is forgotten then, since its id is not counted again."""
        caller = getattr(self._gw, "caller", None)
        if not self._owns_desk and isinstance(caller, Caller) and caller.kind == "session":
            # the session's id is never counted again: its budget use would only pile up
            self.guard.ledger.forget(caller.key)
        if self._desk is None:
            return
        if self._owns_desk:
            self._desk.close()
            return
        with self._lock:
            tickets, self._tickets = list(self._tickets), set()
        for ticket in tickets:
            self._desk.withdraw(ticket, "the host session ended while the call was held")

    # ---------------------------------------------------------------- from the host

    def passthrough_request(self, env: Envelope, upstream: Upstream,
                            caller: Caller = PROCESS) -> bool:
        """A host request in pass-through: True when the guard took it (refused or held)."""
        if env.kind == "notification" and env.method == "notifications/cancelled":
            params = _params(env)   # a held call never reached the upstream: nothing to send
            return isinstance(params, dict) and self.cancel_held(params.get("requestId"))
        if env.kind != "request" or env.id_key is None:
            return False
        if env.method == "tools/list":
            self._remember(env.id_key, "list", upstream.id, "", caller)
            return False
        if env.method != "tools/call":
            return False
        params = _params(env)
        name = params.get("name") if isinstance(params, dict) else None
        if not isinstance(name, str):
            return False   # the upstream answers a malformed call itself

        def send() -> None:
            self._gw._record("to_upstream", upstream, env, None)
            upstream.submit(env)
        return self.screen_call(env, upstream.id, name, params, send, caller)

    def screen_call(self, env: Envelope, upstream_id: str, tool: str, params: Any,
                    send: Callable[[], None], caller: Caller = PROCESS) -> bool:
        """Check a ``tools/call`` for ``tool`` of ``upstream_id`` (its own name there).

        Returns True when the guard answered it (a refusal) or holds it (``send`` runs
        once approved); False when the caller sends it now. A call whose params hold a
        key twice is refused before any rule: the rules would judge one of its values and
        the upstream might act on the other."""
        assert env.id is not None and env.id_key is not None
        twice = self._duplicate_refusal(env, upstream_id, tool)
        if twice is not None:
            self._log_host_frame(env, upstream_id)
            self._refuse(env.id, twice)
            return True
        arguments = params.get("arguments") if isinstance(params, dict) else None
        if not isinstance(arguments, Mapping):
            arguments = {}
        verdict = self.guard.check_call(caller, upstream_id, tool, arguments)
        if verdict is None:
            self._remember(env.id_key, "call", upstream_id, tool, caller)
            return False
        if isinstance(verdict, Refusal):
            self._log_host_frame(env, upstream_id)
            self._refuse(env.id, verdict)
            return True
        self._hold(env, verdict, params, send)
        return True

    def cancel_held(self, request_id: Any) -> bool:
        """The host cancelled request ``request_id``: when it is a held call, take it off
        the desk (the approver is not asked any more, an approval cannot release it) and
        answer nothing, as for any cancelled request. False when no such call is held."""
        kind = type(request_id)
        key: IdKey | None = ("int", request_id) if kind is int else \
            ("str", request_id) if kind is str else None
        with self._lock:
            ticket = self._held_ids.get(key) if key is not None else None
            if ticket is not None:
                self._cancelled.add(ticket)
        if ticket is None:
            return False
        if self._desk is not None:
            self._desk.withdraw(ticket, "the host cancelled the call")
        return True

    # ---------------------------------------------------------------- to the host

    def answer_to_host(self, env: Envelope) -> Envelope:
        """An answer on its way to the host (with the host's id): end a call's clock, or
        hide tools from a pass-through list."""
        key = env.id_key
        if key is None or env.kind not in ("response", "error"):
            return env
        with self._lock:
            pending = self._pending.pop(key, None)
        if pending is None:
            return env
        kind, upstream_id, tool, caller, started = pending
        if kind == "call":
            self.guard.finished(caller, upstream_id, tool, time.monotonic() - started)
            return env
        return filter_list_answer(
            env, lambda name: self.guard.visible(caller, upstream_id, name))

    def filter_tools(self, upstream_id: str, result: Any,
                     resolve: Callable[[str], Route | None], caller: Caller = PROCESS) -> Any:
        """One upstream's ``tools/list`` page with several upstreams, hidden tools removed.

        Its names are already prefixed (so a call of a hidden tool still routes, and is
        refused -32010 rather than reported unknown); ``resolve`` maps one back."""
        def visible(name: str) -> bool:
            route = resolve(name)
            return self.guard.visible(caller, upstream_id,
                                      route.name if route is not None else name)
        return filter_tools(result, visible)[0]

    # ---------------------------------------------------------------- inside

    @staticmethod
    def _duplicate_refusal(env: Envelope, upstream_id: str, tool: str) -> Refusal | None:
        found = duplicate_key(env.raw("params"))
        if found is None:
            return None
        where, key = found
        holder = "the arguments hold" if where == "arguments" else "the call's params hold"
        return Refusal(DENIED_BY_POLICY, f"{holder} the key {key!r} twice; a policy cannot "
                       "judge them", "duplicate-keys", upstream_id, tool)

    def _remember(self, key: IdKey, kind: str, upstream_id: str, tool: str,
                  caller: Caller) -> None:
        with self._lock:
            self._pending[key] = (kind, upstream_id, tool, caller, time.monotonic())
            self._pending.move_to_end(key)
            while len(self._pending) > _PENDING_MAX:
                self._pending.popitem(last=False)

    def _log_host_frame(self, env: Envelope, upstream_id: str) -> None:
        """The traffic log shows the host's call too, though it never reached the upstream."""
        inspector = self._gw.inspector
        if inspector is not None and inspector.enabled:
            inspector.record(HOST_TO_GATEWAY, env.to_bytes(), upstream=upstream_id,
                             session=self._gw._log_session)

    def _refuse(self, raw_id: str, refusal: Refusal) -> None:
        _log.info("refused %s/%s: %s (rule: %s)", refusal.upstream, refusal.tool,
                  refusal.reason, refusal.rule)
        text = refusal_frame(raw_id, refusal)
        upstream = self._by_id.get(refusal.upstream)
        if upstream is not None:
            self._gw._record("to_host", upstream, parse_envelope(text), None, made=True)
        else:
            inspector = self._gw.inspector
            if inspector is not None and inspector.enabled:
                self._gw._record_legs("to_host", None, None, parse_envelope(text))
        self._gw._write_host(text.encode())

    def _hold(self, env: Envelope, hold: Hold, params: Any, send: Callable[[], None]) -> None:
        assert env.id is not None and env.id_key is not None
        module, desk = self._approval, self._desk
        if module is None or desk is None:
            self._log_host_frame(env, hold.upstream)
            self._refuse(env.id, self.guard.refuse_hold(
                hold, "it needs approval and approval holds are not available in this "
                      "gateway"))
            return
        raw_id, key = env.id, env.id_key
        meta = params.get("_meta") if isinstance(params, dict) else None
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        on_progress = None
        if token is not None:
            def on_progress(elapsed: float, message: str) -> None:
                text = progress_frame(token, elapsed, message)
                inspector = self._gw.inspector
                if inspector is not None and inspector.enabled:   # the log's record only
                    inspector.record_frame((GATEWAY_TO_HOST,), parse_envelope(text),
                                           hold.upstream, self._gw._log_session)
                self._gw._write_host(text.encode())

        def on_done(verdict: Any) -> None:
            with self._lock:
                self._tickets.discard(ticket)
                if self._held_ids.get(key) == ticket:
                    del self._held_ids[key]
                cancelled = ticket in self._cancelled
                self._cancelled.discard(ticket)
            if cancelled:   # the host no longer waits: neither send nor answer it
                self.guard.release(hold)
                self._log_host_frame(env, hold.upstream)   # the call was made all the same
                return
            if getattr(verdict, "approved", False):
                self._remember(key, "call", hold.upstream, hold.tool, hold.caller)
                send()   # records the host's call with its upstream leg
                return
            self._log_host_frame(env, hold.upstream)
            self._refuse(raw_id, self.guard.refuse_hold(
                hold, str(getattr(verdict, "reason", "") or "the approval was not given"),
                str(getattr(verdict, "rule", "") or hold.rule)))

        call = module.HeldCall(upstream=hold.upstream, tool=hold.tool,
                               arguments=hold.arguments,
                               digest=module.call_digest(hold.upstream, hold.tool,
                                                         hold.arguments),
                               caller=hold.caller.label)
        ticket = getattr(call, "ticket", "")   # what a core withdraws when its session ends
        if ticket:
            with self._lock:
                self._tickets.add(ticket)
                self._held_ids[key] = ticket
        desk.submit(call, hold.rule, on_progress=on_progress, on_done=on_done)


def _params(env: Envelope) -> Any:
    raw = env.raw("params")
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None
