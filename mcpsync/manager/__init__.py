"""``Manager``: many MCP servers behind one object.

The public face of the room; the manager is in ``_manager``, its value types in ``_types``
and the parallel runner in ``_run``.
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
