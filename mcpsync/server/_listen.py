"""What one connection has asked to hear about: legacy subscriptions and modern listens.

Legacy: ``resources/subscribe`` adds a URI to the connection's set; list changes go to every
initialized connection. Modern (2026-07-28): a ``subscriptions/listen`` request stays open (it
holds no worker: its answer is deferred) and receives, tagged with its ``subscriptionId``, only
the kinds its filter asked for. It ends when the client cancels it; each notification goes
through the request's own write path, so nothing is written for it after the cancel. One
connection holds at most ``MAX_LISTENS`` listens and ``MAX_SUBSCRIPTIONS`` subscribed URIs
(legacy and on its listens together).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mcpsync.jsonrpc import INVALID_PARAMS, INVALID_REQUEST, notification
from mcpsync.protocol import META_SUBSCRIPTION_ID
from mcpsync.server._context import _Call, _Send
from mcpsync.server._request import Refusal, Request

__all__ = ["MAX_LISTENS", "MAX_SUBSCRIPTIONS", "Listens"]

#: Bounds on what one connection may hold open: each costs memory and a check on every change.
MAX_LISTENS = 64
MAX_SUBSCRIPTIONS = 1024

_FILTER = {"tools": "toolsListChanged", "prompts": "promptsListChanged",
           "resources": "resourcesListChanged"}


@dataclass
class _Listen:
    call: _Call
    kinds: frozenset[str]
    uris: frozenset[str]
    subscription_id: Any
    task_ids: frozenset[str] = frozenset()
    # Held while the acknowledgement is written: no notification may overtake it.
    lock: threading.Lock = field(default_factory=threading.Lock)


class Listens:
    """The open listens and legacy subscriptions of one connection."""

    def __init__(self, send: _Send, forget: Callable[[_Call], None]) -> None:
        self._send = send
        self._forget = forget
        self._lock = threading.Lock()
        # Keyed by the call itself: on a router shared by many HTTP clients, ids repeat.
        self._open: dict[_Call, _Listen] = {}
        self._subscribed: set[str] = set()

    # -- legacy -------------------------------------------------------------------------------

    def _uri_count(self) -> int:
        """Under the lock: subscribed URIs, legacy and on open listens together."""
        return len(self._subscribed) + sum(len(lst.uris) for lst in self._open.values())

    def wants(self, uri: str) -> bool:
        """Is anyone on this connection subscribed to ``uri`` (so an update is worth
        recording)?"""
        with self._lock:
            return uri in self._subscribed or any(uri in lst.uris
                                                  for lst in self._open.values())

    def subscribe(self, uri: str) -> None:
        with self._lock:
            if uri not in self._subscribed and self._uri_count() >= MAX_SUBSCRIPTIONS:
                raise Refusal(INVALID_REQUEST, f"resources/subscribe: this connection already "
                              f"holds {MAX_SUBSCRIPTIONS} subscriptions; unsubscribe from one "
                              "first")
            self._subscribed.add(uri)

    def unsubscribe(self, uri: str) -> None:
        with self._lock:
            self._subscribed.discard(uri)

    def is_subscribed(self, uri: str) -> bool:
        with self._lock:
            return uri in self._subscribed

    # -- modern -------------------------------------------------------------------------------

    def open(self, req: Request, task_ids: list[str] | None = None) -> None:
        """``subscriptions/listen``: acknowledge what will be honoured, then keep it open."""
        wanted = req.params.get("notifications")
        if not isinstance(wanted, dict):
            raise Refusal(INVALID_PARAMS, "subscriptions/listen needs params.notifications, "
                          "an object saying what to listen for")
        kinds = frozenset(kind for kind, key in _FILTER.items() if wanted.get(key) is True)
        uris_in = wanted.get("resourceSubscriptions", [])
        if not isinstance(uris_in, list) or not all(isinstance(u, str) for u in uris_in):
            raise Refusal(INVALID_PARAMS, "subscriptions/listen: resourceSubscriptions must "
                          "be a list of URI strings")
        uris = frozenset(uris_in)
        honoured: dict[str, Any] = {_FILTER[kind]: True for kind in sorted(kinds)}
        if uris_in:
            honoured["resourceSubscriptions"] = list(dict.fromkeys(uris_in))
        if task_ids:
            honoured["taskIds"] = list(task_ids)
        listen = _Listen(req.call, kinds, uris, req.id.value, frozenset(task_ids or ()))
        ack = notification("notifications/subscriptions/acknowledged", {
            "notifications": honoured, "_meta": {META_SUBSCRIPTION_ID: req.id.value}})
        with listen.lock:   # the acknowledgement goes out before anything told to the listen
            with self._lock:
                if len(self._open) >= MAX_LISTENS:
                    raise Refusal(INVALID_REQUEST, f"subscriptions/listen: this connection "
                                  f"already holds {MAX_LISTENS} open listens; cancel one first "
                                  "(one listen can ask for every kind and URI)")
                if uris and self._uri_count() + len(uris) > MAX_SUBSCRIPTIONS:
                    raise Refusal(INVALID_REQUEST, f"subscriptions/listen: at most "
                                  f"{MAX_SUBSCRIPTIONS} resource subscriptions per connection, "
                                  f"and this one asks for {len(uris)} more")
                self._open[req.call] = listen
            acknowledged = req.call.emit(ack, self._send)
        if not acknowledged:
            self._drop(listen)

    def list_changed(self, kind: str) -> None:
        for listen in self._current():
            if kind in listen.kinds:
                self._tell(listen, f"notifications/{kind}/list_changed", {})

    def resource_updated(self, uri: str) -> None:
        for listen in self._current():
            if uri in listen.uris:
                self._tell(listen, "notifications/resources/updated", {"uri": uri})

    def task_status(self, task_id: str, detailed: dict[str, Any]) -> None:
        """A task changed status: ``notifications/tasks`` (the task as ``tasks/get`` shows
        it) to every listen that asked for it."""
        for listen in self._current():
            if task_id in listen.task_ids:
                self._tell(listen, "notifications/tasks", dict(detailed))

    def cancelled(self, call: _Call) -> None:
        """The client cancelled request ``call``: if it is an open listen, it ends now."""
        with self._lock:
            listen = self._open.get(call)
        if listen is not None:
            self._drop(listen)

    def close(self) -> None:
        with self._lock:
            self._open.clear()

    def _current(self) -> list[_Listen]:
        with self._lock:
            listens = list(self._open.values())
        for listen in listens:
            if listen.call.cancelled.is_set():
                self._drop(listen)
        return [listen for listen in listens if not listen.call.cancelled.is_set()]

    def _tell(self, listen: _Listen, method: str, params: dict[str, Any]) -> None:
        params["_meta"] = {META_SUBSCRIPTION_ID: listen.subscription_id}
        with listen.lock:
            told = listen.call.emit(notification(method, params), self._send)
        if not told:
            self._drop(listen)

    def _drop(self, listen: _Listen) -> None:
        with self._lock:
            if self._open.get(listen.call) is listen:
                del self._open[listen.call]
        self._forget(listen.call)
