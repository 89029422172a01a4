"""Quickstart: start the bundled demo server, list its tools and call each of them.

Run it with ``python examples/quickstart.py``. Everything is blocking and thread-safe: no
``async``, no event loop, so the same lines work in a script, a notebook cell or a Flask view.
"""

from __future__ import annotations

import sys

import mcpsync


def show_progress(progress: float, total: float | None, message: str | None) -> None:
    """Progress arrives on mcpsync's dispatcher thread while the call blocks."""
    print(f"  progress {progress}/{total}: {message}")


def main() -> int:
    # The demo server ships with mcpsync; any MCP server command works the same way.
    with mcpsync.connect([sys.executable, "-m", "mcpsync.demo"], name="demo") as client:
        print(f"connected to {client.server_info.name} {client.server_info.version} "
              f"({client.era} era, protocol {client.protocol_version})")

        for tool in client.list_tools():
            print(f"tool {tool.name}: {tool.description}")

        print("echo ->", client.call_tool("echo", {"text": "hello"}).text)

        result = client.call_tool("add", {"a": 2, "b": 3})
        print("add  ->", result.structured)            # {'sum': 5}

        failed = client.call_tool("fail", {"message": "this tool always fails"})
        print("fail ->", failed.is_error, failed.text)  # a tool error is a result, not raised

        done = client.call_tool("slow", {"seconds": 0.5, "steps": 5}, progress=show_progress)
        print("slow ->", done.text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
