"""The traffic log's helper process: it builds and writes the records, the gateway ships frames.

Building a record costs microseconds of Python per frame (about 7 for a ``tools/call`` or
its answer, measured alone; more for big bodies). On a thread of the gateway's own process
that time holds the interpreter lock, so a traffic thread that wakes while the log thread
formats a batch waits for it, and every call gets slower by a share of the log's work. With
``Inspector(path, helper=True)`` (what ``mcpsync gateway --log FILE`` uses) the log thread
only ships what the traffic threads queued, the raw frames with their legs, upstream,
session and times, to a child process in one pipe write per batch; the child
(:mod:`mcpsync.gateway._logworker`) runs the very same record code on its own interpreter
and writes the same lines to the same file.

The child is trusted as much as the gateway: it gets the log file already opened (the
gateway checks the path as it always does, so a bad path still fails at start), its rules of
redaction through the pipe, and only path-like options in argv. Its environment is the small
safe set the stdio transport gives a server, plus ``PYTHONPATH`` naming this copy of
mcpsync, so no credential of the gateway's environment reaches it. It reads until its input
ends, so it ends with the gateway: when the gateway closes the inspector, exits or is
killed. Its stdout is ``/dev/null`` (the gateway's stdout is the MCP channel); its
warnings go to stderr, like the gateway's.

A child that dies is reported once on the ``mcpsync.gateway`` logger and the log is given up:
the pipe write that failed is the log thread's, never a traffic thread's, and frames that
wait past the queue's bound are counted as dropped, as in-process.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Final

from mcpsync.gateway._redact import Redactor
from mcpsync.transport.stdio._env import build_env

__all__ = ["WORKER", "LogHelper", "read_message"]

_log = logging.getLogger("mcpsync.gateway")

#: The module the child runs (``python -m``).
WORKER: Final = "mcpsync.gateway._logworker"
#: How long :meth:`LogHelper.close` waits for the child to write what it got. A healthy
#: child writes a full queue's records in well under a second; a host that closes the
#: gateway's input often kills it a few seconds later, so a child that is stuck (stopped,
#: starved) is not waited for longer than the gateway's own close takes.
CLOSE_WAIT: Final = 3.0
_HEADER: Final = 4   # each message: its length, 4 bytes big-endian, then a pickle


def read_message(stream: Any) -> Any:
    """The next message on ``stream`` (a binary file), or ``None`` at its end."""
    head = stream.read(_HEADER)
    if len(head) < _HEADER:
        return None
    size = int.from_bytes(head, "big")
    body = stream.read(size)
    if len(body) < size:
        return None
    return pickle.loads(body)


def _pack(message: Any) -> bytes:
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return len(body).to_bytes(_HEADER, "big") + body


class LogHelper:
    """The gateway's side of the child: spawn it, send it messages, wait for it on close."""

    def __init__(self, fd: int, path: str, *, detail: str, max_bytes: int, backups: int,
                 redactor: Redactor) -> None:
        package_root = str(Path(__file__).resolve().parents[2])
        inherited = os.environ.get("PYTHONPATH")
        env = build_env({"PYTHONPATH": package_root if not inherited
                         else f"{package_root}{os.pathsep}{inherited}"})
        # ``python -m`` puts the working directory first on ``sys.path``: started in a
        # folder holding an ``mcpsync/`` of its own (a host's workspace), the child would
        # run that code and be handed every frame. So it starts in the directory this
        # package comes from, and the log's path (rotation reopens it) is made absolute.
        argv = [sys.executable, "-m", WORKER, "--fd", str(fd), "--path", os.path.abspath(path),
                "--detail", detail, "--max-bytes", str(max_bytes), "--backups", str(backups)]
        rules = _pack(("rules", redactor))   # before the spawn: a failure leaves no child
        self._lock = threading.Lock()
        self._dead = False
        self._reported = False   # its end was logged: once is enough
        self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                      pass_fds=(fd,), env=env, close_fds=True,
                                      cwd=package_root)
        self.pid = self._proc.pid
        self._write(rules)

    def __repr__(self) -> str:
        return f"<LogHelper pid={self.pid} {'dead' if self._dead else 'running'}>"

    @property
    def alive(self) -> bool:
        if self._dead and self._proc.returncode is None:
            self._proc.poll()   # reap a child given up (no zombie until close())
        return not self._dead

    def send(self, message: Any) -> bool:
        """Write ``message`` to the child (one ``write`` for the whole of it); ``False``, and
        one warning, once the child is gone."""
        return self._write(_pack(message))

    def _write(self, data: bytes) -> bool:
        with self._lock:
            if self._dead:
                return False
            stdin = self._proc.stdin
            assert stdin is not None
            try:
                view = memoryview(data)
                fd = stdin.fileno()
                while view:
                    view = view[os.write(fd, view):]
            except (OSError, ValueError):
                self._dead = self._reported = True
                code = self._proc.poll()
                _log.warning("inspector: the log's helper process (pid %d) %s; the log is "
                             "given up, the gateway's traffic is not affected", self.pid,
                             "is gone" if code is None else f"exited with code {code}")
                return False
        return True

    def give_up(self, reason: str) -> None:
        """Stop using the child, with one warning saying why (``reason``): it is sent
        nothing more, and ends after writing what it got."""
        with self._lock:
            if self._dead:
                return
            self._dead = self._reported = True
            stdin, self._proc.stdin = self._proc.stdin, None
        _log.warning("inspector: %s; the log is given up, the gateway's traffic is not "
                     "affected", reason)
        if stdin is not None:
            with contextlib.suppress(OSError):
                stdin.close()

    def close(self) -> None:
        """End the child's input and wait for it to write the rest and exit (killed past
        :data:`CLOSE_WAIT`). Idempotent."""
        with self._lock:
            self._dead = True
            reported, self._reported = self._reported, True
            stdin, self._proc.stdin = self._proc.stdin, None
        if stdin is not None:
            with contextlib.suppress(OSError):
                stdin.close()
        try:
            code = self._proc.wait(CLOSE_WAIT)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
            _log.warning("inspector: the log's helper process (pid %d) did not finish "
                         "writing in %.0f s and was killed", self.pid, CLOSE_WAIT)
            return
        if code and not reported:
            _log.warning("inspector: the log's helper process (pid %d) exited with code %d",
                         self.pid, code)

    def kill(self) -> None:
        """Stop the child at once (a log thread stuck on a full pipe is freed by this)."""
        with contextlib.suppress(OSError):
            self._proc.kill()
