"""A server whose tools report the process that ran them, to tell workers apart."""

from __future__ import annotations

import os
import threading
from typing import Any

from mcpsync.server import Context, Server

#: Set when a ``slow`` call saw its cancellation (in this process).
CANCELLED = threading.Event()


def build(**options: Any) -> Server:
    server = Server("pid-server", "1.0", **options)

    @server.tool()
    def add(a: int, b: int, ctx: Context) -> str:
        """Add two numbers, with one progress report (which makes the reply a stream)."""
        ctx.progress(1, 2)
        return f"{a + b} {os.getpid()}"

    @server.tool()
    def whoami() -> str:
        """The id of the process that answered."""
        return str(os.getpid())

    @server.tool()
    def ask_name(ctx: Context) -> str:
        """Ask a name; the question and the answer each name the process that sent them."""
        answer = ctx.elicit(f"Your name? (asked by {os.getpid()})", {
            "type": "object", "properties": {"name": {"type": "string"}},
            "required": ["name"]})
        name = answer.content["name"] if answer.accepted and answer.content else "nobody"
        return f"hello {name} (answered by {os.getpid()})"

    @server.tool()
    def touch(uri: str, unless_pid: int = 0) -> str:
        """Announce that ``uri`` changed, unless this is process ``unless_pid``: reports the
        process and whether it announced."""
        if os.getpid() == unless_pid:
            return f"{os.getpid()} skipped"
        server.notify_resource_updated(uri)
        return f"{os.getpid()} touched"

    @server.tool()
    def slow(ctx: Context) -> str:
        """Report progress every 50 ms for up to 10 s, until cancelled."""
        for step in range(200):
            ctx.progress(step, 200)
            if ctx.cancelled.wait(0.05):
                CANCELLED.set()
                return "cancelled"
        return "done"

    @server.resource("memo://board", mime_type="text/plain")
    def board() -> str:
        """A resource that clients subscribe to."""
        return "the board"

    return server
