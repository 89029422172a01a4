"""Shared pieces of the gateway tests: config files, a raw host on the command, children."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

PEERS = Path(__file__).with_name("peers")
ODD = [sys.executable, str(PEERS / "odd_server.py")]
GATEWAY = [sys.executable, "-m", "mcpsync", "gateway", "--config"]
#: The gateway command with msgspec made unimportable (``sys.modules`` holds ``None`` for
#: it), so its pass-through checks frames with the standard library's scanner.
GATEWAY_STDLIB = [sys.executable, "-c", "import runpy, sys; sys.modules['msgspec'] = None; "
                  "runpy.run_module('mcpsync', run_name='__main__', alter_sys=True)",
                  "gateway", "--config"]


def write_config(tmp_path: Path, servers: dict[str, list[str]]) -> str:
    """A Claude Desktop style config file with one entry per ``id: argv``."""
    doc = {"mcpServers": {sid: {"command": argv[0], "args": argv[1:]}
                          for sid, argv in servers.items()}}
    path = tmp_path / "gateway.json"
    path.write_text(json.dumps(doc))
    return str(path)


class RawHost:
    """The gateway command on pipes; the test writes and reads its lines as bytes."""

    def __init__(self, config: str, *options: str, stdlib_check: bool = False) -> None:
        command = GATEWAY_STDLIB if stdlib_check else GATEWAY
        self.proc = subprocess.Popen([*command, config, *options], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.stderr: list[bytes] = []
        self._drain = threading.Thread(target=self._read_err, name="test-gw-stderr",
                                       daemon=True)
        self._drain.start()

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)

    def send(self, line: bytes | str) -> None:
        assert self.proc.stdin is not None
        data = line.encode() if isinstance(line, str) else line
        self.proc.stdin.write(data + b"\n")
        self.proc.stdin.flush()

    def recv(self) -> bytes:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"the gateway closed its output; stderr: {b''.join(self.stderr)!r}"
        return line.rstrip(b"\n")

    def call(self, line: str) -> Any:
        self.send(line)
        return json.loads(self.recv())

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        code = self.proc.wait(15)
        assert self.proc.stdout is not None
        rest = self.proc.stdout.read()
        self.proc.stdout.close()
        self._drain.join(5)
        assert self.proc.stderr is not None
        self.proc.stderr.close()
        assert rest == b"", f"the gateway wrote more than MCP on stdout: {rest!r}"
        return code


@pytest.fixture
def raw_host(tmp_path: Path) -> Iterator[RawHost]:
    host = RawHost(write_config(tmp_path, {"odd": ODD}))
    try:
        yield host
    finally:
        if host.proc.poll() is None:
            host.close()


def child_pids(pid: int) -> list[int]:
    """The direct children of process ``pid`` (Linux /proc)."""
    out: list[int] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(p) for p in f.read().split()]
        except FileNotFoundError:   # a thread that ended since the listing
            continue
    return out
