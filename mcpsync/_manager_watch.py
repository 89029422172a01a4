"""The Manager's exit watcher: one thread that notices when a server process ends.

The ``Client`` has no "the server exited" callback, yet a crashed server's secret file must
go at once, not at the next call or at ``close()``. One ``mcpsync-manager-exits`` thread per
Manager waits on every watched process: on Linux through a pidfd (readable when the process
ends, so the wait costs nothing), elsewhere by polling every 0.2 s.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import threading
from collections.abc import Callable

__all__ = ["ExitWatcher"]

_log = logging.getLogger("mcpsync.manager")
_POLL = 0.2   # seconds between liveness checks where pidfds do not exist


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ExitWatcher:
    """Calls ``on_exit()`` (on the watcher thread) once a watched process has ended."""

    def __init__(self, thread_name: str = "mcpsync-manager-exits") -> None:
        self._lock = threading.Lock()
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._polled: dict[int, tuple[int, Callable[[], None]]] = {}   # token -> (pid, fn)
        self._fds: dict[int, int] = {}                                  # token -> pidfd
        self._next = 0
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)
        self._thread.start()

    def watch(self, pid: int, on_exit: Callable[[], None]) -> int:
        """Start watching ``pid``; return a token for :meth:`unwatch`."""
        with self._lock:
            self._next += 1
            token = self._next
            fd = None
            if hasattr(os, "pidfd_open"):
                try:
                    fd = os.pidfd_open(pid)
                except ProcessLookupError:
                    fd = None   # already gone (and reaped): report it on the watcher thread
                    self._polled[token] = (pid, on_exit)
                except OSError:
                    self._polled[token] = (pid, on_exit)
            else:
                self._polled[token] = (pid, on_exit)
            if fd is not None:
                self._fds[token] = fd
                self._selector.register(fd, selectors.EVENT_READ, (token, on_exit))
        self._wake()
        return token

    def unwatch(self, token: int) -> None:
        """Stop watching; the callback will not run after this returns (unless running)."""
        with self._lock:
            self._polled.pop(token, None)
            fd = self._fds.pop(token, None)
            if fd is not None:
                self._selector.unregister(fd)
                os.close(fd)

    def close(self) -> None:
        """Stop the thread and join it; the pidfds are closed."""
        with self._lock:
            if self._stopping:
                return
            self._stopping = True
        self._wake()
        if self._thread is not threading.current_thread():
            self._thread.join(5.0)
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()
            self._polled.clear()
            self._selector.close()
            os.close(self._wake_r)
            os.close(self._wake_w)

    def _wake(self) -> None:
        # A full pipe means a wake-up is pending anyway; a closed one, that we are done.
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")

    def _run(self) -> None:
        while True:
            with self._lock:
                if self._stopping:
                    return
                timeout = _POLL if self._polled else None
            events = self._selector.select(timeout)
            fired: list[Callable[[], None]] = []
            with self._lock:
                if self._stopping:
                    return
                for key, _ in events:
                    if key.data is None:
                        with contextlib.suppress(OSError):
                            os.read(self._wake_r, 4096)
                        continue
                    token, on_exit = key.data
                    fd = self._fds.pop(token, None)
                    if fd is not None:
                        self._selector.unregister(fd)
                        os.close(fd)
                        fired.append(on_exit)
                for token, (pid, on_exit) in list(self._polled.items()):
                    if not _pid_alive(pid):
                        del self._polled[token]
                        fired.append(on_exit)
            for callback in fired:
                try:
                    callback()
                except Exception:  # one bad callback must not stop watching the others
                    _log.exception("the exit handler of a server raised")
