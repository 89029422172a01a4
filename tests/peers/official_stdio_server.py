"""A stdio MCP server built with the official ``mcp`` SDK (a test peer, never a runtime dep).

It serves both eras (mcp 2.3 picks per request: ``_meta`` with the 2026-07-28 version means
modern, ``initialize`` means legacy) and exercises what our demo server cannot: resources,
templates, prompts, completions, subscriptions and the client features (elicitation,
sampling, roots), which arrive as server→client requests in legacy and as
``input_required`` rounds in modern. Run: ``python tests/peers/official_stdio_server.py``.
"""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.resolve import Elicit, ListRoots, Resolve, Sample
from mcp_types import ListRootsResult, SamplingMessage, TextContent
from pydantic import BaseModel

server = MCPServer("official-peer", version="9.9.9", instructions="official SDK test peer")


class Sum(BaseModel):
    sum: float


@server.tool()
def add(a: float, b: float) -> Sum:
    """Add two numbers (structured output)."""
    return Sum(sum=a + b)


@server.tool()
def echo(text: str) -> str:
    """Echo the text."""
    return text


@server.tool()
def boom() -> str:
    """Always fails."""
    raise ValueError("boom")


class Person(BaseModel):
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


def _roots() -> ListRoots:
    return ListRoots()


@server.tool()
def roots(listing: Annotated[ListRootsResult, Resolve(_roots)]) -> str:
    """Return the client's roots, comma separated."""
    return ",".join(str(r.uri) for r in listing.roots)


@server.tool()
async def touch(uri: str, ctx: Context) -> str:
    """Announce that a resource changed."""
    await ctx.notify_resource_updated(uri)
    return "ok"


@server.tool()
async def add_tool(name: str, ctx: Context) -> str:
    """Register a tool ``name`` (it echoes its text) and announce the new tool list.

    Modern sessions hear it on their ``subscriptions/listen`` stream (the SDK's bus),
    legacy ones as ``notifications/tools/list_changed`` on the connection; the SDK drops
    whichever does not fit the session's era.
    """

    def added(text: str) -> str:
        return text

    server.add_tool(added, name=name, description=f"added at run time as {name}")
    await ctx.notify_tools_changed()
    await ctx.session.send_tool_list_changed()
    return f"added {name}"


@server.resource("memo://hello", mime_type="text/plain")
def hello() -> str:
    return "hello resource"


@server.resource("memo://items/{item}")
def item(item: str) -> str:
    return f"item {item}"


@server.prompt()
def review(code: str) -> str:
    """Review some code."""
    return f"Please review: {code}"


if __name__ == "__main__":
    server.run("stdio")
