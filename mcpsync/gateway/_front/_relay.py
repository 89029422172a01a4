"""Waiting on the HTTP request's own thread for what the upstreams send about it.

McpApp answers each request on the WSGI thread that read it: the frames of its reply stream
must be written from there. The gateway's frames come from upstream reader threads, so each
request in flight has a queue; the reader thread puts into it, and the request's thread
takes out and writes (progress, logs, server-to-client requests, then the answer). The
request's thread also notices a cancellation (the host went away, or the app closed) and
tells the upstream.
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from typing import Final

from mcpsync.jsonrpc import Message
from mcpsync.server._context import _Call
from mcpsync.server._router import Send

__all__ = ["Waiting", "relay"]

#: How often a quiet request's thread looks at its cancellation.
_POLL: Final = 0.25


class Waiting:
    """One host request in flight: its call record and the frames for it."""

    def __init__(self, call: _Call) -> None:
        self.call = call
        self.frames: queue.SimpleQueue[Message | None] = queue.SimpleQueue()
        self.cancel_sent = False

    def put(self, message: Message | None) -> None:
        """A frame for this request (``None``: the gateway behind it closed)."""
        self.frames.put(message)


def relay(waiting: Waiting, send: Send, on_cancel: Callable[[Waiting], None],
          on_closed: Callable[[], Message]) -> None:
    """Write what comes for ``waiting`` until its answer; returns at the answer, at a
    cancellation (after ``on_cancel``) or when the gateway closed (answering ``on_closed()``)."""
    call = waiting.call
    while True:
        if call.cancelled.is_set():
            on_cancel(waiting)
            return
        try:
            message = waiting.frames.get(timeout=_POLL)
        except queue.Empty:
            continue
        if message is None:
            call.finish(on_closed(), send)
            return
        if message.method is None:
            call.finish(message, send)
            return
        call.emit(message, send)
