"""``benchmarks/stdio_instructions.py --client minimal`` and ``minimal-prebuilt``: the
minimal single-threaded client whose instructions per call the benchmark counts beside the
floor's and mcpsync's (docs/performance.md, "What a minimal client costs"). Counting needs
valgrind; here the loop runs natively (the ``--child`` mode the counted runs use), against
a stdlib-only peer, so that the mode keeps working as the serializer it borrows changes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "stdio_instructions.py"
PEER = ROOT / "tests" / "peers" / "wire_server.py"

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("client", ["minimal", "minimal-prebuilt"])
def test_the_minimal_client_calls_and_checks_its_answers(client: str) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--child", "25", "--echo", str(PEER),
                           "--client", client, "--text", "hi \\u00e9"],
                          capture_output=True, text=True, timeout=50, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    # The peer logs each call it got on stderr: the warm-up's 20 and the 25 counted.
    assert done.stderr.count("got tools/call echo") == 45, done.stderr[-500:]
