"""A stdio MCP server for the tool-proxy, argument-check and CLI tests: tool names that are
not Python identifiers (and two that map to the same attribute), a keyword, a leading digit,
optional arguments with defaults, a tool whose result holds an image, audio, a resource link
and text, and a tool that adds another tool while serving (so the client sees list_changed).
It offers no resources and no prompts. With ``--stderr`` it writes two lines to stderr first.
"""

from __future__ import annotations

import base64
import sys
from typing import Any

from mcpsync.server import Context, Server

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")

server = Server("proxy-peer", "1.0")


def _sum(arguments: dict[str, Any], ctx: Context) -> str:
    return str(arguments["a"] + arguments.get("b", 5))


_SUM_SCHEMA = {"type": "object", "required": ["a"], "additionalProperties": False,
               "properties": {"a": {"type": "integer", "description": "the first number"},
                              "b": {"type": "integer", "default": 5,
                                    "description": "the second number"}}}
server.register_tool({"name": "get-sum", "description": "Add a and b.",
                      "inputSchema": _SUM_SCHEMA}, _sum)
server.register_tool({"name": "get.sum", "description": "Add a and b, again.",
                      "inputSchema": _SUM_SCHEMA}, _sum)
server.register_tool({"name": "class", "description": "A keyword as a name.",
                      "inputSchema": {"type": "object"}}, lambda a, c: "class ok")
server.register_tool({"name": "3d", "description": "A leading digit.",
                      "inputSchema": {"type": "object"}}, lambda a, c: "3d ok")


def _picture(arguments: dict[str, Any], ctx: Context) -> list[dict[str, Any]]:
    data = base64.b64encode(PNG).decode()
    return [{"type": "text", "text": "a picture:"},
            {"type": "image", "data": data, "mimeType": "image/png"},
            {"type": "audio", "data": base64.b64encode(b"RIFF0000").decode(),
             "mimeType": "audio/wav"},
            {"type": "resource_link", "uri": "file:///tmp/picture.png", "name": "picture"}]


server.register_tool({"name": "picture", "description": "An image, audio and a link.",
                      "inputSchema": {"type": "object"}}, _picture)


def _grow(arguments: dict[str, Any], ctx: Context) -> str:
    server.add_tool({"name": "extra", "description": "Added while serving.",
                     "inputSchema": {"type": "object", "properties": {"x": {"type": "string"}},
                                     "required": ["x"]}},
                    lambda a, c: f"extra {a['x']}", replace=True)
    return "grown"


server.register_tool({"name": "grow", "description": "Add the tool 'extra'.",
                      "inputSchema": {"type": "object"}}, _grow)

if __name__ == "__main__":
    if "--stderr" in sys.argv:
        sys.stderr.write("proxy-peer: starting\nproxy-peer: ready\n")
        sys.stderr.flush()
        sys.argv.remove("--stderr")
    server.run()
