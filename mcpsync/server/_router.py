"""What the server answers to each message: eras, methods, the tools/call error table, batches.

This module decides; it does no reading and starts no thread (``_server_loop`` does that). Its
rules, in the order they are applied to a request:

1. ``params._meta`` carrying ``io.modelcontextprotocol/protocolVersion`` → modern rules
   (2026-07-28), at any time, whatever happened before on the connection.
2. Otherwise, after a successful ``initialize`` → legacy rules at the negotiated revision.
3. Otherwise (before ``initialize``): ``initialize`` itself, ``ping`` → ``{}``, and -32602
   ("missing _meta") for anything else.

Failures of our own code answer -32603 with a short message; the traceback goes to stderr.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mcpsync.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    UNSUPPORTED_PROTOCOL_VERSION,
    Batch,
    Message,
    ParseError,
    RequestId,
    error,
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
from mcpsync.server._context import Context, _Call, _Send, _stderr
from mcpsync.server._results import error_result, to_call_tool_result
from mcpsync.server._validate import validate_arguments

__all__ = ["Dispatcher", "ToolEntry"]

CACHE_TTL_MS = 60_000
CACHE_SCOPE = "public"
# Revisions where a tools/call argument that fails the schema is a protocol error (-32602);
# from 2025-11-25 on it is a tool execution error the model should see (isError).
_ARGS_ARE_PROTOCOL_ERRORS = frozenset({"2024-11-05", "2025-03-26", "2025-06-18"})
_BATCH_VERSION = "2025-03-26"

Handler = Callable[[dict[str, Any], Context], Any]
Send = _Send


@dataclass(frozen=True)
class ToolEntry:
    """A registered tool: its wire description and the callable behind it."""

    wire: dict[str, Any]
    handler: Handler

    @property
    def structured(self) -> bool:
        return "outputSchema" in self.wire


@dataclass(frozen=True)
class ServerIdentity:
    """Name, version, title and instructions: what every era tells the client about us."""

    name: str
    version: str
    title: str | None
    instructions: str | None

    def info(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "version": self.version}
        if self.title is not None:
            out["title"] = self.title
        return out


class _Reply(Exception):
    """Raised inside request handling to answer a JSON-RPC error; keeps the code paths flat."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.text = message
        self.data = data


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
    """Answers messages for one ``serve()`` run. Safe to call from several worker threads."""

    def __init__(self, identity: ServerIdentity, tools: Mapping[str, ToolEntry],
                 send: Send, send_batch: Callable[[list[Message]], None]) -> None:
        self._identity = identity
        self._tools = dict(tools)
        self._send = send
        self._send_batch = send_batch
        self._lock = threading.Lock()
        self._legacy_version: str | None = None  # set by a successful initialize
        self._log_level = "info"
        self._calls: dict[tuple[str, int | str], _Call] = {}

    # -- the in-flight table (used by the reader thread and the workers) --------------------

    def track(self, message: Message) -> _Call | None:
        """Register a request as in flight so a cancel notice can reach it, even while queued.

        ``initialize`` is not tracked: the spec forbids cancelling it, so a cancel is ignored.
        """
        if not message.is_request or message.id is None or message.method is None:
            return None
        call = _Call(message.id, message.method)
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
        return True

    def deliver_response(self, message: Message) -> None:
        """The client answered a request *we* sent (a handler asking for input). Called by
        the intake as soon as the frame is read, never queued: the handler waiting for it
        holds a worker. An answer nobody waits for is dropped."""

    def cancel_all(self) -> None:
        """Used when ``serve()`` returns: every handler sees its event set."""
        with self._lock:
            calls = list(self._calls.values())
        for call in calls:
            call.cancel()

    def _forget(self, call: _Call) -> None:
        with self._lock:
            if self._calls.get(call.id.key) is call:
                del self._calls[call.id.key]

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
                reply = self._respond_guarded(element, call)
            collected: list[Message] = []
            call.finish(reply, _collect_into(collected))
            self._forget(call)
            replies.extend(_serialisable(m) for m in collected)
        if replies:
            self._send_batch(replies)

    def _respond_guarded(self, message: Message, call: _Call) -> Message | None:
        """The response to a request, or ``None`` for none; our own bugs become -32603."""
        if call.cancelled.is_set():
            return None  # cancelled while queued: dropped without a response
        try:
            return self._respond(message, call)
        except _Reply as reply:
            return error(message.id, reply.code, reply.text,
                         *(() if reply.data is None else (reply.data,)))
        except Exception as exc:
            _stderr(f"internal error while answering {message.method!r}:\n"
                    + "".join(traceback.format_exception(exc)).rstrip())
            return error(message.id, INTERNAL_ERROR,
                         f"internal error while answering {message.method!r}: "
                         f"{type(exc).__name__}")

    # -- era selection -------------------------------------------------------------------

    def _respond(self, message: Message, call: _Call) -> Message:
        assert message.id is not None and message.method is not None
        params = message.params
        meta = params.get("_meta") if isinstance(params, dict) else None
        if isinstance(meta, dict) and META_PROTOCOL_VERSION in meta:
            return self._modern(message, call, meta)
        with self._lock:
            version = self._legacy_version
        if version is not None:
            return self._legacy(message, call, version)
        if message.method == "initialize":
            return self._initialize(message)
        if message.method == "ping":
            return result(message.id, {})
        raise _Reply(INVALID_PARAMS,
                     f"missing _meta: a {message.method!r} request before initialize must carry "
                     f"params._meta[{META_PROTOCOL_VERSION!r}] (modern, 2026-07-28), or the "
                     "client must send initialize first (legacy)")

    # -- legacy (2024-11-05 ... 2025-11-25) ----------------------------------------------

    def _capabilities(self) -> dict[str, Any]:
        return {"tools": {"listChanged": False}, "logging": {}}

    def _initialize(self, message: Message) -> Message:
        assert message.id is not None
        params = message.params
        if not isinstance(params, dict):
            raise _Reply(INVALID_PARAMS, "initialize needs params with protocolVersion, "
                                         "capabilities and clientInfo")
        requested = params.get("protocolVersion")
        if not isinstance(requested, str):
            raise _Reply(INVALID_PARAMS, "initialize: protocolVersion must be a string")
        if not isinstance(params.get("capabilities"), dict):
            raise _Reply(INVALID_PARAMS, "initialize: capabilities must be an object")
        client_info = params.get("clientInfo")
        if not isinstance(client_info, dict) or not isinstance(client_info.get("name"), str):
            raise _Reply(INVALID_PARAMS, "initialize: clientInfo must be an object with a name")
        version = requested if requested in LEGACY_VERSIONS else LATEST_LEGACY
        with self._lock:
            if self._legacy_version is not None:
                raise _Reply(INVALID_REQUEST, "already initialized")
            self._legacy_version = version
        out: dict[str, Any] = {
            "protocolVersion": version,
            "capabilities": self._capabilities(),
            "serverInfo": self._identity.info(),
        }
        if self._identity.instructions is not None:
            out["instructions"] = self._identity.instructions
        return result(message.id, out)

    def _legacy(self, message: Message, call: _Call, version: str) -> Message:
        assert message.id is not None
        method = message.method
        params = message.params
        if method == "initialize":
            raise _Reply(INVALID_REQUEST, "already initialized")
        if method == "ping":
            return result(message.id, {})
        if method == "logging/setLevel":
            level = params.get("level") if isinstance(params, dict) else None
            if level not in LOG_LEVELS:
                raise _Reply(INVALID_PARAMS, f"logging/setLevel: unknown level {level!r}; "
                                             f"use one of {', '.join(LOG_LEVELS)}")
            with self._lock:
                self._log_level = level
            return result(message.id, {})
        if method == "tools/list":
            return result(message.id, {"tools": self._tool_list()})
        if method == "tools/call":
            meta = params.get("_meta") if isinstance(params, dict) else None
            out = self._call_tool(params, call, version, meta if isinstance(meta, dict) else {},
                                  self._legacy_threshold)
            return result(message.id, out)
        raise _Reply(METHOD_NOT_FOUND, f"method not found: {method!r}")

    def _legacy_threshold(self) -> str | None:
        with self._lock:
            return self._log_level

    # -- modern (2026-07-28) -------------------------------------------------------------

    def _modern(self, message: Message, call: _Call, meta: dict[str, Any]) -> Message:
        assert message.id is not None
        requested = meta[META_PROTOCOL_VERSION]
        if not isinstance(requested, str):
            raise _Reply(INVALID_PARAMS, f"_meta[{META_PROTOCOL_VERSION!r}] must be a string")
        if requested not in MODERN_VERSIONS:
            raise _Reply(UNSUPPORTED_PROTOCOL_VERSION,
                         f"unsupported protocol version {requested!r}; this server supports "
                         f"{', '.join(SUPPORTED_VERSIONS)}",
                         {"supported": list(SUPPORTED_VERSIONS), "requested": requested})
        if not isinstance(meta.get(META_CLIENT_CAPABILITIES), dict):
            raise _Reply(INVALID_PARAMS,
                         f"missing _meta[{META_CLIENT_CAPABILITIES!r}]: every 2026-07-28 "
                         "request must carry the client's capabilities (an object)")
        log_level = meta.get(META_LOG_LEVEL)
        if log_level is not None and log_level not in LOG_LEVELS:
            raise _Reply(INVALID_PARAMS, f"_meta[{META_LOG_LEVEL!r}]: unknown level "
                                         f"{log_level!r}; use one of {', '.join(LOG_LEVELS)}")
        method = message.method
        params = message.params
        if method == "server/discover":
            out: dict[str, Any] = {
                "supportedVersions": list(SUPPORTED_VERSIONS),
                "capabilities": self._capabilities(),
            }
            if self._identity.instructions is not None:
                out["instructions"] = self._identity.instructions
            out.update(ttlMs=CACHE_TTL_MS, cacheScope=CACHE_SCOPE)
        elif method == "tools/list":
            out = {"tools": self._tool_list(), "ttlMs": CACHE_TTL_MS, "cacheScope": CACHE_SCOPE}
        elif method == "tools/call":
            out = self._call_tool(params, call, requested, meta,
                                  lambda: log_level if isinstance(log_level, str) else None)
        else:
            raise _Reply(METHOD_NOT_FOUND, f"method not found: {method!r} (2026-07-28)")
        out["resultType"] = "complete"
        result_meta = out.get("_meta")
        out["_meta"] = {**(result_meta if isinstance(result_meta, dict) else {}),
                        META_SERVER_INFO: self._identity.info()}
        return result(message.id, out)

    # -- tools ---------------------------------------------------------------------------

    def _tool_list(self) -> list[dict[str, Any]]:
        return [entry.wire for entry in self._tools.values()]

    def _call_tool(self, params: Any, call: _Call, version: str, meta: Mapping[str, Any],
                   threshold: Callable[[], str | None]) -> dict[str, Any]:
        """Run a tool and build its result, following the per-revision error table."""
        if not isinstance(params, dict) or not isinstance(params.get("name"), str):
            raise _Reply(INVALID_PARAMS, "tools/call needs params with a string 'name'")
        name = params["name"]
        arguments = params.get("arguments", {})
        if not isinstance(arguments, dict):
            raise _Reply(INVALID_PARAMS, "tools/call: 'arguments' must be an object")
        entry = self._tools.get(name)
        if entry is None:
            raise _Reply(INVALID_PARAMS, f"unknown tool {name!r}")
        problem = validate_arguments(entry.wire["inputSchema"], arguments)
        if problem is not None:
            text = f"invalid arguments for tool {name!r}: {problem}"
            if version in _ARGS_ARE_PROTOCOL_ERRORS:
                raise _Reply(INVALID_PARAMS, text)
            return error_result(text)
        ctx = Context(call, protocol_version=version, meta=meta, send=self._send,
                      log_threshold=threshold)
        try:
            value = entry.handler(arguments, ctx)
        except BaseException as exc:  # SystemExit from a tool too: it must not kill a worker
            return error_result(f"{type(exc).__name__}: {exc}")
        return to_call_tool_result(value, structured=entry.structured, version=version)


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
