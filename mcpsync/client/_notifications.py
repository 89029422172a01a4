"""Server → client notifications, routed to what each one concerns.

Log messages go to the ``mcpsync.server.<name>`` logger and ``on_log``; ``*/list_changed``
drops the cached list (and, for tools, the output schemas) before the subscribers hear of it;
resource updates, task statuses and listen acknowledgements go to the subscriptions; an
elicitation's completion goes to the callbacks; anything else to ``on_notification``. The
``notification_observer`` then sees every notification, after our own handling. All of it runs
on the session's dispatcher thread, in arrival order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from mcpsync.client._subscriptions import KINDS
from mcpsync.protocol import log_level_to_logging

if TYPE_CHECKING:
    from mcpsync.client._cache import ListCache
    from mcpsync.client._callback_warnings import CallbackGuard
    from mcpsync.client._callbacks import Callbacks
    from mcpsync.client._options import ClientOptions as Options
    from mcpsync.client._subscriptions import Subscriptions
    from mcpsync.client._tools import ToolSchemas

__all__ = ["LIST_METHODS", "Notifications"]

_log = logging.getLogger("mcpsync.client")

# The user callback each routed notification ends in (``on_notification`` for the rest).
_ROUTE_CALLBACKS = {
    "notifications/message": "on_log",
    "notifications/tools/list_changed": "list-changed subscription",
    "notifications/prompts/list_changed": "list-changed subscription",
    "notifications/resources/list_changed": "list-changed subscription",
    "notifications/resources/updated": "resource-updated subscription",
    "notifications/elicitation/complete": "elicitation on_complete",
    "notifications/tasks": "task watch",
}

LIST_METHODS = {"tools": ("tools/list",), "prompts": ("prompts/list",),
                "resources": ("resources/list", "resources/templates/list")}


class Notifications:
    """The router of one client's notifications (it holds no reference to the client)."""

    def __init__(self, options: Options, *, server_log: logging.Logger, cache: ListCache,
                 tools: ToolSchemas, subs: Subscriptions, callbacks: Callbacks,
                 name: Callable[[], str], guard: CallbackGuard | None = None) -> None:
        self._opts = options
        self._server_log = server_log
        self._cache = cache
        self._tools = tools
        self._subs = subs
        self._callbacks = callbacks
        self._name = name
        self._guard = guard

    def handle(self, message: Any) -> None:
        """Route a notification, then show it to the ``notification_observer``."""
        observer = self._opts.notification_observer
        if message.method != "notifications/progress":   # progress reaches us only when
            self._route(message)                          # observed; the call has it already
        if observer is not None:
            try:
                observer(message.method, message.params)
            except Exception as exc:
                _log.exception("server %r: notification_observer raised on %s; delivery "
                               "goes on", self._name(), message.method)
                self._report("notification_observer", exc)

    def _report(self, callback: str, exc: Exception) -> None:
        if self._guard is not None:
            self._guard.report(callback, exc)

    def _route(self, message: Any) -> None:
        """Route one notification; what a user callback raises is reported, then goes on
        to the dispatcher, which logs it."""
        try:
            self._route_one(message)
        except Exception as exc:
            self._report(_ROUTE_CALLBACKS.get(message.method, "on_notification"), exc)
            raise

    def _route_one(self, message: Any) -> None:
        method = message.method
        params = message.params
        if method == "notifications/message":
            self._server_message(params)
        elif method.endswith("/list_changed") and method.startswith("notifications/"):
            kind = method[len("notifications/"):-len("/list_changed")]
            if kind in KINDS:
                self._cache.invalidate(*LIST_METHODS[kind])
                if kind == "tools":
                    self._tools.forget()
                self._subs.deliver_list_changed(kind, params)
            elif self._opts.on_notification is not None:
                self._opts.on_notification(method, params)
        elif method == "notifications/resources/updated":
            self._subs.deliver_updated(params)
        elif method == "notifications/tasks":
            self._subs.deliver_task(params)
        elif method == "notifications/subscriptions/acknowledged":
            self._subs.acknowledged(params)
        elif method == "notifications/elicitation/complete":
            self._callbacks.elicitation_complete(params)
        elif self._opts.on_notification is not None:
            self._opts.on_notification(method, params)

    def _server_message(self, params: Any) -> None:
        """``notifications/message``: log it under ``mcpsync.server.<name>``, then ``on_log``."""
        p = params if isinstance(params, Mapping) else {}
        level = p.get("level")
        logger = p.get("logger")
        data = p.get("data")
        self._server_log.log(log_level_to_logging(level if isinstance(level, str) else ""),
                             "%s%s", f"[{logger}] " if logger else "", data)
        if self._opts.on_log is not None:
            self._opts.on_log(level if isinstance(level, str) else "info",
                              logger if isinstance(logger, str) else None, data)
