"""What the server answers to each message: eras, the method table, batches, refusals.

This module decides which era and which feature answers a request; the features live in
``_tools``, ``_resources``, ``_prompts`` (with completion) and ``_listen``; asks for input in
``_asking`` and ``_rounds``. It does no reading and starts no thread (``_loop`` and
``_memory`` do that). Era rules, in the order they are applied to a request:

1. ``params._meta`` carrying ``io.modelcontextprotocol/protocolVersion`` → modern rules
   (2026-07-28), at any time, whatever happened before on the connection.
2. Otherwise, after a successful ``initialize`` → legacy rules at the negotiated revision.
3. Otherwise (before ``initialize``): ``initialize`` itself, ``ping`` → ``{}``, and -32602
   ("missing _meta") for anything else.

A :class:`Refusal` raised anywhere below answers its JSON-RPC error. Failures of our own code
answer -32603 with a short message; the traceback goes to stderr.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable
from typing import Any

from mcpsync.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    RESOURCE_NOT_FOUND,
    UNSUPPORTED_PROTOCOL_VERSION,
    Batch,
    Message,
    ParseError,
    RequestId,
    error,
    notification,
    result,
    serialize,
)
from mcpsync.protocol import (
    LATEST_LEGACY,
    LEGACY_VERSIONS,
    LOG_LEVELS,
    META_CLIENT_CAPABILITIES,
    META_LOG_LEVEL,
    META_PROTOCOL_VERSION,
    META_SERVER_INFO,
    MODERN_VERSIONS,
    SUPPORTED_VERSIONS,
)
from mcpsync.server import _prompts, _resources, _skills, _tools
from mcpsync.server._announce import Announcer
from mcpsync.server._asking import Outbox
from mcpsync.server._context import _Call, _Send, _stderr
from mcpsync.server._listen import Listens
from mcpsync.server._request import DEFERRED, Refusal, Request
from mcpsync.server._services import ServerIdentity, ServerSettings, Services
from mcpsync.server._tasks import TASKS_EXTENSION, TaskStore, declares_tasks, missing_tasks
from mcpsync.transport.base import safe_name

__all__ = ["Dispatcher", "Send", "ServerIdentity", "ServerSettings"]

_BATCH_VERSION = "2025-03-26"

Send = _Send
Feature = Callable[[Services, Request], Any]

#: Methods served in both eras.
_SHARED: dict[str, Feature] = {
    "tools/list": _tools.list_tools,
    "tools/call": _tools.call_tool,
    "resources/list": _resources.list_resources,
    "resources/templates/list": _resources.list_templates,
    "resources/read": _resources.read_resource,
    "prompts/list": _prompts.list_prompts,
    "prompts/get": _prompts.get_prompt,
    "completion/complete": _prompts.complete,
    "skills/list": _skills.list_skills,
    "skills/get": _skills.get_skill,
    "resources/directory/read": _skills.read_directory,
}
#: Results that carry the 2026-07-28 caching hints are given them by their feature.

#: The tasks extension's methods (2026-07-28, for clients that declare it): store methods.
_TASK_METHODS = {"tasks/get": "get", "tasks/update": "update", "tasks/cancel": "cancel"}


def request_key(value: Any) -> tuple[str, int | str] | None:
    """The correlation key of a ``requestId`` in a cancel notice; ``None`` when it is no id."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return ("int", value)
    if isinstance(value, str):
        return ("str", value)
    return None


