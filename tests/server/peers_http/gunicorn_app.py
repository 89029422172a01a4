"""What gunicorn loads: ``gunicorn_app:application``, the pid server as a WSGI app.

With ``MCPSYNC_TEST_BUS_DIR`` set, each worker announces changes on a ``UnixSocketBus`` in
that directory, so a listen in one worker hears of a change made in another. With
``MCPSYNC_TEST_STATE_KEY`` set, that key is passed as ``Server(state_keys=[...])``.
"""

from __future__ import annotations

import os

from mcpsync.server import UnixSocketBus
from server.peers_http.pid_server import build

key = os.environ.get("MCPSYNC_TEST_STATE_KEY")
server = build(state_keys=[key]) if key else build()
if os.environ.get("MCPSYNC_TEST_BUS_DIR"):
    server.use_notification_bus(UnixSocketBus(os.environ["MCPSYNC_TEST_BUS_DIR"]))
application = server.wsgi_app()
