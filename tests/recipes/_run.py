"""Running a recipe's code as the reader would: a real process, on a free loopback port.

``RECIPES`` is ``examples/recipes/``, the folder the recipe pages include their code from.
:class:`Served` starts a command, waits until its port answers (or the process dies, which
fails with its output's tail), and at exit stops it, checking that no process started under
it (a worker, an MCP server a worker spawned) is left.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

import psutil
from helpers import ROOT

RECIPES = ROOT / "examples" / "recipes"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Served:
    """``argv`` run in ``cwd`` (its own process group), output to ``log``."""

    def __init__(self, argv: Sequence[str], log: Path, *, port: int | None = None,
                 env: Mapping[str, str] | None = None, cwd: Path = RECIPES,
                 start_timeout: float = 60.0) -> None:
        self.log = log
        self.port = port
        self._out = log.open("wb")
        self.proc = subprocess.Popen(
            list(argv), cwd=cwd, stdin=subprocess.DEVNULL, stdout=self._out,
            stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
            start_new_session=True)
        if port is not None:
            self._wait_listening(start_timeout)

    def output(self) -> str:
        if not self._out.closed:
            self._out.flush()
        return self.log.read_text(encoding="utf-8", errors="replace")

    def _wait_listening(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"exited with {self.proc.returncode} before listening:\n"
                                   f"{self.output()[-3000:]}")
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port or 0)) == 0:
                    return
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"not listening on {self.port} after {timeout:.0f} s:\n"
                                   f"{self.output()[-3000:]}")
            time.sleep(0.05)

    def descendants(self) -> list[psutil.Process]:
        """Every process started under this one (workers, the MCP servers they spawned)."""
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def tree(self) -> list[tuple[int, int, str]]:
        """``(pid, parent pid, command line)`` of every process below this one, now."""
        found = []
        for proc in self.descendants():
            try:
                found.append((proc.pid, proc.ppid(), " ".join(proc.cmdline())))
            except psutil.NoSuchProcess:
                continue
        return found

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        """Signal the main process and wait for it and for every process below it; the exit
        code. Anything still alive after ``timeout`` is killed and reported."""
        below = self.descendants()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
            raise AssertionError(
                f"did not stop on signal {sig}:\n{self.output()[-3000:]}") from None
        finally:
            self._out.close()
        _, alive = psutil.wait_procs(below, timeout=timeout)
        if alive:
            for proc in alive:
                proc.kill()
            raise AssertionError(f"processes outlived {self.proc.args[:3]}: "
                                 f"{[(p.pid, p.cmdline()) for p in alive]}")
        return code

    def __enter__(self) -> Served:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if not self._out.closed:
            self.stop()
