"""The gateway's HTTP front: Streamable HTTP hosts through the server side's WSGI app.

``_front`` holds :class:`HttpFront` (the WSGI application, the process bound) and the built-in
server loop; ``_session`` one legacy host session's relay to its own gateway core;
``_shared`` the relay every 2026-07-28 host shares, with remapped ids; ``_relay`` the wait on
a request's own thread; ``_caller`` who sent a request, for the guard's budgets;
``_replicas`` the sealed session ids and ``_store`` the state replicas share beside them.
"""

from __future__ import annotations

from mcpsync.gateway._front._caller import PROCESS as PROCESS, Caller as Caller
from mcpsync.gateway._front._front import (
    DEFAULT_MAX_PROCESSES as DEFAULT_MAX_PROCESSES,
    HttpFront as HttpFront,
    env_config as env_config,
    serve_front as serve_front,
)

__all__ = ["DEFAULT_MAX_PROCESSES", "PROCESS", "Caller", "HttpFront", "env_config",
           "serve_front"]
