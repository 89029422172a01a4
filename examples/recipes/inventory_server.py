"""An MCP server with two tools, served over Streamable HTTP by any WSGI server.

``python inventory_server.py`` serves it over stdio (for a desktop app's config file);
``python inventory_server.py --http 127.0.0.1:8000`` on the built-in HTTP server; and
``gunicorn -k gthread --threads 16 -w 2 inventory_server:application`` under gunicorn, with
``MCPSYNC_STATE_KEY`` set to the same secret for every worker.
"""

from __future__ import annotations

import os

from mcpsync.server import Context, Server

server = Server("inventory", "1.0", instructions="Stock levels of the shop.")
STOCK = {"apple": 7, "pear": 0, "plum": 31}


@server.tool()
def stock(item: str) -> int:
    """How many of ``item`` are left (0 for an item we do not sell)."""
    return STOCK.get(item, 0)


@server.tool()
def restock(ctx: Context, items: list[str]) -> str:
    """Check several items, reporting progress; says which worker process answered."""
    low = []
    for done, item in enumerate(items, 1):
        if STOCK.get(item, 0) < 5:
            low.append(item)
        ctx.progress(done, len(items))
    return f"low: {', '.join(low) or 'none'} (pid {os.getpid()})"


if __name__ == "__main__":
    server.run()   # stdio, or --http HOST:PORT
else:
    application = server.wsgi_app()   # what gunicorn (or any WSGI server) imports and serves
