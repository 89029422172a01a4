"""A closed legacy-HTTP client holds no file descriptor, even while the object is kept.

The last GET stream's response used to keep its urllib3 pool, and every idle socket in it,
alive until garbage collection: about 3 fds per closed client that was still referenced.
Measured on ``/proc/self/fd`` against the official SDK's server in a subprocess (so every fd
of this process is the client's), and, against the in-process fault server, as client-side
sockets (those whose peer is the server's port).
"""

from __future__ import annotations

import gc
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from http_peers.fault_server import FaultServer
from http_peers.fixtures import OfficialServer

import mcpsync

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(sys.platform != "linux", reason="counts /proc/self/fd")]

CLIENTS = 20


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _socket_inodes_to(port: int) -> set[str]:
    """Inodes of this machine's TCP sockets whose remote port is ``port``."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not Path(table).exists():
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[2].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def _client_sockets(port: int) -> int:
    """This process's fds that are sockets connected to ``port``."""
    inodes = _socket_inodes_to(port)
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:[") and link[8:-1] in inodes:
            count += 1
    return count


def _settle(measure: Callable[[], int], target: int, seconds: float = 3.0) -> int:
    deadline = time.monotonic() + seconds
    value = measure()
    while value > target and time.monotonic() < deadline:
        time.sleep(0.05)
        value = measure()
    return value


def _use(url: str) -> mcpsync.Client:
    client = mcpsync.connect(url, era="legacy", timeout=10)
    assert client.call_tool("echo", {"text": "x"}).text == "x"
    return client


@pytest.mark.parametrize("official_http_server", ["sse-stateful"], indirect=True)
def test_closed_clients_kept_alive_hold_no_fd(official_http_server: OfficialServer) -> None:
    _use(official_http_server.url).close()      # imports and lazy state, before counting
    gc.collect()
    before = _fds()
    kept = []
    for _ in range(CLIENTS):
        client = _use(official_http_server.url)
        time.sleep(0.05)                         # the GET stream is open
        client.close()
        kept.append(client)
    left = _settle(_fds, before) - before
    assert left <= 0, f"{left} fds left by {CLIENTS} closed clients still referenced"
    assert all(c.closed for c in kept)


def test_no_client_socket_survives_close(fault_server: FaultServer) -> None:
    fault_server.faults.era = "legacy"
    port = int(fault_server.url.split(":")[2].split("/")[0])
    kept = []
    for i in range(CLIENTS):
        client = _use(fault_server.url)
        fault_server.wait_for_requests(lambda r: r.method == "GET", count=i + 1)
        assert _client_sockets(port) >= 2        # the GET stream and the POSTs' connection
        client.close()
        kept.append(client)
        assert _settle(lambda: _client_sockets(port), 0) == 0, f"client {i}"
    assert _client_sockets(port) == 0
