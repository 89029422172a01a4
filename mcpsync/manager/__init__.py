"""``Manager``: many MCP servers behind one object.

The public face of the room; the manager (its table of servers, routing and policy) is in
``_manager``, one server's spawn, tool discovery and close in ``_lifecycle``, the checks of
its constructor arguments in ``_settings`` and its value types in ``_types``.
"""
from __future__ import annotations

from mcpsync.manager._manager import (
    ManagedTool as ManagedTool,
    Manager as Manager,
    Notification as Notification,
    split_thread_server_id as split_thread_server_id,
    thread_server_id as thread_server_id,
)

__all__ = [
    "ManagedTool",
    "Manager",
    "Notification",
    "split_thread_server_id",
    "thread_server_id",
]
