"""Asking the client from a handler: ``ctx.elicit()``, ``ctx.sample()``, ``ctx.list_roots()``.

One API, two mechanisms, chosen by the request's era:

- **Legacy** (2024-11-05 … 2025-11-25): a server-to-client JSON-RPC request on the same
  connection. The handler's thread blocks until the client answers (the reader routes the
  answer straight to it, see ``Outbox.deliver``), the request is cancelled, the connection
  ends, or ``ask_timeout`` passes.
- **Modern** (2026-07-28): the server never sends requests. The first ask that has no answer
  yet stops the handler (:class:`InputNeeded`, a ``BaseException`` so that a handler's own
  ``except Exception`` cannot swallow it) and the router answers ``input_required`` with that
  ask and a sealed ``requestState`` holding the answers so far. The client retries the same
  request with the answer; the handler runs again from the top, and its asks return the
  recorded answers in order until a new one is needed. Work done before an ask therefore
  runs again on every round: a Python stack cannot be parked and resumed on another worker.

A capability the client did not declare is never used: legacy raises
``CapabilityNotSupported`` in the handler (it may catch it and do without); modern ends the
request with -32021 and ``data.requiredCapabilities``, as the 2026-07-28 rules require.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mcpsync.errors import Cancelled, CapabilityNotSupported, RequestTimeout
from mcpsync.jsonrpc import Message, RequestId, notification, request
from mcpsync.protocol import remote_error
from mcpsync.server._context import _Call, _Send
from mcpsync.types import Content, Root, content_block_from_dict

__all__ = ["ElicitResult", "InputNeeded", "LegacyAsker", "MissingCapability", "ModernAsker",
           "Outbox", "SampleResult", "StartTask", "TaskCancelled", "required_capability",
           "root_list"]

_SLICE = 0.1   # how often a waiting ask looks at the request's cancellation


@dataclass(frozen=True)
class ElicitResult:
    """The user's answer to ``ctx.elicit()``: ``action`` is ``"accept"``, ``"decline"`` or
    ``"cancel"``; ``content`` the form's values when accepted (``None`` for URL mode)."""

    action: str
    content: dict[str, Any] | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def accepted(self) -> bool:
        return self.action == "accept"

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ElicitResult:
        action = d.get("action")
        if action not in ("accept", "decline", "cancel"):
            raise ValueError(f"the client answered an elicitation with action {action!r}; "
                             "expected accept, decline or cancel")
        content = d.get("content")
        return cls(str(action), dict(content) if isinstance(content, Mapping) else None, dict(d))


@dataclass(frozen=True)
class SampleResult:
    """The client's LLM answer to ``ctx.sample()``: ``content`` is a typed block (or a list of
    them, 2025-11-25 and later), ``text`` the text of the first text block."""

    role: str
    content: Content | list[Content]
    model: str
    stop_reason: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def text(self) -> str | None:
        blocks = self.content if isinstance(self.content, list) else [self.content]
        for block in blocks:
            text = getattr(block, "text", None)
            if isinstance(text, str):
                return text
        return None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SampleResult:
        content = d.get("content")
        if isinstance(content, list):
            blocks: Content | list[Content] = [content_block_from_dict(b) for b in content]
        else:
            blocks = content_block_from_dict(content)
        stop = d.get("stopReason")
        return cls(str(d.get("role", "assistant")), blocks, str(d.get("model", "")),
                   stop if isinstance(stop, str) else None, dict(d))


class InputNeeded(BaseException):
    """Modern era: the handler asked for things not answered yet (the router answers
    ``input_required`` with them). Not an ``Exception``: a handler's ``except Exception`` must
    not swallow it. ``requests`` maps each key to ``(method, params)``."""

    def __init__(self, requests: dict[str, tuple[str, dict[str, Any]]]) -> None:
        super().__init__(f"input required: {', '.join(m for m, _ in requests.values())}")
        self.requests = requests


class StartTask(BaseException):
    """``ctx.start_task()`` on a tool that gathers input in rounds first: the request is
    answered with a task, and the handler runs again inside it with ``answers``."""

    def __init__(self, answers: Mapping[str, dict[str, Any]]) -> None:
        super().__init__("start the task")
        self.answers = dict(answers)


class TaskCancelled(BaseException):
    """Ends the ask of a task's handler when the task is cancelled while it waits."""


