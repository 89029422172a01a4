"""The MCP gateway: one MCP host in front (stdio, or many over Streamable HTTP), configured
servers behind it, with a redacted traffic log.

See ``docs/gateway.md`` and ``docs/gateway-http.md``. The library face is :class:`Gateway`;
the command is ``mcpsync gateway --config FILE [--http HOST:PORT]``; under gunicorn,
``MCPSYNC_GATEWAY_CONFIG=FILE gunicorn -k gthread 'mcpsync.gateway:wsgi()'``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from mcpsync.gateway._gateway import FrameObserver as FrameObserver, Gateway as Gateway
from mcpsync.gateway._guard._approval import (
    ApprovalDesk as ApprovalDesk,
    HeldCall as HeldCall,
    Verdict as Verdict,
    approver_from_config as approver_from_config,
    call_digest as call_digest,
)
from mcpsync.gateway._inspector import Inspector as Inspector
from mcpsync.gateway._redact import Redactor as Redactor

if TYPE_CHECKING:
    from mcpsync.gateway._front import HttpFront

__all__ = ["ApprovalDesk", "FrameObserver", "Gateway", "HeldCall", "Inspector", "Redactor",
           "Verdict", "approver_from_config", "call_digest", "wsgi"]


def wsgi() -> HttpFront:
    """The WSGI application for gunicorn (an app factory: ``'mcpsync.gateway:wsgi()'``): the
    gateway over the config file ``MCPSYNC_GATEWAY_CONFIG`` names, serving HTTP at ``/mcp``,
    with the policy, budgets and approver of the file's ``mcpsync`` key."""
    importlib.import_module("mcpsync.gateway._front")
    from mcpsync.gateway._front import env_config
    importlib.import_module("mcpsync.gateway._guard._hooks")
    from mcpsync.gateway._guard._hooks import guard_options

    path = env_config()
    gateway = Gateway(path, **guard_options(path))   # its cores start upstreams, not it
    try:
        return gateway.wsgi_app(on_close=gateway.close)
    except BaseException:
        gateway.close()
        raise
