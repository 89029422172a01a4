"""``benchmarks/stdio_instructions.py --client minimal`` and ``minimal-prebuilt``: the
minimal single-threaded client whose instructions per call the benchmark counts beside the
floor's and mcpsync's (docs/performance.md, "What a minimal client costs"). Counting needs
valgrind; here the loop runs natively (the ``--child`` mode the counted runs use) against a
peer written below, so that the mode keeps working and stays correct: before each answer
the peer sends a notification and an answer to another id, on odd ids in one write (so
several lines arrive in one read) and on even ids one line per write. A client that took
the first line, or any answer, for its own would get the wrong text and fail."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "stdio_instructions.py"

pytestmark = pytest.mark.timeout(60)

PEER = r'''
import json, os, sys

def line(msg):
    return (json.dumps(msg) + "\n").encode()

for raw in sys.stdin.buffer:
    msg = json.loads(raw)
    rid, method = msg.get("id"), msg.get("method")
    if method == "initialize":
        out = [line({"jsonrpc": "2.0", "id": rid, "result": {
            "protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
            "serverInfo": {"name": "noisy", "version": "1"}}})]
    elif method == "tools/call":
        text = msg["params"]["arguments"]["text"]
        sys.stderr.write("call %s\n" % rid)
        out = [line({"jsonrpc": "2.0", "method": "notifications/message",
                     "params": {"level": "info", "data": "before %s" % rid}}),
               line({"jsonrpc": "2.0", "id": rid + 1000,
                     "result": {"content": [{"type": "text", "text": "not yours"}]}}),
               line({"jsonrpc": "2.0", "id": rid,
                     "result": {"content": [{"type": "text", "text": text}]}})]
        if rid % 2:
            out = [b"".join(out)]
    else:
        continue
    for chunk in out:
        os.write(1, chunk)
'''


@pytest.mark.parametrize("client", ["minimal", "minimal-prebuilt"])
def test_the_minimal_client_finds_its_own_answers(client: str, tmp_path: Path) -> None:
    peer = tmp_path / "noisy_server.py"
    peer.write_text(PEER, encoding="utf-8")
    done = subprocess.run([sys.executable, str(SCRIPT), "--child", "25", "--echo", str(peer),
                           "--client", client, "--text", "hi \u00e9"],
                          capture_output=True, text=True, timeout=50, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    # The warm-up's 20 calls and the 25 counted, each answered among the noise.
    assert done.stderr.count("call ") == 45, done.stderr[-500:]
