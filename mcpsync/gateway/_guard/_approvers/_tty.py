"""The terminal approver: asks the person at the gateway's controlling terminal, y/N.

On the stdio front the gateway's stdin and stdout carry MCP, so a prompt there would be read
by the host as protocol (and the host could answer it). The terminal is opened by name
(``/dev/tty``: the controlling terminal, whatever the standard streams are), read and
written directly, and never through ``sys.stdin``/``sys.stdout``.

One question at a time: two held calls would otherwise interleave on one screen, and a
``y`` could approve the wrong one. A question waits for its turn and for its answer with a
short poll, so a withdrawn question (its hold time passed) ends within a fraction of a
second, and the terminal says the call was refused.
"""

from __future__ import annotations

import contextlib
import os
import select
import termios
import threading
from typing import Final

from mcpsync.errors import ConfigError
from mcpsync.gateway._guard._approval import ApproverBase, HeldCall, Verdict
from mcpsync.gateway._guard._approvers._summary import summary_lines

__all__ = ["TtyApprover"]

_POLL: Final = 0.1
_MAX_LINE: Final = 256


class TtyApprover(ApproverBase):
    """Asks on the terminal ``path`` (``/dev/tty`` by default; tests hand in a pty)."""

    def __init__(self, path: str = "/dev/tty", *, origin: str = "") -> None:
        self._path = path
        self._origin = origin   # "FILE: KEY" when built from a config file, for start()'s error
        self.label = f"on {path}"
        self._turn = threading.Lock()           # one question on the screen at a time
        self._lock = threading.Lock()
        self._active: set[str] = set()          # tickets being asked about
        self._withdrawn: set[str] = set()       # of those, the ones whose hold ended
        self._closed = threading.Event()

    def __repr__(self) -> str:
        return f"<TtyApprover {self._path}>"

    def start(self) -> None:
        """Checks the terminal opens now, so a gateway without one fails at start-up (with a
        ``ConfigError`` naming the config file and key when it came from one)."""
        try:
            fd = self._open()
        except OSError as exc:
            if self._origin:
                raise ConfigError(f"{self._origin} asks for the terminal, but {exc.strerror}"
                                  ) from None
            raise
        os.close(fd)

    def _open(self) -> int:
        try:
            return os.open(self._path, os.O_RDWR | os.O_NOCTTY)
        except OSError as exc:
            raise OSError(exc.errno, f"the tty approver cannot open {self._path} "
                                     f"({exc.strerror}); a gateway without a terminal needs "
                                     f"the web or command approver") from None

    def _gone(self, call: HeldCall) -> bool:
        with self._lock:
            return self._closed.is_set() or call.ticket in self._withdrawn

    def __call__(self, call: HeldCall, /) -> bool | Verdict:
        with self._lock:
            self._active.add(call.ticket)
        while not self._turn.acquire(timeout=_POLL):
            if self._gone(call):
                return self._forget(call, False)
        try:
            if self._gone(call):
                return self._forget(call, False)
            try:
                fd = self._open()
            except OSError as exc:
                return self._forget(call, Verdict(False, str(exc), ""))
            try:
                return self._forget(call, self._ask(fd, call))
            finally:
                os.close(fd)
        finally:
            self._turn.release()

    def _forget(self, call: HeldCall, answer: bool | Verdict) -> bool | Verdict:
        with self._lock:
            self._active.discard(call.ticket)
            self._withdrawn.discard(call.ticket)
        return answer

    def _ask(self, fd: int, call: HeldCall) -> bool | Verdict:
        lines = ["", "mcpsync gateway: a tool call needs your approval", *summary_lines(call)]
        with contextlib.suppress(OSError, termios.error):
            termios.tcflush(fd, termios.TCIFLUSH)   # keys typed before the question do not count
        _write(fd, "\n".join(lines).replace("\n", "\r\n") + "\r\napprove this call? [y/N] ")
        answer = b""
        while b"\n" not in answer and b"\r" not in answer and len(answer) < _MAX_LINE:
            if self._gone(call):
                _write(fd, "\r\n(no answer in time: the call was refused)\r\n")
                return False
            ready, _, _ = select.select([fd], [], [], _POLL)
            if not ready:
                continue
            try:
                chunk = os.read(fd, _MAX_LINE)
            except OSError as exc:
                return Verdict(False, f"reading {self._path} failed: {exc.strerror}", "")
            if not chunk:
                return Verdict(False, f"{self._path} closed before an answer", "")
            answer += chunk
        word = answer.decode("utf-8", "replace").strip().lower()
        approved = word in ("y", "yes")
        _write(fd, "approved\r\n" if approved else "rejected\r\n")
        return approved

    def withdraw(self, call: HeldCall) -> None:
        with self._lock:
            if call.ticket in self._active:   # else its asker has already returned
                self._withdrawn.add(call.ticket)

    def close(self) -> None:
        self._closed.set()


def _write(fd: int, text: str) -> None:
    data = text.encode("utf-8", "replace")
    with contextlib.suppress(OSError):
        while data:
            data = data[os.write(fd, data):]
