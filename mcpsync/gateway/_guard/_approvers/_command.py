"""The command-hook approver: a program of the user's decides (a chat bot, a ticket system).

The hook is an argv list, run without a shell (no quoting to get wrong, nothing from the
call's arguments is ever interpreted). It gets the held call's digest as its last argument
and the call's summary as JSON on stdin (arguments redacted); exit status 0 approves,
anything else rejects. Its stdout is discarded and its stderr read into the gateway's log:
on the stdio front the gateway's own stdout carries MCP, and a hook printing there would
corrupt the stream.

The hook runs in its own process group with the small safe environment the gateway gives
stdio servers (plus the config's ``env``), and when the hold time passes the whole group is
killed, so a hook that started a helper leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from typing import Final

from mcpsync.gateway._guard._approval import ApproverBase, HeldCall, Verdict
from mcpsync.gateway._guard._approvers._summary import summary
from mcpsync.transport.stdio._env import build_env

__all__ = ["CommandApprover"]

_log = logging.getLogger("mcpsync.gateway.approval")
_STDERR_LOGGED: Final = 2000   # characters of a hook's stderr kept in the log


class CommandApprover(ApproverBase):
    """Runs ``argv + [digest]`` for each held call; exit 0 approves."""

    label = "by the command hook"

    def __init__(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None) -> None:
        if not argv or not all(isinstance(a, str) and a for a in argv):
            raise ValueError("the command approver needs a non-empty list of non-empty "
                             "strings, such as ['/usr/local/bin/approve']")
        self._argv = list(argv)
        self._env = build_env(dict(env or {}))
        self._lock = threading.Lock()
        self._running: dict[str, subprocess.Popen[bytes]] = {}
        self._closed = False

    def __repr__(self) -> str:
        return f"<CommandApprover {self._argv[0]!r}>"

    def __call__(self, call: HeldCall, /) -> bool | Verdict:
        stdin = json.dumps(summary(call), ensure_ascii=False).encode("utf-8")
        with self._lock:
            if self._closed:
                return Verdict(False, "the gateway is closing", "")
            try:
                proc = subprocess.Popen([*self._argv, call.digest], stdin=subprocess.PIPE,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                        env=self._env, start_new_session=True,
                                        close_fds=True)
            except OSError as exc:
                return Verdict(False, f"the command hook {self._argv[0]!r} could not start: "
                                      f"{exc.strerror}", "")
            self._running[call.ticket] = proc
        try:
            try:
                _, err = proc.communicate(stdin)
            except (BrokenPipeError, OSError):   # the hook exited without reading stdin
                err = b""
                proc.wait()
        finally:
            with self._lock:
                self._running.pop(call.ticket, None)
        if err.strip():
            _log.info("approval hook %r said: %s", self._argv[0],
                      err.decode("utf-8", "replace")[-_STDERR_LOGGED:].rstrip())
        if proc.returncode == 0:
            return True
        if proc.returncode < 0:
            return Verdict(False, f"the command hook ended by signal {-proc.returncode}", "")
        return Verdict(False, f"rejected by the command hook (exit status {proc.returncode})",
                       "")

    def withdraw(self, call: HeldCall) -> None:
        with self._lock:
            proc = self._running.get(call.ticket)
        if proc is not None:
            _kill(proc)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            running = list(self._running.values())
        for proc in running:
            _kill(proc)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """Kill the hook's process group (it leads one: ``start_new_session``)."""
    if proc.returncode is not None:   # reaped: its pid may belong to someone else now
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
