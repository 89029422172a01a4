"""The benchmark's echo server as a WSGI application, for ``http_server_bench.py`` under gunicorn.

Usage (one gthread worker, the figure recorded in docs/performance.md)::

    MCPSYNC_SERVER="gunicorn -k gthread -w 1 --threads 16 -b 127.0.0.1:{port} \
        --chdir benchmarks mcpsync_echo_wsgi:application" python http_server_bench.py
"""

from mcpsync.server import Server

server = Server("mcpsync-echo-wsgi", "1.0")


@server.tool()
def echo(text: str) -> str:
    """Echo the given text back."""
    return text


application = server.wsgi_app()
