"""Our server with both extensions, for our own client: a task tool and a served skill.

``python extensions_server.py SKILLS_DIR`` serves stdio; ``... SKILLS_DIR --http HOST:PORT``
serves Streamable HTTP (through ``Server.run``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from mcpsync.server import Context, Server

server = Server("extensions", "1.0")


@server.tool(task="optional")
def build_report(ctx: Context, pages: int = 2) -> str:
    """A task: asks which format, reports progress, then answers."""
    answer = ctx.elicit("Which format?", {
        "type": "object", "properties": {"format": {"type": "string"}},
        "required": ["format"]}, key="format")
    for page in range(pages):
        ctx.progress(page + 1, pages)
    return f"{pages} pages as {answer.content['format'] if answer.content else '?'}"


@server.tool(task="required")
def slow_sum(ctx: Context, a: int, b: int, seconds: float = 0.2) -> int:
    """A task only: waits, then adds."""
    ctx.cancelled.wait(seconds)
    return a + b


if __name__ == "__main__":
    server.serve_skills(Path(sys.argv[1]))
    server.run(sys.argv[2:])
