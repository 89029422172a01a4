"""What gunicorn loads for the keep-alive test: ``gunicorn_keepalive_app:application``, an
app whose quiet tool sends one progress event and then nothing for a second, with
keep-alive comments every 0.1 s (written by the app's ticker thread, not the request's)."""

from __future__ import annotations

import time

from mcpsync.server import Context, Server
from mcpsync.server.http._app import McpApp

server = Server("keepalive-gunicorn", "1.0")


@server.tool()
def quiet(ctx: Context) -> str:
    """One progress event, then a second of silence, then the answer."""
    ctx.progress(1, 2)
    time.sleep(1.0)
    return "quiet done"


application = McpApp(server._dispatcher_factory(), name="ka", keep_alive=0.1)