class Dispatcher:
    """Answers the messages of one connection. Safe to call from several worker threads.

    It is also the connection's listener on the server's registry: list changes and resource
    updates reach the client in the era it uses. :meth:`cancel_all` ends the connection.
    """

    def __init__(self, settings: ServerSettings, send: Send,
                 send_batch: Callable[[list[Message]], None]) -> None:
        self._settings = settings
        self._identity = settings.identity
        self._send = send
        self._send_batch = send_batch
        self._outbox = Outbox(send)
        self._svc = Services(settings, send, send_batch, self._outbox)
        self._lock = threading.Lock()
        self._legacy_version: str | None = None  # set by a successful initialize
        self._legacy_caps: dict[str, Any] = {}
        self._log_level: str | None = None   # no logs until logging/setLevel asks
        self._calls: dict[tuple[str, int | str], _Call] = {}
        self._listens = Listens(send, self._forget)
        self._tasks = TaskStore(self._listens.task_status)
        self._svc.tasks = self._tasks
        self._offered: frozenset[str] = frozenset()   # the kinds initialize advertised
        self._announcer = Announcer(safe_name(settings.identity.name), self._announce_list,
                                    self._announce_update)
        self._ended = False
        settings.registry.listen(self)

    # -- the in-flight table (used by the reader thread and the workers) --------------------

    def track(self, message: Message, *, sink: Send | None = None,
              private: bool = False) -> _Call | None:
        """Register a request as in flight so a cancel notice can reach it, even while queued.

        ``initialize`` is not tracked: the spec forbids cancelling it, so a cancel is ignored.
        ``sink`` receives every frame of this request instead of the connection's stream (an
        HTTP exchange). ``private``: not entered in the in-flight table, for requests whose
        ids are not unique on this router (stateless HTTP serves many clients at once, each
        cancelling by closing its stream, never by a notice).
        """
        if not message.is_request or message.id is None or message.method is None:
            return None
        call = _Call(message.id, message.method)
        call.sink = sink
        if private:
            return call
        if message.method != "initialize":
            with self._lock:
                self._calls[message.id.key] = call
        return call

    def cancel_notice(self, params: Any) -> bool:
        """``notifications/cancelled``: set the request's event; unknown ids are ignored.
        True when it named a tracked request."""
        key = request_key(params.get("requestId")) if isinstance(params, dict) else None
        if key is None:
            return False
        with self._lock:
            call = self._calls.get(key)
        if call is None:
            return False
        call.cancel()
        self._listens.cancelled(call)   # an open listen: nothing else would forget it
        return True

    def end_call(self, call: _Call) -> None:
        """A request's own stream ended (an HTTP client went away): cancel it, and close it
        if it is an open listen, whether or not it was entered in the in-flight table."""
        call.cancel()
        self._listens.cancelled(call)

    def deliver_response(self, message: Message) -> None:
        """The client answered a request *we* sent (a handler asking for input). Called by
        the intake as soon as the frame is read, never queued: the handler waiting for it
        holds a worker. An answer nobody waits for is dropped."""
        self._outbox.deliver(message)

    def cancel_all(self) -> None:
        """The connection ends: every handler sees its event set, every ask fails, and the
        registry stops telling this connection about changes."""
        with self._lock:
            self._ended = True
            calls = list(self._calls.values())
        self._settings.registry.unlisten(self)
        self._announcer.close()
        self._outbox.close()
        self._listens.close()
        for call in calls:
            call.cancel()
        self._tasks.close()

    def _forget(self, call: _Call) -> None:
        with self._lock:
            if self._calls.get(call.id.key) is call:
                del self._calls[call.id.key]

    # -- registry events (any thread) --------------------------------------------------------

    def list_changed(self, kind: str) -> None:
        """A list changed (any thread): recorded, and announced by this connection's
        announcer thread, so the changer never waits for a client that is not reading."""
        self._announcer.kind(kind)

    def resource_updated(self, uri: str) -> None:
        if self._listens.wants(uri):   # pending updates stay bounded by the subscriptions
            self._announcer.uri(uri)

    def _announce_list(self, kind: str) -> None:
        """Announcer thread: legacy clients hear of kinds initialize offered them, modern
        ones on the listens that asked."""
        with self._lock:
            legacy = (self._legacy_version is not None and not self._ended
                      and kind in self._offered)
        if legacy:
            self._notify(f"notifications/{kind}/list_changed", None)
        self._listens.list_changed(kind)

    def _announce_update(self, uri: str) -> None:
        with self._lock:
            legacy = self._legacy_version is not None and not self._ended
        if legacy and self._listens.is_subscribed(uri):
            self._notify("notifications/resources/updated", {"uri": uri})
        self._listens.resource_updated(uri)

    def _notify(self, method: str, params: Any) -> None:
        try:
            self._send(notification(method, params))
        except Exception as exc:  # a notification nobody can read: never the caller's problem
            _stderr(f"could not send {method}: {type(exc).__name__}: {exc}")

    # -- entry points --------------------------------------------------------------------

    def handle(self, item: Message | Batch | ParseError, calls: list[_Call | None]) -> None:
        """Answer one frame read by the reader (``calls`` are the tracked records, in order)."""
        if isinstance(item, ParseError):
            self._send(_parse_error_reply(item))
        elif isinstance(item, Batch):
            self._handle_batch(item, calls)
        else:
            call = calls[0] if calls else None
            if call is not None:
                reply = self._respond_guarded(item, call)
                if reply is DEFERRED:   # an open listen: it stays tracked until cancelled
                    return
                call.finish(reply, self._send)
                self._forget(call)
            # notifications (cancel was handled by the reader) and stray responses: silence

    def _handle_batch(self, batch: Batch, calls: list[_Call | None]) -> None:
        with self._lock:
            allowed = self._legacy_version == _BATCH_VERSION
        if not allowed:
            self._send(error(None, INVALID_REQUEST,
                             "batches are only allowed under 2025-03-26, after initialize"))
            for call in calls:
                if call is not None:
                    call.finish(None, self._send)
                    self._forget(call)
            return
        replies: list[Message] = []
        for element, call in zip(batch, calls, strict=True):
            if isinstance(element, ParseError):
                replies.append(_parse_error_reply(element))
                continue
            if call is None:
                continue  # a notification or a stray response: no element
            if element.method == "initialize":
                reply: Message | None = error(
                    element.id, INVALID_REQUEST, "initialize must not be sent in a batch")
            else:
                answered = self._respond_guarded(element, call)
                reply = None if answered is DEFERRED else answered
            collected: list[Message] = []
            call.finish(reply, _collect_into(collected))
            self._forget(call)
            replies.extend(_serialisable(m) for m in collected)
        if replies:
            self._send_batch(replies)

    def _respond_guarded(self, message: Message, call: _Call) -> Any:
        """The response to a request, ``None`` for none, or ``DEFERRED``; our own bugs and
        a handler's unexpected exceptions become -32603."""
        if call.cancelled.is_set():
            return None  # cancelled while queued: dropped without a response
        try:
            return self._respond(message, call)
        except Refusal as refusal:
            return error(message.id, refusal.code, refusal.message,
                         *(() if refusal.data is None else (refusal.data,)))
        except Exception as exc:
            _stderr(f"internal error while answering {message.method!r}:\n"
                    + "".join(traceback.format_exception(exc)).rstrip())
            return error(message.id, INTERNAL_ERROR,
                         f"internal error while answering {message.method!r}: "
                         f"{type(exc).__name__}")

    # -- era selection -------------------------------------------------------------------

    def _respond(self, message: Message, call: _Call) -> Any:
        assert message.id is not None and message.method is not None
        params = message.params
        meta = params.get("_meta") if isinstance(params, dict) else None
        if isinstance(meta, dict) and META_PROTOCOL_VERSION in meta:
            return self._modern(message, call, meta)
        version = self._legacy_version   # one reference, set once: no lock to read it
        if version is not None:
            return self._legacy(message, call, version)
        if message.method == "initialize":
            return self._initialize(message)
        if message.method == "ping":
            return result(message.id, {})
        raise Refusal(INVALID_PARAMS,
                      f"missing _meta: a {message.method!r} request before initialize must "
                      f"carry params._meta[{META_PROTOCOL_VERSION!r}] (modern, 2026-07-28), "
                      "or the client must send initialize first (legacy)")

    def _capabilities(self, version: str) -> dict[str, Any]:
        """What this server offers now: tools always; resources, prompts and completion once
        something of the kind is registered, or when the server declared it up front
        (``Server(advertise=...)``) because it adds its first one while serving.
        ``completions`` exists as a capability from 2025-03-26 on."""
        registry = self._settings.registry
        declared = self._settings.advertise
        out: dict[str, Any] = {"tools": {"listChanged": True}}
        if registry.resources or registry.templates or "resources" in declared:
            out["resources"] = {"subscribe": True, "listChanged": True}
        if registry.prompts or "prompts" in declared:
            out["prompts"] = {"listChanged": True}
        if version != "2024-11-05" and (registry.prompts or registry.templates
                                        or registry.resources
                                        or "completions" in declared):
            out["completions"] = {}
        out["logging"] = {}
        return out

    # -- legacy (2024-11-05 ... 2025-11-25) ----------------------------------------------

    def _initialize(self, message: Message) -> Message:
        assert message.id is not None
        params = message.params
        if not isinstance(params, dict):
            raise Refusal(INVALID_PARAMS, "initialize needs params with protocolVersion, "
                                          "capabilities and clientInfo")
        requested = params.get("protocolVersion")
        if not isinstance(requested, str):
            raise Refusal(INVALID_PARAMS, "initialize: protocolVersion must be a string")
        capabilities = params.get("capabilities")
        if not isinstance(capabilities, dict):
            raise Refusal(INVALID_PARAMS, "initialize: capabilities must be an object")
        client_info = params.get("clientInfo")
        if not isinstance(client_info, dict) or not isinstance(client_info.get("name"), str):
            raise Refusal(INVALID_PARAMS, "initialize: clientInfo must be an object with a "
                                          "name")
        version = requested if requested in LEGACY_VERSIONS else LATEST_LEGACY
        with self._lock:
            if self._legacy_version is not None:
                raise Refusal(INVALID_REQUEST, "already initialized")
            self._legacy_version = version
            self._legacy_caps = dict(capabilities)
        offered = self._capabilities(version)
        self._offered = frozenset(offered)
        out: dict[str, Any] = {
            "protocolVersion": version,
            "capabilities": offered,
            "serverInfo": self._identity.info(),
        }
        if self._identity.instructions is not None:
            out["instructions"] = self._identity.instructions
        return result(message.id, out)

    def _legacy(self, message: Message, call: _Call, version: str) -> Message:
        assert message.id is not None and message.method is not None
        method = message.method
        params = message.params if isinstance(message.params, dict) else {}
        feature = _SHARED.get(method)
        if feature is not None:   # the common case first; the methods below are not in it
            meta = params.get("_meta")
            req = Request(message.id, method, params, version, False,
                          meta if isinstance(meta, dict) else {}, self._legacy_caps, call,
                          self._legacy_threshold)
            return result(message.id, feature(self._svc, req))
        if method == "initialize":
            raise Refusal(INVALID_REQUEST, "already initialized")
        if method == "ping":
            return result(message.id, {})
        if method == "logging/setLevel":
            level = params.get("level")
            if level not in LOG_LEVELS:
                raise Refusal(INVALID_PARAMS, f"logging/setLevel: unknown level {level!r}; "
                                              f"use one of {', '.join(LOG_LEVELS)}")
            with self._lock:
                self._log_level = level
            return result(message.id, {})
        if method in ("resources/subscribe", "resources/unsubscribe"):
            uri = _resources.uri_of(self._request(message, call, params, version, False, {},
                                                  {}, self._legacy_threshold))
            if method == "resources/unsubscribe":
                self._listens.unsubscribe(uri)
            elif _resources.find(self._svc, uri) is None:
                raise Refusal(RESOURCE_NOT_FOUND, f"resource not found: {uri!r}", {"uri": uri})
            else:
                self._listens.subscribe(uri)
            return result(message.id, {})
        raise Refusal(METHOD_NOT_FOUND, f"method not found: {method!r}")

    def _legacy_threshold(self) -> str | None:
        return self._log_level   # one reference, replaced whole by logging/setLevel

    # -- modern (2026-07-28) -------------------------------------------------------------

    def _modern(self, message: Message, call: _Call, meta: dict[str, Any]) -> Any:
        assert message.id is not None and message.method is not None
        requested = meta[META_PROTOCOL_VERSION]
        if not isinstance(requested, str):
            raise Refusal(INVALID_PARAMS, f"_meta[{META_PROTOCOL_VERSION!r}] must be a string")
        if requested not in MODERN_VERSIONS:
            raise Refusal(UNSUPPORTED_PROTOCOL_VERSION,
                          f"unsupported protocol version {requested!r}; this server supports "
                          f"{', '.join(SUPPORTED_VERSIONS)}",
                          {"supported": list(SUPPORTED_VERSIONS), "requested": requested})
        capabilities = meta.get(META_CLIENT_CAPABILITIES)
        if not isinstance(capabilities, dict):
            raise Refusal(INVALID_PARAMS,
                          f"missing _meta[{META_CLIENT_CAPABILITIES!r}]: every 2026-07-28 "
                          "request must carry the client's capabilities (an object)")
        log_level = meta.get(META_LOG_LEVEL)
        if log_level is not None and log_level not in LOG_LEVELS:
            raise Refusal(INVALID_PARAMS, f"_meta[{META_LOG_LEVEL!r}]: unknown level "
                                          f"{log_level!r}; use one of {', '.join(LOG_LEVELS)}")
        method = message.method
        params = message.params if isinstance(message.params, dict) else {}
        level = log_level if isinstance(log_level, str) else None
        req = self._request(message, call, params, requested, True, meta, capabilities,
                            lambda: level)
        if method == "server/discover":
            capabilities_out = self._capabilities(requested)
            extensions: dict[str, Any] = {}
            if any(entry.task_support for entry in self._settings.registry.tools.values()):
                extensions[TASKS_EXTENSION] = {}
            if self._settings.skills is not None:
                extensions[_skills.SKILLS_EXTENSION] = {"directoryRead": True}
            if extensions:
                capabilities_out["extensions"] = extensions
            out: dict[str, Any] = {
                "supportedVersions": list(SUPPORTED_VERSIONS),
                "capabilities": capabilities_out,
            }
            if self._identity.instructions is not None:
                out["instructions"] = self._identity.instructions
            self._svc.cache(out, req)
        elif method == "subscriptions/listen":
            self._listens.open(req, self._task_ids(req))
            return DEFERRED
        elif method in _TASK_METHODS:
            if not declares_tasks(capabilities):
                raise missing_tasks(method)
            out = getattr(self._tasks, _TASK_METHODS[method])(params)
        else:
            feature = _SHARED.get(method)
            if feature is None:
                raise Refusal(METHOD_NOT_FOUND, f"method not found: {method!r} (2026-07-28)")
            out = feature(self._svc, req)
        out.setdefault("resultType", "complete")
        result_meta = out.get("_meta")
        out["_meta"] = {**(result_meta if isinstance(result_meta, dict) else {}),
                        META_SERVER_INFO: self._identity.info()}
        return result(message.id, out)

    def _task_ids(self, req: Request) -> list[str]:
        """The known tasks a ``subscriptions/listen`` asks to hear about (``taskIds``)."""
        wanted = req.params.get("notifications")
        task_ids = wanted.get("taskIds") if isinstance(wanted, dict) else None
        if task_ids is None:
            return []
        if not isinstance(task_ids, list) or not all(isinstance(t, str) for t in task_ids):
            raise Refusal(INVALID_PARAMS, "subscriptions/listen: taskIds must be a list of "
                          "task id strings")
        if not declares_tasks(req.capabilities):
            raise missing_tasks("subscriptions/listen for taskIds")
        return self._tasks.known(task_ids)

    @staticmethod
    def _request(message: Message, call: _Call, params: dict[str, Any], version: str,
                 modern: bool, meta: dict[str, Any], capabilities: dict[str, Any],
                 threshold: Callable[[], str | None]) -> Request:
        assert message.id is not None and message.method is not None
        return Request(message.id, message.method, params, version, modern, meta,
                       capabilities, call, threshold)


def _collect_into(out: list[Message]) -> Send:
    """A ``send`` that keeps the frame: a batch's replies are written as one line, later."""
    def collect(message: Message, _cancelled: threading.Event | None = None, /) -> None:
        out.append(message)
    return collect


def _parse_error_reply(exc: ParseError) -> Message:
    """-32700 always with ``"id": null``; -32600 with the id when one could be read."""
    request_id: RequestId | None = exc.id if exc.code == INVALID_REQUEST else None
    return error(request_id, exc.code, str(exc))


def _serialisable(message: Message) -> Message:
    """A batch element that cannot be serialised becomes -32603, not a lost batch."""
    try:
        serialize(message)
    except (TypeError, ValueError) as exc:
        _stderr(f"a batch response could not be serialised: {exc}")
        return error(message.id, INTERNAL_ERROR, "internal error: the result is not valid JSON")
    return message
