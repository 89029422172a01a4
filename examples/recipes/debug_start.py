"""Three servers that will not start, and what mcpsync tells you about each.

Every failure to start raises a ``mcpsync.MCPError`` whose message names the server and says
what to check; for a server that exited, the message ends with the last lines it wrote on
stderr, which are also on the exception (``exit_code``, ``stderr_tail``).
"""

from __future__ import annotations

import contextlib
import sys

import mcpsync

# 1. A server that exits at once: a missing setting, a crash on import, a wrong flag.
needs_key = [sys.executable, "-c",
             "import sys; print('loading settings', file=sys.stderr); "
             "raise SystemExit('WEATHER_API_KEY is not set')"]
try:
    mcpsync.connect(needs_key, name="weather", timeout=10)
except mcpsync.ServerExited as exc:
    print(f"[1] {type(exc).__name__}, exit code {exc.exit_code}:")
    print(exc)

# 2. A command that is not installed, or not on the PATH the server gets.
try:
    mcpsync.connect(["no-such-mcp-server", "--stdio"], name="missing")
except mcpsync.ConfigError as exc:
    print(f"[2] {type(exc).__name__}: {exc}")

# 3. A program that is not an MCP server, or one that prints a banner on stdout.
try:
    mcpsync.connect([sys.executable, "-c", "print('Server ready on port 8000')"],
                    name="chatty", timeout=10)
except mcpsync.ServerExited as exc:
    print(f"[3] {type(exc).__name__}: {exc}")

# To watch a server's stderr live while it starts (in a notebook: in the cell's output):
# it shows: [weather] loading settings / [weather] WEATHER_API_KEY is not set
with contextlib.suppress(mcpsync.ServerExited):
    mcpsync.connect(needs_key, name="weather", stderr="show", era="legacy", timeout=10)
