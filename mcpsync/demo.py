"""The demo MCP server: ``python -m mcpsync.demo [--concurrency N] [--max-frame-bytes N]``.

It is the server the README, the examples and the tests talk to, so every client feature has
something to call: ``echo`` (plain text), ``add`` (structured content with an output schema),
``slow`` (progress, logging and cancellation) and ``fail`` (a tool error, ``isError``). It
serves both protocol eras over stdio.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from mcpsync._version import __version__
from mcpsync.jsonrpc import MAX_FRAME_BYTES, StreamError
from mcpsync.server import Context, Server

__all__ = ["ADD_OUTPUT_SCHEMA", "build_server", "main"]

ADD_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"sum": {"type": "number"}},
    "required": ["sum"],
}

INSTRUCTIONS = (
    "mcpsync demo server. echo returns its text; add returns structured {sum}; slow reports "
    "progress and logs once per step and stops at once when cancelled; fail always returns "
    "a tool error."
)


def build_server(*, concurrency: int = 1, max_frame_bytes: int = MAX_FRAME_BYTES) -> Server:
    """The demo server with its four tools registered, ready to ``serve()``."""
    server = Server("mcpsync-demo", __version__, instructions=INSTRUCTIONS,
                    concurrency=concurrency, max_frame_bytes=max_frame_bytes)

    @server.tool()
    def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    @server.tool(output_schema=ADD_OUTPUT_SCHEMA)
    def add(a: float, b: float) -> dict[str, float]:
        """Add two numbers; the sum comes back as structured content {"sum": a + b}."""
        return {"sum": a + b}

    @server.tool()
    def slow(ctx: Context, seconds: float = 2.0, steps: int = 10) -> str | None:
        """Take `seconds` in `steps` equal steps, reporting progress and logging at each step.

        A cancellation ends it at once, and a cancelled call gets no response.
        """
        if steps < 1 or seconds < 0:
            raise ValueError("steps must be at least 1 and seconds must not be negative")
        for i in range(1, steps + 1):
            if ctx.cancelled.wait(seconds / steps):
                return None  # cancelled: the server writes nothing for this request
            ctx.progress(i, steps, f"step {i}/{steps}")
            ctx.log("info", f"slow: step {i}/{steps}", logger="mcpsync-demo")
        return f"done: {steps} steps in {seconds:g} s"

    @server.tool()
    def fail(message: str = "this tool always fails") -> None:
        """Always raise, so a client can see a tool error come back as isError."""
        raise RuntimeError(message)

    return server


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the command line and serve on stdin/stdout until end of input."""
    parser = argparse.ArgumentParser(prog="python -m mcpsync.demo", description=__doc__)
    parser.add_argument("--concurrency", type=int, default=1,
                        help="how many tool calls may run at once (default 1: in order)")
    parser.add_argument("--max-frame-bytes", type=int, default=MAX_FRAME_BYTES,
                        help=f"longest accepted input line in bytes (default {MAX_FRAME_BYTES})")
    args = parser.parse_args(argv)
    try:
        server = build_server(concurrency=args.concurrency, max_frame_bytes=args.max_frame_bytes)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        server.serve()
    except StreamError:
        sys.exit(1)  # serve() already wrote the one-line reason to stderr
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
