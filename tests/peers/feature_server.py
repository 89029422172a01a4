"""A server using every feature of ``mcpsync.Server``: the peer of the server feature tests.

Imported for in-process tests (``build()``) and run as a stdio process
(``python feature_server.py``), so that each feature is tested the same way over both.
``runs`` counts handler runs, which shows the 2026-07-28 rounds re-running a handler.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mcpsync.server import Ask, Context, Refusal, Server
from mcpsync.types import EmbeddedResource, ImageContent

PNG = bytes.fromhex("89504e470d0a1a0a0000000d49484452")  # the first bytes of a PNG


def build(**options: Any) -> Server:
    server = Server("features", "1.0", instructions="a server with everything", **options)
    runs: dict[str, int] = {}
    server.runs = runs  # type: ignore[attr-defined]

    def count(name: str) -> None:
        runs[name] = runs.get(name, 0) + 1

    @server.tool()
    def greet(name: str) -> str:
        """Say hello."""
        return f"hello {name}"

    @server.tool(output_schema={"type": "object", "properties": {"sum": {"type": "number"}},
                                "required": ["sum"]},
                 annotations={"readOnlyHint": True})
    def add(a: float, b: float) -> dict[str, float]:
        """Add two numbers."""
        return {"sum": a + b}

    @server.tool()
    def picture() -> list[Any]:
        """An image and an embedded resource."""
        return [ImageContent.from_bytes(PNG, "image/png"),
                EmbeddedResource.from_text("memo://greeting", "hi there", "text/plain")]

    @server.tool()
    def ask_name(ctx: Context) -> str:
        """Ask the user for a name (elicitation)."""
        count("ask_name")
        answer = ctx.elicit("Your name?", {"type": "object",
                                           "properties": {"name": {"type": "string"}},
                                           "required": ["name"]})
        if not answer.accepted:
            return f"no name ({answer.action})"
        assert answer.content is not None
        return f"hello {answer.content['name']}"

    @server.tool()
    def ask_twice(ctx: Context) -> str:
        """Two asks in a row: a name, then a colour."""
        count("ask_twice")
        first = ctx.elicit("Name?", {"type": "object", "properties": {"v": {"type": "string"}}})
        second = ctx.elicit("Colour?", {"type": "object",
                                        "properties": {"v": {"type": "string"}}})
        return f"{(first.content or {}).get('v')} likes {(second.content or {}).get('v')}"

    @server.tool()
    def ask_llm(question: str, ctx: Context) -> str:
        """Ask the client's model (sampling)."""
        count("ask_llm")
        reply = ctx.sample(question, max_tokens=50, system_prompt="be brief")
        return f"{reply.model}: {reply.text}"

    @server.tool()
    def ask_many(ctx: Context) -> str:
        """Three asks at once: one round under 2026-07-28, three requests under legacy."""
        count("ask_many")
        got = ctx.ask_all({"who": Ask.elicit("Your name?", {
                               "type": "object", "properties": {"name": {"type": "string"}}}),
                           "llm": Ask.sample("why?", max_tokens=5),
                           "where": Ask.roots()})
        return (f"{(got['who'].content or {}).get('name')} | {got['llm'].text} | "
                f"{len(got['where'])} roots")

    @server.tool()
    def roots(ctx: Context) -> list[str]:
        """The client's roots."""
        return [root.uri for root in ctx.list_roots()]

    @server.tool()
    def refuse(code: int) -> str:
        """Refuse with a JSON-RPC error."""
        raise Refusal(code, "refused on purpose", {"why": "test"})

    @server.tool()
    def fail() -> str:
        """Raise an ordinary exception (an isError result)."""
        raise RuntimeError("on purpose")

    @server.tool()
    def add_extra(name: str) -> str:
        """Add a tool while serving."""
        server.add_tool({"name": name, "description": "added live"},
                        lambda arguments, ctx: f"I am {name}")
        return "added"

    @server.tool()
    def remove_extra(name: str) -> bool:
        """Remove a tool while serving."""
        return server.remove_tool(name)

    @server.tool()
    def touch(uri: str) -> str:
        """Announce that a resource changed."""
        server.notify_resource_updated(uri)
        return "touched"

    @server.tool()
    def log_some(ctx: Context) -> str:
        """Log at three levels."""
        for level in ("debug", "info", "error"):
            ctx.log(level, f"a {level} message")
        return "logged"

    @server.tool()
    def count_up(steps: int, ctx: Context) -> str:
        """Report progress ``steps`` times (1..steps of steps), then answer."""
        for i in range(1, steps + 1):
            ctx.progress(i, steps, f"step {i}/{steps}")
        return f"counted to {steps}"

    @server.tool()
    def handler_runs() -> dict[str, int]:
        """How often each counted handler has run in this process (a client over stdio cannot
        read ``server.runs``)."""
        return dict(runs)

    @server.resource("memo://greeting", mime_type="text/plain", description="a greeting")
    def greeting() -> str:
        return "hi there"

    @server.resource("memo://logo", mime_type="image/png", ttl_ms=5000, cache_scope="private")
    def logo() -> bytes:
        return PNG

    @server.resource_template("memo://notes/{name}", mime_type="text/markdown")
    def note(name: str) -> str | None:
        if name == "missing":
            return None
        return f"# {name}"

    @server.resource("memo://secret")
    def secret(ctx: Context) -> str:
        answer = ctx.elicit("Password?", {"type": "object",
                                          "properties": {"pw": {"type": "string"}}})
        return "the secret" if (answer.content or {}).get("pw") == "open" else "no"

    @server.prompt(description="Summarise a text")
    def summarize(text: str, style: str = "short") -> list[Any]:
        return [("user", f"Summarise in a {style} style:"),
                ("user", EmbeddedResource.from_text("memo://text", text, "text/plain")),
                ("assistant", ImageContent.from_bytes(PNG, "image/png"))]

    @server.completion(prompt="summarize")
    def styles(argument: str, value: str, context: dict[str, str]) -> list[str]:
        return [s for s in ("short", "long", "bullet") if s.startswith(value)]

    @server.completion(resource="memo://notes/{name}")
    def note_names(argument: str, value: str, context: dict[str, str]) -> list[str]:
        return [f"{value}{i}" for i in range(150)]

    return server


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    build().run()
