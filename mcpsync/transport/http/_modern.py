"""The modern exchange (2026-07-28): stateless POSTs with the ``Mcp-*`` headers.

What it owns: the tool definitions whose ``x-mcp-header`` annotations become ``Mcp-Param-*``
headers (learnt from the session's ``tools/list`` answers, or fetched once by an internal
``tools/list``), the one retry of a ``tools/call`` the server rejected with -32020 (header
mismatch), whether a broken tool call is safe to send again, and the
``subscriptions/listen`` stream on ``mcpsync-http-listen-<name>``, reopened when it drops.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import TYPE_CHECKING, Any, Final

from mcpsync._threads import new_thread
from mcpsync.errors import ConnectionLost, MCPError
from mcpsync.jsonrpc import Message, RequestId
from mcpsync.protocol import META_PROTOCOL_VERSION
from mcpsync.transport.http._conn import map_network_errors
from mcpsync.transport.http._exchange import (
    RESUME_CAP,
    RESUME_FACTOR,
    Exchange,
    Link,
    ListenDropped,
)
from mcpsync.transport.http._headers import invalid_header_reason, modern_headers

if TYPE_CHECKING:
    from mcpsync.transport.http._exchange import Exchanger

__all__ = ["LISTEN_FIRST", "ModernExchange"]

logger = logging.getLogger("mcpsync.transport.http")

LISTEN_FIRST: Final = 1.0                # listen reconnects: 1 s, x1.5, capped at 30 s


class ModernExchange:
    """The modern era's per-request headers, tool cache, -32020 retry and listen streams."""

    def __init__(self, link: Link, exchanger: Exchanger) -> None:
        self._link = link
        self._ex = exchanger
        self.version: str | None = None
        self._tools: dict[str, dict[str, Any]] = {}
        self._tools_known = False
        self._tools_lock = threading.RLock()
        self._listen_threads: list[threading.Thread] = []
        self._threads_lock = threading.Lock()

    # ------------------------------------------------------------------ headers

    def request_headers(self, ex: Exchange) -> dict[str, str]:
        params = ex.params
        meta = params.get("_meta")
        version = str(meta[META_PROTOCOL_VERSION]) if isinstance(meta, dict) else ""
        tool: Any = None
        if ex.method == "tools/call":
            tool = self._tool_definition(params.get("name"), meta)
        headers = {"MCP-Protocol-Version": version}
        headers.update(modern_headers(ex.method, params, tool))
        return headers

    def _tool_definition(self, name: Any, meta: Any) -> Any:
        """The cached tool definition, fetching ``tools/list`` once if none is cached."""
        if not isinstance(name, str):
            return None
        if not self._tools_known and isinstance(meta, dict):
            with self._tools_lock:
                if not self._tools_known:
                    self._fetch_tools(meta)
        return self._tools.get(name)

    def _fetch_tools(self, meta: dict[str, Any]) -> None:
        """An internal ``tools/list`` (all pages) to learn the tools' header annotations.

        Tried once: a server that cannot list its tools is not asked again before every
        call (a -32020 answer asks again)."""
        try:
            tools = self._list_tools_internal(meta)
            if tools is not None:
                self._tools = tools
        finally:
            self._tools_known = True

    def _list_tools_internal(self, meta: dict[str, Any]) -> dict[str, dict[str, Any]] | None:
        cursor: Any = None
        tools: dict[str, dict[str, Any]] = {}
        for _page in range(100):
            own_meta = dict(meta)
            own_meta.pop("progressToken", None)
            params: dict[str, Any] = {"_meta": own_meta}
            if cursor is not None:
                params["cursor"] = cursor
            try:
                answer = self._ex.call_internal("tools/list", params)
            except MCPError as exc:
                logger.debug("server %r: fetching tools/list for the headers failed: %s",
                             self._link.name, exc)
                return None
            result = answer.result if answer.error is None else None
            if not isinstance(result, dict):
                return None
            for tool in result.get("tools") or ():
                if isinstance(tool, dict) and isinstance(tool.get("name"), str) \
                        and invalid_header_reason(tool) is None:
                    tools[tool["name"]] = tool
            cursor = result.get("nextCursor")
            if cursor is None:
                break
        return tools

    def filter_tools(self, ex: Exchange, message: Message) -> Message:
        """A modern ``tools/list`` page: drop tools with invalid ``x-mcp-header``
        annotations (WARNING naming each), and cache the rest for the headers. Returns the
        message to deliver (a new one when a tool was dropped)."""
        result = message.result
        if not isinstance(result, dict) or not isinstance(result.get("tools"), list):
            return message
        kept = []
        for tool in result["tools"]:
            if not isinstance(tool, dict):
                kept.append(tool)
                continue
            reason = invalid_header_reason(tool)
            if reason is not None:
                logger.warning("server %r: dropping tool %r from tools/list: %s",
                               self._link.name, tool.get("name"), reason)
                continue
            kept.append(tool)
        if len(kept) != len(result["tools"]):
            message = dataclasses.replace(message, result={**result, "tools": kept})
        with self._tools_lock:
            if ex.params.get("cursor") is None:
                self._tools = {}
            for tool in kept:
                if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                    self._tools[tool["name"]] = tool
            self._tools_known = True
        return message

    def header_retry(self, ex: Exchange) -> bool:
        """-32020 on a modern ``tools/call``: re-fetch ``tools/list`` and send it again once."""
        logger.info("server %r rejected the headers of %s; re-fetching tools/list and "
                    "retrying once", self._link.name, ex.describe())
        meta = ex.params.get("_meta")
        with self._tools_lock:
            self._tools_known = False
            if isinstance(meta, dict):
                self._fetch_tools(meta)
        ex.reissued = True  # at most once
        self._ex.exchange(ex)
        return True

    def safe_to_repeat(self, ex: Exchange) -> bool:
        name = ex.params.get("name")
        tool = self._tools.get(name) if isinstance(name, str) else None
        annotations = tool.get("annotations") if isinstance(tool, dict) else None
        if not isinstance(annotations, dict):
            return False
        return annotations.get("readOnlyHint") is True \
            or annotations.get("idempotentHint") is True

    # ------------------------------------------------------------------ subscriptions/listen

    def start_listen(self, ex: Exchange) -> None:
        """Open ``ex`` on its own thread (the caller holds the transport's close lock)."""
        thread = new_thread(f"mcpsync-http-listen-{self._link.safe}", self._listen_loop, ex)
        with self._threads_lock:
            self._listen_threads = [t for t in self._listen_threads if t.is_alive()]
            self._listen_threads.append(thread)
        thread.start()

    def _listen_loop(self, ex: Exchange) -> None:
        """Thread ``mcpsync-http-listen-<name>``: one modern ``subscriptions/listen``.

        A result ends it; closing the stream (the session cancels it) ends it; an abrupt
        drop reopens it (a new id, mapped back) after 1 s, x1.5, capped at 30 s, for as long
        as the session keeps it.
        """
        link = self._link
        closing = link.closing
        delay = LISTEN_FIRST
        try:
            with map_network_errors(ex):
                while not ex.cancelled and not closing.is_set():
                    try:
                        self._ex.exchange(ex)
                        return
                    except (ListenDropped, ConnectionLost) as exc:
                        if ex.cancelled or closing.is_set():
                            return
                        logger.info("server %r: the subscriptions/listen stream dropped "
                                    "(%s); reopening in %.1f s", link.name, exc or "no result",
                                    delay)
                    if closing.wait(delay) or ex.cancelled:
                        return
                    delay = min(delay * RESUME_FACTOR, RESUME_CAP)
                    ex.rewire(RequestId.of(f"{ex.id.raw}-listen-{next(link.ids)}"))
                    ex.response = None
                    ex.conn = None
        except MCPError as exc:
            self._ex.fail(ex, exc)
        finally:
            if link.inflight.get(ex.key) is ex:
                del link.inflight[ex.key]

    def join(self, timeout: float) -> None:
        with self._threads_lock:
            threads = list(self._listen_threads)
        for listener in threads:
            if listener is not threading.current_thread():
                listener.join(timeout)