class MissingCapability(BaseException):
    """Modern era: the handler asked for a capability the request did not declare (-32021)."""

    def __init__(self, method: str, required: dict[str, Any]) -> None:
        super().__init__(f"{method} needs the client capability {required}")
        self.method = method
        self.required = required


def required_capability(capabilities: Mapping[str, Any], method: str,
                        params: Mapping[str, Any]) -> dict[str, Any] | None:
    """The client capability ``method`` would need and the client did not declare, or None."""
    if method == "elicitation/create":
        declared = capabilities.get("elicitation")
        mode = params.get("mode", "form")
        if not isinstance(declared, Mapping):
            return {"elicitation": {mode: {}}}
        if mode == "url" and "url" not in declared:
            return {"elicitation": {"url": {}}}
        if mode == "form" and declared and "form" not in declared:
            return {"elicitation": {"form": {}}}
        return None
    if method == "sampling/createMessage":
        declared = capabilities.get("sampling")
        if not isinstance(declared, Mapping):
            return {"sampling": {"tools": {}} if params.get("tools") else {}}
        if params.get("tools") and "tools" not in declared:
            return {"sampling": {"tools": {}}}
        return None
    if method == "roots/list":
        return None if isinstance(capabilities.get("roots"), Mapping) else {"roots": {}}
    raise ValueError(f"cannot ask the client for {method!r}")


class _Slot:
    __slots__ = ("event", "message")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.message: Message | None = None


class Outbox:
    """One connection's requests to the client (legacy era) and the answers coming back."""

    def __init__(self, send: _Send) -> None:
        self._send = send
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._waiting: dict[tuple[str, int | str], _Slot] = {}
        self._closed = False

    def deliver(self, message: Message) -> bool:
        """The reader read an answer to one of our requests: hand it to its waiter."""
        if message.id is None:
            return False
        with self._lock:
            slot = self._waiting.pop(message.id.key, None)
        if slot is None:
            return False
        slot.message = message
        slot.event.set()
        return True

    def close(self) -> None:
        """The connection ends: every waiting ask wakes and fails."""
        with self._lock:
            self._closed = True
            slots = list(self._waiting.values())
            self._waiting.clear()
        for slot in slots:
            slot.event.set()

    def ask(self, call: _Call, method: str, params: dict[str, Any],
            timeout: float) -> dict[str, Any]:
        """Send ``method`` to the client for request ``call`` and wait for its result."""
        request_id = RequestId.of(f"mcpsync-{next(self._ids)}")
        slot = _Slot()
        with self._lock:
            if self._closed:
                raise Cancelled(f"{method}: the connection has ended", method=method)
            self._waiting[request_id.key] = slot
        try:
            if not call.emit(request(request_id, method, params), self._send):
                raise Cancelled(f"{method}: the request that asked was cancelled", method=method)
            deadline = time.monotonic() + timeout
            while not slot.event.is_set():
                remaining = deadline - time.monotonic()
                if call.cancelled.is_set() or remaining <= 0:
                    self._abandon(request_id, "the request that asked was cancelled"
                                  if call.cancelled.is_set() else "no answer in time")
                    if call.cancelled.is_set():
                        raise Cancelled(f"{method}: the request that asked was cancelled",
                                        method=method)
                    raise RequestTimeout(f"{method}: the client did not answer within "
                                         f"{timeout:g} s", timeout=timeout, method=method)
                slot.event.wait(min(_SLICE, remaining))
        finally:
            with self._lock:
                self._waiting.pop(request_id.key, None)
        answer = slot.message
        if answer is None:
            raise Cancelled(f"{method}: the connection ended before the client answered",
                            method=method)
        if answer.is_error:
            err = answer.error if isinstance(answer.error, Mapping) else {}
            raise remote_error(err.get("code"), err.get("message"), err.get("data"),
                               server=None, method=method, prefix=f"the client's {method}")
        if not isinstance(answer.result, dict):
            raise ValueError(f"the client answered {method} with {answer.result!r:.200}, "
                             "which is not an object")
        return answer.result

    def _abandon(self, request_id: RequestId, reason: str) -> None:
        """Tell the client we no longer wait (best effort, never blocks on a cancelled call)."""
        with self._lock:
            self._waiting.pop(request_id.key, None)
        with contextlib.suppress(Exception):  # the connection is going away: nothing to tell
            self._send(notification("notifications/cancelled",
                                    {"requestId": request_id.value, "reason": reason}))


