"""The in-memory transport: a server running in this process, reached without a pipe.

``mcpsync.connect(server)`` with a :class:`mcpsync.Server` uses it, so tests and notebooks
can talk to a server they just defined without spawning a process (the official SDK's
``Client(server)``). Frames still cross as JSON bytes, one frame per call, in both directions:
the client and the server never share a dict, the era is detected as on stdio (``server/
discover``, then ``initialize``), and a server's answer that could not go over a pipe cannot
go over this either.

The other end is a *peer*: whatever ``open_peer(deliver)`` returns, where ``deliver(frame)``
is how the peer hands one frame (bytes of one JSON-RPC message or batch, no newline) to the
client. The client hands the peer each frame it writes with ``peer.write(frame)``, on the
writing thread; a peer that is busy may block there, which is the back-pressure a full pipe
gives. ``peer.close()`` ends the peer (it joins whatever threads it runs); a peer that ends on
its own calls ``deliver(None)``, which the client sees as end of input ("the server closed its
output"). :class:`mcpsync.Server` provides ``_open_memory`` for this, and anything with a
``name`` and that method can be passed to ``connect()``.

Thread rules are those of :class:`~mcpsync.transport.base.Transport`: ``deliver`` may be
called from any thread, ``receive`` by one thread at a time, ``wake`` and ``close`` from
anywhere.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from mcpsync.jsonrpc import Batch, Message, ParseError, parse, serialize
from mcpsync.transport.base import CallFailed, NoProcess, TransportClosed

__all__ = ["InProcessServer", "MemoryPeer", "MemoryTransport"]

#: ``deliver(frame)``: one frame to the client; ``deliver(None)``: the peer has ended.
Deliver = Callable[[bytes | None], None]


class MemoryPeer(Protocol):
    """The far end of a :class:`MemoryTransport` (a server's dispatcher, or a test double)."""

    def write(self, frame: bytes) -> None:
        """Take one frame the client wrote (bytes, no newline); may block while busy."""

    def close(self) -> None:
        """End the peer: cancel its work and join its threads. Called once."""


@runtime_checkable
class InProcessServer(Protocol):
    """What ``connect()`` accepts as an in-process server (``mcpsync.Server`` is one)."""

    name: str

    def _open_memory(self, deliver: Deliver) -> MemoryPeer: ...


class MemoryTransport(NoProcess):
    """A pull transport whose server is a :class:`MemoryPeer` in this process.

    ``open_peer(deliver)`` is called by :meth:`start` (and so once per connection: a client
    that restarts its server gets a new peer). ``name`` is the server's name, used in errors.
    """

    kind = "memory"   # the session names its reader thread after it: mcpsync-memory-reader-<name>

    def __init__(self, open_peer: Callable[[Deliver], MemoryPeer], *, name: str) -> None:
        self.name = name
        self.allow_batch = False
        self._open_peer = open_peer
        self._peer: MemoryPeer | None = None
        self._inbox: collections.deque[bytes] = collections.deque()
        self._cond = threading.Condition(threading.Lock())
        self._woken = False
        self._ended = False      # the peer said it has ended: end of input after the inbox
        self._closed = False
        self._close_lock = threading.Lock()

    def start(self) -> None:
        """Open the peer; raises whatever ``open_peer`` raises."""
        self._peer = self._open_peer(self._deliver)

    def _deliver(self, frame: bytes | None) -> None:
        with self._cond:
            if self._closed:
                return
            if frame is None:
                self._ended = True
            else:
                self._inbox.append(frame)
            self._cond.notify()

    # -- the contract ----------------------------------------------------------------------

    def send(self, message: Message) -> None:
        """Write one message (serialised here, so the peer gets bytes as over a pipe)."""
        self.send_bytes(serialize(message))

    def send_bytes(self, frame: bytes) -> None:
        """Hand one frame to the peer, on this thread; ``TransportClosed`` once it is gone."""
        peer = self._peer
        if peer is None or self._closed or self._ended:
            raise TransportClosed(f"the in-process server {self.name!r} is closed",
                                  server=self.name)
        peer.write(frame)

    def receive(self, timeout: float | None
                ) -> list[Message | Batch | ParseError | CallFailed] | None:
        """What the peer delivered, decoded; ``[]`` on a wake-up or timeout; ``None`` at end."""
        with self._cond:
            if not self._inbox and not self._woken and not self._ended and not self._closed:
                self._cond.wait(timeout)
            self._woken = False
            if not self._inbox:
                return None if (self._ended or self._closed) else []
            frames = list(self._inbox)
            self._inbox.clear()
        items: list[Message | Batch | ParseError | CallFailed] = []
        allow_batch = self.allow_batch
        for frame in frames:
            try:
                items.append(parse(frame, allow_batch=allow_batch))
            except ParseError as exc:
                items.append(exc)
        return items

    def wake(self) -> None:
        """Make the current (or next) :meth:`receive` return soon."""
        with self._cond:
            self._woken = True
            self._cond.notify_all()

    def close(self) -> None:
        """Close the peer (it cancels its handlers and joins its threads); idempotent."""
        with self._close_lock:
            with self._cond:
                if self._closed:
                    return
                self._closed = True
                self._inbox.clear()
                self._cond.notify_all()
            peer, self._peer = self._peer, None
            if peer is not None:
                peer.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("ended" if self._ended else "open")
        return f"<MemoryTransport {self.name!r} {state}>"
