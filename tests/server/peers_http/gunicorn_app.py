"""What gunicorn loads: ``gunicorn_app:application``, the pid server as a WSGI app."""

from __future__ import annotations

from server.peers_http.pid_server import build

application = build().wsgi_app()