_AUTO_KEY = re.compile(r"ask-[0-9]+")


class _Keys:
    """The keys one run of a handler has used: each at most once, and the automatic
    ``ask-<n>`` names kept for the asks that give none. The same in both eras, so a handler
    that is wrong under 2026-07-28 is wrong under legacy too."""

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._auto = 0

    def next(self, key: str | None) -> str:
        if key is None:
            self._auto += 1
            key = f"ask-{self._auto}"
        elif not isinstance(key, str) or not key:
            raise ValueError(f"an ask's key must be a non-empty string, got {key!r}")
        elif _AUTO_KEY.fullmatch(key):
            raise ValueError(f"the ask key {key!r} is reserved for asks without a key; "
                             "choose another name")
        if key in self._seen:
            raise ValueError(f"the ask key {key!r} was already used in this request; give "
                             "each ask its own key")
        self._seen.add(key)
        return key


class LegacyAsker:
    """``ctx`` asks of a legacy client: a real request, answered while the handler waits."""

    def __init__(self, outbox: Outbox, call: _Call, capabilities: Mapping[str, Any],
                 timeout: float) -> None:
        self._outbox = outbox
        self._call = call
        self._capabilities = capabilities
        self._timeout = timeout
        self._keys = _Keys()

    def ask(self, method: str, params: dict[str, Any], key: str | None = None) -> dict[str, Any]:
        self._keys.next(key)
        return self._ask(method, params)

    def _ask(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        missing = required_capability(self._capabilities, method, params)
        if missing is not None:
            raise CapabilityNotSupported(
                f"{method}: the client did not declare the capability {missing} in "
                "initialize, so the server cannot ask it; do without, or ask the user to "
                "use a client that supports it", method=method)
        if method == "elicitation/create" and params.get("mode") == "url":
            params = {**params, "elicitationId": uuid.uuid4().hex}   # legacy names it
        return self._outbox.ask(self._call, method, params, self._timeout)

    def ask_all(self, asks: Mapping[str, tuple[str, dict[str, Any]]]
                ) -> dict[str, dict[str, Any]]:
        """One after the other: a legacy client answers requests, not rounds."""
        for key in asks:
            self._keys.next(key)
        return {key: self._ask(method, params) for key, (method, params) in asks.items()}


class ModernAsker:
    """``ctx`` asks of a 2026-07-28 client: an ask whose key has an answer (from the sealed
    state of earlier rounds or this request's ``inputResponses``) returns it; the asks
    without one end the run with :class:`InputNeeded`. Keys default to ``ask-1``, ``ask-2``,
    ... in the order of the handler's asks, the same on every run."""

    def __init__(self, answers: Mapping[str, dict[str, Any]],
                 capabilities: Mapping[str, Any]) -> None:
        self.answers = answers
        self.used: dict[str, dict[str, Any]] = {}   # the answers this run consumed
        self._capabilities = capabilities
        self._keys = _Keys()

    def _key(self, key: str | None) -> str:
        return self._keys.next(key)

    def ask(self, method: str, params: dict[str, Any], key: str | None = None) -> dict[str, Any]:
        key = self._key(key)
        return self._gather({key: (method, params)})[key]

    def ask_all(self, asks: Mapping[str, tuple[str, dict[str, Any]]]
                ) -> dict[str, dict[str, Any]]:
        return self._gather({self._key(key): ask for key, ask in asks.items()})

    def _gather(self, asks: Mapping[str, tuple[str, dict[str, Any]]]
                ) -> dict[str, dict[str, Any]]:
        got: dict[str, dict[str, Any]] = {}
        pending: dict[str, tuple[str, dict[str, Any]]] = {}
        for key, (method, params) in asks.items():
            answer = self.answers.get(key)
            if answer is not None:
                got[key] = self.used[key] = answer
                continue
            missing = required_capability(self._capabilities, method, params)
            if missing is not None:
                raise MissingCapability(method, missing)
            pending[key] = (method, params)
        if pending:
            raise InputNeeded(pending)
        return got


def root_list(result: Mapping[str, Any]) -> list[Root]:
    roots = result.get("roots")
    if not isinstance(roots, list):
        raise ValueError("the client answered roots/list without a 'roots' list")
    return [Root.from_dict(r) for r in roots
            if isinstance(r, dict) and isinstance(r.get("uri"), str)]
