"""``connect(server)``: a client of a server object running in this process.

The server is reached through :class:`~mcpsync.transport.memory.MemoryTransport`; everything
above the transport (handshake and era detection, calls, restarts) is the client's usual
machinery. The client names the server as the server names itself unless ``name=`` says
otherwise.
"""

from __future__ import annotations

from collections.abc import Callable

from mcpsync.config import ServerConfig
from mcpsync.transport.memory import InProcessServer, MemoryTransport

__all__ = ["InProcessServer", "in_process_target"]

#: Stands in for a command in the config of an in-process server; never run.
_NO_COMMAND = "(in-process)"


def in_process_target(server: InProcessServer
                      ) -> tuple[ServerConfig, Callable[[str], MemoryTransport]]:
    """The config ``connect()`` works with, and the maker of this server's transports
    (called once per connection, with the client's name for the server)."""
    config = ServerConfig(name=str(server.name), command=_NO_COMMAND)

    def open_transport(name: str) -> MemoryTransport:
        transport = MemoryTransport(server._open_memory, name=name)
        transport.start()
        return transport

    return config, open_transport
