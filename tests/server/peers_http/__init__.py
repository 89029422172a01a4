"""Peers for serving the MCP server inside other programs: gunicorn, Flask and Django.

``pid_server`` builds a server whose tools say which process answered; ``gunicorn_app`` is
the module gunicorn loads; ``gunicorn_run`` starts a real gunicorn and waits for it.
"""
