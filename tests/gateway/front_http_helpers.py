"""Shared pieces of the HTTP front's tests: a front on the built-in server, raw POSTs, and
the command serving ``--http`` on a port it picks."""

from __future__ import annotations

import http.client
import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from mcpsync.gateway import Gateway
from mcpsync.gateway._front import HttpFront
from mcpsync.server.http import WsgiServer

PEERS = Path(__file__).resolve().parents[1] / "peers"
DEMO = [sys.executable, "-m", "mcpsync.demo"]
FEATURES = [sys.executable, str(PEERS / "feature_server.py")]
_SERVING = re.compile(r"serving MCP at (http://\S+)")


def write_config(tmp_path: Path, servers: dict[str, Any], name: str = "gateway.json") -> str:
    """A config file: each value an argv list (a stdio server) or a dict entry as is."""
    entries = {sid: ({"command": spec[0], "args": spec[1:]} if isinstance(spec, list) else spec)
               for sid, spec in servers.items()}
    path = tmp_path / name
    path.write_text(json.dumps({"mcpServers": entries}))
    return str(path)


class Front:
    """``Gateway(config).wsgi_app(...)`` on the built-in server on a free loopback port."""

    def __init__(self, config: str, **options: Any) -> None:
        self._gateway = Gateway(config)
        self.app: HttpFront = self._gateway.wsgi_app(**options)
        self._server = WsgiServer(self.app, "127.0.0.1", 0, name="test-gateway")
        self._server.start()
        self.url = self._server.url + "/mcp"
        self.port = int(self.url.rsplit(":", 1)[1].split("/")[0])

    def __enter__(self) -> Front:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self.app.close()
        self._server.close()
        self._gateway.close()


def post(port: int, body: dict[str, Any], headers: dict[str, str] | None = None,
         ) -> tuple[int, dict[str, str], Any]:
    """One POST on a fresh connection; an event-stream reply is read as its last event."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", "/mcp", json.dumps(body), {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream", **(headers or {})})
        response = conn.getresponse()
        raw = response.read().decode()
        if response.getheader("Content-Type", "").startswith("text/event-stream"):
            events = [line[5:] for line in raw.splitlines() if line.startswith("data:")]
            raw = [e for e in events if e.strip()][-1]
        return response.status, dict(response.getheaders()), json.loads(raw) if raw else None
    finally:
        conn.close()


class Command:
    """``mcpsync gateway --config FILE --http 127.0.0.1:0 ...``; ``url`` read from stderr."""

    def __init__(self, config: str, *extra: str, log: Path) -> None:
        self._log = open(log, "wb")   # noqa: SIM115 (closed in close())
        self.log = log
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mcpsync", "gateway", "--config", config, "--http",
             "127.0.0.1:0", *extra], stdin=subprocess.DEVNULL, stdout=self._log,
            stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            found = _SERVING.search(self.text())
            if found:
                self.url = found.group(1)
                self.port = int(self.url.rsplit(":", 1)[1].split("/")[0])
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        self.close()
        raise AssertionError(f"the gateway did not start serving HTTP:\n{self.text()}")

    def text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def __enter__(self) -> Command:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            code = self.proc.wait(20)
        finally:
            self._log.close()
        return code


def wait_for(predicate: Any, timeout: float = 15.0) -> bool:
    """Poll ``predicate()`` until it is true or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return bool(predicate())


def threads_named(prefix: str) -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(prefix)]
