"""A real gunicorn (``-k gthread``) serving a test app on a port it picks, for one test.

gunicorn is told to bind ``127.0.0.1:0``; the port it got is read from its log line
``Listening at: http://127.0.0.1:PORT``, and readiness is that line, one ``Booting
worker`` line per worker, and an answer to a GET (a worker has loaded the app), polled,
never slept for. The log goes to a file (a pipe nobody
reads could block gunicorn); ``close()`` stops it with SIGTERM and waits for it.
"""

from __future__ import annotations

import http.client
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2]
_LISTENING = re.compile(r"Listening at: http://127\.0\.0\.1:(\d+)")


class Gunicorn:
    """``gunicorn -k gthread -w WORKERS APP`` on loopback; ``.url`` is its MCP endpoint."""

    def __init__(self, log: Path, app: str = "server.peers_http.gunicorn_app:application", *,
                 workers: int | None = 1, threads: int = 16, env: dict[str, str] | None = None,
                 wait: bool = True) -> None:
        self.log = log
        self.workers = workers or 1   # None: no -w, gunicorn's environment or config decides
        environment = {k: v for k, v in os.environ.items() if k != "MCPSYNC_STATE_KEY"}
        environment.update(env or {})
        environment["PYTHONPATH"] = os.pathsep.join(
            [str(TESTS), *filter(None, [environment.get("PYTHONPATH")])])
        self._out = open(log, "wb")   # noqa: SIM115 (closed in close())
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-k", "gthread", "--threads", str(threads),
             *(["-w", str(workers)] if workers is not None else []), "-b", "127.0.0.1:0",
             "--graceful-timeout", "2", "--log-level", "info", "--no-control-socket",
             # Tests hold a keep-alive connection to each worker while they use another;
             # gunicorn's default of 2 s closed an idle one on a loaded machine (BrokenPipe).
             "--keep-alive", "30", app],
            stdout=self._out, stderr=subprocess.STDOUT, env=environment, cwd=str(TESTS))
        self.port = 0
        if wait:
            self._wait_ready()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def _wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.text()
            found = _LISTENING.search(text)
            if found and text.count("Booting worker") >= self.workers:
                self.port = int(found.group(1))
                if self._answers():
                    return
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        self.close()
        raise AssertionError(f"gunicorn did not get ready:\n{self.text()}")

    def _answers(self) -> bool:
        """Does a worker answer (any status: the app is loaded)? A failed boot does not."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=0.5)
        try:
            conn.request("GET", "/mcp")
            conn.getresponse().read()
            return True
        except OSError:
            return False
        finally:
            conn.close()

    def exit_status(self, timeout: float = 30.0) -> int:
        """Wait for gunicorn to end on its own (a failed boot); its exit status."""
        return self.proc.wait(timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._out.close()

    def __enter__(self) -> Gunicorn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
