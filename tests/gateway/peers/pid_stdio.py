"""The pid server (tools that name the process answering) over stdio, for the gateway's
replica tests: behind a gateway worker, its pid tells which worker served a request."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from server.peers_http.pid_server import build

if __name__ == "__main__":
    build().run()
