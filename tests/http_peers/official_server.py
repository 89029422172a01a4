"""A Streamable HTTP MCP server built with the official ``mcp`` SDK (a test peer).

Why: the HTTP transport must interoperate with the reference implementation, not only with
our own fault server. mcp 2.3 serves both eras on one endpoint: a POST whose
``MCP-Protocol-Version`` / ``_meta`` says 2026-07-28 is answered statelessly by its modern
entry, anything else by the legacy (2025-03-26 … 2025-11-25) transport, stateful or stateless.

Run::

    python tests/http_peers/official_server.py --port 0 --json|--sse --stateless|--stateful
        [--resumable] [--retry-ms N]

The first line on stdout is the bound URL (``http://127.0.0.1:<port>/mcp``), printed once the
socket listens, so a fixture can read it; uvicorn then serves in this process until killed.
``--resumable`` gives the legacy stateful transport an in-memory event store (SSE ids, priming
events, ``Last-Event-ID`` replay); ``--retry-ms`` sets the ``retry:`` value it sends.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
from typing import Annotated

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.resolve import Elicit, Resolve, Sample
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore
from mcp_types import JSONRPCMessage, SamplingMessage, TextContent
from pydantic import BaseModel

server = MCPServer("official-http-peer", version="9.9.9", instructions="official SDK HTTP peer")


class Sum(BaseModel):
    """Structured output of ``add``."""

    sum: float


@server.tool()
def echo(text: str) -> str:
    """Echo the text."""
    return text


@server.tool()
def add(a: float, b: float) -> Sum:
    """Add two numbers (structured output)."""
    return Sum(sum=a + b)


@server.tool()
async def slow(seconds: float, steps: int, ctx: Context) -> str:
    """Sleep ``seconds`` in ``steps`` steps, reporting progress after each one."""
    steps = max(1, steps)
    for i in range(1, steps + 1):
        await asyncio.sleep(seconds / steps)
        await ctx.report_progress(i, steps, f"step {i}/{steps}")
    return f"slept {seconds}"


@server.tool()
async def chatty(text: str, ctx: Context) -> str:
    """Send one log message at each of info and warning, then return the text."""
    await ctx.info(f"info: {text}", logger_name="chatty")
    await ctx.warning(f"warning: {text}", logger_name="chatty")
    return text


@server.tool()
async def drop_stream(ctx: Context) -> str:
    """Close this request's SSE stream (legacy, with ``--resumable``) then answer.

    The client must resume with GET and ``Last-Event-ID`` to get the answer.
    """
    await ctx.close_sse_stream()
    await asyncio.sleep(0.3)
    return "resumed"


@server.tool()
async def add_tool(name: str, ctx: Context) -> str:
    """Register a tool ``name`` (it echoes its text) and announce the new tool list.

    A modern client hears it on its ``subscriptions/listen`` stream (``--sse`` only: a JSON
    reply cannot carry a stream); the SDK drops the legacy notification for modern sessions.
    """

    def added(text: str) -> str:
        return text

    server.add_tool(added, name=name, description=f"added at run time as {name}")
    await ctx.notify_tools_changed()
    await ctx.session.send_tool_list_changed()
    return f"added {name}"


class Person(BaseModel):
    """What ``greet`` elicits."""

    name: str
    age: int = 42


def _ask_person() -> Elicit[Person]:
    return Elicit("Who are you?", Person)


@server.tool()
def greet(person: Annotated[Person, Resolve(_ask_person)]) -> str:
    """Ask the user for a name (elicitation), then greet them."""
    return f"hello {person.name} ({person.age})"


def _sample() -> Sample:
    return Sample([SamplingMessage(role="user", content=TextContent(type="text", text="2+2?"))],
                  max_tokens=10)


@server.tool()
def think(answer: Annotated[object, Resolve(_sample)]) -> str:
    """Ask the client's LLM (sampling) and return its text."""
    content = getattr(answer, "content", None)
    return f"model said: {getattr(content, 'text', content)}"


@server.resource("memo://hello", mime_type="text/plain")
def hello() -> str:
    """A fixed text resource."""
    return "hello resource"


@server.prompt()
def review(code: str) -> str:
    """Review some code."""
    return f"Please review: {code}"


class _MemoryEventStore(EventStore):
    """Keeps every event in memory so a dropped legacy stream can be replayed."""

    def __init__(self) -> None:
        self._events: list[tuple[str, str, JSONRPCMessage | None]] = []

    async def store_event(self, stream_id: str, message: JSONRPCMessage | None) -> str:
        event_id = f"{stream_id}:{len(self._events) + 1}"
        self._events.append((event_id, stream_id, message))
        return event_id

    async def replay_events_after(self, last_event_id: str,
                                  send_callback: EventCallback) -> str | None:
        ids = [e[0] for e in self._events]
        if last_event_id not in ids:
            return None
        index = ids.index(last_event_id)
        stream_id = self._events[index][1]
        for event_id, sid, message in self._events[index + 1:]:
            if sid == stream_id and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream_id


def _bind(port: int) -> socket.socket:
    """Bind ourselves so ``--port 0`` works and a restart can reuse the same port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    return sock


def main(argv: list[str] | None = None) -> None:
    """Parse the options, bind, print the URL, and serve until killed."""
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    reply = parser.add_mutually_exclusive_group()
    reply.add_argument("--json", dest="json_response", action="store_true")
    reply.add_argument("--sse", dest="json_response", action="store_false")
    state = parser.add_mutually_exclusive_group()
    state.add_argument("--stateless", dest="stateless", action="store_true")
    state.add_argument("--stateful", dest="stateless", action="store_false")
    parser.add_argument("--resumable", action="store_true")
    parser.add_argument("--retry-ms", type=int, default=None)
    args = parser.parse_args(argv)

    app = server.streamable_http_app(
        json_response=args.json_response,
        stateless_http=args.stateless,
        event_store=_MemoryEventStore() if args.resumable else None,
        retry_interval=args.retry_ms,
    )
    sock = _bind(args.port)
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=1)
    uv = uvicorn.Server(config)
    print(f"http://127.0.0.1:{sock.getsockname()[1]}/mcp", flush=True)
    asyncio.run(uv.serve(sockets=[sock]))
    sys.exit(0)


if __name__ == "__main__":
    main()
