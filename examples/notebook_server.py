"""A small MCP server for trying mcpsync in a notebook (``examples/notebook.ipynb``).

Run it as ``python examples/notebook_server.py`` (stdio), or point ``mcpsync.connect`` at that
command. Its tools show what a notebook displays:

- ``chart``: an image block (a PNG drawn here, no imaging library needed) and a caption;
- ``crunch``: reports progress while it works, for ``call_tool(..., progress=True)``;
- ``explode``: a tool error (``isError``), for ``raise_on_error=True``;
- ``slow``: waits until cancelled, for interrupting a cell;
- ``cancellations``: how many ``slow`` calls the client cancelled, as the server saw it
  (``notifications/cancelled``), so the notebook can show that an interrupt reached it.
"""

from __future__ import annotations

import struct
import threading
import zlib

from mcpsync import ImageContent, ResourceLink
from mcpsync.server import Context, Server

server = Server("notebook-demo", "1.0", instructions="Tools that show off notebook display.")


def _png(width: int, height: int) -> bytes:
    """A width x height RGB gradient as PNG bytes (the format written by hand)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(
        b"\x00" + b"".join(bytes((x * 255 // width, y * 255 // height, 160))
                           for x in range(width))
        for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows))
            + chunk(b"IEND", b""))


_cancelled = {"slow": 0}
_lock = threading.Lock()


@server.tool()
def chart(size: int = 64) -> list[object]:
    """Draw a colour gradient and return it as a PNG image with a caption."""
    return [ImageContent.from_bytes(_png(size, size), "image/png"),
            f"A {size}x{size} gradient",
            ResourceLink("https://modelcontextprotocol.io/", "MCP", title="About MCP")]


@server.tool()
def crunch(ctx: Context, steps: int = 5, delay: float = 0.05) -> str:
    """Work in steps, reporting progress after each one."""
    for i in range(1, steps + 1):
        if ctx.cancelled.wait(delay):
            return "cancelled"
        ctx.progress(i, steps, f"step {i}/{steps}")
    return f"crunched {steps} steps"


@server.tool()
def explode(reason: str = "the reactor is offline") -> str:
    """Always fail, as a tool error the client sees as isError."""
    raise RuntimeError(f"cannot comply: {reason}")


@server.tool()
def slow(ctx: Context, seconds: float = 30.0) -> str:
    """Wait for ``seconds``, unless the call is cancelled first."""
    if ctx.cancelled.wait(seconds):
        with _lock:
            _cancelled["slow"] += 1
        return "cancelled"
    return f"slept {seconds:g} s"


@server.tool()
def cancellations() -> str:
    """How many slow calls were cancelled by the client so far."""
    with _lock:
        return f"slow calls cancelled: {_cancelled['slow']}"


if __name__ == "__main__":
    server.run()
